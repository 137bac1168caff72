"""The adaptive design (sdbench.plan.adaptive): its boundaries, its stop rule, and simulated
Round-1-shaped sweeps through it against the full design (a reduced run of
`python -m sdbench.plan.sweeps`, which writes docs/adaptive-simulation.md)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from sdbench.plan import adaptive, sweeps


def test_boundaries_match_the_published_constants():
    # Pocock (Δ 0.5) and O'Brien-Fleming (Δ 0) for 2 and 3 looks, α 0.05 (Jennison &
    # Turnbull, table 2.1 and 2.3)
    assert adaptive.boundary(3, 0.05, 0.5)[0] == pytest.approx(2.289, abs=0.005)
    assert adaptive.boundary(2, 0.05, 0.5)[0] == pytest.approx(2.178, abs=0.005)
    assert adaptive.boundary(3, 0.05, 0.0)[-1] == pytest.approx(2.004, abs=0.005)
    assert adaptive.boundary(1)[0] == pytest.approx(1.960, abs=0.001)


def test_the_rule_stops_for_each_reason_and_rechecks():
    rule = adaptive.Rule(noise=0.05)
    clear = adaptive.decide([math.log(1.5)], 3, rule, 0.05, math.inf)
    assert clear.reason == adaptive.SETTLED and clear.low > 0
    assert adaptive.decide([math.log(1.5)], 3, rule, 0.05, math.inf,
                           rivals=True).reason == adaptive.CONTINUE
    assert adaptive.decide([0.0, 0.0], 3, rule, 0.01, math.inf).reason == adaptive.PRECISE
    assert adaptive.decide([0.0], 3, rule, 0.05, math.inf, bar=0.2).reason == adaptive.BEATEN
    assert adaptive.decide([0.0], 3, rule, 0.05, math.inf).reason == adaptive.FUTILE
    assert adaptive.decide([0.05], 3, rule, 0.05, math.inf).reason == adaptive.CONTINUE
    assert adaptive.decide([0.01, 0.0, 0.02], 3, rule, 0.05, math.inf).reason == adaptive.CAP
    stop = {**clear.to_dict(), "rule": rule.to_dict(), "bar": None, "rivals": False}
    assert adaptive.recheck(stop, [math.log(1.5)]) is None
    assert adaptive.recheck(stop, [math.log(1.01)]) is not None


def test_levels_are_coarse_first_then_bisected_where_the_decision_changes():
    assert adaptive.coarse_levels(10) == [0, 5, 9]
    assert adaptive.bisect({0: 1, 5: 1, 9: -1}) == [7]
    assert adaptive.bisect({0: 1, 5: 1, 6: 1}) == []


def test_the_level_tree_a_session_follows_measures_what_bisection_would():
    """The workflow decides each level from its place in the tree (depth, two neighbours);
    the simulation bisects round by round: on any decisions they measure the same levels."""
    rng = np.random.default_rng(1)
    for count in (2, 3, 4, 6, 10, 17):
        tree = adaptive.level_tree(count)
        assert sorted(tree) == list(range(count))
        for _ in range(50):
            truth = rng.integers(-1, 2, count)
            measured = {i for i, (depth, _, _) in tree.items() if depth == 0}
            for i in sorted(tree, key=lambda i: tree[i][0]):  # depth by depth
                depth, a, b = tree[i]
                if depth and a in measured and b in measured and truth[a] != truth[b]:
                    measured.add(i)
            dynamic = set(adaptive.coarse_levels(count))
            while new := adaptive.bisect({i: truth[i] for i in dynamic}):
                dynamic |= set(new)
            assert measured == dynamic


def test_an_added_level_is_measured_by_the_best_settings_of_the_methods_it_concerns():
    rule = adaptive.Rule()
    gain, loss = math.log(1.5), math.log(0.6)
    lower = adaptive.level_decisions({"k2": ("ngram", [gain - 0.1], 3),
                                      "k4": ("ngram", [gain], 3),
                                      "e3": ("eagle", [gain], 3)}, rule)
    upper = adaptive.level_decisions({"k2": ("ngram", [loss], 3),
                                      "k4": ("ngram", [loss - 0.1], 3),
                                      "e3": ("eagle", [gain], 3)}, rule)
    assert lower == {"eagle": ["e3", 1], "ngram": ["k4", 1]}
    assert upper == {"eagle": ["e3", 1], "ngram": ["k2", -1]}
    assert adaptive.level_contenders(lower, upper) == {"k2", "k4"}  # not EAGLE: it agrees
    assert adaptive.level_contenders(lower, lower) is None


def test_simulated_sweeps_keep_coverage_and_verdicts_at_a_fraction_of_the_cost():
    rule = adaptive.Rule()
    rows = [sweeps.run(sweeps.Sweep(i, m), rule, 40, seed=n)
            for n, (i, m) in enumerate(((0.0, 0.02), (0.05, 0.1)))]
    for row in rows:
        assert 0.92 <= row["coverage"] <= 0.99
        assert row["agreement"] >= 0.92
        assert row["best_adaptive"] >= row["best_full"] - 0.06
        assert row["cost"] <= 0.40
    # without bisection (`bisect: false`: every level with every k): fewer savings
    every = sweeps.run(sweeps.Sweep(0.0, 0.02), rule, 20, seed=0, bisect=False)
    assert every["cost"] > rows[0]["cost"]


def test_the_real_studys_rule_measures_at_most_three_tenths_of_the_full_design():
    """config/config.yaml's rule (O'Brien-Fleming, the lowest and highest level first, futility
    3 %) on the noisiest simulated sweeps: issue 35's ≤ 30 % of the point-repeats, verdicts
    kept."""
    rule = sweeps.config_rule("config/config.yaml")
    assert (rule.shape, rule.coarse, rule.futility) == (0.0, 2, 0.03)
    row = sweeps.run(sweeps.Sweep(0.05, 0.1), rule, 40, seed=3)
    assert row["cost"] <= 0.30
    assert 0.92 <= row["coverage"] <= 0.99
    assert row["agreement"] >= 0.92
    default = sweeps.run(sweeps.Sweep(0.05, 0.1), adaptive.Rule(), 40, seed=3)
    assert row["cost"] < default["cost"]


def test_min_repeats_holds_a_clear_point_for_a_second_look():
    rule = adaptive.Rule(min_repeats=2)
    assert adaptive.decide([math.log(3.0)], 3, rule, 0.05, math.inf).reason == adaptive.CONTINUE
    assert adaptive.decide([math.log(3.0)] * 2, 3, rule, 0.05,
                           math.inf).reason == adaptive.SETTLED
    assert adaptive.Rule.from_config({"min_repeats": 2, "noise": 0.1}) == adaptive.Rule(
        min_repeats=2, noise=0.1, beaten_needs_verdict=True, prior_df=adaptive.PRIOR_DF,
        instance_noise=adaptive.INSTANCE_NOISE)
    assert adaptive.Rule.from_config({"enabled": False}) is None


def test_blocks_of_prompts_keep_coverage_and_cost_less_where_low_levels_cost_most():
    """A repeat split into blocks (`adaptive.blocks`) at the low levels, where a repeat costs
    most: intervals still cover, the weighted cost falls, and the boundaries for the many looks
    match the multivariate normal's (Wang-Tsiatis, 12 looks: 7.266 first, 2.098 last)."""
    assert adaptive.boundary(12, 0.05, 0.0)[0] == pytest.approx(7.266, abs=0.005)
    assert adaptive.boundary(12, 0.05, 0.0)[-1] == pytest.approx(2.098, abs=0.005)
    rule = sweeps.config_rule("config/config.yaml")
    whole, split = (sweeps.run(sweeps.Sweep(0.0, 0.02, weights=sweeps.WEIGHTS, blocks=b), rule,
                               30, seed=2) for b in ((), sweeps.BLOCKED))
    assert 0.92 <= split["coverage"] <= 0.995
    assert split["cost"] < whole["cost"]
    assert adaptive.Rule(noise=0.05).at(4).noise == pytest.approx(0.1)


def test_the_full_design_measures_whole_repeats_where_the_adaptive_one_splits_them():
    """The full design the simulation compares with does not split repeats: where blocks are
    simulated, its repeat on an instance is the mean of that instance's blocks (look j on
    instance j mod repeats), and its intervals are those of the same draws taken whole. With
    all the noise the instances' (blocks of one instance alike), a block's spread scaled down
    by √b (the simulation before 2026-11-28) would count a degree of freedom per block, not
    per repeat, and understate σ."""
    blocked = sweeps.Sweep(0.1, 0.0, levels=4, blocks=(4, 2, 1, 1), prior_scale=0.01)
    whole = sweeps.Sweep(0.1, 0.0, levels=4, prior_scale=0.01)
    rng = np.random.default_rng(5)
    mu = sweeps.truth(blocked, 0.0)
    y = sweeps.draws(blocked, mu, rng)
    assert np.allclose(y[:, 0, 0], y[:, 0, 3]) and not np.allclose(y[:, 0, 0], y[:, 0, 1])
    taken_whole = np.stack([sweeps.repeat_means(blocked, y, i) for i in range(4)], axis=1)
    assert np.allclose(taken_whole[:, 0, 1], y[:, 0, [1, 4, 7, 10]].mean(1))
    rule = adaptive.Rule(prior_df=0.0)
    split, full = (sweeps.full_design(s, v, rule) for s, v in ((blocked, y), (whole, taken_whole)))
    assert np.allclose(split["low"], full["low"]) and np.allclose(split["high"], full["high"])
    assert split["cost"] == full["cost"]


def test_a_level_prior_reads_from_the_config_and_survives_a_stored_stop():
    """`adaptive.level_noise`: the config's mapping (YAML keys may be strings), the JSON a
    stop stores, and the rule rebuilt from it are one rule; a level's rule carries its own
    prior σ (a block's √b times it), other levels and open-loop rates the general one."""
    import json

    rule = adaptive.Rule.from_config({"noise": 0.05, "level_noise": {"1": 0.02, 4: 0.03}})
    assert rule.level_noise == ((1, 0.02), (4, 0.03))
    stored = json.loads(json.dumps(rule.to_dict()))
    assert adaptive.Rule(**stored) == rule and stored == rule.to_dict()
    assert hash(adaptive.Rule(**stored)) == hash(rule)
    assert rule.at(1, 1).noise == pytest.approx(0.02)
    assert rule.at(4, 1).noise == pytest.approx(0.04)
    assert rule.at(1, 2).noise == rule.at(1, None).noise == pytest.approx(0.05)
    assert rule.at(1, 4).level_noise == ()
    assert adaptive.Rule(**{**stored, "level_noise": []}) != rule
    # a rule without level priors stores what it stored before they existed
    assert "level_noise" not in adaptive.Rule().to_dict()
    assert adaptive.Rule(**adaptive.Rule(noise=0.1).to_dict()) == adaptive.Rule(noise=0.1)


def test_a_quieter_lowest_level_with_its_own_prior_costs_less_and_still_covers():
    """Simulated sweeps where a repeat at concurrency 1 (about half the cost) is 0.4 times as
    noisy as under load, the prior saying so: far fewer point-repeats than with the general
    prior there, coverage and the full design's verdicts kept; and where the truth at 1 is
    twice what its prior says, coverage still holds."""
    rule = sweeps.config_rule("config/config.yaml")
    quiet = (0.4,) + (1.0,) * 9
    general, own = (sweeps.run(sweeps.Sweep(0.0, 0.02, weights=sweeps.WEIGHTS, scales=quiet,
                                            prior_levels=p), rule, 30, seed=4)
                    for p in ((1.0,) * 10, ()))
    # (each prior counts for `prior_df` degrees of freedom: the run's own spread soon outweighs
    # a prior that was right, as it outweighs one that was wrong)
    assert own["cost"] < 0.9 * general["cost"]
    assert 0.93 <= own["coverage"] <= 0.995 and own["agreement"] >= 0.93
    wrong = sweeps.run(sweeps.Sweep(0.0, 0.02, weights=sweeps.WEIGHTS,
                                    scales=(0.8,) + (1.0,) * 9, prior_levels=quiet),
                       rule, 30, seed=4)
    assert wrong["coverage"] >= 0.92


def test_a_rate_points_tpot_speedup_interval_covers_where_the_rule_stopped_it():
    """At an open-loop rate the rule stops on the TPOT speedup, and the report's interval on it
    is the rule's (`point_intervals.rule_interval`): simulated points (true log speedups across
    ±0.15, noise at the prior, 5 planned repeats, Δ 0.25) stopped by `adaptive.decide` are
    covered at the look each stopped at least 95 % of the time, and a point stopped after one
    repeat has an interval (a Student-t one over its repeats would not)."""
    import json

    from sdbench.analyze.point_intervals import rule_interval

    rng = np.random.default_rng(7)
    rule = adaptive.Rule(noise=0.05, shape=0.25, futility=0.03)
    row = {"adaptive": json.dumps(rule.to_dict()), "blocks": 1}
    covered, once = 0, []
    for _ in range(600):
        truth, ys = rng.uniform(-0.15, 0.15), []
        for _ in range(5):
            ys.append(truth + rng.normal(0, 0.05))
            sigma, df = adaptive.pooled_sigma(rule, *adaptive.spread([ys]))
            if adaptive.decide(ys, 5, rule, sigma, df).reason != adaptive.CONTINUE:
                break
        mean, low, high = rule_interval(np.exp(ys), row, 5)
        covered += low <= math.exp(truth) <= high
        if len(ys) == 1:
            once.append(high / low)
    assert covered / 600 >= 0.95
    assert once and all(np.isfinite(once)) and min(once) > 1


def test_a_beaten_setting_stops_once_its_own_verdict_is_known():
    """`beaten_needs_verdict` (the config's default): a setting beaten in the race goes on
    while its own verdict against 1 is open and reachable by the cap, and stops as beaten once
    it is settled or out of reach; without it (a stored rule from before, which has no key) it
    stops at once."""
    rule = adaptive.Rule.from_config({"noise": 0.05})
    assert rule.beaten_needs_verdict and rule.to_dict()["beaten_needs_verdict"] is True
    old = adaptive.Rule(**{k: v for k, v in rule.to_dict().items()
                           if k != "beaten_needs_verdict"})
    assert not old.beaten_needs_verdict and "beaten_needs_verdict" not in old.to_dict()
    # 1.05x after one of three repeats: open (its interval spans 1), reachable by the cap
    open_mean = [math.log(1.05)]
    assert adaptive.decide(open_mean, 3, rule, 0.05, math.inf, bar=0.2).reason == \
        adaptive.CONTINUE
    assert adaptive.decide(open_mean, 3, old, 0.05, math.inf, bar=0.2).reason == adaptive.BEATEN
    # settled against 1 (1.5x), or no verdict in reach (1.0x): beaten either way
    assert adaptive.decide([math.log(1.5)], 3, rule, 0.05, math.inf, bar=0.6).reason == \
        adaptive.BEATEN
    assert adaptive.decide([0.0], 3, rule, 0.05, math.inf, bar=0.2).reason == adaptive.BEATEN


def test_a_chained_sweep_keeps_the_interleaved_designs_quality():
    """A sweep measured in a chain (`adaptive.chain`: each k's cell in stages, a whole
    repeat's blocks on one server instance, the group's σ and race refreshed only at each
    repeat's first block, every k racing through its first repeat): its intervals cover, it
    keeps the full design's verdicts and picks a best k as often as the full design (within 2
    points), at a fraction of the full design's cost. Its draws put a repeat's blocks on one
    instance."""
    rule = sweeps.config_rule("config/config.yaml")
    shape = dict(weights=sweeps.WEIGHTS, blocks=sweeps.BLOCKED, scales=sweeps.QUIET)
    chained = sweeps.Sweep(0.0, 0.02, chained=True, **shape)
    row = sweeps.run(chained, rule, 60, seed=7)
    assert 0.92 <= row["coverage"] <= 0.995 and row["agreement"] >= 0.95
    assert row["best_adaptive"] >= row["best_full"] - 0.02
    assert row["cost"] <= 0.3
    assert chained.instances(0, 12).tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert sweeps.Sweep(0.0, 0.02, **shape).instances(0, 12).tolist() == [0, 1, 2] * 4
    y = sweeps.draws(replace(chained, instance_noise=0.1, measurement_noise=0.0),
                     sweeps.truth(chained, 0.0), np.random.default_rng(1))
    assert np.allclose(y[:, 0, 0], y[:, 0, 3]) and not np.allclose(y[:, 0, 3], y[:, 0, 4])
