"""A cell's own job and the command line.

A cell's points are measured by the sessions of its configuration (sdbench.measure.session:
one per server instance); its own job then writes its records from the sessions' manifests
(`assemble`): every point of every repeat in order, with the per-request detail beside them.
A cell a session could not finish fails here with why (the session's manifest says), and
leaves `<cell>.error.json` and the `.partial` records of the points it has, never a file that
looks complete.

Run a cell, or one session, without Snakemake:

    python -m sdbench.measure.cell --config config/demo.yaml --list
    python -m sdbench.measure.cell --config config/demo.yaml --cell <cell id>
    python -m sdbench.measure.cell --config config/demo.yaml --session <session id>

`--cell` measures that cell alone (its configuration's servers, one per instance, serve only
it; a cell measured in turn with its baseline runs with it and the baseline's other turns at
its workload) and writes its records; `--session` runs one whole session, as Snakemake would.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from sdbench import layout
from sdbench.files import atomic_path, write_jsonl
from sdbench.measure import profiling
from sdbench.measure.points import read_point
from sdbench.measure.run import CellError, Interrupted, write_error
from sdbench.measure.serving import ServerError
from sdbench.measure.session import run_session
from sdbench.plan import adaptive, checks, design_choice, dynamic_k, grid, sessions, specs
from sdbench.plan.config import ConfigError, load_config
from sdbench.plan.sessions import read_manifest
from sdbench.records import LoadPoint


class NotDone(CellError):
    """A session could not finish the cell (its manifest says why)."""


def assemble(cell: specs.Cell, manifests: list[str | Path], output: str | Path, *,
             log: TextIO | None = None) -> list[dict]:
    """Write the cell's records (and request detail) from its sessions' manifests; raise
    CellError naming what is missing when a session did not finish the cell."""
    return assemble_cells([cell], {cell.cell_id: manifests}, output, log=log)


def assemble_cells(cells: list[specs.Cell], manifests: dict[str, list[str | Path]],
                   output: str | Path, *, log: TextIO | None = None) -> list[dict]:
    """Write the records (and request detail) of these cells, in order, into one file from
    their sessions' manifests (cell id -> its manifests); raise CellError naming what is
    missing when a session did not finish a cell."""
    log = log or sys.stderr
    try:
        points = [point for cell in cells
                  for point in _points(cell, manifests[cell.cell_id])]
        records = _write(points, output)
    except NotDone:  # its session wrote why, with its logs
        raise
    except BaseException as exc:
        if not isinstance(exc, CellError):
            exc = CellError(f"{type(exc).__name__}: {exc}")
        write_error(cells[-1], str(exc), log=layout.cell_log(output))
        raise exc from None
    for cell in cells:
        print(f"[sdbench] cell {cell.cell_id} ({cell.label}): "
              f"{sum(r['cell_id'] == cell.cell_id for r in records)} records from "
              f"{len(manifests[cell.cell_id])} session(s) -> {output}", file=log, flush=True)
    return records


def _points(cell: specs.Cell, manifests: list[str | Path]) -> list[dict]:
    """The cell's points ({record, detail}) from its sessions' manifests, in plan order."""
    found: dict[tuple, dict] = {}
    for path in manifests:
        manifest = read_manifest(path)
        if manifest is None:
            raise CellError(f"cell {cell.cell_id} ({cell.label}): its session manifest {path} "
                            "cannot be read; run its session again (delete the file)")
        if cell.cell_id in manifest.get("not_done", {}):
            raise NotDone(manifest["not_done"][cell.cell_id])
        for entry in manifest["cells"].get(cell.cell_id, {}).get("points", []):
            pid = LoadPoint.of_load(entry["load"], entry["repeat"]).order
            if "record" in entry:
                found[pid] = {"record": entry["record"], "detail": None}
            elif (point := read_point(entry["file"])) is not None:
                found[pid] = point
    plan = sorted(LoadPoint.of_load(load, r).order for load in cell.load_points()
                  for r in cell.load_repeats(load))
    missing = [pid for pid in plan if pid not in found]
    if missing:
        raise CellError(
            f"cell {cell.cell_id} ({cell.label}): {len(missing)} of {len(plan)} points are not "
            f"in its sessions' point cache ({', '.join(map(str, manifests))}): "
            f"{missing[:6]}{' ...' if len(missing) > 6 else ''}. Run its sessions again "
            f"(snakemake --forcerun session, or delete those files)")
    return [found[pid] for pid in plan]


def _write(points: list[dict], output: str | Path) -> list[dict]:
    """The records of `points` into `output`, their request detail beside it."""
    with atomic_path(layout.requests_output(output)) as tmp, \
            gzip.open(tmp, "wt", encoding="utf-8") as fh:
        for point in points:
            record = point["record"]
            if point["detail"] is None:  # unsupported here: nothing was sent
                continue
            fh.write(json.dumps({"cell_id": record["cell_id"],
                                 "concurrency": record["concurrency"],
                                 "request_rate": record.get("request_rate"),
                                 "repeat": record["repeat"], **point["detail"]}) + "\n")
    records = [point["record"] for point in points]
    write_jsonl(output, records)
    layout.partial_output(output).unlink(missing_ok=True)
    layout.error_output(output).unlink(missing_ok=True)
    return records


def alone(cell: specs.Cell, cells: dict[str, specs.Cell] | None = None
          ) -> tuple[list[sessions.Session], dict[str, specs.Cell]]:
    """The sessions that measure `cell` on its own, and the cells they serve: its
    configuration's instances with it alone, or for a cell measured in turn with its baseline,
    the group's instances with the baseline's cells of its workload. A chained cell
    (`adaptive.chain`) is measured alone unchained: its stages read the workflow's sessions of
    its chain (`--session` runs one of them)."""
    if cell.chain:
        cell = replace(cell, chain=())
    if not cell.group or cells is None:
        return list(sessions.standalone(cell).values()), {cell.cell_id: cell}
    lead = cells[cell.group[0]]
    turn = {c: cells[c] for c in cell.group}
    planned = sessions.plan_sessions(cells)
    return [planned[sid].only(turn) for sid in sessions.cell_sessions(lead, cells)], turn


def measure_cell(cell: specs.Cell, config: dict, output: str | Path, *,
                 cells: dict[str, specs.Cell] | None = None, log: TextIO | None = None,
                 baseline_records: str | Path | None = None) -> list[dict]:
    """Measure one cell without Snakemake's sessions (a derived dynamic-K cell's job, the
    command line): its sessions serve it alone, then its records are written."""
    runs, served = alone(cell, cells)
    cell = served.get(cell.cell_id, cell)  # (a chained cell: as measured, unchained)
    manifests = []
    for session in runs:
        manifest = layout.standalone_session_output(cell.cell_id, session.instance)
        run_session(session, served, config, manifest, log=log,
                    baseline_records={cell.cell_id: str(baseline_records)}
                    if baseline_records else None)
        manifests.append(manifest)
    for other in served.values():  # the cells that took turns with it, as far as they got
        if other.cell_id != cell.cell_id and all(
                other.cell_id in (read_manifest(m) or {}).get("cells", {}) for m in manifests):
            assemble(other, manifests, layout.cell_output(other.cell_id), log=log)
    return assemble(cell, manifests, output, log=log)


def measure_in_turns(cells: list[specs.Cell], config: dict, output: str | Path, *,
                     log: TextIO | None = None) -> list[dict]:
    """Measure cells compared with each other (a derived dynamic-K schedule, its static k, that
    k as a constant schedule), each on its own servers, taking turns by server instance
    (`dynamic_k.turn_order`): repeat r of every cell is measured by instance r mod n, minutes
    apart, so their ratios pair repeats measured close in time (one GPU holds one server at a
    time).
    Under the adaptive rule (the config's `adaptive:`) each runner's cells stop against their
    static k (`stopping.turn_stops`): before a repeat, the schedule's and the constant
    schedule's levels whose ratio to the static k is settled, precise or out of reach stop,
    and the static k stops where both have; a turn with nothing due starts no server. Every
    level is measured (no bisection: a level's neighbours are not decided when its turn
    comes). A derived schedule measured without its static k (`dynamic_k[].split: false`) has
    nothing to stop against here, and cells whose turns do not give their repeats in order
    (`dynamic_k.stops_in_turn`: more than one server instance, fewer than repeats) no sequence to
    stop on: every repeat of them is measured. Their records go, in order,
    into `output` with their request detail."""
    manifests: dict[str, list[str]] = {cell.cell_id: [] for cell in cells}
    inside = {cell.cell_id: dynamic_k.after_lead(cells, cell) for cell in cells}
    for cell, instance in dynamic_k.turn_order(cells):
        session = sessions.standalone(cell)[sessions.session_id(
            cell.config_id, instance)]
        manifest = layout.standalone_session_output(cell.cell_id, instance)
        group = dynamic_k.turn_group(cells, cell)
        paired = any(c.speculator.endswith(dynamic_k.STATIC_ARM) for c in group) and (
            dynamic_k.stops_in_turn(group))
        run_session(session, {cell.cell_id: cell}, in_turns(config, paired), manifest, log=log,
                    turns=(group, {c.cell_id: list(manifests[c.cell_id]) for c in group},
                           {c.cell_id: inside[c.cell_id] for c in group})
                    if paired else None)
        manifests[cell.cell_id].append(manifest)
    return assemble_cells(cells, manifests, output, log=log)


def in_turns(config: dict, paired: bool) -> dict:
    """The config as cells measured in turn read it: the adaptive rule (where it is on)
    without bisection; none for cells without a static k to stop against (`paired` False)."""
    section = config.get("adaptive") or {}
    if not paired:
        return {**config, "adaptive": {**section, "enabled": False}}
    if adaptive.Rule.from_config(section) is None:
        return config
    return {**config, "adaptive": {**section, "bisect": False}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.measure.cell", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="workflow config (YAML)")
    parser.add_argument("--cell", help="cell id to measure alone (see --list)")
    parser.add_argument("--session", help="session id to run (see --list)")
    parser.add_argument("--list", action="store_true", help="list the cells and sessions")
    parser.add_argument("--output", help="records file (default results/cells/<id>.jsonl)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        # the design the workflow runs (`adaptive.chain: auto`)
        design_choice.resolve_design(config)
        cells = grid.cells_by_id(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    planned = sessions.plan_sessions(cells)
    if args.list or not (args.cell or args.session):
        for cell in cells.values():
            print(f"{cell.cell_id}  {cell.label}  (sessions "
                  f"{', '.join(sessions.cell_sessions(cell, cells))})")
        for session in planned.values():
            print(f"session {session.session_id}: {len(session.cells)} cells, "
                  f"{sessions.starts(session, cells)} start(s)")
        return 0
    if args.cell and args.cell not in cells:
        parser.error(f"no cell {args.cell!r} in {args.config} (use --list)")
    if args.session and args.session not in planned:
        parser.error(f"no session {args.session!r} in {args.config} (use --list)")
    try:
        checks.check_installed(config, source=args.config)
        if args.session:
            output = layout.session_output(args.session)
            manifest = run_session(planned[args.session], cells, config, output)
            if manifest["not_done"]:
                for why in manifest["not_done"].values():
                    print(f"error: {why.splitlines()[0]}", file=sys.stderr)
                return 1
        else:
            output = args.output or layout.cell_output(args.cell)
            measure_cell(cells[args.cell], config, output, cells=cells)
    except (CellError, ServerError, ConfigError, profiling.ProfileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 130
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
