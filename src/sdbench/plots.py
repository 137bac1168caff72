"""Tables and figures of the reports, computed from the summary table (aggregate.py).

Metric definitions live here once; every report notebook calls these functions.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .grid import card_path

sns.set_theme(style="whitegrid", context="notebook")

METRIC_LABELS = {
    "speedup": "speedup (total-token throughput ÷ vanilla)",
    "output_speedup": "output-throughput speedup",
    "tpot_speedup": "TPOT speedup (vanilla TPOT ÷ TPOT)",
    "spec_decode_acceptance_rate": "acceptance rate (%)",
    "spec_decode_acceptance_length": "mean acceptance length (tokens per step)",
    "mean_tpot_ms": "mean TPOT (ms)",
    "mean_ttft_ms": "mean TTFT (ms)",
}


def speculative(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["method"] != "vanilla") & frame["paired"]]


def setting_label(frame: pd.DataFrame) -> pd.Series:
    k = frame["k"].astype("Int64").astype(str)
    return np.where(frame["method"] == "vanilla", "vanilla", frame["speculator"] + " k=" + k)


def max_speedup_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Method x workload: the best mean speedup and the k and concurrency that reached it."""
    spec = speculative(frame)
    if spec.empty:
        return pd.DataFrame()
    mean = (spec.groupby(["speculator", "workload", "k", "concurrency"], as_index=False)
            ["speedup"].mean())
    best = mean.loc[mean.groupby(["speculator", "workload"])["speedup"].idxmax()]
    best = best.assign(cell=[f"{s:.2f}× (k={int(k)}, c={int(c)})"
                             for s, k, c in zip(best["speedup"], best["k"], best["concurrency"],
                                                strict=True)])
    table = best.pivot(index="speculator", columns="workload", values="cell")
    table.columns.name = None
    table.index.name = "method"
    return table


def speedup_heatmaps(frame: pd.DataFrame, metric: str = "speedup") -> plt.Figure | None:
    """One heatmap (k x concurrency) per method (rows) and workload (columns)."""
    spec = speculative(frame)
    if spec.empty:
        return None
    speculators = sorted(spec["speculator"].unique())
    workloads = sorted(spec["workload"].unique())
    fig, axes = plt.subplots(len(speculators), len(workloads), squeeze=False,
                             figsize=(3.6 * len(workloads) + 1, 2.4 * len(speculators) + 0.6))
    vmax = max(2.0, float(np.nanmax(spec[metric])))
    for i, speculator in enumerate(speculators):
        for j, workload in enumerate(workloads):
            ax = axes[i][j]
            part = spec[(spec["speculator"] == speculator) & (spec["workload"] == workload)]
            if part.empty:
                ax.axis("off")
                continue
            grid = part.pivot_table(index="k", columns="concurrency", values=metric,
                                    aggfunc="mean")
            sns.heatmap(grid, ax=ax, annot=True, fmt=".2f", cmap="RdYlGn", center=1.0, vmin=0,
                        vmax=vmax, cbar=False, linewidths=0.5)
            ax.set_title(f"{speculator} | {workload}", fontsize=10)
            ax.set_xlabel("concurrency")
            ax.set_ylabel("k")
    fig.suptitle(METRIC_LABELS[metric] + " — green > 1 > red", fontsize=11)
    fig.tight_layout()
    return fig


def acceptance_plot(frame: pd.DataFrame) -> plt.Figure | None:
    spec = speculative(frame)
    if spec.empty or "spec_decode_acceptance_rate" not in spec:
        return None
    spec = spec.assign(setting=setting_label(spec))
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * spec["setting"].nunique() + 2.5))
    for ax, metric in zip(axes, ("spec_decode_acceptance_rate", "spec_decode_acceptance_length"),
                          strict=True):
        sns.barplot(data=spec, y="setting", x=metric, hue="workload", ax=ax, errorbar=None)
        ax.set_xlabel(METRIC_LABELS[metric])
        ax.set_ylabel("")
    fig.suptitle("Acceptance (all concurrency levels pooled)", fontsize=11)
    fig.tight_layout()
    return fig


def latency_plot(frame: pd.DataFrame, metric: str) -> plt.Figure | None:
    ok = frame[frame["status"] == "ok"]
    if ok.empty or metric not in ok:
        return None
    ok = ok.assign(setting=setting_label(ok))
    grid = sns.relplot(data=ok, x="concurrency", y=metric, hue="setting", col="workload",
                       kind="line", marker="o", height=3.4, aspect=1.2,
                       facet_kws={"sharey": False})
    grid.set_axis_labels("concurrency", METRIC_LABELS[metric])
    levels = sorted(ok["concurrency"].unique())
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.minorticks_off()
    grid.figure.suptitle(METRIC_LABELS[metric] + " vs concurrency", y=1.03, fontsize=11)
    return grid.figure


def problem_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Points that were not measured cleanly: failed (no measurement) or invalid (too many failed
    requests). They never enter a speedup."""
    bad = frame[frame["status"] != "ok"]
    columns = ["workload", "speculator", "k", "concurrency", "status", "completed", "failed",
               "error", "cell_id"]
    return bad[[c for c in columns if c in bad]].reset_index(drop=True)


def points_table(frame: pd.DataFrame) -> pd.DataFrame:
    columns = ["workload", "speculator", "k", "concurrency", "status", "completed", "failed",
               "total_token_throughput", "output_throughput", "mean_tpot_ms", "mean_ttft_ms",
               "spec_decode_acceptance_rate", "speedup", "cell_id"]
    present = [c for c in columns if c in frame]
    return frame[present].sort_values(["workload", "speculator", "k", "concurrency"],
                                      na_position="first").reset_index(drop=True)


def provenance_table(frame: pd.DataFrame) -> pd.DataFrame:
    columns = ["vllm_distribution", "vllm_version", "device_kind", "device", "hostname",
               "git_commit", "git_dirty"]
    table = frame[columns].astype(str).value_counts().rename("records").reset_index()
    return table


def data_cards(frame: pd.DataFrame, root: str | Path = ".") -> dict[str, dict]:
    """The data cards of the prompt sets the records used, by workload name."""
    cards = {}
    for (workload, dataset, subset), _ in frame.groupby(["workload", "dataset", "subset"]):
        path = Path(root) / card_path(dataset, subset)
        cards[workload] = json.loads(path.read_text()) if path.exists() else None
    return cards


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
