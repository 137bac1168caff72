"""Studies with known true speedups, simulated through the code the reports use
(`noise.point_noise`, `point_intervals.with_pooled_intervals`): how often each design's interval
covers the truth, how often it calls a true gain "speculate", whether the minimum detectable
effect it states has its power, and whether the crossover and the switch gain cover theirs.

A simulated study is one method at `ks` values of k on `workloads` workloads, each workload
with its own vanilla baseline cell (all of one baseline configuration), at one or more
concurrency levels. Each run's log speedup is

    log S + a(the speculative start) − b(the baseline start) + e(its run) − c(the baseline run),

a, b each a server start's offset (sd `instance_noise`; the speculative configuration's start
shared by its workloads, the baseline's by every k and workload), e, c the runs' own noise
(sd `measurement_noise`; the baseline run shared by the k values it is paired with). Which
start measures a run is the design's (`Design.chained`):

- **chained** (config/config.yaml's served cells, `adaptive.chain`): every repeat on a start
  of its own, on both sides; the levels of one depth of the level tree (the lowest and highest
  first) on the same start;
- **one start** per configuration (interleaved groups, the demo's; engine cells): every repeat
  on it, with or without the instance probe (`probe`: that many starts of the first k's and
  the baseline's configuration measuring the first workload, `repeats` runs each, the first on
  the study's own starts: `grid.probe_cells`).

`noisy` makes half of a class noisier (3x the runs' sd): the odd workloads' runs on both
sides ("workload"), or the odd points' own runs ("point"); `tails` draws every offset and run
from a Student t of that many degrees of freedom at the same sd (outliers the normal model
does not expect).

`python -m sdbench.analyze.simulate` runs the full grid and writes docs/precision-simulation.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.analyze.analysis import best_settings, crossing, crossover, switch_gain
from sdbench.analyze.noise import minimum_detectable, point_noise
from sdbench.analyze.point_intervals import with_pooled_intervals
from sdbench.plan.grid import level_tree

REPO = Path(__file__).resolve().parents[3]
PROBE = "probe"  # the instance probe's cells' ids begin so


@dataclass(frozen=True)
class Design:
    repeats: int
    instance_noise: float
    measurement_noise: float
    chained: bool = True
    probe: int = 0  # one-start designs: the instance probe's starts of each side
    workloads: int = 7
    ks: int = 5
    noisy: str = ""  # "", "workload" or "point": half of the class 3x noisier
    # heavy tails: every offset and run drawn from a Student t of this many degrees of freedom
    # scaled to the same σ (0: normal)
    tails: float = 0.0

    def draw(self, rng: np.random.Generator, sd: float, size=None):
        """Draws of σ `sd`: normal, or Student t of `tails` degrees of freedom."""
        if not self.tails:
            return rng.normal(0, sd, size)
        return sd * np.sqrt((self.tails - 2) / self.tails) * rng.standard_t(self.tails, size)

    @property
    def shape(self) -> str:
        """The design and what it draws, without the noise levels."""
        design = ("chained (every repeat on a start of its own)" if self.chained else
                  "one start per configuration" + (f", instance probe of {self.probe} starts"
                                                   if self.probe else ", no probe"))
        return (f"{design}, {self.repeats} repeats"
                + (f", half the {'workloads' if self.noisy == 'workload' else 'points'} 3x "
                   "noisier" if self.noisy else "")
                + (f", heavy tails (t, {self.tails:g} df)" if self.tails else ""))

    @property
    def label(self) -> str:
        return (f"{self.shape}, instance noise {self.instance_noise:.0%}, "
                f"run noise {self.measurement_noise:.0%}")


def _depths(levels: tuple[int, ...]) -> list[int]:
    """Each level's depth in the adaptive rule's level tree (2 coarse levels, config/config.yaml's):
    the levels of one depth share a chained start."""
    tree = level_tree(len(levels), 2)
    return [tree[i][0] for i in range(len(levels))]


def _hot(design: Design, k: int, w: int) -> tuple[float, float]:
    """(the point's own run noise factor, its baseline run's)."""
    if design.noisy == "workload" and w % 2:
        return 3.0, 3.0
    if design.noisy == "point" and (k * design.workloads + w) % 2:
        return 3.0, 1.0
    return 1.0, 1.0


def levels_frame(design: Design, curves, rng: np.random.Generator,
                 levels: tuple[int, ...] = (1,)) -> pd.DataFrame:
    """Per-measurement rows (the columns the noise model reads) of a study of `len(curves)`
    settings (each its true speedup at every level of `levels`) on `design.workloads`
    workloads, with the instance probe's where the design has one."""
    d = design
    depths = _depths(levels)
    stages = (max(depths) + 1) * d.repeats if d.chained else 1
    base_offset = d.draw(rng, d.instance_noise, stages)
    spec_offset = d.draw(rng, d.instance_noise, (len(curves), stages))
    rows = []

    def row(cell, base_cell, config, k, w, level, r, y, spec_start, base_start):
        return {"cell_id": cell, "concurrency": level, "request_rate": np.nan, "repeat": r,
                "baseline_cell_id": base_cell, "engine": "serve", "target": "t",
                "method": "m", "load": "concurrency", "workload": f"w{w}", "speculator": "m",
                "k": k + 1, "paired": True, "speedup": float(np.exp(y)),
                "server_instance": spec_start, "baseline_server_instance": base_start,
                "config_id": config, "baseline_config_id": "B",
                "server_started_at": f"{config}@{spec_start}",
                "baseline_server_started_at": f"B@{base_start}", "status": "ok"}

    for w in range(d.workloads):
        for i, level in enumerate(levels):
            base_runs = d.draw(rng, d.measurement_noise, d.repeats)
            for k, curve in enumerate(curves):
                own, base = _hot(d, k, w)
                for r in range(d.repeats):
                    stage = depths[i] * d.repeats + r if d.chained else 0
                    y = (np.log(curve[i]) + spec_offset[k, stage] - base_offset[stage]
                         + own * d.draw(rng, d.measurement_noise) - base * base_runs[r])
                    rows.append(row(f"w{w}k{k}", f"w{w}", f"S{k}", k, w, level, r, y, stage,
                                    stage))
    if d.probe and not d.chained:
        # the first k's and the baseline's configurations on `probe` starts each (the first
        # the study's own), the first workload's prompts, `repeats` runs per start
        extra_base = np.concatenate([[base_offset[0]], d.draw(rng, d.instance_noise,
                                                                  d.probe - 1)])
        extra_spec = np.concatenate([[spec_offset[0, 0]], d.draw(rng, d.instance_noise,
                                                                     d.probe - 1)])
        for i, level in enumerate(levels):
            for start in range(d.probe):
                for r in range(d.repeats):
                    y = (np.log(curves[0][i]) + extra_spec[start] - extra_base[start]
                         + d.draw(rng, d.measurement_noise)
                         - d.draw(rng, d.measurement_noise))
                    rows.append(row(f"{PROBE}w0k0", f"{PROBE}w0", "S0", 0, 0, level,
                                    start * d.repeats + r, y, start, start))
    return pd.DataFrame(rows)


def study_frame(design: Design, speedup: float, rng: np.random.Generator) -> pd.DataFrame:
    """The per-measurement rows of one simulated study at concurrency 1: every k of true
    speedup `speedup`."""
    return levels_frame(design, ((speedup,),) * design.ks, rng)


LEVELS = (1, 4, 16)
# true speedups of three settings at LEVELS (the log speedup linear in log2 concurrency):
# they cross 1 at different loads, and the best setting changes with load
CURVES = {
    "crossing": ((1.5, 1.05, 0.75), (1.35, 1.1, 0.9), (1.2, 1.08, 0.97)),
    # three equal settings: nothing to gain by switching
    "tied": ((1.3, 1.05, 0.85),) * 3,
}


def _studied(noise: pd.DataFrame) -> pd.DataFrame:
    """The study's own points (not the instance probe's)."""
    return noise[~noise["cell_id"].astype(str).str.startswith(PROBE)]


def _true_gain(curves, table: pd.DataFrame) -> float:
    """The true log gain of the switch and static setting a `switch_gain` row picked."""
    truth = {f"m k={k + 1}": np.log(curve) for k, curve in enumerate(curves)}
    truth["off"] = np.zeros(len(LEVELS))
    picks = dict(part.split(": ") for part in table["switch_choice"].split(", "))
    switch = np.mean([truth[picks[f"c={c}"]][i] for i, c in enumerate(LEVELS)])
    return float(switch - truth[table["static_best"]].mean())


def run_derived(design: Design, scenario: str, studies: int, seed: int = 0) -> dict:
    """Coverage of the crossover's confidence set (of the true crossover: where the true curve
    falls below 1, or beyond the levels) and of the switch gain's interval (of the true gain of
    the switch and static setting the study picked)."""
    rng = np.random.default_rng(seed)
    curves = CURVES[scenario]
    true_cross = [crossing(list(LEVELS), np.log(curve)) for curve in curves]
    cross_hits, gain_hits, widths, unstated = [], [], [], 0
    for _ in range(studies):
        frame = levels_frame(design, curves, rng, LEVELS)
        noise = point_noise(frame)
        frame = frame[~frame["cell_id"].str.startswith(PROBE)]
        for row in crossover(frame, noise).to_dict("records"):
            truth = true_cross[int(row["k"]) - 1]
            high = np.inf if pd.isna(row["crossover_high"]) else row["crossover_high"]
            cross_hits.append(bool(high == np.inf) if truth is None
                              else row["crossover_low"] <= truth <= high)
        for row in switch_gain(frame, noise).to_dict("records"):
            if pd.isna(row["gain_ci_low"]):  # no interval: the same setting both ways, or
                unstated += 1               # fewer than 2 degrees of freedom
                continue
            truth = np.expm1(_true_gain(curves, row))
            gain_hits.append(row["gain_ci_low"] <= truth <= row["gain_ci_high"])
            widths.append(row["gain_ci_high"] - row["gain_ci_low"])
    return {**asdict(design), "scenario": scenario, "studies": studies,
            "crossover coverage": float(np.mean(cross_hits)),
            "switch gain coverage": float(np.mean(gain_hits)),
            "switch gains without an interval": unstated,
            "switch gain interval width": float(np.median(widths))}


def points_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The point table of a simulated study (`levels_frame`) as the summary stage writes it for
    points measured without the adaptive rule: each point's speedup and intervals from the
    pooled noise model (`point_intervals.with_pooled_intervals`, the reports' own code)."""
    keys = ["cell_id", "concurrency", "request_rate", "target", "workload", "speculator", "k",
            "method", "engine", "load"]
    points = frame.groupby(keys, dropna=False, sort=False)["speedup"].apply(
        lambda s: np.exp(np.log(s).mean())).rename("speedup_mean").reset_index()
    return with_pooled_intervals(points.assign(
        speedup_ci_low=np.nan, speedup_ci_high=np.nan, sequential_factor=1.0, adaptive=None,
        blocks=1, interval_covers=""), frame)


def run_held_out(design: Design, scenario: str, studies: int, seed: int = 0) -> dict:
    """The best setting's held-out estimate (`analysis.best_settings`) at each level of a study
    of `CURVES[scenario]` settings: how often its 95 % interval covers the truth it estimates
    (the mean true speedup of the settings chosen for the held-out repeats, each chosen on the
    other repeats: speculation off 1) and how often the level's verdict says "speculate" where
    that truth is above 1.05 (a level where speculation off is chosen says "no speculation",
    whatever its held-out interval), with σ from the pooled noise model (the point table's)
    and, for comparison, a Student t over the held-out values alone (no point table)."""
    rng = np.random.default_rng(seed)
    truth = {f"m k={k + 1}": dict(zip(LEVELS, curve, strict=True))
             for k, curve in enumerate(CURVES[scenario])}
    found = {"pooled": ([], [], []), "own": ([], [], [])}
    for _ in range(studies):
        frame = levels_frame(design, CURVES[scenario], rng, LEVELS)
        for name, points in (("pooled", points_of(frame)), ("own", None)):
            hits, calls, widths = found[name]
            for row in best_settings(frame, points).to_dict("records"):
                if not row["heldout_picks"]:
                    continue
                level = row["concurrency"]
                true = float(np.exp(np.mean([np.log(truth[p][level]) if p in truth else 0.0
                                             for p in row["heldout_picks"].split(", ")])))
                hits.append(row["heldout_ci_low"] <= true <= row["heldout_ci_high"])
                widths.append(np.log(row["heldout_ci_high"] / row["heldout_ci_low"]) / 2)
                if true > 1.05:  # what the table says: off chosen is never "speculate"
                    calls.append(row["verdict"] == "speculate")
    return {**asdict(design), "scenario": scenario, "studies": studies,
            **{f"{name} {what}": (np.nan if not values else float(
                np.median(values) if what == "half-width" else np.mean(values)))
               for name, parts in found.items()
               for what, values in zip(("coverage", "called", "half-width"), parts,
                                       strict=True)}}


def run_design(design: Design, speedup: float, studies: int, seed: int = 0) -> dict:
    """Coverage of the true speedup (of the whole class, and of its noisier and quieter half
    where `noisy`), the share of points called "speculate", the median minimum detectable
    effect stated, and what the intervals say they cover."""
    rng = np.random.default_rng(seed)
    covered, called, mde, covers, halves = [], [], [], set(), {True: [], False: []}
    for _ in range(studies):
        noise = _studied(point_noise(study_frame(design, speedup, rng)))
        hit = list((noise["low"] <= speedup) & (noise["high"] >= speedup))
        covered += hit
        called += list(noise["low"] > 1)
        mde += list(noise["mde"])
        covers |= {_covers_kind(c, f) for c, f in zip(noise["covers"], noise["instance_from"],
                                                      strict=True)}
        for cell, h in zip(noise["cell_id"], hit, strict=True):
            k, w = int(cell.split("k")[1]), int(cell[1:].split("k")[0])
            halves[_hot(design, k, w)[0] > 1].append(h)
    return {**asdict(design), "speedup": speedup, "studies": studies,
            "coverage": float(np.mean(covered)), "called": float(np.mean(called)),
            "noisy coverage": float(np.mean(halves[True])) if halves[True] else np.nan,
            "quiet coverage": float(np.mean(halves[False])),
            "mde": float(np.nanmedian(mde)), "covers": "; ".join(sorted(covers))}


def _covers_kind(text: str, instance_from: str | None) -> str:
    """What an interval covers, without its numbers: the design's units (the first part of
    its text) and where the server starts' share came from (`instance_from`)."""
    starts = ("the server starts' share not covered" if not instance_from
              else "the server starts measured in its class" if instance_from == "this class"
              else "the server starts' share borrowed")
    return f"{text.split('; ')[0]}; {starts}"


def power_at_mde(design: Design, studies: int, seed: int = 0) -> dict:
    """The share of studies whose points are called "speculate" when the true speedup is the
    minimum detectable effect the design states (its median over studies with no gain)."""
    stated = run_design(design, 1.0, studies, seed)["mde"]
    return {"stated_mde": stated,
            "power": run_design(design, stated, studies, seed + 1)["called"]}


def _design_rows(design: Design, studies: int) -> list[dict]:
    rows = [run_design(design, 1.0, studies)]
    rows[-1].update(power_at_mde(design, studies))
    return rows


def _derived_rows(design: Design, studies: int) -> list[dict]:
    return [run_derived(design, scenario, studies) for scenario in CURVES]


NOISE_GRID = list(itertools.product((0.0, 0.03, 0.08), (0.02, 0.10)))
# the real config's design (chained, 3 repeats), the one-start design with and without the
# instance probe; then half of a class 3x noisier
DESIGNS_SIMULATED = [Design(3, i, m, chained=c, probe=p)
                     for c, p in ((True, 0), (False, 3), (False, 0)) for i, m in NOISE_GRID] + [
    Design(3, i, m, noisy=noisy) for noisy in ("workload", "point") for i, m in NOISE_GRID] + [
    # every offset and run from a t of 3 degrees of freedom (outliers at the same σ)
    Design(3, i, m, tails=3) for i, m in NOISE_GRID]
DERIVED_SIMULATED = [Design(3, i, m, chained=c, probe=p, workloads=2, ks=3)
                     for c, p in ((True, 0), (False, 3)) for i, m in NOISE_GRID]


def grid(studies: int, workers: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per design: the speedup's coverage, calls at a true 1.00, MDE and power; per design
    and scenario: the crossover's and switch gain's coverage)."""
    with ProcessPoolExecutor(workers or os.cpu_count()) as pool:
        done = pool.map(_design_rows, DESIGNS_SIMULATED, [studies] * len(DESIGNS_SIMULATED))
        derived = pool.map(_derived_rows, DERIVED_SIMULATED,
                           [studies] * len(DERIVED_SIMULATED))
        return (pd.DataFrame([row for rows in done for row in rows]),
                pd.DataFrame([row for rows in derived for row in rows]))


def _pct(value) -> str:
    return "" if value is None or pd.isna(value) else f"{value:.1%}"


def write_table(table: pd.DataFrame, path: Path, studies: int,
                derived: pd.DataFrame | None = None) -> None:
    lines = ["# Precision of the speedup intervals: simulated coverage and power", "",
             f"Generated by `python -m sdbench.analyze.simulate` ({studies} simulated studies "
             "per row; `sdbench.analyze.simulate` says how a study is simulated): one method "
             "at 5 values of k on 7 workloads at one level (35 points, the shape of a round 1 "
             "class of config/config.yaml), 3 repeats, through the noise model the reports use. "
             "Instance noise: the sd of each server start's offset, on both sides; run noise: "
             "of each run. Coverage: the share of 95 % intervals that contain the true "
             "speedup (of the noisier and the quieter half where half the class is noisier). "
             "Speculate at 1.00: the share of points called \"speculate\" where the true "
             "speedup is 1. MDE: the median minimum detectable speedup the design states "
             "(80 % power); power at MDE: the share called \"speculate\" when the true speedup "
             "is that MDE.", "",
             "| design | instance noise | run noise | coverage | noisier / quieter half | "
             "speculate at 1.00 | MDE | power at MDE | interval covers |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in table.to_dict("records"):
        design = Design(**{k: row[k] for k in Design.__dataclass_fields__})
        halves = (f"{_pct(row['noisy coverage'])} / {_pct(row['quiet coverage'])}"
                  if row["noisy"] else "")
        lines.append(
            f"| {design.shape} | {row['instance_noise']:.0%} | "
            f"{row['measurement_noise']:.0%} | {_pct(row['coverage'])} | {halves} | "
            f"{_pct(row['called'])} | {row['stated_mde']:.3f} | {_pct(row.get('power'))} | "
            f"{row['covers']} |")
    if derived is not None and not derived.empty:
        lines += ["", "## The crossover and the switch gain", "",
                  "Three settings of one method at concurrency "
                  f"{', '.join(map(str, LEVELS))} on two workloads, each with its baseline "
                  "cell (`CURVES`): *crossing*, three settings whose speedups cross 1 at "
                  "different loads and whose best setting changes with load; *tied*, three "
                  "equal settings (true speedups "
                  f"{', '.join(f'{v:g}' for v in CURVES['tied'][0])}). A server start's "
                  "offset is shared by every level it measures (chained: the lowest and highest "
                  "level's repeats share their starts, the middle level's have their own). "
                  "Crossover coverage: the share of 95 % confidence sets "
                  "(`analysis.crossover`) that contain where the true curve falls below 1. "
                  "Switch gain coverage: the share of 95 % intervals (`analysis.switch_gain`) "
                  "that contain the true gain of the switch and static setting the study "
                  "picked, over the gains that have an interval; width: the interval's median "
                  "width (on the speedup ratio); without an interval: the gains a study gave "
                  "none (the switch kept the static setting at every level, or the points had "
                  "fewer than 2 degrees of freedom), of the studies × 2 workloads.", "",
                  "| design | instance noise | run noise | scenario | crossover coverage | "
                  "switch gain coverage | switch gain interval width | without an interval |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in derived.to_dict("records"):
            design = Design(**{k: row[k] for k in Design.__dataclass_fields__})
            lines.append(
                f"| {design.shape} | "
                f"{row['instance_noise']:.0%} | {row['measurement_noise']:.0%} | "
                f"{row['scenario']} | {_pct(row['crossover coverage'])} | "
                f"{_pct(row['switch gain coverage'])} | "
                f"{row['switch gain interval width']:.3f} | "
                f"{row['switch gains without an interval']} |")
    path.write_text("\n".join(lines) + "\n")


# Variance components measured on one H100 at the 7B shape (vLLM 0.26.0, issue 34): standard
# deviations of log output throughput. A difference d between two runs gives sd d / sqrt(2);
# a range r over three instances sd r / 1.69 (the expected range of three normal draws).
COMPONENTS_7B = {
    1: {"speculative within": 0.031 / np.sqrt(2), "baseline within": 0.019 / np.sqrt(2),
        "baseline between": 0.001 / 1.69},
    16: {"speculative within": 0.126 / np.sqrt(2), "baseline within": 0.019 / np.sqrt(2),
         "baseline between": 0.013 / 1.69},
}
DESIGNS = ((2, 2), (3, 3), (4, 2), (4, 4), (6, 3), (6, 6), (8, 4))


def design_rows(points: tuple[int, ...] = (2, 14, 35)) -> pd.DataFrame:
    """Per concurrency, design (repeats, instances; repeats spread evenly) and number of
    points pooled in a class: the interval's half-width and the minimum detectable speedup
    the noise model would give with COMPONENTS_7B (the speculative server's spread between
    instances taken as the baseline's, as the model does when it cannot see it)."""
    rows = []
    for level, parts in COMPONENTS_7B.items():
        for (repeats, instances), pooled in itertools.product(DESIGNS, points):
            per = repeats // instances
            var = (2 * parts["baseline between"] ** 2
                   + (parts["speculative within"] ** 2 + parts["baseline within"] ** 2) / per)
            se, df = np.sqrt(var / instances), pooled * (instances - 1)
            rows.append({"concurrency": level, "repeats": repeats, "instances": instances,
                         "points pooled": pooled,
                         "half-width": float(np.expm1(stats.t.ppf(0.975, df) * se)),
                         "mde": minimum_detectable(se, df),
                         "starts": instances, "measuring": repeats})
    return pd.DataFrame(rows)


def write_defaults(path: Path) -> None:
    table = design_rows()
    lines = ["# Designs at the 7B shape: what repeats and server instances buy", "",
             "Generated by `python -m sdbench.analyze.simulate --defaults` from the variance "
             "components measured on one H100 at the 7B shape (vLLM 0.26.0; "
             "`simulate.COMPONENTS_7B`: a speculative server's runs differed by 3.1 % at "
             "concurrency 1 and 12.6 % at 16, a vanilla server's by up to 1.9 %, three vanilla "
             "instances by 0.1 % and 1.3 %). Half-width: of the 95 % interval on the speedup; "
             "MDE: the smallest speedup told from 1 with 80 % power "
             "(`noise.minimum_detectable`); points pooled: the points of one engine, target, "
             "method and level whose variance the model pools (the calibration config has 2; "
             "a method of the real config's round 1 has its k values × 7 workloads: 14 to "
             "35). Starts grow with instances, measuring time with repeats.", "",
             "| concurrency | repeats | instances | points pooled | half-width | MDE |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in table.to_dict("records"):
        lines.append(f"| {row['concurrency']} | {row['repeats']} | {row['instances']} | "
                     f"{row['points pooled']} | ±{row['half-width']:.1%} | "
                     f"{row['mde']:.3f} |")
    path.write_text("\n".join(lines) + "\n")


HELD_OUT_DESIGNS = [Design(repeats, 0.0, noise, chained=False, workloads=1, ks=3)
                    for repeats in (2, 3, 5) for noise in (0.02, 0.05, 0.10)] + [
    # each repeat on a server start of its own, both sides (chained): a start's offset is part
    # of each repeat's noise (shared by the levels of its depth)
    Design(3, offset, 0.05, workloads=1, ks=3) for offset in (0.02, 0.05)]


def _held_out_rows(design: Design, studies: int) -> list[dict]:
    return [run_held_out(design, scenario, studies) for scenario in CURVES]


def write_held_out(path: Path, studies: int, workers: int | None = None) -> None:
    """docs/held-out-simulation.md: `run_held_out` for every design of `HELD_OUT_DESIGNS`
    and scenario of `CURVES`."""
    with ProcessPoolExecutor(workers or os.cpu_count()) as pool:
        rows = [row for part in pool.map(_held_out_rows, HELD_OUT_DESIGNS,
                                         [studies] * len(HELD_OUT_DESIGNS)) for row in part]
    lines = ["# The best setting's held-out estimate: simulated coverage and power", "",
             f"Generated by `python -m sdbench.analyze.simulate --held-out` ({studies} "
             "simulated studies per row). A study: three settings of one method at "
             f"concurrency {', '.join(map(str, LEVELS))} with one baseline, every server on "
             "one instance or, where the table says, each repeat on an instance of its own on "
             "both sides, whose offset (σ as given) the levels it measures share (`CURVES`: "
             "*crossing*, speedups that cross 1 at different loads, "
             "the best changing with load; *tied*, three equal settings), each level's best "
             "setting chosen and judged on held-out repeats (`analysis.best_settings`: chosen "
             "on all repeats but one, measured on the one left out, in turn). Coverage: the "
             "share of 95 % intervals that contain what the estimate estimates, the mean true "
             "speedup of the settings chosen for the held-out repeats. Called: the share "
             "of levels whose verdict is \"speculate\" where that truth is above 1.05 (a level "
             "where speculation off is chosen is not). Half-width: the median, on the log "
             "scale. *Pooled*: σ of one repeat from the pooled noise model, the point table's "
             "(`analysis.held_out_interval`, what the reports use); *own*: a Student t over the "
             "held-out values alone (the alternative the reports do not use).", "",
             "| repeats | server instances | measurement noise | scenario | pooled coverage | "
             "own coverage | pooled called | own called | pooled half-width | own half-width |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        called = [("" if pd.isna(row[f"{n} called"]) else f"{row[f'{n} called']:.1%}")
                  for n in ("pooled", "own")]
        instances = ("1" if not row["chained"] else
                     f"{row['repeats']} (chained), offset σ {row['instance_noise']:.0%}")
        lines.append(
            f"| {row['repeats']} | {instances} | {row['measurement_noise']:.0%} | "
            f"{row['scenario']} | "
            f"{row['pooled coverage']:.1%} | {row['own coverage']:.1%} | {called[0]} | "
            f"{called[1]} | {row['pooled half-width']:.3f} | {row['own half-width']:.3f} |")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=500)
    parser.add_argument("--out", default=str(REPO / "docs" / "precision-simulation.md"))
    parser.add_argument("--defaults", action="store_true",
                        help="write docs/design-defaults.md (no simulation) instead")
    parser.add_argument("--held-out", action="store_true",
                        help="write docs/held-out-simulation.md (the best setting's held-out "
                        "estimate) instead")
    args = parser.parse_args(argv)
    if args.defaults:
        write_defaults(REPO / "docs" / "design-defaults.md")
        print("wrote docs/design-defaults.md")
        return 0
    if args.held_out:
        write_held_out(REPO / "docs" / "held-out-simulation.md", args.studies)
        print("wrote docs/held-out-simulation.md")
        return 0
    table, derived = grid(args.studies)
    write_table(table, Path(args.out), args.studies, derived)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
