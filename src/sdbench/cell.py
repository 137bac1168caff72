"""Run one cell: one vLLM server, the concurrency sweep, one record per point.

Records are appended to `<output>.partial` as each point finishes and the file is renamed onto
`<output>` only when every point succeeded, so a failed or interrupted cell never leaves an
output that looks complete. The server's whole process group is stopped whatever happens,
SIGTERM/SIGINT to this process included.

Run one cell without Snakemake:

    python -m sdbench.cell --config config/demo.yaml --list
    python -m sdbench.cell --config config/demo.yaml --cell <cell_id>
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import signal
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from . import grid, loadgen, models, provenance
from .config import REPO_ROOT, VANILLA, load_config
from .files import append_jsonl, sha256_file
from .serving import ServerError, VllmServer, server_command

RECORD_SCHEMA = "sdbench.record/1"


class CellError(RuntimeError):
    """The cell could not complete; the message says which point and why."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT received: unwind (stopping the server) and exit."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def requests_output(output: str | Path) -> Path:
    """Sidecar with the per-request detail (texts, latencies) of every point of a cell."""
    output = Path(output)
    return output.with_name(output.name.removesuffix(".jsonl") + ".requests.jsonl.gz")


def speculative_config(cell: grid.Cell, config: dict) -> dict | None:
    server = cell.server_config
    if server["method"] == VANILLA:
        return None
    spec = {"method": server["method"], "num_speculative_tokens": server["num_speculative_tokens"],
            **server["method_options"]}
    if server["draft"] is not None:
        spec["model"] = grid.model_dir(config, server["draft"]["name"])
    return spec


def check_workload(cell: grid.Cell) -> int | None:
    """Check the prompt file can serve the workload; return its forced output length if any."""
    path = cell.workload["path"]
    if not Path(path).is_file():
        raise CellError(f"workload {cell.workload['name']!r}: prompt file {path} does not exist")
    available, min_tokens = loadgen.prompt_file_facts(path)
    if available < cell.workload["num_prompts"]:
        raise CellError(
            f"workloads.{cell.workload['name']}.num_prompts = {cell.workload['num_prompts']}: "
            f"{path} has only {available} prompts (prompts are never repeated to fill a point)")
    if len(min_tokens) > 1:
        raise CellError(f"{path}: prompts force different output lengths {sorted(min_tokens)}; "
                        "the load generator can force one per point")
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
             server_log: str | Path, log=None) -> list[dict]:
    """Measure every concurrency point of `cell`; write records to `output` (JSONL)."""
    output = Path(output)
    partial = output.with_name(output.name + ".partial")
    detail_out = requests_output(output)
    detail_partial = detail_out.with_name(detail_out.name + ".partial")
    for stale in (partial, detail_partial):
        stale.unlink(missing_ok=True)

    min_tokens = check_workload(cell)
    log = log or sys.stderr
    server_cfg = cell.server_config
    target = server_cfg["target"]["name"]
    target_dir = grid.model_dir(config, target)
    spec = speculative_config(cell, config)
    settings = cell.workload["loadgen"]
    srv = config["server"]

    environment = provenance.environment(str(REPO_ROOT))  # the workflow's own checkout
    dataset = {"path": cell.workload["path"], "sha256": sha256_file(cell.workload["path"])}
    model_cards = {"target": {"path": target_dir, "card": models.read_card(target_dir)}}
    if server_cfg["draft"] is not None:
        model_cards["draft"] = {"path": spec["model"], "card": models.read_card(spec["model"])}

    def build(port: int) -> list[str]:
        return server_command(target_dir, target, srv["host"], port, server_cfg["args"], spec)

    records: list[dict] = []
    with _signals_raise(), VllmServer(build, host=srv["host"], log_path=server_log,
                                      env=server_cfg["env"],
                                      startup_timeout_s=srv["startup_timeout_s"],
                                      stop_timeout_s=srv["stop_timeout_s"]) as server:
        print(f"[sdbench] cell {cell.cell_id} ({cell.label}): server ready on port "
              f"{server.port} after {server.startup_s:.1f} s", file=log, flush=True)
        for concurrency in cell.concurrency:
            argv = loadgen.loadgen_argv(
                host=server.connect_host, port=server.port,
                served_name=target, tokenizer=target_dir, dataset_path=cell.workload["path"],
                num_prompts=cell.workload["num_prompts"], concurrency=concurrency,
                settings=settings, shuffle=cell.workload["shuffle"], min_tokens=min_tokens)
            started = _now()
            error = None
            try:
                result = loadgen.run_point(argv, log=log)
            except Exception as exc:  # the load generator raises on a dead endpoint
                result, error = {}, f"{type(exc).__name__}: {exc}"
            if error is None and not server.alive():
                error = "the vLLM server exited during the point"
            metrics, detail = loadgen.split_result(result)
            record = {
                "schema": RECORD_SCHEMA,
                "cell_id": cell.cell_id,
                "round": cell.round,
                "speculator": cell.speculator,
                "baseline_cell_id": cell.baseline_cell_id,
                "server_config": server_cfg,
                "workload": cell.workload,
                "concurrency": concurrency,
                "repeat": 0,
                "status": "ok" if error is None else "failed",
                "error": error,
                "metrics": metrics,
                "server": {"command": server.command, "port": server.port,
                           "startup_s": server.startup_s, "log": str(server_log)},
                "loadgen": {"argv": argv},
                "provenance": {**environment, "models": model_cards, "dataset": dataset,
                               "started_at": started, "finished_at": _now()},
            }
            append_jsonl(partial, record)
            with gzip.open(detail_partial, "at", encoding="utf-8") as fh:
                fh.write(json.dumps({"cell_id": cell.cell_id, "concurrency": concurrency,
                                     "repeat": 0, **detail}) + "\n")
            records.append(record)
            if error is not None:
                raise CellError(f"cell {cell.cell_id} ({cell.label}), concurrency {concurrency}: "
                                f"{error}; later points were not attempted. Server log: "
                                f"{server_log}")
            print(f"[sdbench] cell {cell.cell_id} c={concurrency}: "
                  f"{metrics.get('total_token_throughput', float('nan')):.1f} tok/s total, "
                  f"{metrics.get('completed')} completed, {metrics.get('failed')} failed",
                  file=log, flush=True)
    os.replace(detail_partial, detail_out)
    os.replace(partial, output)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.cell", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="workflow config (YAML)")
    parser.add_argument("--cell", help="cell id to run (see --list)")
    parser.add_argument("--list", action="store_true", help="list the cells of the config")
    parser.add_argument("--output", help="records file (default results/cells/<id>.jsonl)")
    parser.add_argument("--server-log", help="server log (default logs/cells/<id>.server.log)")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    cells = grid.cells_by_id(config)
    if args.list or not args.cell:
        for cell in cells.values():
            print(f"{cell.cell_id}  {cell.label}")
        return 0
    if args.cell not in cells:
        parser.error(f"no cell {args.cell!r} in {args.config} (use --list)")
    output = args.output or grid.cell_output(args.cell)
    server_log = args.server_log or f"logs/cells/{args.cell}.server.log"
    try:
        run_cell(cells[args.cell], config, output, server_log=server_log)
    except (CellError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 130
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
