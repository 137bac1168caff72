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
from sdbench.measure import engine_report, engines, gpumon, points, slots
from sdbench.measure.run import CellRun, log_size, now, point_status, run_args
from sdbench.measure.server import Clock, speculative_config
from sdbench.measure.serving import VllmServer, log_tail
from sdbench.plan import grid, hostcaps
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
            "target_dir": grid.model_dir(config, server_cfg["target"]["name"]),
            "draft_dir": None if draft is None else grid.model_dir(config, draft["name"]),
            "speculative_config": speculative_config(cell, config),
            "args": run_args(cell, config, runs[0].verdict), "method": server_cfg["method"],
            "k": server_cfg["num_speculative_tokens"], "options": server_cfg["method_options"],
            "temperature": point_loadgen["temperature"], "endpoint": point_loadgen["endpoint"],
            "num_warmups": point_loadgen["num_warmups"],
            "ignore_eos": bool(point_loadgen.get("ignore_eos")),
            "cells": [{"prompts": run.cell.workload["path"],
                       "num_prompts": run.cell.workload["num_prompts"],
                       "shuffle": run.cell.workload["shuffle"],
                       "seed": run.cell.workload["loadgen"]["seed"],
                       "plan": [{**run.plan[pid][0], "repeat": run.plan[pid][1],
                                 "seed": points.repeat_seed(run.cell, run.plan[pid][1])}
                                for pid in run.missing]}
                      for run in runs],
            "out_dir": str(out_dir)}


def measure_engine(session: Session, runs: list[CellRun], held: slots.Slots, clock: Clock,
                   failed: dict) -> None:
    """One child process for the session's due cells; every point it finished is kept, and a
    cell it did not finish is not done (with the child's error)."""
    server_log = layout.session_server_log(session.session_id, session.lead)
    Path(layout.CELLS_DIR).mkdir(parents=True, exist_ok=True)
    out_dir = Path(tempfile.mkdtemp(prefix=f".{session.session_id}.", dir=layout.CELLS_DIR))
    try:
        job_path = out_dir / "job.json"
        job_path.write_text(json.dumps(engine_job(runs, out_dir)))
        command = [sys.executable, "-m", "sdbench.measure.engines", str(job_path)]
        log_offset = log_size(server_log)
        cell = runs[0].cell
        typed = settings(runs[0].config)
        runner = VllmServer(lambda _port: command, host=typed.server.host,
                            log_path=server_log, env={**cell.server_config["env"],
                                                      **hostcaps.isa_env(), **held.env},
                            stop_timeout_s=typed.server.stop_timeout_s)
        interval_s = typed.cells.gpu_sample_interval_s
        started = time.time()
        with gpumon.GpuSampler(held.monitor_ids, interval_s) as sampler:
            try:
                code = runner.run_to_completion()
            finally:
                runner.stop()
        windows = []
        # what the engine resolved (vLLM's offline engine logs as its server does; the
        # Transformers reference logs none of it)
        engine = engine_report.read_log(server_log, log_offset)
        for index, run in enumerate(runs):
            for number, pid in enumerate(run.missing):
                load, repeat = run.plan[pid]
                path = engines.point_file(out_dir, index, number)
                if not path.exists():
                    cause = error_cause(server_log, since=log_offset) or "no error in its log"
                    failed[run.cell_id] = (
                        f"cell {run.cell_id} ({run.cell.label}), "
                        f"{LoadPoint.of_load(load, repeat).label}: the {run.cell.engine} run "
                        f"exited with code {code} before finishing it: {cause} (log: "
                        f"{server_log})\nLast lines of {server_log}:\n{log_tail(server_log, 15)}")
                    break
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
