"""What the numbers say to configure: crossover concurrency, best settings, the gain of switching
proposers with load, and a derived batch-size schedule for speculative tokens.

All functions take the per-point table of `aggregate.aggregate_points` (mean speedups with
95 % intervals over repeats) and use speculative points with a speedup only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

SETTING = ["target", "workload", "speculator", "k"]


def speculative(frame: pd.DataFrame) -> pd.DataFrame:
    """Speculative rows with a speedup: per-measurement rows (`paired`) or per-point rows
    (`speedup_mean`)."""
    has = frame["paired"] if "paired" in frame else frame["speedup_mean"].notna()
    return frame[(frame["method"] != "vanilla") & has]


def _crossing(levels: list[int], values: list[float]) -> float | None:
    """The concurrency where `values` first falls below 1, interpolated in log2(concurrency);
    None if it never does; the lowest level if it is below 1 from the start."""
    for i, (level, value) in enumerate(zip(levels, values, strict=True)):
        if np.isnan(value) or value >= 1:
            continue
        if i == 0:
            return float(level)
        prev_level, prev = levels[i - 1], values[i - 1]
        if np.isnan(prev):
            return float(level)
        x0, x1 = math.log2(prev_level), math.log2(level)
        return float(2 ** (x0 + (prev - 1) / (prev - value) * (x1 - x0)))
    return None


def crossover(points: pd.DataFrame) -> pd.DataFrame:
    """Per target/workload/method/k: the concurrency where the speedup falls below 1, with an
    interval from where the interval's upper and lower bounds cross 1."""
    rows = []
    for key, group in speculative(points).groupby(SETTING, dropna=False):
        group = group.sort_values("concurrency")
        levels = group["concurrency"].astype(int).tolist()
        cross = _crossing(levels, group["speedup_mean"].tolist())
        early = _crossing(levels, group["speedup_ci_low"].fillna(group["speedup_mean"]).tolist())
        late = _crossing(levels, group["speedup_ci_high"].fillna(group["speedup_mean"]).tolist())
        rows.append({**dict(zip(SETTING, key, strict=True)), "crossover": cross,
                     "crossover_low": early, "crossover_high": late,
                     "levels": f"{levels[0]}–{levels[-1]}",
                     "reading": ("above 1 at every level measured" if cross is None else
                                 "below 1 from the lowest level" if cross == levels[0] else
                                 f"falls below 1 near concurrency {cross:.1f}")})
    return pd.DataFrame(rows)


def best_settings(points: pd.DataFrame) -> pd.DataFrame:
    """Per target, workload and concurrency: the setting with the highest mean speedup."""
    spec = speculative(points)
    if spec.empty:
        return pd.DataFrame()
    best = spec.loc[spec.groupby(["target", "workload", "concurrency"])["speedup_mean"].idxmax()]
    return best[["target", "workload", "concurrency", "speculator", "k", "speedup_mean",
                 "speedup_ci_low", "speedup_ci_high"]].reset_index(drop=True)


def switch_gain(points: pd.DataFrame) -> pd.DataFrame:
    """Per target and workload: the best single static setting (highest geometric-mean speedup
    over the concurrency levels all settings share) against an ideal per-load switch between
    settings (the best one at each level); `gain` is the switch's advantage."""
    rows = []
    for (target, workload), group in speculative(points).groupby(["target", "workload"]):
        table = group.pivot_table(index=["speculator", "k"], columns="concurrency",
                                  values="speedup_mean").dropna(axis=1)
        if table.empty:
            continue
        geo = np.exp(np.log(table.clip(lower=1e-9)).mean(axis=1))
        static = geo.idxmax()
        ideal = table.max(axis=0)
        ideal_geo = float(np.exp(np.log(ideal.clip(lower=1e-9)).mean()))
        per_level = ", ".join(f"c={c}: {s} k={int(k)}" for c, (s, k) in
                              table.idxmax(axis=0).items())
        rows.append({"target": target, "workload": workload,
                     "static_best": f"{static[0]} k={int(static[1])}",
                     "static_speedup": float(geo[static]), "switch_speedup": ideal_geo,
                     "gain": ideal_geo / float(geo[static]) - 1, "switch_choice": per_level,
                     "levels": len(table.columns)})
    return pd.DataFrame(rows)


def derive_schedule(points: pd.DataFrame, target: str, workload: str,
                    speculator: str) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size for one method: at each measured
    concurrency (taken as the batch size) the k with the best mean speedup, 0 (no speculation)
    where no k beats 1. Ranges are inclusive and start at 1; vLLM carries the last one forward
    to larger batches."""
    spec = speculative(points)
    if "load" in spec:  # batch sizes are concurrency levels: closed-loop points only
        spec = spec[spec["load"] == "concurrency"]
    part = spec[(spec["target"] == target) & (spec["workload"] == workload)
                & (spec["speculator"] == speculator)]
    if part.empty:
        raise ValueError(f"no measured speedups for {speculator!r} on target {target!r}, "
                         f"workload {workload!r}: nothing to derive a schedule from")
    schedule, start = [], 1
    levels = sorted(int(level) for level in part["concurrency"].unique())
    for level in levels:
        at = part[part["concurrency"] == level]
        best = at.loc[at["speedup_mean"].idxmax()]
        k = int(best["k"]) if best["speedup_mean"] > 1 else 0
        if schedule and schedule[-1][2] == k:
            schedule[-1][1] = level  # merge equal neighbours
        else:
            schedule.append([start, level, k])
        start = level + 1
    return schedule
