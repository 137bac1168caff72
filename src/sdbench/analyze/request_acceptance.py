"""Per-request acceptance, where the engine reports it.

A vLLM 0.32+ server started with `--per-request-spec-decode-metrics` (the workflow does so for
every speculative server where the installed vLLM has it: `measure.server.reporting_args`)
returns each request's acceptance with its response: its verification steps, drafted and
accepted tokens, and at the `detailed` level the accepted count of each step in order
(`metrics.speculative_decoding`, kept in the per-request detail as `spec_decode` by
`measure.loadgen`). Older releases (vLLM 0.26 on the lent GPUs) report none: the reports say
"not reported by this vLLM".

`acceptance_rows` turns them into one row per (measurement, request, output-position bin):
the bins are the request's output tokens 0–15, 16–31, 32–63, … (a step counts in the bin of
the first token it produced; the first output token comes from the prefill, no step). A
request reported without per-step counts (the `summary` level) has one row over its whole
output (`position_from` 0, `position_to` empty). Summing a request's rows gives its own
totals; summing a measurement's gives what the engine's counters say for the run
(`counter_check` compares them).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sdbench.plan.settings import synthetic_setting

# the first output token of each bin (the last bin is open)
POSITION_EDGES = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)

COLUMNS = ["round", "cell_id", "engine", "load", "setting", "speculator", "method", "k",
           "target",
           "workload", "concurrency", "request_rate", "repeat", "temperature",
           "simulated_acceptance", "role", "request", "bucket", "prompt_len", "output_len",
           "position_from", "position_to", "steps", "drafted", "accepted"]
# columns of the measurement each row repeats (the rest are the request's)
MEASUREMENT_COLUMNS = COLUMNS[:COLUMNS.index("request")]

# a request's per-request sums against the run's engine counters: equal within this share
COUNTER_TOLERANCE = 0.01


def position_bins(per_step_accepted: list[int], per_step_drafted: list[int]
                  ) -> list[tuple[int, int, int, int, int]]:
    """(position_from, position_to, steps, drafted, accepted) per output-position bin of one
    request's steps in order; bins without a step are left out."""
    out: dict[int, list[int]] = {}
    position = 1  # the prefill gave the first output token
    for accepted, drafted in zip(per_step_accepted, per_step_drafted, strict=True):
        b = _bin(position)
        entry = out.setdefault(b, [0, 0, 0])
        entry[0] += 1
        entry[1] += int(drafted)
        entry[2] += int(accepted)
        position += int(accepted) + 1
    return [(POSITION_EDGES[b],
             POSITION_EDGES[b + 1] if b + 1 < len(POSITION_EDGES) else None, *counts)
            for b, counts in sorted(out.items())]


def _bin(position: int) -> int:
    return max(i for i, edge in enumerate(POSITION_EDGES) if edge <= position)


def request_bins(entry: dict) -> list[tuple]:
    """One request's rows (`position_bins` where the server gave per-step counts, else one
    row over its whole output)."""
    accepted, drafted = entry.get("per_step_accepted"), entry.get("per_step_drafted")
    if accepted and drafted and len(accepted) == len(drafted):
        return position_bins(accepted, drafted)
    return [(0, None, int(entry.get("num_spec_steps") or 0),
             int(entry.get("num_draft_tokens") or 0),
             int(entry.get("num_accepted_draft_tokens") or 0))]


def acceptance_rows(row: dict, detail: dict, buckets: list) -> list[dict]:
    """The rows of one measurement (`row`: its summary row) from its per-request detail;
    `buckets`: each prompt's bucket or task group in the order sent (empty: not known)."""
    entries = detail.get("spec_decode") or []
    prompt_lens = detail.get("input_lens") or []
    output_lens = detail.get("output_lens") or []
    errors = detail.get("errors") or []
    keep = {**{c: row.get(c) for c in MEASUREMENT_COLUMNS},
            "simulated_acceptance": synthetic_setting(row.get("spec_options"))}
    rows = []
    for i, entry in enumerate(entries):
        if not entry or (i < len(errors) and errors[i]):
            continue
        base = {**keep, "request": i,
                "bucket": buckets[i] if i < len(buckets) else None,
                "prompt_len": prompt_lens[i] if i < len(prompt_lens) else None,
                "output_len": output_lens[i] if i < len(output_lens) else None}
        for start, end, steps, drafted, accepted in request_bins(entry):
            rows.append({**base, "position_from": start, "position_to": end, "steps": steps,
                         "drafted": drafted, "accepted": accepted})
    return rows


def as_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in ("position_to", "prompt_len", "output_len"):
        frame[column] = frame[column].astype("Float64")
    return frame


# --- what the reports show ----------------------------------------------------------------

def per_request(table: pd.DataFrame) -> pd.DataFrame:
    """One row per request of each measurement: its steps, drafted and accepted tokens summed
    over its bins, and its acceptance length (1 + accepted per step)."""
    if table.empty:
        return table.assign(acceptance_length=pd.Series(dtype=float))
    keys = [*MEASUREMENT_COLUMNS, "request", "bucket", "prompt_len", "output_len"]
    out = table.groupby(keys, dropna=False, sort=False)[["steps", "drafted", "accepted"]].sum()
    out = out.reset_index()
    return out.assign(acceptance_length=1 + out["accepted"] / out["steps"].where(
        out["steps"] > 0))


def quantiles(values: pd.Series) -> tuple[float, float, float]:
    """(10th, 50th, 90th) percentile; NaN without values."""
    values = values.dropna()
    if values.empty:
        return math.nan, math.nan, math.nan
    return tuple(float(q) for q in np.percentile(values, [10, 50, 90]))


# what names a setting in the report's tables (the method and its role label it)
SETTING = ["target", "workload", "speculator", "method", "k", "simulated_acceptance", "role"]


def group_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting (speculator, k, target), workload and bucket (task group or length bucket
    of a set sent in order, else the whole workload): how many requests, the pooled acceptance
    length (1 + all accepted ÷ all steps) and the spread of the per-request lengths (10th,
    50th, 90th percentile) over every request of every run."""
    requests = per_request(table)
    if requests.empty:
        return pd.DataFrame()
    requests = requests.assign(bucket=requests["bucket"].fillna("(all)"))
    rows = []
    keys = [*SETTING, "bucket"]
    for key, part in requests.groupby(keys, sort=True, dropna=False):
        p10, p50, p90 = quantiles(part["acceptance_length"])
        steps = part["steps"].sum()
        rows.append({**dict(zip(keys, key, strict=True)), "requests": len(part),
                     "runs": part[["cell_id", "concurrency", "request_rate", "repeat"]]
                     .drop_duplicates().shape[0],
                     "acceptance_length": 1 + part["accepted"].sum() / steps if steps else
                     math.nan, "p10": p10, "median": p50, "p90": p90})
    return pd.DataFrame(rows)


def prompt_length_bins(requests: pd.DataFrame, bins: int = 4) -> pd.Series:
    """Each request's prompt-length quartile within its workload ("64–180 tokens")."""
    labels = pd.Series(None, index=requests.index, dtype=object)
    for _, part in requests.groupby("workload"):
        lengths = part["prompt_len"].astype(float)
        if lengths.dropna().nunique() < 2:
            labels[part.index] = lengths.map(lambda x: f"{x:.0f} tokens")
            continue
        cut = pd.qcut(lengths, q=min(bins, lengths.nunique()), duplicates="drop")
        labels[part.index] = cut.map(lambda iv: f"{max(iv.left, 0):.0f}–{iv.right:.0f} tokens")
    return labels


def position_table(table: pd.DataFrame) -> pd.DataFrame:
    """Acceptance length per output-position bin (pooled over requests and runs), per setting
    and workload, from requests with per-step counts."""
    part = table[table["position_to"].notna() | (table["position_from"] > 0)]
    if part.empty:
        return pd.DataFrame()
    keys = [*SETTING, "position_from"]
    out = part.groupby(keys, dropna=False)[["steps", "accepted"]].sum().reset_index()
    out["requests"] = part.groupby(keys, dropna=False).apply(
        lambda g: len(g.drop_duplicates(["cell_id", "concurrency", "request_rate", "repeat",
                                         "request"])), include_groups=False).to_numpy()
    return out.assign(acceptance_length=1 + out["accepted"] / out["steps"].where(
        out["steps"] > 0))


def counter_check(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Per measurement with per-request acceptance: the requests' accepted and drafted tokens
    summed against the engine's counters for the run (`spec_decode_*` in the summary); a
    share off by more than COUNTER_TOLERANCE is flagged."""
    if table.empty or "spec_decode_accepted_tokens" not in frame:
        return pd.DataFrame()
    keys = ["cell_id", "concurrency", "request_rate", "repeat"]
    sums = table.groupby(keys, dropna=False)[["drafted", "accepted"]].sum().reset_index()
    counters = frame[[*keys, "speculator", "workload", "spec_decode_draft_tokens",
                      "spec_decode_accepted_tokens"]].drop_duplicates(keys)
    both = sums.merge(counters, on=keys, how="left")
    both["accepted_share"] = both["accepted"] / both["spec_decode_accepted_tokens"].where(
        both["spec_decode_accepted_tokens"] > 0)
    both["drafted_share"] = both["drafted"] / both["spec_decode_draft_tokens"].where(
        both["spec_decode_draft_tokens"] > 0)
    both["agrees"] = (_same(both["drafted"], both["drafted_share"],
                            both["spec_decode_draft_tokens"])
                      & _same(both["accepted"], both["accepted_share"],
                              both["spec_decode_accepted_tokens"]))
    return both


def _same(ours: pd.Series, share: pd.Series, counter: pd.Series) -> pd.Series:
    """Within COUNTER_TOLERANCE of the counter, or none where it counted none (a dynamic-K
    schedule that drafts nothing at a level: vLLM's load generator then reports no counters)."""
    return ((share - 1).abs() <= COUNTER_TOLERANCE) | ((ours == 0) & (counter.fillna(0) == 0))
