"""Simulated sweeps through the adaptive design (`sdbench.plan.adaptive`) and the full one: how
often the adaptive design's intervals cover the truth, whether it reaches the full design's
verdicts and best settings, and what share of the full design's point-repeats it measures.

A sweep is shaped like Round 1: `ks` values of k × `levels` concurrency levels (1, 2, 4, … ×
the previous) × `repeats` repeats. The true log speedup of k at level i is

    log S(k, x) = g_k − h_k · x + shift,    x = i / (levels − 1),
    g_k = 0.5 · (1 − exp(−k / 2.5)),        h_k = 0.3 + 0.1 · k,

so a larger k gains more at low load and loses faster as the load grows: the best k falls with
the load, and with `shift` drawn per sweep from U(−0.15, 0.3) every k's speedup crosses 1
somewhere in (or beyond) the grid. Log throughputs get noise as in `sdbench.analyze.simulate`:
each side's server instance an offset (sd `instance_noise`; repeat r on instance r, the
baseline's instance shared by every k at every level) and each run its own (sd
`measurement_noise`).

The full design measures every point `repeats` times; its interval is ȳ ± t · σ / √repeats with
σ pooled over the sweep (and the rule's prior). The adaptive design measures the coarse levels
first, each with every k, repeat by repeat, stopping a point by `adaptive.decide` (settled,
precise, beaten, tied or the cap), then the levels of the workflow's static tree
(`adaptive.level_tree`) depth by depth: a level is measured where the verdict of the method's
best k differs between its two neighbours (`adaptive.level_decisions`), by the k values best at
either neighbour (`adaptive.level_contenders`), the same functions the workflow calls. Both
pick a best k at every level: the highest mean where measured, else the highest of each k's
mean interpolated (linearly in log concurrency) between the nearest levels that measured it.
A `chained` sweep is measured as the workflow's chained cells are (`adaptive.chain`): a whole
repeat's blocks on one server instance, stage by stage, and inside a stage the k values in
turn, k ascending (`sessions.race_order`): each k's look sees the k values before it as far as
their stage (this repeat) and those after it as of the repeat's first block (in the first
repeat it counts as racing while one after it is still to measure).

`python -m sdbench.plan.sweeps` runs the full table under the rule of a config's `adaptive:`
section (`--config`, config/config.yaml by default: the rule the real study runs; each row
sets its own prior σ) and writes docs/adaptive-simulation.md.
"""

from __future__ import annotations

import argparse
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sdbench.plan import adaptive
from sdbench.plan.config import load_config

if TYPE_CHECKING:
    import pandas as pd

REPO = Path(__file__).resolve().parents[3]
# what a whole repeat costs at each of 10 levels (concurrency doubling: its prompts in half the
# waves), and the blocks `adaptive.blocks: 4` splits 128 prompts into (4 waves a block)
WEIGHTS = tuple(0.5 ** i for i in range(10))
BLOCKED = (4, 4, 4, 4, 2, 1, 1, 1, 1, 1)
# concurrency 1 quieter than the load levels (config/config.yaml's level_noise {1: 0.02} against
# 0.05), and a truth there twice as noisy as that prior says
QUIET = (0.4,) + (1.0,) * 9
MISJUDGED = (0.8,) + (1.0,) * 9
# a simulated sweep is one method's k values
METHOD = "method"


@dataclass(frozen=True)
class Sweep:
    instance_noise: float
    measurement_noise: float
    ks: int = 6
    levels: int = 10
    repeats: int = 3
    prior_scale: float = 1.0  # the rule's prior σ ÷ the true σ of one repeat's log speedup
    # per level: the blocks of prompts a repeat is split into (empty: whole repeats), and what
    # one whole repeat there costs (empty: the same everywhere)
    blocks: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    # per level: its true σ of one repeat's log speedup ÷ `sigma` (empty: 1 everywhere); the
    # rule's prior there scales with it (`adaptive.Rule.level_noise`)
    scales: tuple[float, ...] = ()
    # per level: the rule's prior σ there ÷ `sigma` × `prior_scale` where it is not `scales`
    # (a level whose true noise the prior misjudges)
    prior_levels: tuple[float, ...] = ()
    # measured in a chain (`adaptive.chain`: each k's cell on its own servers, in stages, a
    # whole repeat's blocks on one server instance, the k values of a stage one after
    # another, k ascending): inside a repeat a k's look sees the group (σ pooled over the k
    # values, the race among them) with the k values before it as far as this stage and
    # those after it as of the repeat's first block
    chained: bool = False
    # the true log speedups, ks × levels, where they are given (a config's predicted ones:
    # `sdbench.plan.cost`), instead of the family's surface at a shift drawn per sweep
    surface: tuple[tuple[float, ...], ...] = ()
    # chained: per repeat, whether a look is made inside it (before each block past its
    # first; empty: in every repeat), as a cell measured in turn looks only where its turn
    # comes after its static k's (`dynamic_k.after_lead`)
    inside: tuple[bool, ...] = ()

    def looks_inside(self, r: int) -> bool:
        return not self.inside or self.inside[r]

    def block(self, i: int) -> int:
        return self.blocks[i] if self.blocks else 1

    def instances(self, i: int, looks: int) -> np.ndarray:
        """The server instance of each of `looks` looks at level i: look j on instance j mod
        repeats, or in a chain a whole repeat's blocks on one (its stage's)."""
        j = np.arange(looks)
        return np.minimum(j // self.block(i), self.repeats - 1) if self.chained else (
            j % self.repeats)

    def scale(self, i: int) -> float:
        return self.scales[i] if self.scales else 1.0

    @staticmethod
    def concurrency(i: int) -> int:
        """Level i's concurrency (1, 2, 4, …)."""
        return 2 ** i

    def prior(self, rule: adaptive.Rule) -> adaptive.Rule:
        """`rule` with the sweep's prior: its true σ × `prior_scale`, level by level: within a
        server start (both sides' runs) and the starts' share (both sides' offsets), or for a
        rule without an instance prior (`Rule.instance_noise` None) one repeat's whole σ."""
        within = math.sqrt(2) * self.measurement_noise * self.prior_scale
        starts = math.sqrt(2) * self.instance_noise * self.prior_scale
        if rule.instance_noise is None:
            within, starts = self.sigma * self.prior_scale, None
        levels = self.prior_levels or tuple(self.scale(i) for i in range(self.levels))
        return adaptive.Rule(**{**rule.to_dict(), "noise": within, "instance_noise": starts,
                                "level_noise": [(self.concurrency(i), within * x)
                                                for i, x in enumerate(levels) if x != 1.0]})

    def looks(self, i: int) -> int:
        """The looks of a point at level i: its repeats, each split into its blocks."""
        return self.repeats * self.block(i)

    def weight(self, i: int) -> float:
        return self.weights[i] if self.weights else 1.0

    @property
    def sigma(self) -> float:
        """The true sd of one repeat's log speedup (both sides' instance and run noise)."""
        return math.sqrt(2 * (self.instance_noise ** 2 + self.measurement_noise ** 2))

    @property
    def label(self) -> str:
        shape = ("" if not self.weights else ", a repeat's cost halving level by level"
                 if self.weights == WEIGHTS else f", repeat costs {self.weights}")
        if self.blocks:
            shape += f", blocks {'/'.join(map(str, self.blocks))}"
        if self.scales:
            shape += f", σ at concurrency 1 × {self.scales[0]:g}"
        if self.prior_levels:
            shape += f" (its prior × {self.prior_levels[0]:g})"
        if self.chained:
            shape += "; chained (k by k in each stage)"
        return (f"instance noise {self.instance_noise:.0%}, measurement noise "
                f"{self.measurement_noise:.0%}, prior σ × {self.prior_scale:g}{shape}")


def truth(sweep: Sweep, shift: float) -> np.ndarray:
    """The true log speedups, ks × levels: the sweep's `surface` where it has one, else the
    family's at `shift`."""
    if sweep.surface:
        return np.asarray(sweep.surface, dtype=float)
    k = np.arange(1, sweep.ks + 1)[:, None]
    x = np.arange(sweep.levels)[None, :] / (sweep.levels - 1)
    return 0.5 * (1 - np.exp(-k / 2.5)) - (0.3 + 0.1 * k) * x + shift


def draws(sweep: Sweep, mu: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Every look's log speedup the full design would measure: ks × levels × the most looks
    of a level (a level uses its first `looks(i)`). A block of 1/b of a repeat's prompts has
    √b times its run noise; look j runs on instance j mod repeats; level i's noise (instance
    and run) is `scale(i)` times the sweep's."""
    most = max(sweep.looks(i) for i in range(sweep.levels))
    shape = (sweep.ks, sweep.levels, most)
    on = np.stack([sweep.instances(i, most) for i in range(sweep.levels)])  # levels x looks
    spec = rng.normal(0, sweep.instance_noise, (sweep.ks, sweep.repeats))[:, on]
    base = rng.normal(0, sweep.instance_noise, (1, sweep.repeats))[:, on]
    block = np.sqrt([sweep.block(i) for i in range(sweep.levels)])[None, :, None]
    level = np.array([sweep.scale(i) for i in range(sweep.levels)])[None, :, None]
    runs = (rng.normal(0, sweep.measurement_noise, shape) - rng.normal(
        0, sweep.measurement_noise, shape)) * block
    return mu[:, :, None] + (spec - base + runs) * level


def _verdict(low: float, high: float) -> int:
    return 1 if low > 0 else -1 if high < 0 else 0


def repeat_means(sweep: Sweep, y: np.ndarray, i: int) -> np.ndarray:
    """Level i's whole repeats as the full design measures them (ks × repeats): where the
    adaptive design splits a repeat into blocks, the mean of the blocks run on one instance
    (look j on instance j mod repeats), a repeat of all the prompts there."""
    at = y[:, i, :sweep.looks(i)]
    if sweep.chained:  # (a chain's stage: repeat r's blocks are looks r·b … r·b + b − 1)
        return at.reshape(sweep.ks, sweep.repeats, sweep.block(i)).mean(2)
    return at.reshape(sweep.ks, sweep.block(i), sweep.repeats).mean(1)


def full_design(sweep: Sweep, y: np.ndarray, rule: adaptive.Rule) -> dict:
    """Every point's whole repeats (`repeat_means`: the full design does not split them); σ of
    a repeat pooled over the sweep (a level's spread scaled by its own prior's share of the
    rule's), so a point's interval is t · σ / √repeats. (Until 2026-11-28 the spread of
    blocks scaled down by √b stood in for a repeat's, which leaves out the server instances'
    share of it: the full design's intervals were too narrow where blocks were simulated.)"""
    mean = np.zeros((sweep.ks, sweep.levels))
    ss = df = 0.0
    scale = np.array([rule.noise_at(sweep.concurrency(i)) / rule.noise
                      for i in range(sweep.levels)])
    for i in range(sweep.levels):
        at = repeat_means(sweep, y, i)
        mean[:, i] = at.mean(1)
        ss += float(np.sum((at - at.mean(1, keepdims=True)) ** 2)) / scale[i] ** 2
        df += sweep.ks * (sweep.repeats - 1)
    sigma, df = adaptive.pooled_sigma(rule, ss, df)
    from scipy import stats  # here, not at the top: the workflow's parse imports this module

    half = stats.t.ppf(1 - rule.alpha / 2, df) * sigma * scale[None, :] / math.sqrt(sweep.repeats)
    return {"mean": mean, "low": mean - half, "high": mean + half,
            "best": mean.argmax(0),
            "cost": sum(sweep.weight(i) * sweep.ks * sweep.repeats
                        for i in range(sweep.levels))}


def adaptive_design(sweep: Sweep, y: np.ndarray, rule: adaptive.Rule,
                    bisect: bool = True) -> dict:
    """The adaptive design on the full design's draws (it measures a subset of them), as the
    workflow's interleaved groups measure (`sdbench.measure.stopping`); without `bisect` (the
    rule's `bisect: false`), every level with every k; a `chained` sweep as the workflow's
    chained cells (`run_chain`, `GroupStops._look`)."""
    ys: dict[tuple[int, int], list[float]] = {}
    last: dict[tuple[int, int], adaptive.Look] = {}

    def on(k: int, i: int, values: list) -> list[int]:
        """The server start of each of a point's looks so far."""
        return sweep.instances(i, sweep.looks(i))[:len(values)].tolist()

    def several(i: int) -> bool:
        """Whether a point at level i is planned on several server starts."""
        return len(set(sweep.instances(i, sweep.looks(i)).tolist())) > 1

    def level_sigma(i: int, k: int) -> tuple[adaptive.Rule, float, float]:
        """Level i's rule (its prior σ a block's) and k's σ from the level's points (the
        workflow's group at a level) with that prior (`adaptive.rule_sigma`)."""
        at = rule.at(sweep.block(i), sweep.concurrency(i))
        groups = [(v, on(kk, j, v)) for (kk, j), v in ys.items() if j == i]
        return (at, *adaptive.rule_sigma(at, groups, on(k, i, ys.get((k, i), [])),
                                         several(i)))

    def group(i: int, active: list[int], looks: int) -> tuple:
        """Level i's σ and each active k's place in the race, from the looks so far."""
        here = {k: list(ys[(k, i)]) for k in range(sweep.ks) if (k, i) in ys}
        sigmas = {k: level_sigma(i, k) for k in active}
        return sigmas, {k: adaptive.race(here, k, looks, *sigmas[k]) for k in active}

    def run_level(i: int, ks: list[int]) -> None:
        if sweep.chained:
            return run_chain(i, ks)
        active, looks = list(ks), sweep.looks(i)
        for n in range(looks):
            for k in active:
                ys.setdefault((k, i), []).append(float(y[k, i, n]))
            sigmas, places = group(i, active, looks)
            keep = []
            for k in active:
                bar, rivals = places.get(k, (None, False))
                look = adaptive.decide(ys[(k, i)], looks, *sigmas[k], bar, rivals)
                last[(k, i)] = look
                if look.reason == adaptive.CONTINUE:
                    keep.append(k)
            active = keep
            if not active:
                return

    def chain_look(i: int, k: int, ks: list[int], n: int) -> adaptive.Look:
        """k's look before its look n at level i in a chain (`GroupStops._look`): its own
        looks so far, the others' up to the first block of look n's whole repeat, but inside
        that repeat (past its first block) a k before it in the race order
        (`sessions.race_order`: k ascending) as far as the repeat's end (its stage there ran
        first; the look at the first block is the one the baseline's stage recomputes)."""
        looks, b = sweep.looks(i), sweep.block(i)
        start = n - n % b
        views = {kk: ys.get((kk, i), [])[:n if kk == k else start + b if kk < k and n > start
                                          else start] for kk in ks}
        at = rule.at(b, sweep.concurrency(i))
        sigma, df = adaptive.rule_sigma(at, [(v, on(kk, i, v)) for kk, v in views.items()],
                                        on(k, i, views[k]), several(i))
        bar, racing = adaptive.race(views, k, looks, at, sigma, df)
        if start == 0:  # (a k after it measures this repeat later: it counts as racing)
            racing = racing or any(kk > k for kk in ks)
        return adaptive.decide(views[k], looks, at, sigma, df, bar, racing)

    def run_chain(i: int, ks: list[int]) -> None:
        """Level i measured in a chain: stage by stage (a whole repeat's blocks), inside a
        stage k by k in the race order, each look made before the block it would measure."""
        active, looks, b = list(ks), sweep.looks(i), sweep.block(i)
        for r in range(sweep.repeats):
            for k in list(active):
                for n in range(r * b, (r + 1) * b):
                    if n and (n == r * b or sweep.looks_inside(r)):
                        last[(k, i)] = look = chain_look(i, k, ks, n)
                        if look.reason != adaptive.CONTINUE:
                            active.remove(k)
                            break
                    ys.setdefault((k, i), []).append(float(y[k, i, n]))
        for k in active:  # (measured to the cap: its look there)
            last[(k, i)] = chain_look(i, k, ks, looks)

    def decisions(i: int) -> dict:
        return adaptive.level_decisions(
            {k: (METHOD, ys[(k, i)], sweep.looks(i), on(k, i, ys[(k, i)]))
             for k in range(sweep.ks) if (k, i) in ys},
            rule.at(sweep.block(i), sweep.concurrency(i)))

    if not bisect:
        for i in range(sweep.levels):
            run_level(i, list(range(sweep.ks)))
    # the workflow's static tree (`GroupStops`): depth by depth, a level measured by the
    # contenders of its neighbours' decisions where they differ
    tree = adaptive.level_tree(sweep.levels, rule.coarse) if bisect else {}
    for i, (_, lower, upper) in sorted(tree.items(), key=lambda item: (item[1][0], item[0])):
        if lower is None:
            run_level(i, list(range(sweep.ks)))
            continue
        if not any(j == lower for _, j in ys) or not any(j == upper for _, j in ys):
            continue
        contenders = adaptive.level_contenders(decisions(lower), decisions(upper))
        if contenders is not None:
            run_level(i, sorted(contenders))
    # the intervals reported: each point's looks, σ as pooled at its level at the end (the
    # looks the points stopped at kept as `stops`)
    stops = dict(last)
    for key, look in last.items():
        at, sigma, df = level_sigma(key[1], key[0])
        mean, half = adaptive.interval(ys[key], sweep.looks(key[1]), at, sigma, df)
        last[key] = adaptive.Look(look.n, look.looks, mean, half, sigma, df, look.reason)
    cost = sum(len(v) * sweep.weight(i) / sweep.block(i) for (_, i), v in ys.items())
    return {"looks": last, "best": _picks(sweep, last), "cost": cost,
            "reasons": [look.reason for look in last.values()], "measured": ys,
            "stops": stops}


def _picks(sweep: Sweep, looks: dict) -> np.ndarray:
    picks = np.zeros(sweep.levels, dtype=int)
    for i in range(sweep.levels):
        values = {}
        for k in range(sweep.ks):
            levels = sorted(j for kk, j in looks if kk == k)
            if i in levels:
                values[k] = looks[(k, i)].mean
                continue
            below = [j for j in levels if j < i]
            above = [j for j in levels if j > i]
            if below and above:
                a, b = below[-1], above[0]
                w = (i - a) / (b - a)
                values[k] = (1 - w) * looks[(k, a)].mean + w * looks[(k, b)].mean
        picks[i] = max(values, key=values.get)
    return picks


def one_sweep(sweep: Sweep, rule: adaptive.Rule, rng: np.random.Generator,
              bisect: bool = True) -> dict:
    mu = truth(sweep, rng.uniform(-0.15, 0.3))
    y = draws(sweep, mu, rng)
    prior = sweep.prior(rule)
    full = full_design(sweep, y, prior)
    adapt = adaptive_design(sweep, y, prior, bisect)
    looks = adapt["looks"]
    cover = agree = 0
    for (k, i), look in looks.items():
        cover += look.low <= mu[k, i] <= look.high
        agree += _verdict(look.low, look.high) == _verdict(full["low"][k, i], full["high"][k, i])
    best = mu.max(0)
    columns = np.arange(sweep.levels)
    good = lambda picks: float(np.mean(np.exp(mu[picks, columns]) >= 0.98 * np.exp(best)))  # noqa: E731
    return {"points": len(looks), "covered": cover, "agree": agree,
            "best_adaptive": good(adapt["best"]), "best_full": good(full["best"]),
            "cost": adapt["cost"] / full["cost"],
            **{f"stop_{r}": adapt["reasons"].count(r) for r in adaptive.REASONS}}


def run(sweep: Sweep, rule: adaptive.Rule, sweeps: int, seed: int = 0,
        bisect: bool = True) -> dict:
    import pandas as pd  # here, not at the top: the workflow's parse imports this module

    rng = np.random.default_rng(seed)
    rows = pd.DataFrame([one_sweep(sweep, rule, rng, bisect) for _ in range(sweeps)])
    points = rows["points"].sum()
    return {"coverage": rows["covered"].sum() / points, "agreement": rows["agree"].sum() / points,
            "best_adaptive": rows["best_adaptive"].mean(), "best_full": rows["best_full"].mean(),
            "cost": rows["cost"].mean(), "points": rows["points"].mean(),
            **{r: rows[f"stop_{r}"].sum() / points for r in adaptive.REASONS}}


SWEEPS = [Sweep(i, m, prior_scale=p) for i, m in ((0.0, 0.02), (0.0, 0.1), (0.05, 0.02),
                                                  (0.05, 0.1)) for p in (1.0,)] + [
    Sweep(0.0, 0.1, prior_scale=0.5), Sweep(0.0, 0.1, prior_scale=2.0)] + [
    # the cost as a study pays it (concurrency 1 about half), whole repeats and in blocks
    Sweep(i, m, weights=WEIGHTS, blocks=b) for i, m in ((0.0, 0.02), (0.05, 0.1))
    for b in ((), BLOCKED)] + [
    # ... with concurrency 1's own prior (`adaptive.level_noise`), right and misjudged
    Sweep(i, m, weights=WEIGHTS, blocks=b, scales=QUIET) for i, m in ((0.0, 0.02), (0.05, 0.1))
    for b in ((), BLOCKED)] + [
    Sweep(0.0, 0.02, weights=WEIGHTS, scales=MISJUDGED, prior_levels=QUIET)] + [
    # ... measured in a chain (`adaptive.chain`: cells not interleaved, as config/config.yaml's)
    Sweep(i, m, weights=WEIGHTS, blocks=b, scales=QUIET, chained=True)
    for i, m in ((0.0, 0.02), (0.05, 0.1)) for b in ((), BLOCKED)]


def _row(args: tuple) -> dict:
    n, sweep, bisect, rule, sweeps = args
    return {**asdict(sweep), "label": sweep.label, "levels_bisected": bisect,
            **run(sweep, rule, sweeps, seed=n, bisect=bisect)}


def table(sweeps: int, rule: adaptive.Rule | None = None,
          workers: int | None = None) -> pd.DataFrame:
    import pandas as pd

    rule = rule or adaptive.Rule()
    jobs = [(n, s, b, rule, sweeps) for n, s in enumerate(SWEEPS) for b in (True, False)]
    with ProcessPoolExecutor(workers or os.cpu_count()) as pool:
        return pd.DataFrame(list(pool.map(_row, jobs)))


@cache
def expected_share(rule: adaptive.Rule, ks: int, levels: int, repeats: int,
                   bisect: bool, sweeps: int = 40, blocks: tuple[int, ...] = (),
                   weights: tuple[float, ...] = (),
                   concurrency: tuple[int, ...] = (), chained: bool = False,
                   surface: tuple[tuple[float, ...], ...] = (),
                   inside: tuple[bool, ...] = ()) -> float:
    """The expected share of a sweep's measuring the adaptive design spends (point-repeats,
    each level's weighted by `weights`: what a whole repeat costs there), at the rule's prior
    noise at each level's `concurrency` (taken as the truth: within a server start and
    between starts, `Rule.instance_noise`), with each level's repeats split into its `blocks`;
    `chained`: measured in a
    chain (`Sweep.chained`; `inside`: the repeats it looks inside, `Sweep.inside`);
    `surface`: the true log speedups (ks × levels; its shape sets both) instead of the
    simulation's family of surfaces."""
    if surface:
        ks, levels = len(surface), len(surface[0])
    scales = tuple(rule.noise_at(c) / rule.noise for c in concurrency)
    sweep = Sweep((rule.instance_noise or 0.0) / math.sqrt(2), rule.noise / math.sqrt(2),
                  ks=max(ks, 1), levels=max(levels, 2),
                  repeats=max(repeats, 1), blocks=tuple(blocks), weights=tuple(weights),
                  scales=scales if set(scales) - {1.0} else (), chained=chained,
                  surface=tuple(map(tuple, surface)), inside=tuple(inside))
    return run(sweep, rule, sweeps, seed=0, bisect=bisect)["cost"]


def config_rule(path: str | Path) -> adaptive.Rule:
    """The rule of a config's `adaptive:` section (the defaults where it is off)."""
    return adaptive.Rule.from_config(load_config(path).get("adaptive")) or adaptive.Rule()


def write_table(frame: pd.DataFrame, path: Path, sweeps: int, rule: adaptive.Rule,
                source: str = "the default") -> None:
    lines = [
        "# The adaptive design, simulated",
        "",
        "Written by `python -m sdbench.plan.sweeps` (do not edit): "
        f"{sweeps} simulated sweeps per row, each {SWEEPS[0].ks} values of k × "
        f"{SWEEPS[0].levels} concurrency levels × {SWEEPS[0].repeats} repeats, measured in full "
        "and adaptively on the same draws (the model: `src/sdbench/plan/sweeps.py`). "
        f"Rule ({source}'s `adaptive:`): precision ±{rule.precision:.0%}, α = {rule.alpha}, "
        f"Wang-Tsiatis Δ = {rule.shape}, futility {rule.futility:g}, {rule.coarse} coarse levels, "
        "priors of one repeat's log speedup within a server start and of the starts' share "
        "(each × the true one as the row says) counted as "
        f"{rule.prior_df:g} degrees of freedom. The intervals here are the rule's own at the "
        "look each point stopped (σ as pooled at its level at the end) and the full design's "
        "with σ pooled over the sweep; the section below reads both designs through the "
        "summary's intervals.",
        "",
        "- **coverage**: of the adaptive design's intervals at the points it measured (the "
        "interval at the look where each stopped);",
        "- **same verdict**: the adaptive verdict (speculate / no clear gain / no speculation) "
        "equals the full design's at those points;",
        "- **best k within 2 %**: share of the concurrency levels (all of them, measured or "
        "interpolated) whose picked k has a true speedup within 2 % of the truly best k's;",
        "- **point-repeats**: measured by the adaptive design ÷ the full design's (where a "
        "repeat's cost halves level by level, its cost: a block counts 1/b of a repeat);",
        "- **stops**: why the adaptive design's points stopped (share of its points);",
        "- **σ at concurrency 1 × x**: a repeat there is x times as noisy as at the other "
        "levels, and the rule's prior there says so (`adaptive.level_noise`); \"(its prior × "
        "y)\": the prior there says y, less than the truth;",
        "- **chained**: the k values measured in a chain (`adaptive.chain`, as "
        "config/config.yaml's cells, which are not interleaved): a whole repeat's blocks on "
        "one server instance, stage by stage, the k values of a stage in turn (k ascending): "
        "a k's look sees the σ and race of the k values before it as far as this stage and "
        "of those after it as of the stage's start (in the first stage it races while one "
        "after it is still to measure).",
        "",
        "| noise | levels | coverage | same verdict | best k within 2 % (adaptive / full) | "
        "point-repeats | points measured | stops: settled / precise / beaten / futile / cap |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in frame.to_dict("records"):
        lines.append(
            f"| {row['label']} | "
            f"{'coarse, then bisected' if row['levels_bisected'] else 'all (bisect: false)'} | "
            f"{row['coverage']:.1%} | {row['agreement']:.1%} | "
            f"{row['best_adaptive']:.1%} / {row['best_full']:.1%} | {row['cost']:.1%} | "
            f"{row['points']:.1f} of {row['ks'] * row['levels']} | "
            + " / ".join(f"{row[r]:.0%}" for r in adaptive.REASONS) + " |")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=1000)
    parser.add_argument("--config", default="config/config.yaml",
                        help="the config whose adaptive: rule is simulated")
    parser.add_argument("--out", default=str(REPO / "docs" / "adaptive-simulation.md"))
    args = parser.parse_args(argv)
    rule = config_rule(args.config)
    write_table(table(args.sweeps, rule), Path(args.out), args.sweeps, rule, args.config)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())



