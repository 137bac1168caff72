"""Lossless check: greedy outputs with speculation vs without, request by request.

Speculative decoding must not change greedy outputs. Each speculative point's generated texts
are compared with those of its baseline (same target, workload, concurrency, repeat; the load
generator sends the same prompts in the same order, which the prompt lengths confirm):

  lossless_exact_share       share of requests whose text is identical
  lossless_token_agreement   share of token positions (over the longer output) that agree
  lossless_first_divergence  median token position of the first difference, over the requests
                             that differ (None when all agree)

vLLM documents that batch composition can change outputs, so differences at concurrency > 1 are
reported; at concurrency 1 they are flagged (`lossless_flag`).

At a temperature above 0 two correct servers give different texts: a speculative cell's outputs
are compared with its baseline's by distribution instead, pooled over the cell's points, with
the greedy outputs of the same prompts where the study measured them at temperature 0
(`sampling_columns`, `sdbench.analyze.sampling`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from sdbench.analyze import sampling
from sdbench.layout import requests_output
from sdbench.records import LoadPoint, read_details


def read_all_details(record_files) -> dict[str, dict[tuple, dict]]:
    """The per-request detail beside each of these records files, where there is one (an
    unfinished cell has none)."""
    details: dict[str, dict] = {}
    for path in record_files:
        if requests_output(path).exists():
            details.update(read_details(requests_output(path)))
    return details


def compare(texts: list[str], reference: list[str], encode: Callable[[str], list[int]]) -> dict:
    """Agreement of `texts` with `reference` (same requests, same order)."""
    exact, agreement, divergence = [], [], []
    for text, ref in zip(texts, reference, strict=True):
        exact.append(text == ref)
        a, b = encode(text), encode(ref)
        longest = max(len(a), len(b))
        same = sum(x == y for x, y in zip(a, b, strict=False))
        agreement.append(same / longest if longest else 1.0)
        if text != ref:
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                         min(len(a), len(b)))
            divergence.append(first)
    return {"lossless_requests": len(texts),
            "lossless_exact_share": float(np.mean(exact)) if exact else np.nan,
            "lossless_token_agreement": float(np.mean(agreement)) if agreement else np.nan,
            "lossless_first_divergence": float(np.median(divergence)) if divergence else None}


def lossless_columns(frame: pd.DataFrame, details: dict[str, dict],
                     encoders: dict[str, Callable[[str], list[int]]]) -> pd.DataFrame:
    """Lossless columns for every speculative row of a summary frame.

    details: cell_id -> read_details(...); encoders: target -> tokenizer encode function."""
    rows = []
    for row in frame.itertuples():
        out = {"cell_id": row.cell_id, "concurrency": row.concurrency,
               "request_rate": row.request_rate, "repeat": row.repeat}
        point = LoadPoint.of(row.concurrency, row.request_rate, row.repeat).key
        base = details.get(row.baseline_cell_id) if isinstance(row.baseline_cell_id, str) else None
        mine = details.get(row.cell_id, {}).get(point)
        ref = base.get(point) if base else None
        temperature = getattr(row, "temperature", 0) or 0
        if temperature > 0:  # sampled outputs differ by design: `sampling_columns` checks them
            out["lossless_note"] = (f"sampled at temperature {temperature:g}: compared by "
                                    "distribution over the cell's points")
        elif mine is not None and ref is not None and row.status == "ok":
            if mine.get("input_lens") != ref.get("input_lens"):
                out["lossless_note"] = "prompts differ from the baseline's; not compared"
            else:
                ok = [i for i, (e1, e2) in enumerate(zip(mine["errors"], ref["errors"],
                                                         strict=True)) if not e1 and not e2]
                out.update(compare([mine["generated_texts"][i] for i in ok],
                                   [ref["generated_texts"][i] for i in ok],
                                   encoders[row.target]))
        rows.append(out)
    result = pd.DataFrame(rows)
    result["concurrency"] = result["concurrency"].astype("Int64")
    result["request_rate"] = result["request_rate"].astype(float)
    for column in ("lossless_requests", "lossless_exact_share", "lossless_token_agreement",
                   "lossless_first_divergence", "lossless_note"):
        if column not in result:
            result[column] = np.nan
    result["lossless_flag"] = (result["concurrency"] == 1) & (result["lossless_exact_share"] < 1)
    return result


def _ok_texts(detail: dict) -> dict[int, str]:
    return {i: text for i, (text, error) in enumerate(zip(detail["generated_texts"],
                                                          detail["errors"], strict=True))
            if not error}


def _greedy_detail(frame: pd.DataFrame, row, details: dict) -> dict | None:
    """The per-request detail of the same prompts without speculation at temperature 0 (same
    target, prompt set, engine, load and repeat), where the study measured it."""
    ref = frame[(frame["method"] == "vanilla") & (frame["temperature"].fillna(0) == 0)
                & (frame["status"] == "ok") & (frame["target"] == row.target)
                & (frame["dataset"] == row.dataset) & (frame["subset"] == row.subset)
                & (frame["engine"] == row.engine) & (frame["repeat"] == row.repeat)
                & (frame["concurrency"].astype(float).fillna(-1)
                   == (-1 if pd.isna(row.concurrency) else float(row.concurrency)))]
    point = LoadPoint.of(row.concurrency, row.request_rate, row.repeat).key
    for cell_id in ref["cell_id"]:
        if (found := details.get(cell_id, {}).get(point)) is not None:
            return found
    return None


def sampling_columns(frame: pd.DataFrame, details: dict[str, dict],
                     encoders: dict[str, Callable[[str], list[int]]]) -> pd.DataFrame:
    """Per speculative cell sampled at a temperature above 0: the check of its outputs'
    distribution against its baseline's (`sampling.check`), pooled over its measured points:
    `lossless_sampling` (its one line) and `lossless_sampling_verdict`."""
    columns = ["cell_id", "lossless_sampling", "lossless_sampling_verdict"]
    if "temperature" not in frame:
        return pd.DataFrame(columns=columns)
    spec = frame[(frame["method"] != "vanilla") & (frame["status"] == "ok")
                 & (frame["temperature"].fillna(0) > 0)]
    rows = []
    for cell_id, group in spec.groupby("cell_id", sort=False):
        pairs, greedy, complete = [], [], True
        for row in group.itertuples():
            point = LoadPoint.of(row.concurrency, row.request_rate, row.repeat).key
            mine = details.get(cell_id, {}).get(point)
            base = details.get(row.baseline_cell_id, {}).get(point)
            if mine is None or base is None or mine.get("input_lens") != base.get("input_lens"):
                continue
            cold = _greedy_detail(frame, row, details)
            cold_ok = _ok_texts(cold) if cold is not None and cold.get(
                "input_lens") == mine.get("input_lens") else {}
            ours, theirs = _ok_texts(mine), _ok_texts(base)
            encode = encoders[row.target]
            for i in sorted(set(ours) & set(theirs)):
                pairs.append((encode(theirs[i]), encode(ours[i])))
                complete &= i in cold_ok
                greedy.append(encode(cold_ok[i]) if i in cold_ok else [])
        result = sampling.check(pairs, greedy if complete and pairs else None)
        rows.append({"cell_id": cell_id, "lossless_sampling": result.text(),
                     "lossless_sampling_verdict": result.verdict})
    return pd.DataFrame(rows, columns=columns)
