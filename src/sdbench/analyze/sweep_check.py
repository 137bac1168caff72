"""The adaptive design judged by the summary's own intervals: simulated round 1 classes measured
in full and adaptively on the same draws (`sdbench.plan.sweeps`, the rule the sessions apply),
each design's runs put through `point_intervals.with_pooled_intervals` as the summary stage puts a
study's records, so that what a verdict reads is what the reports would read.

A study is one method's `ks` values of k on `workloads` workloads (each its own sweep: the
rule's group is one workload's cells) at 10 concurrency levels, 3 repeats, measured as
config/config.yaml's served cells are: chained (every repeat on a server start of its own, the
levels of one depth of the level tree on the same start, the baseline's start shared by every
k and workload, a k's by its workloads), a repeat split into blocks of prompts at the low
levels, concurrency 1 quieter and its own prior. Each workload's true speedups are the sweep
family's surface at a shift of its own. Each run's log speedup is the truth plus both sides'
start offsets (sd `instance_noise`) and runs (sd `measurement_noise`, the baseline's shared by
the k values), level by level scaled as the sweep says.

The full design measures every whole repeat; the adaptive one what the rule measures, each
point's interval the repeated confidence interval at the look it stopped (`aggregate.
_sequential_factor`), pooled with the rule's priors. `python -m sdbench.analyze.sweep_check`
runs the table and writes its part of docs/adaptive-simulation.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.analyze.point_intervals import INTERVAL_STOPS, with_pooled_intervals
from sdbench.analyze.stats import verdict
from sdbench.plan import adaptive, sweeps

REPO = Path(__file__).resolve().parents[3]
# config/config.yaml's shape (`sweeps`): a repeat's cost halving level by level, blocks of
# prompts at the low levels, concurrency 1 quieter, chained
SHAPE = dict(weights=sweeps.WEIGHTS, blocks=sweeps.BLOCKED, scales=sweeps.QUIET, chained=True)


@dataclass(frozen=True)
class Study:
    instance_noise: float
    measurement_noise: float
    prior_scale: float = 1.0
    workloads: int = 7
    ks: int = 5

    @property
    def sweep(self) -> sweeps.Sweep:
        return sweeps.Sweep(self.instance_noise, self.measurement_noise, ks=self.ks,
                            prior_scale=self.prior_scale, **SHAPE)

    @property
    def label(self) -> str:
        return (f"instance noise {self.instance_noise:.0%}, run noise "
                f"{self.measurement_noise:.0%}, prior × {self.prior_scale:g}")


def _stages(sweep: sweeps.Sweep, rule: adaptive.Rule) -> np.ndarray:
    """levels x looks: the chained start of each look (its depth's repeats' starts)."""
    tree = adaptive.level_tree(sweep.levels, rule.coarse)
    most = max(sweep.looks(i) for i in range(sweep.levels))
    return np.array([tree[i][0] * sweep.repeats + sweep.instances(i, most)
                     for i in range(sweep.levels)])


def draw(study: Study, rule: adaptive.Rule, rng: np.random.Generator
         ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """(per workload: its true log speedups ks x levels, its looks ks x levels x looks; the
    looks' starts levels x looks)."""
    sweep = study.sweep
    on = _stages(sweep, rule)
    most = on.shape[1]
    starts = int(on.max()) + 1
    spec = rng.normal(0, study.instance_noise, (sweep.ks, starts))
    base = rng.normal(0, study.instance_noise, starts)
    block = np.sqrt([sweep.block(i) for i in range(sweep.levels)])[:, None]
    level = np.array([sweep.scale(i) for i in range(sweep.levels)])[:, None]
    truths, looks = [], []
    for _ in range(study.workloads):
        mu = sweeps.truth(sweep, rng.uniform(-0.15, 0.3))
        shared = rng.normal(0, study.measurement_noise, (sweep.levels, most)) * block
        own = rng.normal(0, study.measurement_noise, (sweep.ks, sweep.levels, most)) * block
        y = mu[:, :, None] + ((spec[:, on] - base[on][None]) * level[None]
                              + (own - shared[None]) * level[None])
        truths.append(mu)
        looks.append(y)
    return truths, looks, on


def _row(w: int, k: int, i: int, repeat: int, y: float, stage: int) -> dict:
    return {"cell_id": f"w{w}k{k}", "baseline_cell_id": f"w{w}",
            "concurrency": sweeps.Sweep.concurrency(i), "request_rate": np.nan,
            "repeat": repeat, "engine": "serve", "target": "t", "method": "m",
            "load": "concurrency", "workload": f"w{w}", "speculator": "m", "k": k + 1,
            "paired": True, "status": "ok", "speedup": math.exp(y),
            "server_instance": stage, "baseline_server_instance": stage,
            "config_id": f"S{k}", "baseline_config_id": "B",
            "server_started_at": f"S{k}@{stage}", "baseline_server_started_at": f"B@{stage}"}


def _points(frame: pd.DataFrame, factors: dict, rule: adaptive.Rule | None,
            blocks: dict, stops: dict | None = None) -> pd.DataFrame:
    """The points table of `frame` as the summary stage writes it (`with_pooled_intervals`):
    each point measured under `rule` with its repeated confidence interval's factor, and where
    it stopped before the cap the interval it stopped on (`stops`: point -> the rule's look
    there, `point_intervals._stop_interval`)."""
    keys = ["cell_id", "concurrency", "request_rate", "target", "workload", "speculator", "k",
            "method", "engine", "load"]
    points = frame.groupby(keys, dropna=False, sort=False)["speedup"].apply(
        lambda s: float(np.exp(np.log(s).mean()))).rename("speedup_mean").reset_index()
    stored = None if rule is None else json.dumps(rule.to_dict())
    points = points.assign(
        speedup_ci_low=np.nan, speedup_ci_high=np.nan, interval_covers="",
        sequential_factor=[factors.get((c, int(level)), 1.0) for c, level in zip(
            points["cell_id"], points["concurrency"], strict=True)],
        adaptive=stored, blocks=[blocks.get(int(level), 1) for level in points["concurrency"]],
        stop_interval=[_stopped((stops or {}).get((c, int(level)))) for c, level in zip(
            points["cell_id"], points["concurrency"], strict=True)])
    out = with_pooled_intervals(points, frame)
    out["verdict"] = [verdict(lo, hi) for lo, hi in zip(out["speedup_ci_low"],
                                                         out["speedup_ci_high"], strict=True)]
    return out.set_index(["cell_id", "concurrency"])


def _stopped(look: adaptive.Look | None) -> str | None:
    """A look the rule stopped at before the cap, as the summary reads it from the stop
    (`point_intervals._stop_interval`)."""
    if look is None or look.reason not in INTERVAL_STOPS or look.n >= look.looks:
        return None
    return json.dumps({"mean_log": look.mean, "half_log": look.half, "sigma": look.sigma,
                       "df": None if not math.isfinite(look.df) else look.df,
                       "repeats": look.n, "reason": look.reason})


def one_study(study: Study, rule: adaptive.Rule, rng: np.random.Generator) -> dict:
    sweep = study.sweep
    prior = sweep.prior(rule)
    truths, looks, on = draw(study, prior, rng)
    full_rows, adapt_rows, factors, cost, full_cost = [], [], {}, 0.0, 0.0
    capped, stops = {}, {}
    z = stats.norm.ppf(1 - prior.alpha / 2)
    for w, y in enumerate(looks):
        for k in range(sweep.ks):
            for i in range(sweep.levels):
                for j in range(sweep.looks(i)):
                    full_rows.append(_row(w, k, i, j, float(y[k, i, j]), int(on[i, j])))
        result = sweeps.adaptive_design(sweep, y, prior)
        cost += result["cost"]
        full_cost += sweeps.full_design(sweep, y, prior)["cost"]
        for (k, i), values in result["measured"].items():
            for j, value in enumerate(values):
                adapt_rows.append(_row(w, k, i, j, float(value), int(on[i, j])))
            n, planned = len(values), sweep.looks(i)
            point = (f"w{w}k{k}", sweeps.Sweep.concurrency(i))
            factors[point] = (
                adaptive.boundary(planned, prior.alpha, prior.shape)[min(n, planned) - 1] / z)
            stops[point] = result["stops"].get((k, i))
        for k in range(sweep.ks):
            for i in range(sweep.levels):
                capped[(f"w{w}k{k}", sweeps.Sweep.concurrency(i))] = (
                    adaptive.boundary(sweep.looks(i), prior.alpha, prior.shape)[-1] / z)
    blocks = {sweeps.Sweep.concurrency(i): sweep.block(i) for i in range(sweep.levels)}
    # the full design: the same study measured in full (the rule never stopping a point: the
    # interval at its cap)
    full = _points(pd.DataFrame(full_rows), capped, prior, blocks)
    adapt = _points(pd.DataFrame(adapt_rows), factors, prior, blocks, stops)
    covered = agree = 0
    for (cell, level), row in adapt.iterrows():
        w, k = (int(x) for x in cell[1:].split("k"))
        mu = truths[w][k, int(math.log2(level))]
        covered += row["speedup_ci_low"] <= math.exp(mu) <= row["speedup_ci_high"]
        agree += row["verdict"] == full.loc[(cell, level), "verdict"]
    return {"points": len(adapt), "covered": covered, "agree": agree,
            "cost": cost / full_cost,
            "full covered": int(sum(
                row["speedup_ci_low"] <= math.exp(truths[int(c[1:].split("k")[0])][
                    int(c.split("k")[1]), int(math.log2(lv))]) <= row["speedup_ci_high"]
                for (c, lv), row in full.iterrows())), "full points": len(full)}


def run(study: Study, rule: adaptive.Rule, studies: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame([one_study(study, rule, rng) for _ in range(studies)])
    return {**asdict(study), "studies": studies,
            "coverage": rows["covered"].sum() / rows["points"].sum(),
            "same verdict": rows["agree"].sum() / rows["points"].sum(),
            "full coverage": rows["full covered"].sum() / rows["full points"].sum(),
            "point-repeats": float(rows["cost"].mean()),
            "points": float(rows["points"].mean())}


# the noise config/config.yaml's priors state (σ within a start 5 %, between starts 3 %: per
# side √2 less), then a quiet and a noisy host, and starts 8 % apart
STUDIES = [Study(i, m, p) for i, m in ((round(0.03 / math.sqrt(2), 4),
                                        round(0.05 / math.sqrt(2), 4)),
                                       (0.03, 0.02), (0.0, 0.10), (0.08, 0.02))
           for p in (0.5, 1.0, 2.0)]


def _run(args: tuple) -> dict:
    study, rule, studies, seed = args
    return run(study, rule, studies, seed)


def table(studies: int, rule: adaptive.Rule, workers: int | None = None) -> pd.DataFrame:
    with ProcessPoolExecutor(workers or os.cpu_count()) as pool:
        return pd.DataFrame(pool.map(_run, [(s, rule, studies, n)
                                            for n, s in enumerate(STUDIES)]))


def markdown(frame: pd.DataFrame, studies: int, rule: adaptive.Rule, source: str) -> list[str]:
    lines = ["## Through the summary's intervals", "",
             f"Written by `python -m sdbench.analyze.sweep_check` ({studies} simulated studies "
             "per row; the model: `src/sdbench/analyze/sweep_check.py`): 5 values of k on 7 "
             "workloads (35 points a level, a round 1 class) at 10 levels, 3 repeats, "
             "measured as config/config.yaml's served cells are (chained, blocks of prompts at "
             "the low levels, concurrency 1 quieter); each design's runs put through the "
             "summary stage's intervals (`point_intervals.with_pooled_intervals`). "
             f"Rule ({source}'s `adaptive:`): its priors (σ within a start, `noise`, and "
             "between starts, `instance_noise`) × the true σ as the row says, counted as "
             f"{rule.prior_df:g} degrees of freedom.", "",
             "- **coverage**: of the adaptive design's intervals at the points it measured, as "
             "the summary gives them (the repeated confidence interval at the look it "
             "stopped);",
             "- **same verdict**: its verdict equals the full design's (every whole repeat, "
             "the summary's interval) at those points;",
             "- **full coverage**: of the full design's intervals;",
             "- **point-repeats**: measured by the adaptive design ÷ the full design's (a "
             "repeat's cost halving level by level; a block 1/b of a repeat).", "",
             "| noise | coverage | same verdict | full coverage | point-repeats | points "
             "measured |", "|---|---|---|---|---|---|"]
    for row in frame.to_dict("records"):
        study = Study(**{k: row[k] for k in Study.__dataclass_fields__})
        lines.append(f"| {study.label} | {row['coverage']:.1%} | {row['same verdict']:.1%} | "
                     f"{row['full coverage']:.1%} | {row['point-repeats']:.1%} | "
                     f"{row['points']:.0f} of {study.ks * study.workloads * 10} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=100)
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--out", default=str(REPO / "docs" / "adaptive-simulation.md"))
    args = parser.parse_args(argv)
    rule = sweeps.config_rule(args.config)
    frame = table(args.studies, rule)
    path = Path(args.out)
    text = path.read_text() if path.exists() else ""
    head = text.split("\n## Through the summary's intervals")[0].rstrip("\n")
    path.write_text(head + "\n\n" + "\n".join(markdown(frame, args.studies, rule,
                                                       args.config)) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
