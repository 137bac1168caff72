"""Crossover, best settings, the switching gain and the derived dynamic-K schedule."""

import json

import pandas as pd
import pytest

from sdbench.analysis import best_settings, crossover, derive_schedule, switch_gain


def points(rows):
    """rows: (speculator, k, concurrency, mean, low, high)."""
    frame = pd.DataFrame(rows, columns=["speculator", "k", "concurrency", "speedup_mean",
                                        "speedup_ci_low", "speedup_ci_high"])
    return frame.assign(target="t", workload="w", method="ngram", round="round1")


def test_crossover_interpolates_in_log2_concurrency():
    table = crossover(points([("ngram", 2, 1, 1.4, 1.3, 1.5), ("ngram", 2, 4, 1.2, 1.1, 1.3),
                              ("ngram", 2, 16, 0.8, 0.7, 0.9),
                              ("ngram", 4, 1, 1.1, 1.0, 1.2), ("ngram", 4, 16, 1.05, 1.0, 1.1),
                              ("draft", 2, 1, 0.6, 0.5, 0.7), ("draft", 2, 16, 0.5, 0.4, 0.6)]))
    row = table.set_index(["speculator", "k"]).loc[("ngram", 2)]
    # from 1.2 at c=4 to 0.8 at c=16: halfway in log2 -> c=8
    assert row["crossover"] == pytest.approx(8.0)
    assert row["crossover_low"] < row["crossover"] < row["crossover_high"]
    assert pd.isna(table.set_index(["speculator", "k"]).loc[("ngram", 4), "crossover"])
    assert table.set_index(["speculator", "k"]).loc[("draft", 2), "reading"] == \
        "below 1 from the lowest level"


def test_best_settings_and_switch_gain():
    data = points([("ngram", 2, 1, 1.5, 1.4, 1.6), ("ngram", 2, 8, 0.9, 0.8, 1.0),
                   ("draft", 2, 1, 1.1, 1.0, 1.2), ("draft", 2, 8, 1.3, 1.2, 1.4)])
    best = best_settings(data).set_index("concurrency")
    assert best.loc[1, "speculator"] == "ngram" and best.loc[8, "speculator"] == "draft"
    gain = switch_gain(data).iloc[0]
    # static: draft (geo. mean sqrt(1.1*1.3)=1.196) beats ngram (sqrt(1.5*0.9)=1.162)
    assert gain["static_best"] == "draft k=2"
    assert gain["switch_speedup"] == pytest.approx((1.5 * 1.3) ** 0.5)
    assert gain["gain"] == pytest.approx((1.5 * 1.3) ** 0.5 / (1.1 * 1.3) ** 0.5 - 1)


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
