"""Speculation under sampling: points lined up by temperature, the exact draft's known answer
(a probabilistic draft keeps its greedy acceptance, a greedy one falls), and the round 1
report's tables of both."""

import copy

import numpy as np
import pandas as pd
import pytest

from sdbench.analyze import temperature
from sdbench.report import round_plots


def spec_point(speculator, temp, length, level=1, k=5, sampling=None, low=None, high=None,
               speedup=1.2, drift=0.0, method="draft_model", draft="small"):
    workload = "w" if temp == 0 else f"w-t{temp:g}"
    accepted = (length - 1) / k
    return {"round": "round1", "setting": "default", "engine": "serve", "load": "concurrency",
            "role": "pipeline check", "cell_id": f"{speculator}-{temp}",
            "target": "deep", "speculator": speculator, "method": method, "k": k,
            "draft": draft, "workload": workload, "temperature": temp,
            "draft_sample_method": sampling, "concurrency": level,
            "spec_decode_acceptance_length_mean": length,
            "spec_decode_acceptance_length_ci_low": length - 0.1 if low is None else low,
            "spec_decode_acceptance_length_ci_high": length + 0.1 if high is None else high,
            "acceptance_pooled": accepted, "drafts": 100, "repeats_ok": 2,
            "speedup_mean": speedup, "speedup_ci_low": speedup - 0.1,
            "speedup_ci_high": speedup + 0.1, "verdict": "gain",
            "output_drift_mean": drift, "drift_flag": abs(drift) > 0.02}


def vanilla_point(temp, level=1):
    return {**spec_point("vanilla", temp, np.nan, level), "method": "vanilla", "k": None,
            "draft": None, "speedup_mean": np.nan}


def frame(*rows):
    return pd.DataFrame(list(rows))


def test_a_variant_names_its_swept_workload():
    assert temperature.base_workload("spec_bench-t1", 1.0) == "spec_bench"
    assert temperature.base_workload("spec_bench-t0.7", 0.7) == "spec_bench"
    assert temperature.base_workload("spec_bench", 0.0) == "spec_bench"
    # a workload that happens to end like a variant of another temperature keeps its name
    assert temperature.base_workload("w-t1", 0.7) == "w-t1"


def test_points_line_up_only_where_a_workload_was_sampled_at_several_temperatures():
    rows = temperature.by_temperature(frame(
        vanilla_point(0), vanilla_point(1.0), spec_point("cal", 0, 5.6),
        spec_point("cal", 1.0, 1.4),
        {**spec_point("other", 0, 2.0), "workload": "greedy-only", "cell_id": "o"}))
    assert list(rows["speculator"]) == ["cal", "cal"]
    assert list(rows["temperature"]) == [0.0, 1.0]
    assert set(rows["base_workload"]) == {"w"}
    assert list(rows["draft_sampling"]) == ["greedy", "greedy"]  # vLLM's default
    assert temperature.by_temperature(frame(vanilla_point(0), spec_point("cal", 0, 5.6))).empty


@pytest.mark.parametrize("sampled, holds", [(5.55, True), (1.3, False)])
def test_a_probabilistic_exact_draft_must_keep_its_greedy_acceptance(sampled, holds):
    points = frame(vanilla_point(0), vanilla_point(1.0), spec_point("cal", 0, 5.6),
                   spec_point("cal", 1.0, 1.4),
                   spec_point("cal-p", 1.0, sampled, sampling="probabilistic",
                              low=sampled - 0.02, high=sampled + 0.02))
    check = temperature.exact_draft_check(points).set_index("draft_sampling")
    assert check.loc["probabilistic", "holds"] is holds
    assert check.loc["probabilistic", "reading"].startswith("holds" if holds else "fails")
    # the greedy draft is shown lower, not checked
    assert check.loc["greedy", "holds"] is None
    assert check.loc["greedy", "reading"] == "lower, as expected"
    assert check.loc["greedy", "greedy_level"] == pytest.approx(5.6)


def test_a_draft_that_is_not_exact_at_temperature_0_has_no_known_answer():
    points = frame(vanilla_point(0), vanilla_point(1.0), spec_point("real", 0, 3.1),
                   spec_point("real-p", 1.0, 2.2, sampling="probabilistic"))
    assert temperature.exact_draft_check(points).empty


def test_the_report_sets_temperatures_side_by_side_and_flags_drifted_lengths():
    points = frame(vanilla_point(0), vanilla_point(1.0),
                   spec_point("ngram", 0, 2.75, method="ngram", draft=None, speedup=1.07),
                   spec_point("ngram", 1.0, 1.2, method="ngram", draft=None, speedup=1.3,
                              drift=0.4),
                   {**spec_point("plumbing", 0, 1.0), "workload": "w", "cell_id": "p"})
    table = round_plots.temperature_table(points)
    assert list(table.columns) == ["method", "workload", "concurrency",
                                   "acceptance length at T=0", "acceptance length at T=1",
                                   "speedup at T=0", "speedup at T=1"]
    assert len(table) == 1  # the greedy-only setting has nothing to compare
    row = table.iloc[0]
    assert row["acceptance length at T=0"].startswith("2.75 [2.65, 2.85] (35 %, 100 drafts")
    assert "⚠ outputs +40% long" in row["speedup at T=1"]
    assert "⚠" not in row["speedup at T=0"]
    assert round_plots.temperature_plot(points) is not None
    # the figure's finding: each line's ends, from the lowest temperature to the highest
    assert round_plots.temperature_finding(points) == (
        "ngram k=5 at c=1 on w, temperature 0 → 1: speedup 1.07× → 1.30×, acceptance length "
        "2.8 → 1.2.")


def test_a_probabilistic_draft_not_measured_at_0_shows_the_greedy_draft_s_acceptance():
    """At temperature 0 vLLM drafts the argmax whatever the draft sampling, so the pair's
    probabilistic twin, measured at 1.0 only, shows the greedy draft's acceptance at 0, said
    so; a probabilistic draft of another pair shows none."""
    points = frame(vanilla_point(0), vanilla_point(1.0), spec_point("cal", 0, 6.0),
                   spec_point("cal", 1.0, 1.9),
                   spec_point("cal-p", 1.0, 5.6, sampling="probabilistic"),
                   spec_point("other-p", 1.0, 2.0, sampling="probabilistic", draft="other"))
    table = round_plots.temperature_table(points).set_index("method")
    twin = table.loc[next(m for m in table.index if m.startswith("cal-p"))]
    assert twin["acceptance length at T=0"].startswith("6.00 [5.90, 6.10]")
    assert twin["acceptance length at T=0"].endswith(
        ": the greedy draft's (at 0 both draft argmax)")
    assert twin["speedup at T=0"] == "–"  # not measured
    other = table.loc[next(m for m in table.index if m.startswith("other-p"))]
    assert other["acceptance length at T=0"] == "–"


def test_the_known_answer_table_names_the_pair_and_the_check():
    points = frame(vanilla_point(0), vanilla_point(1.0), spec_point("cal", 0, 5.6),
                   spec_point("cal-p", 1.0, 1.2, sampling="probabilistic"))
    table = round_plots.exact_draft_table(points)
    assert table.iloc[0]["target ← draft"] == "deep ← small"
    assert table.iloc[0]["check"].startswith("fails: 1.20 against 5.60")


def test_a_method_measured_at_some_temperatures_only(demo_sampled_raw):
    """`methods[].temperatures`: the untrained head only at 0, a method limited to 1.0 only
    there, the others at every temperature of the round's workloads; a temperature none of
    them has is refused."""
    from sdbench.plan import grid, specs
    from sdbench.plan.config import ConfigError, validate_config

    config = validate_config(copy.deepcopy(demo_sampled_raw))
    cells = [c for c in grid.round_cells(config, "round1") if c.engine == specs.SERVE]
    temps = {}
    for cell in cells:
        temps.setdefault(cell.speculator, set()).add(cell.workload["loadgen"]["temperature"])
    assert temps["eagle-untrained-plumbing"] == {0}
    assert temps["calibration"] == temps["ngram"] == temps["vanilla"] == {0, 1.0}
    sampled_only = copy.deepcopy(demo_sampled_raw)
    sampled_only["round1"]["methods"][0]["temperatures"] = [1.0]
    config = validate_config(sampled_only)
    assert {c.workload["loadgen"]["temperature"] for c in grid.round_cells(config, "round1")
            if c.speculator == "ngram" and c.engine == specs.SERVE} == {1.0}
    wrong = copy.deepcopy(demo_sampled_raw)
    wrong["round1"]["methods"][0]["temperatures"] = [0.5]
    with pytest.raises(ConfigError, match=r"round1.methods\[0\].temperatures\[0\] = 0.5"):
        validate_config(wrong)


def test_a_sampled_request_carries_its_repeat_seed_where_asked(demo_sampled_raw):
    """`loadgen.request_seed`: every request of a sampled point carries the repeat's seed in
    its body (vLLM's SamplingParams seed, as its load generator parses it); none at
    temperature 0 or without the setting, and greedy cells keep their ids."""
    from test_speedups_right import parse_loadgen

    from sdbench.measure import loadgen
    from sdbench.plan import grid, specs
    from sdbench.plan.config import validate_config

    common = dict(host="h", port=1, served_name="m", tokenizer="t", dataset_path="p",
                  num_prompts=4, concurrency=1)
    settings = {"endpoint": "chat", "temperature": 1.0, "seed": 3, "num_warmups": 0,
                "ready_check_timeout_s": 0, "percentiles": [50], "request_seed": True}
    args = parse_loadgen(loadgen.loadgen_argv(**common, settings=settings, min_tokens=8))
    assert args.extra_body == {"min_tokens": 8, "seed": 3}
    assert loadgen.request_seed(settings) == 3
    for off in ({"request_seed": False}, {"temperature": 0}):
        assert parse_loadgen(loadgen.loadgen_argv(
            **common, settings={**settings, **off})).extra_body is None
        assert loadgen.request_seed({**settings, **off}) is None

    def ids(raw):
        return {c.workload["name"]: c.cell_id for c in grid.all_cells(validate_config(raw))
                if c.speculator == "ngram" and c.engine == specs.SERVE}

    unseeded = copy.deepcopy(demo_sampled_raw)
    unseeded["loadgen"].pop("request_seed", None)
    before = ids(unseeded)
    seeded = copy.deepcopy(unseeded)
    seeded["loadgen"]["request_seed"] = True
    after = ids(seeded)
    assert after["spec_bench"] == before["spec_bench"]
    assert after["spec_bench-t1"] != before["spec_bench-t1"]


def test_a_workload_measured_at_some_of_the_rounds_levels(demo_sampled_raw):
    """`workloads.<name>.concurrency`: the demo's sampled variant at concurrency 1 only, its
    baseline too; the greedy workload at every level; a list sharing no level is refused."""
    from sdbench.plan import grid, specs
    from sdbench.plan.config import ConfigError, validate_config

    config = validate_config(copy.deepcopy(demo_sampled_raw))
    levels = {(c.speculator, c.workload["name"]): c.concurrency
              for c in grid.round_cells(config, "round1") if c.engine == specs.SERVE}
    assert levels[("vanilla", "spec_bench-t1")] == levels[("calibration", "spec_bench-t1")] \
        == (1,)
    assert levels[("calibration", "spec_bench")] == (1, 24)
    wrong = copy.deepcopy(demo_sampled_raw)
    wrong["workloads"]["spec_bench-t1"]["concurrency"] = [7]
    with pytest.raises(ConfigError, match=r"workloads.spec_bench-t1.concurrency = \[7\]"):
        validate_config(wrong)


def test_sampled_points_measure_two_repeats_before_the_rule_may_stop_them(demo_sampled_raw):
    """Greedy outputs repeat exactly, so one repeat pins a greedy point's acceptance; a sampled
    point's varies, so the rule keeps it to two repeats at least (an interval on it)."""
    from sdbench.plan import adaptive, grid
    from sdbench.plan.config import validate_config

    config = validate_config(copy.deepcopy(demo_sampled_raw))
    cells = {c.workload["name"]: c for c in grid.round_cells(config, "round1")
             if c.speculator == "calibration"}
    assert adaptive.cell_rule(config, cells["spec_bench"]).min_repeats == 1
    assert adaptive.cell_rule(config, cells["spec_bench-t1"]).min_repeats == 2
    look = adaptive.decide([0.9], 5, adaptive.cell_rule(config, cells["spec_bench-t1"]),
                           0.08, 20.0)
    assert look.reason == adaptive.CONTINUE  # settled after one, yet measured again
    assert adaptive.decide([0.9], 5, adaptive.cell_rule(config, cells["spec_bench"]), 0.08,
                           20.0).reason == adaptive.SETTLED
