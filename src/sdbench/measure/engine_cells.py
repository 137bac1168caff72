"""Sessions of cells measured without a server: vLLM's offline engine and the Transformers
reference. One child process per session (`python -m sdbench.measure.engines <job.json>`, in
its own process group, stopped whatever happens) loads the engine once and measures every due
point of every cell of the session, writing one file per point; this side turns each into a
record with the GPU energy of its window.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sdbench import layout
from sdbench.logcause import error_cause
from sdbench.measure import engine_report, engines, gpumon, points, slots, stopping
from sdbench.measure.run import CellRun, log_size, now, point_status, run_args
from sdbench.measure.server import Clock, speculative_config
from sdbench.measure.serving import VllmServer, job_thread_env, log_tail
from sdbench.plan import hostcaps, specs
from sdbench.plan.sessions import Session
from sdbench.plan.settings import settings
from sdbench.records import LoadPoint


def engine_job(runs: list[CellRun], out_dir: str | Path) -> dict:
    """What the child process needs (see sdbench.measure.engines): the engine, once, and per
    cell its prompts and the points to measure."""
    cell, config = runs[0].cell, runs[0].config
    server_cfg, point_loadgen = cell.server_config, cell.workload["loadgen"]
    draft = server_cfg["draft"]
    return {"engine": cell.engine,
            "target_dir": specs.model_dir(config, server_cfg["target"]["name"]),
            "draft_dir": None if draft is None else specs.model_dir(config, draft["name"]),
            "speculative_config": speculative_config(cell, config),
            "args": run_args(cell, config, runs[0].verdict), "method": server_cfg["method"],
            "k": server_cfg["num_speculative_tokens"], "options": server_cfg["method_options"],
            "temperature": point_loadgen["temperature"], "endpoint": point_loadgen["endpoint"],
            "num_warmups": point_loadgen["num_warmups"],
            "ignore_eos": bool(point_loadgen.get("ignore_eos")),
            "gated": any(run.stops is not None for run in runs),
            "cells": [{"prompts": run.cell.workload["path"],
                       "num_prompts": run.cell.workload["num_prompts"],
                       "shuffle": run.cell.workload["shuffle"],
                       "seed": run.cell.workload["loadgen"]["seed"],
                       "plan": [{**run.plan[pid][0], "repeat": run.plan[pid][1],
                                 "seed": points.repeat_seed(run.cell, run.plan[pid][1])}
                                for pid in run.missing]}
                      for run in runs],
            "out_dir": str(out_dir)}


def child_env(cell: specs.Cell, held: slots.Slots) -> dict[str, str]:
    """The child's environment beside its own: the server's (vLLM's offline engine; none for
    the Transformers reference, `specs.server_config`), the host's ISA choice and the held GPUs;
    the Transformers reference also keeps the job's thread count (`serving.job_thread_env`: the
    cell's `threads`), which vLLM's engine sets for itself. Without it torch took every core:
    beside a vLLM server on 2 shared cores its two OpenMP threads measured 0.4-0.9 output tok/s
    against 9.3 in a quiet moment of the same run (2026-12-02, the end-to-end run)."""
    threads = job_thread_env() if cell.engine == specs.TRANSFORMERS else {}
    return {**cell.server_config["env"], **hostcaps.isa_env(), **held.env, **threads}


def child_command(job_path: Path) -> list[str]:
    """The child process that measures a job (`sdbench.measure.engines`)."""
    return [sys.executable, "-m", "sdbench.measure.engines", str(job_path)]


def measure_engine(session: Session, runs: list[CellRun], held: slots.Slots, clock: Clock,
                   failed: dict) -> None:
    """One child process for the session's due cells; every point it finished is kept, and a
    cell it did not finish is not done (with the child's error). Under the adaptive rule (a
    cell's `stops`) the child is gated: before each point this side reads the points before it
    and tells the child whether to measure it or records the rule's stop (`stopping.skipped`)."""
    server_log = layout.session_server_log(session.session_id, session.lead)
    Path(layout.CELLS_DIR).mkdir(parents=True, exist_ok=True)
    out_dir = Path(tempfile.mkdtemp(prefix=f".{session.session_id}.", dir=layout.CELLS_DIR))
    for run in runs:  # the order the rule needs (as planned without it)
        run.missing = stopping.measuring_order(run, run.missing)
    try:
        job_path = out_dir / "job.json"
        job = engine_job(runs, out_dir)
        job_path.write_text(json.dumps(job))
        command = child_command(job_path)
        log_offset = log_size(server_log)
        cell = runs[0].cell
        typed = settings(runs[0].config)
        runner = VllmServer(lambda _port: command, host=typed.server.host,
                            log_path=server_log, env=child_env(cell, held),
                            stop_timeout_s=typed.server.stop_timeout_s)
        interval_s = typed.cells.gpu_sample_interval_s
        started = time.time()
        windows: list = []
        engine: dict = {}  # what the engine resolved: its log, read at its first point
        due = [(index, number) for index, run in enumerate(runs)
               for number in range(len(run.missing))]
        with gpumon.GpuSampler(held.monitor_ids, interval_s) as sampler:
            def take(index: int, number: int, code: int | None) -> bool:
                """The child's point `number` of cell `index` as a record (False: the child
                did not finish it, and the cell is not done)."""
                run = runs[index]
                pid = run.missing[number]
                load, repeat = run.plan[pid]
                path = engines.point_file(out_dir, index, number)
                if not path.exists():
                    cause = error_cause(server_log, since=log_offset) or "no error in its log"
                    failed[run.cell_id] = (
                        f"cell {run.cell_id} ({run.cell.label}), "
                        f"{LoadPoint.of_load(load, repeat).label}: the {run.cell.engine} run "
                        f"exited with code {code} before finishing it: {cause} (log: "
                        f"{server_log})\nLast lines of {server_log}:\n{log_tail(server_log, 15)}")
                    return False
                result = json.loads(path.read_text())
                metrics, detail = result["metrics"], result["detail"]
                windows.append(metrics["window_perf_counter"])
                # energy over the point's own window (the child's clock is the sampler's)
                metrics.update(sampler.window_metrics(*metrics["window_perf_counter"],
                                                      metrics["total_output_tokens"]))
                status, reason = point_status(metrics, None, typed.loadgen.max_failure_share)
                # the child's window (host monotonic clock) as wall-clock times of this point
                offset = time.time() - time.perf_counter()
                start, end = (now(t + offset) for t in metrics["window_perf_counter"])
                # what the engine resolved (vLLM's offline engine logs as its server does, before
                # its first point; the Transformers reference logs none of it)
                if not engine:
                    engine.update(engine_report.read_log(server_log, log_offset))
                info = {"command": command, "port": None, "startup_s": None,
                        "log": str(server_log), "gpus": held.gpu_ids,
                        "placement": held.reason, "instance": run.cell.instance_of(repeat),
                        "session": session.session_id, "engine": engine}
                record = run.record(load, repeat, metrics, status, reason, info,
                                    {"engine": run.cell.engine,
                                     "batch_size": load["concurrency"],
                                     "seed": points.repeat_seed(run.cell, repeat)}, start, end)
                run.add(pid, {"record": record, "detail": detail})
                run.report(load, repeat, status, reason, metrics, server_log)
                return True

            try:
                if job["gated"]:
                    runner.launch()
                    code = _follow(runner, runs, due, out_dir, sampler, take)
                else:
                    code = runner.run_to_completion()
                    for index in range(len(runs)):
                        for number in range(len(runs[index].missing)):
                            if not take(index, number, code):
                                break
            finally:
                runner.stop()
        # the engine's start: from the launch to its first point (measuring: the points)
        measured = sum(end - begin for begin, end in windows)
        clock.measuring_s += measured
        if windows:
            first = min(w[0] for w in windows) + time.time() - time.perf_counter()
            clock.startups.append((started, max(first - started, 0.0)))
            clock.servers.append({"config": session.lead, "engine": cell.engine,
                                  "target": cell.server_config["target"]["name"],
                                  "startup_s": round(max(first - started, 0.0), 3),
                                  "started_at": now(started)})
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _follow(runner: VllmServer, runs: list[CellRun], due: list[tuple[int, int]],
            out_dir: Path, sampler: gpumon.GpuSampler, take, poll_s: float = 0.05) -> int:
    """A gated child, point by point in the job's order: the rule's stop recorded (the child
    skips the point) or the point measured and taken (`take`, once the GPU sampler has a
    sample past its window). Returns the child's exit code."""
    done: set[int] = set()  # cells whose point the child did not finish
    for index, number in due:
        run = runs[index]
        pid = run.missing[number]
        measure = index not in done and not stopping.skipped(run, pid, now())
        tell = engines.go_file(out_dir, index, number)
        tmp = tell.with_suffix(".tmp")
        tmp.write_text(json.dumps({"measure": measure}))
        tmp.rename(tell)
        if not measure:
            continue
        path = engines.point_file(out_dir, index, number)
        while not path.exists() and runner.alive():
            time.sleep(poll_s)
        if path.exists():
            ended = json.loads(path.read_text())["metrics"]["window_perf_counter"][1]
            waited = 0.0
            while (sampler.available and sampler.samples[-1][0] < ended
                   and waited < 20 * sampler.interval_s):
                time.sleep(sampler.interval_s)
                waited += sampler.interval_s
        if not take(index, number, runner.proc.poll()):
            done.add(index)  # (the child is gone: each cell left is not done, with its error)
    return runner.proc.wait()
