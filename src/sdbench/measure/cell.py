"""Run one cell: one vLLM server, the concurrency sweep, one record per point.

Records are appended to `<output>.partial` as each point finishes and the file is renamed onto
`<output>` only when every point succeeded, so a failed or interrupted cell never leaves an
output that looks complete. The server's whole process group is stopped whatever happens,
SIGTERM/SIGINT to this process included.

Only valid points are done: a point is cached (results/points/) only when it is "ok", and a cell
with a failed or invalid point does not finish (its records stay in `.partial`, the error file
says which points and why), so a rerun measures exactly those points again. A cell this host
cannot run (see sdbench.plan.hostcaps) writes "unsupported" records with the reason and measures
nothing.

Run one cell without Snakemake:

    python -m sdbench.measure.cell --config config/demo.yaml --list
    python -m sdbench.measure.cell --config config/demo.yaml --cell <cell_id>
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sdbench import layout
from sdbench.files import (
    append_jsonl,
    atomic_path,
    atomic_write_json,
    sha256_file,
    write_jsonl,
)
from sdbench.ids import short_hash
from sdbench.layout import error_output, partial_output, point_cache, requests_output
from sdbench.logcause import error_cause, first_line
from sdbench.measure import engines, gpumon, loadgen, profiling, provenance, slots
from sdbench.measure.serving import ServerError, VllmServer, log_tail, server_command
from sdbench.models import checkpoints as models
from sdbench.plan import checks, grid, hostcaps
from sdbench.plan.config import REPO_ROOT, VANILLA, ConfigError, load_config
from sdbench.plan.hostcaps import UNSUPPORTED
from sdbench.records import LoadPoint, Record, read_records


class CellError(RuntimeError):
    """The cell could not complete; the message says which point and why."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT received: unwind (stopping the server) and exit."""


def _now(timestamp: float | None = None) -> str:
    """Now (or a Unix timestamp) as an ISO time in UTC."""
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds")


def write_error(path: Path, cell: grid.Cell, message: str, server_log: str | Path,
                **extra) -> None:
    """Why a cell did not finish, for the index and the reports."""
    atomic_write_json(path, {"cell_id": cell.cell_id, "label": cell.label,
                             "error": first_line(message), "detail": message,
                             "server_log": str(server_log), **extra, "at": _now()})


def speculative_config(cell: grid.Cell, config: dict) -> dict | None:
    server = cell.server_config
    if server["method"] == VANILLA:
        return None
    spec = {"method": server["method"], "num_speculative_tokens": server["num_speculative_tokens"],
            **server["method_options"]}
    if server["draft"] is not None:
        spec["model"] = grid.model_dir(config, server["draft"]["name"])
    return spec


def point_status(metrics: dict, error: str | None, max_failure_share: float) -> tuple[str, str]:
    """("ok" | "invalid" | "failed", reason). A point is failed when it could not be measured,
    invalid when more than `max_failure_share` of its requests failed (it is kept in the records
    and shown in the reports, but no speedup is computed from it)."""
    if error is not None:
        return "failed", error
    completed, failed = metrics.get("completed") or 0, metrics.get("failed") or 0
    share = failed / (completed + failed) if completed + failed else 1.0
    metrics["failure_share"] = share
    if share > max_failure_share:
        return "invalid", (f"{failed} of {completed + failed} requests failed ({share:.1%} > "
                           f"max_failure_share {max_failure_share:.1%})")
    return "ok", ""


def check_workload(cell: grid.Cell) -> int | None:
    """Check the prompt file can serve the workload; return its forced output length if any."""
    path = cell.workload["path"]
    if not Path(path).is_file():
        raise CellError(f"workload {cell.workload['name']!r}: prompt file {path} does not exist")
    try:
        available, min_tokens = loadgen.prompt_file_facts(path)
    except ValueError as exc:
        raise CellError(f"workload {cell.workload['name']!r}: {exc}; rebuild it (delete the "
                        "file and rerun the workflow)") from exc
    if available < cell.workload["num_prompts"]:
        raise CellError(
            f"workloads.{cell.workload['name']}.num_prompts = {cell.workload['num_prompts']}: "
            f"{path} has only {available} prompts (prompts are never repeated to fill a point)")
    if len(min_tokens) > 1:
        raise CellError(f"{path}: prompts force different output lengths "
                        f"{sorted(min_tokens, key=str)}; the load generator forces one per point")
    return min_tokens.pop()


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into an exception so `finally` blocks stop the server."""
    def handler(signum, _frame):
        raise Interrupted(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_cell(cell: grid.Cell, config: dict, output: str | Path, *,
             server_log: str | Path, log=None,
             baseline_records: str | Path | None = None) -> list[dict]:
    """Measure every concurrency point of `cell`; write records to `output` (JSONL).

    On failure or interruption, `<cell>.error.json` says why and `<output>.partial` keeps the
    points measured so far; neither looks like a finished output."""
    error_file = error_output(output)
    error_file.unlink(missing_ok=True)
    try:
        return _run_cell(cell, config, output, server_log=server_log, log=log,
                         baseline_records=baseline_records)
    except BaseException as exc:
        message = f"{type(exc).__name__}: {exc}"
        write_error(error_file, cell, message, server_log)
        raise


def repeat_seed(cell: grid.Cell, repeat: int) -> int:
    """Each repeat its own seed (prompt order, arrival times, sampling), so that the interval
    over repeats covers them."""
    return int(cell.workload["loadgen"]["seed"]) + repeat


def server_instance(cell: grid.Cell, repeat: int) -> int:
    """Which fresh server measures a repeat: `loadgen.server_instances` servers take the repeats
    in turn (repeat r in instance r mod n), so that the interval also covers what differs
    between two starts of one configuration."""
    return repeat % max(int(cell.workload["loadgen"].get("server_instances") or 1), 1)


def point_facts(cell: grid.Cell, config: dict, prompts_sha256: str, min_tokens: int | None,
                environment: dict, dtype: str | None) -> dict:
    """What, besides the cell's definition, determines its measurements here: the prompt
    file's bytes, the forced output length, the vLLM build, the resolved dtype, every
    checkpoint's fingerprint (a re-downloaded or rebuilt model is another model), and for
    Transformers cells the transformers and torch versions."""
    facts = {"prompts_sha256": prompts_sha256, "min_tokens": min_tokens,
             "vllm": environment["vllm"],
             "checkpoints": {role: models.checkpoint_fingerprint(grid.model_dir(config, name))
                             for role, name in zip(("target", "draft"), grid.cell_models(cell),
                                                   strict=False)}}
    if cell.server_config["args"].get("dtype") == "host":
        facts["dtype"] = dtype
    if cell.engine == grid.TRANSFORMERS:
        facts["libraries"] = {"transformers": environment.get("transformers"),
                              "torch": environment.get("torch")}
    return facts


def point_key(cell: grid.Cell, load: dict, repeat: int, facts: dict) -> str:
    """Content hash of everything that determines one measurement: the server config, the
    workload without reporting-only settings (`grid.workload_identity`), the point, its seed,
    its server instance and `point_facts`. A cached measurement is reused only under the same
    key; changing how results are reported keeps every key."""
    fields = {"server_config": cell.server_config,
              "workload": grid.workload_identity(cell.workload),
              "concurrency": load.get("concurrency"), "repeat": repeat,
              "seed": repeat_seed(cell, repeat), "instance": server_instance(cell, repeat),
              **facts}
    if load["mode"] == "rate":
        fields["load"] = load
    if cell.profile:
        fields["profile"] = cell.profile
    if cell.group:  # measured in turn with the other cells of its group, their servers up
        fields["interleaved"] = True
    return short_hash(fields, length=16)


def point_path(cell_id: str, load: dict, repeat: int, key: str) -> Path:
    name = LoadPoint.of_load(load, repeat).name
    return point_cache(cell_id) / f"{name}-r{repeat}-{key}.json.gz"


def read_point(path: Path) -> dict | None:
    """A cached measurement, or None when it is not a valid one (an older cache may hold
    invalid points; an unreadable file is measured again)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            point = json.load(fh)
    except (OSError, EOFError, ValueError):
        return None
    return point if point.get("record", {}).get("status") == "ok" else None


def write_point(path: Path, record: dict, detail: dict) -> None:
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump({"record": record, "detail": detail}, fh)


@dataclass
class Prepared:
    """One cell before measuring: its plan (point id -> (load, repeat)), the cache path of
    every point, the points found there, those still to measure, and the measuring context."""

    cell: grid.Cell
    output: Path
    plan: dict
    paths: dict
    points: dict
    missing: list
    context: dict


def _prepare(cell: grid.Cell, config: dict, output: str | Path, *, server_log: str | Path,
             log=None, baseline_records: str | Path | None = None) -> Prepared:
    output = Path(output)
    partial = partial_output(output)
    partial.unlink(missing_ok=True)

    min_tokens = check_workload(cell)
    for name in grid.cell_models(cell):
        checks.check_quantization(config, name, source=f"cell {cell.cell_id}")
    checks.check_vocab(config, cell, features=checks.vllm_features(),
                       source=f"cell {cell.cell_id}")
    log = log or sys.stderr
    verdict = hostcaps.cell_verdict(config, cell)
    environment = {**provenance.environment(str(REPO_ROOT)),  # the workflow's own checkout
                   "host": verdict["host"], "dtype": verdict["dtype"]}
    prompts_sha256 = sha256_file(cell.workload["path"])

    # repeats interleaved: every load point once, then again
    plan = {LoadPoint.of_load(load, r).order: (load, r) for r in range(cell.repeats)
            for load in cell.load_points()}
    facts = point_facts(cell, config, prompts_sha256, min_tokens, environment,
                        verdict["dtype"]["resolved"])
    paths = {pid: point_path(cell.cell_id, load, r, point_key(cell, load, r, facts))
             for pid, (load, r) in plan.items()}
    points = {pid: point for pid, path in paths.items()
              if path.exists() and (point := read_point(path)) is not None}
    missing = [pid for pid in plan if pid not in points]
    print(f"[sdbench] cell {cell.cell_id} ({cell.label}): {len(points)} of {len(plan)} points "
          f"cached, measuring {len(missing)}: {missing}; dtype "
          f"{verdict['dtype']['resolved'] or 'auto'} ({verdict['dtype']['why']})",
          file=log, flush=True)
    for point in points.values():
        append_jsonl(partial, point["record"])
    context = {"environment": environment, "prompts_sha256": prompts_sha256,
               "min_tokens": min_tokens, "server_log": server_log, "log": log,
               "partial": partial, "verdict": verdict,
               "baseline_counts": baseline_counts(cell, baseline_records) if missing else {}}
    return Prepared(cell, output, plan, paths, points, missing, context)


def _record_unsupported(prep: Prepared, config: dict) -> None:
    cell, context = prep.cell, prep.context
    reason = context["verdict"]["reason"]
    print(f"[sdbench] cell {cell.cell_id}: unsupported here: {reason}", file=context["log"],
          flush=True)
    for pid in prep.missing:
        load, repeat = prep.plan[pid]
        record = _record(cell, load, repeat, {}, UNSUPPORTED, reason, {}, {}, context,
                         _model_cards(cell, config), _now(), _now())
        append_jsonl(context["partial"], record)
        prep.points[pid] = {"record": record, "detail": None}


def _check_leftovers(held: slots.Slots) -> None:
    leftovers = checks.leftover_vllm_processes(checks.gpu_processes(held.monitor_ids))
    if leftovers:
        raise CellError(
            "vLLM processes of an earlier run still hold the GPU: "
            + "; ".join(f"pid {p['pid']} on GPU {p['gpu']} ({p['cmdline'][:120]})"
                        for p in leftovers)
            + ". Stop them (kill <pid>) before measuring; they would skew or crash "
            "this cell.")


def _keep(prep: Prepared, pid: tuple, measured: dict) -> None:
    if measured["record"]["status"] == "ok":  # only valid points are done
        write_point(prep.paths[pid], measured["record"], measured["detail"])
    prep.points[pid] = measured


def _not_done(prep: Prepared) -> str | None:
    """Why the cell is not done (points not valid), or None."""
    cell = prep.cell
    ordered = [prep.points[pid] for pid in sorted(prep.plan) if pid in prep.points]
    not_done = [p["record"] for p in ordered
                if p["record"]["status"] not in ("ok", UNSUPPORTED)]
    if not not_done:
        return None
    return (f"cell {cell.cell_id} ({cell.label}): {len(not_done)} of {len(prep.plan)} points "
            "not valid (" + "; ".join(
                f"{LoadPoint.of_load(r['load'], r['repeat']).label}: {r['error']}"
                for r in not_done)
            + "); the cell is not done: a rerun measures these points again (the valid ones "
            f"are cached). Records so far: {prep.context['partial']}")


def _complete(prep: Prepared) -> bool:
    """Every point measured and valid (or the cell is unsupported here: its own job records
    that)."""
    if prep.context["verdict"]["reason"]:
        return True
    return set(prep.points) >= set(prep.plan) and _not_done(prep) is None


def _run_cell(cell: grid.Cell, config: dict, output: str | Path, *,
              server_log: str | Path, log=None,
              baseline_records: str | Path | None = None) -> list[dict]:
    prep = _prepare(cell, config, output, server_log=server_log, log=log,
                    baseline_records=baseline_records)
    context = prep.context
    if prep.missing and context["verdict"]["reason"]:
        _record_unsupported(prep, config)
    elif prep.missing and cell.group:
        raise CellError(
            f"cell {cell.cell_id} ({cell.label}) is measured in turn with the cells "
            f"{', '.join(i for i in cell.group if i != cell.cell_id)} (`interleave`), and "
            f"{len(prep.missing)} of its points are not in {point_cache(cell.cell_id)}/: run "
            f"their group job first ({layout.group_output(cell.group[0])}; without Snakemake: "
            f"python -m sdbench.measure.cell --group {cell.group[0]})")
    elif prep.missing:
        checks.check_cell_tools(cell, source=f"cell {cell.cell_id}")
        checks.check_cell_context(config, cell)
        with slots.held(grid.cell_gpus(cell.server_config), label=f"cell {cell.cell_id}",
                        timeout_s=config["cells"]["slot_timeout_s"]) as held:
            print(f"[sdbench] cell {cell.cell_id}: {held.reason}", file=context["log"],
                  flush=True)
            _check_leftovers(held)
            context["slots"] = held
            measure = _measure if cell.engine == grid.SERVE else _measure_engine
            for pid, measured in measure(cell, config, [prep.plan[p] for p in prep.missing],
                                         context):
                _keep(prep, pid, measured)
    return _finish(prep)


def _finish(prep: Prepared) -> list[dict]:
    """Write the cell's records and request detail when every point is done, else raise."""
    why = _not_done(prep)
    if why:
        raise CellError(why)
    cell, output = prep.cell, prep.output
    ordered = [prep.points[pid] for pid in sorted(prep.plan)]
    with atomic_path(requests_output(output)) as tmp, gzip.open(tmp, "wt",
                                                                encoding="utf-8") as fh:
        for point in ordered:
            record = point["record"]
            if point["detail"] is None:  # unsupported here: nothing was sent
                continue
            fh.write(json.dumps({"cell_id": cell.cell_id, "concurrency": record["concurrency"],
                                 "request_rate": record.get("request_rate"),
                                 "repeat": record["repeat"], **point["detail"]}) + "\n")
    records = [point["record"] for point in ordered]
    write_jsonl(output, records)
    prep.context["partial"].unlink(missing_ok=True)
    return records


def interleaved_order(cell_ids: list[str], points: list[tuple]) -> list[tuple[str, tuple]]:
    """(cell id, point id) in the order a group measures them: `points` in their order (each
    cell's server instances take them in that order, `instances`), every cell in turn at each,
    the cells' order rotating with the repeat (point ids end with it) so that no cell is always
    measured first."""
    order = []
    for pid in points:
        turn = pid[-1] % len(cell_ids)
        order += [(cell_id, pid) for cell_id in cell_ids[turn:] + cell_ids[:turn]]
    return order


def run_group(cells: list[grid.Cell], config: dict, manifest: str | Path, *,
              server_logs: dict[str, str | Path] | None = None, log=None) -> dict:
    """Measure a group of cells (`grid.interleave_groups`) in one job: every server up side by
    side, the points taken in turn (`interleaved_order`), each point into the point cache; then
    write `manifest`. A point any cell still misses is measured again for all of them (the two
    sides of a speedup stay seconds apart). The cells' own jobs then write their records from
    the cache. On failure each cell not done gets its error file, as in `run_cell`."""
    log = log or sys.stderr
    group_id = cells[0].cell_id
    server_logs = server_logs or {c.cell_id: layout.GROUP_SERVER_LOG.format(
        group_id=group_id, cell_id=c.cell_id) for c in cells}
    preps: list[Prepared] = []
    try:
        for cell in cells:
            preps.append(_prepare(cell, config, layout.cell_output(cell.cell_id),
                                  server_log=server_logs[cell.cell_id], log=log))
        measured = [p for p in preps if not p.context["verdict"]["reason"]]
        again = {pid for p in measured for pid in p.missing}
        for prep in measured:
            prep.missing = [pid for pid in prep.plan if pid in again]
            for pid in prep.missing:
                prep.points.pop(pid, None)
            # the records so far: what stays cached (the points measured again are appended
            # as they are measured)
            write_jsonl(prep.context["partial"], [p["record"] for p in prep.points.values()])
        if again:
            _measure_group(measured, config, log, group_id)
        for prep in preps:
            why = _not_done(prep)
            if why:
                raise CellError(why)
    except BaseException as exc:
        message = f"{type(exc).__name__}: {exc}"
        done = {p.cell.cell_id for p in preps if _complete(p)}
        for cell in cells:
            if cell.cell_id not in done:
                write_error(error_output(layout.cell_output(cell.cell_id)), cell, message,
                            server_logs[cell.cell_id], group=group_id)
        raise
    for prep in preps:
        prep.context["partial"].unlink(missing_ok=True)  # every point is in the cache
        error_output(prep.output).unlink(missing_ok=True)
    summary = {"group": group_id, "cells": [c.cell_id for c in cells],
               "labels": {c.cell_id: c.label for c in cells},
               "measured": {p.cell.cell_id: [LoadPoint.of_load(*p.plan[pid]).label
                                             for pid in p.missing]
                            for p in preps if p.missing},
               "server_logs": {k: str(v) for k, v in server_logs.items()}, "at": _now()}
    atomic_write_json(manifest, summary)
    return summary


def _measure_group(preps: list[Prepared], config: dict, log, group_id: str) -> None:
    for prep in preps:
        checks.check_cell_tools(prep.cell, source=f"cell {prep.cell.cell_id}")
        checks.check_cell_context(config, prep.cell)
    counts = [grid.cell_gpus(p.cell.server_config) for p in preps]
    with _signals_raise(), slots.held(sum(counts), label=f"group {group_id}",
                                      timeout_s=config["cells"]["slot_timeout_s"]) as held, \
            contextlib.ExitStack() as stack:
        print(f"[sdbench] group {group_id}: {held.reason}", file=log, flush=True)
        _check_leftovers(held)
        for prep, view in zip(preps, slots.split(held, counts), strict=True):
            others = [p.cell.cell_id for p in preps if p is not prep]
            server = cell_server(prep.cell, config, prep.context["server_log"], view.env,
                                 prep.context["verdict"])
            stack.callback(server.stop)
            prep.context.update(slots=view, interleaved_with=others, server=server)
            # every server starts side by side (a start is mostly one core importing vLLM, or
            # its own GPU), and no point is measured before all of them are up
            server.launch()
        for prep in preps:
            prep.context["server"].start()
        runs = {}
        for prep in preps:
            runs[prep.cell.cell_id] = (prep, stack.enter_context(contextlib.closing(
                _measure(prep.cell, config, [prep.plan[p] for p in prep.missing],
                         prep.context))))
        # the baseline measures every point its cells do (`grid.with_baseline_repeats`); a
        # cell with fewer repeats takes its turn only at its own points, in the same order
        # (instances keep the plan's order, so a cell's points are a subsequence of these)
        most = max(preps, key=lambda p: len(p.missing))
        points = [LoadPoint.of_load(load, repeat).order for instance in instances(
            most.cell, [most.plan[p] for p in most.missing]) for load, repeat in instance]
        own = {p.cell.cell_id: set(p.missing) for p in preps}
        order = [(cell_id, pid) for cell_id, pid in interleaved_order(list(runs), points)
                 if pid in own[cell_id]]
        left = {cell_id: len(prep.missing) for cell_id, (prep, _) in runs.items()}
        for cell_id, pid in order:
            prep, measuring = runs[cell_id]
            got, measured = next(measuring)
            if got != pid:
                raise CellError(f"group {group_id}: cell {cell_id} measured {got} where "
                                f"{pid} was due")
            _keep(prep, pid, measured)
            left[cell_id] -= 1
            if not left[cell_id]:
                measuring.close()  # its last point: stop its server now


def _run_args(cell: grid.Cell, config: dict, verdict: dict | None) -> dict:
    """The cell's engine arguments as run here (`dtype: host` resolved; by the cell's own
    verdict, or asked now when the caller has none)."""
    args = cell.server_config["args"]
    if args.get("dtype") == "host":
        return hostcaps.run_args(args, verdict or hostcaps.cell_verdict(config, cell))
    return args


def cell_server(cell: grid.Cell, config: dict, server_log: str | Path,
                env: dict | None = None, verdict: dict | None = None) -> VllmServer:
    """The cell's vLLM server (not started: use it as a context manager). `verdict`
    (hostcaps.cell_verdict) resolves `dtype: host`."""
    server_cfg, srv = cell.server_config, config["server"]
    target = server_cfg["target"]["name"]
    target_dir = grid.model_dir(config, target)
    spec = speculative_config(cell, config)
    args = _run_args(cell, config, verdict)

    def build(port: int) -> list[str]:
        argv = server_command(target_dir, target, srv["host"], port, args, spec)
        if cell.profile == "nsys":
            argv = profiling.wrap_command(argv, profiling.session_name(cell.cell_id))
        return argv

    return VllmServer(build, host=srv["host"], log_path=server_log,
                      env={**server_cfg["env"], **hostcaps.isa_env(), **(env or {})},
                      startup_timeout_s=srv["startup_timeout_s"],
                      stop_timeout_s=srv["stop_timeout_s"])


def point_argv(cell: grid.Cell, config: dict, server: VllmServer, load: dict,
               min_tokens: int | None, num_prompts: int | None = None,
               repeat: int = 0, served_before: int = 0) -> list[str]:
    """The load generator's arguments for one load point of the cell against a running
    server that has measured `served_before` points already."""
    target = cell.server_config["target"]["name"]
    return loadgen.loadgen_argv(
        host=server.connect_host, port=server.port, served_name=target,
        tokenizer=grid.model_dir(config, target), dataset_path=cell.workload["path"],
        num_prompts=num_prompts or cell.workload["num_prompts"],
        concurrency=load.get("concurrency"), request_rate=load.get("request_rate"),
        burstiness=load.get("burstiness", 1.0),
        settings=point_settings(cell, repeat, served_before),
        shuffle=cell.workload["shuffle"], min_tokens=min_tokens)


def point_settings(cell: grid.Cell, repeat: int, served_before: int = 0) -> dict:
    """The load generator's settings for one repeat: its own seed; warm-up requests only before
    a server's first point (later points find it warm: the points before warmed it, and each
    warm-up request costs a whole output, minutes on a slow target), and none in a fresh server
    per point (a warm-up sends one of the point's own prompts, and a proposer with state across
    requests would learn its answer)."""
    settings = {**cell.workload["loadgen"], "seed": repeat_seed(cell, repeat)}
    if grid.isolation(cell.server_config) == grid.FRESH_PER_POINT or served_before:
        settings["num_warmups"] = 0
    return settings


def _model_cards(cell: grid.Cell, config: dict) -> dict:
    server_cfg = cell.server_config
    target_dir = grid.model_dir(config, server_cfg["target"]["name"])
    cards = {"target": {"path": target_dir, "card": models.read_card(target_dir)}}
    if server_cfg["draft"] is not None:
        draft_dir = grid.model_dir(config, server_cfg["draft"]["name"])
        cards["draft"] = {"path": draft_dir, "card": models.read_card(draft_dir)}
    return cards


def _record(cell: grid.Cell, load: dict, repeat: int, metrics: dict, status: str, reason: str,
            server: dict, loadgen_info: dict, context: dict, model_cards: dict,
            started: str, finished: str | None = None) -> dict:
    return Record(
        cell_id=cell.cell_id, round=cell.round, speculator=cell.speculator,
        baseline_cell_id=cell.baseline_cell_id, server_config=cell.server_config,
        workload=cell.workload, engine=cell.engine, load=load, repeat=repeat, status=status,
        error=reason or None, metrics=metrics, server=server, loadgen=loadgen_info,
        provenance={**context["environment"], "models": model_cards,
                    "dataset": {"path": cell.workload["path"],
                                "sha256": context["prompts_sha256"]},
                    "started_at": started, "finished_at": finished or _now()},
    ).to_dict()


def _report_point(cell: grid.Cell, load: dict, repeat: int, status: str, reason: str,
                  metrics: dict, server_log, log) -> None:
    """Stop the cell at a failed point (CellError), else log the point's line."""
    if status == "failed":
        first, _, rest = reason.partition("\n")
        raise CellError(f"cell {cell.cell_id} ({cell.label}), "
                        f"{LoadPoint.of_load(load, repeat).label}: "
                        f"{first}; later points were not attempted (log: {server_log})"
                        + (f"\n{rest}" if rest else ""))
    print(f"[sdbench] cell {cell.cell_id} {LoadPoint.of_load(load, repeat).label}: {status}"
          f"{' (' + reason + ')' if reason else ''}, "
          f"{metrics.get('output_throughput') or float('nan'):.1f} output tok/s "
          f"({metrics.get('total_token_throughput') or float('nan'):.1f} total), "
          f"{metrics.get('completed')} completed, {metrics.get('failed')} failed",
          file=log, flush=True)


def _num_prompts(cell: grid.Cell, load: dict, probe, fixed: int | None = None
                 ) -> tuple[int, dict]:
    """Prompts of one point: the workload's, or with loadgen.duration_s the count that lasts
    that long at the point's rate (request rate, or the request throughput a short probe at
    that concurrency measured), capped by the workload's num_prompts. A speculative cell takes
    its baseline's count at the same point (`fixed`): a pair must send the same prompts, and a
    faster server would otherwise get more of them. With loadgen.prompts_per_concurrency a
    closed-loop point has that many per unit of concurrency, at most num_prompts."""
    available = grid.point_prompts(cell, load)
    duration = cell.workload["loadgen"].get("duration_s")
    if duration is None:
        return available, {}
    if fixed is not None:
        return fixed, {"duration_s": duration, "prompts_from": cell.baseline_cell_id}
    if load["mode"] == "rate":
        rate, info = load["request_rate"], {}
    else:
        rate = probe(load)
        info = {"probe_request_throughput": rate}
    wanted = max(math.ceil(rate * duration), load.get("concurrency") or 1)
    return min(wanted, available), {**info, "duration_s": duration,
                                    "duration_prompts_wanted": wanted,
                                    "duration_capped": wanted > available}


def baseline_counts(cell: grid.Cell, baseline_records: str | Path | None = None
                    ) -> dict[tuple, int]:
    """point id -> the prompt count the baseline cell sent there (duration-bounded speculative
    cells send the same); empty when the counts are not duration-bounded."""
    if not grid.sends_baseline_counts(cell):
        return {}
    path = Path(baseline_records or layout.cell_output(cell.baseline_cell_id))
    if not path.is_file():
        raise CellError(f"cell {cell.cell_id} ({cell.label}): with loadgen.duration_s each "
                        f"point sends as many prompts as its baseline cell "
                        f"{cell.baseline_cell_id} sent there, and {path} does not exist: run "
                        "the baseline cell first")
    counts = {}
    for record in read_records(path):
        if record["status"] == "ok":
            counts[LoadPoint.of_load(record["load"], record["repeat"]).order] = int(
                (record.get("loadgen") or {}).get("num_prompts")
                or record["metrics"]["completed"] + record["metrics"]["failed"])
    return counts


def instances(cell: grid.Cell, plan: list[tuple[dict, int]]) -> list[list[tuple[dict, int]]]:
    """The plan as server instances, in the plan's order of first use: one per point for a
    proposer with state across requests (`grid.isolation`), else by `server_instance`."""
    if grid.isolation(cell.server_config) == grid.FRESH_PER_POINT:
        return [[point] for point in plan]
    groups: dict[int, list] = {}
    for load, repeat in plan:
        groups.setdefault(server_instance(cell, repeat), []).append((load, repeat))
    return list(groups.values())


def _measure(cell: grid.Cell, config: dict, plan: list[tuple[dict, int]], context: dict):
    """Start the cell's server(s) and yield (point id, {record, detail}) for each point of
    `plan` that is not failed; a failed point stops the cell (CellError)."""
    loadgen.preload()  # overlaps the first server's start-up
    for group in instances(cell, plan):
        yield from _measure_instance(cell, config, group, context)


def _measure_instance(cell: grid.Cell, config: dict, plan: list[tuple[dict, int]],
                      context: dict):
    log, server_log = context["log"], context["server_log"]
    model_cards = _model_cards(cell, config)
    held = context["slots"]
    interval_s = config["cells"]["gpu_sample_interval_ms"] / 1000.0
    isolation = grid.isolation(cell.server_config)
    probes: dict[int, float] = {}
    # a group's first instance finds its server launched already (`_measure_group`)
    server = context.pop("server", None) or cell_server(cell, config, server_log, held.env,
                                                        context["verdict"])
    with _signals_raise(), server:
        print(f"[sdbench] cell {cell.cell_id}: server ready on port {server.port} after "
              f"{server.startup_s:.1f} s ({isolation})", file=log, flush=True)

        def probe(load: dict) -> float:
            """Request throughput of a short run at this concurrency (for duration_s)."""
            c = load["concurrency"]
            if c not in probes:
                n = min(cell.workload["num_prompts"], max(2 * c, 4))
                result = loadgen.run_point(point_argv(cell, config, server, load,
                                                      context["min_tokens"], n), log=log)
                probes[c] = float(result["request_throughput"])
            return probes[c]

        profiler = profiling.nsys_session(cell, server) if cell.profile == "nsys" else None
        for served_before, (load, repeat) in enumerate(plan):
            error, result, argv, extra, num_prompts = None, {}, [], {}, None
            started, log_offset = _now(), _log_size(server_log)
            try:
                num_prompts, extra = _num_prompts(
                    cell, load, probe,
                    context["baseline_counts"].get(LoadPoint.of_load(load, repeat).order))
                argv = point_argv(cell, config, server, load, context["min_tokens"],
                                  num_prompts, repeat, served_before)
            except Exception as exc:  # a probe against a dead endpoint
                error = f"{type(exc).__name__}: {exc}"
            with gpumon.GpuSampler(held.monitor_ids, interval_s=interval_s) as sampler, \
                    (profiler.capture(load, repeat) if profiler else contextlib.nullcontext()):
                if error is None:
                    try:
                        result = loadgen.run_point(argv, log=log)
                    except Exception as exc:  # the load generator raises on a dead endpoint
                        error = f"{type(exc).__name__}: {exc}"
                returned = time.perf_counter()
            if not server.alive():
                seen = error or "the load generator raised no error"
                cause = error_cause(server_log, since=log_offset) or seen
                error = (f"the vLLM server exited during the point: {cause} (log: {server_log})"
                         f"\nLast lines of {server_log}:\n{log_tail(server_log, 15)}")
            metrics, detail = loadgen.split_result(result)
            window = gpumon.request_window(detail, returned, metrics.get("duration"))
            metrics.update(sampler.window_metrics(*window, metrics.get("total_output_tokens")))
            status, reason = point_status(metrics, error, config["loadgen"]["max_failure_share"])
            if status == "invalid":
                reason = _with_causes(reason, detail, server_log, log_offset)
            server_info = {"command": server.command, "port": server.port,
                           "startup_s": server.startup_s, "started_at": _now(server.started_at),
                           "log": str(server_log),
                           "gpus": held.gpu_ids, "placement": held.reason,
                           "isolation": isolation, "instance": server_instance(cell, repeat),
                           # points this server measured before (prefix caching: cache state)
                           "points_before": served_before}
            if context.get("interleaved_with"):  # measured in turn with these cells' servers
                server_info["interleaved_with"] = context["interleaved_with"]
            if profiler:
                server_info["profile"] = str(profiler.report(load, repeat))
            record = _record(cell, load, repeat, metrics, status, reason, server_info,
                             {"argv": argv, "num_prompts": num_prompts,
                              "seed": repeat_seed(cell, repeat), **extra},
                             context, model_cards, started)
            append_jsonl(context["partial"], record)
            _report_point(cell, load, repeat, status, reason, metrics, server_log, log)
            yield LoadPoint.of_load(load, repeat).order, {"record": record, "detail": detail}


def _log_size(path: str | Path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _with_causes(reason: str, detail: dict, server_log: str | Path, offset: int) -> str:
    """An invalid point's reason with what made its requests fail: the first request error the
    load generator saw and the first error the server logged during the point."""
    errors = [e for e in detail.get("errors") or [] if e]
    if errors:
        reason += f"; first request error: {first_line(str(errors[0]))[:300]}"
    cause = error_cause(server_log, since=offset)
    if cause:
        reason += f"; server log: {cause} (log: {server_log})"
    return reason


def engine_job(cell: grid.Cell, config: dict, plan: list[tuple[dict, int]],
               out_dir: str | Path, verdict: dict | None = None) -> dict:
    """What the child process of an offline / Transformers cell needs (see
    sdbench.measure.engines)."""
    server_cfg, settings = cell.server_config, cell.workload["loadgen"]
    draft = server_cfg["draft"]
    return {"engine": cell.engine,
            "target_dir": grid.model_dir(config, server_cfg["target"]["name"]),
            "draft_dir": None if draft is None else grid.model_dir(config, draft["name"]),
            "speculative_config": speculative_config(cell, config),
            "args": _run_args(cell, config, verdict), "method": server_cfg["method"],
            "k": server_cfg["num_speculative_tokens"], "options": server_cfg["method_options"],
            "prompts": cell.workload["path"], "num_prompts": cell.workload["num_prompts"],
            "shuffle": cell.workload["shuffle"], "seed": settings["seed"],
            "temperature": settings["temperature"], "endpoint": settings["endpoint"],
            "num_warmups": settings["num_warmups"],
            "ignore_eos": bool(settings.get("ignore_eos")),
            "plan": [{**load, "repeat": repeat, "seed": repeat_seed(cell, repeat)}
                     for load, repeat in plan],
            "out_dir": str(out_dir)}


def _measure_engine(cell: grid.Cell, config: dict, plan: list[tuple[dict, int]],
                    context: dict):
    """An offline / Transformers cell: one child process (own process group, stopped whatever
    happens) measures every point; yield (point id, {record, detail}) for each it finished."""
    log, server_log = context["log"], context["server_log"]
    model_cards = _model_cards(cell, config)
    held = context["slots"]
    out_dir = Path(tempfile.mkdtemp(prefix=f".{cell.cell_id}.", dir=context["partial"].parent))
    try:
        job_path = out_dir / "job.json"
        job_path.write_text(json.dumps(engine_job(cell, config, plan, out_dir,
                                                  context["verdict"])))
        command = [sys.executable, "-m", "sdbench.measure.engines", str(job_path)]
        log_offset = _log_size(server_log)
        runner = VllmServer(lambda _port: command, host=config["server"]["host"],
                            log_path=server_log, env={**cell.server_config["env"],
                                                      **hostcaps.isa_env(), **held.env},
                            stop_timeout_s=config["server"]["stop_timeout_s"])
        interval_s = config["cells"]["gpu_sample_interval_ms"] / 1000.0
        with _signals_raise(), gpumon.GpuSampler(held.monitor_ids, interval_s) as sampler:
            try:
                code = runner.run_to_completion()
            finally:
                runner.stop()
        for index, (load, repeat) in enumerate(plan):
            path = engines.point_file(out_dir, index)
            if not path.exists():
                cause = error_cause(server_log, since=log_offset) or "no error in its log"
                raise CellError(f"cell {cell.cell_id} ({cell.label}), "
                                f"{LoadPoint.of_load(load, repeat).label}: the {cell.engine} "
                                f"run exited with code {code} before finishing it: {cause} (log: "
                                f"{server_log})\nLast lines of {server_log}:\n"
                                f"{log_tail(server_log, 15)}")
            result = json.loads(path.read_text())
            metrics, detail = result["metrics"], result["detail"]
            # energy over the point's own window (the child's clock is the sampler's)
            metrics.update(sampler.window_metrics(*metrics["window_perf_counter"],
                                                  metrics["total_output_tokens"]))
            status, reason = point_status(metrics, None, config["loadgen"]["max_failure_share"])
            # the child's window (host monotonic clock) as wall-clock times of this point
            offset = time.time() - time.perf_counter()
            start, end = (_now(t + offset) for t in metrics["window_perf_counter"])
            server_info = {"command": command, "port": None, "startup_s": None,
                           "log": str(server_log), "gpus": held.gpu_ids,
                           "placement": held.reason}
            record = _record(cell, load, repeat, metrics, status, reason, server_info,
                             {"engine": cell.engine, "batch_size": load["concurrency"],
                              "seed": repeat_seed(cell, repeat)},
                             context, model_cards, start, end)
            append_jsonl(context["partial"], record)
            _report_point(cell, load, repeat, status, reason, metrics, server_log, log)
            yield LoadPoint.of_load(load, repeat).order, {"record": record, "detail": detail}
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.measure.cell", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="workflow config (YAML)")
    parser.add_argument("--cell", help="cell id to run (see --list); a cell of an `interleave` "
                        "group runs its group first")
    parser.add_argument("--group", help="measure only this group (its baseline's cell id)")
    parser.add_argument("--list", action="store_true", help="list the cells of the config")
    parser.add_argument("--output", help="records file (default results/cells/<id>.jsonl)")
    parser.add_argument("--server-log", help="server log (default logs/cells/<id>.server.log)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        cells = grid.cells_by_id(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list or not (args.cell or args.group):
        for cell in cells.values():
            group = f"  (group {cell.group[0]})" if cell.group else ""
            print(f"{cell.cell_id}  {cell.label}{group}")
        return 0
    wanted = args.cell or args.group
    if wanted not in cells or (args.group and not cells[wanted].group):
        parser.error(f"no {'group' if args.group else 'cell'} {wanted!r} in {args.config} "
                     "(use --list)")
    cell = cells[wanted]
    output = args.output or layout.cell_output(wanted)
    server_log = args.server_log or layout.SERVER_LOG.format(cell_id=wanted)
    try:
        checks.check_installed(config, source=args.config)
        if cell.group:
            run_group([cells[i] for i in cell.group], config, layout.group_output(cell.group[0]))
        if args.cell:
            run_cell(cell, config, output, server_log=server_log)
        else:
            output = layout.group_output(cell.group[0])
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
