"""What the reports decide with (sdbench.analyze.decision): claims held to their intervals, the
setting to run chosen on held-out repeats, and the throughput-latency front."""

import pandas as pd
import pytest

from sdbench.analyze.decision import Claim, pareto_front, recommendations
from sdbench.plan.grid import CHECK, DEPLOYABLE

from helpers import recommended


def test_a_claim_that_contradicts_its_interval_is_refused():
    with pytest.raises(ValueError, match="contradicts its interval"):
        Claim("ngram k=3 at c=1", "gain", 1.2, 0.9, 1.5, "3 repeats").text()
    with pytest.raises(ValueError, match="contradicts"):
        Claim("x", "no clear gain", 1.3, 1.1, 1.5, "3 repeats").text()
    with pytest.raises(ValueError, match="contradicts"):
        Claim("x", "loss", 0.9, 0.8, 1.01, "3 repeats").text()
    text = Claim("ngram k=3 at c=1", "gain", 1.3, 1.1, 1.5, "3 repeats × 6 prompts").text()
    assert "1.30×" in text and "[1.10, 1.50]" in text and "3 repeats × 6 prompts" in text
    # the smallest gain the interval's design would see: half its log width × 2.8 / 1.96
    unclear = Claim("x", "no clear gain", 1.05, 0.9, 1.2, "2 repeats").text()
    assert "could not see gains below 1.23×" in unclear


def test_the_front_on_a_constructed_table():
    table = pd.DataFrame({"tps": [100, 200, 150, 300, 250, 90],
                          "tpot": [10, 20, 30, 40, 45, 10]})
    # 150 @ 30 is beaten by 200 @ 20; 250 @ 45 by 300 @ 40; 90 @ 10 by 100 @ 10
    assert pareto_front(table, "tps", "tpot").tolist() == [True, True, False, True, False,
                                                           False]


def _rows(speculator, k, level, speedups, role=DEPLOYABLE):
    return [{"target": "t", "workload": "w", "speculator": speculator, "method": "ngram", "k": k,
             "concurrency": level, "repeat": r, "speedup": s, "paired": True, "role": role,
             "load": "concurrency", "num_prompts": 6} for r, s in enumerate(speedups)]


def test_recommendation_held_out_and_no_clear_winner():
    frame = pd.DataFrame(
        _rows("ngram", 3, 1, [1.30, 1.32, 1.28, 1.31]) + _rows("ngram", 5, 1, [1.10, 1.12,
                                                                                1.08, 1.1])
        + _rows("ngram", 3, 8, [1.02, 0.97, 1.05, 0.99])
        + _rows("ngram", 5, 8, [0.80, 0.82, 0.79, 0.81])
        # a pipeline check that beats everything is no candidate
        + _rows("calibration", 4, 1, [2.0] * 4, role=CHECK))
    table = recommendations(frame).set_index("concurrency")
    assert table.loc[1, "run"] == "ngram k=3" and table.loc[1, "verdict"] == "speculate"
    assert table.loc[1, "gain_ci_low"] > 1 and table.loc[1, "repeats"] == 4
    assert table.loc[8, "verdict"] == "no clear winner"
    assert "speculation off" in table.loc[8, "rivals"]
    assert table.loc[8, "gain_ci_low"] > 0
    # off in every fold: off held out against off is 1 by construction, no gain is reported
    slow = pd.DataFrame(_rows("ngram", 3, 16, [0.80, 0.82, 0.79, 0.81]))
    off = recommendations(slow).iloc[0]
    assert off["run"] == "speculation off" and off["verdict"] == "speculation off"
    assert pd.isna(off["gain_mean"]) and pd.isna(off["gain_ci_low"])
    assert off["gain_from"] == "speculation off in every fold: no gain to hold out"


def _point(method, speculator, k, workload, level, role, tps, tpot, speedup=None):
    return {"target": "t", "workload": workload, "method": method, "speculator": speculator,
            "k": k, "concurrency": level, "role": role, "engine": "serve",
            "load": "concurrency", "round": "round1", "setting": "default",
            "output_throughput_mean": tps, "p90_tpot_ms_mean": tpot, "gpus": 1,
            "speedup_mean": speedup, "speedup_ci_low": speedup and speedup * 0.9,
            "speedup_ci_high": speedup and speedup * 1.1, "repeats_ok": 3}


def test_a_calibration_run_shows_its_checks_in_the_front_labelled_never_mixed_with_deployable():
    from sdbench.analyze.decision import front_points
    from sdbench.report.decision import checks_note
    from sdbench.report.front import front_table

    checks = pd.DataFrame([
        _point("vanilla", None, None, "w", 1, CHECK, 100, 6.0),
        _point("vanilla", None, None, "w", 16, CHECK, 1000, 7.0),
        _point("draft_model", "calibration", 4, "w", 1, CHECK, 240, 2.5, 2.4),
        _point("draft_model", "calibration", 4, "w", 16, CHECK, 1900, 3.5, 1.9)])
    # only pipeline checks: the front shows them (a calibration run still has a figure) ...
    assert len(front_points(checks)) == 4
    table = front_table(checks)
    assert set(table["setting"]) == {"calibration k=4 (pipeline check)"}
    assert isinstance(table.index, pd.RangeIndex)
    assert "not a setting to deploy" in checks_note(checks)
    # ... but beside a deployable setting they are left out, and no note is needed
    mixed = pd.concat([checks, pd.DataFrame([
        _point("vanilla", None, None, "w", 1, DEPLOYABLE, 100, 6.0),
        _point("ngram", "ngram", 3, "w", 1, DEPLOYABLE, 120, 5.0, 1.2)])], ignore_index=True)
    assert set(front_points(mixed)["role"]) == {DEPLOYABLE}
    assert checks_note(mixed) == ""


def test_the_bottom_line_gives_each_workload_its_own_line_of_levels():
    from sdbench.report.decision import bottom_line_html

    points = pd.DataFrame([_point("draft_model", "calibration", 4, w, c, CHECK, 1, 1, s)
                           for w, gains in (("a", (2.4, 1.3)), ("b", (2.5, 1.2)))
                           for c, s in zip((1, 64), gains, strict=True)])
    frame = points.assign(paired=True, repeat=0, speedup=points["speedup_mean"],
                          quantization=None, num_prompts=8)
    html = bottom_line_html(frame, points, "round1", recommended(frame, points))
    lines = [line for line in html.split("<li>") if "calibration k=4" in line]
    assert len(lines) == 2 and " on a — " in lines[0] and " on b — " in lines[1]
    for line in lines:  # each level once in its line
        assert line.count("concurrency 1:") == 1 and line.count("concurrency 64:") == 1


def _one_repeat(settings: dict, intervals: dict, adaptive: bool = True):
    """A round-1 summary of one repeat per setting ({(speculator, k): speedup}) at concurrency
    24, and its point table with the given intervals ({(speculator, k): (low, high)})."""
    rows = [r for (speculator, k), s in settings.items()
            for r in _rows(speculator, k, 24, [s])]
    frame = pd.DataFrame(rows).assign(round="round1", engine="serve", setting="default",
                                      quantization=None, num_prompts=24)
    points = pd.DataFrame([
        {**_point("ngram", speculator, k, "w", 24, DEPLOYABLE, 1, 1, s),
         "speedup_ci_low": intervals[(speculator, k)][0],
         "speedup_ci_high": intervals[(speculator, k)][1],
         "sequential_factor": 1.4 if adaptive else 1.0, "repeats_ok": 1}
        for (speculator, k), s in settings.items()])
    return frame, points


def test_one_repeat_judged_on_the_point_interval_the_point_table_shows():
    from html import unescape

    from sdbench.report import decision

    def bottom_line_html(frame, points, round_name):
        return unescape(decision.bottom_line_html(frame, points, round_name,
                                                  recommended(frame, points, round_name)))

    # a loss the adaptive rule settled after one repeat: the bottom line says so, with the
    # point's (sequential) interval, not "no clear gain, no interval"
    frame, points = _one_repeat({("ngram", 3): 0.617}, {("ngram", 3): (0.488, 0.779)})
    html = bottom_line_html(frame, points, "round1")
    assert "speculation costs throughput, 0.62× (95 % interval [0.49, 0.78]" in html
    assert "the adaptive rule's where it stopped" in html and "no interval" not in html
    # beside the verdict, the server starts' share of that point and where it was measured
    assert "server starts not covered" in html  # (the point table has no such share)
    points = points.assign(speedup_instance_sd=0.137,
                           speedup_instance_from="measured with ngram on the same target")
    assert ("server starts ±13.7 % (measured with ngram on the same target)"
            in bottom_line_html(frame, points, "round1"))
    # a gain: the one setting beside speculation off is read against 1 on its own interval
    frame, points = _one_repeat({("ngram", 3): 1.25}, {("ngram", 3): (1.08, 1.45)},
                                adaptive=False)
    table = recommendations(frame, points).iloc[0]
    assert table["verdict"] == "speculate" and table["gain_ci_low"] == 1.08
    assert "pooled noise model" in table["gain_from"]
    assert "speculation pays, 1.25× (95 % interval [1.08, 1.45]; 1 repeat × 24 prompts; " \
        "the point's interval" in bottom_line_html(frame, points, "round1")
    # spanning 1: no clear winner, with the interval and what it could have seen
    frame, points = _one_repeat({("ngram", 3): 1.05}, {("ngram", 3): (0.9, 1.2)})
    assert recommendations(frame, points).iloc[0]["verdict"] == "no clear winner"
    assert "could not see gains below" in bottom_line_html(frame, points, "round1")
    # several settings: the choice among them was made on the only repeat, so no interval
    frame, points = _one_repeat({("ngram", 3): 1.25, ("ngram", 5): 1.2},
                                {("ngram", 3): (1.08, 1.45), ("ngram", 5): (1.05, 1.4)})
    table = recommendations(frame, points).iloc[0]
    assert table["run"] == "ngram k=3" and table["verdict"] == "no clear winner"
    assert pd.isna(table["gain_ci_low"]) and table["gain_from"] is None
    shown = decision.recommendation_table(recommended(frame, points), points, "round1").iloc[0]
    assert shown["gain judged on"] == "one repeat: none to hold out"
    assert "no clear winner; ngram k=3 measured best, 1.25× on the repeat it was chosen on, no " \
        "interval (1 repeat × 24 prompts: none to hold out" in bottom_line_html(
        frame, points, "round1")
    # without the point table (or a point without an interval): as before
    assert recommendations(frame.iloc[:1]).iloc[0]["gain_from"] is None
    # two repeats: a setting is as good as speculation off only where its point's interval
    # spans 1 (its t interval over two repeats, t 12.7, would span [0.35, 1.60])
    frame = pd.DataFrame(_rows("ngram", 3, 24, [0.70, 0.79])).assign(num_prompts=24)
    points = _one_repeat({("ngram", 3): 0.74}, {("ngram", 3): (0.64, 0.86)})[1]
    assert recommendations(frame).iloc[0]["rivals"] == "ngram k=3"
    table = recommendations(frame, points).iloc[0]
    assert table["run"] == "speculation off" and table["rivals"] is None
    # off chosen in every fold: 1 exactly, so no gain is reported
    assert table["gain_from"] == "speculation off in every fold: no gain to hold out"
    assert pd.isna(table["gain_mean"])


def test_what_round_2_could_not_answer_is_said():
    from sdbench.report.decision import unanswered

    frame = pd.DataFrame({"workload": ["news_0.25k"] * 2, "target": ["t", "t"],
                          "quantization": [None, None], "method": ["vanilla", "ngram"],
                          "role": [DEPLOYABLE] * 2, "concurrency": [1, 4]})
    notes = " ".join(unanswered(frame, pd.DataFrame(), "round2"))
    assert "one length bucket (news_0.25k): no comparison across context lengths" in notes
    assert "one target (t)" in notes and "No quantized" in notes
    wider = pd.concat([frame, frame.assign(workload="news_1k", target="t-awq",
                                           quantization="awq")])
    assert unanswered(wider, pd.DataFrame(), "round2") == [
        "No latency target (`slo:` in the config): no goodput or SLO verdict."]



def test_round_3_settings_are_lines_of_their_own_in_the_front():
    from sdbench.report.decision import role_label

    rows = pd.DataFrame([_point("draft_model", "draft", 2, "w", 4, CHECK, 40, 70),
                         _point("draft_model", "draft", 2, "w", 4, CHECK, 42, 72)])
    rows["setting"] = ["default", "draft-len-512"]
    assert list(role_label(rows)) == ["draft k=2 [default] (pipeline check)",
                                      "draft k=2 [draft-len-512] (pipeline check)"]
    assert list(role_label(rows.iloc[:1])) == ["draft k=2 (pipeline check)"]


def test_the_recommendation_says_what_speculation_does_to_latency_and_the_slo():
    """The issue's demo: n-gram's TPOT worse than without speculation while the throughput
    verdict spoke alone, and "misses" in every SLO cell, speculation off included, unsaid."""
    import json

    from sdbench.analyze.decisions import RECOMMENDATION, combine, of_kind
    from sdbench.report import decision
    from sdbench.report.show import cell_text

    slos = json.dumps({"chat": {"limits": {"tpot_ms": 30.0}, "percentile": 90.0}})
    points = pd.DataFrame([
        {"target": "t", "workload": "w", "concurrency": 1, "method": method,
         "speculator": speculator, "k": k, "engine": "serve", "load": "concurrency",
         "median_tpot_ms_mean": tpot, "p90_tpot_ms_mean": tpot * 1.2,
         "mean_ttft_ms_mean": 40.0, "p90_ttft_ms_mean": 46.0, "slo_meets_chat": False,
         "slos": slos}
        for method, speculator, k, tpot in (("vanilla", "vanilla", None, 88.0),
                                            ("ngram", "ngram", 3, 109.0))])
    decided = combine([pd.DataFrame([{
        "target": "t", "workload": "w", "concurrency": 1, "run": "ngram k=3",
        "speculator": "ngram", "k": 3, "mean": 1.35, "gain_mean": 1.35, "gain_ci_low": 1.07,
        "gain_ci_high": 1.7, "gain_from": "held out", "verdict": "speculate", "rivals": None,
        "candidates": 2, "repeats": 3, "heldout_repeats": 3, "prompts": 8,
        "decision": RECOMMENDATION, "round": "round1"}])])
    row = decision.recommendation_table(decided, points, "round1").iloc[0]
    assert (row["latency of"], row["TPOT p50 (ms)"], row["TPOT p90 (ms)"]) == (
        "ngram k=3", "88.0 → 109", "106 → 131")
    assert row["SLO chat"] == "misses → misses" and row["throughput gain (held-out)"] == \
        "1.35× [1.07, 1.70]"
    # speculation off chosen: its gain over itself is no finding
    off = combine([of_kind(decided, RECOMMENDATION).assign(
        run="speculation off", verdict="speculation off", speculator=None, k=None,
        gain_mean=float("nan"), gain_ci_low=float("nan"), gain_ci_high=float("nan"),
        gain_from="speculation off in every fold: no gain to hold out",
        best_speculator="ngram", best_k=3,
        decision=RECOMMENDATION, round="round1")])
    shown = decision.recommendation_table(off, points, "round1").iloc[0]
    assert shown["throughput gain (held-out)"] == "–" and shown["latency of"] == "ngram k=3"
    # the verdict is marked with its decision and the point it claims (one verdict per point)
    assert cell_text(row["verdict"]) == "speculate"
    assert 'data-point="t | w | c=1 | ngram k=3" data-verdict="gain"' in str(row["verdict"])
    assert decision.slo_summary(decided, points, "round1") == [
        "No setting meets the latency target chat (TPOT ≤ 30 ms for 90 % of requests) at "
        "any load measured, speculation off included."]
    assert decision.slo_summary(decided, points.assign(slo_meets_chat=True), "round1") == []


def test_a_recommendation_never_contradicts_a_point_s_own_verdict():
    """The issue's demo: "speculation pays" in the bottom line (a held-out interval above 1)
    where the point table read "no clear gain"; and a crossover table with "no level clearly
    below 1" where a point's own interval lay below 1."""
    from sdbench.analyze.analysis import OFF
    from sdbench.analyze.decision import NO_WINNER, _verdict
    from sdbench.analyze.decisions import with_point_verdicts

    nan = float("nan")
    assert _verdict("ngram k=3", (1.07, 1.7), (1.05, 1.3), [1.05]) == "speculate"
    assert _verdict("ngram k=3", (1.07, 1.7), (0.95, 1.3), [0.95]) == NO_WINNER
    assert _verdict("ngram k=3", (0.5, 0.9), (0.6, 0.95), [0.6]) == "speculation off"
    assert _verdict("ngram k=3", (0.5, 0.9), (0.6, 1.05), [0.6]) == NO_WINNER
    assert _verdict(OFF, (nan, nan), (nan, nan), [0.8, 0.9]) == "speculation off"
    assert _verdict(OFF, (nan, nan), (nan, nan), [0.8, 1.02]) == NO_WINNER
    crossover = pd.DataFrame([{"target": "t", "workload": "w", "speculator": "ngram", "k": 3,
                               "crossover": 24.0, "crossover_low": 1.0,
                               "crossover_high": None, "established": False,
                               "reading": "no clear crossover"}])
    points = pd.DataFrame({"target": "t", "workload": "w", "speculator": "ngram", "k": 3,
                           "concurrency": [1, 24], "engine": "serve", "load": "concurrency",
                           "verdict": ["no clear gain", "no speculation"]})
    row = with_point_verdicts(crossover, points).iloc[0]
    assert (row["crossover_high"], row["established"]) == (24.0, True)
    assert row["reading"].startswith("below 1 from concurrency 24")
    agreeing = points.assign(verdict="no clear gain")
    assert with_point_verdicts(crossover, agreeing).equals(crossover)
