"""Tables and figures of the reports, computed from the summary table (aggregate.py).

Metric definitions live here once; every report notebook calls these functions.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from sdbench.analyze import stops
from sdbench.analyze.acceptance import (
    acceptance_check,
    break_even,
    real_point,
    simulated_label,
    simulated_lengths,
    sweep_points,
)
from sdbench.analyze.aggregate import DERIVED_SETTING
from sdbench.analyze.analysis import (
    ALIKE,
    SPLIT,
    dynamic_k_comparison,
    predicted_break_even,
    predicted_speedups,
    speculative,
)
from sdbench.analyze.decisions import (
    BEST_SETTING,
    CROSSOVER,
    PRECISION,
    SWITCH_GAIN,
    in_round,
    of_kind,
    read_decisions,
)
from sdbench.analyze.noise import CLASS, point_noise
from sdbench.analyze.stats import interval_number, level_text
from sdbench.plan import grid

sns.set_theme(style="whitegrid", context="notebook")

METRIC_LABELS = {
    "speedup": "speedup (output-token throughput ÷ vanilla)",
    "total_speedup": "total-token speedup (prompt + output tokens/s ÷ vanilla)",
    "tpot_speedup": "TPOT speedup (vanilla TPOT ÷ TPOT)",
    "spec_decode_acceptance_rate": "acceptance rate (%)",
    "spec_decode_acceptance_length": "mean acceptance length (tokens per step)",
    "mean_tpot_ms": "mean TPOT (ms)",
    "mean_ttft_ms": "mean TTFT (ms)",
}


def cell_text(value) -> str:
    """One table cell as a reader wants it: "–" where nothing applies (None, NaN, <NA>), whole
    numbers without decimals, large numbers with thousands separators and no decimals, others
    with two decimals, small ones with three significant digits."""
    if isinstance(value, (list, tuple, dict, np.ndarray)):
        return str(value)
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, (float, np.floating)):
        if float(value).is_integer() and abs(value) < 1e15:
            return cell_text(int(value))
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"
    return str(value)


# the summary's column names a table may show, as a reader names them
HEADERS = {"cell_id": "cell", "baseline_cell_id": "baseline cell",
           "pair_issue": "why not paired", "target_label": "target"}


def header_text(column) -> str:
    """A table header as a reader reads it: no raw column name (`HEADERS`, else its
    underscores as spaces)."""
    name = str(column)
    return HEADERS.get(name, name.replace("_", " "))


def table_html(table: pd.DataFrame) -> str:
    """A report table: no row numbers (a meaningful index becomes columns), every cell through
    `cell_text`, and a wide table scrolls inside the page instead of widening it."""
    # an unnamed index is row labels left over from a filter, never a column
    unnamed = all(name is None for name in table.index.names)
    shown = (table if isinstance(table.index, pd.RangeIndex)
             else table.reset_index(drop=unnamed))
    shown = shown.astype(object).apply(lambda column: column.map(cell_text))
    # the columns' own name (a pivot's "bucket") would head a column of its own, over nothing
    shown.columns.name = None
    shown.columns = [header_text(c) for c in shown.columns]
    return ('<div class="sdbench-table" style="overflow-x: auto; max-width: 100%;">'
            + shown.to_html(index=False, border=0) + "</div>")


# the output metadata key of a "nothing to show" line: a section whose outputs are all such
# lines is left out of the HTML page and its line listed at the end (pages.fold_empty_sections)
EMPTY_MARK = "sdbench_empty"


def show_empty(text: str) -> None:
    """What a section would have shown and why it has nothing (Markdown), marked as such."""
    from IPython.display import Markdown, display

    display(Markdown(text), metadata={EMPTY_MARK: True})


def show_table(table: pd.DataFrame | None, empty: str | None = None) -> None:
    """Display `table` in a report (`table_html`), or the Markdown `empty` when it has no rows
    (nothing when `empty` is None)."""
    from IPython.display import HTML, display

    if table is None or table.empty:
        if empty:
            show_empty(empty)
        return
    display(HTML(table_html(table)))


def figure_text(fig: plt.Figure) -> str:
    """What a figure shows, from its own titles and axis labels (its alt text): its title,
    then each panel's title, and what it plots against what."""
    title = fig.get_suptitle()
    panels = []
    for ax in fig.get_axes():
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        what = " against ".join(t for t in (ax.get_ylabel(), ax.get_xlabel()) if t)
        part = "; ".join(t for t in (ax.get_title(), what) if t)
        if part and part not in panels:
            panels.append(part)
    text = (title.rstrip(".") + ". " if title else "") + (
        f"{len(panels)} panel(s): " + " | ".join(panels) if panels else "")
    return " ".join(text.split()) or "A figure of the report"


def figure_html(fig: plt.Figure, caption: str | None = None) -> str:
    """`fig` as an HTML figure: the PNG inline, its alt text (`figure_text`) and a caption
    (`caption`, else its title), so that no report figure goes without either."""
    import base64
    import html
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=fig.dpi)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    alt = figure_text(fig)
    caption = caption or alt
    return (f'<figure class="sdbench-figure" style="margin: 0 0 1em 0;"><img alt="'
            f'{html.escape(alt, quote=True)}" src="data:image/png;base64,{data}" '
            'style="max-width: 100%;"/><figcaption style="font-size: 0.9em; color: #444;">'
            f"{html.escape(caption)}</figcaption></figure>")


def show_figure(fig: plt.Figure | None, empty: str | None = None,
                caption: str | None = None) -> None:
    """Display `fig` in a report with its alt text and caption (`figure_html`) and close it,
    or the Markdown `empty` when there is none."""
    from IPython.display import HTML, display

    if fig is None:
        if empty:
            show_empty(empty)
        return
    display(HTML(figure_html(fig, caption)))
    plt.close(fig)


@dataclass(frozen=True)
class RoundData:
    """What a round's report reads, from the summary stage's tables (`layout.SummaryTables`).

    summary: every measurement of the study; all_frame / all_points: this round's measurements
    and points, every engine and load (round 1's points with the dynamic-K cells derived from
    it); frame / points: of those, the vLLM server's closed-loop ones (most sections);
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
    # the noise model of every point of the study (`noise.point_noise` over `summary`: a
    # round's classes may borrow the server starts' share from another's, the instance probe)
    noise: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the study's decisions, computed by the summary stage (`analyze.decisions`)
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)


def load_round(round_name: str, summary: str, points: str, buckets: str, schedules: str,
               cards: str, acceptance: str | None = None,
               decisions: str | None = None) -> RoundData:
    """One round's tables (the arguments: the summary stage's files, as the report rule and
    the notebooks' parameters name them)."""
    measurements = pd.read_parquet(summary)
    all_frame = measurements[measurements["round"] == round_name]
    if round_name == "round3":  # the dynamic-K cells belong to round 1's report
        all_frame = in_round(all_frame, round_name)
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
                     noise=point_noise(measurements),
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


def level_axis(ax, levels, scale_log2: bool = True) -> None:
    """The reports' one convention for a load axis: ticks at the levels measured, labelled as
    they are (1, 2, 4, 24: no 1.2 or 1.900-2.100), concurrency on a log2 scale."""
    levels = sorted({float(x) for x in levels})
    if scale_log2 and levels and levels[0] > 0:
        ax.set_xscale("log", base=2)
    if len(levels) == 1:  # one level: a little room either side, not a 0.2-wide axis
        ax.set_xlim(levels[0] / 2 if scale_log2 else levels[0] - 1,
                    levels[0] * 2 if scale_log2 else levels[0] + 1)
    ax.set_xticks(levels, [cell_text(x) for x in levels])
    ax.minorticks_off()


def method_names(frame: pd.DataFrame, suffix: pd.Series | str = "") -> pd.Series:
    """Each row's method name (+ `suffix`), marked "(simulated: <vLLM method> at acceptance X
    (source))" where vLLM accepted its drafts at a set rate (`acceptance.simulated_label`):
    from a point's `simulated_acceptance` or a measurement's `spec_options`, the source from
    the config's `acceptance_source` where it names one."""
    names = frame["speculator"] + suffix
    none = pd.Series(None, index=frame.index, dtype=object)
    methods, sources = frame.get("method", none), frame.get("acceptance_source", none)
    return pd.Series([name if pd.isna(length) else simulated_label(
        name, grid.synthetic_options(length), method, source) for name, length, method, source
        in zip(names, simulated_lengths(frame), methods, sources, strict=True)],
        index=frame.index)


def role_marks(frame: pd.DataFrame) -> pd.Series:
    """" (pipeline check)" or " (what-if)" for rows of cells that are no setting to deploy
    (`grid.cell_role`), "" for the others."""
    roles = (frame["role"].fillna(grid.DEPLOYABLE) if "role" in frame
             else pd.Series(grid.DEPLOYABLE, index=frame.index))
    return pd.Series(np.where(roles == grid.DEPLOYABLE, "", " (" + roles + ")"),
                     index=frame.index)


# characters a line of a setting's name may take in a figure's legend or axis
LEGEND_WIDTH = 48


def wrapped(labels) -> list[str]:
    """Settings' names as a figure shows them: a simulated setting's name carries its
    acceptance's source, and unwrapped it outgrows the figure (a legend beside the panels
    wider than the figure fails seaborn: "left cannot be >= right")."""
    return [textwrap.fill(str(text), LEGEND_WIDTH) for text in labels]


def setting_label(frame: pd.DataFrame) -> pd.Series:
    """"<method> k=<k>" of each row ("vanilla" without speculation), simulated ones marked."""
    k = frame["k"].astype("Int64").astype(str)
    return np.where(frame["method"] == "vanilla", "vanilla", method_names(frame, " k=" + k))


def _break_even_texts(table: pd.DataFrame, column: str) -> list[str]:
    """'3.24 [3.05, 3.49]' per row of a break-even table (`column` the estimate, with its
    `<column>_side` or `break_even_side`, `ci_low`, `ci_high` and their sides): an end
    beyond the lengths swept as "≤" the lowest or "> " the highest."""
    def length(value, side) -> str:
        return f"{side}{value:.2f}" if side != ">" else f"> {value:.2f}"

    side = f"{column}_side" if f"{column}_side" in table else "break_even_side"
    return ["none (the speedup does not rise with the acceptance length)" if pd.isna(m)
            else f"{length(m, ms)} [{length(lo, ls)}, {length(hi, hs)}]"
            for m, ms, lo, ls, hi, hs in zip(table[column], table[side], table["ci_low"],
                                             table["ci_low_side"], table["ci_high"],
                                             table["ci_high_side"], strict=True)]


def _fitted_texts(table: pd.DataFrame) -> list[str]:
    """What each break-even's line was fitted through: '2 swept + the real cell (5.62)'."""
    return [f"{n} swept" + (f" + the real cell ({x:.2f})" if real else "")
            for n, real, x in zip(table["lengths"], table["real_in_fit"],
                                  table["real_acceptance"], strict=True)]


def _sweep_keys(table: pd.DataFrame) -> dict[str, pd.Series]:
    """The columns that name a sweep's row in the break-even tables."""
    return {"target": table["target"], "workload": table["workload"],
            "method": table["method"], "k": table["k"],
            "concurrency": table["concurrency"].astype("Int64")}


def break_even_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per swept method, k and concurrency: the break-even acceptance length with its 95 %
    interval, the method's real acceptance there and what follows (`acceptance.break_even`)."""
    table = break_even(points)
    if table.empty:
        return table
    return pd.DataFrame({
        **_sweep_keys(table), "fitted through": _fitted_texts(table),
        "break-even acceptance length (95 %)": _break_even_texts(table, "break_even"),
        "real acceptance length": table["real_acceptance"].map(
            lambda v: "–" if pd.isna(v) else f"{v:.2f}"),
        "reading": table["reading"]})


def break_even_prediction_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per draft-model sweep and concurrency: the break-even acceptance length the step-time
    model predicts from the draft's and target's step times and the verification cost, beside
    the one the sweep measured on the same quantity, the TPOT speedup
    (`analysis.predicted_break_even`)."""
    table = predicted_break_even(points)
    if table.empty:
        return table
    return pd.DataFrame({
        **_sweep_keys(table),
        "step-time model": [
            f"{p:.2f}" + ("" if np.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")
            + f" = ({k} × {d:.1f} + {v:.1f}) ÷ {t:.1f} ms (verify: {how})"
            for p, lo, hi, k, d, v, t, how in zip(
                table["predicted"], table["predicted_low"], table["predicted_high"], table["k"],
                table["draft_step_ms"], table["verify_ms"], table["target_step_ms"],
                table["verify_from"], strict=True)],
        "measured on TPOT speedup (95 %)": [
            f"{text} ({fitted})" for text, fitted in zip(
                _break_even_texts(table, "measured"), _fitted_texts(table), strict=True)],
        "a draft pass in a round ÷ the draft's TPOT, as measured (the model: 1)": [
            "–" if np.isnan(share) else f"{share:.2f} [{low_side}{lo:.2f}, {high_side}{hi:.2f}]"
            for share, lo, hi, low_side, high_side in zip(
                table["implied_draft_share"], table["implied_draft_share_low"],
                table["implied_draft_share_high"], table["ci_low_side"], table["ci_high_side"],
                strict=True)],
        "reading": np.select(
            [~table["tested"], table["agrees"], table["overlaps"]],
            ["untested: the interval runs beyond the lengths swept on both sides (more "
             "repeats or lengths would test it)", "agrees: the prediction lies in the interval",
             "agrees within the step times' spread: the prediction lies outside the interval, "
             "its own interval (from the step times' repeats) overlaps it"],
            "differs: the prediction and its step times' interval lie outside the interval"),
    })


def break_even_plot(points: pd.DataFrame) -> plt.Figure | None:
    """Speedup against the acceptance length, per concurrency: the swept points with 95 %
    intervals, the method's real cell (its acceptance dotted, its speedup a star) and the line
    fitted through them (`acceptance.break_even`), speedup 1 drawn."""
    sweep = sweep_points(points)
    if sweep.empty:
        return None
    fits = break_even(points)
    panels = list(sweep.groupby(["target", "workload", "swept", "k"], sort=True))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, ((target, workload, method, k), part) in zip(axes[0], panels, strict=True):
        levels = sorted(part["concurrency"].unique())
        colors = dict(zip(levels, sns.color_palette("viridis", len(levels)), strict=True))
        for level in levels:
            line = part[part["concurrency"] == level].sort_values("set")
            ax.errorbar(line["set"], line["speedup_mean"],
                        yerr=[line["speedup_mean"] - line["speedup_ci_low"],
                              line["speedup_ci_high"] - line["speedup_mean"]],
                        marker="o", capsize=3, color=colors[level], linestyle="none",
                        label=f"c={int(level)}")
            real = real_point(points, method, k, target, workload, level)
            if not real.empty and pd.notna(real["spec_decode_acceptance_length_mean"].iloc[0]):
                accepts = real["spec_decode_acceptance_length_mean"].iloc[0]
                ax.axvline(accepts, color=colors[level], linestyle=":", linewidth=1)
                ax.plot([accepts], [real["speedup_mean"].iloc[0]], marker="*", markersize=11,
                        color=colors[level], linestyle="none")
            fit = fits[(fits["target"] == target) & (fits["workload"] == workload)
                       & (fits["method"] == method) & (fits["k"] == k)
                       & (fits["concurrency"] == level)] if not fits.empty else fits
            if not fit.empty:
                row = fit.iloc[0]
                x = np.array([row["fit_low"], row["fit_high"]])
                ax.plot(x, row["intercept"] + row["slope"] * x, color=colors[level],
                        linewidth=1.2)
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_xlabel("acceptance length (set; the real cell's measured)")
        ax.set_ylabel("output-token speedup")
        ax.set_title(f"{method} k={int(k)} | {target} | {workload}", fontsize=10)
        ax.legend(title="concurrency", fontsize=8)
    fig.tight_layout()
    return fig


def synthetic_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Each synthetic-acceptance point's known answer (`acceptance.acceptance_check`): the
    acceptance length set and measured, over how many drafts, the range sampling allows."""
    table = acceptance_check(frame)
    if table.empty:
        return table
    return pd.DataFrame({
        "cell": [simulated_label(s, grid.synthetic_options(v)) + f" k={k}" for s, v, k in zip(
            table["speculator"], table["set"], table["k"], strict=True)],
        "concurrency": table["concurrency"].astype("Int64"),
        "acceptance length set": table["set"].map("{:.2f}".format),
        "measured": table["measured"].map("{:.3f}".format),
        "drafts": table["drafts"].map("{:,}".format),
        "sampling allows (99.9 %)": [f"[{lo:.3f}, {hi:.3f}] ({how})" for lo, hi, how in zip(
            table["allowed_low"], table["allowed_high"], table["error_from"], strict=True)],
        "check": np.where(table["passed"], "✓ as set",
                          "✗ differs: the engine or the accounting"),
    })


def percent_text(value, scale: float = 1.0) -> str:
    """A share as a percentage ('45 %'; `scale` 100 for a fraction), "–" where none applies."""
    if value is None or pd.isna(value):
        return "–"
    return f"{value * scale:.0f} %"


def with_interval(mean: float, low: float, high: float, unit: str = "×") -> str:
    """'1.23× [1.10, 1.35]'; without brackets when there is no interval (one repeat)."""
    if pd.isna(mean):
        return "–"
    if pd.isna(low) or pd.isna(high):
        return f"{interval_number(mean)}{unit}"
    return (f"{interval_number(mean)}{unit} [{interval_number(low)}, "
            f"{interval_number(high)}]")


ENGINE_MARK = " ⚠ engine"


def speedup_text(row) -> str:
    """The speedup with its interval; ⚠ engine where the two servers resolved other settings
    than speculation (the points table's "engine differs" says which)."""
    text = with_interval(row["speedup_mean"], row["speedup_ci_low"], row["speedup_ci_high"])
    differs = row.get("engine_differs")
    return text + (ENGINE_MARK if isinstance(differs, str) and differs else "")


def _sd_text(value) -> str:
    """A standard deviation of a log as a percentage with one decimal ("–" where none)."""
    return "–" if value is None or pd.isna(value) else f"{value * 100:.1f} %"


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


# above this, a minimum detectable speedup says only that the design sees nothing useful
MDE_SHOWN = 10.0


def mde_text(mde) -> str:
    """'1.25×'; '> 10×' for a design that could see no useful gain (one degree of freedom)."""
    if mde is None or pd.isna(mde):
        return "–"
    return f"> {MDE_SHOWN:g}×" if mde > MDE_SHOWN else f"{mde:.2f}×"


def starts_text(row) -> str:
    """The server starts' share of a point's noise as its verdict carries it: its standard
    deviation (of the log speedup, ≈ a share) and where it was measured
    (`noise.point_noise`); that it is not covered where nothing measured it."""
    sd = row.get("speedup_instance_sd") if hasattr(row, "get") else None
    where = row.get("speedup_instance_from") if hasattr(row, "get") else None
    if row is None or (pd.isna(row.get("speedup_mean", np.nan)) if hasattr(row, "get")
                       else True):
        return "–"
    if sd is None or pd.isna(sd) or not isinstance(where, str):
        return "not covered (one start: within-start noise only)"
    where = "in its class" if where == "this class" else where
    return f"±{sd * 100:.1f} % ({where})"


def verdict_text(verdict, mde) -> str | None:
    """A point's verdict with the smallest speedup its design could have told from 1 (80 %
    power): what "no clear gain" means here."""
    if verdict is None or pd.isna(verdict):
        return None
    if pd.isna(mde):
        return verdict
    if verdict == "no clear gain":
        if mde > MDE_SHOWN:
            return f"no clear gain (this design could not see even a {MDE_SHOWN:g}× gain)"
        return f"no clear gain (this design could not see gains below {mde:.2f}×)"
    return f"{verdict} (detects ≥ {mde_text(mde)})"


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
                        vmax=vmax, cbar=False, linewidths=0.5)
            ax.set_title(f"{speculator} | {workload}", fontsize=10)
            ax.set_xlabel("concurrency")
            ax.set_ylabel("k")
    fig.suptitle(METRIC_LABELS[metric] + ", mean over repeats — green > 1 > red", fontsize=11)
    fig.tight_layout()
    return fig


def _fmt(x) -> str:
    return "–" if x is None or pd.isna(x) else level_text(x)


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
    as a target (analysis.predicted_speedups), one row per concurrency."""
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


def held_out_of(held, repeats) -> str:
    """How many repeats a held-out estimate rests on where that is fewer than the level's
    (a pick had stopped before the repeat it would hold out, `analysis._held_out`)."""
    return (f"; {int(held)} of the {int(repeats)} held out (a pick had stopped before the "
            "rest)" if pd.notna(held) and 0 < held < repeats else "")


def held_out_basis(table: pd.DataFrame, column: str) -> list[str]:
    """Per row, what its held-out interval rests on (`column`: `analysis.HELD_OUT...`) and on
    how many repeats where fewer than the level's; with one repeat, none to hold out."""
    return [f"{basis}{held_out_of(held, n)}" if isinstance(basis, str)
            else "one repeat: none to hold out" for basis, held, n in zip(
                table[column], table["heldout_repeats"], table["repeats"], strict=True)]


def best_settings_table(decided: pd.DataFrame) -> pd.DataFrame:
    """Per load of round 1 (`analyze.decisions`), the best setting (speculation off a
    candidate) with its speedup (the point table's where it has one), the held-out estimate
    that corrects for choosing the best of many, what its interval rests on, and the verdict
    from it."""
    best = of_kind(decided, BEST_SETTING, "round1")
    if best.empty:
        return best
    return pd.DataFrame({
        "target": best["target"], "workload": best["workload"],
        "concurrency": best["concurrency"],
        "best setting": ["off" if s == "off" else f"{s} k={int(k)}"
                         for s, k in zip(best["speculator"], best["k"], strict=True)],
        "its speedup (all repeats)": [speedup_text(r) for _, r in best.iterrows()],
        "held-out estimate": [with_interval(m, lo, hi) for m, lo, hi in zip(
            best["heldout_mean"], best["heldout_ci_low"], best["heldout_ci_high"],
            strict=True)],
        "held-out interval from": held_out_basis(best, "heldout_from"),
        "verdict": best["verdict"]})


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


def dynamic_k_table(frame: pd.DataFrame, schedules: dict[str, list]) -> pd.DataFrame:
    """Each measured dynamic-K schedule split three ways (`analysis.dynamic_k_comparison`):
    the mechanism's cost, the schedule's value and the net against the best static k, each a
    throughput ratio with a 95 % interval, per level and over all levels.

    frame: per-measurement rows (round 1 and the derived cells); schedules: cell_id -> the
    schedule it measured."""
    table = dynamic_k_comparison(frame, schedules)
    if table.empty:
        return table
    derived = frame[frame["setting"] == DERIVED_SETTING]
    keys = zip(derived["target"], derived["workload"],
               derived["speculator"].str.removesuffix(grid.DERIVED_ARM), strict=True)
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
        method, runner = grid.runner_method(name)
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


def acceptance_plot(frame: pd.DataFrame) -> plt.Figure | None:
    """Acceptance rate and length per setting and workload, pooled by draft count over every
    level and repeat (accepted ÷ proposed draft tokens; 1 + accepted ÷ drafts); a setting with
    fewer than MIN_DRAFTS drafts is left out."""
    spec = speculative(frame)
    needed = {"spec_decode_accepted_tokens", "spec_decode_draft_tokens", "spec_decode_num_drafts"}
    if spec.empty or not needed <= set(spec):
        return None
    spec = spec.assign(setting=wrapped(setting_label(spec)))
    sums = spec.groupby(["setting", "workload"])[sorted(needed)].sum().reset_index()
    sums = sums[sums["spec_decode_num_drafts"] >= MIN_DRAFTS]
    if sums.empty:
        return None
    spec = sums.assign(
        spec_decode_acceptance_rate=100 * sums["spec_decode_accepted_tokens"]
        / sums["spec_decode_draft_tokens"],
        spec_decode_acceptance_length=1 + sums["spec_decode_accepted_tokens"]
        / sums["spec_decode_num_drafts"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * spec["setting"].nunique() + 2.5))
    for ax, metric in zip(axes, ("spec_decode_acceptance_rate", "spec_decode_acceptance_length"),
                          strict=True):
        sns.barplot(data=spec, y="setting", x=metric, hue="workload", ax=ax, errorbar=None)
        ax.set_xlabel(METRIC_LABELS[metric])
        ax.set_ylabel("")
    fig.suptitle(f"Acceptance, pooled by draft count over every level and repeat (settings "
                 f"with ≥ {MIN_DRAFTS} drafts)", fontsize=11)
    fig.tight_layout()
    return fig


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


def speedup_note(points: pd.DataFrame) -> str:
    """What a speedup and its interval are in this report (Markdown), with what the intervals
    of its points cover, read from the points."""
    spec = points[(points["method"] != "vanilla") & points["speedup_mean"].notna()]
    covers = (spec["interval_covers"].value_counts() if "interval_covers" in spec
              else pd.Series(dtype=int))
    # one line per kind of interval (the most points first), readable where a run has many
    listed = "".join(f"\n- {text} ({n} point{'' if n == 1 else 's'})"
                     for text, n in covers.items()) or "\n- no points"
    # (a point whose class and none near it measured two starts has no `instance_from`)
    not_covered = ("speedup_instance_from" in spec
                   and not spec["speedup_instance_from"].notna().all())
    drifted = int(spec.get("drift_flag", pd.Series(dtype=bool)).fillna(False).sum())
    engine_flagged = int(spec.get("engine_differs", pd.Series(dtype=object)).notna().sum())
    return (
        "**Speedup** = output-token throughput (output tokens per second) of a speculative "
        "server ÷ that of the same target **without speculation, under the same server "
        "arguments**, on the same prompts at the same load, **paired by repeat** (repeat *r* "
        "÷ the baseline's repeat *r*). The total-token ratio (prompt + output tokens) is a "
        "column of the points table only: with long prompts it tends to a ratio of durations "
        "and moves with the output length. Outputs end where the model stops (unless "
        "`loadgen.ignore_eos`), so each pair's output tokens are compared: **output drift** "
        f"above 2 % is flagged ⚠ ({drifted} points here). A pair is compared only on the same "
        "device, vLLM build, dtype, prompt count and prefix-cache state (prefix caching is "
        "off unless a setting turns it on); other pairs get no speedup and are listed with "
        "their issue. Where the two servers resolved other engine settings than speculation "
        "(vLLM's CUDA-graph mode, attention backend, KV cache, …, read from its logs) the "
        f"speedup is marked{ENGINE_MARK} ({engine_flagged} points here) and the points table's "
        "*engine differs* says how: the speedup then measures that difference too.\n\n"
        "**Intervals**: a speedup's 95 % interval comes from the study's noise model: each "
        "run's log speedup is the truth plus the offsets of the two server starts that "
        "measured it, the baseline run's noise and its own; these components are estimated "
        "per engine, target, method and concurrency (workloads and settings pooled, each "
        "point's own spread shrunk toward theirs), and a point's interval is a Student t on "
        "the log scale with their weights and degrees of freedom (the interval over a point's "
        "own repeats is the points table's `speedup_unpooled_ci_*`), each repeat with its own "
        "seed. **Server starts differ** (instances of one configuration up to 26 % apart on "
        "an H100): the starts' share is carried in every interval, measured where a "
        "configuration ran on several starts (chained cells, `loadgen.server_instances`, the "
        "instance probe) and otherwise borrowed from the nearest class that measured it; the "
        "points table's *server starts* column and each verdict say how large it is and "
        "where it was measured. They hold the prompts fixed: the same "
        "prompts are sent in every repeat, so the points table's **over prompts** column "
        "gives the part that comes from which prompts were drawn (a paired bootstrap over "
        "prompts of output tokens per second of request time, both sides and every repeat "
        "resampled together) and, after *both*, an interval for the servers' noise and the "
        "prompt sample together: the one to read for prompts of the same workload not in "
        "this sample."
        + (" Some intervals here do **not** cover the difference between two starts (no "
           "class of their engine ran a configuration on several starts; the list below "
           "names them): set `instance_probe:` or `loadgen.server_instances`."
           if not_covered else "")
        + " Verdicts come from intervals: *no clear gain* when the interval spans 1; beside "
        "each, the smallest speedup the design could have told from 1 with 80 % power.\n\n"
        f"What the intervals of this report's points cover:\n{listed}")


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
        "round": points["round"], "setting": points.get("setting"),
        "target": points["target"], "workload": points["workload"],
        "method": method_names(points), "k": points["k"].astype("Int64"),
        "concurrency": points["concurrency"],
        "status (repeats ok)": [_status_text(r) for _, r in points.iterrows()],
        "total tok/s": [with_interval(m, lo, hi, "") for m, lo, hi in zip(
            points["total_token_throughput_mean"], points["total_token_throughput_ci_low"],
            points["total_token_throughput_ci_high"], strict=True)],
        "speedup": [speedup_text(r) for _, r in points.iterrows()],
        "over prompts": [_prompt_text(r) for _, r in points.iterrows()],
        "verdict": [verdict_text(v, m) for v, m in zip(
            points.get("verdict", pd.Series(None, index=points.index)),
            points.get("speedup_mde", pd.Series(np.nan, index=points.index)), strict=True)],
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


# a point's acceptance from fewer drafts than this is not shown (one request's worth of steps)
MIN_DRAFTS = 50


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
    savings = stops.savings(frame)
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


def stat_text(row, metric: str, scale: float = 1.0, unit: str = "") -> str:
    """A STAT_COLUMNS metric of a point as 'mean [low, high]' (× scale)."""
    values = [row.get(f"{metric}_{part}", np.nan) for part in ("mean", "ci_low", "ci_high")]
    return with_interval(*(v * scale if pd.notna(v) else np.nan for v in values), unit)


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
    """What each cell's engine really ran (vLLM's own reports, read from its log when it was
    ready): one row per cell, its settings, its performance warnings, and how it differs from
    its baseline's beyond speculation. Empty where no record carries the engine's report."""
    if "engine_settings" not in frame or frame["engine_settings"].isna().all():
        return pd.DataFrame()
    rows = []
    for cell_id, group in frame[frame["engine_settings"].notna()].groupby("cell_id",
                                                                         sort=False):
        first = group.iloc[0]
        settings = json.loads(first["engine_settings"])
        warnings = sorted({w for text in group["engine_warnings"].dropna()
                           for w in json.loads(text)})
        differs = sorted(set(group.get("engine_differs", pd.Series(dtype=object)).dropna()))
        rows.append({"target": first["target"], "engine": first["engine"],
                     "method": first["speculator"], "k": first["k"],
                     **{label: _engine_value(key, settings.get(key))
                        for key, label in ENGINE_COLUMNS.items()},
                     "differs from its baseline": "; ".join(differs) or "–",
                     "performance warnings": " · ".join(warnings) or "–",
                     "cell": cell_id})
    out = pd.DataFrame(rows)
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


def select(frame: pd.DataFrame, engine: str = "serve", load: str | None = None) -> pd.DataFrame:
    """Rows of one engine (serve, offline, transformers) and load mode (concurrency, rate,
    batch); summaries written before these columns existed are closed-loop server rows."""
    engines = frame["engine"] if "engine" in frame else pd.Series("serve", index=frame.index)
    loads = frame["load"] if "load" in frame else pd.Series("concurrency", index=frame.index)
    keep = engines == engine
    if load is not None:
        keep &= loads == load
    return frame[keep]


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
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
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
