"""How the reports show things: tables as HTML (one helper for every table), figures inline, and the
texts of numbers (intervals, speedups, verdicts, server starts, levels, setting names) that
every round report and the index share."""

from __future__ import annotations

import html
import re
import textwrap
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sdbench.analyze.acceptance import (
    simulated_label,
    simulated_lengths,
)
from sdbench.analyze.stats import interval_number, level_text
from sdbench.plan import grid

METRIC_LABELS = {
    "speedup": "speedup (output-token throughput ÷ vanilla)",
    "total_speedup": "total-token speedup (prompt + output tokens/s ÷ vanilla)",
    "tpot_speedup": "TPOT speedup (vanilla TPOT ÷ TPOT)",
    "spec_decode_acceptance_rate": "acceptance rate (%)",
    "spec_decode_acceptance_length": "mean acceptance length (tokens per step)",
    "mean_tpot_ms": "mean TPOT (ms)",
    "mean_ttft_ms": "mean TTFT (ms)",
}


@dataclass(frozen=True)
class Html:
    """A table cell that is HTML already (a marked verdict): `table_html` does not escape it
    (not a str: pandas would turn a column of them into plain strings)."""

    html: str

    def __str__(self) -> str:
        return self.html


# how a verdict reads in one word, for the marks a page check compares (`marked_verdict`)
VERDICT_CLASS = {"speculate": "gain", "no speculation": "loss", "speculation off": "loss",
                 "no clear winner": "unclear"}


def verdict_class(verdict) -> str | None:
    """"gain", "loss" or "unclear" (any "no clear gain …") of a point's or a choice's verdict."""
    if not isinstance(verdict, str):
        return None
    return VERDICT_CLASS.get(verdict, "unclear" if verdict.startswith("no clear") else None)


def point_key(target, workload, concurrency, speculator, k, setting=None) -> str:
    """A point as a page names it in its marks: target | workload | c=<level> | <setting>."""
    level = "–" if concurrency is None or pd.isna(concurrency) else int(concurrency)
    name = f"{speculator} k={int(k)}" if k is not None and pd.notna(k) else str(speculator)
    if isinstance(setting, str) and setting != "default":
        name += f" [{setting}]"
    return f"{target} | {workload} | c={level} | {name}"


def decision_key(target, workload, concurrency) -> str:
    """A recommendation's decision as a page names it in its marks: target | workload |
    c=<level> (`point_key` without the setting)."""
    return f"{target} | {workload} | c={int(concurrency)}"


def marked_verdict(text: str, point: str | None = None, verdict=None,
                   decision: str | None = None, choice=None) -> Html:
    """`text` in a span that carries what it decides, for a check of every rendered page (one
    verdict per point): `point` (`point_key`) and its `verdict`, and for a recommendation the
    `decision` (target | workload | c=<level>) and its `choice` verdict."""
    data = {"point": point, "verdict": verdict_class(verdict), "decision": decision,
            "choice": verdict_class(choice)}
    attrs = "".join(f' data-{name}="{html.escape(str(value), quote=True)}"'
                    for name, value in data.items() if value is not None)
    return Html(f'<span class="sdbench-verdict"{attrs}>{html.escape(text)}</span>')


def cell_text(value) -> str:
    """One table cell as a reader wants it: "–" where nothing applies (None, NaN, <NA>), whole
    numbers without decimals, large numbers with thousands separators and no decimals, others
    with two decimals, small ones with three significant digits."""
    if isinstance(value, Html):  # its text without the markup
        return re.sub(r"<[^>]+>", "", value.html)
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
    shown = shown.astype(object).apply(lambda column: column.map(_escaped_cell))
    # the columns' own name (a pivot's "bucket") would head a column of its own, over nothing
    shown.columns.name = None
    shown.columns = [html.escape(header_text(c)) for c in shown.columns]
    return ('<div class="sdbench-table" style="overflow-x: auto; max-width: 100%;">'
            + shown.to_html(index=False, border=0, escape=False) + "</div>")


def _escaped_cell(value) -> str:
    return value.html if isinstance(value, Html) else html.escape(cell_text(value))


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


# a figure drawn otherwise than its notebook asked (dots in place of a heatmap of one cell a
# panel) carries its own caption under this attribute: `figure_html` prefers it
OWN_CAPTION = "sdbench_caption"


def figure_html(fig: plt.Figure, caption: str | None = None, finding: str = "") -> str:
    """`fig` as an HTML figure: the PNG inline, its alt text (`figure_text`) and a caption
    (the figure's own, `OWN_CAPTION`, else `caption`, else its title), so that no report
    figure goes without either; `finding` leads both."""
    import base64
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=fig.dpi)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    alt = " ".join(t for t in (finding, figure_text(fig)) if t)  # the finding first
    caption = getattr(fig, OWN_CAPTION, None) or caption or figure_text(fig)
    # the finding and what is drawn, a paragraph each
    caption = "".join(f'<p style="margin: 0.2em 0;">{html.escape(t)}</p>'
                      for t in (finding, caption) if t)
    return (f'<figure class="sdbench-figure" style="margin: 0 0 1em 0;"><img alt="'
            f'{html.escape(alt, quote=True)}" src="data:image/png;base64,{data}" '
            'style="max-width: 100%;"/><figcaption style="font-size: 0.9em; color: #444;">'
            f"{caption}</figcaption></figure>")


def show_figure(fig: plt.Figure | None, empty: str | None = None,
                caption: str | None = None, finding: str = "") -> None:
    """Display `fig` in a report with its alt text and caption (`figure_html`) and close it,
    or the Markdown `empty` when there is none."""
    from IPython.display import HTML, display

    if fig is None:
        if empty:
            show_empty(empty)
        return
    display(HTML(figure_html(fig, caption, finding)))
    plt.close(fig)


# panels of a report figure in one row: at the page's width each stays readable
PANELS_PER_ROW = 2


def panel_grid(count: int, width: float, height: float) -> tuple[plt.Figure, list]:
    """A figure of `count` panels, at most PANELS_PER_ROW in a row (readable on a page)."""
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, squeeze=False,
                             figsize=(width * columns, height * rows))
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


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


def percent_text(value, scale: float = 1.0) -> str:
    """A share as a percentage ('45 %'; `scale` 100 for a fraction), "–" where none applies."""
    if value is None or pd.isna(value):
        return "–"
    return f"{value * scale:.0f} %"


def with_interval(mean: float, low: float, high: float, unit: str = "×") -> str:
    """'1.23× [1.10, 1.35]'; without brackets when there is no interval (one repeat)."""
    if pd.isna(mean):
        return "–"
    if pd.isna(low) or pd.isna(high) or low == high:  # none, or no width: no interval
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


def _fmt(x) -> str:
    return "–" if x is None or pd.isna(x) else level_text(x)


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


# a point's acceptance from fewer drafts than this is not shown (one request's worth of steps)
MIN_DRAFTS = 50


def stat_text(row, metric: str, scale: float = 1.0, unit: str = "") -> str:
    """A STAT_COLUMNS metric of a point as 'mean [low, high]' (× scale)."""
    values = [row.get(f"{metric}_{part}", np.nan) for part in ("mean", "ci_low", "ci_high")]
    return with_interval(*(v * scale if pd.notna(v) else np.nan for v in values), unit)


def select(frame: pd.DataFrame, engine: str = "serve", load: str | None = None) -> pd.DataFrame:
    """Rows of one engine (serve, offline, transformers) and load mode (concurrency, rate,
    batch); summaries written before these columns existed are closed-loop server rows."""
    engines = frame["engine"] if "engine" in frame else pd.Series("serve", index=frame.index)
    loads = frame["load"] if "load" in frame else pd.Series("concurrency", index=frame.index)
    keep = engines == engine
    if load is not None:
        keep &= loads == load
    return frame[keep]
