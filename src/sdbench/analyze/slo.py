"""Latency targets (SLOs) and goodput, from each request's latencies.

An SLO (`slo:` in the config) names limits on time to first token, time per output token and
end-to-end latency, in milliseconds, and a percentile. A request meets it when it is within
every limit it names: vLLM's goodput rule (`vllm.benchmarks.serve.calculate_metrics`, whose
`--goodput` takes one such set), TPOT = (latency − TTFT) ÷ (output tokens − 1), 0 for a single
token; a failed request meets none. **Goodput** is the requests (`goodput_<slo>`, requests/s)
and their output tokens (`goodput_tokens_<slo>`, tokens/s) that meet it per second of the
point's duration; **attainment** (`slo_attainment_<slo>`) the share of requests that meet it.
A point **meets** the SLO when its attainment, the mean over repeats, is at least the
percentile (DistServe's SLO attainment; the highest load that meets it is what a team can
serve within the target). The goodput gain pairs each repeat with its baseline's, as the
speedup does (`goodput_gain_<slo>`: tokens/s meeting the SLO with speculation ÷ without; none
where the baseline has no request within it).

Computed from the per-request detail at summary time, so an SLO added or changed re-runs the
summary, never a measurement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sdbench.analyze.stats import mean_interval, ratio_interval
from sdbench.records import STOPPED, LoadPoint

# config key -> the per-request latency it limits
LIMITS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2el_ms": "e2el"}
READABLE = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_ms": "E2EL"}
KEY = ["cell_id", "concurrency", "request_rate", "repeat"]
# what a run's per-request detail needs for an SLO (a server point's, from the load generator)
LATENCY_FIELDS = ("ttfts", "latencies", "output_lens")


@dataclass(frozen=True)
class SLO:
    name: str
    limits: dict  # config key (ttft_ms, tpot_ms, e2el_ms) -> milliseconds
    percentile: float = 90.0

    @classmethod
    def of(cls, name: str, spec: dict) -> SLO:
        limits = {key: float(spec[key]) for key in LIMITS if spec.get(key) is not None}
        if not limits:
            raise ValueError(f"slo.{name}: names no limit (one of {', '.join(LIMITS)})")
        return cls(name, limits, float(spec.get("percentile", 90.0)))

    def describe(self) -> str:
        """'TTFT ≤ 500 ms, TPOT ≤ 50 ms for 90 % of requests'."""
        limits = ", ".join(f"{READABLE[key]} ≤ {value:g} ms" for key, value in self.limits.items())
        return f"{limits} for {self.percentile:g} % of requests"

    def columns(self) -> dict[str, str]:
        """kind -> the summary column of this SLO."""
        return {kind: f"{kind}_{self.name}"
                for kind in ("goodput", "goodput_tokens", "slo_attainment", "goodput_gain")}


def slos_of(config_slos: dict | None) -> list[SLO]:
    """The config's `slo:` mapping as SLOs, in its order."""
    return [SLO.of(name, spec) for name, spec in (config_slos or {}).items()]


def request_latencies(detail: dict) -> dict[str, np.ndarray]:
    """Per request of one run: ttft, tpot, e2el in seconds, output tokens, and success, as
    vLLM's load generator counts them."""
    outputs = np.asarray(detail["output_lens"], dtype=float)
    errors = detail.get("errors") or [""] * len(outputs)
    success = np.array([not e for e in errors], dtype=bool)
    ttft = np.asarray(detail["ttfts"], dtype=float)
    e2el = np.asarray(detail["latencies"], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(outputs > 1, (e2el - ttft) / (outputs - 1), 0.0)
    return {"ttft": ttft, "tpot": tpot, "e2el": e2el, "outputs": outputs, "success": success}


def good_requests(detail: dict, slo: SLO) -> np.ndarray:
    """Which requests of one run meet every limit of the SLO (failed ones never do)."""
    latencies = request_latencies(detail)
    good = latencies["success"].copy()
    for key, limit_ms in slo.limits.items():
        good &= latencies[LIMITS[key]] <= limit_ms / 1000
    return good


def goodput(detail: dict, duration_s: float, slo: SLO) -> dict[str, float]:
    """Goodput (requests/s, output tokens/s) and attainment of one run."""
    good = good_requests(detail, slo)
    outputs = np.asarray(detail["output_lens"], dtype=float)
    if not len(good) or not duration_s:
        return {"goodput": np.nan, "goodput_tokens": np.nan, "slo_attainment": np.nan}
    return {"goodput": float(good.sum() / duration_s),
            "goodput_tokens": float(outputs[good].sum() / duration_s),
            "slo_attainment": float(good.mean())}


def slo_columns(frame: pd.DataFrame, details: dict[str, dict], slos: list[SLO]) -> pd.DataFrame:
    """Goodput, attainment and goodput gain of every SLO for every measurement of a summary
    frame (NaN where a run has no per-request detail or was not measured), keyed like it."""
    rows = []
    for row in frame.itertuples():
        out = {"cell_id": row.cell_id, "concurrency": row.concurrency,
               "request_rate": row.request_rate, "repeat": row.repeat}
        point = LoadPoint.of(row.concurrency, row.request_rate, row.repeat).key
        detail = details.get(row.cell_id, {}).get(point)
        # (the offline engine and the Transformers reference time no first token: no SLO)
        measured = (row.status in ("ok", "invalid") and detail is not None
                    and all(key in detail for key in LATENCY_FIELDS))
        for slo in slos:
            values = (goodput(detail, float(row.duration), slo) if measured and
                      pd.notna(getattr(row, "duration", np.nan)) else {})
            for kind, column in slo.columns().items():
                out[column] = values.get(kind, np.nan)
        rows.append(out)
    return pd.DataFrame(rows, columns=KEY + [c for s in slos for c in s.columns().values()])


def with_slo_columns(frame: pd.DataFrame, details: dict[str, dict],
                     slos: list[SLO]) -> pd.DataFrame:
    """The summary frame with every SLO's columns, the gain paired by repeat against the
    baseline's same measurement (only where the pair is comparable: `paired`)."""
    if not slos:
        return frame
    columns = slo_columns(frame, details, slos)
    merged = frame.merge(columns, on=KEY, how="left", validate="one_to_one")
    for slo in slos:
        tokens, gain = slo.columns()["goodput_tokens"], slo.columns()["goodput_gain"]
        base = merged[["cell_id", "concurrency", "request_rate", "repeat", tokens]].rename(
            columns={"cell_id": "baseline_cell_id", tokens: "_base_tokens"})
        joined = merged.merge(base, on=["baseline_cell_id", "concurrency", "request_rate",
                                        "repeat"], how="left", validate="many_to_one")
        ratio = joined[tokens] / joined["_base_tokens"].where(joined["_base_tokens"] > 0)
        comparable = merged["paired"].fillna(False).astype(bool) & (merged["status"] != STOPPED)
        merged[gain] = ratio.where(comparable.to_numpy()).to_numpy()
    # the SLOs themselves, for the report (which reads nothing but the summary's tables)
    merged["slos"] = json.dumps({s.name: {"limits": s.limits, "percentile": s.percentile}
                                 for s in slos})
    return merged


def frame_slos(frame: pd.DataFrame) -> list[SLO]:
    """The SLOs a summary table was computed for (its `slos` column)."""
    if "slos" not in frame or frame["slos"].dropna().empty:
        return []
    return [SLO(name, spec["limits"], spec["percentile"])
            for name, spec in json.loads(frame["slos"].dropna().iloc[0]).items()]


def point_stats(group: pd.DataFrame, slos: list[SLO]) -> dict:
    """One point's SLO columns from its measurements: the mean and 95 % interval (Student t,
    cut at 0) over the measured repeats of goodput and goodput tokens, the mean attainment,
    whether the point meets the SLO (`slo_meets_<slo>`), and the goodput gain over the paired
    repeats (geometric mean and interval, `stats.ratio_interval`; where a repeat met none of it
    with speculation, the arithmetic mean of the ratios and no interval)."""
    out: dict = {}
    measured = group[group["status"] == "ok"]
    for slo in slos:
        columns = slo.columns()
        for kind in ("goodput", "goodput_tokens"):
            mean, _, low, high = mean_interval(
                measured[columns[kind]].astype(float).to_numpy())
            low = max(low, 0.0) if pd.notna(low) else low  # a rate is never below 0
            out.update({f"{columns[kind]}_mean": mean, f"{columns[kind]}_ci_low": low,
                        f"{columns[kind]}_ci_high": high})
        attainment = measured[columns["slo_attainment"]].astype(float).mean()
        out[f"{columns['slo_attainment']}_mean"] = attainment
        out[f"slo_meets_{slo.name}"] = (bool(attainment >= slo.percentile / 100)
                                        if pd.notna(attainment) else None)
        gains = group[columns["goodput_gain"]].astype(float).dropna().to_numpy()
        if len(gains) and (gains <= 0).any():
            gain, low, high = float(gains.mean()), np.nan, np.nan
        else:
            gain, low, high = ratio_interval(gains) if len(gains) else (np.nan,) * 3
        out.update({f"{columns['goodput_gain']}_mean": gain,
                    f"{columns['goodput_gain']}_ci_low": low,
                    f"{columns['goodput_gain']}_ci_high": high,
                    f"{columns['goodput_gain']}_n": len(gains)})
    return out
