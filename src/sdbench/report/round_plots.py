"""Tables and figures of the Round 2 (context and target) and Round 3 (server parameters)
reports. Speedups are the summary's (paired with no speculation on the same target, server
arguments, workload and concurrency); this module only arranges them, and reads no file."""

from __future__ import annotations

import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from sdbench.analyze.acceptance import FROM_DRAFTS
from sdbench.analyze.aggregate import DYNAMIC_K_SETTINGS
from sdbench.analyze.analysis import speculative
from sdbench.analyze.stats import ratio_interval, verdict
from sdbench.analyze.temperature import (
    GREEDY,
    PROBABILISTIC,
    by_temperature,
    exact_draft_check,
)
from sdbench.report.findings import MAX_SENTENCES, deployable_mask
from sdbench.report.plots import interval_dots, one_cell_panels
from sdbench.report.show import (
    METRIC_LABELS,
    method_names,
    percent_text,
    role_marks,
    speedup_text,
    stat_text,
    with_interval,
)


def bucket_order(names) -> list[str]:
    """Buckets by size: '0.25k' < '0.5k' < '1k' < 'out2k'; names without a number last."""
    def size(name: str) -> tuple[float, str]:
        match = re.search(r"(\d+(?:\.\d+)?)\s*(k?)", str(name))
        if not match:
            return (float("inf"), str(name))
        return (float(match.group(1)) * (1000 if match.group(2) else 1), str(name))
    return sorted({str(n) for n in names}, key=size)


def target_label(points: pd.DataFrame) -> pd.Series:
    """'<target> (<quantization>)', or with the dtype it ran in for a full-precision target."""
    dtype = points["dtype"] if "dtype" in points else pd.Series(pd.NA, index=points.index)
    quant = points["quantization"].fillna(dtype.fillna("full precision"))
    return points["target"] + " (" + quant.astype(str) + ")"


def bucket_heatmaps(points: pd.DataFrame) -> plt.Figure | None:
    """Mean speedup per prompt/output bucket (rows) x concurrency (columns): one panel per
    target (rows of panels) and task (columns), per method and k."""
    spec = speculative(points)
    if spec.empty:
        return None
    spec = spec.assign(target_label=target_label(spec),
                       setting=spec["speculator"] + " k=" + spec["k"].astype(str))
    if one_cell_panels(spec, ["target_label", "setting", "dataset"], "subset", "concurrency"):
        return interval_dots(spec, spec["target_label"] + " | " + spec["setting"] + " | "
                             + spec["subset"] + " | c=" + spec["concurrency"].astype(str),
                             METRIC_LABELS["speedup"] + " by bucket, with 95 % intervals")
    panels = spec[["target_label", "setting"]].drop_duplicates().values.tolist()
    tasks = sorted(spec["dataset"].unique())
    fig, axes = plt.subplots(len(panels), len(tasks), squeeze=False,
                             figsize=(max(7.0, 3.8 * len(tasks) + 1), 2.2 * len(panels) + 0.8))
    vmax = max(2.0, float(np.nanmax(spec["speedup_mean"])))
    for i, (target, setting) in enumerate(panels):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            part = spec[(spec["target_label"] == target) & (spec["setting"] == setting)
                        & (spec["dataset"] == task)]
            if part.empty:
                ax.axis("off")
                continue
            grid = part.pivot_table(index="subset", columns="concurrency", values="speedup_mean",
                                    aggfunc="mean")
            grid = grid.reindex(bucket_order(grid.index))
            sns.heatmap(grid, ax=ax, annot=True, fmt=".2f", cmap="RdYlGn", center=1.0, vmin=0,
                        vmax=vmax, linewidths=0.5,
                        cbar_kws={"label": "speedup (×)", "shrink": 0.8})
            ax.set_title(f"{target}\n{setting} | {task}", fontsize=9)
            ax.set_xlabel("concurrency")
            ax.set_ylabel("bucket")
    fig.suptitle(METRIC_LABELS["speedup"] + " by bucket, mean over repeats", fontsize=11)
    fig.tight_layout()
    return fig


ACCEPTANCE_FLOOR = {"spec_decode_acceptance_rate": 0.0, "spec_decode_acceptance_length": 1.0}


def acceptance_by_bucket_plot(points: pd.DataFrame) -> plt.Figure | None:
    """Acceptance rate and mean acceptance length against the context-length bucket."""
    spec = speculative(points)
    if spec.empty or "spec_decode_acceptance_rate_mean" not in spec:
        return None
    spec = spec.assign(target_label=target_label(spec))
    tasks = sorted(spec["dataset"].unique())
    fig, axes = plt.subplots(2, len(tasks), squeeze=False,
                             figsize=(max(7.0, 4.5 * len(tasks) + 1), 6.5))
    for j, task in enumerate(tasks):
        part = spec[spec["dataset"] == task]
        order = bucket_order(part["subset"])
        part = part.assign(bucket=pd.Categorical(part["subset"], order, ordered=True))
        for i, metric in enumerate(("spec_decode_acceptance_rate",
                                    "spec_decode_acceptance_length")):
            ax = axes[i][j]
            sns.pointplot(data=part, x="bucket", y=f"{metric}_mean", hue="target_label", ax=ax,
                          order=order, errorbar=None,
                          # seaborn divides the dodge among the hue levels minus one
                          dodge=0.2 if part["target_label"].nunique() > 1 else False)
            ax.set_title(task, fontsize=10)
            ax.set_ylabel(METRIC_LABELS[metric])
            ax.set_xlabel("bucket")
            # from the metric's floor (0 %; 1 token per step, no draft accepted), not a
            # 1.90-2.10 axis around a single point
            ax.set_ylim(bottom=ACCEPTANCE_FLOOR[metric],
                        top=max(ax.get_ylim()[1], ACCEPTANCE_FLOOR[metric] + 1))
            if ax.get_legend() is not None and (i, j) != (0, len(tasks) - 1):
                ax.get_legend().remove()
            elif ax.get_legend() is not None:  # a reader's name, outside the data
                ax.legend(title="target", fontsize=8, title_fontsize=8,
                          loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Acceptance vs context length (all concurrency levels pooled)", fontsize=11)
    fig.tight_layout()
    return fig


def efficiency_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per target, task and bucket: mean acceptance length ÷ (1 + tokens drafted per step),
    the share of the tokens a verification step could yield that it did."""
    spec = speculative(points)
    if spec.empty or "acceptance_efficiency" not in spec:
        return pd.DataFrame()
    spec = spec.assign(target_label=target_label(spec))
    table = spec.pivot_table(index=["target_label", "speculator", "k", "dataset"],
                             columns="subset", values="acceptance_efficiency", aggfunc="mean")
    table = table[bucket_order(table.columns)]
    table.columns.name = "bucket"
    table.index = table.index.set_names(["target", "speculator", "k", "dataset"])
    return table.map(lambda x: "–" if pd.isna(x) else f"{x:.0%}")


def quantized_vs_full_table(points: pd.DataFrame) -> pd.DataFrame:
    """Each quantized target against its full-precision counterpart at equal size: throughput
    without speculation (quantized ÷ full) and the speculative speedup of each."""
    rows = []
    quantized = points[points["full_precision"].notna()]
    for (target, full, workload, concurrency), group in quantized.groupby(
            ["target", "full_precision", "workload", "concurrency"]):
        ref = points[(points["target"] == full) & (points["workload"] == workload)
                     & (points["concurrency"] == concurrency)]
        if ref.empty:
            continue
        vq, vf = group[group["method"] == "vanilla"], ref[ref["method"] == "vanilla"]
        ratio = (vq["total_token_throughput_mean"].iloc[0]
                 / vf["total_token_throughput_mean"].iloc[0]
                 if len(vq) and len(vf) else np.nan)
        for _, row in speculative(group).iterrows():
            twin = speculative(ref)
            twin = twin[(twin["speculator"] == row["speculator"]) & (twin["k"] == row["k"])]
            rows.append({
                "quantized target": f"{target} ({group['quantization'].iloc[0]})",
                "full precision": full, "workload": workload, "concurrency": concurrency,
                "vanilla tok/s, quantized ÷ full": "–" if pd.isna(ratio) else f"{ratio:.2f}×",
                "method": f"{row['speculator']} k={int(row['k'])}",
                "speedup (quantized)": speedup_text(row),
                "speedup (full precision)": speedup_text(twin.iloc[0]) if len(twin) else "–",
                "acceptance (quantized / full)": (
                    f"{percent_text(row.get('spec_decode_acceptance_rate_mean'))} / "
                    f"{percent_text(twin['spec_decode_acceptance_rate_mean'].iloc[0])}"
                    if len(twin) else "–")})
    return pd.DataFrame(rows)


def setting_heatmaps(points: pd.DataFrame) -> plt.Figure | None:
    """Round 3: mean speedup per setting (rows) x concurrency, per target, method and workload
    (derived dynamic-K cells are not settings: the round 1 report compares them)."""
    spec = speculative(points[~points["setting"].isin(DYNAMIC_K_SETTINGS)])
    if spec.empty:
        return None
    spec = spec.assign(panel=spec["target"] + " | " + spec["speculator"] + " k="
                       + spec["k"].astype(str) + " | " + spec["workload"])
    if one_cell_panels(spec, ["panel"], "setting", "concurrency"):
        return interval_dots(spec, spec["panel"] + " | " + spec["setting"] + " | c="
                             + spec["concurrency"].astype(str),
                             METRIC_LABELS["speedup"] + " per setting, with 95 % intervals")
    panels = sorted(spec["panel"].unique())
    fig, axes = plt.subplots(1, len(panels), squeeze=False,
                             figsize=(4.5 * len(panels) + 1,
                                      0.6 * spec["setting"].nunique() + 2.2))
    vmax = max(2.0, float(np.nanmax(spec["speedup_mean"])))
    for ax, panel in zip(axes[0], panels, strict=True):
        grid = spec[spec["panel"] == panel].pivot_table(
            index="setting", columns="concurrency", values="speedup_mean", aggfunc="mean")
        sns.heatmap(grid, ax=ax, annot=True, fmt=".2f", cmap="RdYlGn", center=1.0, vmin=0,
                    vmax=vmax, linewidths=0.5,
                        cbar_kws={"label": "speedup (×)", "shrink": 0.8})
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("setting")
    fig.suptitle(METRIC_LABELS["speedup"] + " per setting, mean over repeats", fontsize=11)
    fig.tight_layout()
    return fig


def winners_table(points: pd.DataFrame) -> pd.DataFrame:
    """Round 3: per target, workload and concurrency, the configuration (a setting, with or
    without speculation) with the highest output-token throughput, and the runner-up. Settings
    are ranked by absolute throughput, not by speedups: each setting's speedup is over its own
    vanilla cell, and a setting that slows its vanilla more would "win" that way. The winner's
    throughput is also given against the default setting's vanilla (a ratio of means), with
    its own paired speedup and the verdict of that interval. Derived dynamic-K cells are not
    settings (the round 1 report compares them)."""
    part = points[~points["setting"].isin(DYNAMIC_K_SETTINGS)
                  & points["output_throughput_mean"].notna()]
    rows = []
    for (target, workload, concurrency), group in part.groupby(
            ["target", "workload", "concurrency"]):
        ranked = group.sort_values("output_throughput_mean", ascending=False)
        best = ranked.iloc[0]
        default = group[(group["method"] == "vanilla") & (group["setting"] == "default")]
        spec = best["method"] != "vanilla"
        versus_default = (best["output_throughput_mean"]
                          / default["output_throughput_mean"].iloc[0] if len(default) else None)
        rows.append({"target": target, "workload": workload, "concurrency": concurrency,
                     "best configuration": _configuration(best),
                     "output tok/s": stat_text(best, "output_throughput"),
                     "÷ default vanilla": ("–" if versus_default is None
                                           else f"{versus_default:.2f}×"),
                     "its speedup (own vanilla)": speedup_text(best) if spec else "–",
                     "speculation pays": (verdict(best["speedup_ci_low"], best["speedup_ci_high"])
                                          if spec else "no speculation"),
                     "runner-up": (f"{_configuration(ranked.iloc[1])}: "
                                   f"{stat_text(ranked.iloc[1], 'output_throughput')} tok/s"
                                   if len(ranked) > 1 else "–")})
    return pd.DataFrame(rows)


def _configuration(row) -> str:
    what = ("no speculation" if row["method"] == "vanilla"
            else f"{row['speculator']} k={int(row['k'])}")
    return f"{row['setting']} ({what})"


def per_position_plot(frame: pd.DataFrame) -> plt.Figure | None:
    """Acceptance rate of the i-th proposed token, per setting (mean over points)."""
    spec = speculative(frame)
    column = "spec_decode_per_position_acceptance_rates"
    if spec.empty or column not in spec:
        return None
    rows = []
    for _, row in spec.iterrows():
        rates = row[column]
        if isinstance(rates, str):
            rates = json.loads(rates)
        if not isinstance(rates, list):
            continue
        for position, rate in enumerate(rates, start=1):
            rows.append({"setting": f"{row['setting']} | {row['speculator']} k={int(row['k'])}",
                         "concurrency": row["concurrency"], "position": position, "rate": rate})
    if not rows:
        return None
    data = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.lineplot(data=data, x="position", y="rate", hue="setting", marker="o", ax=ax,
                 errorbar=None)
    ax.set_xticks(sorted(data["position"].unique()))
    ax.set_xlabel("position of the proposed token")
    ax.set_ylabel("acceptance rate")
    ax.set_title("Per-position acceptance (mean over concurrency levels and repeats)",
                 fontsize=11)
    fig.tight_layout()
    return fig


def _sample_text(group: pd.DataFrame) -> str:
    """' (2 × 3 req)': the repeats and the requests per repeat a bucket's speedup rests on
    (tables written before the summary counted them: nothing)."""
    if "requests" not in group or group["requests"].isna().all():
        return ""
    per = group["requests"].dropna().astype(int)
    count = str(per.iloc[0]) if per.nunique() == 1 else f"{per.min()}–{per.max()}"
    return f" ({len(group)} × {count} req)"


def bucket_speedup_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per-bucket TPOT speedups (the summary's bucket table, `summary.bucket_speedups`): the
    geometric mean over repeats and its 95 % interval on the log scale (`stats.ratio_interval`),
    with the repeats × requests per repeat it rests on, a column per bucket."""
    if data.empty:
        return data
    rows = []
    for keys, group in data.groupby(["target", "workload", "setting", "speculator", "k",
                                     "concurrency", "bucket"]):
        mean, low, high = ratio_interval(group["tpot_speedup"].to_numpy(dtype=float))
        rows.append({**dict(zip(["target", "workload", "setting", "speculator", "k",
                                 "concurrency", "bucket"], keys, strict=True)),
                     "value": with_interval(mean, low, high) + _sample_text(group)})
    table = pd.DataFrame(rows).pivot(index=["target", "workload", "setting", "speculator", "k",
                                            "concurrency"], columns="bucket", values="value")
    table = table[bucket_order(table.columns)]
    table.columns.name = "bucket"
    return table.fillna("–")


def sampled_settings(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of settings measured above temperature 0 somewhere (a method kept to the
    greedy workload has nothing to compare across temperatures)."""
    if rows.empty:
        return rows
    keys = ["speculator", "k", "base_workload"]
    hot = rows.groupby(keys)["temperature"].transform("max") > 0
    return rows[hot]


def _sampled_label(rows: pd.DataFrame) -> pd.Series:
    """'<method> k=<k> (<draft sampling> draft)' of `by_temperature` rows (no draft: none)."""
    return (method_names(rows) + " k=" + rows["k"].astype("Int64").astype(str)
            + np.where(rows["draft_sampling"] == "–", "",
                       " (" + rows["draft_sampling"].astype(str) + " draft)"))


def _temperature_label(value) -> str:
    return f"T={float(value):g}"


# what a greedy and a probabilistic draft of the same pair share (all but the draft sampling)
DRAFT_TWINS = ["round", "setting", "engine", "target", "method", "k", "draft", "base_workload",
               "concurrency"]


def temperature_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per setting, workload and concurrency of a workload measured at several temperatures:
    acceptance length and speedup at each temperature side by side (mean over repeats,
    95 % interval; the pooled acceptance rate and drafts beside it), flagged where the
    outputs' lengths drifted from the baseline's (sampling without fixed output lengths)."""
    rows = sampled_settings(by_temperature(points))
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(label=_sampled_label(rows) + role_marks(rows))
    out, greedy_at_zero, probabilistic = [], {}, {}
    for (label, workload, level), part in rows.groupby(
            ["label", "base_workload", "concurrency"], sort=False):
        row = {"method": label, "workload": workload, "concurrency": int(level)}
        same = tuple(part[DRAFT_TWINS].iloc[0])
        if (part["draft_sampling"] == PROBABILISTIC).all():
            probabilistic[len(out)] = same
        for _, point in part.iterrows():
            t = _temperature_label(point["temperature"])
            length = with_interval(point["spec_decode_acceptance_length_mean"],
                                   point["spec_decode_acceptance_length_ci_low"],
                                   point["spec_decode_acceptance_length_ci_high"], "")
            rate = point["acceptance_rate_pooled"]
            over = ("; interval over its drafts"
                    if point.get("acceptance_interval_from") == FROM_DRAFTS else "")
            row[f"acceptance length at {t}"] = (
                f"{length} ({percent_text(rate)}, {int(point['drafts'])} drafts, "
                f"{int(point['repeats_ok'])} rep.{over})" if pd.notna(point.get("drafts"))
                and pd.notna(rate) else length)
            if point["temperature"] == 0 and point["draft_sampling"] == GREEDY:
                greedy_at_zero[same] = row[f"acceptance length at {t}"]
            drift = point.get("output_drift_mean")
            row[f"speedup at {t}"] = speedup_text(point) + (
                f" ⚠ outputs {drift:+.0%} long" if point.get("drift_flag") and pd.notna(drift)
                else "")
        out.append(row)
    zero = f"acceptance length at {_temperature_label(0)}"
    for i, same in probabilistic.items():
        # a probabilistic draft not measured at 0 drafts what the greedy one does there: for
        # greedy requests vLLM takes the draft's argmax whatever its draft_sample_method
        # (vllm/v1/spec_decode/llm_base_proposer.py, `_sample_from_logits`)
        if zero not in out[i] and same in greedy_at_zero:
            out[i][zero] = f"{greedy_at_zero[same]}: the greedy draft's (at 0 both draft argmax)"
    table = pd.DataFrame(out)
    temps = [_temperature_label(t) for t in sorted(rows["temperature"].unique())]
    columns = ["method", "workload", "concurrency",
               *[f"acceptance length at {t}" for t in temps],
               *[f"speedup at {t}" for t in temps]]
    return table.reindex(columns=columns).fillna("–")


def temperature_plot(points: pd.DataFrame) -> plt.Figure | None:
    """Acceptance length and speedup against temperature, a line per setting and concurrency
    with 95 % intervals, a column per workload."""
    rows = sampled_settings(by_temperature(points))
    if rows.empty:
        return None
    rows = rows.assign(line=_sampled_label(rows) + " c=" + rows["concurrency"].astype(str))
    workloads = list(dict.fromkeys(rows["base_workload"]))
    # each axis name on two lines: one line of each ran into the other panel's
    metrics = (("spec_decode_acceptance_length", "acceptance length\n(tokens per step)"),
               ("speedup", "speedup\n(output-token throughput ÷ vanilla)"))
    fig, axes = plt.subplots(2, len(workloads), squeeze=False,
                             figsize=(max(7.0, 5.5 * len(workloads) + 2.5), 7.5))
    for j, workload in enumerate(workloads):
        part = rows[rows["base_workload"] == workload]
        for i, (metric, label) in enumerate(metrics):
            ax = axes[i][j]
            for line, one in part.groupby("line", sort=False):
                one = one.sort_values("temperature")
                mean = one[f"{metric}_mean"].to_numpy(dtype=float)
                error = np.vstack([
                    np.nan_to_num(mean - one[f"{metric}_ci_low"].to_numpy(dtype=float)),
                    np.nan_to_num(one[f"{metric}_ci_high"].to_numpy(dtype=float) - mean)])
                ax.errorbar(one["temperature"], mean, yerr=error, marker="o", capsize=3,
                            label=line)
            if metric == "speedup":
                ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
            else:
                ax.set_ylim(bottom=1.0)
            ax.set_xlabel("sampling temperature")
            ax.set_ylabel(label)
            ax.set_title(workload, fontsize=10)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle("Acceptance and speedup against sampling temperature", fontsize=11)
    fig.tight_layout()
    return fig


def temperature_finding(points: pd.DataFrame) -> str:
    """Per line of `temperature_plot` (deployable settings where there are any; at most three):
    its speedup and acceptance length at the lowest and the highest temperature measured."""
    rows = sampled_settings(by_temperature(points))
    if rows.empty:
        return ""
    rows = rows.assign(line=_sampled_label(rows) + " at c=" + rows["concurrency"].astype(str))
    if deployable_mask(rows).any():
        rows = rows[deployable_mask(rows)]
    sentences = []
    for (workload, line), one in rows.groupby(["base_workload", "line"], sort=False):
        if len(one) < 2:
            continue
        ends = one.sort_values("temperature").iloc[[0, -1]]
        speedups = " → ".join(f"{v:.2f}×" for v in ends["speedup_mean"])
        lengths = " → ".join("–" if pd.isna(v) else f"{v:.1f}"
                             for v in ends["spec_decode_acceptance_length_mean"])
        sentences.append(f"{line} on {workload}, temperature {ends['temperature'].iloc[0]:g} → "
                         f"{ends['temperature'].iloc[-1]:g}: speedup {speedups}, acceptance "
                         f"length {lengths}.")
    return " ".join(sentences[:MAX_SENTENCES])


def exact_draft_table(points: pd.DataFrame) -> pd.DataFrame:
    """The known answer under sampling (`analyze.temperature.exact_draft_check`), readable."""
    table = exact_draft_check(points)
    if table.empty:
        return table
    return pd.DataFrame({
        "target ← draft": table["target"] + " ← " + table["draft"],
        "method": table["speculator"] + " k=" + table["k"].astype("Int64").astype(str),
        "workload": table["base_workload"], "concurrency": table["concurrency"],
        "temperature": table["temperature"].map("{:g}".format),
        "draft sampling": table["draft_sampling"],
        "acceptance length at T=0": table["greedy_level"].map("{:.2f}".format),
        "acceptance length sampled": [
            with_interval(m, lo, hi, "") + f" ({percent_text(r)}, {int(n)} drafts)"
            if pd.notna(n) else with_interval(m, lo, hi, "") for m, lo, hi, r, n in zip(
                table["acceptance_length"], table["acceptance_ci_low"],
                table["acceptance_ci_high"], table["acceptance_rate_pooled"],
                table["drafts"], strict=True)],
        "expected": table["expected"], "check": table["reading"]})


def seeds_note(summary: pd.DataFrame) -> str:
    """What seeded the sampled requests of this round: their recorded per-request seeds
    (`loadgen.request_seed`), or none."""
    if summary.empty or "temperature" not in summary:
        return ""
    sampled = summary[summary["temperature"].astype(float).fillna(0) > 0]
    if sampled.empty:
        return ""
    seeds = sampled.get("request_seed", pd.Series(dtype=float)).dropna()
    if seeds.empty:
        return ("Sampled requests carried no seed of their own (the load generator's "
                "request seed was off): vLLM sampled them from each server's own random state.")
    return (f"Every sampled request carried its repeat's seed (seeds {int(seeds.min())}–"
            f"{int(seeds.max())} over {len(sampled)} measurements), the same on both servers "
            "of a pair.")
