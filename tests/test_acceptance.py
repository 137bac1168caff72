"""Synthetic acceptance: the setting read from a cell's options, the simulated label, and the
known-answer check (its variance formula and its false-alarm rate by simulation)."""

import json

import numpy as np
import pandas as pd
import pytest

from sdbench.analyze.acceptance import (
    CHECK_LEVEL,
    acceptance_check,
    accepted_variance,
    simulated_label,
    synthetic_setting,
)
from sdbench.report.plots import synthetic_table


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
    assert simulated_label("ngram", {}) == "ngram"


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
