"""The lossless check under sampling (sdbench.analyze.sampling): it flags a wrong temperature at
its stated power, passes one distribution at its stated false-alarm rate (by simulation, short
here; `python -m sdbench.analyze.sampling` writes the full table), and says "inconclusive"
rather than "pass" without the evidence."""

import numpy as np

from sdbench.analyze import sampling
from sdbench.analyze.sampling import FAIL, INCONCLUSIVE, PASS, check, simulate, simulated_pairs


def test_a_wrong_temperature_is_flagged_at_the_stated_power():
    # 1,440 tokens a side at ~2.3 nats per token: the full table's power there is ~100 %
    result = simulate(40, 60, 24, 0.8, seed=11, context=4.0, permutations=399)
    assert result["fail_share"] >= 0.9


def test_one_distribution_passes_at_the_stated_false_alarm_rate():
    # at most 1 % by construction; 150 runs: P(more than 5 false alarms) < 0.5 % at 1 %
    result = simulate(150, 20, 24, 1.0, seed=12, context=4.0, permutations=399)
    assert result["fail_share"] * 150 <= 5


def test_the_greedy_outputs_see_a_colder_sampler_where_frequencies_barely_move():
    """At ~0.8 nats per token the tokens' frequencies hardly change with the temperature; how
    often each side agrees with the greedy output does."""
    rng = np.random.default_rng(13)
    with_greedy = blind = 0
    for _ in range(20):
        pairs, greedy = simulated_pairs(100, 24, 1.0, 0.7, rng, context=9.0)
        with_greedy += check(pairs, greedy, permutations=399).verdict == FAIL
        blind += check(pairs, None, permutations=399).verdict == FAIL
    assert with_greedy >= 16 and blind <= 4


def test_a_pass_needs_the_evidence():
    rng = np.random.default_rng(14)
    pairs, greedy = simulated_pairs(80, 24, 1.0, 1.0, rng, context=4.0)
    full = check(pairs, greedy, permutations=399)
    assert full.tokens >= sampling.MIN_TOKENS and full.verdict == PASS, full
    assert full.text().startswith("pass: no difference (p = ")
    short = check(pairs[:10], greedy[:10], permutations=399)
    assert short.verdict == INCONCLUSIVE and "below the 1500 tokens a side" in short.text()
    blind = check(pairs, None, permutations=399)
    assert blind.verdict == INCONCLUSIVE and "no greedy output" in blind.text()
    # identical outputs on both sides: nothing to tell apart, never a failure
    same = check([(a, a) for a, _ in pairs], greedy, permutations=399)
    assert same.verdict == PASS and same.p_value == 1.0
    assert check([], None).verdict == INCONCLUSIVE


def test_a_difference_fails_with_its_p_value_and_evidence():
    rng = np.random.default_rng(15)
    pairs, greedy = simulated_pairs(80, 24, 1.0, 0.5, rng, context=4.0)
    result = check(pairs, greedy, permutations=399)
    assert result.verdict == FAIL and result.p_value < sampling.ALPHA
    assert result.sharpness > 0  # the colder side picks the frequent tokens
    assert "fail: the outputs' distributions differ" in result.text()
    assert "80 prompt pairs" in result.text()


def test_too_few_permutations_to_reach_the_level_are_refused():
    import pytest

    with pytest.raises(ValueError, match="cannot reach p < 0.01"):
        check([([1], [2])] * 3, None, permutations=199)
