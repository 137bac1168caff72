"""How long Snakemake takes to parse the workflow: the dry run a user starts with, on
config/config.yaml and on a grid of about 2,000 cells (config/config.yaml with more k values,
written to a temporary file), and a cluster job's own parse (what a SLURM job pays, holding
its GPU, before its session starts: `--mode remote --target-jobs` of one session).

    .venv/bin/python scripts/parse_time.py [--runs 3]

Prints one line per case: cells, jobs and the best and median seconds of `--runs` runs. Goals
(issue 87): the dry run ≤ 5 s on config/config.yaml and ≤ 10 s on ~2,000 cells, on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# the wider grid: round 1 on three targets, its methods with k from 1 to 14 (config.yaml: 2-5)
WIDE_TARGETS = ["qwen2.5-7b-instruct", "qwen2.5-14b-instruct", "qwen2.5-32b-instruct"]
WIDE_K = {"ngram", "draft_model", "ngram_gpu", "eagle", "eagle3", "medusa"}


def wide_config(path: Path) -> Path:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["round1"]["targets"] = WIDE_TARGETS
    for method in config["round1"]["methods"]:
        if method["method"] in WIDE_K:
            method["k"] = list(range(1, 15))
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def timed(args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(SNAKEMAKE + args, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"snakemake {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def cells_of(config: Path) -> int:
    sys.path.insert(0, str(REPO / "src"))
    from sdbench.plan import design_choice, grid
    from sdbench.plan.config import load_config

    loaded = load_config(config)
    design_choice.resolve_design(loaded)
    return len(grid.cells_by_id(loaded))


def report(name: str, cells: int, runs: list[float], out: str = "") -> None:
    jobs = re.search(r"^total\s+(\d+)", out, re.M)
    print(f"{name}: {cells} cells{f', {jobs.group(1)} jobs' if jobs else ''}: best "
          f"{min(runs):.2f} s, median {statistics.median(runs):.2f} s ({len(runs)} runs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in (("config/config.yaml", REPO / "config" / "config.yaml"),
                             ("~2,000-cell grid", wide_config(Path(tmp) / "wide.yaml"))):
            dry = ["-n", "--configfile", str(config)]
            runs, out = [], ""
            for _ in range(args.runs):
                seconds, out = timed(dry)
                runs.append(seconds)
            report(f"dry run, {name}", cells_of(config), runs, out)
            session = re.search(r"session_id=([0-9a-f]{12}-[ic]\d+)", out).group(1)
            job = ["--configfile", str(config), "--mode", "remote", "--cores", "1", "-n",
                   "--target-jobs", f"session:session_id={session}", "--allowed-rules",
                   "session"]
            runs = [timed(job)[0] for _ in range(args.runs)]
            report(f"a session job's own parse, {name}", cells_of(config), runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
