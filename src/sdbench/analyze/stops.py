"""The report's check of every adaptive stop (`sdbench.measure.stopping`): each stopped point's
decision recomputed from the stored records — its paired repeats before the stop, the spread of
the repeats of the cells the stop says it pooled at its level (σ pooled with the rule's prior)
— and compared with what was stored; and, per round, what the adaptive rule saved.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sdbench.analyze.stats import interval_number
from sdbench.layout import SummaryTables
from sdbench.metrics import SPEEDUPS
from sdbench.plan import adaptive

LEVEL = ["concurrency", "request_rate"]
COLUMNS = ["cell_id", *LEVEL, "reason", "repeats", "looks", "holds", "why"]


def _looks(frame: pd.DataFrame, before: int, metric: str = "speedup",
           against: pd.DataFrame | None = None) -> tuple[np.ndarray, list[int]]:
    """The paired log speedups (`metric`: the throughput's, or the TPOT's that a stop at an
    open-loop rate reads) of the repeats before `before`, in repeat order, and the server start
    (instance: a chained cell's stage) each was measured on; `against`: another cell's records
    at the level (cells measured in turn, `stopping.turn_stops`), the speedups then over its
    repeats (the ratio of the metric's column, repeat by repeat)."""
    mine = frame[(frame["status"] == "ok") & (frame["repeat"] < before)]
    if against is not None:
        speedup = SPEEDUPS[metric]
        values = [part[(part["status"] == "ok") & (part["repeat"] < before)].set_index(
            "repeat")[speedup.metric] for part in (frame, against)]
        ratio = speedup.ratio(values[0], values[1]).dropna().sort_index()
        ratio = ratio[ratio > 0]
        repeats = list(ratio.index)
        ys = np.log(ratio.to_numpy(float))
    else:
        mine = mine[mine[metric].notna()].sort_values("repeat")
        repeats = list(mine["repeat"])
        ys = np.log(mine[metric].to_numpy(float))
    instances = (dict(zip(mine["repeat"], mine["server_instance"], strict=True))
                 if "server_instance" in mine else {})
    return ys, [0 if pd.isna(instances.get(r)) else int(instances[r]) for r in repeats]


def _log_speedups(frame: pd.DataFrame, before: int, metric: str = "speedup",
                  against: pd.DataFrame | None = None) -> np.ndarray:
    """The paired log speedups of the repeats before `before` (`_looks`)."""
    return _looks(frame, before, metric, against)[0]


def recheck_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative point an adaptive rule stopped: its decision as stored, as
    recomputed, and whether it holds (`holds`; `why` when not)."""
    if "stop" not in frame:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for _, level in frame.groupby(LEVEL, dropna=False, sort=False):
        stopped = level[(level["status"] == "stopped") & level["stop"].notna()
                        & (level["method"] != "vanilla")]
        for row in stopped.sort_values("repeat").drop_duplicates("cell_id").itertuples():
            stop = json.loads(row.stop)
            try:
                why = (_level_recheck(frame, row.cell_id, stop)
                       if stop["reason"] == adaptive.LEVEL else
                       _lead_recheck(level, stop) if stop["reason"] == adaptive.BASELINE else
                       _recheck(level, row, stop))
            except (KeyError, TypeError) as exc:
                why = f"the stored stop lacks {exc}"
            rows.append({"cell_id": row.cell_id, "concurrency": row.concurrency,
                         "request_rate": row.request_rate, "reason": stop.get("reason"),
                         "repeats": stop.get("repeats"), "looks": stop.get("looks"),
                         "holds": why is None, "why": why})
    return pd.DataFrame(rows, columns=COLUMNS)


def _lead_recheck(level: pd.DataFrame, stop: dict) -> str | None:
    """The stop of a cell that others measured in turn stop against (`stopping.turn_stops`'s
    static k) recomputed: every cell that stops against it has its repeat stopped too."""
    partners = level[level["cell_id"].isin(stop["partners"])
                     & (level["repeat"] == stop["before_repeat"])]
    going = sorted(partners.loc[partners["status"] != "stopped", "cell_id"])
    if going:
        return (f"{', '.join(going)} measured repeat {stop['before_repeat']}: the cell it is "
                "paired against should have been measured")
    return None


def _closed(concurrency) -> int | None:
    """A record's closed-loop level (None at an open-loop rate)."""
    return None if concurrency is None or pd.isna(concurrency) else int(concurrency)


def _recheck(level: pd.DataFrame, row, stop: dict) -> str | None:
    """A sequential stop recomputed from its level's records (None: it holds)."""
    before, metric = stop["before_repeat"], stop.get("metric", "speedup")
    # cells measured in turn: their speedups over the cell they stopped against
    against = (level[level["cell_id"] == stop["against"]] if "against" in stop else None)
    ys, own = _looks(level[level["cell_id"] == row.cell_id], before, metric, against)
    pooled = level[level["cell_id"].isin(stop.get("pooled_cells") or [row.cell_id])]
    # (a chain's look inside a whole repeat: σ pooled over each cell's repeats as far as the
    # look saw them, `seen_before`; stops stored before 2026-12-04 say only group_before,
    # how far it saw every cell's: as of the repeat's first block)
    group_before = stop.get("group_before", before)
    seen = stop.get("seen_before") or {}
    looks = [_looks(cell, seen.get(cell_id, group_before), metric, against)
             for cell_id, cell in pooled.groupby("cell_id")]
    rule = adaptive.Rule(**stop["rule"]).at(stop.get("blocks", 1), _closed(row.concurrency))
    sigma, _ = adaptive.rule_sigma(rule, looks, own, bool(stop.get("several_starts")))
    if not math.isclose(sigma, stop["sigma"], rel_tol=1e-9):
        return f"σ recomputed {sigma:.4g}, stored {stop['sigma']:.4g}"
    return adaptive.recheck(stop, ys)


def _level_decisions(frame: pd.DataFrame, level: float, cells: list, rule,
                     metric: str = "speedup") -> dict | None:
    """`adaptive.level_decisions` at a level from the records of `cells` there (a closed-loop
    concurrency; an open-loop request rate where `metric` is the TPOT speedup its stops read);
    None where none of them was measured there."""
    column = "request_rate" if metric == "tpot_speedup" else "concurrency"
    at = frame[(frame[column] == level) & frame["cell_id"].isin(cells)]
    if not (at["status"] == "ok").any():
        return None
    looks = {cell_id: _looks(rows, math.inf, metric) for cell_id, rows in at.groupby("cell_id")}
    return adaptive.level_decisions(
        {cell_id: (str(rows["speculator"].iloc[0]), list(looks[cell_id][0]), len(rows),
                   looks[cell_id][1]) for cell_id, rows in at.groupby("cell_id")}, rule)


def _level_recheck(frame: pd.DataFrame, cell_id: str, stop: dict) -> str | None:
    """A level (or open-loop rate) the bisection left out (for `cell_id`), recomputed: its
    neighbours' decisions from their records, and whether they leave this cell out."""
    rule = adaptive.Rule(**stop["rule"])
    blocks = stop.get("blocks") or {}
    metric = stop.get("metric", "speedup")
    found = {str(c): _level_decisions(
        frame, c, stop["pooled_cells"],
        rule.at(blocks.get(str(c), 1), c if metric == "speedup" else None), metric)
             for c in (stop["lower"], stop["upper"])}
    if any(d is None for d in found.values()):
        return None if "decisions" not in stop else "a neighbour has no measured repeats"
    if "decisions" not in stop:
        return "both neighbours were measured, the stop says one was not"
    if json.loads(json.dumps(found)) != stop["decisions"]:
        return f"neighbours' decisions recomputed {found}, stored {stop['decisions']}"
    contenders = adaptive.level_contenders(*found.values())
    if contenders is not None and cell_id in contenders:
        return "the neighbours' decisions make this cell a contender: it should be measured"
    if sorted(contenders or []) != stop["contenders"]:
        return f"contenders recomputed {sorted(contenders or [])}, stored {stop['contenders']}"
    return None


def savings(frame: pd.DataFrame) -> pd.DataFrame:
    """Per round: runs planned (every repeat of every level; a repeat split into b blocks of
    prompts, `specs.point_blocks`, b runs), measured and stopped, the same in repeats' worth (a
    block 1/b of a repeat), and the measuring time (the load generator's duration of the
    measured ones)."""
    planned = frame[frame["status"] != "unsupported"]
    rows = []
    for round_name, group in planned.groupby("round", sort=True):
        measured = group[group["status"].isin(["ok", "invalid"])]
        stopped = group[group["status"] == "stopped"]
        seconds = float(measured["duration"].sum()) if "duration" in measured else math.nan
        per_point = seconds / len(measured) if len(measured) else math.nan
        rows.append({"round": round_name, "planned": len(group), "measured": len(measured),
                     "stopped": len(stopped), "planned_repeats": _repeats_worth(group),
                     "measured_repeats": _repeats_worth(measured), "measuring_s": seconds,
                     "saved_s_estimate": per_point * len(stopped)})
    return pd.DataFrame(rows, columns=["round", "planned", "measured", "stopped",
                                       "planned_repeats", "measured_repeats", "measuring_s",
                                       "saved_s_estimate"])


def _repeats_worth(runs: pd.DataFrame) -> float:
    """Runs counted in whole repeats: a block of 1/b of a repeat's prompts counts 1/b."""
    if "blocks" not in runs:
        return float(len(runs))
    return float((1.0 / runs["blocks"].fillna(1).clip(lower=1)).sum())


def compare_designs(full: pd.DataFrame, adapt: pd.DataFrame, frame: pd.DataFrame) -> list[str]:
    """Markdown lines: the same sweep measured in full and adaptively (each run's summary
    points; `frame`: the adaptive run's records) — per point both designs' repeats, speedup and
    verdict and why the adaptive one stopped; then point-repeats measured, verdicts agreeing,
    the best k per concurrency and whether the full run's intervals tell it from their own
    best, and every stop recomputed."""
    keys = ["concurrency", "k"]
    spec = [p[(p["method"] != "vanilla") & p["concurrency"].notna()].set_index(keys)
            for p in (full, adapt)]

    def cell(row) -> str:
        if row is None or pd.isna(row["speedup_mean"]):
            return "not measured"
        return (f"{int(row['repeats_paired'])}, {row['speedup_mean']:.2f}× "
                f"[{interval_number(row['speedup_ci_low'])}, "
                f"{interval_number(row['speedup_ci_high'])}], {row['verdict']}")

    lines = ["| concurrency | k | full: repeats, speedup [95 %], verdict | adaptive: repeats, "
             "speedup [95 %], verdict | why the adaptive point stopped |",
             "| --- | --- | --- | --- | --- |"]
    same = both = 0
    for key in sorted(spec[0].index):
        mine = spec[1].loc[key] if key in spec[1].index else None
        theirs = spec[0].loc[key]
        if mine is not None and pd.notna(mine["speedup_mean"]):
            both += 1
            same += mine["verdict"] == theirs["verdict"]
        why = (mine.get("stop_reason") if mine is not None else None) or "ran to the cap"
        lines.append(f"| {int(key[0])} | {int(key[1])} | {cell(theirs)} | {cell(mine)} | {why} |")
    measured = [int(p["repeats_ok"].sum()) for p in (full, adapt)]
    lines += ["", f"- point-repeats measured (every cell, the baseline's too): adaptive "
              f"{measured[1]} of the full run's {measured[0]} ({measured[1] / measured[0]:.0%})",
              f"- same verdict at {same} of the {both} points both measured"]
    for level, theirs in spec[0].groupby(level="concurrency"):
        if theirs["speedup_mean"].isna().all():
            continue  # (a level the full run did not measure)
        best = theirs["speedup_mean"].idxmax()[1]
        mine = spec[1].xs(level, level="concurrency") if level in spec[1].index.get_level_values(
            "concurrency") else pd.DataFrame()
        mine = mine[mine["speedup_mean"].notna()] if len(mine) else mine
        if not len(mine):
            lines.append(f"- concurrency {int(level)}: full best k = {best}; adaptive: level "
                         "left out by the bisection (its neighbours' verdicts agree)")
            continue
        pick = int(mine["speedup_mean"].idxmax())
        low = theirs.loc[(level, best), "speedup_ci_low"]
        told = theirs.loc[(level, pick), "speedup_ci_high"] < low
        lines.append(f"- concurrency {int(level)}: full best k = {best}, adaptive best k = {pick}"
                     + ("" if pick == best else
                        f" ({'told apart' if told else 'not told apart'} by the full run's "
                        "intervals)"))
    checks = recheck_frame(frame)
    lines.append(f"- stops recomputed from the records: {int(checks['holds'].sum())} of "
                 f"{len(checks)} hold")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compare a sweep measured in full and "
                                     "adaptively (two working directories' summaries).")
    parser.add_argument("full", help="the full run's working directory")
    parser.add_argument("adaptive", help="the adaptive run's working directory")
    args = parser.parse_args(argv)
    tables = SummaryTables()
    read = lambda root, path: pd.read_parquet(Path(root) / path)  # noqa: E731
    print("\n".join(compare_designs(read(args.full, tables.points),
                                    read(args.adaptive, tables.points),
                                    read(args.adaptive, tables.summary))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
