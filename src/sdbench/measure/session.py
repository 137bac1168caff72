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
`sdbench.report.timing` and `make plan`'s calibration read.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from pathlib import Path
from typing import TextIO

import psutil

from sdbench import layout
from sdbench.files import atomic_write_json
from sdbench.logcause import error_cause
from sdbench.measure import gpumon, loadgen, points, profiling, slots
from sdbench.measure.run import (
    CellError,
    CellRun,
    log_size,
    now,
    point_status,
    prepare,
    run_args,
    signals_raise,
    with_causes,
    write_error,
)
from sdbench.measure.serving import ServerError, VllmServer, log_tail, server_command
from sdbench.plan import checks, grid, hostcaps
from sdbench.plan.config import VANILLA, ConfigError
from sdbench.plan.sessions import Session, config_id, read_manifest, session_points


def speculative_config(cell: grid.Cell, config: dict) -> dict | None:
    server = cell.server_config
    if server["method"] == VANILLA:
        return None
    spec = {"method": server["method"], "num_speculative_tokens": server["num_speculative_tokens"],
            **server["method_options"]}
    if server["draft"] is not None:
        spec["model"] = grid.model_dir(config, server["draft"]["name"])
    return spec


def cell_server(cell: grid.Cell, config: dict, server_log: str | Path,
                env: dict | None = None, verdict: dict | None = None) -> VllmServer:
    """The server of the cell's configuration (not started: use it as a context manager).
    `verdict` (hostcaps.cell_verdict) resolves `dtype: host`."""
    server_cfg, srv = cell.server_config, config["server"]
    target = server_cfg["target"]["name"]
    target_dir = grid.model_dir(config, target)
    spec = speculative_config(cell, config)
    args = run_args(cell, config, verdict)

    def build(port: int) -> list[str]:
        argv = server_command(target_dir, target, srv["host"], port, args, spec)
        if cell.profile == "nsys":
            argv = profiling.wrap_command(argv, profiling.session_name(server_cfg))
        return argv

    return VllmServer(build, host=srv["host"], log_path=server_log,
                      env={**server_cfg["env"], **hostcaps.isa_env(), **(env or {})},
                      startup_timeout_s=srv["startup_timeout_s"],
                      stop_timeout_s=srv["stop_timeout_s"])


def point_settings(cell: grid.Cell, repeat: int, *, warm_up: bool = False,
                   ready_check: bool = True) -> dict:
    """The load generator's settings for one repeat: its own seed; warm-up requests (the
    workload's own prompts) only before a cell's first point in its server (later points find
    it warm; each warm-up request costs a whole output, minutes on a slow target), and none in
    a fresh server per point (a warm-up sends one of the point's own prompts, and a proposer
    with state across requests would learn its answer); the readiness check (one request of
    the first prompt) only before a server's first point (the server answered /health)."""
    settings = {**cell.workload["loadgen"], "seed": points.repeat_seed(cell, repeat)}
    if grid.isolation(cell.server_config) == grid.FRESH_PER_POINT or not warm_up:
        settings["num_warmups"] = 0
    if not ready_check:
        settings["ready_check_timeout_s"] = 0
    return settings


def point_argv(cell: grid.Cell, config: dict, server: VllmServer, load: dict,
               min_tokens: int | None, num_prompts: int | None = None,
               settings: dict | None = None) -> list[str]:
    """The load generator's arguments for one load point of the cell against a running
    server."""
    target = cell.server_config["target"]["name"]
    return loadgen.loadgen_argv(
        host=server.connect_host, port=server.port, served_name=target,
        tokenizer=grid.model_dir(config, target), dataset_path=cell.workload["path"],
        num_prompts=num_prompts or cell.workload["num_prompts"],
        concurrency=load.get("concurrency"), request_rate=load.get("request_rate"),
        burstiness=load.get("burstiness", 1.0),
        settings=settings or point_settings(cell, 0), shuffle=cell.workload["shuffle"],
        min_tokens=min_tokens)


def covered(spans) -> float:
    """Seconds covered by (start, length) spans, overlaps once; a span without a start counts
    in full."""
    spans = list(spans)
    total = sum(length for start, length in spans if start is None)
    end = float("-inf")
    for start, length in sorted(s for s in spans if s[0] is not None):
        total += max(0.0, start + length - max(start, end))
        end = max(end, start + length)
    return total


class Clock:
    """Where a session's time goes: server start-ups (spans; servers started side by side
    overlap), measuring (each point from the load generator's start to its end, warm-ups
    included), and the rest of the process's life (job start, imports, checks, stopping)."""

    def __init__(self):
        try:
            self.process_started = psutil.Process().create_time()
        except psutil.Error:
            self.process_started = time.time()
        self.began = time.time()
        self.startups: list[tuple[float, float]] = []  # (Unix start, seconds)
        self.servers: list[dict] = []  # each start: its configuration and seconds
        self.measuring_s = 0.0
        self.stopping_s = 0.0
        self.phases: dict[str, float] = {"job start and imports": self.began
                                         - self.process_started}

    def phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.phase(name, time.monotonic() - t0)

    def split(self) -> dict:
        wall = time.time() - self.process_started
        startup = covered(self.startups)
        return {"wall_s": wall, "startup_s": startup, "measuring_s": self.measuring_s,
                "rest_s": wall - startup - self.measuring_s, "servers": len(self.startups),
                "starts": self.servers, "host": socket.gethostname(),
                "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "process_started_at": now(self.process_started), "finished_at": now()}


class SessionServer:
    """One running server of a session: its configuration's server, the GPUs it holds, its
    log, and what it has served (for warm-ups, readiness checks and the records)."""

    def __init__(self, run: CellRun, session: Session, view: slots.Slots, server_log: Path,
                 clock: Clock):
        self.session, self.view, self.log_path, self.clock = session, view, server_log, clock
        self.config, self.log = run.config, run.log
        self.server = cell_server(run.cell, run.config, server_log, view.env, run.verdict)
        self.isolation = grid.isolation(run.cell.server_config)
        self.config_id = config_id(run.cell.server_config)
        self.target = run.cell.server_config["target"]["name"]
        self.points = 0
        self.cells: set[str] = set()
        self.probes: dict[tuple, float] = {}
        self.profiled = run.cell.profile == "nsys"

    def launch(self) -> None:
        self.server.launch()

    def wait(self) -> None:
        """Wait until the server answers (it was launched), recording the start-up."""
        self.server.start()
        self.clock.startups.append((self.server.started_at, self.server.startup_s))
        self.clock.servers.append({"config": self.config_id, "target": self.target,
                                   "startup_s": round(self.server.startup_s, 3),
                                   "started_at": now(self.server.started_at)})
        print(f"[sdbench] session {self.session.session_id}: server ready on port "
              f"{self.server.port} after {self.server.startup_s:.1f} s ({self.isolation}; "
              f"log {self.log_path})", file=self.log, flush=True)

    def alive(self) -> bool:
        return self.server.alive()

    def stop(self) -> None:
        t0 = time.monotonic()
        try:
            self.server.stop()
        finally:
            self.clock.stopping_s += time.monotonic() - t0
            self.clock.phase("stopping servers", time.monotonic() - t0)

    def probe(self, run: CellRun, load: dict) -> float:
        """Request throughput of a short run at this concurrency (for duration_s)."""
        key = (run.cell_id, load["concurrency"])
        if key not in self.probes:
            n = min(run.cell.workload["num_prompts"], max(2 * load["concurrency"], 4))
            result = loadgen.run_point(point_argv(run.cell, run.config, self.server, load,
                                                  run.min_tokens, n), log=run.log)
            self.probes[key] = float(result["request_throughput"])
        return self.probes[key]

    def measure(self, run: CellRun, pid: tuple, interleaved_with: list[str] = ()) -> dict:
        """Measure one point of `run` on this server; the point's record and detail. A point
        that could not be measured is "failed" (the caller decides what follows)."""
        cell, config = run.cell, run.config
        load, repeat = run.plan[pid]
        error, result, argv, extra, num_prompts = None, {}, [], {}, None
        started, log_offset = now(), log_size(self.log_path)
        settings = point_settings(cell, repeat, warm_up=cell.cell_id not in self.cells,
                                  ready_check=self.points == 0)
        try:
            num_prompts, extra = run.num_prompts(load, lambda lv: self.probe(run, lv), repeat)
            argv = point_argv(cell, config, self.server, load, run.min_tokens, num_prompts,
                              settings)
        except Exception as exc:  # a probe against a dead endpoint
            error = f"{type(exc).__name__}: {exc}"
        profiler = profiling.nsys_session(cell) if self.profiled else None
        interval_s = config["cells"]["gpu_sample_interval_ms"] / 1000.0
        t0 = time.perf_counter()
        with gpumon.GpuSampler(self.view.monitor_ids, interval_s=interval_s) as sampler, \
                (profiler.capture(load, repeat) if profiler else contextlib.nullcontext()):
            if error is None:
                try:
                    result = loadgen.run_point(argv, log=run.log)
                except Exception as exc:  # the load generator raises on a dead endpoint
                    error = f"{type(exc).__name__}: {exc}"
            returned = time.perf_counter()
        self.clock.measuring_s += returned - t0
        if not self.server.alive():
            seen = error or "the load generator raised no error"
            cause = error_cause(self.log_path, since=log_offset) or seen
            error = (f"the vLLM server exited during the point: {cause} (log: "
                     f"{self.log_path})\nLast lines of {self.log_path}:\n"
                     f"{log_tail(self.log_path, 15)}")
        metrics, detail = loadgen.split_result(result)
        window = gpumon.request_window(detail, returned, metrics.get("duration"))
        metrics.update(sampler.window_metrics(*window, metrics.get("total_output_tokens")))
        status, reason = point_status(metrics, error, config["loadgen"]["max_failure_share"])
        if status == "invalid":
            reason = with_causes(reason, detail, self.log_path, log_offset)
        server = self.server
        info = {"command": server.command, "port": server.port,
                "startup_s": server.startup_s, "started_at": now(server.started_at),
                "log": str(self.log_path), "gpus": self.view.gpu_ids,
                "placement": self.view.reason, "isolation": self.isolation,
                "instance": cell.instance_of(repeat), "session": self.session.session_id,
                # points this server measured before (any cell's: the server's state)
                "points_before": self.points, "warm_up": settings["num_warmups"]}
        if interleaved_with:  # measured in turn with these cells' servers
            info["interleaved_with"] = list(interleaved_with)
        if profiler:
            info["profile"] = str(profiler.report(load, repeat))
        self.points += 1
        self.cells.add(cell.cell_id)
        record = run.record(load, repeat, metrics, status, reason, info,
                            {"argv": argv, "num_prompts": num_prompts,
                             "seed": settings["seed"], **extra}, started)
        return {"record": record, "detail": detail}


def check_during_startup(run: CellRun) -> None:
    """What can be checked while the server starts: the cell's prompts against the target's
    context, with its own tokenizer and chat template."""
    checks.check_cell_context(run.config, run.cell)


def _fail(run: CellRun, failed: dict, message: str) -> None:
    failed[run.cell_id] = message
    run.say(f": not done: {message.splitlines()[0]}")


def measure_plain(session: Session, runs: list[CellRun], held: slots.Slots, clock: Clock,
                  server_log: Path, failed: dict) -> None:
    """One server for every due cell (started again for the next cell if it died)."""
    server: SessionServer | None = None
    start_error: str | None = None
    try:
        for i, run in enumerate(runs):
            if start_error is not None:
                _fail(run, failed, start_error)
                continue
            if server is None or not server.alive():
                if server is not None:
                    server.stop()
                server = SessionServer(run, session, held, server_log, clock)
                server.launch()
                # the checks of every cell still to come, while the server starts
                for later in runs[i:]:
                    if later.cell_id not in failed:
                        _checked(later, failed, clock)
                try:
                    server.wait()
                except ServerError as exc:
                    start_error = f"{type(exc).__name__}: {exc}"
                    server.stop()
                    server = None
                    _fail(run, failed, start_error)
                    continue
            if run.cell_id in failed:
                continue
            _measure_cell(server, run, failed)
    finally:
        if server is not None:
            server.stop()


def _checked(run: CellRun, failed: dict, clock: Clock) -> None:
    if run.checked:
        return
    run.checked = True
    with clock.timed("checks while starting"):
        try:
            check_during_startup(run)
        except (ConfigError, CellError, OSError, ValueError) as exc:
            _fail(run, failed, f"{type(exc).__name__}: {exc}")


def _measure_cell(server: SessionServer, run: CellRun, failed: dict) -> None:
    for pid in list(run.missing):
        measured = server.measure(run, pid)
        run.add(pid, measured)
        record = measured["record"]
        load, repeat = run.plan[pid]
        try:
            run.report(load, repeat, record["status"], record["error"] or "",
                       record["metrics"], server.log_path)
        except CellError as exc:  # a failed point: the server is gone
            _fail(run, failed, str(exc))
            return


def measure_fresh(session: Session, runs: list[CellRun], held: slots.Slots, clock: Clock,
                  server_log: Path, failed: dict) -> None:
    """A fresh server for every point (a proposer with state across requests)."""
    for run in runs:
        _checked(run, failed, clock)
        for pid in list(run.missing):
            if run.cell_id in failed:
                break
            server = SessionServer(run, session, held, server_log, clock)
            try:
                server.launch()
                server.wait()
                _measure_cell_points(server, run, [pid], failed)
            except ServerError as exc:
                _fail(run, failed, f"{type(exc).__name__}: {exc}")
            finally:
                server.stop()


def _measure_cell_points(server: SessionServer, run: CellRun, pids: list, failed: dict) -> None:
    saved, run.missing = run.missing, list(pids)
    try:
        _measure_cell(server, run, failed)
    finally:
        run.missing = [p for p in saved if p not in pids]


def run_session(session: Session, cells: dict[str, grid.Cell], config: dict,
                manifest: str | Path, *, log: TextIO | None = None,
                baseline_records: dict[str, str] | None = None) -> dict:
    """Measure every due point of the session's cells (`cells`: at least those), then write
    `manifest`: per cell, its points in the point cache (or its unsupported records), or why it
    is not done; and the session's time split. Returns the manifest."""
    from sdbench.measure import engine_cells, groups

    log = log or sys.stderr
    clock = Clock()
    runs: list[CellRun] = []
    failed: dict[str, str] = {}

    def logs(cell_id: str) -> dict:
        return {"log": layout.SESSION_LOG.format(session_id=session.session_id),
                "server_log": layout.session_server_log(
                    session.session_id, config_id(cells[cell_id].server_config)),
                "session": session.session_id}

    try:
        with signals_raise():
            with clock.timed("asking vLLM about the checkpoints"):
                _read_checkpoints(session, cells, config)
            with clock.timed("preparing cells"):
                for cell_id in session.cells:
                    cell = cells[cell_id]
                    try:
                        run = prepare(cell, config, session.instance,
                                      session_points(session, cell), log=log,
                                      baseline_records=(baseline_records or {}).get(cell_id))
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
                        _fail(run, failed, f"{type(exc).__name__}: {exc}")
                due = [r for r in due if r.cell_id not in failed]
            if due:
                loadgen.preload()  # overlaps the first server's start-up
                gpus = [grid.cell_gpus(cells[c].server_config) for c in
                        _first_cells(session, cells)]
                with slots.held(sum(gpus) if session.interleaved else gpus[0],
                                label=f"session {session.session_id}",
                                timeout_s=config["cells"]["slot_timeout_s"]) as held:
                    print(f"[sdbench] session {session.session_id}: {held.reason}", file=log,
                          flush=True)
                    _check_leftovers(held)
                    if session.engine != grid.SERVE:
                        engine_cells.measure_engine(session, due, held, clock, failed)
                    elif session.interleaved:
                        groups.measure_group(session, cells, due, held, clock, failed, config)
                    elif session.fresh_per_point:
                        measure_fresh(session, due, held, clock,
                                      layout.session_server_log(session.session_id,
                                                                session.lead), failed)
                    else:
                        measure_plain(session, due, held, clock,
                                      layout.session_server_log(session.session_id,
                                                                session.lead), failed)
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


def _read_checkpoints(session: Session, cells: dict[str, grid.Cell], config: dict) -> None:
    """vLLM's reading of the session's quantized checkpoints (`hostcaps.quantized_dirs`), asked
    once (one child process that imports vLLM, for those it has not read on this host before):
    each cell's host verdict then finds it cached."""
    try:
        caps = hostcaps.host_caps()
    except hostcaps.ProbeError:
        caps = None
    names = {name for cell_id in session.cells for name in grid.cell_models(cells[cell_id])
             if cells[cell_id].engine != grid.TRANSFORMERS and caps is not None
             and hostcaps.plan_reason(config, cells[cell_id], caps) is None}
    folders = hostcaps.quantized_dirs(config, sorted(names))
    try:
        hostcaps.model_facts(sorted(f for f in folders if Path(f).is_dir()))
    except hostcaps.ProbeError as exc:  # each cell's verdict says so again
        print(f"[sdbench] session {session.session_id}: {exc}", file=sys.stderr, flush=True)


def _first_cells(session: Session, cells: dict[str, grid.Cell]) -> list[str]:
    """One cell of each of the session's configurations, in the session's order."""
    seen, out = set(), []
    for cell_id in session.cells:
        cid = config_id(cells[cell_id].server_config)
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
