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
into blocks of its prompts (`grid.point_blocks`: as many as keep 4 waves of the concurrency in
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
from dataclasses import asdict, dataclass, fields, replace
from functools import cache, lru_cache

import numpy as np
from scipy import optimize, stats

from sdbench.plan import grid, settings

CONTINUE, SETTLED, PRECISE, BEATEN, FUTILE, CAP = (
    "continue", "settled", "precise", "beaten", "futile", "cap")
REASONS = (SETTLED, PRECISE, BEATEN, FUTILE, CAP)
LEVEL = "level"  # a point at a level the bisection leaves out (for its cell, or for all)
BASELINE = "baseline"  # a cell others stop against, stopped where all of them have


@dataclass(frozen=True)
class Rule:
    """The sequential rule of one sweep (the config's `adaptive:`)."""

    precision: float = 0.05  # stop when the interval is within ± this share of the speedup
    alpha: float = 0.05  # 1 − the simultaneous coverage of a point's intervals
    shape: float = 0.25  # Wang & Tsiatis' Δ: 0.5 Pocock, 0 O'Brien-Fleming
    noise: float = 0.05  # prior sd of one repeat's log speedup
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
        return cls(**{"beaten_needs_verdict": True,
                      **{f.name: section[f.name] if f.name == "level_noise"
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
        return out

    def noise_at(self, concurrency: int | None = None) -> float:
        """The prior σ of one whole repeat's log speedup at a closed-loop `concurrency` (its
        own where `level_noise` names it, else `noise`; open-loop rates: `noise`)."""
        return dict(self.level_noise).get(concurrency, self.noise)

    def at(self, blocks: int = 1, concurrency: int | None = None) -> Rule:
        """The rule at one level: its prior σ the level's own (`noise_at`) and, where its
        repeats are split into `blocks` blocks of prompts (`grid.point_blocks`), one block's,
        √blocks times a whole repeat's, as it would be were a repeat's noise all its prompts'
        own."""
        noise = self.noise_at(concurrency) * math.sqrt(max(blocks, 1))
        return replace(self, noise=noise, level_noise=())


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
    if looks == 1:
        return (float(stats.norm.ppf(1 - alpha / 2)),)
    shape_n = (np.arange(1, looks + 1) / looks) ** (shape - 0.5)
    scale = optimize.brentq(lambda c: staying_inside(c * shape_n) - (1 - alpha), 1.0, 6.0,
                            xtol=1e-7)
    return tuple(float(scale * s) for s in shape_n)


@lru_cache(maxsize=4096)
def multiplier(n: int, looks: int, rule: Rule, df: float) -> float:
    """The interval's multiplier after n of `looks` repeats with σ on `df` degrees of freedom."""
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
    speedups, its planned repeats); σ pools their spread with the rule's prior."""
    sigma, df = pooled_sigma(rule, *spread(ys for _, ys, _ in cells.values()))
    best: dict = {}
    for key, (speculator, ys, looks) in sorted(cells.items()):
        if len(ys) and (speculator not in best or np.mean(ys) > best[speculator][1]):
            best[speculator] = (key, float(np.mean(ys)), ys, looks)
    out = {}
    for speculator, (key, _, ys, looks) in sorted(best.items()):
        mean, half = interval(ys, max(looks, len(ys)), rule, sigma, df)
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


def cell_rule(config: dict, cell: grid.Cell) -> Rule | None:
    """The config's rule as it applies to `cell` (None where the rule is off): above
    temperature 0, never stopping before SAMPLED_MIN_REPEATS repeats."""
    rule = Rule.from_config(config.get("adaptive"))
    if rule is None or not cell.workload["loadgen"].get("temperature"):
        return rule
    return replace(rule, min_repeats=max(rule.min_repeats, SAMPLED_MIN_REPEATS))


# an acceptance sweep's break-even line pools its points' spread over repeats
# (`analyze.acceptance.break_even`): a point measured once adds nothing to it
SWEEP_MIN_REPEATS = 2


def for_cell(rule: Rule, cell: grid.Cell) -> Rule:
    """The rule as it stops `cell`'s points: an acceptance sweep's cell (drafts accepted at a
    set rate), and the method's real cell that anchors its line (`Cell.sweep_anchor`), never
    before SWEEP_MIN_REPEATS repeats."""
    if grid.swept_method(cell.speculator) is None and not cell.sweep_anchor:
        return rule
    return replace(rule, min_repeats=max(rule.min_repeats, SWEEP_MIN_REPEATS))


def reads_baseline(config: dict, cell: grid.Cell) -> bool:
    """Whether a cell's session needs its baseline cell's records before it measures: a
    speculative cell measured on its own under the adaptive rule (a server cell not
    interleaved, an offline or Transformers cell: its engine's points stop between batches,
    `sdbench.measure.engine_cells`)."""
    return (Rule.from_config(config.get("adaptive")) is not None and not cell.is_baseline
            and not cell.group)
