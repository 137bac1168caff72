"""Per-request acceptance in the reports (the summary's acceptance table,
`analyze.request_acceptance`): its spread over requests per task group, against prompt length
and output position, and the check that the requests' counts add up to the engine's."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from sdbench.analyze import request_acceptance as ra
from sdbench.report.show import method_names, role_marks, show_empty, show_figure, show_table

# at most this many workloads get a row of panels (the rest are in the table)
MAX_WORKLOADS = 6


def _labels(frame: pd.DataFrame) -> pd.Series:
    """"<speculator> k=<k>" with its simulated and role marks, as the other tables name it."""
    k = frame["k"].map(lambda v: "" if pd.isna(v) else f" k={int(v)}")
    return method_names(frame, k) + role_marks(frame)


def not_reported(summary: pd.DataFrame) -> str:
    """Why a round has no per-request acceptance: the vLLM releases its speculative servers
    ran."""
    spec = summary[(summary["method"] != "vanilla") & (summary["engine"] == "serve")] \
        if "engine" in summary else summary.iloc[:0]
    versions = sorted({str(v) for v in spec.get("vllm_version", pd.Series()).dropna()})
    where = f"vLLM {', '.join(versions)}" if versions else "this vLLM"
    return (f"Per-request acceptance: not reported by {where} (vLLM 0.32 and later return it "
            "with each response, `--per-request-spec-decode-metrics`; the workflow turns it on "
            "where the installed vLLM has it), or no speculative server point in this round.")


def group_table(acceptance: pd.DataFrame) -> pd.DataFrame:
    """Per setting, workload and task group: requests (over runs), the pooled acceptance
    length and the per-request 10th / 50th / 90th percentiles."""
    table = ra.group_table(acceptance)
    if table.empty:
        return table
    table = table.assign(setting=_labels(table))
    return pd.DataFrame({
        "target": table["target"], "workload": table["workload"], "setting": table["setting"],
        "task group / bucket": table["bucket"],
        "requests (runs)": [f"{int(r)} ({int(n)})" for r, n in
                            zip(table["requests"], table["runs"], strict=True)],
        "acceptance length (pooled)": table["acceptance_length"],
        "per request: p10": table["p10"], "median": table["median"], "p90": table["p90"]})


def counter_note(acceptance: pd.DataFrame, frame: pd.DataFrame) -> str:
    """One line: in how many runs the requests' accepted and drafted tokens add up to the
    engine's counters for the run (within `ra.COUNTER_TOLERANCE`), naming any that do not."""
    check = ra.counter_check(acceptance, frame)
    if check.empty:
        return ""
    off = check[~check["agrees"]]
    text = (f"**Check:** the requests' drafted and accepted tokens add up to the engine's "
            f"counters for the run in {len(check) - len(off)} of {len(check)} runs (within "
            f"{ra.COUNTER_TOLERANCE:.0%}).")
    if not off.empty:
        worst = off.iloc[0]
        text += (f" ⚠ Off in {len(off)}: e.g. {worst['speculator']} on {worst['workload']} at "
                 f"concurrency {worst['concurrency']:g}, repeat {int(worst['repeat'])}: "
                 f"{int(worst['accepted'])} accepted by the requests against "
                 f"{worst['spec_decode_accepted_tokens']:.0f} by the counters.")
    return text


def acceptance_plot(acceptance: pd.DataFrame) -> plt.Figure | None:
    """Per workload: the mean per-request acceptance length against the prompt-length
    quartile (left) and the acceptance length against the output position (right, from
    requests with per-step counts)."""
    requests = ra.per_request(acceptance)
    if requests.empty:
        return None
    requests = requests.assign(setting=_labels(requests),
                               prompt_bin=ra.prompt_length_bins(requests))
    positions = ra.position_table(acceptance)
    if not positions.empty:
        positions = positions.assign(setting=_labels(positions))
    workloads = sorted(requests["workload"].unique())[:MAX_WORKLOADS]
    # one colour per setting in every panel, named once in the figure's legend
    names = sorted(requests["setting"].unique())
    palette = dict(zip(names, sns.color_palette(n_colors=len(names)), strict=True))
    fig, axes = plt.subplots(len(workloads), 2, figsize=(11, 3.4 * len(workloads)),
                             squeeze=False)
    for row, workload in zip(axes, workloads, strict=True):
        part = requests[requests["workload"] == workload]
        order = sorted(part["prompt_bin"].dropna().unique(),
                       key=lambda label: float(label.split("–")[0].split()[0]))
        sns.pointplot(data=part, x="prompt_bin", y="acceptance_length", hue="setting",
                      order=order, errorbar=("ci", 95), palette=palette, legend=False,
                      dodge=0.3 if part["setting"].nunique() > 1 else False, ax=row[0],
                      markersize=4, linewidth=1.2)
        row[0].set_xlabel("prompt length (quartile of the workload's requests)")
        row[0].set_ylabel("acceptance length per request")
        row[0].set_title(f"{workload}: against prompt length", fontsize=10)
        row[0].tick_params(axis="x", labelsize=8)
        at = positions[positions["workload"] == workload] if not positions.empty else positions
        if at.empty:
            row[1].text(0.5, 0.5, "no per-step counts (vLLM's `summary` level)",
                        ha="center", va="center", transform=row[1].transAxes)
            row[1].set_axis_off()
        else:
            sns.lineplot(data=at, x="position_from", y="acceptance_length", hue="setting",
                         palette=palette, marker="o", errorbar=None, ax=row[1], legend=False)
            row[1].set_xscale("symlog", base=2, linthresh=16)
            ticks = sorted(at["position_from"].unique())
            row[1].set_xticks(ticks, [f"{int(t)}" for t in ticks])
            row[1].set_xlabel("output position (first token of the bin)")
            row[1].set_ylabel("acceptance length (pooled)")
            row[1].set_title(f"{workload}: along the output", fontsize=10)
    fig.suptitle("Per-request acceptance (every request of every run; 95 % intervals of the "
                 "mean over requests)", fontsize=11)
    fig.tight_layout()
    fig.legend(handles=[Line2D([], [], color=palette[name], marker="o", label=name)
                        for name in names], loc="upper center", bbox_to_anchor=(0.5, 0),
               ncol=2, fontsize=8, frameon=False)
    return fig


def caption(acceptance: pd.DataFrame) -> str:
    requests = ra.per_request(acceptance)
    runs = requests[["cell_id", "concurrency", "request_rate", "repeat"]].drop_duplicates()
    return ("Left: the mean acceptance length (1 + accepted ÷ verification steps) of the "
            "requests in each quartile of the workload's prompt lengths, with its 95 % "
            "interval over those requests (requests of one prompt in several runs count "
            "each time); right: the acceptance length of the steps whose first token fell at "
            "that output position, pooled over requests and runs. "
            f"{len(requests)} requests in {len(runs)} runs.")



def show_section(data) -> None:
    """The report section (`plots.RoundData`): the table, the counters check and the figure,
    or why there is nothing (`not_reported`)."""
    from IPython.display import Markdown, display


    if data.acceptance.empty:
        show_empty(not_reported(data.all_frame))
        return
    show_table(group_table(data.acceptance))
    display(Markdown(counter_note(data.acceptance, data.summary)))
    show_figure(acceptance_plot(data.acceptance), caption=caption(data.acceptance))
