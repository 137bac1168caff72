"""Crossover, best settings, the switching gain and the derived dynamic-K schedule."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sdbench.analyze.aggregate import ARM_SETTINGS
from sdbench.analyze.analysis import OFF, best_settings, crossover, switch_gain, verdict
from sdbench.analyze.decision import recommendations
from sdbench.analyze.decisions import CROSSOVER
from sdbench.analyze.schedule_analysis import (
    ALIKE,
    best_static_k,
    derive_schedule,
    dynamic_k_comparison,
)
from sdbench.analyze.stats import ratio_interval
from sdbench.report.decision import deployable_sentences
from sdbench.report.plots import crossover_table, dynamic_k_table
from sdbench.report.show import held_out_basis

from helpers import decided


def points(rows):
    """rows: (speculator, k, concurrency, mean, low, high)."""
    frame = pd.DataFrame(rows, columns=["speculator", "k", "concurrency", "speedup_mean",
                                        "speedup_ci_low", "speedup_ci_high"])
    return frame.assign(target="t", workload="w", method="ngram", round="round1")


def measurements(rows, repeats=3, spread=0.02):
    """Per-measurement rows: (speculator, k, concurrency, mean speedup); each repeat r of the
    j-th setting gets mean + spread * ((r + j) mod repeats - (repeats - 1) / 2), so the mean
    over repeats is the given one, and settings paired with one baseline are not all off in
    the same repeat (which the noise model would read as the baseline's run)."""
    order = {}
    for s, k, _, _ in rows:
        order.setdefault((s, k), len(order))
    out = [{"speculator": s, "k": k, "concurrency": c, "repeat": r,
            "speedup": None if m is None else m + spread * ((r + order[(s, k)]) % repeats
                                                            - (repeats - 1) / 2)}
           for s, k, c, m in rows for r in range(repeats)]
    return _identified(pd.DataFrame(out))


def _identified(frame):
    """What the noise model reads: cells, their baseline, engine and load (one server
    instance: the repeats are the units)."""
    frame = frame.assign(target="t", method="ngram", round="round1", setting="default",
                         paired=frame["speedup"].notna(), engine="serve", load="concurrency",
                         request_rate=np.nan)
    if "workload" not in frame:
        frame["workload"] = "w"
    frame["cell_id"] = [f"{s}-{k}-{w}" for s, k, w in zip(
        frame["speculator"], frame["k"], frame["workload"], strict=True)]
    frame["baseline_cell_id"] = "vanilla-" + frame["workload"]
    return frame


def _geo(values):
    return float(np.exp(np.mean(np.log(values))))


def test_crossover_interpolates_in_log2_concurrency_with_an_interval_from_the_noise_model():
    table = crossover(measurements([
        ("ngram", 2, 1, 1.4), ("ngram", 2, 4, 1.2), ("ngram", 2, 16, 0.8),
        ("ngram", 2, 32, None),  # measured, no speedup: listed, not dropped
        ("ngram", 4, 1, 1.1), ("ngram", 4, 16, 1.05),
        ("draft", 2, 1, 0.6), ("draft", 2, 16, 0.5)], spread=0.1))
    row = table.set_index(["speculator", "k"]).loc[("ngram", 2)]
    # the log speedup (of the repeats' geometric means) from ~1.2 at c=4 to ~0.8 at c=16,
    # linear in log2(concurrency): near c=8
    high, low = np.log(_geo([1.1, 1.2, 1.3])), np.log(_geo([0.7, 0.8, 0.9]))
    assert row["crossover"] == pytest.approx(2 ** (2 + 2 * high / (high - low)))
    # at c=4 the interval (3 repeats, t with 2 degrees of freedom) includes 1, at 1 and 16 not
    assert 1 < row["crossover_low"] < 4 < row["crossover"] < row["crossover_high"] < 16
    assert row["interval"] == "pooled noise model (test inverted)"
    assert row["missing_levels"] == "32"
    assert pd.isna(table.set_index(["speculator", "k"]).loc[("ngram", 4), "crossover"])
    assert table.set_index(["speculator", "k"]).loc[("draft", 2), "reading"] == \
        "below 1 from the lowest level"


def test_verdicts_come_from_intervals():
    assert verdict(1.05, 1.2) == "speculate"
    assert verdict(0.8, 0.95) == "no speculation"
    assert verdict(0.9, 1.3) == "no clear gain"  # a mean of 1.1 is not a gain
    assert verdict(float("nan"), float("nan")).startswith("no clear gain")


def test_best_settings_hold_out_a_repeat_and_consider_speculation_off():
    data = measurements([("ngram", 2, 1, 1.5), ("ngram", 2, 8, 0.9),
                         ("draft", 2, 1, 1.1), ("draft", 2, 8, 0.8),
                         ("ngram", 2, 4, 1.02), ("draft", 2, 4, 0.97)], spread=0.1)
    best = best_settings(data).set_index("concurrency")
    assert best.loc[1, "speculator"] == "ngram" and best.loc[1, "verdict"] == "speculate"
    assert best.loc[8, "speculator"] == "off" and best.loc[8, "verdict"] == "no speculation"
    # mean 1.02 with a wide interval: not "speculate"
    assert best.loc[4, "verdict"] == "no clear gain"


def _noisy_identical(rng, settings=14, levels=(1, 2, 4, 8), repeats=3, noise=0.03):
    return _identified(pd.DataFrame([
        {"speculator": "draft", "k": k, "concurrency": c, "repeat": r,
         "speedup": 1.1 * (1 + noise * rng.standard_normal())}
        for k in range(1, settings + 1) for c in levels for r in range(repeats)]))


def test_switch_gain_and_best_setting_are_free_of_selection_bias():
    """14 identical settings (true speedup 1.1 everywhere) with 3 % noise: picking and reading
    on the same data gives a gain of switching that is always positive (+2.5 % on average on
    one repeat here) and a best speedup above 1.1 (1.132). The post-selection gain is about 0
    (+0.3 %) and its intervals hold the true 0; the held-out best speedup is unbiased
    (1.101)."""
    rng = np.random.default_rng(1)
    gain, holds, in_sample_gain, held_best, in_sample_best = [], [], [], [], []
    for _ in range(60):
        data = _noisy_identical(rng)
        row = switch_gain(data).iloc[0]
        gain.append(row["gain"])
        holds.append(row["gain_ci_low"] <= 0 <= row["gain_ci_high"])
        in_sample_gain.append(switch_gain(data[data["repeat"] == 0])["gain"].iloc[0])
        best = best_settings(data)
        held_best += best["heldout_mean"].tolist()
        in_sample_best += best["speedup_mean"].tolist()
    assert np.mean(in_sample_gain) > 0.01 and min(in_sample_gain) >= 0  # the bias exists
    assert abs(np.mean(gain)) < 0.006 < np.mean(in_sample_gain) / 2
    assert min(gain) < 0 < max(gain)
    assert np.mean(holds) >= 0.9
    assert np.mean(in_sample_best) > 1.11  # the winner's curse
    assert np.mean(held_best) == pytest.approx(1.1, abs=0.003)
    assert row["evaluation"].startswith("all repeats, given the picks (post-selection")


def test_the_held_out_interval_reads_one_repeats_pooled_noise_of_each_pick():
    from sdbench.analyze.analysis import HELD_OUT, held_out_interval

    found = {"ngram k=3": {"speedup_repeat_sd": 0.05, "speedup_df": 10.0,
                           "sequential_factor": 1.0},
             "ngram k=5": {"speedup_repeat_sd": 0.08, "speedup_df": 6.0,
                           "sequential_factor": 1.3}}
    held = [1.2, 1.1, 1.0]
    mean, low, high, basis = held_out_interval(held, ["ngram k=3", "ngram k=3", OFF], found)
    logs = np.log(held)
    half = stats.t.ppf(0.975, 10) * np.sqrt(2 * 0.05 ** 2) / 3  # off: 1, no noise
    assert (mean, low, high) == pytest.approx(
        (np.exp(logs.mean()), np.exp(logs.mean() - half), np.exp(logs.mean() + half)))
    assert basis == "held out, σ from the pooled noise model"
    # two picks: the fewer degrees of freedom, and an adaptive stop's factor widens it
    _, low2, high2, basis2 = held_out_interval(held, ["ngram k=3", "ngram k=5", "ngram k=3"],
                                               found)
    half2 = stats.t.ppf(0.975, 6) * 1.3 * np.sqrt(2 * 0.05 ** 2 + 0.08 ** 2) / 3
    assert np.log(high2 / low2) / 2 == pytest.approx(half2)
    assert basis2.endswith("widened for adaptive stopping")
    # a pick the point table lacks (or whose noise units hold several repeats): the t over the
    # held-out values, as without a point table
    assert held_out_interval(held, ["ngram k=3", "draft k=2", "ngram k=3"], found) == (
        *ratio_interval(np.array(held)), HELD_OUT)


def test_a_repeat_the_pick_was_stopped_before_holds_out_nothing():
    """The adaptive rule stopped k=1 at concurrency 1 after 2 repeats (precise) while k=2 went
    on to 4: k=1, chosen in every fold, is held out only on the repeats it measured, and the
    interval over those two (σ from the point table) stays finite instead of NaN."""
    from sdbench.analyze.simulate import points_of

    rows = [(1, 1, r, s) for r, s in enumerate([1.30, 1.31])]
    rows += [(2, 1, r, s) for r, s in enumerate([1.25, 1.27, 1.35, 1.26])]
    rows += [(k, 16, r, 0.9 + 0.01 * k + 0.01 * r) for k in (1, 2) for r in range(4)]
    frame = pd.DataFrame([
        {"cell_id": f"k{k}", "concurrency": c, "request_rate": np.nan, "repeat": r,
         "baseline_cell_id": "b", "engine": "serve", "target": "t", "method": "m",
         "load": "concurrency", "workload": "w", "speculator": "m", "k": k, "paired": True,
         "speedup": s, "server_instance": 0, "baseline_server_instance": 0}
        for k, c, r, s in rows])
    for table in (None, points_of(frame)):
        row = best_settings(frame, table).set_index("concurrency").loc[1]
        assert row["heldout_picks"] == "m k=1, m k=1"
        assert row["heldout_mean"] == pytest.approx(np.sqrt(1.30 * 1.31))
        assert row["heldout_ci_low"] > 1 and row["verdict"] == "speculate", row
        # the tables say the estimate rests on 2 of the level's 4 repeats
        assert (row["repeats"], row["heldout_repeats"]) == (4, 2)
        recommended = recommendations(frame.assign(num_prompts=6), table)
        shown = dict(zip(recommended["concurrency"], held_out_basis(recommended, "gain_from"),
                         strict=True))
        assert shown[1].endswith("; 2 of the 4 held out (a pick had stopped before the "
                                 "rest)") and "held out (" not in shown[16], shown
        said = deployable_sentences(recommended, table)[0]
        assert said.startswith("w at concurrency 1, m k=1") and "2 of the 4 held out" in said


def test_switch_gain_picks_per_load_and_off_is_a_candidate():
    data = measurements([("ngram", 2, 1, 1.5), ("ngram", 2, 8, 0.7),
                         ("draft", 2, 1, 1.1), ("draft", 2, 8, 0.8)])
    row = switch_gain(data).iloc[0]
    # static: ngram (geo. mean sqrt(1.5*0.7)=1.025) beats off (1.0) and draft (0.94); the
    # switch takes ngram at c=1 and speculation off at c=8
    assert row["static_best"] == "ngram k=2"
    assert row["switch_choice"] == "c=1: ngram k=2, c=8: off"
    assert row["switch_speedup"] == pytest.approx((1.5 * 1.0) ** 0.5, abs=0.01)


def test_settings_with_different_repeats_are_chosen_and_judged_on_the_repeats_all_have():
    """A method's `repeats`: one setting measured 5 times, another 3 times. Both choices are
    made on the 3 repeats both have (the extra repeats of one would otherwise leave the other
    without a speedup there, and no level would be complete)."""
    five = measurements([("ngram", 2, 1, 1.5), ("ngram", 2, 8, 0.7)], repeats=5)
    three = measurements([("draft", 2, 1, 1.1), ("draft", 2, 8, 0.8)], repeats=3)
    data = pd.concat([five, three], ignore_index=True)
    row = switch_gain(data).iloc[0]
    assert row["switch_choice"] == "c=1: ngram k=2, c=8: off"
    assert row["evaluation"].startswith("all repeats, given the picks") and row["levels"] == 2
    best = best_settings(data).set_index("concurrency")
    assert list(best["speculator"]) == ["ngram", "off"] and (best["repeats"] == 3).all()
    assert not best[["heldout_mean", "heldout_ci_low", "heldout_ci_high"]].isna().any().any()


def _arm(rows, arm, repeats=4, noise=(0.97, 1.02, 0.99, 1.03), method="ngram"):
    """A cell measured in turn with a derived schedule: (k, concurrency, speedup) rows, each
    repeat times its factor in `noise` (the factors all three servers of a repeat share: a
    host that drifts moves them alike), so each ratio of two arms is exact per repeat."""
    frame = measurements([(f"{method}{arm}", k, c, m) for k, c, m in rows], repeats=repeats,
                         spread=0)
    frame["speedup"] *= [noise[r] for r in frame["repeat"]]
    frame["output_throughput"] = frame["speedup"] * 100  # a baseline of 100 tok/s
    return frame.assign(round="round3", setting=ARM_SETTINGS[arm])


def test_dynamic_k_is_split_into_the_mechanisms_cost_and_the_schedules_value():
    """Known answer: the constant schedule runs 0.7x the static k (the mechanism's cost), the
    derived schedule 1.2x the constant one (its value): net 0.84x; each ratio's interval
    covers it, and where the repeats' ratios vary the interval says so."""
    static = _arm([(2, 1, 1.3), (2, 8, 0.9)], "+static-k")
    constant = _arm([(2, 1, 1.3 * 0.7), (2, 8, 0.9 * 0.7)], "+constant-k")
    derived = _arm([(4, 1, 1.3 * 0.84), (4, 8, 0.9 * 0.84)], "+dynamic-k")
    round1 = measurements([("ngram", 2, 1, 1.3), ("ngram", 2, 8, 0.9),
                           ("ngram", 4, 1, 1.4), ("ngram", 4, 8, 0.7)])
    table = dynamic_k_comparison(pd.concat([round1, static, constant, derived])).set_index(
        "concurrency")
    assert set(table["best static k"]) == {2}  # the cell measured in turn, not round 1's
    assert set(table["static measured"]) == {"in turn with the schedule"}
    for name, truth in (("mechanism", 0.7), ("schedule", 1.2), ("net", 0.84)):
        assert table[f"{name}_mean"].to_numpy() == pytest.approx(truth, rel=1e-9)
        assert (table[f"{name}_repeats"] == 4).all()
    assert table.loc["all", "mechanism_verdict"] == "the mechanism costs"
    assert table.loc["all", "schedule_verdict"] == "the schedule gains"
    assert table.loc["all", "net_verdict"] == "static k faster"
    # the adaptive rule measured the baseline's repeats 1-3 at concurrency 1 no more: the
    # cells that took turns keep their pairs (throughput against throughput), all 4 of them
    kept = [(f["concurrency"] != 1) | (f["repeat"] == 0) for f in (static, constant, derived)]
    stopped = [f.assign(speedup=f["speedup"].where(k), paired=k)
               for f, k in zip((static, constant, derived), kept, strict=True)]
    table = dynamic_k_comparison(pd.concat([round1, *stopped])).set_index(
        "concurrency")
    assert (table["mechanism_repeats"] == 4).all() and (table["net_repeats"] == 4).all()
    assert table["mechanism_mean"].to_numpy() == pytest.approx(0.7, rel=1e-9)
    # one repeat of the derived server drifts alone: the schedule's and the net's intervals
    # widen (and still cover), the mechanism's stays exact
    drift = np.where(derived["repeat"] == 1, 1.1, 1.0)
    moved = derived.assign(speedup=derived["speedup"] * drift,
                           output_throughput=derived["output_throughput"] * drift)
    table = dynamic_k_comparison(pd.concat([round1, static, constant, moved])).set_index(
        "concurrency")
    assert table.loc["all", "mechanism_ci_high"] == pytest.approx(0.7)
    low, high = table.loc["all", ["schedule_ci_low", "schedule_ci_high"]]
    assert low < 1.2 < high and high - low > 0.05 and low > 0
    # a derived schedule that is the constant one: no schedule value, the mechanism is the
    # derived cell against the static k
    table = dynamic_k_comparison(pd.concat([round1, static, constant.iloc[:0], derived])
                                 ).set_index("concurrency")
    assert table["constant"].all() and table["schedule_mean"].isna().all()
    assert table["mechanism_mean"].to_numpy() == pytest.approx(0.84)
    shown = dynamic_k_table(pd.concat([round1, static, derived]),
                            {derived["cell_id"].iloc[0]: [[1, 8, 2]]}).set_index("concurrency")
    assert shown.loc["all", "schedule"] == ("constant k = 2: the mechanism alone, no schedule; "
                                            "static k measured in turn with the schedule")
    assert "schedule value: derived ÷ constant schedule" not in shown
    assert shown.loc["all", "mechanism cost: constant schedule ÷ static k"].startswith("0.84")


def test_the_constant_schedule_is_measured_only_where_the_derived_one_differs():
    """Known answer: the schedule runs the static k 2 at batch sizes 1-2 and switches
    speculation off above (`[[1, 2, 2], [3, 8, 0]]`), so at concurrency 1 and 2 it serves as
    the constant schedule does and the constant one is measured at 8 only
    (`dynamic_k.alike_levels`). There the derived cell stands in for it: the mechanism costs 0.7x at
    every level, the schedule gains 1.5x at 8 and is 1 by construction at 1 and 2."""
    levels, cost, gain = (1, 2, 8), 0.7, 1.5
    static = _arm([(2, c, 1.3) for c in levels], "+static-k")
    constant = _arm([(2, 8, 1.3 * cost)], "+constant-k")
    derived = _arm([(2, 1, 1.3 * cost), (2, 2, 1.3 * cost), (2, 8, 1.3 * cost * gain)],
                   "+dynamic-k")
    round1 = measurements([("ngram", 2, c, 1.3) for c in levels])
    frame = pd.concat([round1, static, constant, derived])
    schedules = {derived["cell_id"].iloc[0]: [[1, 2, 2], [3, 8, 0]]}
    table = dynamic_k_comparison(frame, schedules).set_index("concurrency")
    assert table["mechanism_mean"].to_numpy() == pytest.approx(cost, rel=1e-9)
    assert (table["mechanism_repeats"] == 4).all()
    assert list(table["schedule_alike"]) == [True, True, False, False]
    assert table.loc[[1, 2], "schedule_verdict"].eq(ALIKE).all()
    assert table.loc[8, "schedule_mean"] == pytest.approx(gain, rel=1e-9)
    assert table.loc[8, "schedule_verdict"] == "the schedule gains"
    # over all levels: the geometric mean of 1, 1 and 1.5
    assert table.loc["all", "schedule_mean"] == pytest.approx(gain ** (1 / 3), rel=1e-9)
    assert table["net_mean"].to_numpy() == pytest.approx(
        [cost, cost, cost * gain, cost * gain ** (1 / 3)], rel=1e-9)
    # without the schedule nothing stands in: the mechanism and the schedule at 8 only
    blind = dynamic_k_comparison(frame).set_index("concurrency")
    assert blind["mechanism_mean"].isna().tolist() == [True, True, False, True]
    assert not blind["schedule_alike"].any()
    shown = dynamic_k_table(frame, schedules).set_index("concurrency")
    assert shown.loc["1", "schedule value: derived ÷ constant schedule"] == ALIKE
    assert shown.loc["8", "schedule value: derived ÷ constant schedule"].startswith("1.50")


def test_each_model_runner_s_cells_are_split_among_themselves():
    """Known answer per runner: under V1 the mechanism costs 0.7x, under V2 0.95x; each
    runner's rows pair its own cells, and the report names the runner."""
    round1 = measurements([("ngram", 2, 1, 1.3), ("ngram", 2, 8, 0.9)])
    arms = []
    for runner, cost in (("v1", 0.7), ("v2", 0.95)):
        name = f"ngram@{runner}"
        arms += [_arm([(2, 1, 1.3), (2, 8, 0.9)], "+static-k", method=name),
                 _arm([(2, 1, 1.3 * cost), (2, 8, 0.9 * cost)], "+dynamic-k", method=name)]
    table = dynamic_k_comparison(pd.concat([round1, *arms]))
    by = table[table["concurrency"] == "all"].set_index("model_runner")
    assert list(by.index) == ["v1", "v2"] and list(by["method"]) == ["ngram@v1", "ngram@v2"]
    assert by["mechanism_mean"].to_numpy() == pytest.approx([0.7, 0.95], rel=1e-9)
    assert set(table["static measured"]) == {"in turn with the schedule"}
    derived = {runner: arms[i]["cell_id"].iloc[0] for i, runner in ((1, "v1"), (3, "v2"))}
    shown = dynamic_k_table(pd.concat([round1, *arms]),
                            {cell: [[1, 8, 2]] for cell in derived.values()})
    assert set(shown["method"]) == {"ngram (V1 model runner)", "ngram (V2 model runner)"}
    assert (shown["schedule k"][shown["concurrency"] != "all"] == "2").all()
    # without the cells in turn, a runner's derived cell falls back to round 1's method
    alone = arms[3].assign(speculator="ngram@v2+dynamic-k")
    fallback = dynamic_k_comparison(pd.concat([round1, alone])).set_index("concurrency")
    assert fallback.loc["all", "static measured"].startswith("in round 1")
    assert fallback.loc["all", "best static k"] == 2


def test_dynamic_k_without_cells_in_turn_is_compared_with_round_1s_best_static_k():
    static = measurements([("ngram", 2, 1, 1.3), ("ngram", 2, 8, 0.9),
                           ("ngram", 4, 1, 1.4), ("ngram", 4, 8, 0.7)])
    dynamic = measurements([("ngram+dynamic-k", 4, 1, 1.4), ("ngram+dynamic-k", 4, 8, 1.0)])
    dynamic = dynamic.assign(round="round3", setting="derived dynamic K")
    table = dynamic_k_comparison(pd.concat([static, dynamic]))
    rows = table.set_index("concurrency")
    # static geo. means: k=2 sqrt(1.3*0.9)=1.082, k=4 sqrt(1.4*0.7)=0.99 -> k=2
    assert set(table["best static k"]) == {2}
    assert rows.loc[8, "net_mean"] == pytest.approx(1.0 / 0.9, abs=0.01)
    assert rows.loc[8, "net_ci_low"] > 1 and rows.loc[8, "net_verdict"] == "dynamic K faster"
    assert "all" in rows.index and rows.loc["all", "net_repeats"] == 3
    assert rows["mechanism_mean"].isna().all() and rows["schedule_mean"].isna().all()
    assert table["engine_differs"].isna().all()  # no engine report in these rows
    # the engine settings the dynamic mechanism changed against the static k's server, said
    # once; a constant schedule labelled as the mechanism alone
    graphs = '{"cudagraph_mode": "%s"}'
    ran = pd.concat([static.assign(engine_settings=graphs % "FULL_AND_PIECEWISE"),
                     dynamic.assign(engine_settings=graphs % "PIECEWISE")])
    shown = dynamic_k_table(ran, {dynamic["cell_id"].iloc[0]: [[1, 8, 4]]}).set_index(
        "concurrency")
    assert shown.loc["all", "engine vs static k"] == (
        "dynamic K switched CUDA graphs from FULL_AND_PIECEWISE to PIECEWISE on this server")
    assert shown.loc["1", "engine vs static k"] == ""
    assert shown.loc["all", "schedule"].startswith(
        "constant k = 4: the mechanism alone, no schedule; static k measured in round 1")
    assert "mechanism cost: constant schedule ÷ static k" not in shown  # not measured
    varied = dynamic_k_table(ran, {dynamic["cell_id"].iloc[0]: [[1, 4, 4], [5, 8, 2]]})
    assert {s.split(";")[0] for s in varied["schedule"]} == {"", "k changes with the batch size"}
    assert "engine vs static k" not in dynamic_k_table(
        pd.concat([static, dynamic]), {dynamic["cell_id"].iloc[0]: [[1, 8, 4]]})
    # a static k measured more often than the dynamic-K cell: paired on the repeats both have
    more = measurements([("ngram", 2, 1, 1.3), ("ngram", 2, 8, 0.9)], repeats=5)
    table = dynamic_k_comparison(pd.concat([more, dynamic]))
    rows = table.set_index("concurrency")
    assert rows.loc["all", "net_repeats"] == 3 and not rows["net_mean"].isna().any()


def test_best_static_k_is_the_best_geometric_mean_over_the_levels_every_k_has():
    data = points([("ngram", 2, 1, 1.3, 1.2, 1.4), ("ngram", 2, 8, 0.9, 0.8, 1.0),
                   ("ngram", 4, 1, 1.4, 1.3, 1.5), ("ngram", 4, 8, 0.7, 0.6, 0.8),
                   # k=6 was measured at one level only (beaten at the other, the adaptive
                   # rule stopped it there): not the best static k however well it did there
                   ("ngram", 6, 1, 1.45, 1.3, 1.6), ("ngram", 6, 8, None, None, None)])
    assert best_static_k(data, "t", "w", "ngram") == 2
    with pytest.raises(ValueError, match="no measured speedups for 'eagle'"):
        best_static_k(data, "t", "w", "eagle")


def test_derived_schedule_takes_the_best_k_per_load_and_0_where_none_pays():
    data = points([("ngram", 2, 1, 1.2, 1.1, 1.3), ("ngram", 4, 1, 1.4, 1.3, 1.5),
                   ("ngram", 2, 4, 1.1, 1.0, 1.2), ("ngram", 4, 4, 1.05, 1.0, 1.1),
                   ("ngram", 2, 16, 1.02, 1.0, 1.1), ("ngram", 4, 16, 0.9, 0.8, 1.0),
                   ("ngram", 2, 32, 0.9, 0.8, 1.0), ("ngram", 4, 32, 0.7, 0.6, 0.8)])
    schedule = derive_schedule(data, "t", "w", "ngram")
    assert schedule == [[1, 1, 4], [2, 16, 2], [17, 32, 0]]
    assert json.loads(json.dumps(schedule)) == schedule  # plain ints: it goes into vLLM's JSON
    with pytest.raises(ValueError, match="no measured speedups for 'eagle'"):
        derive_schedule(data, "t", "w", "eagle")
    # a level the adaptive rule's bisection left out (no speedup): the next level's k covers it
    left_out = data.assign(speedup_mean=data["speedup_mean"].where(data["concurrency"] != 4))
    assert derive_schedule(left_out, "t", "w", "ngram") == [[1, 1, 4], [2, 16, 2], [17, 32, 0]]


def test_the_crossover_table_says_where_the_set_reaches_beyond_the_levels():
    table = crossover_table(decided(CROSSOVER, crossover(measurements([
        ("ngram", 2, 1, 1.4), ("ngram", 2, 4, 1.2), ("ngram", 2, 16, 0.8),
        ("ngram", 4, 1, 1.1), ("ngram", 4, 16, 1.05)], spread=0.1)))).set_index("k")
    # 1.05 at the top level, never clearly below 1: the crossover may lie beyond
    assert table.loc[4, "95 % interval"].endswith(", beyond the levels measured]")
    low, high = table.loc[2, "95 % interval"].strip("[]").split(", ")
    assert 1 < float(low) < 8 < float(high) < 16


@pytest.mark.parametrize("repeats", [2, 4])
def test_the_split_s_intervals_cover_the_true_ratio_at_their_stated_rate(repeats):
    """Coverage by simulation: each repeat's log ratio of two servers (a static k and the
    constant schedule, taking turns) is the true log ratio plus the difference of their own
    noise (4 % each per repeat) — a drift both servers of a repeat share cancels in the pair;
    the 95 % interval over repeats, per level and over all levels, covers the truth in
    93-97 % of 3000 simulated studies."""
    from sdbench.analyze.schedule_analysis import _ratio_row

    rng = np.random.default_rng(7)
    truth = np.log([0.7, 0.75])  # two levels
    hits = {1: 0, 8: 0, "all": 0}
    runs = 3000
    for _ in range(runs):
        drift = rng.normal(0, 0.1, size=(repeats, 1))  # the host, shared by both sides
        static = drift + rng.normal(0, 0.04, size=(repeats, 2))
        constant = drift + truth + rng.normal(0, 0.04, size=(repeats, 2))
        logs = pd.DataFrame(constant - static, columns=[1, 8])
        for level, want in ((1, truth[0]), (8, truth[1]), ("all", truth.mean())):
            row = _ratio_row(logs, level, "mechanism")
            hits[level] += row["mechanism_ci_low"] <= np.exp(want) <= row["mechanism_ci_high"]
    for level, hit in hits.items():
        assert 0.93 <= hit / runs <= 0.97, (level, hit / runs)


def test_a_point_measured_once_leaves_the_switch_gain_in_sample_not_an_error():
    """The adaptive rule may stop a point after its first repeat (its verdict settled): that
    point has no spread (no standard error), the gain's covariance is not finite, and the
    switching gain is the in-sample estimate, said so (the demo's round 1 report failed on a
    LinAlgError from such a run)."""
    three = measurements([("ngram", 2, 1, 1.5), ("ngram", 2, 8, 0.7)], repeats=3)
    once = measurements([("draft", 2, 1, 1.3), ("draft", 2, 8, 0.8)], repeats=3)
    once.loc[(once["concurrency"] == 1) & (once["repeat"] > 0), ["speedup", "paired"]] = [
        np.nan, False]
    # (alone in its class: another method, nothing to borrow a spread from)
    once["method"] = "draft_model"
    row = switch_gain(pd.concat([three, once], ignore_index=True)).iloc[0]
    assert row["evaluation"] == "in-sample (no spread measured): biased upward"
    assert np.isnan(row["gain_ci_low"]) and np.isfinite(row["gain"])
    # beside another point of its class it borrows the class's spread: an interval
    once["method"] = "ngram"
    row = switch_gain(pd.concat([three, once], ignore_index=True)).iloc[0]
    assert np.isfinite(row["gain_ci_low"]) and np.isfinite(row["gain"])


def test_no_crossover_is_claimed_where_no_level_is_clearly_below_1():
    """The means cross 1 between 4 and 16 (1.2 to 0.95), but 0.95 at 16 cannot be told from 1
    at this spread: the reading says the crossover is not established, the table too."""
    rows = [("ngram", 2, 1, 1.4), ("ngram", 2, 4, 1.2), ("ngram", 2, 16, 0.95)]
    table = crossover(measurements(rows, spread=0.1)).iloc[0]
    assert table["crossover"] > 4 and not table["established"]
    assert table["reading"].startswith("no clear crossover")
    shown = crossover_table(decided(CROSSOVER, crossover(measurements(rows, spread=0.1)))).iloc[0]
    assert shown["speedup < 1 from concurrency"] == "not established"
    clear = crossover(measurements(rows[:2] + [("ngram", 2, 16, 0.5)], spread=0.1)).iloc[0]
    assert clear["established"] and clear["reading"].startswith("falls below 1 near")


def test_a_switch_that_keeps_the_static_setting_gains_nothing_and_says_so():
    """The issue's demo printed "0.00 % [0.00, 0.00]" beside the same setting both ways, and a
    post-selection estimate of −36.7 % on fewer than 2 degrees of freedom beside 1.17× → 1.18×:
    no number where there is no comparison, no interval where there are too few df."""
    data = measurements([("ngram", 2, 1, 1.5), ("ngram", 2, 8, 1.2),
                         ("draft", 2, 1, 1.1), ("draft", 2, 8, 0.8)])
    row = switch_gain(data).iloc[0]
    assert row["switch_choice"] == "c=1: ngram k=2, c=8: ngram k=2"
    assert np.isnan(row["gain"]) and np.isnan(row["gain_ci_low"])
    assert row["evaluation"].startswith("the switch keeps the static setting")
    from sdbench.analyze.noise import point_noise

    two = measurements([("ngram", 2, 1, 1.5), ("ngram", 2, 8, 0.7),
                        ("draft", 2, 1, 1.1), ("draft", 2, 8, 0.8)], repeats=2)
    noise = point_noise(two)
    assert switch_gain(two, noise).iloc[0]["gain_ci_low"] > 0  # 2 df: an interval
    thin = switch_gain(two, noise.assign(df=1.5)).iloc[0]
    assert np.isnan(thin["gain_ci_low"]) and thin["gain"] > 0
    assert thin["evaluation"].startswith("in-sample, ") and "too few" in thin["evaluation"]
