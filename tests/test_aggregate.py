import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sdbench.analyze.aggregate import add_speedups, records_frame, summarize
from sdbench.analyze.prompts import prompt_intervals, with_prompt_intervals
from sdbench.files import write_jsonl
from sdbench.records import LoadPoint
from sdbench.report.point_tables import _prompt_text

from helpers import record


def test_speedup_is_against_the_same_baseline_and_concurrency():
    frame = add_speedups(records_frame([
        record("base", "vanilla", 1, 100.0, tpot=20.0),
        record("base", "vanilla", 4, 300.0),
        record("ng", "ngram", 1, 150.0, baseline="base", k=2, tpot=10.0, output=90.0),
        record("ng", "ngram", 4, 240.0, baseline="base", k=2),
    ])).set_index(["cell_id", "concurrency"])
    # the headline is the output-token throughput ratio; the total-token ratio is a column
    assert frame.loc[("ng", 1), "speedup"] == pytest.approx(90.0 / 50.0)
    assert frame.loc[("ng", 4), "speedup"] == pytest.approx(0.8)
    assert frame.loc[("ng", 1), "total_speedup"] == pytest.approx(1.5)
    assert frame.loc[("ng", 1), "tpot_speedup"] == pytest.approx(2.0)  # 20 ms -> 10 ms
    assert frame.loc[("base", 1), "speedup"] == 1.0
    assert frame.loc[("ng", 1), "spec_decode_per_position_acceptance_rates"] == "[0.5, 0.25]"


def test_unpaired_and_failed_points_get_no_speedup():
    frame = add_speedups(records_frame([
        record("base", "vanilla", 1, 100.0),
        record("base", "vanilla", 4, 0.0, status="failed"),
        record("ng", "ngram", 1, 150.0, baseline="base", k=2),
        record("ng", "ngram", 4, 240.0, baseline="base", k=2),       # baseline point failed
        record("ng", "ngram", 8, 240.0, baseline="base", k=2),       # baseline never measured
        record("orphan", "ngram", 1, 150.0, baseline="missing", k=2),
        record("dead", "ngram", 1, 0.0, baseline="base", k=4, status="failed"),
    ])).set_index(["cell_id", "concurrency"])
    assert frame.loc[("ng", 1), "paired"]
    for key in [("ng", 4), ("ng", 8), ("orphan", 1), ("dead", 1), ("base", 4)]:
        assert math.isnan(frame.loc[key, "speedup"]), key
        assert not frame.loc[key, "paired"]


def test_duplicate_points_are_an_error():
    with pytest.raises(ValueError, match="several records"):
        records_frame([record("a", "vanilla", 1, 1.0), record("a", "vanilla", 1, 2.0)])


def test_summarize_reads_cell_files(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [record("base", "vanilla", 1, 100.0)])
    write_jsonl(tmp_path / "b.jsonl", [record("ng", "ngram", 1, 120.0, baseline="base", k=2)])
    frame = summarize([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    assert set(frame["cell_id"]) == {"base", "ng"}
    assert frame.set_index("cell_id").loc["ng", "speedup"] == pytest.approx(1.2)
    assert isinstance(frame, pd.DataFrame)


def test_points_have_paired_speedups_with_t_intervals():
    from scipy import stats

    from sdbench.analyze.aggregate import aggregate_points

    rows = []
    base, spec = [100.0, 110.0, 90.0], [150.0, 143.0, 126.0]
    for r in range(3):
        rows.append(record("base", "vanilla", 1, base[r], repeat=r))
        rows.append(record("ng", "ngram", 1, spec[r], baseline="base", k=2, repeat=r))
    frame = add_speedups(records_frame(rows))
    ratios = [s / b for s, b in zip(spec, base, strict=True)]  # paired by repeat: 1.5, 1.3, 1.4
    assert sorted(frame.loc[frame["cell_id"] == "ng", "speedup"]) == pytest.approx(sorted(ratios))
    point = aggregate_points(frame).set_index("cell_id").loc["ng"]
    # its own repeats' interval, a ratio's: on the log scale, never below 0
    logs = np.log(ratios)
    log_half = stats.t.ppf(0.975, 2) * np.std(logs, ddof=1) / np.sqrt(3)
    assert point["speedup_unpooled_mean"] == pytest.approx(np.exp(logs.mean()))
    assert point["speedup_unpooled_ci_low"] == pytest.approx(np.exp(logs.mean() - log_half))
    assert point["speedup_unpooled_ci_high"] == pytest.approx(np.exp(logs.mean() + log_half))
    # the verdict's interval: one server instance, so the repeats are the units, on the log
    # scale around their geometric mean (one point: nothing to pool with)
    assert point["speedup_mean"] == pytest.approx(np.exp(logs.mean()))  # geometric
    assert point["speedup_ci_low"] == pytest.approx(np.exp(logs.mean() - log_half))
    assert point["speedup_ci_high"] == pytest.approx(np.exp(logs.mean() + log_half))
    assert point["speedup_df"] == 2 and point["speedup_mde"] > 1
    assert "one start of each server" in point["interval_covers"]
    assert "server starts' share is not covered" in point["interval_covers"]
    assert point["repeats"] == point["repeats_ok"] == point["repeats_paired"] == 3
    one = aggregate_points(add_speedups(records_frame(rows[:2]))).set_index("cell_id").loc["ng"]
    assert one["speedup_mean"] == pytest.approx(1.5) and math.isnan(one["speedup_ci_low"])


def test_acceptance_intervals_stay_within_what_acceptance_can_be():
    from sdbench.analyze.aggregate import aggregate_points

    # two repeats far apart (t factor 12.7): the raw interval runs below 1 and above k + 1
    rows = [record("ng", "ngram", 1, 150.0, k=3, repeat=r,
                   metrics={"spec_decode_acceptance_length": length,
                            "spec_decode_acceptance_rate": rate})
            for r, (length, rate) in enumerate([(1.2, 7.0), (3.9, 97.0)])]
    point = aggregate_points(add_speedups(records_frame(rows))).iloc[0]
    half = stats.t.ppf(0.975, 1) * np.std([1.2, 3.9], ddof=1) / np.sqrt(2)
    assert 2.55 - half < 1 and 2.55 + half > 4  # what the bounds below cut
    assert point["spec_decode_acceptance_length_mean"] == pytest.approx(2.55)
    assert point["spec_decode_acceptance_length_ci_low"] == 1.0
    assert point["spec_decode_acceptance_length_ci_high"] == 4.0  # k + 1
    assert point["spec_decode_acceptance_rate_ci_low"] == 0.0
    assert point["spec_decode_acceptance_rate_ci_high"] == 100.0


def test_failure_threshold_is_applied_when_summarizing():
    from sdbench.analyze.aggregate import apply_failure_threshold

    rows = [record("a", "vanilla", 1, 100.0), record("b", "vanilla", 2, 100.0)]
    rows[0]["metrics"].update(completed=97, failed=3, failure_share=0.03)
    rows[1]["metrics"].update(completed=100, failed=0, failure_share=0.0)
    frame = records_frame(rows)
    strict = apply_failure_threshold(frame, 0.01)
    assert list(strict["status"]) == ["invalid", "ok"]
    assert "3 of 100 requests failed" in strict.loc[0, "error"]
    lenient = apply_failure_threshold(strict, 0.05)
    assert list(lenient["status"]) == ["ok", "ok"] and lenient.loc[0, "error"] is None


def _prompt_frame(spec_latencies, base_latencies, outputs, repeats=2):
    """One speculative point and its baseline's, every repeat with the same prompts."""
    frame = pd.DataFrame([{"cell_id": "s", "baseline_cell_id": "b", "method": "ngram",
                           "concurrency": 4, "request_rate": np.nan, "repeat": r,
                           "paired": True} for r in range(repeats)])
    key = {r: LoadPoint.of(4, None, r).key for r in range(repeats)}
    detail = {side: {key[r]: {"input_lens": [10] * len(outputs), "output_lens": outputs,
                              "latencies": list(lat), "errors": [""] * len(outputs)}
                     for r in range(repeats)}
              for side, lat in (("s", spec_latencies), ("b", base_latencies))}
    return frame, detail


def test_the_prompt_sampling_interval_is_a_paired_bootstrap_over_prompts():
    rng = np.random.default_rng(3)
    outputs = [64] * 200
    base = rng.uniform(1.0, 3.0, 200)
    # the same speedup on every prompt: which prompts were drawn does not matter
    frame, detail = _prompt_frame(base / 1.5, base, outputs)
    row = prompt_intervals(frame, detail).iloc[0]
    assert row["prompts"] == 200 and row["prompt_sd"] == pytest.approx(0, abs=1e-12)
    # half the prompts gain 2x, half nothing: the spread the delta method gives a ratio
    ratio = np.where(np.arange(200) % 2 == 0, 2.0, 1.0)
    frame, detail = _prompt_frame(base / ratio, base, outputs)
    row = prompt_intervals(frame, detail).iloc[0]
    spec = base / ratio
    r = spec.sum() / base.sum()  # the log speedup is -log(r)
    delta = np.sqrt(np.var(spec - r * base, ddof=1) / 200) / (r * base.mean())
    assert row["prompt_sd"] == pytest.approx(delta, rel=0.15)
    assert row["prompt_low"] < 0 < row["prompt_high"]
    # other prompts on one side: no interval
    detail["b"][LoadPoint.of(4, None, 1).key]["input_lens"] = [11] * 200
    assert prompt_intervals(frame, detail).empty


def test_points_carry_the_prompt_and_the_combined_interval():
    rng = np.random.default_rng(4)
    base = rng.uniform(1.0, 3.0, 100)
    frame, detail = _prompt_frame(base / np.where(np.arange(100) % 2 == 0, 1.8, 1.2), base,
                                  [64] * 100)
    points = pd.DataFrame({"cell_id": ["s"], "concurrency": [4], "request_rate": [np.nan],
                           "speedup_mean": [1.45], "speedup_ci_low": [1.40],
                           "speedup_ci_high": [1.50], "speedup_df": [6.0],
                           # the standard error that 6 degrees of freedom make [1.40, 1.50]
                           "speedup_se": [np.log(1.5 / 1.4) / (2 * stats.t.ppf(0.975, 6))]})
    row = with_prompt_intervals(points, frame, detail).iloc[0]
    assert row["speedup_prompts_ci_low"] < 1.45 < row["speedup_prompts_ci_high"]
    # both sources together: wider than either alone
    assert row["speedup_both_ci_low"] < min(1.40, row["speedup_prompts_ci_low"])
    assert row["speedup_both_ci_high"] > max(1.50, row["speedup_prompts_ci_high"])
    text = _prompt_text(row)
    assert " of 100 prompts · both [" in text and text.startswith(
        f"[{row['speedup_prompts_ci_low']:.2f}, ")


def test_a_point_measured_once_has_an_acceptance_interval_over_its_drafts():
    from sdbench.analyze.acceptance import FROM_DRAFTS, FROM_REPEATS
    from sdbench.analyze.aggregate import aggregate_points

    def one(accepted, drafts, repeats=1):
        rows = [record("cal", "draft_model", 1, 150.0, k=5, repeat=r,
                       metrics={"spec_decode_acceptance_length": 1 + accepted / drafts,
                                "spec_decode_acceptance_rate": 100 * accepted / (5 * drafts),
                                "spec_decode_num_drafts": drafts,
                                "spec_decode_draft_tokens": 5 * drafts,
                                "spec_decode_accepted_tokens": accepted})
                for r in range(repeats)]
        return aggregate_points(add_speedups(records_frame(rows))).iloc[0]

    every = one(130, 26)  # an exact draft: every token of its 26 drafts accepted
    assert every["spec_decode_acceptance_length_mean"] == pytest.approx(6.0)
    assert every["acceptance_interval_from"] == FROM_DRAFTS
    # Wilson at p̂ = 1 over 26 drafts: n / (n + z²) of the 5 tokens a draft can add
    z2 = stats.norm.ppf(0.975) ** 2
    assert every["spec_decode_acceptance_length_ci_low"] == pytest.approx(1 + 5 * 26 / (26 + z2))
    assert every["spec_decode_acceptance_length_ci_high"] == pytest.approx(6.0)
    assert every["spec_decode_acceptance_rate_ci_low"] == pytest.approx(100 * 26 / (26 + z2))
    half = one(65, 26)
    assert (half["spec_decode_acceptance_length_ci_low"] < 3.5
            < half["spec_decode_acceptance_length_ci_high"] < 6.0)
    # with two repeats the interval is over them, and says so
    assert one(65, 26, repeats=2)["acceptance_interval_from"] == FROM_REPEATS
