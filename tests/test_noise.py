"""The noise model of the speedup: simulated studies with known true speedups, through the code
the reports use, drawing what the design does not assume (server starts' offsets, shared
baseline starts, noisier halves of a class); a reduced grid (`python -m
sdbench.analyze.simulate` runs the full one and writes docs/precision-simulation.md)."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sdbench.analyze import noise
from sdbench.analyze.simulate import (
    Design,
    levels_frame,
    power_at_mde,
    run_derived,
    run_design,
    run_held_out,
)

STUDIES = 120
DERIVED_STUDIES = 80


@pytest.mark.parametrize("design", [
    Design(3, 0.0, 0.10),
    Design(3, 0.03, 0.02),
    Design(3, 0.08, 0.02),
    Design(3, 0.03, 0.02, tails=3),
], ids=lambda d: d.label)
def test_the_real_designs_interval_covers_and_rarely_calls_no_gain_a_gain(design):
    """The real config's design (chained: every repeat on a start of its own, the baseline's
    shared by every point of a class), 35 points: coverage 92-98 % and "speculate" at a true
    1.00 at most 5 %, with server starts up to 8 % apart, and with every offset and run drawn
    from a t of 3 degrees of freedom (outliers at the same σ)."""
    result = run_design(design, 1.0, STUDIES)
    assert 0.92 <= result["coverage"] <= 0.98, result
    assert result["called"] <= 0.05, result
    assert result["covers"] == ("its repeats on several starts of the speculative server; the "
                                "server starts measured in its class")


def test_one_start_with_the_instance_probe_covers_what_one_start_alone_cannot():
    """Every repeat on one start: 3 % between starts puts a point's interval wrong most of
    the time, and it says it covers the noise within a start only; the instance probe's
    three starts bring it back."""
    alone = run_design(Design(3, 0.03, 0.02, chained=False), 1.0, STUDIES)
    assert alone["coverage"] < 0.7
    assert "the server starts' share not covered" in alone["covers"]
    probed = run_design(Design(3, 0.03, 0.10, chained=False, probe=3), 1.0, STUDIES)
    assert 0.90 <= probed["coverage"] <= 0.98, probed
    assert "the server starts measured in its class" in probed["covers"]


@pytest.mark.parametrize("noisy", ["workload", "point"])
def test_a_noisier_half_of_a_class_keeps_its_coverage(noisy):
    """Half of a class 3x noisier (its workloads', or its points' own runs): each point's
    spread shrunk toward its workload's and class's, not forced into one variance, so both
    halves cover at least 90 %."""
    result = run_design(Design(3, 0.0, 0.02, noisy=noisy), 1.0, STUDIES)
    assert result["noisy coverage"] >= 0.90, result
    assert result["quiet coverage"] >= 0.90, result


def test_the_minimum_detectable_effect_has_the_power_it_states():
    result = power_at_mde(Design(3, 0.03, 0.02), STUDIES)
    assert 1.02 < result["stated_mde"] < 1.5
    assert 0.72 <= result["power"] <= 0.88, result


def test_minimum_detectable_effect_of_a_known_error():
    # many degrees of freedom: the normal-theory (1.96 + 0.84) standard errors
    assert noise.minimum_detectable(0.05, 1e4) == pytest.approx(np.exp(2.8016 * 0.05), rel=1e-3)
    # few: the estimated error scaled up by the median bias of an estimate with 2 df
    nc = noise._noncentrality(2.0)
    assert noise.minimum_detectable(0.05, 2) == pytest.approx(
        np.exp(nc * 0.05 * np.sqrt(2 / stats.chi2.median(2))))
    assert noise.minimum_detectable(0.05, 2) > noise.minimum_detectable(0.05, 20)
    assert np.isnan(noise.minimum_detectable(0.05, 0))


def _frame(speedups, spec_starts, base_starts, cell="s", base="b"):
    return pd.DataFrame({"cell_id": cell, "baseline_cell_id": base, "concurrency": 1,
                         "request_rate": np.nan, "repeat": range(len(speedups)),
                         "engine": "serve", "target": "t", "method": "ngram",
                         "load": "concurrency", "workload": "w", "speedup": speedups,
                         "server_instance": spec_starts,
                         "baseline_server_instance": base_starts})


def test_one_point_on_two_starts_of_each_server_is_its_own_student_t_interval():
    """Repeats 0, 2 on the first starts, 1, 3 on the second: the starts' means are the units
    (1 degree of freedom), around the mean of the runs."""
    rows = _frame([1.2, 1.3, 1.25, 1.4], [0, 1, 0, 1], [0, 1, 0, 1])
    row = noise.point_noise(rows).iloc[0]
    logs = np.log(rows["speedup"].to_numpy())
    units = np.array([logs[[0, 2]].mean(), logs[[1, 3]].mean()])
    half = stats.t.ppf(0.975, 1) * units.std(ddof=1) / np.sqrt(2)
    assert row["kind"] == noise.INSTANCES
    assert row["df"] == pytest.approx(1.0)
    assert row["center"] == pytest.approx(logs.mean())
    assert row["low"] == pytest.approx(np.exp(units.mean() - half))
    assert row["high"] == pytest.approx(np.exp(units.mean() + half))
    assert row["instance_from"] == "this class"


def test_a_point_on_one_start_borrows_the_nearest_measured_start_and_says_where():
    """Concurrency 1 ran on three starts (the instance probe's), concurrency 4 on one: the
    point at 4 carries concurrency 1's start component, and its interval says where it was
    measured; a class of another engine measured nothing and says it covers one start only."""
    rng = np.random.default_rng(0)
    probe = _frame(np.exp(rng.normal(0.2, 0.05, 6)), [0, 1, 2] * 2, [0, 1, 2] * 2, cell="p",
                   base="pb")
    alone = _frame(np.exp(rng.normal(0.2, 0.01, 3)), [0] * 3, [0] * 3).assign(concurrency=4)
    other = alone.assign(engine="offline", cell_id="o", baseline_cell_id="ob")
    rows = noise.point_noise(pd.concat([probe, alone, other])).set_index("cell_id")
    assert rows.loc["s", "instance_from"].startswith("measured at concurrency 1")
    assert rows.loc["s", "instance_var"] > 0
    assert "measured at concurrency 1" in rows.loc["s", "covers"]
    assert pd.isna(rows.loc["o", "instance_from"])
    assert "not covered" in rows.loc["o", "covers"]


@pytest.mark.parametrize(("design", "scenario"), [
    (Design(3, 0.03, 0.02, workloads=2, ks=3), "crossing"),
    (Design(3, 0.03, 0.10, workloads=2, ks=3), "tied"),
], ids=lambda v: v if isinstance(v, str) else v.label)
def test_the_crossover_and_the_switch_gain_intervals_cover(design, scenario):
    """The crossover's confidence set and the switch gain's post-selection interval at 3 %
    between starts of the real config's design, through the code the reports use: coverage of
    the truth at least 92 % (the full grid: docs/precision-simulation.md)."""
    result = run_derived(design, scenario, DERIVED_STUDIES)
    assert 0.92 <= result["crossover coverage"] <= 0.99, result
    assert 0.92 <= result["switch gain coverage"] <= 0.99, result


def test_the_held_out_estimate_covers_and_tells_more_with_the_pooled_noise_model():
    """The best setting's held-out estimate at 3 repeats and 5 % noise, three settings at three
    levels (80 studies, 240 intervals): with σ from the point table's noise model it covers
    what it estimates within 92-98 % and calls more true gains than a t over the three
    held-out values (t 4.3), whose intervals are wider (the full grid:
    docs/held-out-simulation.md)."""
    design = Design(3, 0.0, 0.05, chained=False, workloads=1, ks=3)
    result = run_held_out(design, "crossing", 80, seed=3)
    assert 0.92 <= result["pooled coverage"] <= 0.98, result
    assert result["pooled called"] > result["own called"], result
    assert result["pooled half-width"] < 0.8 * result["own half-width"], result


def test_a_held_out_repeat_carries_what_its_points_runs_share():
    """One run's σ (`speedup_repeat_sd`) and what a point's runs share beyond independent runs
    (`speedup_shared_sd`: a start that measured them all): on one start with borrowed starts
    the runs share the start component (but what its mean already has of it: 1/n); each
    repeat on its own start, nothing."""
    from sdbench.analyze.simulate import CURVES, levels_frame, points_of

    rng = np.random.default_rng(1)
    chained = points_of(levels_frame(Design(3, 0.05, 0.05, workloads=1, ks=3),
                                     CURVES["crossing"], rng, (1, 4, 16)))
    assert (chained["speedup_repeat_sd"] > 0).all()
    assert np.allclose(chained["speedup_shared_sd"], 0.0, atol=1e-6)
    probed = points_of(levels_frame(Design(3, 0.05, 0.05, chained=False, probe=3,
                                           workloads=1, ks=3), CURVES["crossing"], rng,
                                    (1, 4, 16)))
    study = probed[~probed["cell_id"].str.startswith("probe")]
    # (a level whose starts spread no more than its runs measures no share: zero, not negative)
    assert (study["speedup_shared_sd"] > 0).sum() >= 2
    assert np.allclose(study["speedup_shared_sd"] ** 2,
                       study["speedup_instance_sd"] ** 2 * (1 - 1 / 3))


def test_precision_of_points_without_spread_warns_nothing_a_report_would_print():
    """One unit per point (a repeat on one server): no spread to take a median of; the table
    says so with blanks, and numpy's all-NaN warning never reaches a report page."""
    import warnings

    from sdbench.analyze.noise import _median

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(_median(pd.Series([np.nan, np.nan])))
        assert _median(pd.Series([np.nan, 0.2, 0.4])) == pytest.approx(0.3)


def test_a_class_too_small_to_tell_starts_from_runs_still_lends_its_spread():
    """A probe of one run a start (the AVX2 end-to-end rerun's): its class cannot tell the
    starts' share from the runs' and folds it into them; it says so, and another class on one
    start borrows that whole spread (at most what the starts can be) instead of reading as
    not covered."""
    rng = np.random.default_rng(1)
    probed = levels_frame(Design(1, 0.03, 0.02, chained=False, probe=2, workloads=1, ks=1),
                          ((1.2,),), rng)
    other = levels_frame(Design(1, 0.03, 0.02, chained=False, workloads=1, ks=1), ((1.1,),),
                         rng).assign(method="d", speculator="d", cell_id="other",
                                     config_id="D", server_started_at="D@0")
    out = noise.point_noise(pd.concat([probed, other], ignore_index=True)).set_index("cell_id")
    assert "not told apart from its runs' spread" in out.loc["w0k0", "covers"]
    assert out.loc["other", "instance_from"] == "measured with m on the same target"
    runs = noise.fits(probed)[next(iter(noise.fits(probed)))][0].sigma2["residual"]
    assert out.loc["other", "instance_var"] == pytest.approx(runs)
