"""The lossless check compares speculative greedy outputs with the baseline's."""

import gzip
import json

import pandas as pd
import pytest

from sdbench.analyze.aggregate import add_speedups, records_frame
from sdbench.analyze.lossless import compare, lossless_columns
from sdbench.records import read_details

from helpers import record


def encode(text):  # a word-level tokenizer is enough to test the bookkeeping
    return text.split()


def test_compare_counts_exact_matches_agreement_and_first_divergence():
    reference = ["the cat sat on the mat", "one two three", "same"]
    altered = ["the cat sat on a mat", "one two three", "same"]
    result = compare(altered, reference, encode)
    assert result["lossless_exact_share"] == pytest.approx(2 / 3)
    assert result["lossless_token_agreement"] == pytest.approx((5 / 6 + 1 + 1) / 3)
    assert result["lossless_first_divergence"] == 4
    assert compare(reference, reference, encode)["lossless_first_divergence"] is None


def write_details(path, cell_id, texts_by_point):
    with gzip.open(path, "wt") as fh:
        for (c, r), texts in texts_by_point.items():
            fh.write(json.dumps({"cell_id": cell_id, "concurrency": c, "repeat": r,
                                 "generated_texts": texts, "errors": [""] * len(texts),
                                 "input_lens": [10] * len(texts)}) + "\n")


def test_an_altered_generated_text_is_reported_and_flagged_at_concurrency_1(tmp_path):
    texts = ["a b c d", "e f g h", "i j k l"]
    write_details(tmp_path / "base.gz", "base", {(1, 0): texts, (4, 0): texts})
    altered = [texts[0], "e f X h", texts[2]]
    write_details(tmp_path / "ng.gz", "ng", {(1, 0): altered, (4, 0): altered})
    frame = add_speedups(records_frame([
        record("base", "vanilla", 1, 100.0), record("base", "vanilla", 4, 300.0),
        record("ng", "ngram", 1, 150.0, baseline="base", k=2),
        record("ng", "ngram", 4, 300.0, baseline="base", k=2)]))
    details = {**read_details(tmp_path / "base.gz"), **read_details(tmp_path / "ng.gz")}
    result = lossless_columns(frame, details, {"t": encode}).set_index(["cell_id", "concurrency"])
    assert result.loc[("ng", 1), "lossless_exact_share"] == pytest.approx(2 / 3)
    assert result.loc[("ng", 1), "lossless_first_divergence"] == 2
    assert bool(result.loc[("ng", 1), "lossless_flag"])          # flagged at concurrency 1
    assert not bool(result.loc[("ng", 4), "lossless_flag"])      # reported, not flagged
    assert result.loc[("ng", 4), "lossless_exact_share"] == pytest.approx(2 / 3)
    assert pd.isna(result.loc[("base", 1), "lossless_exact_share"])  # vanilla is the reference


def test_points_with_other_prompts_are_not_compared(tmp_path):
    write_details(tmp_path / "base.gz", "base", {(1, 0): ["a"]})
    write_details(tmp_path / "ng.gz", "ng", {(1, 0): ["a"]})
    details = {**read_details(tmp_path / "base.gz"), **read_details(tmp_path / "ng.gz")}
    details["ng"][(1, None, 0)]["input_lens"] = [11]
    frame = add_speedups(records_frame([record("base", "vanilla", 1, 1.0),
                                        record("ng", "ngram", 1, 1.0, baseline="base", k=2)]))
    result = lossless_columns(frame, details, {"t": encode}).set_index("cell_id")
    assert "prompts differ" in result.loc["ng", "lossless_note"]
    assert pd.isna(result.loc["ng", "lossless_exact_share"])


def test_sampled_outputs_are_checked_by_distribution_with_the_greedy_outputs(tmp_path):
    """At temperature 1 texts differ by design: no exact comparison and no flag; the cell is
    checked by distribution against its baseline at 1, with the greedy outputs of the same
    prompts (the baseline at temperature 0): a colder sampler fails, a right one passes."""
    import numpy as np

    from sdbench.analyze.lossless import sampling_columns
    from sdbench.analyze.sampling import simulated_pairs

    rng = np.random.default_rng(3)
    right, greedy = simulated_pairs(80, 24, 1.0, 1.0, rng, context=4.0)
    cold, _ = simulated_pairs(80, 24, 1.0, 0.6, np.random.default_rng(3), context=4.0)

    def words(tokens):
        return " ".join(f"w{t}" for t in tokens)

    texts = {"base0": [words(g) for g in greedy], "base1": [words(a) for a, _ in right],
             "ok1": [words(b) for _, b in right], "cold1": [words(b) for _, b in cold]}
    for cell_id, cell_texts in texts.items():
        write_details(tmp_path / f"{cell_id}.gz", cell_id, {(1, 0): cell_texts})
    records = [record("base0", "vanilla", 1, 100.0), record("base1", "vanilla", 1, 100.0),
               record("ok1", "ngram", 1, 120.0, baseline="base1", k=2),
               record("cold1", "ngram", 1, 120.0, baseline="base1", k=2)]
    for r in records[1:]:
        r["workload"] = {**r["workload"], "name": "w-t1", "loadgen": {"temperature": 1.0}}
    frame = add_speedups(records_frame(records))
    details = {}
    for cell_id in texts:
        details.update(read_details(tmp_path / f"{cell_id}.gz"))
    exact = lossless_columns(frame, details, {"t": encode}).set_index("cell_id")
    assert "sampled at temperature 1" in exact.loc["cold1", "lossless_note"]
    assert pd.isna(exact.loc["cold1", "lossless_exact_share"])
    assert not exact["lossless_flag"].any()
    checked = sampling_columns(frame, details, {"t": encode}).set_index("cell_id")
    assert set(checked.index) == {"ok1", "cold1"}
    assert checked.loc["cold1", "lossless_sampling_verdict"] == "fail"
    assert checked.loc["ok1", "lossless_sampling_verdict"] == "pass"
    assert "80 prompt pairs, 1920 tokens a side" in checked.loc["ok1", "lossless_sampling"]
