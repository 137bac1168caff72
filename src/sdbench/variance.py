"""Variance components of paired measurements, by moments, with Satterthwaite degrees of freedom
and each point's noise shrunk toward its pool.

A *class* of points (say one method's k values and workloads at one load level) is measured in
runs y_i (log speedups: one per repeat, or per block of prompts). A point's estimate is the mean
of its runs. Runs share random effects through *factors*: every run of one server start shares
that start's offset, the runs of several settings paired with one baseline measurement share
its noise. The model is

    y_i = μ(point of i) + Σ_F u_F(key of i under F) + e_i,   Var(u_F) = σ²_F,  Var(e) = σ²_0,

and the variances are estimated by moments (Henderson's method, unweighted): the residuals r of
each point about its mean, and the quadratic forms ‖Z_F' r‖² and ‖r‖², whose expectations are
linear in the σ²'s. A factor whose runs all belong to one point (a server start that measured
one point only, or every point on one start) adds nothing to the residuals: it is *not seen* in
the class, and its variance comes from elsewhere (`fit`'s `external`: measured by other classes
or by starts made on purpose, with its own degrees of freedom). A factor that the class cannot
tell apart from another (a speculative server's start always paired with the same baseline
start) is folded into the first of them.

A point's variance is Σ_F σ²_F ‖Z_F' c‖² + σ²_0 ‖c‖² (c: the point's weights over the runs), so
the start of a server that measured every run of a point counts in full, and one of several
starts a third; its degrees of freedom are Satterthwaite's, from the covariance of the estimated
components under normality, so that components shared by many points (one baseline's start)
count as the few draws they are, not as the many points that share them. A point's own spread
against what the class expects of it is then shrunk toward its group's (its workload's) and the
group's toward the class's (Smyth's 2004 empirical Bayes: the prior's degrees of freedom are
fitted to how much the spreads differ), so that a point noisier than the rest keeps most of its
own variance and one like them borrows the class's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special

RESIDUAL = "residual"
# where points' spreads differ, the pool they are shrunk toward counts for at most this share of
# a point's own degrees of freedom: the fitted prior is one population of variances, and a pool
# of quiet and noisy points predicts any one of them worse than its degrees of freedom say
# (with the fitted weight alone, a class whose points were 3x noisier at random kept its noisy
# half's intervals below 90 % coverage; with this share, docs/precision-simulation.md's rows)
POOL_SHARE = 0.25
# below this a factor's share of the residuals counts as none (not seen in the class)
_TOLERANCE = 1e-9


def _indicator(keys) -> tuple[np.ndarray, list]:
    """The runs x groups indicator of `keys` (any hashable), and the groups in order."""
    groups: dict = {}
    index = np.array([groups.setdefault(k, len(groups)) for k in keys], dtype=int)
    z = np.zeros((len(index), len(groups)))
    z[np.arange(len(index)), index] = 1.0
    return z, list(groups)


@dataclass
class Point:
    """One point's estimate from its class's fit."""

    center: float  # the mean of its runs
    var: float  # the variance of that mean, its scale applied
    df: float  # Satterthwaite's degrees of freedom of `var`
    scale: float  # its own spread ÷ the class's, shrunk (1: like its class)
    # per factor: the variance it contributes, before `scale`
    parts: dict[str, float] = field(default_factory=dict)
    # per factor: the point's weight on each key (the covariance of two points sums over the
    # keys they share)
    loads: dict[str, dict] = field(default_factory=dict)


@dataclass
class Fit:
    """A class's variance components and its points."""

    sigma2: dict[str, float]  # per factor seen in the class (and RESIDUAL): its variance
    df: dict[str, float]  # the degrees of freedom of each estimate (2 σ⁴ ÷ its variance)
    folded: dict[str, str]  # a factor the class cannot tell apart -> the one it is folded into
    external: dict[str, tuple[float, float]]  # factors from elsewhere: (variance, df)
    points: dict  # point key -> Point
    prior_df: float  # the points' shrinkage prior's degrees of freedom (inf: every point alike)
    runs: int
    # factors seen in the class whose estimate fell below 0 (set to none): their df
    zero: dict[str, float] = field(default_factory=dict)


def _moments(r: np.ndarray, m: np.ndarray, zs: list[np.ndarray], n: int,
             p: int) -> tuple[np.ndarray, np.ndarray]:
    """(S, q): the expectations' coefficients and the observed quadratic forms, the factors
    `zs` then the residual."""
    k = len(zs) + 1
    s, q = np.zeros((k, k)), np.zeros(k)
    mz = [m @ z for z in zs]
    for a, za in enumerate(zs):
        q[a] = float(np.sum((za.T @ r) ** 2))
        for b in range(len(zs)):
            s[a, b] = float(np.sum((za.T @ mz[b]) ** 2))
        s[a, -1] = float(np.sum(mz[a] ** 2))
        s[-1, a] = s[a, -1]
    s[-1, -1], q[-1] = float(n - p), float(r @ r)
    return s, q


def _independent(zs: dict[str, np.ndarray], m: np.ndarray) -> tuple[list[str], dict[str, str]]:
    """The factors seen in the class (their runs span several points) that the class can tell
    apart, in order; and each other seen factor -> the one it is folded into (the first whose
    pattern of shared residuals is the same, else the residual's)."""
    patterns = {}
    for name, z in zs.items():
        mz = m @ z
        if np.sum(mz ** 2) > _TOLERANCE:
            patterns[name] = (mz @ mz.T).ravel()
    kept: list[str] = []
    folded: dict[str, str] = {}
    for name, pattern in patterns.items():
        block = np.column_stack([patterns[f] for f in kept] + [pattern, m.ravel()])
        tol = 1e-8 * max(1.0, float(np.abs(block).max()))
        if np.linalg.matrix_rank(block, tol=tol) == len(kept) + 2:
            kept.append(name)
        else:
            folded[name] = next((f for f in kept if np.allclose(patterns[f], pattern)),
                                RESIDUAL)
    return kept, folded


def _solve(s: np.ndarray, q: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """The moment estimates, a factor whose estimate falls below 0 set to 0 and the rest solved
    again without it."""
    use = list(range(len(names)))
    while True:
        idx = use + [len(names)]
        est = np.linalg.solve(s[np.ix_(idx, idx)], q[idx])
        negative = [use[a] for a in range(len(use)) if est[a] < 0]
        if not negative:
            out = np.zeros(len(names) + 1)
            out[idx] = est
            out[-1] = max(out[-1], 0.0)
            return out, [names[i] for i in use]
        use = [i for i in use if i not in negative]


def fit_dist(s2: np.ndarray, df: np.ndarray) -> tuple[float, float]:
    """(prior scale s0², prior degrees of freedom d0) of variances `s2` on `df` degrees of
    freedom as scaled-F draws (Smyth 2004, limma's fitFDist by moments of log s²); d0 = inf
    where they vary no more than their degrees of freedom explain."""
    keep = (df > 0) & (s2 > 0) & np.isfinite(s2)
    s2, df = s2[keep], df[keep]
    if len(s2) < 3:
        return (float(np.mean(s2)) if len(s2) else np.nan), np.inf
    z = np.log(s2)
    e = z - special.digamma(df / 2) + np.log(df / 2)
    mean = float(e.mean())
    excess = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, df / 2)))
    if excess <= 0:
        return float(np.exp(mean)), np.inf
    d0 = 2 * float(optimize.brentq(lambda x: special.polygamma(1, x) - excess, 1e-8, 1e8))
    return float(np.exp(mean + special.digamma(d0 / 2) - np.log(d0 / 2))), d0


def _moderate(ratios: dict, prior: dict | None = None) -> tuple[dict, float]:
    """(key -> (its ratio shrunk toward the prior, degrees of freedom), the prior's degrees of
    freedom d0) of ratios key -> (ratio, its df), the prior fitted to them (`fit_dist`) and,
    where given, each key's own prior (key -> (its scale, its df)) multiplying it. Where they
    vary no more than their degrees of freedom explain (d0 infinite), each takes its prior (the
    fitted scale on the ratios' pooled df)."""
    keys = list(ratios)
    if len(keys) < 3:
        return {}, np.inf
    base = prior or {k: (1.0, np.inf) for k in keys}
    values = np.array([ratios[k][0] / base[k][0] for k in keys])
    nus = np.array([ratios[k][1] for k in keys])
    s0, d0 = fit_dist(values, nus)
    out = {}
    for k, value, nu in zip(keys, values, nus, strict=True):
        scale, scale_df = base[k]
        if not np.isfinite(d0):
            out[k] = (scale * s0, min(scale_df, float(nus.sum())))
            continue
        # the prior's own uncertainty: how far one point strays from it (d0) and how well its
        # scale is known (scale_df)
        prior_df = 1 / (1 / d0 + 1 / scale_df)
        weight = min(d0, POOL_SHARE * nu)
        w = weight / (weight + nu)
        out[k] = (scale * (w * s0 + (1 - w) * value),
                  1 / (w ** 2 / prior_df + (1 - w) ** 2 / nu))
    return out, d0


def shrunk(own: dict, groups: dict, by_group: dict | None = None) -> tuple[dict, float]:
    """(point -> (its scale, the scale's degrees of freedom), the points' prior degrees of
    freedom): each point's own spread ÷ what its class expects (`own`: point -> (ratio, df))
    shrunk toward its group's (its workload's: `groups`; `by_group`: group -> (ratio, df), its
    points' spread together, whose degrees of freedom count what they share), the groups'
    shrunk toward the class's; where points and groups alike vary no more than their degrees
    of freedom explain, none (every point takes the class's; infinite prior degrees of
    freedom)."""
    if by_group is None:
        pooled: dict = {}
        for key, (ratio, nu) in own.items():
            group = groups.get(key, key)
            total, df = pooled.get(group, (0.0, 0.0))
            pooled[group] = (total + ratio * nu, df + nu)
        by_group = {g: (total / df, df) for g, (total, df) in pooled.items() if df > 0}
    level, level_d0 = _moderate(by_group) if len(by_group) < len(own) else ({}, np.inf)
    prior = {key: level.get(groups.get(key, key), (1.0, np.inf)) for key in own}
    points, d0 = _moderate(own, prior)
    if not np.isfinite(d0) and not np.isfinite(level_d0):
        return {}, np.inf  # every point like its class
    return points or {key: prior[key] for key in own}, d0


def _group_spreads(x: np.ndarray, points: list, groups: dict, r: np.ndarray,
                   v: np.ndarray) -> dict:
    """group -> (its points' residual sum of squares ÷ what the class expects of it, its
    degrees of freedom 2 E² ÷ Var): the covariance among its points' residuals (a baseline run
    they share) counted, so that a group of points that share noise does not pass for more
    degrees of freedom than it has."""
    out = {}
    for group in dict.fromkeys(groups.get(p, p) for p in points):
        columns = [j for j, p in enumerate(points) if groups.get(p, p) == group]
        rows = np.flatnonzero(x[:, columns].sum(axis=1))
        block = v[np.ix_(rows, rows)]
        expected = float(np.trace(block))
        if expected > 0 and len(rows) > 1:
            out[group] = (float(r[rows] @ r[rows]) / expected,
                          expected ** 2 / float(np.sum(block * block)))
    return out


def fit(y, point, factors: dict[str, list], external: dict[str, tuple[float, float]]
        | None = None, shrink: bool = True, groups: dict | None = None) -> Fit:
    """The variance components of one class of runs: `y` their values, `point` the point each
    belongs to, `factors` name -> each run's key under it (runs sharing a key share an effect).
    `external`: name -> (variance, degrees of freedom) of factors this class does not see,
    measured elsewhere (they add to the points they load on). `shrink`: each point's spread
    against the class's shrunk toward it (else every point takes the class's), in two steps where
    `groups` (point -> its group: a workload) names them (`shrunk`)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    x, points = _indicator(list(point))
    counts = x.sum(axis=0)
    m = np.eye(n) - (x / counts) @ x.T
    r = m @ y
    zs, keys = {}, {}
    for name, column in factors.items():
        zs[name], keys[name] = _indicator(list(column))
    kept, folded = _independent(zs, m)
    s, q = _moments(r, m, [zs[f] for f in kept], n, len(points))
    if n - len(points) <= 0:  # one run a point: nothing to estimate in the class
        est, used = np.zeros(len(kept) + 1), []
        est[-1] = np.nan
    else:
        est, used = _solve(s, q, kept)
    sigma2 = {name: float(est[i]) for i, name in enumerate(kept) if name in used}
    sigma2[RESIDUAL] = float(est[-1])
    # seen but estimated below 0: measured as none, on as many df as its keys give
    zero = {name: float(max(1, len(keys[name]) - 1)) for name in kept if name not in used}
    names = [f for f in kept if f in used]
    cov_names = names + [RESIDUAL]
    # the estimates' covariance: Cov(q_a, q_b) = 2 tr(A_a V A_b V), V = M Σ M
    if np.isfinite(sigma2[RESIDUAL]):
        # M Σ M, Σ = σ²_0 I + Σ_F σ²_F Z_F Z_F' (M idempotent)
        v = sigma2[RESIDUAL] * m
        for name in names:
            mz = m @ zs[name]
            v += sigma2[name] * (mz @ mz.T)
        ws = [zs[f] @ (zs[f].T @ v) for f in names] + [v]
        c = np.array([[2 * float(np.sum(a * b.T)) for b in ws] for a in ws])
        idx = [kept.index(f) for f in names] + [len(kept)]
        sinv = np.linalg.inv(s[np.ix_(idx, idx)])
        cov = sinv @ c @ sinv.T
    else:
        v, cov = None, np.full((len(cov_names), len(cov_names)), np.nan)
    dfs = {name: (2 * sigma2[name] ** 2 / cov[i, i] if cov[i, i] > 0 else np.inf)
           for i, name in enumerate(cov_names)}
    external = {name: value for name, value in (external or {}).items()
                if name in factors and name not in sigma2 and folded.get(name) is None}
    out: dict = {}
    own: dict = {}
    for j, key in enumerate(points):
        rows = np.flatnonzero(x[:, j])
        weight = np.zeros(n)
        weight[rows] = 1.0 / len(rows)
        loads = {}
        parts = {}
        g = np.zeros(len(cov_names))
        for name in factors:
            z = zs[name]
            load = z.T @ weight
            loads[name] = {keys[name][i]: float(load[i]) for i in np.flatnonzero(load)}
            if name in sigma2:
                g[cov_names.index(name)] = float(load @ load)
                parts[name] = sigma2[name] * float(load @ load)
            elif name in external:
                parts[name] = external[name][0] * float(load @ load)
        g[-1] = float(weight @ weight)
        parts[RESIDUAL] = sigma2[RESIDUAL] * g[-1]
        var = float(sum(parts.values()))
        spread = float(g @ cov @ g) + sum(
            2 * (parts[name]) ** 2 / df for name, (_, df) in external.items()
            if parts.get(name) and df > 0)
        df = 2 * var ** 2 / spread if spread > 0 else (np.inf if var > 0 else np.nan)
        out[key] = Point(float(weight @ y), var, df, 1.0, parts, loads)
        if v is not None and len(rows) > 1:
            block = v[np.ix_(rows, rows)]
            expected = float(np.trace(block))
            if expected > 0:
                own[key] = (float(r[rows] @ r[rows]) / expected,
                            2 * expected ** 2 / (2 * float(np.sum(block * block))))
    prior_df = np.inf
    if shrink:
        scales, prior_df = shrunk(own, groups or {}, _group_spreads(
            x, points, groups or {}, r, v) if v is not None else None)
        for key, (scale, df_scale) in scales.items():
            point_fit = out[key]
            df = (df_scale if not np.isfinite(point_fit.df)
                  else point_fit.df if not np.isfinite(df_scale)
                  else 1 / (1 / point_fit.df + 1 / df_scale))
            out[key] = Point(point_fit.center, point_fit.var * scale, df, scale,
                             point_fit.parts, point_fit.loads)
    return Fit(sigma2, dfs, folded, external, out, prior_df, n, zero)
