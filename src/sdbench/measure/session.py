"""A server session: one server instance of one configuration measures the due points of every
cell of that configuration assigned to its instance (sdbench.plan.sessions), then stops.

    run_session(session, cells, config, manifest)

A session starts its server once (or, for a proposer with state across requests, once per
point), and only when some point is due: a session whose cells are all cached, or unsupported
on this host, starts nothing. While the server starts, each due cell's prompts are checked
against the target's context with its own tokenizer. Each cell's first point in the session
gets the load generator's warm-up requests (the workload's own prompts), the server's first
point its readiness check; later points find the server warm.

A problem of one cell costs that cell only: a cell whose checks fail, whose point fails (the
server died: it is started again for the next cell) or is invalid is listed in the manifest as
not done, with why, and its own job then fails naming it, while the others finish. The
manifest's `retries` counts sessions that left a cell unfinished; it is a parameter of the
session's rule, so the next run measures those points again (and only those). An interrupted
session (SIGTERM at a time limit, Ctrl-C) writes no manifest: the next run resumes from the
point cache.

The manifest also holds the session's time split (start-up, measuring, the rest), which
`sdbench.report.timing` and `make plan` (the start-ups measured on this host) read. The server
and one point on it: sdbench.measure.server.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from sdbench import layout
from sdbench.files import atomic_write_json
from sdbench.measure import engine_cells, groups, loadgen, profiling, slots, stopping
from sdbench.measure.run import CellError, CellRun, now, prepare, signals_raise, write_error
from sdbench.measure.server import Clock, SessionServer, checked, fail
from sdbench.measure.serving import ServerError
from sdbench.plan import adaptive, checks, hostcaps, sessions, specs
from sdbench.plan.config import ConfigError
from sdbench.plan.sessions import Session, read_manifest, session_points
from sdbench.plan.settings import settings


def measure_plain(session: Session, runs: list[CellRun], held: slots.Slots, clock: Clock,
                  server_log: Path, failed: dict) -> None:
    """One server for every due cell (started again for the next cell if it died)."""
    server: SessionServer | None = None
    start_error: str | None = None
    try:
        for i, run in enumerate(runs):
            if start_error is not None:
                fail(run, failed, start_error)
                continue
            if server is None or not server.alive():
                if server is not None:
                    server.stop()
                server = SessionServer(run, session, held, server_log, clock)
                server.launch()
                # the checks of every cell still to come, while the server starts
                for later in runs[i:]:
                    if later.cell_id not in failed:
                        checked(later, failed, clock)
                try:
                    server.wait()
                except ServerError as exc:
                    start_error = f"{type(exc).__name__}: {exc}"
                    server.stop()
                    server = None
                    fail(run, failed, start_error)
                    continue
            if run.cell_id in failed:
                continue
            _measure_cell(server, run, failed)
    finally:
        if server is not None:
            server.stop()


def _measure_cell(server: SessionServer, run: CellRun, failed: dict) -> None:
    for pid in stopping.measuring_order(run, run.missing):
        if stopping.skipped(run, pid, now()):
            continue
        try:
            server.take(run, pid)
        except CellError as exc:  # a failed point: the server is gone
            fail(run, failed, str(exc))
            return


def measure_fresh(session: Session, runs: list[CellRun], held: slots.Slots, clock: Clock,
                  server_log: Path, failed: dict) -> None:
    """A fresh server for every point (a proposer with state across requests)."""
    for run in runs:
        checked(run, failed, clock)
        for pid in stopping.measuring_order(run, run.missing):
            if run.cell_id in failed:
                break
            if stopping.skipped(run, pid, now()):
                continue
            server = SessionServer(run, session, held, server_log, clock)
            try:
                server.launch()
                server.wait()
                _measure_cell_points(server, run, [pid], failed)
            except ServerError as exc:
                fail(run, failed, f"{type(exc).__name__}: {exc}")
            finally:
                server.stop()


def _measure_cell_points(server: SessionServer, run: CellRun, pids: list, failed: dict) -> None:
    saved, run.missing = run.missing, list(pids)
    try:
        _measure_cell(server, run, failed)
    finally:
        run.missing = [p for p in saved if p not in pids]


def run_session(session: Session, cells: dict[str, specs.Cell], config: dict,
                manifest: str | Path, *, log: TextIO | None = None,
                baseline_records: dict[str, str] | None = None,
                turns: tuple[list[specs.Cell], dict[str, list], dict] | None = None) -> dict:
    """Measure every due point of the session's cells (`cells`: those and every cell paired
    with the same baselines, `sessions.session_family`: a chained stage decides against its
    partners' and rivals' stages, a baseline keeps the repeats a cell outside its group reads;
    the study's grid is never built here), then write
    `manifest`: per cell, its points in the point cache (or its unsupported records), or why it
    is not done; and the session's time split. Returns the manifest. `turns`: the session is a
    turn of cells measured in turn (`sdbench.measure.cell.measure_in_turns`: those cells, the
    manifests of their turns so far and the instances where each one's turn follows the
    static k's), which stop under the rule against each other (`stopping.turn_stops`)."""
    log = log or sys.stderr
    clock = Clock()
    runs: list[CellRun] = []
    failed: dict[str, str] = {}
    def logs(cell_id: str) -> dict:
        return {"log": layout.SESSION_LOG.format(session_id=session.session_id),
                "server_log": layout.session_server_log(
                    session.session_id, cells[cell_id].config_id),
                "session": session.session_id}

    try:
        with signals_raise():
            with clock.timed("asking vLLM about the checkpoints"):
                _read_checkpoints(session, config)
            with clock.timed("preparing cells"):
                for cell_id in session.cells:
                    cell = cells[cell_id]
                    try:
                        run = prepare(cell, config, session.instance,
                                      session_points(session, cell), log=log,
                                      baseline_records=(baseline_records or {}).get(cell_id))
                        if run.missing and not run.unsupported and turns is not None:
                            if (rule := adaptive.cell_rule(config, cell)) is not None:
                                run.adaptive = rule.to_dict()
                                run.stops = stopping.turn_stops(rule, run, *turns)
                                stopping.settle(run, now())
                        elif run.missing and not run.unsupported and cell.chain:
                            _chained(run, config, cells, session.instance)
                            stopping.settle(run, now())
                        elif run.missing and not run.unsupported:
                            _alone_under_rule(run, config, baseline_records)
                    except (CellError, ConfigError, OSError, ValueError) as exc:
                        failed[cell_id] = f"{type(exc).__name__}: {exc}"
                        print(f"[sdbench] cell {cell_id}: not done: {failed[cell_id]}",
                              file=log, flush=True)
                        continue
                    runs.append(run)
                    if run.missing and run.unsupported:
                        run.record_unsupported()
            due = [r for r in runs if r.missing]
            if due:
                for run in due:
                    try:
                        checks.check_cell_tools(run.cell, source=f"cell {run.cell_id}")
                    except (ConfigError, profiling.ProfileError) as exc:
                        fail(run, failed, f"{type(exc).__name__}: {exc}")
                due = [r for r in due if r.cell_id not in failed]
            if due:
                # overlaps the first server's start-up; joined before the session ends (not
                # when it is interrupted: a signal's exit does not wait), so that no import runs
                # on in the background of whatever the process does next
                importer = loadgen.preload()
                try:
                    gpus = [specs.cell_gpus(cells[c].server_config) for c in
                            _first_cells(session, cells)]
                    with slots.held(sum(gpus) if session.interleaved else gpus[0],
                                    label=f"session {session.session_id}",
                                    timeout_s=settings(config).cells.slot_timeout_s) as held:
                        print(f"[sdbench] session {session.session_id}: {held.reason}", file=log,
                              flush=True)
                        _check_leftovers(held)
                        if session.engine != specs.SERVE:
                            engine_cells.measure_engine(session, due, held, clock, failed)
                        elif session.interleaved:
                            # every run of the session: a group measures again, for all its
                            # cells, the points any of them misses (its baseline too)
                            groups.measure_group(session, cells,
                                                 [r for r in runs if r.cell_id not in failed],
                                                 held, clock, failed, config)
                        elif session.fresh_per_point:
                            measure_fresh(session, due, held, clock,
                                          layout.session_server_log(session.session_id,
                                                                    session.lead), failed)
                        else:
                            measure_plain(session, due, held, clock,
                                          layout.session_server_log(session.session_id,
                                                                    session.lead), failed)
                except Exception:
                    importer.join()
                    raise
                importer.join()
    except BaseException as exc:
        message = f"{type(exc).__name__}: {exc}"
        for cell_id in session.cells:
            if cell_id not in failed:
                write_error(cells[cell_id], message, **logs(cell_id))
        raise
    for run in runs:
        why = failed.get(run.cell_id) or run.not_done()
        if why:
            failed[run.cell_id] = why
    for cell_id, why in failed.items():
        write_error(cells[cell_id], why, **logs(cell_id))
    for run in runs:  # what an earlier, stopped session said of a cell now done
        if run.cell_id not in failed:
            layout.error_output(layout.cell_output(run.cell_id)).unlink(missing_ok=True)
    previous = read_manifest(manifest)
    retries = (previous or {}).get("retries", 0) + (1 if failed else 0)
    entries = {run.cell_id: _entry(run) for run in runs if run.cell_id not in failed}
    body = {"session": session.session_id, "instance": session.instance,
            "configs": list(session.configs), "cells": entries,
            "not_done": failed, "retries": retries, "timing": clock.split()}
    atomic_write_json(manifest, body)
    split = body["timing"]
    print(f"[sdbench] session {session.session_id}: {len(entries)} of {len(session.cells)} "
          f"cells done; {split['servers']} server start(s), start-up {split['startup_s']:.1f} s, "
          f"measuring {split['measuring_s']:.1f} s, the rest {split['rest_s']:.1f} s "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in split['phases'].items())})", file=log,
          flush=True)
    return body


def _alone_under_rule(run: CellRun, config: dict,
                      baseline_records: dict[str, str] | None) -> None:
    """A speculative cell measured on its own under the adaptive rule stops against its
    baseline cell's finished records (`adaptive.reads_baseline`; the workflow measures them
    first). Without them (a cell run by hand first) every repeat is measured, as it says."""
    if not adaptive.reads_baseline(config, run.cell):  # (no rule, or interleaved, ...)
        return
    rule = adaptive.cell_rule(config, run.cell)
    path = (baseline_records or {}).get(run.cell_id) or layout.cell_output(
        run.cell.baseline_cell_id)
    if not Path(path).is_file():  # a cell run by hand before its baseline: all its repeats
        run.say(f": no records of its baseline cell {run.cell.baseline_cell_id} ({path}) to "
                "stop against: every repeat is measured (the adaptive rule needs them first)")
        return
    run.adaptive = rule.to_dict()
    run.stops = stopping.GroupStops(rule, stopping.RecordedBaseline(path), [run])


def _chained(run: CellRun, config: dict, cells: dict[str, specs.Cell], stage: int) -> None:
    """A chained cell's stage (`specs.Cell.chain`) under the rule: a speculative cell stops
    against its baseline's stages up to this one, with its own earlier stages' points as its
    looks so far, in the group of the chained cells paired with that baseline (σ pooled with
    theirs and the race among its speculator's settings as they stood at the whole repeat's
    first block, but for its rivals that measure this stage before it, `sessions.chain_rivals`,
    as far as this stage: `GroupStops._look`); a baseline measures a whole repeat of this
    stage only where one of them goes on at its first block (recomputed from their stages
    before), or
    where a cell outside the chain needs it (`groups.paired_elsewhere`: it reads the finished
    records)."""
    rule = adaptive.cell_rule(config, run.cell)
    if rule is None:
        return
    cell = run.cell
    earlier, own_missing = stopping.stage_points(cell, range(stage))
    mine = stopping.ChainRun(cell, earlier, run)
    if cell.is_baseline:
        partners = [stopping.ChainRun(c, stopping.stage_points(c, range(stage))[0])
                    for c in sessions.chain_partners(cell, cells)]
        keep = groups.paired_elsewhere(mine, [mine, *partners], cells, config)
        run.stops = stopping.GroupStops(rule, mine, partners, keep=keep, chained=True)
    else:
        base = cells[cell.baseline_cell_id]
        # its decisions need every stage before it and its baseline's up to this one
        found, base_missing = stopping.stage_points(base, range(stage + 1))
        missing = ([f"its baseline cell {base.cell_id}'s stage {s}" for s in base_missing]
                   + [f"its own stage {s}" for s in own_missing])
        # the group: every chained cell paired with that baseline, as of its stages before,
        # and the rivals that measure this stage before it (`sessions.chain_rivals`) with it
        before = {c.cell_id for c in sessions.chain_rivals(cell, cells)}
        others = []
        for other in sessions.chain_partners(base, cells):
            if other.cell_id == cell.cell_id:
                continue
            points, not_done = stopping.stage_points(
                other, range(stage + 1 if other.cell_id in before else stage))
            if other.cell_id in before and stage in not_done:
                missing.append(f"its rival cell {other.cell_id}'s stage {stage}")
            others.append(stopping.ChainRun(other, points))
        if missing:
            raise CellError(f"cell {cell.cell_id} ({cell.label}), stage {stage} of its chain: "
                            f"{', '.join(missing)} not done (adaptive.chain: run those "
                            "sessions first; snakemake runs them in order)")
        lead = stopping.ChainRun(base, found)
        run.stops = stopping.GroupStops(rule, lead, [mine, *others], chained=True)
    run.adaptive = rule.to_dict()


def _read_checkpoints(session: Session, config: dict) -> None:
    """vLLM's reading of the quantized checkpoints of every model of the config that this host
    can run (`hostcaps.model_reason`, `quantized_dirs`; `model_facts` skips those not built
    yet), asked once (one child process that imports vLLM, for those it has not read on this
    host before): each cell's host verdict, in this session and the later ones, then finds it
    cached. Asked per session's own cells, each session of quantized targets paid for
    importing vLLM again (three sessions of 14-22 s each in the demo on a 2-core Xeon
    guest)."""
    try:
        caps = hostcaps.host_caps()
    except hostcaps.ProbeError:
        return  # (each cell's verdict says so)
    names = {name for name in config["models"]
             if hostcaps.model_reason(name, hostcaps.checkpoint_quantization(config, name),
                                      None, caps) is None}
    try:
        # (model_facts skips a checkpoint not built yet)
        hostcaps.model_facts(sorted(hostcaps.quantized_dirs(config, sorted(names))))
    except hostcaps.ProbeError as exc:  # each cell's verdict says so again
        print(f"[sdbench] session {session.session_id}: {exc}", file=sys.stderr, flush=True)


def _first_cells(session: Session, cells: dict[str, specs.Cell]) -> list[str]:
    """One cell of each of the session's configurations, in the session's order."""
    seen, out = set(), []
    for cell_id in session.cells:
        cid = cells[cell_id].config_id
        if cid not in seen:
            seen.add(cid)
            out.append(cell_id)
    return out


def _check_leftovers(held: slots.Slots) -> None:
    leftovers = checks.leftover_vllm_processes(checks.gpu_processes(held.monitor_ids))
    if leftovers:
        raise CellError(
            "vLLM processes of an earlier run still hold the GPU: "
            + "; ".join(f"pid {p['pid']} on GPU {p['gpu']} ({p['cmdline'][:120]})"
                        for p in leftovers)
            + ". Stop them (kill <pid>) before measuring; they would skew or crash "
            "this session.")


def _entry(run: CellRun) -> dict:
    """A finished cell's points in this session: the cache file of each valid point, the
    record of each unsupported one."""
    points = []
    for pid, (load, repeat) in run.plan.items():
        point = run.points[pid]
        entry = {"load": load, "repeat": repeat}
        if point["record"]["status"] == "ok":
            entry["file"] = str(run.paths[pid])
        else:
            entry["record"] = point["record"]
        points.append(entry)
    return {"label": run.cell.label, "points": points}
