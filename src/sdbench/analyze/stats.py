"""The interval every speedup carries and the verdict read from it: below the tables
(`aggregate`) and the analyses (`analysis`), which both state them."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95


def mean_interval(values: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, std, low, high): a two-sided 95 % Student-t interval for the mean; the interval is
    NaN below two values."""
    values = values[~np.isnan(values)]
    n = len(values)
    if n == 0:
        return (np.nan,) * 4
    mean = float(values.mean())
    if n < 2:
        return mean, np.nan, np.nan, np.nan
    std = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / np.sqrt(n)
    return mean, std, mean - half, mean + half


def ratio_interval(values: np.ndarray) -> tuple[float, float, float]:
    """(geometric mean, low, high) of ratios: `mean_interval` on their logarithms, taken back,
    so that a ratio's interval never reaches 0 or below however few and spread the values
    (a Student-t interval on the ratios themselves did: "1.20× [-0.70, 3.10]"). Values that
    are not positive are left out; the interval is NaN below two values."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    mean, _, low, high = mean_interval(np.log(values))
    return float(np.exp(mean)), float(np.exp(low)), float(np.exp(high))


def interval_number(value: float) -> str:
    """An interval bound: two decimals, or three significant digits where two decimals would
    read 0.00 (a ratio's bound is never 0) or the number is huge."""
    if value != 0 and (abs(value) < 0.005 or abs(value) >= 1e5):
        return f"{value:.3g}"
    return f"{value:.2f}"


def level_text(value: float) -> str:
    """A concurrency as read: a measured level whole ('24', not '24.0'), an interpolated one
    with one decimal ('5.7')."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


# an interval on fewer degrees of freedom says nothing (its t quantile runs to 12.7 at 1):
# the point gets none, and its verdict says why
MIN_INTERVAL_DF = 2.0


def verdict(low: float, high: float, why: str = "one repeat") -> str:
    """What an interval on a speedup says: "speculate" when it lies above 1, "no speculation"
    below 1, "no clear gain" when it spans 1 (an answer, not a failure); without an interval,
    "no clear gain (no interval: <why>)"."""
    if pd.isna(low) or pd.isna(high):
        return f"no clear gain (no interval: {why})"
    if low > 1:
        return "speculate"
    if high < 1:
        return "no speculation"
    return "no clear gain"
