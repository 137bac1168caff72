"""Tables and figures of the reports, computed from the summary table (aggregate.py).

Metric definitions live here once; every report notebook calls these functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from sdbench.analyze.aggregate import DERIVED_SETTING
from sdbench.analyze.analysis import speculative
from sdbench.analyze.decisions import (
    CROSSOVER,
    PRECISION,
    SWITCH_GAIN,
    in_round,
    of_kind,
    read_decisions,
)
from sdbench.analyze.noise import CLASS
from sdbench.analyze.schedule_analysis import ALIKE, SPLIT, dynamic_k_comparison
from sdbench.analyze.step_model import predicted_speedups
from sdbench.plan import dynamic_k
from sdbench.report.point_tables import (
    data_cards,
    measurement_counts,
    pair_issue_table,
    problem_table,
)
from sdbench.report.sections import METHODS_PAGE
from sdbench.report.show import (
    ENGINE_MARK,
    METRIC_LABELS,
    OWN_CAPTION,
    _fmt,
    _sd_text,
    level_axis,
    mde_text,
    method_names,
    panel_grid,
    percent_text,
    role_marks,
    select,
    setting_label,
    show_table,
    speedup_text,
    with_interval,
    wrapped,
)

sns.set_theme(style="whitegrid", context="notebook")


@dataclass(frozen=True)
class RoundData:
    """What a round's report reads, from the summary stage's tables (`layout.SummaryTables`).

    summary: every measurement of the study; all_frame / all_points: this round's measurements
    and points, every engine and load (round 1's with the dynamic-K cells derived from it,
    `in_round`); frame / points: of those, the vLLM server's closed-loop ones (most sections);
    buckets: the per-bucket TPOT speedups of `frame`; schedules: cell id -> the dynamic-K
    schedule it measured; cards: workload -> data card (None where it is missing)."""

    summary: pd.DataFrame
    all_frame: pd.DataFrame
    all_points: pd.DataFrame
    frame: pd.DataFrame
    points: pd.DataFrame
    buckets: pd.DataFrame
    schedules: dict[str, list]
    cards: dict[str, dict | None]
    # per-request acceptance of `frame`'s speculative servers (`analyze.request_acceptance`)
    acceptance: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the study's decisions, computed by the summary stage (`analyze.decisions`)
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)


def load_round(round_name: str, summary: str, points: str, buckets: str, schedules: str,
               cards: str, acceptance: str | None = None,
               decisions: str | None = None) -> RoundData:
    """One round's tables (the arguments: the summary stage's files, as the report rule and
    the notebooks' parameters name them)."""
    measurements = pd.read_parquet(summary)
    all_frame = in_round(measurements, round_name)
    all_points = in_round(pd.read_parquet(points), round_name)
    per_bucket = pd.read_parquet(buckets)
    per_bucket = select(in_round(per_bucket, round_name), load="concurrency")
    frame = select(all_frame, load="concurrency")
    derived = json.loads(Path(schedules).read_text())
    sets = json.loads(Path(cards).read_text())
    return RoundData(summary=measurements, all_frame=all_frame, all_points=all_points,
                     frame=frame, points=select(all_points, load="concurrency"),
                     buckets=per_bucket,
                     schedules={cell: entry["schedule"] for cell, entry in derived.items()},
                     cards=data_cards(all_frame, sets),
                     acceptance=(pd.DataFrame() if acceptance is None else in_round(
                         pd.read_parquet(acceptance), round_name)),
                     decisions=(pd.DataFrame(columns=["decision", "round"]) if decisions is None
                                else read_decisions(decisions)))


def round_header(data: RoundData, study: str) -> str:
    """The report's first line (Markdown): cells, points, measurements, repeats, targets and
    workloads of the round."""
    points = data.all_points
    # the measurements of the points shown: round 1's include the dynamic-K cells derived
    # from it (`load_round`), so cells, points and measurements count the same cells
    # (a cell two rounds share has a row per round in the summary: each measurement once)
    frame = data.summary[data.summary["cell_id"].isin(points["cell_id"])].drop_duplicates(
        ["cell_id", "concurrency", "request_rate", "repeat"])
    repeats = sorted({int(n) for n in points["repeats"].dropna()}) if "repeats" in points else []
    return (f"**Study:** {study} — {frame['cell_id'].nunique()} cells, {len(points)} points, "
            f"{len(frame)} measurements ({measurement_counts(frame)}), "
            f"{' or '.join(map(str, repeats)) or '–'} repeat(s) per point. "
            f"**Targets:** {', '.join(sorted(frame['target'].unique()))}. "
            f"**Workloads:** {', '.join(sorted(frame['workload'].unique()))}.")


def show_problems(frame: pd.DataFrame) -> None:
    """The problem table of these measurements, and the pairs not compared (with why)."""
    from IPython.display import Markdown, display

    problems = problem_table(frame)
    if problems.empty:  # an answer, not an empty section
        display(Markdown("All measurements completed without failures."))
    show_table(problems)
    table = pair_issue_table(frame)
    if not table.empty:
        display(Markdown("**Pairs not compared** (the baseline point exists but differs in "
                         "device, vLLM build, dtype, prompt count or prefix-cache state: no "
                         "speedup):"))
    show_table(table)


def _design_text(units, seconds, per_unit: int) -> str:
    if units is None or pd.isna(units):
        return "more than 64 starts"
    text = f"{int(units)} start{'s' * (int(units) != 1)} × {per_unit} runs"
    if seconds is not None and pd.notna(seconds):
        text += f" (+{seconds / 60:.1f} min measuring per point)" if seconds else " (as run)"
    return text


def precision_table(decided: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The noise this run measured per engine, target, method and level of `frame` (standard
    deviations of the log speedup, ≈ shares): one run's, the baseline run's a pair shares with
    the other settings paired with it, the server starts' (both sides) and where that was
    measured, the minimum detectable speedup, and the server starts per point (runs per start
    as run) that would resolve ±5 % and ±10 %, with the measuring time they add per point
    (both sides); from the study's decisions (`decided`, `analyze.decisions`: over every
    measurement, a class borrowing the server starts' share where it did not measure it)."""
    table = of_kind(decided, PRECISION)
    if table.empty:
        return table
    keep = {tuple(None if pd.isna(v) else v for v in row)
            for row in frame[CLASS].drop_duplicates().itertuples(index=False)}
    table = table[[tuple(None if pd.isna(v) else v for v in row) in keep
                   for row in table[CLASS].itertuples(index=False)]]
    if table.empty:
        return table
    level = [f"c={int(c)}" if pd.notna(c) else f"{r:g} req/s"
             for c, r in zip(table["concurrency"], table["request_rate"], strict=True)]
    return pd.DataFrame({
        "engine": table["engine"], "target": table["target"], "method": table["method"],
        "level": level, "points": table["points"],
        "starts × runs per point": [f"{u} × {r}" for u, r in zip(
            table["starts per point"], table["runs per start"], strict=True)],
        "run sd": table["run sd"].map(_sd_text),
        "baseline run sd": table["baseline run sd"].map(_sd_text),
        "server starts sd": table["start sd"].map(_sd_text),
        "starts measured": table["start measured"],
        "df": table["df"].map(lambda v: "–" if pd.isna(v) else f"{min(v, 999):.0f}"),
        "detects ≥": table["mde"].map(mde_text),
        "for ±5 %": [_design_text(u, t, r) for u, t, r in zip(
            table["starts for ±5%"], table["added measuring s per point, ±5%"],
            table["runs per start"], strict=True)],
        "for ±10 %": [_design_text(u, t, r) for u, t, r in zip(
            table["starts for ±10%"], table["added measuring s per point, ±10%"],
            table["runs per start"], strict=True)]}).reset_index(drop=True)


def max_speedup_table(points: pd.DataFrame) -> pd.DataFrame:
    """Method x workload: the best mean speedup (95 % interval) and the k and concurrency that
    reached it; a method that is no setting to deploy says its role."""
    spec = speculative(points[points["round"] == "round1"])
    if spec.empty:
        return pd.DataFrame()
    best = spec.loc[spec.groupby(["speculator", "workload"])["speedup_mean"].idxmax()]
    best = best.assign(cell=[f"{speedup_text(r)} (k={int(r['k'])}, c={int(r['concurrency'])})"
                             for _, r in best.iterrows()],
                       name=best["speculator"] + role_marks(best))
    table = best.pivot(index="name", columns="workload", values="cell")
    table.columns.name = None
    table.index.name = "method"
    return table


def one_cell_panels(spec: pd.DataFrame, panel: list[str], rows: str, columns: str) -> bool:
    """Whether every heatmap panel (rows x columns per `panel` group) would hold one cell."""
    return bool((spec.groupby(panel)[[rows, columns]].nunique() == 1).all(axis=None))


def interval_dots(spec: pd.DataFrame, labels: pd.Series, title: str,
                  metric: str = "speedup") -> plt.Figure:
    """What a heatmap of one cell per panel would show, with what it would hide: a dot per
    point at its mean with its 95 % interval, one row per point, and the line at 1."""
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(spec) + 1.6))
    order = np.arange(len(spec))[::-1]
    mean = spec[f"{metric}_mean"].to_numpy(dtype=float)
    low = spec[f"{metric}_ci_low"].to_numpy(dtype=float)
    high = spec[f"{metric}_ci_high"].to_numpy(dtype=float)
    error = np.vstack([np.nan_to_num(mean - low), np.nan_to_num(high - mean)])
    ax.errorbar(mean, order, xerr=error, fmt="o", capsize=4)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(order, list(labels))
    ax.set_xlabel(METRIC_LABELS[metric])
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    setattr(fig, OWN_CAPTION, (
        f"{METRIC_LABELS[metric].capitalize()} of each point (a row each: setting, workload or "
        "bucket, concurrency) at its mean over repeats with its 95 % interval where it has one; "
        "the dashed line is no speedup. Dots in place of a heatmap: each panel would hold one "
        "cell."))
    return fig


def speedup_heatmaps(points: pd.DataFrame, metric: str = "speedup") -> plt.Figure | None:
    """One heatmap (k x concurrency) of mean speedups per method (rows) and workload (columns)."""
    spec = speculative(points[points["round"] == "round1"])
    if spec.empty:
        return None
    column = f"{metric}_mean"
    if one_cell_panels(spec, ["speculator", "workload"], "k", "concurrency"):
        return interval_dots(spec, spec["speculator"] + " k=" + spec["k"].astype(str) + " | "
                             + spec["workload"] + " | c=" + spec["concurrency"].astype(str),
                             METRIC_LABELS[metric] + " with 95 % intervals", metric)
    speculators = sorted(spec["speculator"].unique())
    workloads = sorted(spec["workload"].unique())
    fig, axes = plt.subplots(len(speculators), len(workloads), squeeze=False,
                             figsize=(3.6 * len(workloads) + 1, 2.4 * len(speculators) + 0.6))
    vmax = max(2.0, float(np.nanmax(spec[column])))
    for i, speculator in enumerate(speculators):
        for j, workload in enumerate(workloads):
            ax = axes[i][j]
            part = spec[(spec["speculator"] == speculator) & (spec["workload"] == workload)]
            if part.empty:
                ax.axis("off")
                continue
            grid = part.pivot_table(index="k", columns="concurrency", values=column,
                                    aggfunc="mean")
            sns.heatmap(grid, ax=ax, annot=True, fmt=".2f", cmap="RdYlGn", center=1.0, vmin=0,
                        vmax=vmax, linewidths=0.5,
                        cbar_kws={"label": "speedup (×)", "shrink": 0.8})
            ax.set_title(f"{speculator} | {workload}", fontsize=10)
            ax.set_xlabel("concurrency")
            ax.set_ylabel("k")
    fig.suptitle(METRIC_LABELS[metric] + ", mean over repeats — green > 1 > red", fontsize=11)
    fig.tight_layout()
    return fig


def _crossover_interval(low, high) -> str:
    """'[4.2, 11.0]'; '[4.2, beyond the levels measured]' where no level is clearly below 1
    (every level clearly above: from the highest level on)."""
    if pd.isna(low) and pd.isna(high):
        return "–"
    return f"[{_fmt(low)}, {'beyond the levels measured' if pd.isna(high) else _fmt(high)}]"


def crossover_table(decided: pd.DataFrame) -> pd.DataFrame:
    """Round 1's crossovers (`analyze.decisions`): where each setting's speedup falls below 1,
    with its confidence set from the noise model, and the levels measured without a
    speedup."""
    table = of_kind(decided, CROSSOVER, "round1")
    if table.empty:
        return table
    return pd.DataFrame({
        "target": table["target"], "workload": table["workload"],
        "method": table["speculator"], "k": table["k"].astype("Int64"),
        "speedup < 1 from concurrency": [
            _fmt(x) if sure or pd.isna(x) else "not established"
            for x, sure in zip(table["crossover"], table["established"], strict=True)],
        "95 % interval": [_crossover_interval(a, b) for a, b in zip(
            table["crossover_low"], table["crossover_high"], strict=True)],
        "interval from": table["interval"],
        "reading": table["reading"], "levels measured": table["levels"],
        "levels without a speedup": table["missing_levels"].fillna("–")})


def calibration_table(points: pd.DataFrame) -> pd.DataFrame:
    """Predicted against measured speedups of draft-model points whose draft was also measured
    as a target (step_model.predicted_speedups), one row per concurrency."""
    table = predicted_speedups(points)
    if table.empty:
        return table
    return pd.DataFrame({
        "target ← draft": table["target"] + " ← " + table["draft"],
        "workload": table["workload"], "k": table["k"], "concurrency": table["concurrency"],
        "acceptance length (rate)": [f"{length:.2f} ({rate:.1f} %)" for length, rate in zip(
            table["acceptance_length"], table["acceptance_rate"], strict=True)],
        "target step (ms)": table["target_step_ms"].map("{:.1f}".format),
        "draft step (ms)": table["draft_step_ms"].map("{:.1f}".format),
        "verification pass (ms)": [f"{v:.1f} ({how})" if np.isfinite(v) else f"– ({how})"
                                   for v, how in zip(table["verify_ms"], table["verify_from"],
                                                     strict=True)],
        "predicted TPOT speedup": table["predicted"].map(
            lambda v: f"{v:.2f}×" if np.isfinite(v) else "–"),
        "measured TPOT speedup": [with_interval(m, lo, hi) for m, lo, hi in zip(
            table["measured"], table["measured_ci_low"], table["measured_ci_high"],
            strict=True)],
        "measured ÷ predicted": [with_interval(m, lo, hi, "") for m, lo, hi in zip(
            table["ratio"], table["ratio_ci_low"], table["ratio_ci_high"], strict=True)],
        "output-token speedup": table["output_speedup"].map("{:.2f}×".format),
        "reading": table["reading"]})


def switch_gain_table(decided: pd.DataFrame) -> pd.DataFrame:
    """The gain of switching settings with load over the best static one (round 1,
    `analyze.decisions`), its interval from the noise model."""
    table = of_kind(decided, SWITCH_GAIN, "round1")
    if table.empty:
        return table
    return pd.DataFrame({
        "target": table["target"], "workload": table["workload"],
        "best static setting": table["static_best"],
        "its speedup (geo. mean)": table["static_speedup"].map("{:.2f}×".format),
        "per-load switch": table["switch_speedup"].map("{:.2f}×".format),
        "gain of switching": [with_interval(m * 100, lo * 100, hi * 100, " %") for m, lo, hi
                              in zip(table["gain"], table["gain_ci_low"], table["gain_ci_high"],
                                     strict=True)],
        "evaluated": table["evaluation"],
        "switch picks": table["switch_choice"],
        "levels without a speedup": table["missing_levels"].fillna("–")})


def schedule_text(schedule: list[list[int]]) -> str:
    """A num_speculative_tokens_per_batch_size schedule as a reader reads it: "k=5 at
    concurrency 1; off (k=0) at 2–24"."""
    parts = []
    for low, high, k in schedule:
        levels = f"{low}" if low == high else f"{low}–{high}"
        parts.append(f"{'off (k=0)' if k == 0 else f'k={k}'} at concurrency {levels}")
    return "; ".join(parts)


def schedule_lines(frame: pd.DataFrame, schedules: dict[str, list]) -> str:
    """Each measured dynamic-K schedule (Markdown), named by its method, target and workload
    (`frame`: rows with the schedules' cells), not by its cell id."""
    lines = []
    for cell_id, schedule in schedules.items():
        rows = frame[frame["cell_id"] == cell_id]
        name = (f"{rows['speculator'].iloc[0]} ({rows['target'].iloc[0]}, "
                f"{rows['workload'].iloc[0]})" if len(rows) else "a dynamic-K cell")
        lines.append(f"- {name}: {schedule_text(schedule)}")
    return "\n".join(lines)


def dynamic_k_table(frame: pd.DataFrame, schedules: dict[str, list]) -> pd.DataFrame:
    """Each measured dynamic-K schedule split three ways (`schedule_analysis.dynamic_k_comparison`):
    the mechanism's cost, the schedule's value and the net against the best static k, each a
    throughput ratio with a 95 % interval, per level and over all levels.

    frame: per-measurement rows (round 1 and the derived cells); schedules: cell_id -> the
    schedule it measured."""
    table = dynamic_k_comparison(frame, schedules)
    if table.empty:
        return table
    derived = frame[frame["setting"] == DERIVED_SETTING]
    keys = zip(derived["target"], derived["workload"],
               derived["speculator"].str.removesuffix(dynamic_k.DERIVED_ARM), strict=True)
    cells = dict(zip(keys, derived["cell_id"], strict=True))

    def schedule_of(row) -> list:
        return schedules.get(cells.get((row["target"], row["workload"], row["method"])), [])

    def k_at(row) -> str:
        schedule = schedule_of(row)
        if row["concurrency"] == "all" or not schedule:
            return "–"
        return str(next((k for lo, hi, k in schedule if lo <= row["concurrency"] <= hi),
                        schedule[-1][2]))

    def said(row) -> str:  # once per schedule, on its "all" row
        if row["concurrency"] != "all" or not schedule_of(row):
            return ""
        ks = {k for _, _, k in schedule_of(row)}
        kind = (f"constant k = {ks.pop()}: the mechanism alone, no schedule" if len(ks) == 1
                else "k changes with the batch size")
        return f"{kind}; static k measured {row.get('static measured', '–')}"

    def ratio(name: str) -> list[str]:
        if f"{name}_mean" not in table:
            return ["–"] * len(table)
        return [ALIKE if said == ALIKE else "–" if pd.isna(m) else with_interval(m, lo, hi)
                for m, lo, hi, said in zip(
                    table[f"{name}_mean"], table[f"{name}_ci_low"], table[f"{name}_ci_high"],
                    table.get(f"{name}_verdict", pd.Series(None, index=table.index)),
                    strict=True)]

    def method_name(name: str) -> str:
        method, runner = dynamic_k.runner_method(name)
        return method if runner is None else f"{method} ({runner.upper()} model runner)"

    out = pd.DataFrame({
        "target": table["target"], "workload": table["workload"],
        "method": table["method"].map(method_name),
        "concurrency": table["concurrency"].astype(str),
        "schedule k": [k_at(r) for _, r in table.iterrows()],
        "schedule": [said(r) for _, r in table.iterrows()],
        "best static k": table["best static k"].astype("Int64"),
        **{SPLIT[name]: ratio(name) for name in SPLIT},
        "verdict (net)": table["net_verdict"],
        # the engine settings the dynamic mechanism changed (said once, on the "all" row)
        "engine vs static k": [d if c == "all" and isinstance(d, str) else "" for c, d in zip(
            table["concurrency"], table.get("engine_differs", pd.Series(None, index=table.index)),
            strict=True)]})
    return out.drop(columns=[c for c in ("schedule", "engine vs static k", *SPLIT.values())
                             if not out[c].astype(bool).any()
                             or out[c].eq("–").all()])


def latency_plot(frame: pd.DataFrame, metric: str) -> plt.Figure | None:
    ok = frame[frame["status"] == "ok"]
    if ok.empty or metric not in ok:
        return None
    setting = setting_label(ok)
    if ok["target"].nunique() > 1:  # each target's own line: two targets' vanilla are not one
        setting = ok["target"] + ": " + setting
    ok = ok.assign(setting=wrapped(setting))
    grid = sns.relplot(data=ok, x="concurrency", y=metric, hue="setting", col="workload",
                       kind="line", marker="o", height=3.4, aspect=1.2,
                       facet_kws={"sharey": False})
    grid.set_axis_labels("concurrency", METRIC_LABELS[metric])
    for ax in grid.axes.flat:
        level_axis(ax, ok["concurrency"].unique())
    grid.figure.suptitle(METRIC_LABELS[metric] + " vs concurrency", y=1.03, fontsize=11)
    return grid.figure


def speedup_note(points: pd.DataFrame) -> str:
    """What this report's speedups rest on (Markdown), counted from its points: what their
    intervals cover, the points flagged for output drift or engine settings that differ, and
    those whose interval lacks the server starts' share. What a speedup and an interval are is
    said once, on the methods page."""
    spec = points[(points["method"] != "vanilla") & points["speedup_mean"].notna()]
    # (a point whose class and none near it measured two starts has no `instance_from`)
    not_covered = ("speedup_instance_from" in spec
                   and not spec["speedup_instance_from"].notna().all())
    drifted = int(spec.get("drift_flag", pd.Series(dtype=bool)).fillna(False).sum())
    engine_flagged = int(spec.get("engine_differs", pd.Series(dtype=object)).notna().sum())
    flags = [f"{n} with output drift above 2 % (⚠)" for n in [drifted] if n] + [
        f"{n} where the two servers resolved other engine settings than speculation "
        f"({ENGINE_MARK.strip()}: the speedup measures that difference too)"
        for n in [engine_flagged] if n]
    return (
        f'Speedups are paired output-token throughput ratios; [how they and their intervals '
        f'are computed]({METHODS_PAGE}#speedups-and-intervals).'
        + (f" Of {len(spec)} speculative points, " + " and ".join(flags) + "." if flags
           else "")
        + (" Some intervals do **not** cover the difference between two starts: no class of "
           "their engine ran a configuration on several starts (set the instance probe or "
           "more server instances)." if not_covered else ""))


def interval_coverage(points: pd.DataFrame) -> pd.DataFrame:
    """What the intervals of a report's points cover: one row per kind of interval, the most
    points first."""
    spec = points[(points["method"] != "vanilla") & points["speedup_mean"].notna()]
    covers = (spec["interval_covers"].value_counts() if "interval_covers" in spec
              else pd.Series(dtype=int))
    return pd.DataFrame({"what the interval rests on": list(covers.index),
                         "points": list(covers.values)})


def methods_table(points: pd.DataFrame) -> pd.DataFrame:
    """Every setting measured: engine, method, its draft / head, k values, targets, levels."""
    rows = []
    for (engine, _speculator, method, draft), group in points.groupby(
            ["engine", "speculator", "method", "draft"], dropna=False, sort=False):
        levels = [f"c={int(c)}" if engine == "serve" else f"batch {int(c)}"
                  for c in sorted(group["concurrency"].dropna().unique())]
        levels += [f"{r:g} req/s" for r in sorted(group["request_rate"].dropna().unique())]
        rows.append({"engine": engine, "method": method_names(group.iloc[:1]).iloc[0],
                     "vLLM method": method,
                     "draft / head": draft if pd.notna(draft) else "",
                     "k": ", ".join(str(int(k)) for k in sorted(group["k"].dropna().unique())),
                     "targets": ", ".join(sorted(group["target"].unique())),
                     "points": ", ".join(levels)})
    return pd.DataFrame(rows)


def speedup_lines(points: pd.DataFrame, x: str, metric: str = "speedup") -> plt.Figure | None:
    """Mean `metric` (a speedup column; 95 % interval as error bars) against `x` (concurrency,
    request_rate or a batch size in `concurrency`), one line per setting, one panel per target
    and workload."""
    spec = speculative(points).dropna(subset=[x, f"{metric}_mean"])
    if spec.empty:
        return None
    spec = spec.assign(setting=wrapped(setting_label(spec)),
                       panel=spec["target"] + " | " + spec["workload"])
    panels = list(dict.fromkeys(spec["panel"]))
    fig, axes = panel_grid(len(panels), 5.6, 3.6)
    for ax, panel in zip(axes, panels, strict=True):
        part = spec[spec["panel"] == panel].sort_values(x)
        for setting, line in part.groupby("setting", sort=False):
            mean = line[f"{metric}_mean"]
            low = (mean - line[f"{metric}_ci_low"]).fillna(0)
            high = (line[f"{metric}_ci_high"] - mean).fillna(0)
            ax.errorbar(line[x].astype(float), mean, yerr=[low, high], marker="o", capsize=3,
                        label=setting)
        ax.axhline(1.0, color="grey", lw=1, ls="--")
        level_axis(ax, part[x].astype(float).unique(), scale_log2=x != "request_rate")
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel({"request_rate": "request rate (req/s, Poisson)",
                       "concurrency": "concurrency"}.get(x, x))
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def engine_table(points: pd.DataFrame, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """Offline / Transformers points: speedup against the same engine's vanilla at the same
    batch size, acceptance, throughput; with `reference` (server points), the vLLM server's
    speedup for the same method, k, target and workload at concurrency = batch size."""
    spec = speculative(points)
    if spec.empty:
        return pd.DataFrame()
    same = ["target", "workload", "speculator", "k", "concurrency"]
    if reference is not None:
        server = speculative(reference)[same + ["speedup_mean", "speedup_ci_low",
                                                "speedup_ci_high"]]
        spec = spec.merge(server, on=same, how="left", suffixes=("", "_server"))
    out = pd.DataFrame({
        "target": spec["target"], "workload": spec["workload"], "method": method_names(spec),
        "k": spec["k"].astype("Int64"), "batch size": spec["concurrency"].astype("Int64"),
        "speedup": [speedup_text(r) for _, r in spec.iterrows()],
        "acceptance length": spec["spec_decode_acceptance_length_mean"].round(2),
        "acceptance": spec["spec_decode_acceptance_rate_mean"].map(percent_text),
        "output tok/s": spec["output_throughput_mean"].round(1)})
    if reference is not None:
        out["vLLM server speedup (c = batch size)"] = [
            with_interval(r["speedup_mean_server"], r["speedup_ci_low_server"],
                          r["speedup_ci_high_server"]) for _, r in spec.iterrows()]
    return out.reset_index(drop=True)
