import math

import pandas as pd
import pytest

from sdbench.aggregate import add_speedups, records_frame, summarize
from sdbench.files import write_jsonl

from helpers import record


def test_speedup_is_against_the_same_baseline_and_concurrency():
    frame = add_speedups(records_frame([
        record("base", "vanilla", 1, 100.0, tpot=20.0),
        record("base", "vanilla", 4, 300.0),
        record("ng", "ngram", 1, 150.0, baseline="base", k=2, tpot=10.0, output=90.0),
        record("ng", "ngram", 4, 240.0, baseline="base", k=2),
    ])).set_index(["cell_id", "concurrency"])
    assert frame.loc[("ng", 1), "speedup"] == pytest.approx(1.5)
    assert frame.loc[("ng", 4), "speedup"] == pytest.approx(0.8)
    assert frame.loc[("ng", 1), "output_speedup"] == pytest.approx(90.0 / 50.0)
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
