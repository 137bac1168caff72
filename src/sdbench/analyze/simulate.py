"""Studies with known true speedups, simulated through the code the reports use
(`noise.point_noise`): how often each design's interval covers the truth, how often it calls a
true gain "speculate", and whether the minimum detectable effect it states is right.

A simulated study is one class of points (the same engine, target, method and level): a
method at `ks` values of k on `workloads` workloads, each workload with its own vanilla
baseline shared by its k values, all at one concurrency. Log throughputs are

    log T = log(true level) + (the server instance's offset) + (the measurement's noise),

both normal, with standard deviations `instance_noise` and `measurement_noise` (on the log
scale: 0.05 is about 5 %), on both sides; repeat r runs on instance r mod n of its server.

`python -m sdbench.analyze.simulate` runs the full grid and writes docs/precision-simulation.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sdbench.analyze.noise import point_noise

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Design:
    repeats: int
    instances: int  # server instances of each speculative cell
    baseline_instances: int  # of each baseline (at least the most of its pairs)
    instance_noise: float
    measurement_noise: float
    workloads: int = 2
    ks: int = 2

    @property
    def label(self) -> str:
        return (f"{self.repeats} repeats, {self.instances} instance(s) "
                f"(baseline {self.baseline_instances}), instance noise "
                f"{self.instance_noise:.0%}, measurement noise {self.measurement_noise:.0%}")


def study_frame(design: Design, speedup: float, rng: np.random.Generator) -> pd.DataFrame:
    """The per-measurement rows of one simulated study (the columns `point_noise` reads)."""
    rows = []
    d = design
    for w in range(d.workloads):
        base_offset = rng.normal(0, d.instance_noise, d.baseline_instances)
        base_noise = rng.normal(0, d.measurement_noise, d.repeats)
        for k in range(d.ks):
            offset = rng.normal(0, d.instance_noise, d.instances)
            noise = rng.normal(0, d.measurement_noise, d.repeats)
            for r in range(d.repeats):
                log_ratio = (np.log(speedup) + offset[r % d.instances] + noise[r]
                             - base_offset[r % d.baseline_instances] - base_noise[r])
                rows.append({"cell_id": f"w{w}k{k}", "concurrency": 1, "request_rate": np.nan,
                             "repeat": r, "baseline_cell_id": f"w{w}", "engine": "serve",
                             "target": "t", "method": "m",
                             "load": "concurrency", "speedup": float(np.exp(log_ratio)),
                             "server_instance": r % d.instances,
                             "baseline_server_instance": r % d.baseline_instances})
    return pd.DataFrame(rows)


def run_design(design: Design, speedup: float, studies: int, seed: int = 0) -> dict:
    """Coverage of the true speedup, the share of points called "speculate", the median
    minimum detectable effect stated, and what the intervals say they cover."""
    rng = np.random.default_rng(seed)
    covered, called, mde, covers = [], [], [], set()
    for _ in range(studies):
        noise = point_noise(study_frame(design, speedup, rng))
        covered += list((noise["low"] <= speedup) & (noise["high"] >= speedup))
        called += list(noise["low"] > 1)
        mde += list(noise["mde"])
        covers |= {c.split(";")[0] for c in noise["covers"]}
    return {**asdict(design), "speedup": speedup, "studies": studies,
            "coverage": float(np.mean(covered)), "called": float(np.mean(called)),
            "mde": float(np.nanmedian(mde)), "covers": "; ".join(sorted(covers))}


def power_at_mde(design: Design, studies: int, seed: int = 0) -> dict:
    """The share of studies whose points are called "speculate" when the true speedup is the
    minimum detectable effect the design states (its median over studies with no gain)."""
    stated = run_design(design, 1.0, studies, seed)["mde"]
    return {"stated_mde": stated,
            "power": run_design(design, stated, studies, seed + 1)["called"]}


def _design_rows(design: Design, studies: int) -> list[dict]:
    rows = [run_design(design, speedup, studies) for speedup in (1.0, 1.1, 1.5)]
    rows[-1].update(power_at_mde(design, studies))
    return rows


def grid(studies: int, workers: int | None = None) -> pd.DataFrame:
    designs = [
        # one speculative instance: its baseline on two (which the model borrows from)
        Design(repeats, instances, 2 if instances == 1 else instances, inst_noise, meas_noise)
        for repeats, instances, inst_noise, meas_noise in itertools.product(
            (2, 3, 5), (1, 2, 3, 5), (0.0, 0.05), (0.02, 0.10))
        if instances <= repeats]
    with ProcessPoolExecutor(workers or os.cpu_count()) as pool:
        done = pool.map(_design_rows, designs, [studies] * len(designs))
        return pd.DataFrame([row for rows in done for row in rows])


def write_table(table: pd.DataFrame, path: Path, studies: int) -> None:
    lines = ["# Precision of the speedup intervals: simulated coverage and power", "",
             f"Generated by `python -m sdbench.analyze.simulate` ({studies} simulated studies "
             "per row; `sdbench.analyze.simulate` says how a study is simulated). "
             "Coverage: the share of 95 % intervals that contain the true speedup. Called: the "
             "share of points whose verdict is \"speculate\". MDE: the median minimum "
             "detectable speedup the design states (80 % power); power at MDE: the share "
             "called \"speculate\" when the true speedup is that MDE.", "",
             "| repeats | instances (baseline) | instance noise | measurement noise | "
             "true speedup | coverage | called | MDE | power at MDE | interval covers |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in table.to_dict("records"):
        power = row.get("power")
        lines.append(
            f"| {row['repeats']} | {row['instances']} ({row['baseline_instances']}) | "
            f"{row['instance_noise']:.0%} | {row['measurement_noise']:.0%} | "
            f"{row['speedup']:.2f} | {row['coverage']:.1%} | {row['called']:.1%} | "
            f"{row['mde']:.3f} | {'' if power is None or pd.isna(power) else f'{power:.1%}'} "
            f"| {row['covers']} |")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=500)
    parser.add_argument("--out", default=str(REPO / "docs" / "precision-simulation.md"))
    args = parser.parse_args(argv)
    write_table(grid(args.studies), Path(args.out), args.studies)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
