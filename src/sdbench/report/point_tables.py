"""The tables of every point and run a round report shows: the point table, problems and stops,
energy, what the engine ran, provenance, the lossless check and the prompt sets' data cards."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sdbench.analyze import stops
from sdbench.analyze.decisions import shown_rounds
from sdbench.analyze.stats import interval_number
from sdbench.report.show import (
    MDE_SHOWN,
    MIN_DRAFTS,
    cell_text,
    marked_verdict,
    method_names,
    percent_text,
    point_key,
    speedup_text,
    starts_text,
    stat_text,
    verdict_text,
    with_interval,
)


def lossless_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per speculative point: how many greedy outputs match no speculation exactly; sampled
    ones (temperature > 0): their cell's check by distribution (`analyze.sampling`)."""
    def column(frame, name):  # a summary written before the column existed: all missing
        return frame.get(name, pd.Series(np.nan, index=frame.index, dtype=object))

    def shown(values, form):
        return values.map(lambda v: "–" if pd.isna(v) else form.format(v))

    sampled = "sampled: same distribution as the baseline?"
    spec = points[(points["method"] != "vanilla")
                  & (column(points, "lossless_exact_share_mean").notna()
                     | column(points, "lossless_sampling").notna())]
    if spec.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "engine": spec.get("engine", "serve"),
        "workload": spec["workload"], "method": spec["speculator"],
        "k": spec["k"].astype("Int64"),
        "concurrency / batch": spec["concurrency"].astype("Int64"),
        "request rate": spec.get("request_rate", np.nan),
        "identical outputs": shown(column(spec, "lossless_exact_share_mean"), "{:.0%}"),
        "token agreement": shown(column(spec, "lossless_token_agreement_mean"), "{:.1%}"),
        "first divergence (median token)": shown(column(spec, "lossless_first_divergence"),
                                                 "{:.0f}"),
        "flag": np.where(column(spec, "lossless_flag").fillna(False).astype(bool),
                         "⚠ differs at concurrency 1", ""),
        sampled: column(spec, "lossless_sampling"),
    }).reset_index(drop=True)
    return out.drop(columns=[sampled] if out[sampled].isna().all() else [])


def problem_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Points that were not measured cleanly: failed (no measurement), invalid (too many failed
    requests) or unsupported here (the host cannot run the cell: nothing was sent; the error
    says why; one row per cell). They never enter a speedup."""
    bad = frame[~frame["status"].isin(["ok", "stopped"])].copy()  # (stopped: by the rule)
    unsupported = bad["status"] == "unsupported"
    cells = bad[unsupported].drop_duplicates("cell_id").assign(
        status="unsupported here", concurrency=pd.NA)
    bad = pd.concat([bad[~unsupported], cells]) if len(cells) else bad
    columns = ["target", "workload", "speculator", "k", "concurrency", "status", "completed",
               "failed", "error", "cell_id"]
    return bad[[c for c in columns if c in bad]].reset_index(drop=True)


def pair_issue_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Measurements whose baseline point exists but is not comparable (another device, vLLM
    build, dtype, prompt count or prefix-cache state): no speedup, and why."""
    if "pair_issue" not in frame:
        return pd.DataFrame()
    bad = frame[frame["pair_issue"].notna()]
    columns = ["target", "workload", "speculator", "k", "concurrency", "request_rate", "repeat",
               "pair_issue", "cell_id", "baseline_cell_id"]
    return bad[[c for c in columns if c in bad]].reset_index(drop=True)


def measurement_counts(frame: pd.DataFrame) -> str:
    """'32 clean, 32 unsupported here' (and failed / invalid where there are any)."""
    counts = frame["status"].value_counts()
    names = {"ok": "clean", "unsupported": "unsupported here"}
    return ", ".join([f"{int(counts.get('ok', 0))} clean"] + [
        f"{int(n)} {names.get(status, status)}" for status, n in counts.items()
        if status != "ok"])


def points_table(points: pd.DataFrame) -> pd.DataFrame:
    """Every point: status and repeats, throughput and speedups with 95 % intervals, acceptance
    and efficiency. Columns where nothing applies to any point (no pair issue, no energy on a
    CPU) are left out, and the round too where the points are of one; what each interval
    covers is said once above the report (`speedup_note`), not in every row."""
    out = pd.DataFrame({
        "round": shown_rounds(points), "setting": points.get("setting"),
        "target": points["target"], "workload": points["workload"],
        "method": method_names(points), "k": points["k"].astype("Int64"),
        "concurrency": points["concurrency"],
        "status (repeats ok)": [_status_text(r) for _, r in points.iterrows()],
        "total tok/s": [with_interval(m, lo, hi, "") for m, lo, hi in zip(
            points["total_token_throughput_mean"], points["total_token_throughput_ci_low"],
            points["total_token_throughput_ci_high"], strict=True)],
        "speedup": [speedup_text(r) for _, r in points.iterrows()],
        "over prompts": [_prompt_text(r) for _, r in points.iterrows()],
        "verdict": [_verdict_cell(r) for _, r in points.iterrows()],
        "server starts": [starts_text(r) if r["method"] != "vanilla" else None
                          for _, r in points.iterrows()],
        "total-token speedup": [stat_text(r, "total_speedup") for _, r in points.iterrows()],
        "output drift": [_drift_text(r) for _, r in points.iterrows()],
        "pair issue": points.get("pair_issues"),
        "engine differs": points.get("engine_differs"),
        "TPOT speedup": [with_interval(m, lo, hi) for m, lo, hi in zip(
            points["tpot_speedup_mean"], points["tpot_speedup_ci_low"],
            points["tpot_speedup_ci_high"], strict=True)],
        # the tails beside the speedups: what the slowest users wait (means over repeats)
        "TPOT p50 / p90 / p99 (ms)": [_percentiles_text(r, "tpot", ("median", "p90", "p99"))
                                      for _, r in points.iterrows()],
        "TTFT p90 / p99 (ms)": [_percentiles_text(r, "ttft", ("p90", "p99"))
                                for _, r in points.iterrows()],
        "requests / output tokens / drafts": [_counts_text(r) for _, r in points.iterrows()],
        "acceptance (pooled)": [_acceptance_text(r) for _, r in points.iterrows()],
        "acceptance length": points.get("spec_decode_acceptance_length_mean"),
        # not the acceptance efficiency (acceptance length ÷ (1 + k)): a name of its own
        "speedup ÷ acceptance length": points.get(
            "efficiency", pd.Series(np.nan, index=points.index)).map(
            lambda v: percent_text(v, 100)),
        "mJ / output token": (points["energy_per_output_token_j_mean"] * 1000
                              if "energy_per_output_token_j_mean" in points else np.nan),
        "cell": points["cell_id"]}).reset_index(drop=True)
    shown = out.astype(object).apply(lambda column: column.map(cell_text))
    empty = [c for c in out if (shown[c] == "–").all()]
    if out["round"].nunique() <= 1:
        empty.append("round")
    return out.drop(columns=empty)


def _verdict_cell(row):
    """A point's verdict with its minimum detectable speedup, marked as this point's
    (`show.marked_verdict`); None without one (no speculation, no speedup)."""
    text = verdict_text(row.get("verdict"), row.get("speedup_mde", np.nan))
    if text is None:
        return None
    return marked_verdict(text, point_key(row["target"], row["workload"], row["concurrency"],
                                          row["speculator"], row["k"], row.get("setting")),
                          row["verdict"])


def _percentiles_text(row, latency: str, which: tuple[str, ...]) -> str:
    """'6.1 / 6.5 / 7.2': a latency's percentiles of a point in ms (means over repeats), "–"
    where the point has none (offline, Transformers)."""
    values = [row.get(f"{p}_{latency}_ms_mean") for p in which]
    if all(v is None or pd.isna(v) for v in values):
        return "–"
    return " / ".join("–" if v is None or pd.isna(v) else f"{v:.3g}" if v < 10 else f"{v:.0f}"
                      for v in values)


def _counts_text(row) -> str:
    """'48 / 6,144 / 1,020': requests, output tokens and drafts over the point's repeats."""
    values = [row.get(c) for c in ("requests", "output_tokens", "drafts")]
    if all(v is None or pd.isna(v) for v in values):
        return "–"
    return " / ".join(cell_text(v) for v in values)


def _acceptance_text(row) -> str:
    """Accepted ÷ proposed draft tokens over every repeat of the point, "–" without drafts and
    "(n drafts)" below MIN_DRAFTS: too few to read."""
    drafts = row.get("drafts")
    if drafts is None or pd.isna(drafts) or pd.isna(row.get("acceptance_pooled")):
        return "–"
    if drafts < MIN_DRAFTS:
        return f"– ({int(drafts)} drafts)"
    return percent_text(row["acceptance_pooled"], 100)


def _status_text(row) -> str:
    """'ok (2/5, 3 stopped: settled)': measured of planned repeats, and why the adaptive rule
    stopped the rest (the section "Measurement spent" says what each reason means)."""
    text = f"{row['status']} ({row['repeats_ok']}/{row['repeats']}"
    stopped = row.get("repeats_stopped")
    if stopped is not None and pd.notna(stopped) and stopped:
        text += f", {int(stopped)} stopped: {str(row.get('stop_reason')).split(' after')[0]}"
    return text + ")"


def adaptive_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per round: repeats planned, measured and stopped by the adaptive rule (blocks of prompts
    counted as runs, then all of them in whole repeats: a block 1/b of one), the measuring
    time they took and an estimate of what the stopped ones would have taken (at the mean of
    the measured points), and the report's recomputation of every stop decision."""
    savings = stops.savings(frame.assign(round=shown_rounds(frame)))
    checks = stops.recheck_frame(frame)
    if savings.empty:
        return savings
    held = int(checks["holds"].sum()) if len(checks) else 0
    failed = "; ".join(
        f"{r.cell_id} at {f'{r.request_rate:g} req/s' if pd.isna(r.concurrency) else r.concurrency}"
        f": {r.why}" for r in checks.itertuples() if not r.holds)
    return pd.DataFrame({
        "round": savings["round"],
        "repeats planned": savings["planned"], "measured": savings["measured"],
        "stopped early": savings["stopped"],
        # where repeats are split into blocks of prompts, the rows above count blocks
        "measured, in whole repeats": [
            f"{m:g} of {p:g} ({m / p:.0%})" if p else "–"
            for m, p in zip(savings["measured_repeats"].round(2),
                            savings["planned_repeats"].round(2), strict=True)],
        "measuring (s)": savings["measuring_s"].map(
            lambda v: "–" if pd.isna(v) else f"{v:.0f}"),
        "saved (s, estimate)": savings["saved_s_estimate"].map(
            lambda v: "–" if pd.isna(v) else f"{v:.0f}"),
        "stop decisions recomputed": (f"{held} of {len(checks)} hold"
                                      + (f"; not: {failed}" if failed else ""))})


def _prompt_text(row) -> str:
    """'[1.10, 1.35] of 6 prompts · both [1.05, 1.41]': the speedup's prompt-sampling interval
    (and the number of prompts it resamples) and the one for the servers' noise and the
    prompts together ("–" where there is no detail)."""
    low, high = row.get("speedup_prompts_ci_low"), row.get("speedup_prompts_ci_high")
    if low is None or pd.isna(low) or pd.isna(high):
        return "–"
    text = f"[{_bound(low)}, {_bound(high)}] of {int(row['speedup_prompts'])} prompts"
    both = row.get("speedup_both_ci_low"), row.get("speedup_both_ci_high")
    if both[0] is not None and pd.notna(both[0]) and pd.notna(both[1]):
        text += f" · both [{_bound(both[0])}, {_bound(both[1])}]"
    return text


def _bound(value: float) -> str:
    """An interval bound; above MDE_SHOWN only '> 10' (one degree of freedom)."""
    return f"> {MDE_SHOWN:g}" if value > MDE_SHOWN else interval_number(value)


def _drift_text(row) -> str:
    """Output tokens relative to the baseline's, flagged above aggregate.DRIFT_LIMIT."""
    value = row.get("output_drift_mean", np.nan)
    if pd.isna(value):
        return "–"
    return f"{value:+.1%}" + (" ⚠ drift" if row.get("drift_flag") else "")


def energy_table(part: pd.DataFrame) -> pd.DataFrame:
    """Energy per output token next to speedup, for every point with GPU readings (NVML):
    empty when none has them (CPU serving)."""
    column = "energy_per_output_token_j_mean"
    if column not in part or part[column].isna().all():
        return pd.DataFrame()
    part = part[part[column].notna()]
    return pd.DataFrame({
        "target": part["target"], "workload": part["workload"],
        "setting": part.get("setting"), "method": part["speculator"],
        "k": part["k"].astype("Int64"), "concurrency": part["concurrency"],
        "speedup": [speedup_text(r) for _, r in part.iterrows()],
        "energy / output token": [stat_text(r, "energy_per_output_token_j", 1000, " mJ")
                                  for _, r in part.iterrows()],
        "energy gain": [stat_text(r, "energy_gain", unit="×") for _, r in part.iterrows()],
        "avg power": [stat_text(r, "gpu_avg_power_w", unit=" W") for _, r in part.iterrows()],
        "GPU util": [stat_text(r, "gpu_util_pct", unit=" %") for _, r in part.iterrows()],
    }).reset_index(drop=True)


ENGINE_COLUMNS = {"cudagraph_mode": "CUDA graphs", "compilation_mode": "compilation",
                  "attention_backend": "attention", "dtype": "dtype",
                  "model_runner": "model runner", "chunked_prefill": "chunked prefill",
                  "max_num_batched_tokens": "batched tokens", "kv_cache_tokens": "KV tokens",
                  "async_scheduling_off": "async scheduling", "engine_fixes": "engine fixes"}


def _engine_value(key: str, value) -> str:
    if value is None:
        return "–"
    if key == "async_scheduling_off":
        return "turned off by vLLM" if value else "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)


def effective_engine_table(frame: pd.DataFrame) -> pd.DataFrame:
    """What each server configuration's engine really ran (vLLM's own reports, read from its
    log when it was ready): one row per configuration (target, method, k and what vLLM
    resolved; the workloads it served listed), its settings, its performance warnings, and how
    it differs from its baseline's beyond speculation. Empty where no record carries the
    engine's report."""
    if "engine_settings" not in frame or frame["engine_settings"].isna().all():
        return pd.DataFrame()
    rows = []
    for _, group in frame[frame["engine_settings"].notna()].groupby("cell_id",
                                                                         sort=False):
        first = group.iloc[0]
        settings = json.loads(first["engine_settings"])
        warnings = sorted({w for text in group["engine_warnings"].dropna()
                           for w in json.loads(text)})
        differs = sorted(set(group.get("engine_differs", pd.Series(dtype=object)).dropna()))
        rows.append({"target": first["target"], "engine": first["engine"],
                     "method": first["speculator"], "k": cell_text(first["k"]),
                     **{label: _engine_value(key, settings.get(key))
                        for key, label in ENGINE_COLUMNS.items()},
                     "differs from its baseline": "; ".join(differs) or "–",
                     "performance warnings": " · ".join(warnings) or "–",
                     "workload": first["workload"]})
    cells = pd.DataFrame(rows)
    # one row per configuration: the cells of one server configuration (its workloads) alike
    same = [c for c in cells.columns if c != "workload"]
    out = cells.groupby(same, sort=False, dropna=False)["workload"].agg(
        lambda w: ", ".join(dict.fromkeys(w))).reset_index().rename(
        columns={"workload": "workloads served"})
    shown = out.astype(object).apply(lambda column: column.map(cell_text))
    return out.drop(columns=[c for c in ENGINE_COLUMNS.values() if (shown[c] == "–").all()])


# the records' provenance columns, as the report names them
PROVENANCE_COLUMNS = {"vllm_distribution": "vLLM package", "vllm_version": "vLLM",
                      "torch_version": "torch", "device_kind": "device kind", "device": "device",
                      "host_isa": "host ISA", "dtype": "dtype", "driver": "GPU driver",
                      "hostname": "host", "git_commit": "workflow commit",
                      "git_dirty": "uncommitted changes"}


def provenance_table(frame: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in PROVENANCE_COLUMNS if c in frame]
    # missing values (no GPU driver on CPU) shown as "-": value_counts would drop such rows
    values = frame[columns].astype(object).where(frame[columns].notna(), "-").astype(str)
    return values.value_counts().rename("records").reset_index().rename(
        columns=PROVENANCE_COLUMNS)


def data_cards(frame: pd.DataFrame, cards: dict[str, dict | None]) -> dict[str, dict | None]:
    """The data cards of the prompt sets the records used, by workload name (cards: the
    summary's, "dataset/subset" -> card)."""
    return {workload: cards.get(f"{dataset}/{subset}")
            for (workload, dataset, subset), _ in frame.groupby(["workload", "dataset", "subset"])}


def data_cards_table(cards: dict[str, dict]) -> pd.DataFrame:
    rows = []
    for workload, card in cards.items():
        if card is None:
            rows.append({"workload": workload, "records": "card missing"})
            continue
        tokens = card["prompt_tokens"]
        rows.append({
            "workload": workload, "set": f"{card['dataset']}/{card['subset']}",
            "records": card["records"],
            "prompt tokens (min / p50 / p90 / max)":
                f"{tokens['min']} / {tokens['p50']:.0f} / {tokens['p90']:.0f} / {tokens['max']}",
            "output rule": card["output_rule"],
            "skipped rows": sum(card["skipped"].values()),
            "source": f"{card['source']['kind']} sha256 {card['source']['sha256'][:12]}",
            "tokenizer": ", ".join(f"{k}={v}" for k, v in card["tokenizer"].items()
                                   if k in ("model", "tiktoken", "tiktoken_file")),
            "seed": card["seed"],
        })
    return pd.DataFrame(rows)


def prompt_length_plot(cards: dict[str, dict]) -> plt.Figure | None:
    present = {w: c for w, c in cards.items() if c and c["prompt_token_histogram"]}
    if not present:
        return None
    fig, axes = plt.subplots(1, len(present), squeeze=False, figsize=(4 * len(present), 2.8))
    for ax, (workload, card) in zip(axes[0], present.items(), strict=True):
        hist = card["prompt_token_histogram"]
        edges = np.asarray(hist["edges"])
        ax.bar(edges[:-1], hist["counts"], width=np.diff(edges), align="edge",
               edgecolor="white")
        ax.set_title(f"{workload} ({card['records']} prompts)", fontsize=10)
        ax.set_xlabel("prompt tokens")
    axes[0][0].set_ylabel("prompts")
    fig.tight_layout()
    return fig
