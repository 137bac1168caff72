"""All cell records -> one tidy table with speedups against the matching vanilla point.

Speedup is measured against no speculation on the same target, server arguments, workload and
concurrency (and repeat): every speculative record names its baseline cell, and the join is on
(baseline cell, concurrency, repeat). A record without a successful baseline point gets no
speedup (NaN), never one computed against something else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .files import atomic_path, read_jsonl

KEY = ["cell_id", "concurrency", "repeat"]
# metric -> (column in the summary, higher is better?)
SPEEDUPS = {
    "speedup": ("total_token_throughput", True),
    "output_speedup": ("output_throughput", True),
    "tpot_speedup": ("mean_tpot_ms", False),
}


def _row(record: dict) -> dict:
    server = record["server_config"]
    workload = record["workload"]
    prov = record["provenance"]
    row = {
        "cell_id": record["cell_id"],
        "round": record["round"],
        "speculator": record["speculator"],
        "method": server["method"],
        "k": server["num_speculative_tokens"],
        "target": server["target"]["name"],
        "quantization": server["target"]["quantization"],
        "draft": server["draft"]["name"] if server["draft"] else None,
        "workload": workload["name"],
        "dataset": workload["dataset"],
        "subset": workload["subset"],
        "num_prompts": workload["num_prompts"],
        "concurrency": record["concurrency"],
        "repeat": record["repeat"],
        "status": record["status"],
        "error": record["error"],
        "baseline_cell_id": record["baseline_cell_id"],
        "vllm_version": prov["vllm"]["version"],
        "vllm_distribution": prov["vllm"]["distribution"],
        "device_kind": prov["device"]["kind"],
        "device": (prov["device"]["gpus"][0]["name"] if prov["device"]["gpus"]
                   else prov["device"]["cpu_model"]),
        "hostname": prov["hostname"],
        "git_commit": prov["workflow"]["commit"],
        "git_dirty": prov["workflow"]["dirty"],
        "dataset_sha256": prov["dataset"]["sha256"],
        "started_at": prov["started_at"],
        "finished_at": prov["finished_at"],
        "server_startup_s": record["server"]["startup_s"],
    }
    for key, value in record["metrics"].items():
        if isinstance(value, list | dict):
            value = json.dumps(value)
        row.setdefault(key, value)
    return row


def records_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame([_row(r) for r in records])
    frame["k"] = frame["k"].astype("Int64")  # integer, empty for vanilla
    duplicated = frame.duplicated(KEY, keep=False)
    if duplicated.any():
        dups = frame.loc[duplicated, KEY].drop_duplicates().to_dict("records")
        raise ValueError(f"several records for the same (cell, concurrency, repeat): {dups}")
    return frame


def add_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """Join each row with its baseline point and add the speedup columns."""
    frame = frame.copy()
    ok = frame["status"] == "ok"
    metrics = [column for column, _ in SPEEDUPS.values()]
    for column in metrics:
        if column not in frame:
            frame[column] = np.nan
    base = frame.loc[ok, KEY + metrics].rename(
        columns={"cell_id": "baseline_cell_id", **{m: f"baseline_{m}" for m in metrics}})
    # vanilla rows are their own baseline
    own = frame["baseline_cell_id"].fillna(frame["cell_id"])
    merged = frame.assign(_base=own).merge(
        base.rename(columns={"baseline_cell_id": "_base"}),
        on=["_base", "concurrency", "repeat"], how="left", validate="many_to_one")
    for name, (column, higher_is_better) in SPEEDUPS.items():
        value, baseline = merged[column].astype(float), merged[f"baseline_{column}"].astype(float)
        ratio = value / baseline if higher_is_better else baseline / value
        merged[name] = ratio.where(merged["status"] == "ok")
    merged["paired"] = merged["speedup"].notna()
    return merged.drop(columns=["_base"])


def summarize(cell_files: list[str | Path], partial_files: list[str | Path] = ()) -> pd.DataFrame:
    """One row per point. `partial_files` are the records of cells that did not finish (after a
    failed run); their rows have cell_complete = False."""
    records = [{**record, "_complete": complete}
               for files, complete in ((cell_files, True), (partial_files, False))
               for path in files for record in read_jsonl(path)]
    if not records:
        raise ValueError("no records in the cell files given")
    frame = records_frame(records)
    frame["cell_complete"] = [r["_complete"] for r in records]
    frame = add_speedups(frame)
    return frame.sort_values(["round", "target", "workload", "method", "k", "concurrency",
                              "repeat"], na_position="first").reset_index(drop=True)


def write_summary(frame: pd.DataFrame, parquet: str | Path, csv: str | Path) -> None:
    with atomic_path(parquet) as tmp:
        frame.to_parquet(tmp, index=False)
    with atomic_path(csv) as tmp:
        frame.to_csv(tmp, index=False)
