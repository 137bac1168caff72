"""Round 2 and 3 tables: bucket order, quantized-vs-full pairing, the winning setting, and the
per-bucket split of a mixed-length workload from the per-request detail."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from sdbench.analyze.lossless import read_all_details
from sdbench.analyze.stats import mean_interval, ratio_interval
from sdbench.analyze.summary import bucket_speedups, read_cards
from sdbench.report import round_plots


def test_buckets_sort_by_size():
    assert round_plots.bucket_order(["1k", "0.25k", "8k", "0.5k", "all"]) == [
        "0.25k", "0.5k", "1k", "8k", "all"]
    assert round_plots.bucket_order(["out2k", "out0.25k"]) == ["out0.25k", "out2k"]


def point(target, method, concurrency, speedup, throughput, quant=None, full=None,
          setting="default", workload="w", output=None):
    return {"round": "round2", "setting": setting, "cell_id": f"{target}-{method}-{setting}",
            "target": target, "quantization": quant, "full_precision": full,
            "speculator": method, "method": method, "k": None if method == "vanilla" else 3,
            "workload": workload, "dataset": "d", "subset": "0.25k",
            "concurrency": concurrency, "total_token_throughput_mean": throughput,
            "output_throughput_mean": output,
            "speedup_mean": None if method == "vanilla" else speedup,
            "speedup_ci_low": None if method == "vanilla" else speedup - 0.1,
            "speedup_ci_high": None if method == "vanilla" else speedup + 0.1,
            "spec_decode_acceptance_rate_mean": None if method == "vanilla" else 50.0}


def test_quantized_target_is_set_against_its_full_precision_twin():
    points = pd.DataFrame([
        point("full", "vanilla", 1, None, 100.0), point("full", "draft", 1, 1.5, 150.0),
        point("q", "vanilla", 1, None, 180.0, "awq", "full"),
        point("q", "draft", 1, 1.2, 216.0, "awq", "full")])
    table = round_plots.quantized_vs_full_table(points)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["quantized target"] == "q (awq)" and row["full precision"] == "full"
    assert row["vanilla tok/s, quantized ÷ full"] == "1.80×"
    assert row["speedup (quantized)"].startswith("1.20×")
    assert row["speedup (full precision)"].startswith("1.50×")


def test_settings_are_ranked_by_throughput_not_by_speedups_over_other_baselines():
    """"slow-vanilla" slows its own baseline to 50 tok/s: its speculative cell's 1.6x is the
    largest speedup, but the default setting's 130 tok/s is the faster server."""
    points = pd.DataFrame([
        point("t", "vanilla", 1, None, 0, output=100.0),
        point("t", "draft", 1, 1.3, 0, output=130.0),
        point("t", "vanilla", 1, None, 0, setting="slow-vanilla", output=50.0),
        point("t", "draft", 1, 1.6, 0, setting="slow-vanilla", output=80.0),
        point("t", "vanilla", 8, None, 0, output=100.0),
        point("t", "draft", 8, 0.95, 0, output=95.0),
        point("t", "draft+dynamic-k", 8, 2.0, 0, setting="derived dynamic K", output=200.0)])
    table = round_plots.winners_table(points).set_index("concurrency")
    assert table.loc[1, "best configuration"] == "default (draft k=3)"
    assert table.loc[1, "÷ default vanilla"] == "1.30×"
    assert table.loc[1, "speculation pays"] == "speculate"
    assert table.loc[1, "runner-up"].startswith("default (no speculation)")
    # the derived dynamic-K cell is not a setting; without speculation is faster here
    assert table.loc[8, "best configuration"] == "default (no speculation)"
    assert table.loc[8, "speculation pays"] == "no speculation"


def one_point(method, k, dataset):
    """The summary row of one speculative point (cell "spec", its baseline "base") at c=1."""
    return pd.DataFrame([{"round": "round3", "engine": "serve", "load": "concurrency",
                          "cell_id": "spec", "baseline_cell_id": "base", "method": method,
                          "speculator": method, "k": k, "setting": "default", "target": "t",
                          "workload": dataset, "dataset": dataset, "subset": "all",
                          "concurrency": 1, "repeat": 0, "status": "ok"}])


def write_requests(root, cell_id, latencies):
    path = root / "results" / "cells" / f"{cell_id}.requests.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(latencies)
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps({"cell_id": cell_id, "concurrency": 1, "repeat": 0,
                             "latencies": latencies, "ttfts": [0.0] * n,
                             "output_lens": [11] * n, "errors": [""] * n}) + "\n")


def details(root):
    return read_all_details([root / "results" / "cells" / f"{c}.jsonl" for c in ("base", "spec")])


def test_mixed_workload_is_split_by_bucket(tmp_path):
    prompts = tmp_path / "data" / "processed" / "mixed" / "all.jsonl"
    prompts.parent.mkdir(parents=True)
    prompts.write_text("".join(json.dumps({"prompt": "p", "bucket": b}) + "\n"
                               for b in ("0.25k", "0.25k", "1k", "1k")))
    prompts.with_name("all.card.json").write_text(json.dumps({"ordered": True}))
    write_requests(tmp_path, "base", [1.0, 1.0, 2.0, 2.0])
    write_requests(tmp_path, "spec", [0.5, 0.5, 2.5, 2.5])  # faster short, slower long
    frame = one_point("draft", 2, "mixed")
    raw = bucket_speedups(frame, details(tmp_path), read_cards(frame, tmp_path), tmp_path)
    data = raw.set_index("bucket")
    assert data.loc["0.25k", "tpot_speedup"] == pytest.approx(2.0)
    assert data.loc["1k", "tpot_speedup"] == pytest.approx(0.8)
    assert (data["round"] == "round3").all() and (data["cell_id"] == "spec").all()
    table = round_plots.bucket_speedup_table(raw)
    assert list(table.columns) == ["0.25k", "1k"]
    # one repeat of 2 requests: the sample it rests on, beside the number
    assert table.iloc[0]["1k"] == "0.80× (1 × 2 req)"
    assert (data["requests"] == 2).all()
    assert np.isfinite(data["tpot_speedup"]).all()


@pytest.mark.parametrize("ordered", [True, False])
def test_spec_bench_sent_in_order_is_split_by_task_group_and_a_shuffled_set_is_not(
        tmp_path, ordered):
    prompts = tmp_path / "data" / "processed" / "spec_bench" / "all.jsonl"
    prompts.parent.mkdir(parents=True)
    prompts.write_text("".join(json.dumps({"prompt": "p", "task": t}) + "\n"
                               for t in ("summarization", "qa", "summarization", "qa")))
    prompts.with_name("all.card.json").write_text(json.dumps({"ordered": ordered}))
    write_requests(tmp_path, "base", [1.0, 1.0, 1.0, 1.0])
    write_requests(tmp_path, "spec", [0.5, 1.25, 0.5, 1.25])  # copying pays, answering not
    frame = one_point("ngram", 3, "spec_bench")
    data = bucket_speedups(frame, details(tmp_path), read_cards(frame, tmp_path), tmp_path)
    if not ordered:  # the load generator shuffled the prompts: no request maps to a group
        assert data.empty and round_plots.bucket_speedup_table(data).empty
        return
    data = data.set_index("bucket")
    assert data.loc["summarization", "tpot_speedup"] == pytest.approx(2.0)
    assert data.loc["qa", "tpot_speedup"] == pytest.approx(0.8)


def test_acceptance_by_bucket_plots_one_target(tmp_path):
    """One target (the demo's round 2): a hue of one level, no dodge to divide."""
    points = pd.DataFrame([{"method": "draft_model", "speedup_mean": 1.0, "target": "t",
                            "quantization": None, "dtype": "float32", "dataset": "news",
                            "subset": s, "spec_decode_acceptance_rate_mean": 5.0,
                            "spec_decode_acceptance_length_mean": 1.1}
                           for s in ("0.25k", "1k")])
    fig = round_plots.acceptance_by_bucket_plot(points)
    assert fig is not None and len(fig.axes) == 2
    # axes from the metric's floor: not a 4.9-5.1 axis around equal points
    rate, length = fig.axes
    assert rate.get_ylim()[0] == 0 and rate.get_ylim()[1] >= 5.0
    assert length.get_ylim()[0] == 1 and length.get_ylim()[1] >= 1.1


def test_a_bucket_s_interval_is_a_ratio_s_never_below_zero():
    """Two repeats far apart (0.4× and 2.5×): a t-interval on the ratios reached below 0
    ("1.20× [-0.70, 3.10]" in a demo report); on the log scale it stays positive, around the
    geometric mean."""
    spread = np.array([0.4, 2.5])
    assert mean_interval(spread)[2] < 0  # what the table showed before
    mean, low, high = ratio_interval(spread)
    assert mean == pytest.approx(1.0) and 0 < low < 0.4 and high > 2.5
    assert low * high == pytest.approx(1.0)  # symmetric in log around the geometric mean
    data = pd.DataFrame({"target": "t", "workload": "w", "setting": "default",
                         "speculator": "ngram", "k": 3, "concurrency": 1, "bucket": "qa",
                         "tpot_speedup": spread})
    shown = round_plots.bucket_speedup_table(data).iloc[0]["qa"]
    # (a bound that two decimals would round to 0.00 in significant digits)
    assert shown == f"1.00× [{low:.3g}, {high:.3g}]" and "-" not in shown.split("e")[0]
    assert ratio_interval(np.array([2.0]))[0] == pytest.approx(2.0)
    assert np.isnan(ratio_interval(np.array([2.0]))[1])


def test_one_cell_heatmaps_become_dots_with_intervals():
    """A heatmap whose every panel holds one cell hides the interval it could show: drawn as
    a dot per point with its 95 % interval instead."""
    from sdbench.report.round_plots import setting_heatmaps
    from sdbench.report.show import figure_text

    points = pd.DataFrame({
        "round": "round3", "setting": ["default", "draft-len-512"], "target": "t",
        "speculator": "draft", "method": "draft_model", "k": 2, "workload": "mixed",
        "concurrency": 4, "speedup_mean": [0.7, 0.9], "speedup_ci_low": [0.6, 0.8],
        "speedup_ci_high": [0.8, 1.05]})
    # two settings at one concurrency: a 2 x 1 heatmap, kept
    assert "with 95 % intervals" not in figure_text(setting_heatmaps(points))
    one = setting_heatmaps(points.iloc[:1])
    assert "with 95 % intervals" in figure_text(one)
    bars = one.axes[0].lines + one.axes[0].collections
    assert bars  # the dot, its error bar and the line at 1
