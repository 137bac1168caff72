"""Variance components by moments (`sdbench.variance`): estimates that find known components,
points that load on the starts they ran on, degrees of freedom that count shared starts as the
few draws they are, components borrowed where a class cannot see them, and shrinkage that
follows noisier workloads."""

import numpy as np
import pytest

from sdbench import variance

START, BASE = "speculative start", "baseline start"


def chained(rng, ks=5, workloads=7, repeats=3, instance=0.05, run=0.02, hot=()):
    """Runs of `ks` settings x `workloads` workloads, each repeat on starts of its own (the
    baseline's shared by every setting and workload, a setting's by its workloads); the
    workloads in `hot` 3x noisier."""
    base = rng.normal(0, instance, repeats)
    spec = rng.normal(0, instance, (ks, repeats))
    rows = []
    for k in range(ks):
        for w in range(workloads):
            scale = 3.0 if w in hot else 1.0
            for r in range(repeats):
                rows.append((f"k{k}w{w}", spec[k, r] - base[r] + rng.normal(0, run * scale),
                             f"S{k}@{r}", f"B@{r}"))
    point, y, spec_start, base_start = zip(*rows, strict=True)
    return np.array(y), list(point), {START: list(spec_start), BASE: list(base_start)}


def test_the_components_are_found_on_average():
    rng = np.random.default_rng(0)
    found = {START: [], BASE: [], variance.RESIDUAL: []}
    for _ in range(300):
        fit = variance.fit(*chained(rng), shrink=False)
        for name in found:
            found[name].append(fit.sigma2.get(name, 0.0))
    # (a component estimated below 0 is set to 0: its mean is a little above the truth)
    assert np.mean(found[START]) == pytest.approx(0.05 ** 2, rel=0.15)
    assert np.mean(found[BASE]) == pytest.approx(0.05 ** 2, rel=0.35)
    assert np.mean(found[variance.RESIDUAL]) == pytest.approx(0.02 ** 2, rel=0.15)


def test_a_point_carries_its_starts_by_the_share_of_its_runs_on_each():
    rng = np.random.default_rng(1)
    fit = variance.fit(*chained(rng), shrink=False)
    point = fit.points["k0w0"]
    # three runs, each on a start of its own: a third of each start's variance
    assert point.parts[START] == pytest.approx(fit.sigma2[START] / 3)
    assert point.loads[START] == {"S0@0": pytest.approx(1 / 3), "S0@1": pytest.approx(1 / 3),
                                  "S0@2": pytest.approx(1 / 3)}
    assert point.var == pytest.approx(sum(point.parts.values()))


def test_starts_shared_by_every_point_count_as_the_few_draws_they_are():
    """35 points of 3 repeats pool 70 degrees of freedom of run noise; where the baseline's
    three starts dominate, the points' variance rests on those three."""
    rng = np.random.default_rng(2)
    quiet = variance.fit(*chained(rng, instance=0.0, run=0.05), shrink=False)
    loud = variance.fit(*chained(rng, instance=0.10, run=0.01), shrink=False)
    assert quiet.points["k0w0"].df > 30
    assert loud.points["k0w0"].df < 12


def test_a_class_on_one_start_borrows_the_starts_and_says_it_cannot_see_them():
    rng = np.random.default_rng(3)
    y, point, factors = chained(rng, repeats=3, instance=0.0)
    one = {name: [key.split("@")[0] + "@0" for key in keys] for name, keys in factors.items()}
    alone = variance.fit(y, point, one, shrink=False)
    assert START not in alone.sigma2 and BASE not in alone.sigma2
    borrowed = variance.fit(y, point, one, external={START: (0.03 ** 2, 4.0)}, shrink=False)
    mine, before = borrowed.points["k0w0"], alone.points["k0w0"]
    # every run on one start: its whole variance, whatever the repeats
    assert mine.var == pytest.approx(before.var + 0.03 ** 2)
    assert mine.df < before.df


def test_a_start_always_paired_with_one_baseline_start_is_folded_into_it():
    rng = np.random.default_rng(4)
    y, point, factors = chained(rng, ks=1, workloads=4)
    fit = variance.fit(y, point, factors, shrink=False)
    # each speculative start met one baseline start only: the class tells them apart not
    assert len(fit.folded) == 1 and set(fit.folded.values()) <= {START, BASE}


def test_noisier_workloads_keep_most_of_their_own_spread():
    rng = np.random.default_rng(5)
    y, point, factors = chained(rng, instance=0.0, run=0.02, hot=(1, 3, 5))
    fit = variance.fit(y, point, factors,
                       groups={p: p.split("w")[1] for p in set(point)})
    hot = np.mean([fit.points[f"k{k}w{w}"].scale for k in range(5) for w in (1, 3, 5)])
    cold = np.mean([fit.points[f"k{k}w{w}"].scale for k in range(5) for w in (0, 2, 4, 6)])
    assert hot > 3 * cold
    assert np.isfinite(fit.prior_df)


def test_points_alike_take_the_class_as_it_is():
    rng = np.random.default_rng(6)
    taken = [variance.fit(*chained(rng, instance=0.0)).prior_df for _ in range(20)]
    # as alike as their degrees of freedom say (most fits: no shrinkage prior at all)
    assert np.mean(np.isinf(taken)) > 0.5


def test_the_prior_degrees_of_freedom_follow_how_much_variances_differ():
    rng = np.random.default_rng(7)
    alike = rng.chisquare(4, 200) / 4
    assert variance.fit_dist(alike, np.full(200, 4.0))[1] > 50
    mixed = alike * np.where(np.arange(200) % 2, 9.0, 1.0)
    scale, d0 = variance.fit_dist(mixed, np.full(200, 4.0))
    assert d0 < 10 and 1.0 < scale < 9.0
