"""The speedup a draft model's pair should give, from the step times of its target and draft
measured without speculation (a verification pass as one target step over c · (k + 1)
sequences): predicted speedups and break-even acceptance, set beside the measured ones."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.analyze.acceptance import break_even, sweep_points

PREDICTION_TOLERANCE = 0.2  # a measured speedup further than this share from its prediction


PAIR_AGREEMENT = 95.0  # % of drafted tokens a calibration pair (exact draft) should accept


def _step_weights(levels: np.ndarray, batch: float) -> tuple[dict[float, float], str]:
    """How `_step_time` weighs the step times measured at `levels` to get the one at `batch`
    sequences ({level: weight}, the weights summing to 1; beyond the measured levels one is
    negative) and how ("measured", "interpolated", "extrapolated"; none with "one level
    measured"): linearly in the number of sequences between the two neighbouring levels, or
    from the last two (the first two) beyond them."""
    levels = np.unique(np.asarray(levels, dtype=float))
    if batch in levels:
        return {float(batch): 1.0}, "measured"
    if len(levels) < 2:
        return {}, "one level measured"
    if batch < levels[0] or batch > levels[-1]:
        (i, j), how = ((0, 1) if batch < levels[0] else (-2, -1)), "extrapolated"
    else:
        j = int(np.searchsorted(levels, batch))
        i, how = j - 1, "interpolated"
    w = (batch - levels[i]) / (levels[j] - levels[i])
    return {float(levels[i]): 1 - w, float(levels[j]): w}, how


def _step_time(levels: np.ndarray, times: np.ndarray, batch: float) -> tuple[float, str]:
    """A no-speculation step time at `batch` sequences from the times measured at `levels`
    (mean TPOT at each concurrency): measured there, else on the straight line through the
    neighbouring levels (beyond them, through the last two; the report says which). A decode
    step costs a fixed part (the weights read once, the step's own overhead) and a part per
    sequence (its attention, sampling and output), the plan's rates model (`plan.rates.
    step_ms`): on an H100 the 7B-shape target's steps at 4 and 16 sequences lay within 1 %
    of the line through 1 and 64 (6.1 and 6.4 ms measured, 6.07 and 6.36 on the line) and
    5-8 % under the log-log curve this took until 2026-11-29 (6.45, 6.96), its draft's within
    2 % of the line and 15-23 % under the curve
    (docs/runs/calibration-pair-7b-h100.md). NaN where it would not be positive."""
    weights, how = _step_weights(levels, batch)
    if not weights:
        return np.nan, how
    at = dict(zip(np.asarray(levels, dtype=float), np.asarray(times, dtype=float), strict=True))
    value = float(sum(w * at[level] for level, w in weights.items()))
    return (value if value > 0 else np.nan), how


def _log_step_se(part: pd.DataFrame, level: float) -> tuple[float, float]:
    """(standard error of log mean TPOT, its degrees of freedom) of a vanilla cell at a level,
    from its 95 % Student-t interval over repeats; NaN where it has none (one repeat)."""
    row = part[part["concurrency"] == level]
    if row.empty or not {"repeats_ok", "mean_tpot_ms_ci_low", "mean_tpot_ms_ci_high"} <= set(row):
        return np.nan, np.nan
    row = row.iloc[0]
    n = float(row["repeats_ok"]) if pd.notna(row["repeats_ok"]) else 0.0
    half = (row["mean_tpot_ms_ci_high"] - row["mean_tpot_ms_ci_low"]) / 2
    if n < 2 or not np.isfinite(half) or row["mean_tpot_ms_mean"] <= 0:
        return np.nan, np.nan
    return float(half / stats.t.ppf(0.975, n - 1) / row["mean_tpot_ms_mean"]), n - 1


def break_even_spread(points: pd.DataFrame, row, times: tuple) -> tuple[float, float]:
    """(low, high) of the step-time model's break-even τ* = (k · t_D + t_V) ÷ t_T at a
    draft-model point (`row`, its step `times` as `step_times` gives them), from the spread of
    the step times it rests on: each vanilla level's log mean TPOT with its standard error over
    repeats (independent), carried to log τ* to first order (t_V is the target's levels
    weighted as `_step_weights` weighs them), a 95 % Student-t interval on Welch-Satterthwaite
    degrees of freedom; NaN where a step time has no spread (one repeat)."""
    t_target, t_draft, t_verify, _ = times
    c, k = float(row["concurrency"]), int(row["k"])
    target, draft = _vanilla_steps(points, row)
    share = k * t_draft / (k * t_draft + t_verify)  # d log(k t_D + t_V) / d log t_D
    weights, _ = _step_weights(target["concurrency"].to_numpy(dtype=float), c * (k + 1))
    # t_V = Σ w_l t_l: d log t_V / d log t_l = w_l t_l / t_V
    step = target.set_index("concurrency")["mean_tpot_ms_mean"].astype(float)
    gradient = {level: (1 - share) * w * float(step.get(level, np.nan)) / t_verify
                for level, w in weights.items()}
    gradient[c] = gradient.get(c, 0.0) - 1.0  # ÷ t_T
    terms = [(share, *_log_step_se(draft, c))] + [
        (g, *_log_step_se(target, level)) for level, g in gradient.items()]
    variance = sum((g * se) ** 2 for g, se, _ in terms)
    if not np.isfinite(variance) or variance <= 0:
        return np.nan, np.nan
    dof = variance ** 2 / sum((g * se) ** 4 / d for g, se, d in terms if g)
    half = float(stats.t.ppf(0.975, dof)) * math.sqrt(variance)
    centre = math.log((k * t_draft + t_verify) / t_target)
    return float(math.exp(centre - half)), float(math.exp(centre + half))


def _vanilla_steps(points: pd.DataFrame, row) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The vanilla server points of a draft-model point's target and of its draft (`row`: its
    round, workload, setting, target and draft), closed-loop: their mean TPOT per level."""
    closed = points[(points["engine"] == "serve") & (points["load"] == "concurrency")]
    vanilla = closed[closed["method"] == "vanilla"]
    keys = ["round", "workload", "setting"]
    same = vanilla[(vanilla[keys] == pd.Series({key: row[key] for key in keys})).all(axis=1)]
    return tuple(same[same["target"] == name] for name in (row["target"], row["draft"]))


def step_times(points: pd.DataFrame, row) -> tuple[float, float, float, str] | None:
    """(t_T, t_D, t_V, how t_V was found) of a draft-model point (`row`: its round, workload,
    setting, target, draft, k and concurrency): the target's and the draft's mean TPOT without
    speculation at its concurrency (their own vanilla cells, same round, workload and setting)
    and the verification pass as one target step over c·(k+1) sequences (`_step_time`); None
    where either vanilla cell was not measured there."""
    target, draft = _vanilla_steps(points, row)
    if target.empty or draft.empty:
        return None
    c, k = int(row["concurrency"]), int(row["k"])
    t_target, t_draft = (part.set_index("concurrency")["mean_tpot_ms_mean"].get(c)
                         for part in (target, draft))
    if t_target is None or t_draft is None or pd.isna(t_target) or pd.isna(t_draft):
        return None
    t_verify, how = _step_time(target["concurrency"].to_numpy(dtype=float),
                               target["mean_tpot_ms_mean"].to_numpy(dtype=float), c * (k + 1))
    return float(t_target), float(t_draft), t_verify, how


def predicted_break_even(points: pd.DataFrame) -> pd.DataFrame:
    """Per acceptance sweep of a draft model (target, workload, k, concurrency): the
    break-even acceptance length the step-time model predicts, where its predicted TPOT
    speedup τ · t_T ÷ (k · t_D + t_V) reaches 1, τ* = (k · t_D + t_V) ÷ t_T (see
    `predicted_speedups`), beside the one the sweep measured on the same quantity (the TPOT
    speedup's line, `acceptance.break_even`, with its 95 % interval), and whether the
    prediction lies in that interval (`agrees`; `tested`: False where the interval is open at
    both ends, which rules nothing out) or, with the spread of the step times it rests on
    (`break_even_spread`), overlaps it (`overlaps`)."""
    measured = break_even(points, "tpot_speedup")
    sweep = sweep_points(points, "tpot_speedup")
    if measured.empty or sweep.empty:
        return pd.DataFrame()
    rows = []
    for _, found in measured.iterrows():
        part = sweep[(sweep["target"] == found["target"]) & (sweep["workload"] == found["workload"])
                     & (sweep["swept"] == found["method"]) & (sweep["k"] == found["k"])
                     & (sweep["concurrency"] == found["concurrency"])
                     & (sweep["method"] == "draft_model")]
        if part.empty or pd.isna(part["draft"].iloc[0]):
            continue
        times = step_times(points, part.iloc[0])
        if times is None:
            continue
        t_target, t_draft, t_verify, how = times
        k = int(found["k"])
        predicted = (k * t_draft + t_verify) / t_target
        spread_low, spread_high = break_even_spread(points, part.iloc[0], times)
        low = -np.inf if found["ci_low_side"] == "≤" else found["ci_low"]
        high = np.inf if found["ci_high_side"] == ">" else found["ci_high"]
        tested = bool(np.isfinite(low) or np.isfinite(high))
        # what a draft pass inside a round costs, as a share of the draft's own TPOT, for the
        # measured break-even to hold (the model takes 1): (τ* t_T − t_V) ÷ (k t_D), at the
        # estimate and at the interval's ends (an end open beyond the lengths fitted: at that
        # length, with its side); none where the estimate itself lies beyond them
        implied = [(tau * t_target - t_verify) / (k * t_draft)
                   if np.isfinite(tau) and found["break_even_side"] == "" else np.nan
                   for tau in (found["break_even"], found["ci_low"], found["ci_high"])]
        rows.append({**{key: found[key] for key in ("target", "workload", "method", "k",
                                                    "concurrency", "lengths", "real_in_fit",
                                                    "real_acceptance")},
                     "draft": part["draft"].iloc[0], "target_step_ms": t_target,
                     "draft_step_ms": t_draft, "verify_ms": t_verify,
                     "verify_from": f"target at c={int(found['concurrency']) * (k + 1)} ({how})",
                     "predicted": predicted, "predicted_low": spread_low,
                     "predicted_high": spread_high, "implied_draft_share": implied[0],
                     "implied_draft_share_low": implied[1],
                     "implied_draft_share_high": implied[2], "measured": found["break_even"],
                     "measured_side": found["break_even_side"],
                     "ci_low": found["ci_low"], "ci_low_side": found["ci_low_side"],
                     "ci_high": found["ci_high"], "ci_high_side": found["ci_high_side"],
                     # an interval open at both ends (beyond the lengths swept on either
                     # side) rules nothing out: no test of the prediction
                     "tested": tested, "agrees": bool(tested and low <= predicted <= high),
                     # the prediction rests on step times measured with spread: where it lies
                     # outside the measured interval, a difference is claimed only where the
                     # two intervals do not overlap
                     "overlaps": bool(tested and not np.isnan(spread_low)
                                      and spread_low <= high and low <= spread_high)})
    return pd.DataFrame(rows)


def predicted_speedups(points: pd.DataFrame) -> pd.DataFrame:
    """Draft-model speedups predicted from measured quantities, against the measured ones: for
    each draft-model point whose draft was also measured as a target without speculation (same
    round, workload and setting; the calibration pair), a speculation round at concurrency c
    costs k draft steps and one target pass over k+1 tokens per sequence and yields τ tokens
    (the mean acceptance length), so

        predicted = τ · t_T(c) / (k · t_D(c) + t_V(c)),   t_V(c) ≈ t_T(c · (k+1)),

    with t_T and t_D the target's and the draft's mean TPOT without speculation at that
    concurrency (their own vanilla cells) and the verification pass taken as one target step
    over c·(k+1) sequences (interpolated or extrapolated linearly over the target's measured
    levels). The prediction is compared with the measured TPOT speedup (decode only, as the
    model is): `ratio` = measured ÷ predicted, its interval the measured one's (the variance
    over repeats of the speculative and vanilla points; the prediction's own inputs are
    means)."""
    need = {"mean_tpot_ms_mean", "spec_decode_acceptance_length_mean", "tpot_speedup_mean"}
    if points.empty or not need <= set(points):
        return pd.DataFrame()
    closed = points[(points["engine"] == "serve") & (points["load"] == "concurrency")]
    rows = []
    for _, row in closed[(closed["method"] == "draft_model")
                         & closed["tpot_speedup_mean"].notna()].iterrows():
        times = step_times(points, row)
        if times is None:
            continue
        t_target, t_draft, t_verify, how = times
        c, k = int(row["concurrency"]), int(row["k"])
        tau = float(row["spec_decode_acceptance_length_mean"])
        predicted = tau * t_target / (k * t_draft + t_verify)
        measured = float(row["tpot_speedup_mean"])
        ratio = measured / predicted
        accepted = float(row.get("spec_decode_acceptance_rate_mean", np.nan))
        if not np.isfinite(predicted):  # the verification pass has no step time to read
            reading = (f"no prediction: the verification pass at c={c * (k + 1)} needs the "
                       f"target without speculation at two levels ({how})")
        elif abs(ratio - 1) <= PREDICTION_TOLERANCE:
            reading = "as predicted"
        else:
            reading = (f"measured {abs(ratio - 1):.0%} {'above' if ratio > 1 else 'below'} "
                       "the prediction")
        simulated = row.get("simulated_acceptance")
        temperature = row.get("temperature")
        if simulated is not None and pd.notna(simulated):
            reading += f"; simulated: drafts accepted at a set length {simulated:g}"
        elif temperature is not None and pd.notna(temperature) and temperature > 0:
            # an exact draft's acceptance under sampling is the temperature section's check
            reading += (f"; sampled at temperature {temperature:g}: drafts accepted by "
                        "rejection sampling (see the known answer under sampling)")
        elif accepted < PAIR_AGREEMENT:
            reading += (f"; acceptance {accepted:.1f} % < {PAIR_AGREEMENT:.0f} %: not an exact "
                        "draft for this target")
        rows.append({
            "round": row["round"], "setting": row["setting"], "target": row["target"],
            "draft": row["draft"], "workload": row["workload"], "k": k, "concurrency": c,
            "acceptance_length": tau, "acceptance_rate": accepted,
            "target_step_ms": t_target, "draft_step_ms": t_draft,
            "verify_ms": t_verify, "verify_from": f"target at c={c * (k + 1)} ({how})",
            "predicted": predicted, "measured": measured,
            "measured_ci_low": row.get("tpot_speedup_ci_low"),
            "measured_ci_high": row.get("tpot_speedup_ci_high"),
            "output_speedup": row.get("speedup_mean"), "ratio": ratio,
            "ratio_ci_low": row.get("tpot_speedup_ci_low", np.nan) / predicted,
            "ratio_ci_high": row.get("tpot_speedup_ci_high", np.nan) / predicted,
            "reading": reading})
    return pd.DataFrame(rows)
