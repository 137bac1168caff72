"""Synthetic acceptance: the setting read from a cell's options, the simulated label, and the
known-answer check (its variance formula and its false-alarm rate by simulation)."""

import copy
import json

import numpy as np
import pandas as pd
import pytest

from sdbench.analyze.acceptance import (
    CHECK_LEVEL,
    acceptance_check,
    accepted_variance,
    break_even,
    draft_interval,
    simulated_label,
    synthetic_setting,
)
from sdbench.analyze.aggregate import apply_index
from sdbench.analyze.analysis import best_settings
from sdbench.analyze.stats import mean_interval, ratio_interval
from sdbench.analyze.step_model import predicted_break_even
from sdbench.plan import adaptive, grid, specs
from sdbench.plan.config import ConfigError, validate_config
from sdbench.plan.settings import settings
from sdbench.report.acceptance_tables import (
    break_even_plot,
    break_even_prediction_table,
    break_even_table,
    synthetic_table,
)
from sdbench.report.show import method_names


def _accepted(rates, drafts, rng):
    """Accepted tokens of `drafts` drafts: position j is accepted, given position j-1 was,
    with probability p_j / p_(j-1) (p the unconditional rates), as vLLM's synthetic sampler
    does; and the per-position rates that came out."""
    p = np.asarray(rates, float)
    conditional = p / np.concatenate([[1.0], p[:-1]])
    accepted = np.cumprod(rng.random((drafts, p.size)) < conditional, axis=1)
    return accepted.sum(axis=1), accepted.mean(axis=0)


def _point(cell, rates, drafts, rng, options=None, shift=0):
    counts, measured_rates = _accepted(rates, drafts, rng)
    options = options or {"rejection_sample_method": "synthetic",
                          "synthetic_acceptance_length": 1 + float(np.sum(rates))}
    return {"cell_id": cell, "speculator": "eagle", "k": len(rates), "concurrency": 1,
            "spec_options": json.dumps(options), "spec_decode_num_drafts": drafts,
            "spec_decode_accepted_tokens": int(counts.sum()) + shift,
            "spec_decode_per_position_acceptance_rates": json.dumps(list(measured_rates))}


def test_the_setting_and_the_label_come_from_the_options():
    assert synthetic_setting('{"rejection_sample_method": "synthetic", '
                             '"synthetic_acceptance_length": 2.5}') == 2.5
    assert synthetic_setting({"rejection_sample_method": "synthetic",
                              "synthetic_acceptance_rates": [0.8, 0.5]}) == pytest.approx(2.3)
    assert synthetic_setting({"synthetic_acceptance_length": 2.5}) is None  # not applied
    assert synthetic_setting(None) is None and synthetic_setting("") is None
    assert simulated_label("eagle3", {"rejection_sample_method": "synthetic",
                                      "synthetic_acceptance_length": 3.0}) == (
        "eagle3 (simulated: acceptance 3)")
    assert simulated_label("eagle3", {"rejection_sample_method": "synthetic",
                                      "synthetic_acceptance_length": 3.08}, "eagle3",
                           "vLLM issue 20780") == (
        "eagle3 (simulated: eagle3 at acceptance 3.08 (vLLM issue 20780))")
    assert simulated_label("ngram", {}) == "ngram"


def test_a_method_names_where_its_set_acceptance_comes_from(demo_config_raw):
    """`acceptance_source` reaches the summary's rows and the reports' method names; without
    synthetic options it is refused, naming the key."""
    raw = copy.deepcopy(demo_config_raw)
    method = raw["round1"]["methods"][0]
    method["acceptance_source"] = "a paper, table 2"
    with pytest.raises(ConfigError, match=r"round1\.methods\[0\]\.acceptance_source"):
        validate_config(copy.deepcopy(raw))
    method["options"] = {**method.get("options", {}), **grid.synthetic_options(2.5)}
    config = validate_config(raw)
    name = settings(config).rounds["round1"].methods[0].name
    index = grid.summary_index(config)["cells"]
    cited = {c["acceptance_source"] for c in index.values() if c["speculator"] == name}
    assert cited == {"a paper, table 2"}
    assert {c["acceptance_source"] for c in index.values() if c["speculator"] != name} == {None}
    cell_id = next(i for i, c in index.items() if c["speculator"] == name)
    frame = apply_index(pd.DataFrame({"cell_id": [cell_id], "speculator": [name],
                                      "round": ["round1"], "target": ["t"]}),
                        grid.summary_index(config))
    shown = method_names(frame.assign(method="ngram", simulated_acceptance=2.5))
    assert shown.iloc[0] == f"{name} (simulated: ngram at acceptance 2.5 (a paper, table 2))"


def test_the_accepted_count_s_variance_is_the_chain_s():
    rng = np.random.default_rng(1)
    rates = [0.9, 0.6, 0.3, 0.1]
    counts, _ = _accepted(rates, 400_000, rng)
    assert counts.mean() == pytest.approx(sum(rates), abs=0.01)
    assert counts.var() == pytest.approx(accepted_variance(rates), rel=0.02)
    assert accepted_variance([1.0, 1.0, 0.0, 0.0]) == 0  # vLLM's pattern for length 3 of 4


def test_the_check_passes_what_the_sampler_sets_and_fails_what_it_does_not():
    """Simulation: 1,500 points of a correct sampler at random settings pass at the check's
    level (false alarms well under 1 %); a length counted 0.1 too high, and drafts accepted
    by comparison (the setting not applied, acceptance near 0), fail."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(1500):
        k = int(rng.integers(2, 7))
        rates = np.sort(rng.uniform(0, 1, k))[::-1]
        rows.append(_point(f"c{i}", rates, int(rng.integers(100, 2000)), rng))
    table = acceptance_check(pd.DataFrame(rows))
    assert len(table) == 1500
    assert (~table["passed"]).mean() <= 0.006  # expected 1 - CHECK_LEVEL = 0.1 %
    assert CHECK_LEVEL == 0.999
    wrong = [_point("counted", [0.8, 0.5, 0.2], 4000, rng, shift=400),
             _point("ignored", [0.0, 0.0, 0.0], 1000, rng,
                    options={"rejection_sample_method": "synthetic",
                             "synthetic_acceptance_length": 2.5})]
    table = acceptance_check(pd.DataFrame(wrong))
    assert not table["passed"].any()
    shown = synthetic_table(pd.DataFrame(wrong))
    assert set(shown["check"]) == {"✗ differs: the engine or the accounting"}
    assert shown["cell"].iloc[1] == "eagle (simulated: acceptance 2.5) k=3"


def test_a_deterministic_pattern_allows_one_draft_cut_short():
    """As measured on an H100 (vLLM 0.26, length 3.0 of k = 4: rates [1, 1, 0, 0]): exactly
    2 accepted per draft; one draft short of that passes, 1 % short fails. Without per-position
    rates the bound k allows is used, and said."""
    base = {"cell_id": "h100", "speculator": "eagle", "k": 4, "concurrency": 16,
            "spec_options": '{"rejection_sample_method": "synthetic", '
                            '"synthetic_acceptance_length": 3.0}',
            "spec_decode_num_drafts": 688,
            "spec_decode_per_position_acceptance_rates": "[1.0, 1.0, 0.0, 0.0]"}
    for accepted, passed in ((1376, True), (1375, True), (1362, False)):
        row = acceptance_check(pd.DataFrame([{**base, "spec_decode_accepted_tokens": accepted}]))
        assert row["passed"].item() is passed
    unreported = acceptance_check(pd.DataFrame([{**base, "spec_decode_accepted_tokens": 1362,
                                                 "spec_decode_per_position_acceptance_rates":
                                                 None}]))
    assert unreported["passed"].item() and unreported["error_from"].item() == (
        "the largest variance k allows")
    plain = {**base, "spec_options": "{}", "spec_decode_accepted_tokens": 10}
    assert acceptance_check(pd.DataFrame([plain])).empty  # real acceptance: nothing to check


def _sweep(slope, lengths, rng, repeats=3, noise=0.05, level=1, real=None,
           real_repeats=None):
    """Points of an acceptance sweep whose true speedup is slope x acceptance length (the
    step-time model: linear in the length), each the mean of `repeats` measurements with
    multiplicative noise and a 95 % Student-t interval (as the summary computes them); and
    the method's real cell accepting `real`: measured so too where `real_repeats` says how
    often, else its true speedup without an interval."""
    rows = []
    for length in lengths:
        values = slope * length * np.exp(rng.normal(0, noise, repeats))
        mean, _, low, high = mean_interval(values)
        rows.append({"speculator": grid.sweep_name("draft", length), "simulated_acceptance":
                     length, "speedup_mean": mean, "speedup_ci_low": low,
                     "speedup_ci_high": high, "repeats_ok": repeats})
    if real is not None:
        mean, low, high = slope * real, np.nan, np.nan
        if real_repeats:
            mean, _, low, high = mean_interval(slope * real * np.exp(
                rng.normal(0, noise, real_repeats)))
        rows.append({"speculator": "draft", "simulated_acceptance": None,
                     "speedup_mean": mean, "speedup_ci_low": low, "speedup_ci_high": high,
                     "repeats_ok": real_repeats, "spec_decode_acceptance_length_mean": real})
    return pd.DataFrame(rows).assign(target="t", workload="w", k=4, concurrency=level,
                                     load="concurrency")


def test_the_break_even_acceptance_is_found_and_its_interval_covers():
    """Known answer: speedup = L / 1.8 crosses 1 at L = 1.8 exactly (no noise), and a real
    draft far from it is read right. Simulation: 400 sweeps of each of two designs (6 lengths,
    3 repeats, 5 % noise; 4 lengths, 4 repeats, 2 % noise) cover the true break-even 92-98 %
    of the time."""
    rng = np.random.default_rng(3)
    exact = break_even(_sweep(1 / 1.8, [1, 1.5, 2, 3], rng, noise=1e-9, real=3.5))
    row = exact.iloc[0]
    assert row["break_even"] == pytest.approx(1.8) and row["break_even_side"] == ""
    assert row["reading"].startswith("it pays: accepts 3.50")
    assert break_even(_sweep(1 / 1.8, [1, 1.5, 2, 3], rng, noise=1e-9, real=1.2)).iloc[0][
        "reading"].startswith("it loses")
    # never paying within the sweep: the break-even lies beyond it, said so
    beyond = break_even(_sweep(1 / 6, [1, 2, 3, 4, 5], rng, noise=1e-9)).iloc[0]
    assert beyond["break_even_side"] == ">" and beyond["break_even"] == 5
    assert beyond["reading"] == "no real cell of this method and k measured here"
    for lengths, repeats, noise, truth in (([1, 1.5, 2, 3, 4, 5], 3, 0.05, 1.8),
                                           ([1, 1.5, 2, 3], 4, 0.02, 2.1)):
        covered, widths = 0, []
        for _ in range(400):
            row = break_even(_sweep(1 / truth, lengths, rng, repeats, noise)).iloc[0]
            covered += row["ci_low"] <= truth <= row["ci_high"]
            widths.append(row["ci_high"] - row["ci_low"])
        assert 0.92 <= covered / 400 <= 0.98
        assert 0 < np.median(widths) < 0.2  # informative, not the whole sweep


def test_the_real_cell_anchors_the_line_where_one_length_is_swept():
    """The method's real cell lies on the sweep's line (same servers but for which drafts are
    accepted): one swept length and the real cell give the break-even. Known answer without
    noise; over 400 simulated sweeps (one length, 2 repeats; the real cell at 5.6, 2 repeats;
    5 % noise) its interval covers the truth 92-98 % of the time. A line that does not rise
    has no break-even, and says so."""
    rng = np.random.default_rng(5)
    row = break_even(_sweep(1 / 1.8, [1.0], rng, noise=1e-9, real=3.5, real_repeats=3)).iloc[0]
    assert row["break_even"] == pytest.approx(1.8) and row["real_in_fit"]
    assert row["lengths"] == 1 and (row["fit_low"], row["fit_high"]) == (1.0, 3.5)
    assert row["reading"].startswith("it pays: accepts 3.50")
    assert break_even_table(_sweep(1 / 1.8, [1.0], rng, noise=1e-9, real=3.5,
                                   real_repeats=3))["fitted through"].iloc[0] == (
        "1 swept + the real cell (3.50)")
    # without the real cell one length gives no line
    assert break_even(_sweep(1 / 1.8, [1.0], rng, noise=1e-9)).empty
    covered = 0
    for _ in range(400):
        found = break_even(_sweep(1 / 3.2, [3.0], rng, 2, 0.05, real=5.6,
                                  real_repeats=2)).iloc[0]
        low = -np.inf if found["ci_low_side"] == "≤" else found["ci_low"]
        high = np.inf if found["ci_high_side"] == ">" else found["ci_high"]
        covered += low <= 3.2 <= high
    assert 0.92 <= covered / 400 <= 0.98
    # losing at every acceptance it reaches: the break-even beyond the real cell's, which
    # therefore loses (not "no clear answer")
    out = break_even(_sweep(1 / 9, [1.0], rng, noise=1e-9, real=3.5, real_repeats=3)).iloc[0]
    assert (out["break_even_side"], out["ci_low_side"], out["ci_low"]) == (">", ">", 3.5)
    assert out["reading"].startswith("it loses: accepts 3.50")
    flat = _sweep(1 / 1.8, [1.0], rng, noise=1e-9, real=3.5, real_repeats=3)
    flat.loc[flat["speculator"] == "draft", "speedup_mean"] = 0.5
    none = break_even(flat).iloc[0]
    assert np.isnan(none["break_even"]) and none["reading"].startswith("no break-even")
    assert break_even_table(flat)["break-even acceptance length (95 %)"].iloc[0].startswith(
        "none")


# the verification pass of k = 4 at concurrency 1: the target's step over 5 sequences, on the
# line through its steps at 1 (30 ms) and 8 (40 ms)
VERIFY_5 = 30.0 + (40.0 - 30.0) * (5 - 1) / (8 - 1)


def _predictable_sweep(scale: float, rng, noise: float = 0.01) -> pd.DataFrame:
    """A draft-model sweep (k = 4 at concurrency 1) whose TPOT speedups are `scale` × the
    step-time model's (target 30 ms a step at 1 and 40 at 8, so 35.7 over 5 sequences on
    their line; draft 6 ms: break-even (4 · 6 + 35.7) / 30 = 1.99 predicted), with the vanilla
    cells of its target and draft."""
    verify = VERIFY_5
    base = {"round": "round1", "workload": "w", "setting": "default", "engine": "serve",
            "load": "concurrency", "target": "big"}
    rows = [{**base, "method": "vanilla", "speculator": "vanilla", "concurrency": c,
             "mean_tpot_ms_mean": t, "draft": None} for c, t in ((1, 30.0), (8, 40.0))]
    rows += [{**base, "target": "small", "method": "vanilla", "speculator": "vanilla",
              "concurrency": 1, "mean_tpot_ms_mean": 6.0, "draft": None}]
    for length in (1.5, 2.5, 3.5):
        values = scale * length * 30.0 / (4 * 6.0 + verify) * np.exp(rng.normal(0, noise, 3))
        mean, low, high = ratio_interval(values)
        rows.append({**base, "method": "draft_model", "draft": "small", "k": 4,
                     "concurrency": 1, "speculator": grid.sweep_name("draft", length),
                     "simulated_acceptance": length, "tpot_speedup_mean": mean,
                     "tpot_speedup_ci_low": low, "tpot_speedup_ci_high": high,
                     "speedup_mean": mean * 0.8, "repeats_ok": 3})
    return pd.DataFrame(rows)


def test_the_sweep_s_break_even_is_set_beside_the_step_time_model_s():
    """Known answer: TPOT speedups that follow the step-time model cross 1 where it predicts
    (1.99, from the target's step at concurrency 1 and at 1 × 5 sequences, interpolated
    between its measured levels, and the draft's); 30 % faster ones cross earlier, and the
    prediction is then outside the measured interval."""
    rng = np.random.default_rng(0)  # (the interval covers in 93.5 % of 200 seeds)
    row = predicted_break_even(_predictable_sweep(1.0, rng)).iloc[0]
    assert row["predicted"] == pytest.approx((4 * 6.0 + VERIFY_5) / 30.0)
    assert row["measured"] == pytest.approx(row["predicted"], rel=0.03) and row["agrees"]
    assert row["verify_from"] == "target at c=5 (interpolated)"
    # the draft pass a round would need for the measured break-even: its own TPOT here ...
    assert row["implied_draft_share"] == pytest.approx(1.0, abs=0.1)
    assert row["implied_draft_share_low"] < row["implied_draft_share"] < row[
        "implied_draft_share_high"]
    off = predicted_break_even(_predictable_sweep(1.3, rng)).iloc[0]
    assert off["measured"] == pytest.approx(off["predicted"] / 1.3, rel=0.03)
    assert not off["agrees"]
    # ... and less where the pair runs faster than the model: (τ* · t_T − t_V) ÷ (k · t_D)
    assert off["implied_draft_share"] == pytest.approx(
        (off["measured"] * 30.0 - off["verify_ms"]) / (4 * 6.0))
    assert off["implied_draft_share"] < 0.6
    table = break_even_prediction_table(_predictable_sweep(1.0, rng))
    assert table["step-time model"].iloc[0].startswith("1.99 = (4 × 6.0 + 35.7) ÷ 30.0 ms")
    assert table["reading"].iloc[0].startswith("agrees")
    implied = table["a draft pass in a round ÷ the draft's TPOT, as measured (the model: 1)"]
    assert implied.iloc[0].startswith(("0.9", "1.0", "1.1")) and "[" in implied.iloc[0]
    # a sweep too noisy to bound the break-even on either side tests nothing: never "agrees"
    wide = predicted_break_even(_predictable_sweep(1.0, np.random.default_rng(1), 0.8))
    assert (wide["ci_low_side"] == "≤").all() and (wide["ci_high_side"] == ">").all()
    assert not wide["tested"].any() and not wide["agrees"].any()
    shown = break_even_prediction_table(_predictable_sweep(1.0, np.random.default_rng(1), 0.8))
    assert shown["reading"].iloc[0].startswith("untested: the interval runs beyond")


def _vanilla_steps(rng, noise: float, repeats: int = 3) -> pd.DataFrame:
    """The vanilla cells `_predictable_sweep` reads its step times from, each level's mean TPOT
    measured `repeats` times with multiplicative noise (its mean and 95 % interval as the
    summary computes them)."""
    base = {"round": "round1", "workload": "w", "setting": "default", "engine": "serve",
            "load": "concurrency", "method": "vanilla", "speculator": "vanilla", "draft": None}
    rows = []
    for target, c, t in (("big", 1, 30.0), ("big", 8, 40.0), ("small", 1, 6.0)):
        mean, _, low, high = mean_interval(t * np.exp(rng.normal(0, noise, repeats)))
        rows.append({**base, "target": target, "concurrency": c, "mean_tpot_ms_mean": mean,
                     "mean_tpot_ms_ci_low": low, "mean_tpot_ms_ci_high": high,
                     "repeats_ok": repeats})
    return pd.DataFrame(rows)


def test_the_step_time_model_s_break_even_carries_its_step_times_spread():
    """The prediction's interval from the spread of the step times it rests on (three vanilla
    levels, 3 repeats each, 5 % noise) covers the true break-even ((4 · 6 + t_V) / 30) 92-98 %
    of 400 simulated studies; one repeat gives none. A sweep 30 % faster than the model is
    told from it when the step times are quiet, and not when they are as noisy as the
    difference ("agrees within the step times' spread")."""
    truth = (4 * 6.0 + VERIFY_5) / 30.0
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        sweep = _predictable_sweep(1.0, rng)
        points = pd.concat([sweep[sweep["method"] != "vanilla"], _vanilla_steps(rng, 0.05)])
        row = predicted_break_even(points).iloc[0]
        covered += row["predicted_low"] <= truth <= row["predicted_high"]
    assert 0.92 <= covered / 400 <= 0.98
    sweep = _predictable_sweep(1.3, rng)
    quiet = predicted_break_even(pd.concat([sweep[sweep["method"] != "vanilla"],
                                            _vanilla_steps(rng, 0.01)])).iloc[0]
    assert not quiet["agrees"] and not quiet["overlaps"]
    noisy = pd.concat([sweep[sweep["method"] != "vanilla"], _vanilla_steps(rng, 0.3)])
    assert predicted_break_even(noisy).iloc[0]["overlaps"]
    assert break_even_prediction_table(noisy)["reading"].iloc[0].startswith(
        "agrees within the step times' spread")
    once = predicted_break_even(pd.concat([sweep[sweep["method"] != "vanilla"],
                                           _vanilla_steps(rng, 0.05, repeats=1)])).iloc[0]
    assert np.isnan(once["predicted_low"]) and not once["overlaps"]


def test_the_sweep_is_drawn_and_tabled_for_the_report():
    rng = np.random.default_rng(4)
    points = pd.concat([_sweep(1 / 1.8, [1, 1.5, 2, 3], rng, level=1, real=2.9),
                        _sweep(1 / 2.6, [1, 1.5, 2, 3], rng, level=16, real=2.9)])
    table = break_even_table(points)
    assert list(table["concurrency"]) == [1, 16]
    assert table["reading"].iloc[0].startswith("it pays: accepts 2.90")
    assert table["reading"].iloc[1].startswith("it pays")  # 2.9 > 2.6 (+ its interval)
    fig = break_even_plot(points)
    assert len(fig.axes) == 1 and len(fig.axes[0].get_lines()) >= 2
    assert break_even_plot(points[points["speculator"] == "draft"]) is None


def test_an_acceptance_sweep_makes_simulated_cells_that_no_decision_picks(demo_sampled_raw):
    """Each swept length up to k + 1 is a cell of its own (synthetic acceptance in its
    speculative options, the method's baseline), on the method's workloads at the study's
    temperature only, never stopped before two repeats; the best-setting analysis leaves them
    out."""
    raw = copy.deepcopy(demo_sampled_raw)
    method = raw["round1"]["methods"][0]
    method["acceptance_sweep"] = [1.0, 2.0, 99.0]
    config = validate_config(raw)
    cells = [c for c in grid.round_cells(config, "round1") if c.engine == specs.SERVE]
    name = settings(config).rounds["round1"].methods[0].name
    plain = [c for c in cells if c.speculator == name]
    swept = [c for c in cells if grid.swept_method(c.speculator) == name]
    study = [c for c in plain if c.workload["loadgen"]["temperature"] == 0]
    assert len(study) < len(plain)  # the demo's n-gram samples at 1.0 too
    assert len(swept) == 2 * len(study)  # 99 exceeds every k + 1; none at 1.0
    assert {c.workload["name"] for c in swept} == {c.workload["name"] for c in study}
    assert {c.repeats for c in swept} == {c.repeats for c in plain}  # the method's by default
    raw["round1"]["methods"][0]["sweep_repeats"] = 2
    assert {c.repeats for c in grid.round_cells(validate_config(copy.deepcopy(raw)), "round1")
            if grid.swept_method(c.speculator) == name} == {2}
    # at its own levels (the round's other levels: the method's own cells only)
    before = {c.cell_id: c.concurrency
              for c in grid.round_cells(validate_config(copy.deepcopy(raw)), "round1")}
    raw["round1"]["methods"][0]["sweep_concurrency"] = [1]
    at = grid.round_cells(validate_config(copy.deepcopy(raw)), "round1")
    assert {c.concurrency for c in at if grid.swept_method(c.speculator)} == {(1,)}
    assert max(len(before[c.cell_id]) for c in at if grid.swept_method(c.speculator)) > 1
    assert all(c.concurrency == before[c.cell_id] for c in at
               if not grid.swept_method(c.speculator))
    raw["round1"]["methods"][0]["sweep_concurrency"] = [3]
    with pytest.raises(ConfigError, match=r"sweep_concurrency = \[3\] is not allowed: names "
                                          r"levels the round does not measure"):
        validate_config(copy.deepcopy(raw))
    raw["round1"]["methods"][0]["sweep_concurrency"] = [1]
    del raw["round1"]["methods"][0]["acceptance_sweep"]
    with pytest.raises(ConfigError, match=r"round1\.methods\[0\]\.sweep_repeats = 2"):
        validate_config(copy.deepcopy(raw))
    del raw["round1"]["methods"][0]["sweep_repeats"]
    with pytest.raises(ConfigError, match=r"round1\.methods\[0\]\.sweep_concurrency = "):
        validate_config(copy.deepcopy(raw))
    rule = adaptive.Rule(min_repeats=1)
    assert adaptive.for_cell(rule, swept[0]).min_repeats == adaptive.SWEEP_MIN_REPEATS == 2
    # the method's real cells beside a sweep anchor its line: two repeats at least too; its
    # sampled ones (no sweep at 1.0) and other methods' cells stop as the rule says
    assert all(c.sweep_anchor and adaptive.for_cell(rule, c).min_repeats == 2 for c in study)
    sampled = [c for c in plain if c not in study]
    assert sampled and not any(c.sweep_anchor for c in sampled)
    assert all(adaptive.for_cell(rule, c) == rule for c in sampled)
    others = [c for c in cells if not c.is_baseline and c.speculator != name
              and not grid.swept_method(c.speculator)]
    assert others and all(adaptive.for_cell(rule, c) == rule for c in others)
    assert {c.speculator for c in swept} == {f"{name} at acceptance 1", f"{name} at acceptance 2"}
    for cell in swept:
        options = cell.server_config["method_options"]
        assert options["rejection_sample_method"] == "synthetic"
        assert synthetic_setting(options) in (1.0, 2.0)
    assert {c.baseline_cell_id for c in swept} == {c.baseline_cell_id for c in study}
    frame = pd.DataFrame([
        {"speculator": s, "k": 2, "concurrency": c, "repeat": r, "speedup": v, "target": "t",
         "workload": "w", "method": "ngram", "paired": True, "spec_options": o}
        for s, v, o in (("ngram", 1.1, "{}"),
                        ("ngram at acceptance 3", 1.9, json.dumps(grid.synthetic_options(3))))
        for c in (1, 8) for r in range(3)])
    best = best_settings(frame)
    assert set(best["speculator"]) == {"ngram"}  # 1.9x at acceptance 3: simulated


@pytest.mark.parametrize("rates", [[1.0] * 5, [0.99, 0.97, 0.95, 0.93, 0.9],
                                   [0.8, 0.6, 0.45, 0.3, 0.2], [0.3, 0.1, 0.03, 0.01, 0.0],
                                   [0.02, 0.0, 0.0, 0.0, 0.0]])
@pytest.mark.parametrize("drafts", [8, 26, 200])
def test_the_interval_over_one_runs_drafts_covers_its_acceptance(rates, drafts):
    """A point measured once: the Wilson interval over its drafts covers the true accepted
    share in at least 93 % of simulated runs (drafts accepted position by position as vLLM's
    sampler does), and holds the measured share."""
    rng = np.random.default_rng(11)
    truth = float(np.mean(rates))
    runs, covered = 2000, 0
    for _ in range(runs):
        counts, _ = _accepted(rates, drafts, rng)
        low, high = draft_interval(counts.sum(), drafts, 5 * drafts)
        share = counts.sum() / (5 * drafts)
        assert low <= share <= high
        covered += low <= truth <= high
    assert covered / runs >= 0.93
    assert np.isnan(draft_interval(0, 0, 0)[0])
