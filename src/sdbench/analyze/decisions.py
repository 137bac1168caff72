"""The study's decisions, computed once by the summary stage: one table (results/decisions.csv
and .parquet) that the round reports, the index and the terminal display without computing a
statistic again.

A row is one decision of one kind (`decision`):

- `recommendation`: per round, target, workload and closed-loop concurrency, the deployable
  setting to run (speculation off a candidate), judged on held-out repeats
  (`decision.recommendations`); where speculation off is chosen, `best_*` name the best
  deployable setting it was judged against and its interval (the point table's, else over its
  repeats), which the bottom line cites.
- `crossover`: round 1's concurrency where a setting's speedup falls below 1, with its
  confidence set (`analysis.crossover`), ending where a point's own interval lies below 1
  (`with_point_verdicts`).
- `switch_gain`: round 1's gain of switching settings with load (`analysis.switch_gain`).
- `precision`: the noise measured per class of points, the minimum detectable speedup and the
  starts that would resolve ±5 % and ±10 % (`noise.precision`, over the whole study; `round`
  empty).
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path

import pandas as pd

from sdbench.analyze.aggregate import DYNAMIC_K_SETTINGS
from sdbench.analyze.analysis import crossover, switch_gain
from sdbench.analyze.decision import by_role, point_interval, recommendations
from sdbench.analyze.noise import point_noise, precision
from sdbench.analyze.stats import ratio_interval
from sdbench.files import atomic_path
from sdbench.plan.config import ROUNDS
from sdbench.plan.grid import DEPLOYABLE

RECOMMENDATION, CROSSOVER, SWITCH_GAIN, PRECISION = (
    "recommendation", "crossover", "switch_gain", "precision")
KINDS = (RECOMMENDATION, CROSSOVER, SWITCH_GAIN, PRECISION)


def in_round(table: pd.DataFrame, round_name: str) -> pd.DataFrame:
    """A round's rows as its report reads them: round 1 with the dynamic-K cells derived from
    it, round 3 without them (they are recorded under round 3 but compared in round 1)."""
    rows = table["round"] == round_name
    derived = table["setting"].isin(DYNAMIC_K_SETTINGS)
    if round_name == "round1":
        rows |= derived
    elif round_name == "round3":
        rows &= ~derived
    return table[rows]


# the round the dynamic-K cells are read in, as every page and table names it
DYNAMIC_K_ROUND = "round1 (dynamic K)"


def shown_round(round_name: str, setting: str | None) -> str:
    """The round a row is read in, by name: the dynamic-K cells (`in_round`) are recorded under
    round 3 but compared in round 1, so the index, the points tables and what was spent call
    them so (a row of another setting keeps its round)."""
    return DYNAMIC_K_ROUND if setting in DYNAMIC_K_SETTINGS else round_name


def shown_rounds(table: pd.DataFrame) -> list[str]:
    """`shown_round` of each row of a summary table (one without settings: their rounds)."""
    settings = table["setting"] if "setting" in table else [None] * len(table)
    return [shown_round(r, s) for r, s in zip(table["round"], settings, strict=True)]


def closed_loop(frame: pd.DataFrame) -> pd.DataFrame:
    """The vLLM server's closed-loop rows: what the decisions per load are about (a table
    without engine and load columns is all such rows)."""
    if "engine" not in frame:
        return frame
    return frame[(frame["engine"] == "serve") & (frame["load"] == "concurrency")]


def _judged_against(frame: pd.DataFrame, points: pd.DataFrame, row) -> dict:
    """Where speculation off is chosen: the best deployable setting there (by its mean over its
    repeats), with its point's interval (over its repeats where the point table lacks it)."""
    at = by_role(frame, DEPLOYABLE)
    at = at[(at["target"] == row["target"]) & (at["workload"] == row["workload"])
            & (at["concurrency"] == row["concurrency"]) & at["paired"].fillna(False)
            & (at["method"] != "vanilla")]
    if at.empty:
        return {}
    means = at.groupby(["speculator", "k"])["speedup"].apply(
        lambda s: ratio_interval(s.to_numpy()))
    (speculator, k), (mean, low, high) = max(means.items(), key=lambda kv: kv[1][0])
    basis = None
    if found := point_interval(points, row["target"], row["workload"], row["concurrency"],
                               speculator, k):
        mean, low, high, basis = found
    return {"best_speculator": speculator, "best_k": k, "best_mean": mean, "best_ci_low": low,
            "best_ci_high": high, "best_from": basis,
            "best_repeats": at["repeat"].nunique(), "best_prompts": at["num_prompts"].max()}


def round_recommendations(summary: pd.DataFrame, points: pd.DataFrame,
                          round_name: str) -> pd.DataFrame:
    """A round's recommendations (closed-loop server rows), each chosen-off row with the
    setting it was judged against."""
    frame = closed_loop(in_round(summary, round_name))
    rows = in_round(points, round_name)
    table = recommendations(frame, rows)
    if table.empty:
        return table
    against = [_judged_against(frame, rows, row) if row["run"] == "speculation off" else {}
               for _, row in table.iterrows()]
    return pd.concat([table.reset_index(drop=True), pd.DataFrame(against)], axis=1)


def _clearly_below(points: pd.DataFrame, row) -> list[int]:
    """The levels at which a crossover row's setting has a point whose own interval (the one
    the point table, the recommendations and the bottom line show) lies below 1."""
    at = closed_loop(points)
    at = at[(at["target"] == row["target"]) & (at["workload"] == row["workload"])
            & (at["speculator"] == row["speculator"]) & (at["k"] == row["k"])
            & (at["verdict"] == "no speculation")]
    return sorted(int(c) for c in at["concurrency"].dropna())


def with_point_verdicts(table: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Crossovers that agree with the points' own verdicts: where a level's point interval lies
    below 1 (an adaptive point reports the interval it stopped on, or a wider sequential one,
    so it can differ from the noise model's at that level) the crossover's confidence set ends
    there, and its reading says so; one verdict per point everywhere."""
    if table.empty or "verdict" not in points:
        return table
    table = table.copy()
    for i, row in table.iterrows():
        below = _clearly_below(points, row)
        if not below or (pd.notna(row["crossover_high"]) and row["crossover_high"] <= below[0]):
            continue
        first = below[0]
        cross = row["crossover"] if pd.notna(row["crossover"]) else float(first)
        low = row["crossover_low"] if pd.notna(row["crossover_low"]) else cross
        table.loc[i, ["crossover", "crossover_low", "crossover_high", "established"]] = [
            min(cross, first), min(low, first), float(first), True]
        table.loc[i, "reading"] = (f"below 1 from concurrency {first} (its point's own "
                                   "interval lies below 1)")
    return table


def decisions(summary: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Every decision of the study (see the module), one table."""
    parts = []
    noise = point_noise(summary)
    for round_name in ROUNDS:
        if not (summary["round"] == round_name).any():
            continue
        parts.append(round_recommendations(summary, points, round_name).assign(
            decision=RECOMMENDATION, round=round_name))
        if round_name == "round1":
            # round 1's own closed-loop server rows (without the derived dynamic-K cells)
            frame = closed_loop(summary[summary["round"] == round_name])
            round_points = in_round(points, round_name)
            parts += [with_point_verdicts(crossover(frame, noise), round_points).assign(
                          decision=CROSSOVER, round=round_name),
                      switch_gain(frame, noise).assign(decision=SWITCH_GAIN, round=round_name)]
    parts.append(precision(summary).assign(decision=PRECISION))
    return combine(parts)


def combine(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Decisions of several kinds (each part: one kind's rows, its `decision` column set) as
    one table: each kind's own columns, and which of them hold integers (the table turns them
    into floats where another kind has none), kept in its `attrs` (and the Parquet file's
    metadata) for `of_kind`."""
    parts = [p for p in parts if not p.empty]
    first = ["decision", "round"]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=first)
    table = table[first + [c for c in table.columns if c not in first]]
    table.attrs["kinds"] = {
        p["decision"].iloc[0]: {"columns": list(p.columns),
                                "integers": [c for c in p.columns
                                             if pd.api.types.is_integer_dtype(p[c])],
                                "numbers": [c for c in p.columns
                                            if pd.api.types.is_numeric_dtype(p[c])]}
        for p in parts}
    return table


def of_kind(table: pd.DataFrame, kind: str, round_name: str | None = None) -> pd.DataFrame:
    """The decisions of one kind (of one round), with that kind's columns and types."""
    rows = table[table["decision"] == kind]
    if round_name is not None:
        rows = rows[rows["round"] == round_name]
    spec = table.attrs.get("kinds", {}).get(kind, {"columns": [], "integers": [], "numbers": []})
    rows = rows[spec["columns"]].reset_index(drop=True)
    for column in spec["integers"]:
        values = rows[column]
        rows[column] = values.astype("int64" if values.notna().all() else "Int64")
    for column in rows.columns[rows.isna().all()]:
        if column not in spec.get("numbers", ()):  # (None into the file, NaN out of it)
            rows[column] = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    return rows


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def write_decisions(table: pd.DataFrame, parquet: str | Path) -> None:
    """The table as Parquet and, beside it, CSV (Parquet keeps one type a column: object
    columns of numbers as floats, of several other types as text)."""
    out = table.copy()
    for column in [c for c in out.columns if out[c].dtype == "object"]:
        values = [v for v in out[column] if not _missing(v)]
        if all(isinstance(v, numbers.Number) and not isinstance(v, bool) for v in values):
            out[column] = pd.to_numeric(out[column].map(lambda v: None if _missing(v) else v),
                                        errors="coerce")
        elif len({type(v) for v in values}) > 1:
            out[column] = out[column].map(lambda v: v if _missing(v) else str(v))
    with atomic_path(parquet) as tmp:
        out.to_parquet(tmp, index=False)
    with atomic_path(Path(parquet).with_suffix(".csv")) as tmp:
        out.to_csv(tmp, index=False)


def read_decisions(path: str | Path) -> pd.DataFrame:
    return pd.read_parquet(path)
