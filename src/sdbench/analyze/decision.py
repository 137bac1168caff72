"""What a team deploys, from the numbers: the setting to run per workload and load (chosen on
held-out repeats), the throughput-latency front, and claims that cannot say more than their
intervals.

Only deployable cells are candidates (`grid.cell_role`): the calibration pair, untrained heads
and truncated drafts check the pipeline, and cells with drafts accepted at a set rate say what
a method *would* give; neither is a setting to run. Speculation off is always a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.analyze.analysis import (
    OFF,
    _cube,
    _held_out,
    judged,
    own_interval,
    point_basis,
    points_at,
    speculative,
)
from sdbench.analyze.stats import interval_number
from sdbench.plan.grid import DEPLOYABLE

NO_WINNER = "no clear winner"


def by_role(frame: pd.DataFrame, role: str) -> pd.DataFrame:
    """Rows of cells of this role (rows without one: deployable)."""
    roles = frame["role"].fillna(DEPLOYABLE) if "role" in frame else pd.Series(
        DEPLOYABLE, index=frame.index)
    return frame[roles == role]


def decision_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """The rows a descriptive decision figure or table (the front, SLO goodput) shows, and
    whether they are checks: deployable settings and no speculation on deployable targets;
    where the run measured no deployable speculative setting (a calibration run), every row,
    so the figure still shows what the pipeline measured — labelled with its role, never a
    setting to deploy."""
    deployable = by_role(frame, DEPLOYABLE)
    if (deployable["method"] != "vanilla").any():
        return deployable, False
    return frame, True


# --- claims -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    """A sentence that states a direction ("gain", "loss" or "no clear gain") of a ratio with
    its interval; `text` refuses a direction the interval does not carry."""

    subject: str
    direction: str
    mean: float
    low: float
    high: float
    sample: str  # what the interval rests on ("3 repeats × 6 prompts")

    def mde(self) -> float | None:
        """The smallest gain this interval's design would detect with 80 % power (its half
        width on the log scale × (z 0.975 + z 0.8) ÷ z 0.975): what "no clear gain" can
        rule out."""
        if pd.isna(self.low) or pd.isna(self.high) or self.low <= 0:
            return None
        half = (np.log(self.high) - np.log(self.low)) / 2
        return float(np.exp(half * (stats.norm.ppf(0.975) + stats.norm.ppf(0.8))
                            / stats.norm.ppf(0.975)))

    def supported(self) -> bool:
        if pd.isna(self.low) or pd.isna(self.high) or self.low <= 0:
            return self.direction == "no clear gain"
        return {"gain": self.low > 1, "loss": self.high < 1,
                "no clear gain": self.low <= 1 <= self.high}.get(self.direction, False)

    def text(self) -> str:
        if not self.supported():
            raise ValueError(f"claim '{self.direction}' for {self.subject} contradicts its "
                             f"interval [{interval_number(self.low)}, "
                             f"{interval_number(self.high)}]")
        interval = ("no interval" if pd.isna(self.low) or pd.isna(self.high)
                    or self.low == self.high  # (no width: every repeat gave one value)
                    else f"95 % interval [{interval_number(self.low)}, "
                    f"{interval_number(self.high)}]")
        measured = f"{self.mean:.2f}× ({interval}; {self.sample})"
        if self.direction == "gain":
            return f"{self.subject}: speculation pays, {measured}."
        if self.direction == "loss":
            return f"{self.subject}: speculation costs throughput, {measured}."
        mde = self.mde()
        seen = "" if mde is None else f"; this design could not see gains below {mde:.2f}×"
        return f"{self.subject}: no clear gain, {measured}{seen}."


def direction_of(low: float, high: float) -> str:
    """The direction an interval carries."""
    if pd.isna(low) or pd.isna(high):
        return "no clear gain"
    return "gain" if low > 1 else "loss" if high < 1 else "no clear gain"


# --- the recommendation -------------------------------------------------------------------

def point_interval(points: pd.DataFrame | None, target: str, workload: str, level,
                   speculator: str, k) -> tuple[float, float, float, str] | None:
    """One setting's point at one closed-loop load as the point table gives it (`points_at`):
    its speedup, interval and what that interval is (`point_basis`); None where the table has
    no single such point."""
    row = points_at(points, target, workload, level).get(f"{speculator} k={int(k)}")
    if row is None:
        return None
    return (float(row["speedup_mean"]), float(row["speedup_ci_low"]),
            float(row["speedup_ci_high"]), point_basis(row))


# what a recommendation's gain rests on where every fold chose speculation off
OFF_EVERY_FOLD = "speculation off in every fold: no gain to hold out"


def _verdict(choice: str, held: tuple[float, float], own: tuple[float, float],
             lows: list[float]) -> str:
    """A recommendation's verdict that no point's own verdict contradicts: "speculate" where the
    held-out interval and the chosen setting's own interval (the point table's) both lie above
    1; "speculation off" where off is chosen, or both lie below 1, and no setting's own
    interval (`lows`: their lower bounds) lies above 1; else "no clear winner"."""
    above = [pd.notna(b) and b > 1 for b in (held[0], own[0])]
    below = [pd.notna(b) and b < 1 for b in (held[1], own[1])]
    if choice != OFF and all(above):
        return "speculate"
    if (choice == OFF or all(below)) and not any(pd.notna(b) and b > 1 for b in lows):
        return "speculation off"
    return NO_WINNER


def recommendations(frame: pd.DataFrame, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per target, workload and concurrency: the deployable setting to run, speculation off a
    candidate. The choice is judged on repeats it did not see (chosen on all repeats but one,
    measured on the one left out, each in turn): `gain_mean`/`gain_ci_low`/`gain_ci_high` (the
    geometric mean and interval of those held-out speedups, `analysis.held_out_interval`: σ
    from the pooled noise model where `points`, the point table, has it). `verdict`
    (`_verdict`): "speculate" where that interval and the chosen point's own lie above 1,
    "speculation off" where the choice is off or both lie below 1 (and no setting's own interval
    lies above 1), else "no clear winner": a point's own verdict is never contradicted.
    `rivals`: the candidates whose interval (the point table's where `points` has it,
    `analysis.own_interval`; else over their own repeats) overlaps the chosen one's
    (speculation off: 1), as good as far as the data tell.
    `repeats`, `prompts`: what the choice rests on; `gain_from`: what the gain's interval is;
    `heldout_repeats`: the repeats it was judged on (fewer than `repeats` where a pick had
    stopped before the repeat it would hold out, `analysis._held_out`).

    With one repeat there is none to hold out (`analysis.judged`). Where the one deployable
    setting is the only candidate beside speculation off, choosing between them is reading its
    interval against 1, so the gain is the point's own interval (the one the point table
    shows, which exists after one repeat); with several settings the choice among them would
    be judged on the repeat it was made on, and the gain stays without an interval."""
    spec = by_role(speculative(frame), DEPLOYABLE)
    spec = spec[spec["load"] == "concurrency"] if "load" in spec else spec
    rows = []
    for (target, workload), group in spec.groupby(["target", "workload"]):
        cube = _cube(group)
        prompts = group.groupby("concurrency")["num_prompts"].max()
        for level in sorted(cube.columns.get_level_values("concurrency").unique()):
            # chosen and held out as the best-setting analysis does (`analysis._held_out`)
            choice, held, picks = _held_out(cube, level)
            at = cube.xs(level, axis=1, level="concurrency")
            found = points_at(points, target, workload, level)
            gain, low, high, gain_from = judged(at, found, choice, held, picks)
            if picks and all(pick == OFF for pick in picks):
                # off held out against off in every fold: 1 by construction, not a finding
                gain = low = high = np.nan
                gain_from = OFF_EVERY_FOLD
            speculator, _, k = choice.partition(" k=")
            mean, c_low, c_high = own_interval(at, found, choice)
            rivals = []
            for label in at.index.drop(choice):
                _, o_low, o_high = own_interval(at, found, label)
                if pd.notna(c_low) and pd.notna(o_low) and o_low <= c_high and c_low <= o_high:
                    rivals.append("speculation off" if label == OFF else label)
            decided = _verdict(choice, (low, high), (c_low, c_high),
                               [own_interval(at, found, label)[1] for label in at.index
                                if label != OFF])
            rows.append({"target": target, "workload": workload, "concurrency": int(level),
                         "run": "speculation off" if choice == OFF else choice,
                         "speculator": None if choice == OFF else speculator,
                         "k": None if choice == OFF else int(k),
                         "mean": mean, "gain_mean": gain, "gain_ci_low": low,
                         "gain_ci_high": high, "gain_from": gain_from, "verdict": decided,
                         "rivals": ", ".join(rivals) or None,
                         "candidates": len(at.index), "repeats": int(at.shape[1]),
                         "heldout_repeats": len(held),
                         "prompts": int(prompts.get(level)) if pd.notna(
                             prompts.get(level)) else None})
    return pd.DataFrame(rows)


# --- the throughput-latency front ---------------------------------------------------------

def pareto_front(table: pd.DataFrame, throughput: str, latency: str) -> pd.Series:
    """Which rows no other row beats: none has at least this throughput and at most this
    latency, and one of them strictly (rows missing either: not on the front)."""
    values = table[[throughput, latency]].astype(float).to_numpy()
    valid = ~np.isnan(values).any(axis=1)
    front = np.zeros(len(table), dtype=bool)
    for i in np.flatnonzero(valid):
        t, lat = values[i]
        others = values[valid]
        dominated = ((others[:, 0] >= t) & (others[:, 1] <= lat)
                     & ((others[:, 0] > t) | (others[:, 1] < lat))).any()
        front[i] = not dominated
    return pd.Series(front, index=table.index)


def front_points(points: pd.DataFrame, latency: str = "p90_tpot_ms") -> pd.DataFrame:
    """Closed-loop server points of deployable settings (and no speculation; `decision_rows`)
    with output tokens/s per GPU, the latency and `on_front` per target and workload."""
    serve, _ = decision_rows(points[(points["engine"] == "serve")
                                    & (points["load"] == "concurrency")])
    column = f"{latency}_mean"
    if serve.empty or column not in serve:
        return pd.DataFrame()
    gpus = serve["gpus"].fillna(1).clip(lower=1) if "gpus" in serve else 1
    table = serve.assign(throughput_per_gpu=serve["output_throughput_mean"] / gpus,
                         latency=serve[column]).dropna(subset=["throughput_per_gpu", "latency"])
    table = table.copy()
    table["on_front"] = False
    for _, group in table.groupby(["target", "workload"]):
        table.loc[group.index, "on_front"] = pareto_front(group, "throughput_per_gpu",
                                                          "latency")
    return table
