"""Measure the workflow itself: its overhead, its fidelity to vLLM's own load generator, and
server start-up with a cold and a warm compile cache (docs/validation.md).

    python -m sdbench.measure.validation overhead --config C --cell ID --out overhead.json
    python -m sdbench.measure.validation fidelity --config C --cell ID --concurrency 16 \\
        --repeats 3 --out fidelity.json
    python -m sdbench.measure.validation startup --config C --cell ID --out startup.json

`overhead` measures the cell as the command line does (`cell.measure_cell`: its sessions serve
it alone; its cached points moved aside first) and splits its wall time into measuring (the
points' own start-to-finish times) and everything else (checks, server start and stop).
`fidelity` starts the cell's server once and alternates, at one concurrency, the workflow's
in-process load-generator call with a direct `vllm bench serve` run (a separate process:
`python -m vllm.entrypoints.cli.main bench serve`) with the same arguments. `startup` starts
the cell's server twice with fresh, then the same, compile caches (VLLM_CACHE_ROOT,
TRITON_CACHE_DIR).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from sdbench import layout
from sdbench.files import atomic_write_json
from sdbench.measure import cell as cellmod
from sdbench.measure import loadgen, provenance, run, server, slots
from sdbench.plan import grid, specs
from sdbench.plan.config import REPO_ROOT, load_config


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def overhead_split(records: list[dict], wall_s: float) -> dict:
    """Measuring vs the rest of one cell's wall time, per concurrency level too."""
    per_level: dict[int, float] = {}
    for record in records:
        prov = record["provenance"]
        per_level[record["concurrency"]] = (per_level.get(record["concurrency"], 0.0)
                                            + _seconds(prov["started_at"], prov["finished_at"]))
    measuring = sum(per_level.values())
    return {"wall_s": wall_s, "measuring_s": measuring, "other_s": wall_s - measuring,
            "measuring_share": measuring / wall_s if wall_s else None,
            "server_startup_s": records[0]["server"]["startup_s"] if records else None,
            "points": len(records), "measuring_s_by_concurrency": per_level}


def extrapolate_share(split: dict, prompts: int, to_prompts: int) -> float:
    """The measuring share if every point served `to_prompts` instead of `prompts` prompts
    (measuring time scales with the prompt count; start-up and stop do not)."""
    measuring = split["measuring_s"] * to_prompts / prompts
    return measuring / (measuring + split["other_s"])


def _cell(config_path: str, cell_id: str) -> tuple[dict, specs.Cell]:
    config = load_config(config_path)
    cells = grid.cells_by_id(config)
    if cell_id not in cells:
        raise SystemExit(f"no cell {cell_id!r} in {config_path}: "
                         + ", ".join(f"{c.cell_id} ({c.label})" for c in cells.values()))
    return config, cells[cell_id]


def overhead(args) -> dict:
    config, cell = _cell(args.config, args.cell)
    cached = Path(layout.POINTS_DIR) / cell.cell_id
    if cached.exists():  # measure every point again: keep the cache aside, do not lose it
        shutil.move(str(cached), f"{cached}.before-validation-{int(time.time())}")
    output = Path(args.workdir) / f"{cell.cell_id}.jsonl"
    started = time.monotonic()
    records = cellmod.measure_cell(cell, config, output)
    split = overhead_split(records, time.monotonic() - started)
    prompts = cell.workload["num_prompts"]
    split.update(cell_id=cell.cell_id, label=cell.label, prompts=prompts,
                 concurrency=list(cell.concurrency), repeats=cell.repeats,
                 output_throughput={f"c{r['concurrency']}-r{r['repeat']}":
                                    r["metrics"].get("output_throughput") for r in records})
    for n in args.extrapolate:
        split[f"measuring_share_at_{n}_prompts"] = extrapolate_share(split, prompts, n)
    return split


def fidelity(args) -> dict:
    config, cell = _cell(args.config, args.cell)
    min_tokens = run.check_workload(cell)
    workdir = Path(args.workdir)
    rows = []
    with slots.held(specs.cell_gpus(cell.server_config)) as held, server.cell_server(
            cell, config, workdir / f"{cell.cell_id}.fidelity.server.log", held.env) as srv:
        argv = server.point_argv(cell, config, srv, {"mode": "concurrency",
                                                      "concurrency": args.concurrency},
                                  min_tokens)
        direct = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", *argv,
                  "--save-result", "--result-dir", str(workdir),
                  "--result-filename", "fidelity-direct.json"]
        for repeat in range(args.repeats):
            # alternate which runs first: the first point after start-up runs slower
            for who in ("workflow", "direct") if repeat % 2 == 0 else ("direct", "workflow"):
                if who == "workflow":
                    with open(workdir / "fidelity-loadgen.log", "a") as log:
                        ours = loadgen.run_point(argv, log=log)
                    continue
                with open(workdir / "fidelity-direct.log", "a") as log:
                    subprocess.run(direct, check=True, stdout=log, stderr=subprocess.STDOUT)
                theirs = json.loads((workdir / "fidelity-direct.json").read_text())
            rows.append({"repeat": repeat, "first": "workflow" if repeat % 2 == 0 else "direct", **{
                f"{who}_{metric}": result.get(metric)
                for who, result in (("workflow", ours), ("direct", theirs))
                for metric in ("output_throughput", "total_token_throughput", "completed",
                               "total_output_tokens")}})
    out = {"cell_id": cell.cell_id, "label": cell.label, "concurrency": args.concurrency,
           "prompts": cell.workload["num_prompts"], "direct_command": direct, "rows": rows}
    for metric in ("output_throughput", "total_token_throughput"):
        ours = statistics.mean(r[f"workflow_{metric}"] for r in rows)
        theirs = statistics.mean(r[f"direct_{metric}"] for r in rows)
        out[f"{metric}_workflow_mean"], out[f"{metric}_direct_mean"] = ours, theirs
        out[f"{metric}_difference"] = ours / theirs - 1
    return out


def startup(args) -> dict:
    config, cell = _cell(args.config, args.cell)
    root = Path(tempfile.mkdtemp(prefix="sdbench-cache-"))
    env = {"VLLM_CACHE_ROOT": str(root / "vllm"), "TRITON_CACHE_DIR": str(root / "triton")}
    times = {}
    for name in ("cold", "warm"):
        log = Path(args.workdir) / f"{cell.cell_id}.startup-{name}.server.log"
        with slots.held(specs.cell_gpus(cell.server_config)) as held, server.cell_server(
                cell, config, log, {**env, **held.env}) as started:
            times[f"{name}_startup_s"] = started.startup_s
    shutil.rmtree(root, ignore_errors=True)
    return {"cell_id": cell.cell_id, "label": cell.label, "cache_env": list(env), **times}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.measure.validation",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["overhead", "fidelity", "startup"])
    parser.add_argument("--config", required=True)
    parser.add_argument("--cell", required=True)
    parser.add_argument("--out", required=True, help="JSON file for the numbers")
    parser.add_argument("--workdir", default=layout.VALIDATION_DIR)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--extrapolate", type=int, nargs="*", default=[480, 1024],
                        help="prompt counts to extrapolate the measuring share to")
    args = parser.parse_args(argv)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    result = {"overhead": overhead, "fidelity": fidelity, "startup": startup}[args.what](args)
    environment = provenance.environment(str(REPO_ROOT))
    result.update(command=" ".join(["python -m sdbench.measure.validation",
                                    *(argv or sys.argv[1:])]),
                  at=datetime.now().astimezone().isoformat(timespec="seconds"),
                  vllm=environment["vllm"], device=environment["device"])
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

