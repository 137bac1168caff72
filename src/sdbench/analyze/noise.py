"""The noise model of the log speedup: variance components shared by server starts and baseline
runs, estimated per class of points with their degrees of freedom, and the interval, verdict and
minimum detectable effect every speculative point gets from it.

Each paired repeat r of a point (or block of prompts: every record) gives y = log(speculative ÷
baseline throughput). Under the model

    y = log S + a(the speculative server's start) − b(the baseline's start)
        − c(the baseline's run, shared by the settings paired with it) + e(the run),

a server start's offset (how fast that start happens to be) is shared by every run it
measures: every level and workload of its configuration on that start, and for the baseline
every setting paired with it. A point's estimate is the mean of its runs, and its variance is
the components' (`sdbench.variance`): a start that measured every run of a point counts in
full however many repeats it measured, one of three starts a third.

The components are estimated per *class*: the same engine, target, method and load level
(noise grows with concurrency and differs between a vanilla and a speculative server), pooled
over its workloads, k values and settings, with Satterthwaite's degrees of freedom (a
baseline start shared by every point of a class counts as the few draws it is) and each point's
spread shrunk toward its workload's and its class's (a noisier point keeps most of its own).
A class sees a start's variance only where some point of it ran on several starts (a chained
cell's stages, `server_instances`, the instance probe's extra starts: `grid.probe_cells`).
Where it does not, the component comes from the nearest class that does (the same method and
target at other levels, then the same target, then the engine), and the interval says from
where; where no class does, the interval covers the noise within one start only and says so.

`point_noise` gives one row per point; `point_intervals.aggregate_points` puts its interval and
verdict on the points table (the interval over the point's own repeats stays there, as
`speedup_unpooled_ci_low/high`); `covariance` gives the covariance of several points'
estimates (the crossover, the switch gain).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
from scipy import optimize, stats

from sdbench import variance
from sdbench.analyze.stats import CONFIDENCE

POWER = 0.8
# what a class shares: its points' noise is estimated together
CLASS = ["engine", "target", "method", "load", "concurrency", "request_rate"]
POINT = ["cell_id", "concurrency", "request_rate"]
INSTANCES, BASELINE_INSTANCES, WITHIN = "instances", "baseline instances", "within"
# the variance components, as the reports name them
SPEC_START, BASE_START, BASE_RUN = ("speculative server start", "baseline server start",
                                    "baseline run")
STARTS = (BASE_START, SPEC_START)
RUN = "run"  # each run's own noise (`variance.RESIDUAL`)
COVERS = {
    INSTANCES: "its repeats on several starts of the speculative server",
    BASELINE_INSTANCES: "its repeats on one start of the speculative server, several of the "
                        "baseline's",
    WITHIN: "its repeats on one start of each server",
}
# where a class's start component comes from, nearest first (`_donors`)
NEAR = (("engine", "target", "method", "load"), ("engine", "target"), ("engine",))


def _start_ids(frame: pd.DataFrame, prefix: str, cell: str) -> list[tuple]:
    """Each run's server start on one side (`prefix` "" for the speculative, "baseline_" for
    the baseline's): its configuration (its config id, else its cell) and the start (when the
    server started, else its session, else its server instance): runs of several workloads of
    one configuration on one start share it."""
    n = len(frame)

    def column(name: str) -> list:
        return frame[name].tolist() if name in frame else [None] * n

    configs = [c if isinstance(c, str) else x for c, x in zip(
        column(f"{prefix}config_id"), frame[cell].tolist(), strict=True)]
    started, sessions, instances = (column(f"{prefix}server_started_at"),
                                    column(f"{prefix}session"),
                                    column(f"{prefix}server_instance"))
    out = []
    for config, at, session, instance in zip(configs, started, sessions, instances,
                                             strict=True):
        if isinstance(at, str):
            out.append((config, "at", at))
        elif isinstance(session, str):
            out.append((config, "session", session))
        else:
            out.append((config, "instance", 0 if pd.isna(instance) else int(instance)))
    return out


def runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The paired speculative runs the model reads (per-measurement rows in, as
    `aggregate.summarize` gives them): their log speedup, point, class and the keys of the
    components they share."""
    if not {"method", "speedup", "cell_id", "baseline_cell_id"} <= set(frame):
        return pd.DataFrame()  # (no paired speedup in these rows)
    paired = frame[(frame["method"] != "vanilla") & frame["speedup"].notna()
                   & (frame["speedup"] > 0)].drop_duplicates(["cell_id", "concurrency",
                                                              "request_rate", "repeat"])
    if paired.empty:
        return pd.DataFrame()
    out = paired[[c for c in POINT + CLASS + ["workload", "baseline_cell_id", "repeat"]
                  if c in paired]].copy()
    out = out.loc[:, ~out.columns.duplicated()]
    if "workload" not in out:
        out["workload"] = None
    out["y"] = np.log(paired["speedup"].to_numpy(float))
    out[SPEC_START] = _start_ids(paired, "", "cell_id")
    out[BASE_START] = _start_ids(paired, "baseline_", "baseline_cell_id")
    out[BASE_RUN] = [(b, None if pd.isna(c) else int(c), None if pd.isna(q) else float(q), r)
                     for b, c, q, r in zip(paired["baseline_cell_id"], paired["concurrency"],
                                           paired["request_rate"], paired["repeat"],
                                           strict=True)]
    out["point"] = [point_key(*p) for p in zip(out["cell_id"], out["concurrency"],
                                               out["request_rate"], strict=True)]
    return out.reset_index(drop=True)


def _class_key(row: dict) -> tuple:
    return tuple(None if pd.isna(row[c]) else row[c] for c in CLASS)


def _fit(group: pd.DataFrame, external: dict | None = None) -> variance.Fit:
    return variance.fit(group["y"].to_numpy(float), group["point"].tolist(),
                        {name: group[name].tolist() for name in (*STARTS, BASE_RUN)},
                        external=external,
                        groups=dict(zip(group["point"], group["workload"], strict=True)))


def _exported(fit: variance.Fit) -> dict[str, tuple[float, float]]:
    """The start components a class measured, as another class borrows them: each with what
    the class could not tell apart from it folded in (a speculative start always paired with
    one baseline start), and its degrees of freedom."""
    out = {}
    residual = fit.sigma2.get(variance.RESIDUAL, np.nan)
    for name in STARTS:
        if name in fit.sigma2:
            value = fit.sigma2[name] + sum(fit.sigma2.get(other, 0.0)
                                           for other, into in fit.folded.items()
                                           if into == name)
            out[name] = (value, float(fit.df.get(name, np.inf)))
        elif name in fit.zero:  # (measured: no spread between starts beyond the runs')
            out[name] = (0.0, fit.zero[name])
        elif _in_runs(fit, name) and np.isfinite(residual):
            # seen, but not told apart from the runs (too few runs a start): the runs' whole
            # spread, once, is what the starts can be at most
            df = float(fit.df.get(variance.RESIDUAL, np.inf))
            out[name] = (0.0, df) if any(_in_runs(fit, n) for n in out) else (residual, df)
    return out


def _in_runs(fit: variance.Fit, name: str) -> bool:
    """Whether a start component was seen but folded into the runs' own spread."""
    return fit.folded.get(name) == variance.RESIDUAL


def _missing(fit: variance.Fit, group: pd.DataFrame) -> list[str]:
    """The start components a class's points load on that it did not measure."""
    return [name for name in STARTS if name not in fit.sigma2 and name not in fit.folded
            and name not in fit.zero and group[name].nunique() >= 1]


def _donors(key: tuple, measured: dict[tuple, dict], names: list[str]
            ) -> tuple[dict[str, tuple[float, float]], str | None]:
    """The start components a class borrows (name -> (variance, degrees of freedom)) and
    where from, in words: from the classes nearest to it that measured them (`NEAR`), their
    variances averaged by degrees of freedom, the degrees of freedom the most any of them has
    (classes at other levels of one configuration may share its starts)."""
    at = dict(zip(CLASS, key, strict=True))
    for fields in NEAR:
        found = [(k, v) for k, v in measured.items() if k != key
                 and all(dict(zip(CLASS, k, strict=True))[f] == at[f] for f in fields)
                 and any(n in v for n in names)]
        if not found:
            continue
        out = {}
        for name in names:
            values = [v[name] for _, v in found if name in v]
            if values:
                weights = np.array([max(df, 1.0) if np.isfinite(df) else 1e6
                                    for _, df in values])
                var = float(np.average([x for x, _ in values], weights=weights))
                out[name] = (var, float(max(df for _, df in values)))
        return out, _where(fields, [dict(zip(CLASS, k, strict=True)) for k, _ in found])
    return {}, None


def _where(fields: tuple, donors: list[dict]) -> str:
    levels = sorted({_level_text(d) for d in donors})
    if len(fields) == 4:
        return f"measured at {', '.join(levels)} (the same method and target)"
    methods = sorted({str(d["method"]) for d in donors})
    if len(fields) == 2:
        return f"measured with {', '.join(methods)} on the same target"
    targets = sorted({str(d["target"]) for d in donors})
    return f"measured with {', '.join(methods)} on {', '.join(targets)}"


def _level_text(row: dict) -> str:
    if row.get("concurrency") is not None and not pd.isna(row["concurrency"]):
        return f"concurrency {int(row['concurrency'])}"
    return f"{float(row['request_rate']):g} requests/s"


def fits(frame: pd.DataFrame) -> dict[tuple, tuple[variance.Fit, pd.DataFrame, str | None]]:
    """class key -> (its fit, its runs, where its borrowed start components come from: None
    where it measured them or borrowed none)."""
    table = runs(frame)
    if table.empty:
        return {}
    groups = {_class_key(g.iloc[0].to_dict()): g
              for _, g in table.groupby(CLASS, dropna=False, sort=False)}
    first = {key: _fit(group) for key, group in groups.items()}
    measured = {key: _exported(f) for key, f in first.items() if _exported(f)}
    out = {}
    for key, group in groups.items():
        fit = first[key]
        missing = _missing(fit, group)
        where = None
        if missing:
            external, where = _donors(key, measured, missing)
            if external:
                fit = _fit(group, external)
        out[key] = (fit, group, where)
    return out


def _half(df: float, se: float) -> float:
    return stats.t.ppf(0.5 + CONFIDENCE / 2, max(df, 1.0)) * se if np.isfinite(df) else (
        stats.norm.ppf(0.5 + CONFIDENCE / 2) * se)


def _class_rows(fit: variance.Fit, group: pd.DataFrame, where: str | None) -> list[dict]:
    """One `point_noise` row per point of a class, without its interval."""
    by_point = group.groupby("point", sort=False)
    # (not `agg(engine=...)`: `engine` is one of agg's own arguments)
    info = by_point[["cell_id", "concurrency", "request_rate", "engine", "target", "method",
                     "load", "workload", "baseline_cell_id"]].first().rename(
        columns={"baseline_cell_id": "baseline"})
    info["n"] = by_point["y"].size()
    info["spec_starts"] = by_point[SPEC_START].nunique()
    info["base_starts"] = by_point[BASE_START].nunique()
    return [_row(meta.to_dict(), fit.points[key], fit, where, len(info))
            for key, meta in info.iterrows()]


def _with_intervals(rows: list[dict]) -> pd.DataFrame:
    out = pd.DataFrame(rows)
    if out.empty:
        return pd.DataFrame(columns=POINT + ["low", "high", "mde", "covers"])
    halves = [_half(d, s) for d, s in zip(out["df"], out["se"], strict=True)]
    out["low"] = np.exp(out["center"] - halves)
    out["high"] = np.exp(out["center"] + halves)
    out["mde"] = [minimum_detectable(s, d) for s, d in zip(out["se"], out["df"], strict=True)]
    return out


def point_noise(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative point with paired speedups: its estimate (`center`, the mean log
    speedup of its runs), its variance's components and where the start component was measured
    (`instance_var`, `instance_from`), `df`, `se` of the log speedup, the interval (`low`,
    `high`), `mde` (the smallest speedup this design tells from 1 with 80 % power) and `covers`
    (what the interval covers, in words)."""
    return _with_intervals([row for fit, group, where in fits(frame).values()
                            for row in _class_rows(fit, group, where)])


def _kind(meta: dict) -> str:
    if meta["spec_starts"] > 1:
        return INSTANCES
    if meta["base_starts"] > 1:
        return BASELINE_INSTANCES
    return WITHIN


def _row(meta: dict, point: variance.Point, fit: variance.Fit, where: str | None,
         points: int) -> dict:
    kind = _kind(meta)
    starts = sum(point.parts.get(name, 0.0) for name in STARTS) * point.scale
    measured = any(name in fit.sigma2 or name in fit.folded or name in fit.zero
                   for name in STARTS)
    borrowed = any(name in fit.external for name in STARTS)
    run_var = sum(fit.sigma2.get(f, 0.0) + fit.external.get(f, (0.0, 0))[0]
                  for f in (*STARTS, BASE_RUN)) + fit.sigma2.get(variance.RESIDUAL, 0.0)
    n = int(meta["n"])
    var = point.var
    instance_df = _parts_df(point, fit, STARTS) if (measured or borrowed) else np.nan
    return {
        **{k: meta[k] for k in ("cell_id", "concurrency", "request_rate", "engine", "target",
                                "method", "load", "workload", "baseline")},
        "kind": kind, "n": n, "units": int(meta["spec_starts"]),
        "per_unit": int(round(n / max(int(meta["spec_starts"]), 1))),
        "center": point.center, "var": var, "se": float(np.sqrt(var)) if var >= 0 else np.nan,
        # (Satterthwaite's df of a design it is exact for comes out as a whole number; a
        # variance known exactly, infinite; none where nothing measured a spread)
        # (below 1, Satterthwaite's approximation says only that the variance is hardly
        # known: read as 1, Student's t at 12.7)
        "df": (np.nan if not np.isfinite(var) else max(1.0, round(float(point.df), 6))
               if np.isfinite(point.df) else 1e6),
        "scale": point.scale,
        "instance_var": starts, "instance_df": instance_df,
        # the rest of its variance: the runs' (its own and the baseline's), and their df
        "run_var": max(0.0, var - starts),
        "run_df": _parts_df(point, fit, (BASE_RUN, variance.RESIDUAL)),
        "instance_from": ("this class" if measured else where if borrowed else None),
        # one run's variance about the truth, and what the point's runs share beyond
        # independent runs (a start that measured all of them)
        "repeat_var": run_var * point.scale,
        "shared_var": max(0.0, var - run_var * point.scale / n),
        "pooled_points": points, "prior_df": fit.prior_df,
        "loads": point.loads,
        "sigma2": {**{k: v for k, v in fit.sigma2.items()},
                   **{k: v for k, (v, _) in fit.external.items()}},
        "covers": _covers(kind, points, point, fit, where, measured, borrowed)}


def _parts_df(point: variance.Point, fit: variance.Fit, names) -> float:
    """Satterthwaite's degrees of freedom of the sum of a point's parts of components
    `names` (each estimate's own: the class's, or where borrowed the donor's); infinite where
    none carries a variance."""
    parts = [(point.parts.get(name, 0.0), fit.df.get(name, np.inf) if name in fit.sigma2
              else fit.zero.get(name, fit.external.get(name, (0.0, np.inf))[1]))
             for name in names]
    if not any(v > 0 for v, _ in parts):
        # (none measured above 0: as sure as the estimates that said so)
        return min((d for _, d in parts), default=np.inf)
    parts = [(v, d) for v, d in parts if v > 0]
    spread = sum(v * v / d for v, d in parts if np.isfinite(d) and d > 0)
    return sum(v for v, _ in parts) ** 2 / spread if spread > 0 else np.inf


def _covers(kind: str, points: int, point: variance.Point, fit: variance.Fit,
            where: str | None, measured: bool, borrowed: bool) -> str:
    text = COVERS[kind]
    starts = sum(point.parts.get(name, 0.0) for name in STARTS) * point.scale
    if measured:
        text += (f"; the server starts' share (σ {np.sqrt(starts):.1%}) measured in its class"
                 if starts > 0 else "; the server starts measured in its class, not told apart "
                 "from its runs' spread (carried in it)" if any(_in_runs(fit, n)
                                                              for n in STARTS)
                 else "; the server starts measured in its class (no spread between them "
                 "beyond the runs')")
    elif borrowed:
        text += f"; the server starts' share (σ {np.sqrt(starts):.1%}) {where}"
    else:
        text += ("; the server starts' share is not covered: no class of this engine ran a "
                 "configuration on several starts (set `instance_probe:`)")
    pooled = (f"variance pooled over {points} points of its engine, target, method and level "
              f"({dof_text(point.df)})" if points > 1 else f"its own variance "
              f"({dof_text(point.df)})")
    if points > 1 and np.isfinite(fit.prior_df) and abs(point.scale - 1) > 0.05:
        pooled += (f", its own spread {point.scale:.2g}x the class's (shrunk toward its "
                   "workload's and class's)")
    return f"{text}; {pooled}"


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
    df = round(float(min(df, 1e4)), 1)
    return float(np.exp(_noncentrality(df) * se * np.sqrt(df / stats.chi2.median(df))))


def dof_text(df: float) -> str:
    """'6 degrees of freedom'; '1 degree of freedom'."""
    if not np.isfinite(df) or df >= 1e4:
        return "many degrees of freedom"
    return f"{df:.0f} degree{'' if round(df) == 1 else 's'} of freedom"


def covariance(points: pd.DataFrame, rho: dict | None = None) -> np.ndarray:
    """The covariance of the points' log speedup estimates (`point_noise` rows): each point's
    variance on the diagonal; between two points, every component they share (a server start
    that measured both, a baseline run both are paired with), its weight in each point's mean
    times the component's standard deviation in each point's class. (`rho`: unused, kept for
    callers of the earlier correlation model.)"""
    rows = points.to_dict("records")
    cov = np.diag(points["var"].to_numpy(float))
    for i, a in enumerate(rows):
        for j in range(i + 1, len(rows)):
            b = rows[j]
            total = 0.0
            for name in (*STARTS, BASE_RUN):
                la, lb = a["loads"].get(name, {}), b["loads"].get(name, {})
                shared = set(la) & set(lb)
                if not shared:
                    continue
                sd = np.sqrt(max(a["sigma2"].get(name, 0.0), 0.0)
                             * max(b["sigma2"].get(name, 0.0), 0.0))
                total += sd * sum(la[k] * lb[k] for k in shared)
            cov[i, j] = cov[j, i] = total * np.sqrt(a["scale"] * b["scale"])
    return cov


def correlations(noise: pd.DataFrame) -> dict[str, float]:
    """Kept for callers of the earlier model: the covariance now comes from the components
    (`covariance`)."""
    return {}


def point_key(cell_id: str, concurrency, rate) -> tuple:
    """A point as a hashable key (a missing level read as None, never NaN)."""
    return (cell_id, None if pd.isna(concurrency) else int(concurrency),
            None if pd.isna(rate) else float(rate))


def _units_needed(start: float, within: float, per: int, half_width: float,
                  df: float) -> int | None:
    """The fewest starts per point (each measuring `per` runs) whose interval is at most
    ± half_width (a share: 0.05 is ±5 %) on the speedup, the start and within-start variances
    as measured, at `df` degrees of freedom."""
    t = stats.t.ppf(0.5 + CONFIDENCE / 2, max(df, 1.0))
    for units in range(1, 65):
        if t * np.sqrt((start + within / per) / units) <= np.log1p(half_width):
            return units
    return None


def _median(values: pd.Series) -> float:
    """The median of the finite values, NaN where there is none — without numpy's all-NaN
    warning, which a report would print."""
    finite = pd.to_numeric(values, errors="coerce").dropna()
    return float(finite.median()) if len(finite) else np.nan


def precision(frame: pd.DataFrame) -> pd.DataFrame:
    """The variance components this run measured, per engine, target, method and level (one
    row per class of speculative points: standard deviations of the log, ≈ shares), where the
    server starts' share was measured, the minimum detectable speedup, and the starts per point
    that would resolve ±5 % and ±10 % (with the measuring time they add: a repeat costs the
    mean duration of its two sides' runs)."""
    found = fits(frame)
    if not found:
        return pd.DataFrame()
    duration = ({point_key(*k): v for k, v in frame.groupby(POINT, dropna=False)["duration"]
                 .mean().items()} if "duration" in frame else {})
    rows = []
    for key, (fit, group, where) in found.items():
        points = _with_intervals(_class_rows(fit, group, where))
        sigma = {**fit.sigma2, **{k: v for k, (v, _) in fit.external.items()}}
        start = sum(sigma.get(name, 0.0) for name in STARTS)
        within = sigma.get(variance.RESIDUAL, 0.0) + sigma.get(BASE_RUN, 0.0)
        per = int(points["per_unit"].median()) if len(points) else 1
        measured = any(n in fit.sigma2 or n in fit.folded or n in fit.zero for n in STARTS)
        seconds = float(pd.Series([duration.get(point_key(c, k, r), np.nan)
                                   + duration.get(point_key(b, k, r), np.nan)
                                   for c, b, k, r in zip(points["cell_id"], points["baseline"],
                                                         points["concurrency"],
                                                         points["request_rate"],
                                                         strict=True)], dtype=float).mean())
        row = {**dict(zip(CLASS, key, strict=True)), "points": len(points),
               "runs per point": int(points["n"].median()),
               "starts per point": int(points["units"].median()), "runs per start": per,
               "run sd": float(np.sqrt(sigma.get(variance.RESIDUAL, np.nan))),
               "baseline run sd": float(np.sqrt(sigma[BASE_RUN])) if BASE_RUN in sigma
               else np.nan,
               "start sd": float(np.sqrt(start)) if (measured or fit.external) else np.nan,
               "start df": _median(points["instance_df"]),
               "start measured": ("in this class" if measured else where if fit.external
                                  else "nowhere: within one start only"),
               "df": _median(points["df"]), "mde": _median(points["mde"])}
        for half in (0.05, 0.10):
            units = _units_needed(start, within, per, half, row["df"])
            row[f"starts for ±{half:.0%}"] = units
            extra = None if units is None else max(0, units * per - row["runs per point"])
            row[f"added measuring s per point, ±{half:.0%}"] = (
                None if extra is None or not np.isfinite(seconds) else extra * seconds)
        rows.append(row)
    return pd.DataFrame(rows)
