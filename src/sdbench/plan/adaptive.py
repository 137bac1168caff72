"""Measurement that stops when its answer is known: the sequential rule a point's repeats follow,
the race that drops a setting clearly beaten at a load, and the bisection that adds load levels
only where the decision changes.

**A point's repeats.** Each paired repeat r gives y_r = log(speculative ÷ baseline throughput).
After each repeat n = 1 … N (N = the planned repeats: the cap) the point's interval is a
*repeated confidence interval* (Jennison & Turnbull 1989): ȳ_n ± c_n · σ / √n, with boundaries
of the Wang & Tsiatis (1987) family, c_n = C · (n / N)^(Δ − ½): Δ = ½ is Pocock's (the same at
every look), Δ = 0 O'Brien & Fleming's (strict early, near the fixed-sample value at the cap).
C is set so that all N intervals cover the true speedup together with probability 1 − α under
the normal model (`boundary`): so the interval at whatever look the point stops covers it at
least that often, however the stop was chosen. σ is the noise model's standard deviation of one
repeat's log speedup: the configured prior (`adaptive.noise`, from the variance measured on
GPUs: docs/design-defaults.md) counted as `prior_df` degrees of freedom, pooled with the spread
of the repeats measured so far at the same level (`pooled_sigma`); the boundary then grows by
the ratio of Student's t to the normal quantile at those degrees of freedom. The prior may
differ by concurrency (`adaptive.level_noise`, `Rule.noise_at`): one request at a time runs the
same batches in every repeat, and an H100 measured far less spread there than under load.

A point stops (`decide`; never before `min_repeats`, and above temperature 0 never before two:
`cell_rule`) when it is beaten (the race: its mean
lies below the best other setting's at its load by more than their difference's sequential
half-width, `race_bar`; with `beaten_needs_verdict`, the config's default, once its own verdict
against 1 is settled or out of reach by the cap too, so that a beaten setting's verdict is the
one the full design would give), when its interval is narrower than `precision` (±5 % by default),
when its verdict against 1 is settled (the interval excludes 1) and no other setting at its
load is still in the race with it (a rival it can no longer be told from by the cap is tied with
it, `separable`), when its chance of a verdict by the cap falls below
`futility` (`verdict_chance`), or at the cap; each stop records why and the numbers it was
decided on, so that the report recomputes it (`recheck`).

**Blocks of prompts.** With `blocks` > 1, a repeat at a low closed-loop concurrency is split
into blocks of its prompts (`specs.point_blocks`: as many as keep 4 waves of the concurrency in
a block, at most `blocks`), each a repeat of its own with its own seed: both sides of a pair
send the same prompts in it, and a point can stop after a block instead of a whole repeat. The
looks are then the blocks (repeats × blocks), and the prior σ is a block's (`Rule.at`).

**Load levels.** A sweep measures a coarse grid first (`coarse_levels`: `coarse` levels, the
lowest and highest among them), then the level halfway (in the grid's order) between two
measured neighbours whose decisions differ — the verdict against 1 of each speculator's best
setting there (`level_decisions`) — until neighbours are adjacent or agree (`bisect`); at an
added level only the settings best at either neighbour are measured. Every level has its place
in that tree before anything is measured (`level_tree`: its depth and the two levels that
decide it), so a session measures depth by depth and decides each level from finished ones.

The rule is a plan-stage module: the measuring stage applies it while it measures, and the
analysis stage recomputes it. `sdbench.plan.sweeps` simulates whole sweeps through it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from functools import cache, lru_cache

import numpy as np

from sdbench.plan import grid, settings, specs

CONTINUE, SETTLED, PRECISE, BEATEN, FUTILE, CAP = (
    "continue", "settled", "precise", "beaten", "futile", "cap")
REASONS = (SETTLED, PRECISE, BEATEN, FUTILE, CAP)
LEVEL = "level"  # a point at a level the bisection leaves out (for its cell, or for all)
BASELINE = "baseline"  # a cell others stop against, stopped where all of them have


# the config's defaults where they differ from a stored rule's (`Rule.from_config`): the prior
# counts for 4 degrees of freedom (a run's own spread outweighs it after a few repeats: with 20,
# a prior at half the true noise kept intervals too narrow, 85 % coverage in simulation), and
# the server starts' share of one repeat's log speedup is 3 % (the H100's instances of one
# configuration differed by 0.1-3.8 %, docs/design-defaults.md)
PRIOR_DF = 4.0
INSTANCE_NOISE = 0.03


@dataclass(frozen=True)
class Rule:
    """The sequential rule of one sweep (the config's `adaptive:`)."""

    precision: float = 0.05  # stop when the interval is within ± this share of the speedup
    alpha: float = 0.05  # 1 − the simultaneous coverage of a point's intervals
    shape: float = 0.25  # Wang & Tsiatis' Δ: 0.5 Pocock, 0 O'Brien-Fleming
    noise: float = 0.05  # prior sd of one repeat's log speedup within a server start
    prior_df: float = 20.0  # how many degrees of freedom the prior counts for
    futility: float = 0.1  # stop when the chance of a verdict by the cap falls below this
    min_repeats: int = 1  # never stop before this many paired repeats
    bisect: bool = True  # measure `coarse` load levels first, add others where decisions differ
    coarse: int = 3  # how many levels the coarse grid has (the lowest and highest among them)
    blocks: int = 1  # the most blocks of prompts a repeat splits into at a low concurrency
    # (concurrency, prior σ of one repeat's log speedup there) where it is not `noise`
    level_noise: tuple[tuple[int, float], ...] = ()
    # a setting beaten in the race stops only once its own verdict against 1 is settled or
    # out of reach by the cap (`decide`); False: at once (the rule before 2026-11-28: a stored
    # rule without the key reads so, and its stops recheck as they were decided)
    beaten_needs_verdict: bool = False
    # prior sd of the server starts' share of the log speedup (both sides' starts: it does not
    # shrink with more repeats on one start); None: the rule before 2026-12-07, which counted
    # none and pooled the looks' spread with `noise` (a stored rule without the key reads so)
    instance_noise: float | None = None

    def __post_init__(self):
        # from the config (a mapping) or a stored stop (JSON lists): sorted pairs, hashable
        pairs = self.level_noise.items() if isinstance(self.level_noise, dict) else (
            self.level_noise or ())
        object.__setattr__(self, "level_noise", tuple(sorted(
            (int(level), float(sigma)) for level, sigma in pairs)))

    @classmethod
    def from_config(cls, section: dict | None) -> Rule | None:
        """The config's `adaptive:` section as a rule; None where it is off or absent."""
        if not settings.adaptive_on(section):
            return None
        return cls(**{"beaten_needs_verdict": True, "prior_df": PRIOR_DF,
                      "instance_noise": INSTANCE_NOISE,
                      **{f.name: section[f.name] if f.name == "level_noise"
                         else float(section[f.name]) if f.name == "instance_noise"
                         else type(f.default)(section[f.name]) for f in fields(cls)
                         if f.name in section}})

    def to_dict(self) -> dict:
        """As stored with a stop and a point (JSON: the level priors as [level, σ] lists; none
        named, no key: a rule without them reads as it did before they existed, and the stops
        cached under it stand)."""
        out = asdict(self)
        if self.level_noise:
            out["level_noise"] = [list(p) for p in self.level_noise]
        else:
            del out["level_noise"]
        if not self.beaten_needs_verdict:
            del out["beaten_needs_verdict"]
        if self.instance_noise is None:
            del out["instance_noise"]
        return out

    def noise_at(self, concurrency: int | None = None) -> float:
        """The prior σ of one whole repeat's log speedup at a closed-loop `concurrency` (its
        own where `level_noise` names it, else `noise`; open-loop rates: `noise`)."""
        return dict(self.level_noise).get(concurrency, self.noise)

    def at(self, blocks: int = 1, concurrency: int | None = None) -> Rule:
        """The rule at one level: its prior σ the level's own (`noise_at`) and, where its
        repeats are split into `blocks` blocks of prompts (`specs.point_blocks`), one block's,
        √blocks times a whole repeat's (its noise within a server start is its prompts' own);
        a level's own prior scales the starts' share alike (an H100's instances differed less
        at concurrency 1 than under load), which blocks leave as it is (a start's offset is
        shared by all its blocks)."""
        level = self.noise_at(concurrency)
        noise = level * math.sqrt(max(blocks, 1))
        instance = (None if self.instance_noise is None
                    else self.instance_noise * level / self.noise)
        return replace(self, noise=noise, level_noise=(), instance_noise=instance)


def staying_inside(bound, step: float = 0.05) -> float:
    """P(|Z_n| ≤ bound[n − 1] for every n) for the standardized mean Z_n = S_n / √n of n
    independent N(0, 1) steps, by recursive numerical integration (Armitage, McPherson & Rowe
    1969): the density of S_n on its continuation region |S_n| ≤ bound · √n, carried look to
    look by convolution with the step's density on a grid (`step` apart, Simpson's rule)."""
    edges = np.asarray(bound, dtype=float) * np.sqrt(np.arange(1, len(bound) + 1))

    def grid(edge: float) -> tuple[np.ndarray, np.ndarray]:
        m = max(int(math.ceil(2 * edge / step)), 2)
        m += m % 2
        x = np.linspace(-edge, edge, m + 1)
        w = np.ones(m + 1)
        w[1:-1:2], w[2:-1:2] = 4, 2
        return x, w * (2 * edge / m) / 3

    x, w = grid(edges[0])
    density = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    for edge in edges[1:]:
        y, v = grid(edge)
        gap = y[:, None] - x[None, :]
        density = (np.exp(-0.5 * gap * gap) @ (density * w)) / math.sqrt(2 * math.pi)
        x, w = y, v
    return float(np.sum(density * w))


@cache
def boundary(looks: int, alpha: float = 0.05, shape: float = 0.25) -> tuple[float, ...]:
    """c_1 … c_N of the Wang-Tsiatis family for N equally spaced looks: P(|Z_n| ≤ c_n for
    every n) = 1 − α, Z_n the standardized mean after n of N repeats (`staying_inside`)."""
    # scipy here and below, not at the top: the workflow's parse imports this module
    from scipy import optimize, stats

    if looks == 1:
        return (float(stats.norm.ppf(1 - alpha / 2)),)
    shape_n = (np.arange(1, looks + 1) / looks) ** (shape - 0.5)
    scale = optimize.brentq(lambda c: staying_inside(c * shape_n) - (1 - alpha), 1.0, 6.0,
                            xtol=1e-7)
    return tuple(float(scale * s) for s in shape_n)


@lru_cache(maxsize=4096)
def multiplier(n: int, looks: int, rule: Rule, df: float) -> float:
    """The interval's multiplier after n of `looks` repeats with σ on `df` degrees of freedom."""
    from scipy import stats

    z = stats.norm.ppf(1 - rule.alpha / 2)
    t = stats.t.ppf(1 - rule.alpha / 2, df) if math.isfinite(df) else z
    return boundary(looks, rule.alpha, rule.shape)[n - 1] * t / z


def spread(groups) -> tuple[float, float]:
    """The within-point sum of squares and degrees of freedom of `groups` (each a point's
    repeats so far; points of one repeat add nothing)."""
    ss = df = 0.0
    for values in groups:
        if len(values) > 1:
            values = np.asarray(values, dtype=float)
            ss += float(np.sum((values - values.mean()) ** 2))
            df += len(values) - 1
    return ss, df


def pooled_sigma(rule: Rule, ss: float, df: float) -> tuple[float, float]:
    """σ and its degrees of freedom: the prior's `prior_df` pooled with a measured sum of
    squares `ss` on `df` degrees of freedom (the spread of repeats within points)."""
    total = rule.prior_df + df
    if total <= 0:
        return rule.noise, math.inf
    return math.sqrt((rule.prior_df * rule.noise ** 2 + ss) / total), total


def start_spread(groups) -> dict:
    """The spread of `groups`' looks (each a point's looks so far: (values, the server start
    of each)) within and between server starts: `within`, `within_df` (looks about their
    start's mean); between the start means of points measured on several starts, what is
    common to the points at each start (`common`, `common_df`: a baseline's start, shared by
    every setting paired with it) and what is each point's own (`own`, `own_df`: its own
    server's starts); `points`, the points per start; and `weight`, the mean of 1 ÷ the looks
    on a start (how much of the within-start variance a start's mean carries)."""
    within = within_df = 0.0
    deviations: dict = {}  # start -> each point's start mean less its mean over its starts
    inverse = []
    spread_points = 0  # points measured on several starts
    for values, starts in groups:
        values = np.asarray(values, dtype=float)
        starts = np.asarray(list(starts)[:len(values)])
        own = {}
        for start in dict.fromkeys(starts.tolist()):
            part = values[starts == start]
            within += float(np.sum((part - part.mean()) ** 2))
            within_df += len(part) - 1
            own[start] = float(part.mean())
        if len(own) > 1:
            spread_points += 1
            centre = float(np.mean(list(own.values())))
            for start, mean in own.items():
                deviations.setdefault(start, []).append(mean - centre)
                inverse.append(1 / int(np.sum(starts == start)))
    common = own_ss = 0.0
    counts = []
    for values in deviations.values():
        d = float(np.mean(values))
        common += len(values) * d * d
        own_ss += float(np.sum((np.asarray(values) - d) ** 2))
        counts.append(len(values))
    common_df = max(len(deviations) - 1, 0)
    return {"within": within, "within_df": within_df, "common": common,
            "common_df": common_df, "own": own_ss,
            "own_df": max(sum(counts) - spread_points - common_df, 0),
            "points": float(np.mean(counts)) if counts else 1.0,
            "weight": float(np.mean(inverse)) if inverse else 0.0}


# before the spread between server starts is measured (the looks so far on one start of
# several planned), the starts' share is read at this many times its prior: a prior below the
# truth would otherwise settle verdicts one start cannot tell from its own offset (with a prior
# at half the truth, the verdicts kept the full design's at fewer than 95 % of the points
# without it; docs/adaptive-simulation.md has the rule's rows with it)
UNMEASURED_STARTS = 2.0


def look_variance(rule: Rule, groups, starts, several: bool = False) -> tuple[float, float]:
    """(σ, its degrees of freedom) of a point's looks so far, as the interval reads them
    (half-width multiplier × σ ÷ √n): the variance of their mean, × n. The mean's variance is
    τ² Σ_s (n_s/n)² + σ_w²/n for n_s of its n looks on server start s: σ_w² the within-start
    variance of one look (the rule's prior, `noise`, pooled with the spread of looks on one
    start of the points in `groups`: each (values, their starts)), τ² the starts' share (the
    prior `instance_noise`, pooled with the spread between the start means of points measured
    on several starts, less what their within-start noise explains: what the points share at
    a start, a baseline's start, counts as the few starts it is, `start_spread`), each prior
    counted as `prior_df` degrees of freedom. With one look per start (no within-start spread
    measured) the two are told apart by the priors only, and their sum is what the starts'
    spread measures. `several`: the point is planned on several starts; while no point of
    the group has looks on two, the starts' share is the prior's × UNMEASURED_STARTS. The
    degrees of freedom are Satterthwaite's, as the summary's noise model counts them
    (`sdbench.variance`)."""
    spread_ = start_spread(groups)
    d = rule.prior_df
    prior_w, prior_i = rule.noise ** 2, (rule.instance_noise or 0.0) ** 2
    if several and spread_["common_df"] + spread_["own_df"] == 0:
        prior_i *= UNMEASURED_STARTS ** 2
    within, within_df = spread_["within"], spread_["within_df"]
    df_w = d + within_df
    sigma_w = (d * prior_w + within) / df_w if df_w > 0 else prior_w
    # the starts' share from the two strata: each point's own (its server's starts) and what
    # the points at a start share, per point (a baseline's start, shared by k of them)
    k = max(spread_["points"], 1.0)
    parts = []
    if spread_["own_df"] > 0:
        parts.append(((1 - 1 / k) * spread_["own"] / spread_["own_df"], spread_["own_df"]))
    if spread_["common_df"] > 0:
        parts.append((spread_["common"] / spread_["common_df"] / k, spread_["common_df"]))
    data = sum(v for v, _ in parts)
    data_df = (data ** 2 / sum(v * v / f for v, f in parts)
               if parts and data > 0 else sum(f for _, f in parts))
    if within_df == 0 and parts:
        # one look per start: the starts' spread is the whole variance of a look
        total = (d * (prior_w + prior_i) + data_df * data) / (d + data_df)
        share = prior_i / (prior_w + prior_i)
        sigma_i, sigma_w = total * share, total * (1 - share)
        df_i = df_w = d + data_df
    else:
        measured = max(0.0, data - spread_["weight"] * sigma_w) if parts else 0.0
        df_i = d + (data_df if parts else 0.0)
        sigma_i = ((d * prior_i + (data_df if parts else 0.0) * measured) / df_i if df_i > 0
                   else prior_i)
    starts = list(starts)
    n = len(starts)
    if n == 0:
        return math.sqrt(sigma_w + sigma_i), min(df_w, df_i) if df_w and df_i else math.inf
    counts = np.array(list(Counter(starts).values()), dtype=float)
    shared = sigma_i * float(np.sum((counts / n) ** 2))
    var = shared + sigma_w / n
    pieces = (shared ** 2 / df_i if shared > 0 and df_i > 0 else 0.0) + (
        (sigma_w / n) ** 2 / df_w if df_w > 0 else 0.0)
    df = var ** 2 / pieces if pieces > 0 else math.inf
    return math.sqrt(var * n), df


def rule_sigma(rule: Rule, groups, starts=(), several: bool = False) -> tuple[float, float]:
    """σ and its degrees of freedom of a point's looks as `decide` reads them, from the looks of
    the points the rule pools (`groups`: each (values, the server start of each); the point's
    own among them), the starts of the point's own looks and whether it is planned on several
    (`several`): `look_variance`, or for a rule without an instance prior (stored before it
    had one) the prior pooled with the spread of the looks within each point
    (`pooled_sigma`), as it was decided."""
    groups = [(list(values), list(on)) for values, on in groups]
    if rule.instance_noise is None:
        return pooled_sigma(rule, *spread(values for values, _ in groups))
    return look_variance(rule, groups, starts, several)


@dataclass(frozen=True)
class Look:
    """One point after n repeats: its interval (log scale) and what the rule says."""

    n: int
    looks: int
    mean: float
    half: float
    sigma: float
    df: float
    reason: str  # CONTINUE or one of REASONS

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def to_dict(self) -> dict:
        return {"repeats": self.n, "looks": self.looks, "mean_log": self.mean,
                "half_log": self.half, "sigma": self.sigma,
                "df": None if not math.isfinite(self.df) else self.df, "reason": self.reason}


def look_unit(blocks: int) -> str:
    """What a point's looks are: its repeats, or its blocks of prompts where they are split."""
    return "blocks of prompts" if blocks > 1 else "repeats"


def interval(ys, looks: int, rule: Rule, sigma: float, df: float) -> tuple[float, float]:
    """The repeated confidence interval's centre and half-width after len(ys) repeats."""
    n = len(ys)
    return float(np.mean(ys)), multiplier(n, looks, rule, df) * sigma / math.sqrt(n)


def verdict_chance(mean: float, n: int, looks: int, rule: Rule, sigma: float,
                   df: float) -> float:
    """The chance that the interval at the cap excludes 1, the remaining repeats drawn around
    the mean so far (conditional power at the current estimate)."""
    if n >= looks:
        return 0.0
    bound = multiplier(looks, looks, rule, df) * sigma / math.sqrt(looks)
    spread = sigma * math.sqrt(looks - n) / looks  # of the mean at the cap, given the mean now
    from scipy import stats

    return float(stats.norm.sf((bound - mean) / spread) + stats.norm.cdf((-bound - mean)
                                                                         / spread))


def decide(ys, looks: int, rule: Rule, sigma: float, df: float,
           bar: float | None = None, rivals: bool = False) -> Look:
    """The rule after the repeats `ys` of a point planned for `looks`: stop (why) or continue.
    `bar`: the mean it must exceed to stay in the race at its load (`race_bar`; None: no
    race); `rivals`: whether another setting there is still in the race with this one (neither
    beaten): a settled point in a race goes on until it is precise, beaten or capped."""
    mean, half = interval(ys, looks, rule, sigma, df)
    n = len(ys)
    settled = mean - half > 0 or mean + half < 0
    undecided = (rule.beaten_needs_verdict and not settled and n < looks
                 and verdict_chance(mean, n, looks, rule, sigma, df) >= rule.futility)
    if n < min(rule.min_repeats, looks):
        reason = CONTINUE
    elif bar is not None and mean < bar and not undecided:
        reason = BEATEN
    elif half <= math.log1p(rule.precision):
        reason = PRECISE
    elif settled and (not rivals or n >= looks):
        reason = SETTLED
    elif n >= looks:
        reason = CAP
    elif not settled and not rivals and verdict_chance(mean, n, looks, rule, sigma,
                                                       df) < rule.futility:
        reason = FUTILE
    else:
        reason = CONTINUE
    return Look(n, looks, mean, half, sigma, df, reason)


def race_bar(means: dict, counts: dict, key, looks: int, rule: Rule, sigma: float,
             df: float) -> float | None:
    """The mean `key` must exceed to stay in the race at its load: the best other setting's
    mean less the half-width of their difference (the sequential multiplier at the fewer of
    their repeats); None where `key` is alone."""
    others = [other for other in means if other != key]
    if not others:
        return None
    best = max(others, key=means.get)
    n = min(counts[key], counts[best])
    spread = sigma * math.sqrt(1 / counts[key] + 1 / counts[best])
    return means[best] - multiplier(n, looks, rule, df) * spread


def beaten(means: dict, counts: dict, looks: int, rule: Rule, sigma: float,
           df: float) -> set:
    """Settings at one load whose mean lies below another's by more than their difference's
    sequential half-width (`race_bar`)."""
    return {key for key in means
            if (bar := race_bar(means, counts, key, looks, rule, sigma, df)) is not None
            and means[key] < bar}


def race(repeats: dict, key, looks: int, rule: Rule, sigma: float,
         df: float) -> tuple[float | None, bool]:
    """`key`'s place in the race at one load, from every setting's repeats there (setting ->
    its log speedups so far): the bar its mean must exceed (`race_bar`), and whether another
    setting is still in the race with it (`decide`'s `rivals`)."""
    measured = {k: v for k, v in repeats.items() if len(v)}
    means = {k: float(np.mean(v)) for k, v in measured.items()}
    counts = {k: len(v) for k, v in measured.items()}
    if key not in means:
        return None, False
    out = beaten(means, counts, looks, rule, sigma, df)
    racing = key not in out and any(
        separable(means[key] - means[other], min(counts[key], counts[other]), looks, rule,
                  sigma, df) for other in means if other != key and other not in out)
    return race_bar(means, counts, key, looks, rule, sigma, df), racing


def separable(difference: float, n: int, looks: int, rule: Rule, sigma: float,
              df: float) -> bool:
    """Whether two settings' race can still be decided by the cap: the chance that one beats
    the other there (their mean log speedups `difference` apart after n repeats each; the
    difference's σ is √2 σ) is at least `futility` (`verdict_chance`). Where it is not they are
    tied for the decision: the race ends for both."""
    return verdict_chance(difference, n, looks, rule, sigma * math.sqrt(2), df) >= rule.futility


# the level grid and tree live with the cells' levels (`grid`): the workflow's sessions and
# their plan both read them
coarse_levels, level_tree = grid.coarse_levels, grid.level_tree


def bisect(measured: dict[int, tuple]) -> list[int]:
    """Levels to add: the middle index between two measured neighbours (by index) whose
    decision differs. `measured`: level index -> its decision (any comparable value)."""
    order = sorted(measured)
    return [(a + b) // 2 for a, b in zip(order, order[1:], strict=False)
            if b - a > 1 and measured[a] != measured[b]]


def level_decisions(cells: dict, rule: Rule) -> dict:
    """What decides whether a level is bisected, from its finished repeats: per speculator,
    [its best setting there (highest mean), whether that setting's interval says speculate (1),
    no speculation (−1) or neither (0)]. `cells`: setting -> (its speculator, its paired log
    speedups, its planned repeats[, the server start of each]); σ from their looks and the
    rule's priors (`rule_sigma`)."""
    looks = {key: (value[1], value[3] if len(value) > 3 else [0] * len(value[1]))
             for key, value in cells.items()}
    best: dict = {}
    for key, (speculator, ys, planned, *_) in sorted(cells.items()):
        if len(ys) and (speculator not in best or np.mean(ys) > best[speculator][1]):
            best[speculator] = (key, float(np.mean(ys)), ys, planned)
    out = {}
    for speculator, (key, _, ys, planned) in sorted(best.items()):
        sigma, df = rule_sigma(rule, looks.values(), looks[key][1])
        mean, half = interval(ys, max(planned, len(ys)), rule, sigma, df)
        out[speculator] = [key, 1 if mean - half > 0 else -1 if mean + half < 0 else 0]
    return out


def level_contenders(lower: dict, upper: dict) -> set | None:
    """The settings an added level measures, from its neighbours' `level_decisions`: the best
    at either neighbour, of each speculator whose verdict differs between them; None (the level
    is skipped) where every speculator's agrees."""
    changed = [s for s in set(lower) | set(upper)
               if (lower.get(s) or [None, None])[1] != (upper.get(s) or [None, None])[1]]
    if not changed:
        return None
    return {d[s][0] for s in changed for d in (lower, upper) if s in d}


def recheck(stop: dict, ys) -> str | None:
    """A stored stop decision recomputed from the stored repeats: None if it holds, else why
    not (one line)."""
    rule = Rule(**stop["rule"])
    df = math.inf if stop.get("df") is None else stop["df"]
    look = decide(list(ys), stop["looks"], rule, stop["sigma"], df, stop.get("bar"),
                  bool(stop.get("rivals")))
    if len(ys) != stop["repeats"]:
        return f"{len(ys)} repeats stored, the stop says {stop['repeats']}"
    if look.reason != stop["reason"]:
        return f"recomputed '{look.reason}', stored '{stop['reason']}'"
    if abs(look.half - stop["half_log"]) > 1e-9 or abs(look.mean - stop["mean_log"]) > 1e-9:
        return "the stored interval differs from the one recomputed"
    return None


# a sampled point's acceptance differs from repeat to repeat (greedy outputs repeat exactly):
# an interval on it needs two repeats, so points above temperature 0 measure at least these
SAMPLED_MIN_REPEATS = 2


def cell_rule(config: dict, cell: specs.Cell) -> Rule | None:
    """The config's rule as it applies to `cell` (None where the rule is off, and for the
    instance probe's cells, measured in full: `grid.probe_cells`): above temperature 0, never
    stopping before SAMPLED_MIN_REPEATS repeats."""
    rule = Rule.from_config(config.get("adaptive"))
    if rule is not None and grid.is_probe(cell):
        return None
    if rule is None or not cell.workload["loadgen"].get("temperature"):
        return rule
    return replace(rule, min_repeats=max(rule.min_repeats, SAMPLED_MIN_REPEATS))


# an acceptance sweep's break-even line pools its points' spread over repeats
# (`analyze.acceptance.break_even`): a point measured once adds nothing to it
SWEEP_MIN_REPEATS = 2


def for_cell(rule: Rule, cell: specs.Cell) -> Rule:
    """The rule as it stops `cell`'s points: an acceptance sweep's cell (drafts accepted at a
    set rate), and the method's real cell that anchors its line (`Cell.sweep_anchor`), never
    before SWEEP_MIN_REPEATS repeats."""
    if grid.swept_method(cell.speculator) is None and not cell.sweep_anchor:
        return rule
    return replace(rule, min_repeats=max(rule.min_repeats, SWEEP_MIN_REPEATS))


def reads_baseline(config: dict, cell: specs.Cell) -> bool:
    """Whether a cell's session needs its baseline cell's records before it measures: a
    speculative cell measured on its own under the adaptive rule (a server cell not
    interleaved, an offline or Transformers cell: its engine's points stop between batches,
    `sdbench.measure.engine_cells`)."""
    return (Rule.from_config(config.get("adaptive")) is not None and not cell.is_baseline
            and not cell.group and not grid.is_probe(cell))
