"""The server of a session: its command line, the load generator's arguments and settings for
each point, one point measured on it, and the session's clock (start-ups, measuring, the rest).
Used by the sessions (sdbench.measure.session), interleaved sessions (sdbench.measure.groups)
and engine sessions (sdbench.measure.engine_cells).
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import time
from pathlib import Path

import psutil

from sdbench.logcause import error_cause
from sdbench.measure import engine_report, gpumon, loadgen, points, profiling, slots
from sdbench.measure.run import (
    CellError,
    CellRun,
    log_size,
    now,
    point_status,
    run_args,
    with_causes,
)
from sdbench.measure.serving import VllmServer, log_tail, server_command
from sdbench.plan import checks, hostcaps, specs
from sdbench.plan.config import VANILLA, ConfigError
from sdbench.plan.sessions import Session
from sdbench.plan.settings import settings
from sdbench.script_log import debug_enabled


def speculative_config(cell: specs.Cell, config: dict) -> dict | None:
    server = cell.server_config
    if server["method"] == VANILLA:
        return None
    spec = {"method": server["method"], "num_speculative_tokens": server["num_speculative_tokens"],
            **server["method_options"]}
    if server["draft"] is not None:
        spec["model"] = specs.model_dir(config, server["draft"]["name"])
    return spec


# vLLM 0.32+: each response carries its request's acceptance (`loadgen.capturing_acceptance`)
PER_REQUEST_ACCEPTANCE = "per_request_spec_decode_metrics"


def reporting_args(args: dict, spec: dict | None,
                   features: checks.VllmFeatures | None) -> dict:
    """A speculative server's engine arguments with per-request acceptance reported where the
    installed vLLM can (`detailed`: the accepted count of every verification step too), unless
    they set it themselves. It costs the scheduler a counter and a list append per request and
    step; the baseline cannot take it (vLLM refuses it without speculation)."""
    if spec is None or PER_REQUEST_ACCEPTANCE in args or features is None \
            or PER_REQUEST_ACCEPTANCE not in features.server_args:
        return args
    return {**args, PER_REQUEST_ACCEPTANCE: "detailed"}


def cell_server(cell: specs.Cell, config: dict, server_log: str | Path,
                env: dict | None = None, verdict: dict | None = None) -> VllmServer:
    """The server of the cell's configuration (not started: use it as a context manager).
    `verdict` (hostcaps.cell_verdict) resolves `dtype: host`."""
    server_cfg, srv = cell.server_config, settings(config).server
    target = server_cfg["target"]["name"]
    target_dir = specs.model_dir(config, target)
    spec = speculative_config(cell, config)
    args = reporting_args(run_args(cell, config, verdict), spec, checks.vllm_features())

    def build(port: int) -> list[str]:
        argv = server_command(target_dir, target, srv.host, port, args, spec)
        if cell.profile == "nsys":
            argv = profiling.wrap_command(argv, profiling.session_name(server_cfg))
        return argv

    return VllmServer(build, host=srv.host, log_path=server_log,
                      env={**server_cfg["env"], **hostcaps.isa_env(), **(env or {})},
                      startup_timeout_s=srv.startup_timeout_s,
                      stop_timeout_s=srv.stop_timeout_s)


# the seed of a level's untimed warm-up run is the repeat's plus this (its prompts come first in
# another order than any measured repeat's)
LEVEL_WARM_UP_SEED = 100_000


def point_settings(cell: specs.Cell, repeat: int, *, warm_up: bool = False,
                   ready_check: bool = True) -> dict:
    """The load generator's settings for one repeat: its own seed; warm-up requests
    (`specs.warm_up_requests`) before a cell's first point on its server, `warm_up` (later
    points find it warm; each warm-up request costs a whole output, minutes on a slow target);
    the readiness check (one request of the first prompt) only before a server's first point
    (the server answered /health)."""
    chosen = {**cell.workload["loadgen"], "seed": points.repeat_seed(cell, repeat),
              "num_warmups": specs.warm_up_requests(cell, warm_up)}
    if not ready_check:
        chosen["ready_check_timeout_s"] = 0
    return chosen


def point_argv(cell: specs.Cell, config: dict, server: VllmServer, load: dict,
               min_tokens: int | None, num_prompts: int | None = None,
               settings: dict | None = None) -> list[str]:
    """The load generator's arguments for one load point of the cell against a running
    server."""
    target = cell.server_config["target"]["name"]
    return loadgen.loadgen_argv(
        host=server.connect_host, port=server.port, served_name=target,
        tokenizer=specs.model_dir(config, target), dataset_path=cell.workload["path"],
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
    included), and the rest of the process's life (job start, imports, checks, stopping): of
    its life since the previous session of the same process ended, where one did (a job that
    runs several sessions one after another: each counts its own time once)."""

    previous_end: float | None = None  # when this process's last session split its time

    def __init__(self):
        try:
            self.process_started = psutil.Process().create_time()
        except psutil.Error:
            self.process_started = time.time()
        if Clock.previous_end is not None:
            self.process_started = max(self.process_started, Clock.previous_end)
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
        Clock.previous_end = time.time()
        wall = Clock.previous_end - self.process_started
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
        self.isolation = specs.isolation(run.cell.server_config)
        self.config_id = run.cell.config_id
        self.target = run.cell.server_config["target"]["name"]
        self.points = 0
        self.cells: set[str] = set()
        self.levels: set[int | None] = set()  # concurrencies measured on this server
        self.probes: dict[tuple, float] = {}
        self.profiled = run.cell.profile == "nsys"
        self.log_start = 0
        self.engine: dict = {}

    def launch(self) -> None:
        self.log_start = log_size(self.log_path)
        self.server.launch()

    def wait(self) -> None:
        """Wait until the server answers (it was launched), recording the start-up."""
        self.server.start()
        self.clock.startups.append((self.server.started_at, self.server.startup_s))
        self.clock.servers.append({"config": self.config_id, "target": self.target,
                                   "startup_s": round(self.server.startup_s, 3),
                                   "started_at": now(self.server.started_at)})
        # what vLLM resolved and warned about, from this start's part of its log
        self.engine = engine_report.read_log(self.log_path, self.log_start)
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

    def take(self, run: CellRun, pid: tuple, interleaved_with: list[str] = ()) -> None:
        """Measure one point of `run` and keep it (cache, partial records); CellError when it
        failed (the server is gone: the cell's later points are not attempted)."""
        measured = self.measure(run, pid, interleaved_with)
        run.add(pid, measured)
        record = measured["record"]
        load, repeat = run.plan[pid]
        run.report(load, repeat, record["status"], record["error"] or "", record["metrics"],
                   self.log_path)

    def warm_level(self, run: CellRun, load: dict, prompts: int, chosen: dict) -> None:
        """An untimed run of `prompts` of the workload's prompts at the point's concurrency
        (another seed than any repeat's: other prompts first), before the server's first point
        there; a failure shows in the point that follows."""
        settings_here = {**chosen, "num_warmups": 0,
                         "seed": chosen["seed"] + LEVEL_WARM_UP_SEED}
        t0 = time.perf_counter()
        try:
            loadgen.run_point(point_argv(run.cell, run.config, self.server, load,
                                         run.min_tokens, prompts, settings_here), log=run.log)
        except Exception as exc:  # the point that follows fails and says why
            print(f"[sdbench] warm-up at concurrency {load['concurrency']} failed: "
                  f"{type(exc).__name__}: {exc}", file=run.log, flush=True)
        self.clock.measuring_s += time.perf_counter() - t0

    def measure(self, run: CellRun, pid: tuple, interleaved_with: list[str] = ()) -> dict:
        """Measure one point of `run` on this server; the point's record and detail. A point
        that could not be measured is "failed" (the caller decides what follows)."""
        cell, config = run.cell, run.config
        load, repeat = run.plan[pid]
        error, result, argv, extra, num_prompts = None, {}, [], {}, None
        started, log_offset = now(), log_size(self.log_path)
        level = load.get("concurrency") if load["mode"] != "rate" else None
        chosen = point_settings(cell, repeat, warm_up=cell.cell_id not in self.cells,
                                ready_check=self.points == 0)
        wave = specs.level_warm_up(cell, None if level in self.levels else level)
        if wave:
            self.warm_level(run, load, wave, chosen)
        try:
            num_prompts, extra = run.num_prompts(load, lambda lv: self.probe(run, lv), repeat)
            argv = point_argv(cell, config, self.server, load, run.min_tokens, num_prompts,
                              chosen)
        except Exception as exc:  # a probe against a dead endpoint
            error = f"{type(exc).__name__}: {exc}"
        if argv and cell.cell_id not in self.cells:  # once per cell and server
            run.debug(f": load generator: vllm bench serve {shlex.join(argv)}")
        profiler = profiling.nsys_session(cell) if self.profiled else None
        interval_s = settings(config).cells.gpu_sample_interval_s
        t0 = time.perf_counter()
        with gpumon.GpuSampler(self.view.monitor_ids, interval_s=interval_s) as sampler, \
                (profiler.capture(load, repeat) if profiler else contextlib.nullcontext()):
            if error is None:
                try:
                    result = loadgen.run_point(argv, log=run.log, debug=debug_enabled())
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
        status, reason = point_status(metrics, error,
                                      settings(config).loadgen.max_failure_share)
        if status == "invalid":
            reason = with_causes(reason, detail, self.log_path, log_offset)
        server = self.server
        info = {"command": server.command, "port": server.port,
                "startup_s": server.startup_s, "started_at": now(server.started_at),
                "log": str(self.log_path), "gpus": self.view.gpu_ids,
                "placement": self.view.reason, "isolation": self.isolation,
                "instance": cell.instance_of(repeat, load), "session": self.session.session_id,
                # points this server measured before (any cell's: the server's state)
                "points_before": self.points, "warm_up": chosen["num_warmups"],
                "level_warm_up": wave, "engine": self.engine}
        if interleaved_with:  # measured in turn with these cells' servers
            info["interleaved_with"] = list(interleaved_with)
        if profiler:
            info["profile"] = str(profiler.report(load, repeat))
        self.points += 1
        self.cells.add(cell.cell_id)
        self.levels.add(level)
        record = run.record(load, repeat, metrics, status, reason, info,
                            {"argv": argv, "num_prompts": num_prompts,
                             "seed": chosen["seed"],
                             # the sampling seed each request carried (None: none)
                             "request_seed": loadgen.request_seed(chosen), **extra}, started)
        return {"record": record, "detail": detail}


def check_during_startup(run: CellRun) -> None:
    """What can be checked while the server starts: the cell's prompts against the target's
    context, with its own tokenizer and chat template."""
    checks.check_cell_context(run.config, run.cell)


def fail(run: CellRun, failed: dict, message: str) -> None:
    """Mark a cell not done in this session (with why), and say so in the log."""
    failed[run.cell_id] = message
    run.say(f": not done: {message.splitlines()[0]}")


def checked(run: CellRun, failed: dict, clock: Clock) -> None:
    """Run the checks made while a server starts, once per cell; a cell that fails them is
    not done."""
    if run.checked:
        return
    run.checked = True
    with clock.timed("checks while starting"):
        try:
            check_during_startup(run)
        except (ConfigError, CellError, OSError, ValueError) as exc:
            fail(run, failed, f"{type(exc).__name__}: {exc}")
