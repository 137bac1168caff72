"""Synthetic acceptance: cells whose drafts vLLM accepts at a set rate, and their known answer.

vLLM's speculative config has `rejection_sample_method: synthetic` (vLLM 0.26+,
`vllm/config/speculative.py`): the proposer runs and costs what it costs, but its draft tokens
are accepted with calibrated per-position probabilities, set by `synthetic_acceptance_length`
(the mean acceptance length: 1 + accepted tokens per draft) or `synthetic_acceptance_rates`
(the unconditional rate at each position, non-increasing). A cell measured so answers "what
would this method give here at that acceptance", never "what did it give": its label says
"simulated" (`simulated_label`).

It also has a known answer, which checks the engine and the project's acceptance accounting
(`acceptance_check`): the mean acceptance length measured over a point's drafts must equal the
setting within the sampling error of that many drafts. A draft's accepted count A is the
number of positions accepted, position j accepted only if every position before it was, so
with unconditional rates p_1 >= ... >= p_k

    E[A] = sum_j p_j,   E[A^2] = sum_j (2j - 1) p_j,   Var[A] = E[A^2] - E[A]^2,

and the mean over n independent drafts has standard error sqrt(Var[A] / n); the rates are
the ones the point measured (vLLM's per-position acceptance counters).

A point measured once has no spread over repeats to give its acceptance an interval; it has
its drafts. `draft_interval` gives one over them: a Wilson score interval for the mean of each
draft's accepted share A / k (a value in [0, 1]), taken with the largest variance a share of
that mean can have, p (1 - p), so that it needs nothing estimated and stays sound where every
token was accepted or none was. It covers the variation between the drafts of that one run,
taken as independent (tested for coverage in `tests/test_acceptance.py`), not between runs.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.plan import grid
from sdbench.plan.settings import synthetic_setting

# what a point's acceptance interval covers, where the repeats do not give one
FROM_DRAFTS = "its drafts (one repeat)"
FROM_REPEATS = "its repeats"

# the check's two-sided level: one false alarm in a thousand correct cells (every synthetic
# cell of a study is checked), beyond which a difference is the engine's or the accounting's
CHECK_LEVEL = 0.999


def simulated_label(speculator: str, options, method: str | None = None,
                    source: str | None = None) -> str:
    """A cell's name, marked as simulated where its acceptance is synthetic (an acceptance
    sweep's cell names its acceptance already): "(simulated: <vLLM method> at acceptance X
    (<where X comes from>))" where the config names its `acceptance_source`."""
    setting = synthetic_setting(options)
    if setting is None:
        return speculator
    if grid.swept_method(speculator.split(" k=")[0]) is not None:
        return f"{speculator} (simulated)"
    what = f"{method} at acceptance" if isinstance(method, str) and method else "acceptance"
    cited = f" ({source})" if isinstance(source, str) and source else ""
    return f"{speculator} (simulated: {what} {setting:g}{cited})"


def simulated_lengths(frame: pd.DataFrame) -> pd.Series:
    """Each row's set acceptance length (NaN where acceptance is real): a point's
    `simulated_acceptance`, else read from a measurement's `spec_options`."""
    if "simulated_acceptance" in frame:
        return frame["simulated_acceptance"].astype(float)
    if "spec_options" in frame:
        return frame["spec_options"].map(synthetic_setting).astype(float)
    return pd.Series(np.nan, index=frame.index)


def draft_interval(accepted: float, drafts: float, draft_tokens: float,
                   confidence: float = 0.95) -> tuple[float, float]:
    """(low, high) of the accepted share of drafted tokens (0–1) over a point's `drafts`
    (the Wilson score interval, see the module's docstring); NaN without drafts."""
    if not drafts or not draft_tokens or drafts <= 0 or draft_tokens <= 0:
        return np.nan, np.nan
    share = min(max(accepted / draft_tokens, 0.0), 1.0)
    z2 = float(stats.norm.ppf(0.5 + confidence / 2)) ** 2
    centre = (share + z2 / (2 * drafts)) / (1 + z2 / drafts)
    half = (math.sqrt(z2 * share * (1 - share) / drafts + z2 * z2 / (4 * drafts * drafts))
            / (1 + z2 / drafts))
    # the ends exact where every token or none was accepted (no rounding past the share)
    return (0.0 if share == 0 else max(centre - half, 0.0),
            1.0 if share == 1 else min(centre + half, 1.0))


def real_point(points: pd.DataFrame, method: str, k, target: str, workload: str,
               level) -> pd.DataFrame:
    """The point of a swept method's own cell (real acceptance) at the same k and level."""
    return points[(points["speculator"] == method) & (points["k"] == k)
                  & (points["target"] == target) & (points["workload"] == workload)
                  & (points["concurrency"] == level)]


def accepted_variance(rates) -> float:
    """Var[A] of one draft's accepted count from the unconditional per-position rates."""
    p = np.asarray(rates, dtype=float)
    if p.size == 0:
        return 0.0
    j = np.arange(1, p.size + 1)
    return max(0.0, float(np.sum((2 * j - 1) * p) - np.sum(p) ** 2))


def acceptance_check(frame: pd.DataFrame) -> pd.DataFrame:
    """Per synthetic point (cell and concurrency, pooled over its repeats): the mean acceptance
    length it was set to, the one measured over its drafts, the range sampling allows at
    `CHECK_LEVEL` (plus one draft's worth, for a draft cut at the end of a sequence; from the
    variance the measured per-position rates give, else the largest one a count in [0, k]
    can have) and whether the measurement is in it."""
    need = {"spec_options", "spec_decode_num_drafts", "spec_decode_accepted_tokens"}
    if frame.empty or not need <= set(frame):
        return pd.DataFrame()
    measured = frame[frame["spec_decode_num_drafts"].fillna(0) > 0]
    setting = measured["spec_options"].map(synthetic_setting)
    measured = measured[setting.notna()].assign(setting=setting[setting.notna()])
    z = float(stats.norm.ppf(0.5 + CHECK_LEVEL / 2))
    rows = []
    for (cell, speculator, k, level), part in measured.groupby(
            ["cell_id", "speculator", "k", "concurrency"], sort=True):
        drafts = float(part["spec_decode_num_drafts"].sum())
        length = 1.0 + float(part["spec_decode_accepted_tokens"].sum()) / drafts
        rates = _pooled_rates(part)
        # without per-position rates: the largest variance a count in [0, k] can have
        variance = accepted_variance(rates) if rates is not None else k * k / 4
        allowed = z * math.sqrt(variance / drafts) + 1.0 / drafts
        set_to = float(part["setting"].iloc[0])
        rows.append({"cell_id": cell, "speculator": speculator, "k": int(k),
                     "concurrency": level, "set": set_to, "measured": length,
                     "drafts": int(drafts), "allowed_low": set_to - allowed,
                     "allowed_high": set_to + allowed,
                     "error_from": ("the per-position rates measured" if rates is not None
                                    else "the largest variance k allows"),
                     "passed": bool(abs(length - set_to) <= allowed)})
    return pd.DataFrame(rows)


def _pooled_rates(part: pd.DataFrame) -> list[float] | None:
    """The per-position acceptance rates of a point's repeats, weighted by their drafts."""
    if "spec_decode_per_position_acceptance_rates" not in part:
        return None
    weighted, total = None, 0.0
    for rates, drafts in zip(part["spec_decode_per_position_acceptance_rates"],
                             part["spec_decode_num_drafts"], strict=True):
        if isinstance(rates, str):  # the summary keeps lists as JSON text
            rates = json.loads(rates)
        if rates is None or not isinstance(rates, (list, tuple, np.ndarray)) or not len(rates):
            return None
        values = np.asarray(rates, dtype=float) * float(drafts)
        weighted = values if weighted is None else weighted + values
        total += float(drafts)
    return None if weighted is None else list(weighted / total)


def sweep_points(points: pd.DataFrame, metric: str = "speedup") -> pd.DataFrame:
    """The acceptance sweeps' points (`methods[].acceptance_sweep`): the method each belongs
    to (`swept`) and the acceptance length it was set to (`set`), with its `metric` (the
    headline speedup, or e.g. the TPOT speedup)."""
    need = {"simulated_acceptance", "speculator", f"{metric}_mean"}
    if points.empty or not need <= set(points):
        return pd.DataFrame()
    swept = points["speculator"].map(grid.swept_method)
    part = points[(swept.notna() & points["simulated_acceptance"].notna()
                   & points[f"{metric}_mean"].notna()).to_numpy()]
    if "load" in part:
        part = part[(part["load"] == "concurrency").to_numpy()]
    return part.assign(swept=part["speculator"].map(grid.swept_method).to_numpy(),
                       set=part["simulated_acceptance"].astype(float).to_numpy())


def _clipped(x: float, lengths: np.ndarray) -> tuple[float, str]:
    """A length, or the swept range's end it lies beyond ("≤" the lowest, ">" the highest)."""
    if np.isnan(x) or x > lengths[-1]:
        return float(lengths[-1]), ">"
    if x <= lengths[0]:
        return float(lengths[0]), "≤"
    return float(x), ""


def _fieller(lengths: np.ndarray, speedups: np.ndarray, variances: np.ndarray,
             df: int) -> tuple[float, float, float, float, float]:
    """(estimate, low, high, intercept, slope): the length where the weighted least-squares
    line through the speedups reaches 1, with Fieller's 95 % interval (Student t with `df`),
    and the line; the estimate NaN where the line does not rise; low -inf / high inf where the
    interval is unbounded."""
    x = np.column_stack([np.ones_like(lengths), lengths])
    w = 1 / variances
    cov = np.linalg.inv(x.T @ (x * w[:, None]))
    a, b = cov @ (x.T @ (w * speedups))
    if b <= 0:
        return np.nan, np.nan, np.nan, float(a), float(b)
    q2 = float(stats.t.ppf(0.975, max(df, 1))) ** 2
    # (a - 1 + b x)^2 <= q2 (Vaa + 2 x Vab + x^2 Vbb): A x^2 + 2 B x + C <= 0
    big_a = b * b - q2 * cov[1, 1]
    big_b = (a - 1) * b - q2 * cov[0, 1]
    big_c = (a - 1) ** 2 - q2 * cov[0, 0]
    estimate = float((1 - a) / b)
    if big_a <= 0:  # the slope is not told from 0: every length is possible
        return estimate, -np.inf, np.inf, float(a), float(b)
    root = math.sqrt(max(big_b * big_b - big_a * big_c, 0.0))
    return (estimate, float((-big_b - root) / big_a), float((-big_b + root) / big_a),
            float(a), float(b))


def _fit_points(part: pd.DataFrame, real: pd.DataFrame, metric: str) -> pd.DataFrame:
    """A sweep's points at one level as the line is fitted through them: each swept length
    (x: the length set), and the method's real cell there (x: the acceptance length it
    measured), which differs from them only in which drafts are accepted, so that it lies on
    the same line (`real`: True); with each point's mean, repeats and 95 % half-width."""
    fit = pd.DataFrame({
        "x": part["set"].to_numpy(float), "mean": part[f"{metric}_mean"].to_numpy(float),
        "n": (part["repeats_ok"].to_numpy(float) if "repeats_ok" in part
              else np.full(len(part), 3.0)),
        "half": (part[f"{metric}_ci_high"] - part[f"{metric}_ci_low"]).to_numpy(float) / 2,
        "real": False})
    if (real.empty or "spec_decode_acceptance_length_mean" not in real
            or f"{metric}_mean" not in real):
        return fit
    row = real.iloc[0]
    x, mean = row["spec_decode_acceptance_length_mean"], row[f"{metric}_mean"]
    if pd.isna(x) or pd.isna(mean):
        return fit
    n = float(row["repeats_ok"]) if "repeats_ok" in real and pd.notna(row["repeats_ok"]) else 1.0
    half = (float(row[f"{metric}_ci_high"] - row[f"{metric}_ci_low"]) / 2
            if f"{metric}_ci_low" in real else np.nan)
    return pd.concat([fit, pd.DataFrame([{"x": float(x), "mean": float(mean), "n": n,
                                          "half": half, "real": True}])], ignore_index=True)


def break_even(points: pd.DataFrame, metric: str = "speedup") -> pd.DataFrame:
    """Per target, workload, swept method, k and concurrency: the acceptance length at which
    speculation starts to pay (speedup 1). Speedup is linear in the acceptance length at fixed
    step times (tokens per step over the step's cost: the step-time model), so a line is fitted
    by weighted least squares through the swept points and the method's real cell at that
    level (same server but for which drafts are accepted: at the acceptance length it
    measured, `_fit_points`), each point's variance its speedup squared times the coefficient
    of variation pooled over the points' repeats, over its repeats (a point measured once adds
    no degrees of freedom), and the break-even is where the line reaches 1, with Fieller's
    95 % interval (Student t on the pooled degrees of freedom); ends beyond the fitted lengths
    are said so ("≤" the lowest, ">" the highest), and a line that does not rise has no
    break-even (NaN, said in the reading). Beside it the acceptance length the method's real
    cell measured there (same k), and what follows: it pays (real acceptance above the
    interval), it loses (below), or no clear answer. `metric`: the headline output-token
    speedup, or another speedup column (the TPOT speedup, which the step-time model
    predicts)."""
    sweep = sweep_points(points, metric)
    if sweep.empty:
        return pd.DataFrame()
    rows = []
    keys = ["target", "workload", "swept", "k", "concurrency"]
    for (target, workload, method, k, level), part in sweep.groupby(keys, sort=True):
        real = real_point(points, method, k, target, workload, level)
        fit = _fit_points(part, real, metric).sort_values("x")
        n, mean = fit["n"].to_numpy(float), fit["mean"].to_numpy(float)
        # each point's standard deviation over its repeats (from its Student-t interval),
        # pooled as one coefficient of variation: the noise is a share of the speedup, alike
        # at every swept length of one cell's server settings, and n = 2 or 3 repeats give
        # each point's own variance too few degrees of freedom to weigh by
        sd = fit["half"].to_numpy(float) / stats.t.ppf(0.975, np.maximum(n - 1, 1)) * np.sqrt(n)
        ok = np.isfinite(sd) & (n >= 2) & (mean > 0)
        if ok.sum() < 1 or len(fit) < 2:
            continue
        df = int(np.sum(n[ok] - 1))
        cv2 = float(np.sum((n[ok] - 1) * (sd[ok] / mean[ok]) ** 2) / df)
        if cv2 <= 0:
            continue
        lengths = fit["x"].to_numpy(float)
        estimate, low, high, intercept, slope = _fieller(lengths, mean, cv2 * mean ** 2 / n, df)
        accepts = (float(real["spec_decode_acceptance_length_mean"].iloc[0])
                   if not real.empty and "spec_decode_acceptance_length_mean" in real
                   else np.nan)
        row = {"target": target, "workload": workload, "method": method, "k": int(k),
               "concurrency": level, "lengths": len(part), "real_in_fit": bool(fit["real"].any()),
               "fit_low": float(lengths[0]), "fit_high": float(lengths[-1]),
               "intercept": intercept, "slope": slope, "df": df, "real_acceptance": accepts}
        if np.isnan(estimate):
            rows.append({**row, "break_even": np.nan, "break_even_side": "",
                         "ci_low": np.nan, "ci_low_side": "", "ci_high": np.nan,
                         "ci_high_side": "",
                         "reading": (f"no break-even: the speedup does not rise with the "
                                     f"acceptance length here ({lengths[0]:.2f}-"
                                     f"{lengths[-1]:.2f})")})
            continue
        estimate, side = _clipped(estimate, lengths)
        low, low_side = _clipped(low, lengths)
        high, high_side = _clipped(high, lengths)
        rows.append({**row, "break_even": estimate, "break_even_side": side,
                     "ci_low": low, "ci_low_side": low_side,
                     "ci_high": high, "ci_high_side": high_side,
                     "reading": _reading(accepts, low, low_side, high, high_side)})
    return pd.DataFrame(rows)


def _reading(accepts: float, low: float, low_side: str, high: float, high_side: str) -> str:
    if np.isnan(accepts):
        return "no real cell of this method and k measured here"
    # an end beyond the fitted lengths is a bound: "> x" (the whole interval above the
    # highest fitted length) lies above a real acceptance of x too, "≤ x" below one of x
    if (high_side != ">" and accepts > high) or (high_side == "≤" and accepts >= high):
        return f"it pays: accepts {accepts:.2f}, above the break-even's interval"
    if (low_side != "≤" and accepts < low) or (low_side == ">" and accepts <= low):
        return f"it loses: accepts {accepts:.2f}, below the break-even's interval"
    return f"no clear answer: accepts {accepts:.2f}, within the break-even's interval"
