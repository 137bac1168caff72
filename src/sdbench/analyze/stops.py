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
COLUMNS = ["cell_id", *LEVEL, "reason", "repeats", "looks", "holds", "why"]


def _log_speedups(frame: pd.DataFrame, before: int) -> np.ndarray:
    paired = frame[(frame["status"] == "ok") & frame["speedup"].notna() & (frame["repeat"]
                                                                            < before)]
    return np.log(paired.sort_values("repeat")["speedup"].to_numpy(float))


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
            before = stop["before_repeat"]
            ys = _log_speedups(level[level["cell_id"] == row.cell_id], before)
            pooled = level[level["cell_id"].isin(stop.get("pooled_cells") or [row.cell_id])]
            ss, df = adaptive.spread(_log_speedups(cell, before)
                                     for _, cell in pooled.groupby("cell_id"))
            sigma, _ = adaptive.pooled_sigma(adaptive.Rule(**stop["rule"]), ss, df)
            why = (None if math.isclose(sigma, stop["sigma"], rel_tol=1e-9)
                   else f"σ recomputed {sigma:.4g}, stored {stop['sigma']:.4g}")
            why = why or adaptive.recheck(stop, ys)
            rows.append({"cell_id": row.cell_id, "concurrency": row.concurrency,
                         "request_rate": row.request_rate, "reason": stop["reason"],
                         "repeats": stop["repeats"], "looks": stop["looks"],
                         "holds": why is None, "why": why})
    return pd.DataFrame(rows, columns=COLUMNS)


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
