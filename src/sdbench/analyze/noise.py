"""A noise model of the log speedup, pooled where the data support it, and the interval, verdict
and minimum detectable effect every speculative point gets from it.

Each paired repeat r of a point gives y_r = log(speculative ÷ baseline throughput). Under the
model

    y_r = log S + a(speculative instance of r) − b(baseline instance of r) + e_r

a server instance's offsets (a, b: how fast that start of the server happens to be) are shared by
all the repeats it measures, and e_r is the measurement's own noise (the two sides' runs,
paired by repeat). The repeats of a point are averaged per *unit*, and the units are what the
interval counts:

- **instances**: the speculative side ran on several instances: a unit is one speculative
  instance (the repeats it measured; its baseline's instances go along with it). The spread of
  the unit means covers both the instances' offsets and the measurement noise.
- **baseline instances**: one speculative instance, several baseline instances: a unit is one
  baseline instance. The speculative instance's offset is common to every repeat and cannot be
  seen in the point itself: its variance is taken as the baseline's (the spread between the
  units less their measurement noise), and added.
- **within**: one instance on either side: a unit is one repeat, and the interval covers the
  noise within one server only (a second start of the same servers may differ by more).

The unit variance is pooled over the points of a *class*: the same engine, target, method and
load level (noise is not the same everywhere: it grows with concurrency and differs between a
vanilla and a speculative server), and the same kind of unit and repeats per unit. Workloads, k
values, settings and cells are pooled within it, unless Bartlett's test finds their variances
unequal (p < `HOMOGENEITY_P`): then each point keeps its own. The degrees of freedom of the
pooled variance set the Student t multiplier, so a point of 2 repeats in a class of 6 such
points has 6, not 1.

`point_noise` gives one row per point; `aggregate.aggregate_points` puts its interval and
verdict on the points table (the interval over the point's own repeats stays there, as
`speedup_unpooled_ci_low/high`).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
from scipy import optimize, stats

from sdbench.analyze.stats import CONFIDENCE

POWER = 0.8
HOMOGENEITY_P = 0.01
# what a class shares: its points' noise is estimated together
CLASS = ["engine", "target", "method", "load", "concurrency", "request_rate"]
POINT = ["cell_id", "concurrency", "request_rate"]
INSTANCES, BASELINE_INSTANCES, WITHIN = "instances", "baseline instances", "within"
COVERS = {
    INSTANCES: "between server instances and within",
    BASELINE_INSTANCES: ("between server instances (the speculative server's taken as its "
                         "baseline's) and within"),
    WITHIN: "within one server instance only",
}


def _units(y: np.ndarray, spec: np.ndarray, base: np.ndarray) -> tuple[str, np.ndarray]:
    """(kind of unit, the unit each repeat belongs to)."""
    if len(np.unique(spec)) > 1:
        return INSTANCES, spec
    if len(np.unique(base)) > 1:
        return BASELINE_INSTANCES, base
    return WITHIN, np.arange(len(y))


def _point_row(y: np.ndarray, spec: np.ndarray, base: np.ndarray) -> dict:
    kind, unit = _units(y, spec, base)
    groups = [y[unit == u] for u in np.unique(unit)]
    ss_units, df_units, ss_within, df_within = _anova(groups)
    return {"kind": kind, "n": len(y), "units": len(groups),
            "per_unit": int(round(len(y) / len(groups))),
            "center": float(np.mean([g.mean() for g in groups])),
            # each unit's mean, by unit: what points measured on the same units share
            "unit_means": {float(u): float(g.mean())
                           for u, g in zip(np.unique(unit), groups, strict=True)},
            "ss_units": ss_units, "df_units": df_units,
            "ss_within": ss_within, "df_within": df_within}


def _bartlett_p(ss: np.ndarray, df: np.ndarray) -> float:
    """Bartlett's test that variances ss/df (df > 0 each) are equal: its p-value."""
    keep = (df > 0) & (ss > 0)
    ss, df = ss[keep], df[keep]
    if len(ss) < 2:
        return 1.0
    var, total = ss / df, df.sum()
    pooled = ss.sum() / total
    stat = total * np.log(pooled) - (df * np.log(var)).sum()
    stat /= 1 + ((1 / df).sum() - 1 / total) / (3 * (len(ss) - 1))
    return float(stats.chi2.sf(stat, len(ss) - 1))


@cache
def _noncentrality(df: float) -> float:
    """The noncentrality at which a one-sided t test at the interval's level (the verdict
    "speculate": its lower bound above 1) has `POWER`."""
    crit = stats.t.ppf(0.5 + CONFIDENCE / 2, df)
    return float(optimize.brentq(lambda nc: stats.nct.sf(crit, df, nc) - POWER, 0.0, 1e3))


def minimum_detectable(se: float, df: float) -> float:
    """The smallest true speedup the design tells from 1 ("speculate") with `POWER`, given the
    estimated standard error of its log speedup and that estimate's degrees of freedom. An
    estimated error is more often below the true one than above (with 2 degrees of freedom
    its median is 17 % low), so it is scaled by sqrt(df ÷ the median of chi-square(df)): the
    stated effect is then as often above the design's true one as below."""
    if not (np.isfinite(se) and np.isfinite(df) and df > 0):
        return np.nan
    df = round(float(df), 1)
    return float(np.exp(_noncentrality(df) * se * np.sqrt(df / stats.chi2.median(df))))


def _agreeing(ss: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, float]:
    """(which points pool, Bartlett's p of those that do): the noisiest point leaves the pool,
    in turn, until the rest agree (p >= HOMOGENEITY_P); those that left keep their own."""
    pool = df > 0
    p = _bartlett_p(ss[pool], df[pool])
    while p < HOMOGENEITY_P and pool.sum() > 2:
        loudest = np.flatnonzero(pool)[np.argmax(ss[pool] / df[pool])]
        pool[loudest] = False
        p = _bartlett_p(ss[pool], df[pool])
    if p < HOMOGENEITY_P or pool.sum() < 2:
        pool[:] = False
    return pool, p


def _with_class(noise: pd.DataFrame) -> pd.DataFrame:
    """Pooled unit variance and its degrees of freedom per point (its own if its noise
    differs from its class's), then the standard error, interval and minimum detectable
    effect."""
    rows = []
    for _, group in noise.groupby(CLASS + ["kind", "per_unit"], dropna=False, sort=False):
        ss, df = group["ss_units"].to_numpy(float), group["df_units"].to_numpy(float)
        pool, p = _agreeing(ss, df)
        within_df = group["df_within"].sum()
        within = group["ss_within"].sum() / within_df if within_df else np.nan
        # the points of one baseline share its instances' offsets: what the pool knows of the
        # baselines' spread has the baselines' degrees of freedom, not the points'
        baselines_df = float(group[pool].drop_duplicates("baseline")["df_units"].sum())
        for row, pooled, own_ss, own_df in zip(group.to_dict("records"), pool, ss, df,
                                               strict=True):
            var, dof = ((ss[pool].sum() / df[pool].sum(), df[pool].sum()) if pooled
                        else (own_ss / own_df if own_df else np.nan, own_df))
            se2 = var / row["units"]
            if row["kind"] == BASELINE_INSTANCES and np.isfinite(var):
                # the speculative instance's offset, taken to vary like the baseline's: the
                # unit variance less its measurement part (all of it, without a within estimate)
                instance = max(0.0, var - within / row["per_unit"]) if np.isfinite(within) \
                    else var
                se2 += instance
                # both parts come from the one unit variance: its degrees of freedom
                if pooled:
                    dof = baselines_df
            rows.append({**row, "pooled_points": int(pool.sum()) if pooled else 1,
                         "homogeneity_p": p,
                         # left out of its class's pool: its noise differs
                         "set_apart": bool(not pooled and own_df > 0 and (df > 0).sum() > 1),
                         "unit_var": var, "df": float(dof), "se": float(np.sqrt(se2))})
    out = pd.DataFrame(rows)
    half = [stats.t.ppf(0.5 + CONFIDENCE / 2, d) * s if d > 0 else np.nan
            for d, s in zip(out["df"], out["se"], strict=True)]
    out["low"] = np.exp(out["center"] - half)
    out["high"] = np.exp(out["center"] + half)
    out["mde"] = [minimum_detectable(s, d) for s, d in zip(out["se"], out["df"], strict=True)]
    return out


def point_noise(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative point with paired speedups (per-measurement rows in, as
    `aggregate.summarize` gives them): its unit kind, the pooled interval (`low`, `high`,
    around the geometric mean of its units), `df`, `se` of the log speedup, `mde` (the
    smallest speedup this design tells from 1 with 80 % power) and `covers` (what the interval
    covers, in words)."""
    paired = frame[(frame["method"] != "vanilla") & frame["speedup"].notna()
                   & (frame["speedup"] > 0)].drop_duplicates(["cell_id", "concurrency",
                                                              "request_rate", "repeat"])
    if paired.empty:
        return pd.DataFrame(columns=POINT + ["low", "high", "mde", "covers"])
    rows = []
    keys = POINT + CLASS[:4] + ["baseline_cell_id"]
    for key, group in paired.groupby(keys, dropna=False, sort=False):
        rows.append({**dict(zip(POINT + CLASS[:4] + ["baseline"], key, strict=True)), **_point_row(
            np.log(group["speedup"].to_numpy(float)),
            *(_instances(group, c) for c in ("server_instance", "baseline_server_instance")))})
    noise = _with_class(pd.DataFrame(rows))
    noise["covers"] = [
        f"{COVERS[kind]}; {_pooling(n, p, d, apart)}"
        for kind, n, p, d, apart in zip(noise["kind"], noise["pooled_points"],
                                        noise["homogeneity_p"], noise["df"], noise["set_apart"],
                                        strict=True)]
    return noise


def _instances(group: pd.DataFrame, column: str) -> np.ndarray:
    """The server instance of each repeat (records that do not say: one instance)."""
    if column not in group:
        return np.zeros(len(group))
    return group[column].fillna(0).to_numpy(dtype=float)


def dof_text(df: float) -> str:
    """'6 degrees of freedom'; '1 degree of freedom'."""
    return f"{df:.0f} degree{'' if round(df) == 1 else 's'} of freedom"


def _pooling(points: int, p: float, df: float, apart: bool) -> str:
    if points > 1:
        return (f"variance pooled over {points} points of its engine, target, method and level "
                f"({dof_text(df)}; Bartlett p = {p:.2f})")
    if apart:
        return (f"its own variance ({dof_text(df)}): its noise differs from the other points of "
                f"its engine, target, method and level (Bartlett p < {HOMOGENEITY_P})")
    return f"its own variance ({dof_text(df)})"


def _anova(groups: list[np.ndarray]) -> tuple[float, float, float, float]:
    """(between-group sum of squares of the group means, its df, within sum of squares, its
    df) of groups of values."""
    means = np.array([g.mean() for g in groups])
    within = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
    return (float(((means - means.mean()) ** 2).sum()), len(groups) - 1, within,
            sum(len(g) for g in groups) - len(groups))


LEVELS, SETTINGS, OTHER = "levels of one cell", "cells at one level", "one baseline"


def _relation(a: dict, b: dict) -> str | None:
    """How two points' errors are related: the levels of one cell share its server instances,
    the cells of one baseline at one level share the baseline's measurements, at different
    levels its instances; points of different baselines are independent (None)."""
    if a["cell_id"] == b["cell_id"]:
        return LEVELS
    if a["baseline"] != b["baseline"]:
        return None
    same_level = (point_key(None, a["concurrency"], a["request_rate"])
                  == point_key(None, b["concurrency"], b["request_rate"]))
    return SETTINGS if same_level else OTHER


def correlations(noise: pd.DataFrame) -> dict[str, float]:
    """The correlation of two points' errors, per relation (`_relation`), pooled over every
    pair of points that measured at least two units in common (the unit means' cross products
    about their means over those units, summed over pairs, over the root of the products of
    their sums of squares): the levels of one cell share its instances' offsets, the cells at
    one level share their baseline's noise. Points of different baselines are independent, and
    a relation no pair measured has no entry (read as 0)."""
    sums: dict[str, np.ndarray] = {}
    for rows in (group.to_dict("records") for _, group in noise.groupby("baseline", sort=False)):
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                common = sorted(set(a["unit_means"]) & set(b["unit_means"]))
                relation = _relation(a, b)
                if len(common) < 2 or relation is None:
                    continue
                x = np.array([a["unit_means"][u] for u in common])
                y = np.array([b["unit_means"][u] for u in common])
                x, y = x - x.mean(), y - y.mean()
                sums.setdefault(relation, np.zeros(3))
                sums[relation] += [(x * y).sum(), (x * x).sum(), (y * y).sum()]
    return {relation: float(np.clip(xy / np.sqrt(xx * yy), -1, 1)) if xx > 0 and yy > 0
            else 0.0 for relation, (xy, xx, yy) in sums.items()}


def covariance(points: pd.DataFrame, rho: dict[str, float]) -> np.ndarray:
    """The covariance of the points' log speedup estimates: each point's standard error from
    the pooled model, their correlation per relation (`correlations`), made positive
    semi-definite."""
    rows = points.to_dict("records")
    se = points["se"].to_numpy(float)
    corr = np.eye(len(rows))
    for i, a in enumerate(rows):
        for j in range(i + 1, len(rows)):
            b = rows[j]
            corr[i, j] = corr[j, i] = rho.get(_relation(a, b), 0.0)
    values, vectors = np.linalg.eigh(corr)
    corr = (vectors * np.clip(values, 0, None)) @ vectors.T
    scale = np.sqrt(np.clip(np.diag(corr), 1e-12, None))
    corr /= np.outer(scale, scale)
    return corr * np.outer(se, se)


def _server_spread(frame: pd.DataFrame) -> pd.DataFrame:
    """Per class, from the no-speculation points: the spread of log output throughput within
    one server instance and between instances (the instance means less their within part)."""
    ok = frame[(frame["method"] == "vanilla") & (frame["status"] == "ok")
               & (frame["output_throughput"] > 0)].drop_duplicates(
        ["cell_id", "concurrency", "request_rate", "repeat"])
    rows = []
    for key, group in ok.groupby(CLASS, dropna=False, sort=False):
        parts = []
        for _, point in group.groupby(POINT, dropna=False):
            values = np.log(point["output_throughput"].to_numpy(float))
            instances = _instances(point, "server_instance")
            parts.append(_anova([values[instances == i] for i in np.unique(instances)]))
        ss_b, df_b, ss_w, df_w = (np.array(p, dtype=float) for p in zip(*parts, strict=True))
        within = ss_w.sum() / df_w.sum() if df_w.sum() else np.nan
        per = len(group) / max(1.0, float((df_b + 1).sum()))  # repeats per instance
        between = (max(0.0, ss_b.sum() / df_b.sum() - within / per)
                   if df_b.sum() and np.isfinite(within) else np.nan)
        rows.append({**dict(zip(CLASS, key, strict=True)), "baseline within": within,
                     "baseline between": between})
    return pd.DataFrame(rows, columns=CLASS + ["baseline within", "baseline between"])


def point_key(cell_id: str, concurrency, rate) -> tuple:
    """A point as a hashable key (a missing level read as None, never NaN)."""
    return (cell_id, None if pd.isna(concurrency) else int(concurrency),
            None if pd.isna(rate) else float(rate))


def _level(row: dict) -> tuple:
    """A class without its method: engine, target and load level (NaN read as None)."""
    return tuple(None if pd.isna(row[c]) else row[c] for c in CLASS if c != "method")


def _units_needed(var: float, points: int, half_width: float) -> int | None:
    """The fewest units per point whose pooled interval (the same number of points pooled) is
    at most ± half_width (a share: 0.05 is ±5 %) on the speedup."""
    for units in range(2, 65):
        df = points * (units - 1)
        if stats.t.ppf(0.5 + CONFIDENCE / 2, df) * np.sqrt(var / units) <= np.log1p(half_width):
            return units
    return None


def _median(values: pd.Series) -> float:
    """The median of the finite values, NaN where there is none (one unit: no spread) —
    without numpy's all-NaN warning, which a report would print."""
    finite = values.dropna()
    return float(finite.median()) if len(finite) else np.nan


def precision(frame: pd.DataFrame) -> pd.DataFrame:
    """The variance components this run measured, per engine, target, method and level, and
    the design that would resolve ±5 % and ±10 %: one row per class of speculative points.
    Standard deviations are of the log (≈ a share: 0.03 is about 3 %); the measuring time a
    repeat costs is the mean duration of its two sides' runs."""
    noise = point_noise(frame)
    if noise.empty:
        return pd.DataFrame()
    sides = {_level(row): row for row in _server_spread(frame).to_dict("records")}
    duration = ({point_key(*k): v for k, v in frame.groupby(POINT, dropna=False)["duration"]
                 .mean().items()} if "duration" in frame else {})
    rows = []
    for key, group in noise.groupby(CLASS + ["kind"], dropna=False, sort=False):
        first = group.iloc[0]
        within_df = group["df_within"].sum()
        within = group["ss_within"].sum() / within_df if within_df else np.nan
        per = int(first["per_unit"])
        var = _median(group["unit_var"])
        between = (max(0.0, var - within / per) if np.isfinite(within) and
                   first["kind"] != WITHIN else np.nan)
        side = sides.get(_level(dict(zip(CLASS, key[:-1], strict=True))), {})
        # a repeat measures both sides: the speculative run and its baseline's
        seconds = float(pd.Series([duration.get(point_key(c, k, r), np.nan)
                                   + duration.get(point_key(b, k, r), np.nan)
                                   for c, b, k, r in zip(group["cell_id"], group["baseline"],
                                                         group["concurrency"],
                                                         group["request_rate"], strict=True)],
                                  dtype=float).mean())
        row = {**dict(zip(CLASS + ["unit"], key, strict=True)), "points": len(group),
               "repeats per point": int(group["n"].median()),
               "units per point": int(group["units"].median()), "repeats per unit": per,
               "unit sd": float(np.sqrt(var)), "df": float(group["df"].median()),
               "within sd (speedup)": float(np.sqrt(within)) if np.isfinite(within) else np.nan,
               "between sd (speedup)": float(np.sqrt(between)) if np.isfinite(between)
               else np.nan,
               "baseline within sd": float(np.sqrt(side.get("baseline within", np.nan))),
               "baseline between sd": float(np.sqrt(side.get("baseline between", np.nan))),
               "mde": _median(group["mde"])}
        for half in (0.05, 0.10):
            units = _units_needed(var, len(group), half)
            row[f"units for ±{half:.0%}"] = units
            extra = None if units is None else max(0, units * per - row["repeats per point"])
            row[f"added measuring s per point, ±{half:.0%}"] = (
                None if extra is None or not np.isfinite(seconds) else extra * seconds)
        rows.append(row)
    return pd.DataFrame(rows)
