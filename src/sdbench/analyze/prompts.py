"""The part of a speedup's uncertainty that comes from which prompts were drawn.

Every repeat of a point, and its baseline's, sends the same prompts in the same order, so the
speedup can be re-estimated over prompts resampled with replacement, the same prompts on both
sides and in every repeat (a paired bootstrap). The statistic is output tokens per second of
request time, Σ output tokens ÷ Σ request latency over the prompts (and repeats), speculative
÷ baseline: at a fixed concurrency a run's duration is about its requests' summed latency ÷
the concurrency, which cancels. Its spread over resamples is the prompt-sampling error; the
pooled interval (`noise`) holds the prompts fixed and covers the servers' noise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.analyze.noise import point_key
from sdbench.analyze.stats import CONFIDENCE
from sdbench.records import LoadPoint

BOOTSTRAP = 1000
POINT = ["cell_id", "concurrency", "request_rate"]


def _sides(detail: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output tokens, latency, failed) per request of one run."""
    failed = np.array([bool(e) for e in detail.get("errors") or
                       [""] * len(detail["output_lens"])])
    return (np.asarray(detail["output_lens"], dtype=float),
            np.asarray(detail["latencies"], dtype=float), failed)


def _point(rows: pd.DataFrame, details: dict[str, dict]) -> np.ndarray | None:
    """Per prompt, summed over the paired repeats: (spec tokens, spec latency, baseline
    tokens, baseline latency), 4 x prompts; None where the detail is missing or the prompts
    differ."""
    total = None
    for row in rows.itertuples():
        key = LoadPoint.of(row.concurrency, row.request_rate, row.repeat).key
        mine = details.get(row.cell_id, {}).get(key)
        base = details.get(row.baseline_cell_id, {}).get(key)
        if (mine is None or base is None or "latencies" not in mine
                or "latencies" not in base or mine.get("input_lens") != base.get("input_lens")):
            return None
        (o_s, l_s, f_s), (o_b, l_b, f_b) = _sides(mine), _sides(base)
        keep = ~(f_s | f_b)  # a prompt failed on either side counts on neither
        part = np.vstack([o_s, l_s, o_b, l_b]) * keep
        if total is not None and total.shape != part.shape:
            return None
        total = part if total is None else total + part
    return total


def prompt_intervals(frame: pd.DataFrame, details: dict[str, dict],
                     seed: int = 0) -> pd.DataFrame:
    """One row per speculative closed-loop point with paired repeats and per-request detail on
    both sides: `prompts`, `prompt_sd` (the standard deviation of the log speedup over prompt
    resamples) and the percentile interval's offsets `prompt_low`/`prompt_high` on the log
    scale (to add to the point's log speedup)."""
    rng = np.random.default_rng(seed)
    # closed loop only: under an open loop the duration follows the arrivals, not the latency
    paired = frame[(frame["method"] != "vanilla") & frame["paired"].fillna(False).astype(bool)
                   & frame["request_rate"].isna()].drop_duplicates(POINT + ["repeat"])
    rows = []
    for key, group in paired.groupby(POINT, dropna=False, sort=False):
        sums = _point(group, details)
        if sums is None or sums.shape[1] < 2 or (sums[[1, 3]].sum(axis=1) <= 0).any():
            continue
        n = sums.shape[1]
        weights = rng.multinomial(n, np.full(n, 1 / n), size=BOOTSTRAP).astype(float)
        o_s, l_s, o_b, l_b = (weights @ sums[i] for i in range(4))
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(o_s / l_s) - np.log(o_b / l_b)
        logs = logs[np.isfinite(logs)]
        whole = np.log(sums[0].sum() / sums[1].sum()) - np.log(sums[2].sum() / sums[3].sum())
        tail = (1 - CONFIDENCE) / 2 * 100
        rows.append({**dict(zip(POINT, key, strict=True)), "prompts": n,
                     "prompt_sd": float(logs.std(ddof=1)),
                     "prompt_low": float(np.percentile(logs, tail) - whole),
                     "prompt_high": float(np.percentile(logs, 100 - tail) - whole)})
    return pd.DataFrame(rows, columns=POINT + ["prompts", "prompt_sd", "prompt_low",
                                               "prompt_high"])


def with_prompt_intervals(points: pd.DataFrame, frame: pd.DataFrame,
                          details: dict[str, dict]) -> pd.DataFrame:
    """The points with the speedup's prompt-sampling interval (`speedup_prompts_ci_low/high`,
    around the point's speedup, the prompts resampled, the servers' runs as measured) and an
    interval for both (`speedup_both_ci_low/high`: the pooled server-noise standard error and
    the prompt-sampling one added in quadrature, Welch-Satterthwaite degrees of freedom)."""
    points = points.copy()
    for column in ("speedup_prompts", "speedup_prompt_sd", "speedup_prompts_ci_low",
                   "speedup_prompts_ci_high", "speedup_both_ci_low", "speedup_both_ci_high"):
        points[column] = np.nan
    table = prompt_intervals(frame, details)
    if table.empty:
        return points
    found = {point_key(c, k, r): row for c, k, r, row in zip(
        table["cell_id"], table["concurrency"], table["request_rate"],
        table.to_dict("records"), strict=True)}
    for at, cell, level, rate in zip(points.index, points["cell_id"], points["concurrency"],
                                     points["request_rate"], strict=True):
        row = found.get(point_key(cell, level, rate))
        if row is None or pd.isna(points.at[at, "speedup_mean"]):
            continue
        center = np.log(points.at[at, "speedup_mean"])
        points.loc[at, ["speedup_prompts", "speedup_prompt_sd", "speedup_prompts_ci_low",
                        "speedup_prompts_ci_high"]] = [
            row["prompts"], row["prompt_sd"], np.exp(center + row["prompt_low"]),
            np.exp(center + row["prompt_high"])]
        se, df = points.at[at, "speedup_se"], points.at[at, "speedup_df"]
        if pd.notna(se) and pd.notna(df) and df > 0:
            both = se ** 2 + row["prompt_sd"] ** 2
            df_both = both ** 2 / (se ** 4 / df) if se > 0 else np.inf
            half = stats.t.ppf(0.5 + CONFIDENCE / 2, df_both) * np.sqrt(both)
            points.loc[at, ["speedup_both_ci_low", "speedup_both_ci_high"]] = [
                np.exp(center - half), np.exp(center + half)]
    return points
