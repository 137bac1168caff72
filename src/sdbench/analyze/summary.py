"""The summary stage: every table the reports read, from the cells' files, in one place.

The summary rule and the salvage of a failed run both call `write_tables`; a report reads only
these tables (`SummaryTables`), so every file behind a report is an input of the summary rule
and Snakemake knows when a report is stale:

  measurements  one row per measurement: speedups paired by repeat, the lossless check
  points        one row per point: means and 95 % intervals over repeats
  buckets       per-bucket TPOT speedups of prompt sets sent in order (task group of
                Spec-Bench, length bucket of the mixed set), from the per-request detail
  acceptance    per-request acceptance where the engine reported it, by output position
                (`analyze.request_acceptance`)
  schedules     the derived dynamic-K schedules, by the cell that measured them
  cards         the data cards of the prompt sets the cells sent
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sdbench.analyze import request_acceptance
from sdbench.analyze.aggregate import build_summary, write_summary
from sdbench.analyze.decisions import decisions, write_decisions
from sdbench.analyze.lossless import read_all_details
from sdbench.files import atomic_path, atomic_write_json
from sdbench.layout import SummaryTables, card_path, processed_path
from sdbench.records import LoadPoint

# a row per (measurement, bucket); round, engine and load select a report's rows, as in the
# measurements table
BUCKET_COLUMNS = ["round", "cell_id", "engine", "load", "setting", "speculator", "k", "target",
                  "workload", "concurrency", "repeat", "bucket", "tpot_speedup", "requests"]


def write_tables(tables: SummaryTables, record_files: list[str | Path],
                 partial_files: list[str | Path], max_failure_share: float,
                 model_dirs: dict[str, str], index: dict | None = None,
                 schedule_files: list[str | Path] = (), root: str | Path = ".") -> tuple:
    """Write every table; returns (measurements, points). Record files without a per-request
    sidecar (an unfinished cell's) are summarised without per-bucket speedups."""
    details = read_all_details(record_files)
    frame, points = build_summary(record_files, partial_files, max_failure_share, model_dirs,
                                  index, details)
    write_frames(tables, frame, points, details, schedule_files, root)
    return frame, points


def write_frames(tables: SummaryTables, frame: pd.DataFrame, points: pd.DataFrame,
                 details: dict[str, dict] | None = None, schedule_files=(),
                 root: str | Path = ".") -> None:
    """Write the tables of a summarised run (`aggregate.build_summary`'s frames; details: the
    per-request detail, cell id -> point -> detail)."""
    write_summary(frame, tables.summary, tables.summary_csv)
    write_summary(points, tables.points, tables.points_csv)
    cards = read_cards(frame, root)
    buckets = bucket_speedups(frame, details or {}, cards, root)
    with atomic_path(tables.buckets) as tmp:
        buckets.to_parquet(tmp, index=False)
    acceptance = acceptance_table(frame, details or {}, cards, root)
    with atomic_path(tables.acceptance) as tmp:
        acceptance.to_parquet(tmp, index=False)
    atomic_write_json(tables.schedules, read_schedules(schedule_files))
    atomic_write_json(tables.cards, cards)
    write_decisions(decisions(frame, points), tables.decisions)


def read_schedules(schedule_files) -> dict[str, dict]:
    """cell id -> {target, workload, speculator, schedule, static_k, arms} of each derived
    dynamic-K cell, one per model runner it was measured under (static_k: the best static k
    measured beside it; arms: the ids of the cells that took turns, each runner's derived one
    last; None in a schedule derived before they were)."""
    out = {}
    for path in schedule_files:
        entry = json.loads(Path(path).read_text())
        for cell_id in entry.get("derived_cells") or [entry["cell_id"]]:
            out[cell_id] = {**{key: entry[key] for key in
                               ("target", "workload", "speculator", "schedule")},
                            "static_k": entry.get("static_k"), "arms": entry.get("arms")}
    return out


def read_cards(frame: pd.DataFrame, root: str | Path = ".") -> dict[str, dict | None]:
    """"dataset/subset" -> the data card of each prompt set the records sent (None if the
    card is missing: the report says so)."""
    cards = {}
    for dataset, subset in sorted(set(zip(frame["dataset"], frame["subset"], strict=True))):
        path = Path(root) / card_path(dataset, subset)
        cards[f"{dataset}/{subset}"] = json.loads(path.read_text()) if path.exists() else None
    return cards


def _buckets(dataset: str, subset: str, card: dict | None, root: Path) -> list[str | None]:
    """Each prompt's bucket (length bucket of the mixed set, task group of Spec-Bench), in the
    order the prompts are sent; none where the load generator shuffles them (its card says
    so): a request cannot be mapped to its prompt by position then."""
    path = root / processed_path(dataset, subset)
    if not path.exists() or not (card or {}).get("ordered"):
        return []
    return [(row.get("bucket") or row.get("task")) for row in
            (json.loads(line) for line in path.read_text().splitlines() if line)]


def speculative_server_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured speculative points of the vLLM server (those with per-request detail)."""
    return frame[(frame["method"] != "vanilla") & (frame["status"] == "ok")
                 & (frame["engine"] == "serve")]


def acceptance_table(frame: pd.DataFrame, details: dict[str, dict],
                     cards: dict[str, dict | None], root: str | Path = ".") -> pd.DataFrame:
    """Per-request acceptance of every speculative server measurement whose detail has it
    (`request_acceptance.acceptance_rows`), each request with its bucket where its prompt set
    was sent in order."""
    root = Path(root)
    spec = speculative_server_rows(frame)
    rows: list[dict] = []
    sets: dict[tuple, list] = {}
    for _, row in spec.iterrows():
        point = LoadPoint.of(row["concurrency"], row.get("request_rate"), row["repeat"]).key
        detail = details.get(row["cell_id"], {}).get(point)
        if not detail or not detail.get("spec_decode"):
            continue
        key = (row["dataset"], row["subset"])
        if key not in sets:
            sets[key] = _buckets(*key, cards.get("/".join(key)), root)
        rows += request_acceptance.acceptance_rows(row.to_dict(), detail, sets[key])
    return request_acceptance.as_frame(rows)


def _tpot_by_bucket(detail: dict, buckets: list) -> dict[str, list[float]]:
    """Time per output token (after the first) of each request of each bucket; requests are
    in prompt-file order (the workload is sent unshuffled)."""
    per: dict[str, list[float]] = {}
    for i, (latency, ttft, out_len, err) in enumerate(zip(
            detail["latencies"], detail["ttfts"], detail["output_lens"], detail["errors"],
            strict=True)):
        if err or out_len is None or out_len < 2 or i >= len(buckets) or buckets[i] is None:
            continue
        per.setdefault(buckets[i], []).append((latency - ttft) / (out_len - 1))
    return per


def bucket_speedups(frame: pd.DataFrame, details: dict[str, dict],
                    cards: dict[str, dict | None], root: str | Path = ".") -> pd.DataFrame:
    """TPOT speedup (baseline TPOT ÷ TPOT) per bucket of a prompt set sent in order, paired by
    repeat, with the number of requests it rests on, from the per-request detail (`details`:
    cell id -> point -> detail; `cards`: `read_cards`). vLLM server points only: the offline
    engine and Transformers time no first token."""
    root = Path(root)
    spec = speculative_server_rows(frame)
    rows = []
    sets: dict[tuple, list] = {}  # each prompt file read once, not once per row
    for _, row in spec.iterrows():
        key = (row["dataset"], row["subset"])
        if key not in sets:
            sets[key] = _buckets(*key, cards.get("/".join(key)), root)
        buckets = sets[key]
        if not any(buckets):
            continue
        point = LoadPoint.of(row["concurrency"], row.get("request_rate"), row["repeat"]).key
        mine = details.get(row["cell_id"], {}).get(point)
        base = details.get(row["baseline_cell_id"], {}).get(point)
        if mine is None or base is None:
            continue
        ours, theirs = _tpot_by_bucket(mine, buckets), _tpot_by_bucket(base, buckets)
        for bucket, tpots in ours.items():
            if bucket in theirs and np.mean(tpots) > 0:
                rows.append({**{c: row.get(c) for c in BUCKET_COLUMNS[:-3]},
                             "bucket": bucket,
                             "tpot_speedup": float(np.mean(theirs[bucket]) / np.mean(tpots)),
                             # the requests the bucket's mean rests on (speculative side)
                             "requests": len(tpots)})
    return pd.DataFrame(rows, columns=BUCKET_COLUMNS)
