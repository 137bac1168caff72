"""The report's check of every adaptive stop (`sdbench.measure.stopping`): each stopped point's
decision recomputed from the stored records — its paired repeats before the stop, the spread of
the repeats of the cells the stop says it pooled at its level (σ pooled with the rule's prior)
— and compared with what was stored; and, per round, what the adaptive rule saved.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from sdbench.plan import adaptive

LEVEL = ["concurrency", "request_rate"]


def _same_level(frame: pd.DataFrame, row) -> pd.Series:
    out = pd.Series(True, index=frame.index)
    for column in LEVEL:
        value = getattr(row, column)
        out &= frame[column].isna() if pd.isna(value) else frame[column] == value
    return out


def _log_speedups(frame: pd.DataFrame, before: int) -> np.ndarray:
    paired = frame[(frame["status"] == "ok") & frame["speedup"].notna() & (frame["repeat"]
                                                                            < before)]
    return np.log(paired.sort_values("repeat")["speedup"].to_numpy(float))


def recheck_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative point an adaptive rule stopped: its decision as stored, as
    recomputed, and whether it holds (`holds`; `why` when not)."""
    rows = []
    if "stop" not in frame:
        return pd.DataFrame(columns=["cell_id", *LEVEL, "reason", "holds", "why"])
    stopped = frame[(frame["status"] == "stopped") & frame["stop"].notna()
                    & (frame["method"] != "vanilla")]
    for row in stopped.sort_values("repeat").drop_duplicates(["cell_id", *LEVEL]).itertuples():
        stop = json.loads(row.stop)
        level = frame[_same_level(frame, row)]
        ys = _log_speedups(level[level["cell_id"] == row.cell_id], stop["before_repeat"])
        ss = df = 0.0
        pooled = stop.get("pooled_cells") or [row.cell_id]
        for _, partner in level[level["cell_id"].isin(pooled)].groupby("cell_id"):
            values = _log_speedups(partner, stop["before_repeat"])
            if len(values) > 1:
                ss += float(np.sum((values - values.mean()) ** 2))
                df += len(values) - 1
        rule = adaptive.Rule(**stop["rule"])
        sigma, _ = adaptive.pooled_sigma(rule, ss, df)
        why = None
        if not math.isclose(sigma, stop["sigma"], rel_tol=1e-9):
            why = f"σ recomputed {sigma:.4g}, stored {stop['sigma']:.4g}"
        why = why or adaptive.recheck(stop, ys)
        rows.append({"cell_id": row.cell_id, "concurrency": row.concurrency,
                     "request_rate": row.request_rate, "reason": stop["reason"],
                     "repeats": stop["repeats"], "looks": stop["looks"],
                     "holds": why is None, "why": why})
    return pd.DataFrame(rows, columns=["cell_id", *LEVEL, "reason", "repeats", "looks", "holds",
                                       "why"])


def savings(frame: pd.DataFrame) -> pd.DataFrame:
    """Per round: points planned (every repeat of every level), measured and stopped, and the
    measuring time (the load generator's duration of the measured ones)."""
    planned = frame[frame["status"] != "unsupported"]
    rows = []
    for round_name, group in planned.groupby("round", sort=True):
        measured = group[group["status"].isin(["ok", "invalid"])]
        stopped = group[group["status"] == "stopped"]
        seconds = float(measured["duration"].sum()) if "duration" in measured else math.nan
        per_point = seconds / len(measured) if len(measured) else math.nan
        rows.append({"round": round_name, "planned": len(group), "measured": len(measured),
                     "stopped": len(stopped), "measuring_s": seconds,
                     "saved_s_estimate": per_point * len(stopped)})
    return pd.DataFrame(rows, columns=["round", "planned", "measured", "stopped", "measuring_s",
                                       "saved_s_estimate"])
