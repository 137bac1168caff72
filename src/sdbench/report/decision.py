"""What a report leads with: the bottom line, the setting to run per workload and load, latency
targets (SLO goodput) and the throughput-latency front. Every sentence is generated from the
numbers it cites (`analyze.decision.Claim` refuses one its interval does not carry)."""

from __future__ import annotations

import argparse
import html
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from sdbench.analyze.analysis import HELD_OUT
from sdbench.analyze.decision import (
    Claim,
    by_role,
    decision_rows,
    direction_of,
    front_points,
)
from sdbench.analyze.decisions import RECOMMENDATION, in_round, of_kind, read_decisions
from sdbench.analyze.slo import frame_slos
from sdbench.layout import SummaryTables
from sdbench.plan.grid import CHECK, DEPLOYABLE, WHAT_IF
from sdbench.plan.settings import ROUND_TITLES
from sdbench.report.show import (
    cell_text,
    held_out_basis,
    held_out_of,
    level_axis,
    role_marks,
    setting_label,
    starts_text,
    with_interval,
    wrapped,
)

# sentences about deployable settings in a bottom line (one per workload and load); the
# recommendation table has all
MAX_SENTENCES = 6
# panels of a decision figure in one row
PANELS_PER_ROW = 2
GREY = ('<div class="sdbench-checks" style="color: #555; background: #f4f4f4; '
        'border-left: 4px solid #bbb; padding: 0.4em 0.8em; margin: 0.6em 0;">')


def _count(n, noun: str) -> str:
    return f"{int(n)} {noun}{'' if int(n) == 1 else 's'}"


def _sample(repeats, prompts, gain_from=HELD_OUT, held=None) -> str:
    per = f" × {_count(prompts, 'prompt')}" if prompts is not None and pd.notna(prompts) else ""
    if isinstance(gain_from, str) and gain_from.startswith(HELD_OUT):
        return f"{_count(repeats, 'repeat')}{per}, {gain_from}{held_out_of(held, repeats)}"
    if isinstance(gain_from, str):  # one setting, one repeat: its point's own interval
        return f"{_count(repeats, 'repeat')}{per}; {gain_from}"
    return f"{_count(repeats, 'repeat')}{per}: none to hold out"


def _level_claim(row, points: pd.DataFrame | None = None) -> str:
    """One workload-and-load sentence of the bottom line, from its recommendation
    (`analyze.decisions`). Where speculation off is chosen, the best deployable setting it was
    judged against is cited with its interval (the point table's where it has one)."""
    where = f"{row['workload']} at concurrency {int(row['concurrency'])}"
    if row["run"] == "speculation off":
        if not isinstance(row.get("best_speculator"), str):
            return f"{where}: run without speculation (no deployable setting measured)."
        speculator, k = row["best_speculator"], row["best_k"]
        sample = (f"{_count(row['best_repeats'], 'repeat')} × "
                  f"{_count(row['best_prompts'], 'prompt')}")
        if isinstance(row.get("best_from"), str):
            sample = f"{sample}; {row['best_from']}"
        if points is not None:  # the server starts' share of that setting's point
            starts = _point_starts(points, row["target"], row["workload"], row["concurrency"],
                                   speculator, k)
            sample += f"; server starts {starts}" if starts != "–" else ""
        low, high = row["best_ci_low"], row["best_ci_high"]
        claim = Claim(f"{where}, best deployable setting {speculator} k={int(k)}",
                      direction_of(low, high), row["best_mean"], low, high, sample)
        return f"Run without speculation — {claim.text()}"
    starts = "" if points is None else _chosen_starts(points, row)
    claim = Claim(f"{where}, {row['run']}", direction_of(row["gain_ci_low"],
                                                          row["gain_ci_high"]),
                  row["gain_mean"], row["gain_ci_low"], row["gain_ci_high"],
                  _sample(row["repeats"], row["prompts"], row.get("gain_from"),
                          row.get("heldout_repeats"))
                  + (f"; server starts {starts}" if starts not in ("", "–") else ""))
    rivals = (f" As good within the intervals: {row['rivals']}."
              if isinstance(row.get("rivals"), str) else "")
    return claim.text() + rivals


def deployable_sentences(table: pd.DataFrame, points: pd.DataFrame | None = None) -> list[str]:
    """The bottom line's sentences about deployable settings: per workload, its loads in turn
    (`table`: a round's recommendations, `analyze.decisions`; `points`: the point table, for
    the server starts' share beside each verdict), at most MAX_SENTENCES."""
    if table.empty:
        return ["No deployable speculative setting was measured with a paired baseline: this "
                "run decides nothing about what to deploy."]
    sentences = [_level_claim(row, points) for _, row in table.iterrows()]
    if len(sentences) > MAX_SENTENCES:
        rest = len(sentences) - MAX_SENTENCES + 1
        sentences = sentences[:MAX_SENTENCES - 1] + [
            f"… and {rest} more workload-and-load verdicts in the recommendation table."]
    return sentences


def _role_lines(points: pd.DataFrame, role: str) -> list[str]:
    spec = by_role(points, role)
    spec = spec[(spec["method"] != "vanilla") & spec["speedup_mean"].notna()]
    if "engine" in spec:
        spec = spec[(spec["engine"] == "serve") & (spec["load"] == "concurrency")]
    lines = []
    labels = setting_label(spec) if len(spec) else pd.Series(dtype=object)
    if spec["setting"].nunique() > 1:  # round 3: the server setting too
        labels = labels + " [" + spec["setting"] + "]"
    if spec["target"].nunique() > 1:
        labels = labels + " (target " + spec["target"] + ")"
    # a line per setting and workload: each level once
    for (label, workload), group in spec.assign(label=labels).groupby(["label", "workload"],
                                                                      sort=False):
        levels = "; ".join(
            f"concurrency {int(r['concurrency'])}: "
            f"{with_interval(r['speedup_mean'], r['speedup_ci_low'], r['speedup_ci_high'])} "
            f"({_count(r['repeats_ok'], 'repeat')}; server starts {starts_text(r)})"
            for _, r in group.sort_values("concurrency").iterrows())
        lines.append(f"{label} on {workload} — {levels}")
    return lines


def measured(frame: pd.DataFrame) -> str:
    """What a round compared: its targets (quantization), workloads, levels and methods."""
    targets = frame.drop_duplicates("target")
    named = ", ".join(t if pd.isna(q) else f"{t} ({q})"
                      for t, q in zip(targets["target"], targets["quantization"], strict=True))
    levels = sorted({int(c) for c in frame["concurrency"].dropna()})
    methods = sorted(set(frame.loc[frame["method"] != "vanilla", "speculator"]))
    settings = sorted(set(frame["setting"].dropna())) if "setting" in frame else []
    return (f"{len(targets)} target(s): {named}; workload(s): "
            f"{', '.join(sorted(frame['workload'].unique()))}; concurrency "
            f"{', '.join(map(str, levels)) or '–'}; against no speculation: "
            f"{', '.join(methods) or 'nothing'}"
            + (f"; server settings: {', '.join(settings)}" if len(settings) > 1 else "") + ".")


def unanswered(frame: pd.DataFrame, points: pd.DataFrame, round_name: str) -> list[str]:
    """What this round's run could not answer, from what it measured."""
    notes = []
    deployable = by_role(frame[frame["method"] != "vanilla"], DEPLOYABLE)
    if deployable.empty:
        notes.append("No deployable speculative method was measured: nothing here is a "
                     "setting to run.")
    if round_name == "round2":
        buckets = sorted(frame["workload"].unique())
        if len(buckets) < 2:
            notes.append(f"Round 2 measured one length bucket ({', '.join(buckets)}): no "
                         "comparison across context lengths.")
        targets = sorted(frame["target"].unique())
        if len(targets) < 2:
            notes.append(f"Round 2 measured one target ({', '.join(targets)}): no comparison "
                         "across target sizes.")
        if frame["quantization"].isna().all():
            notes.append("No quantized (AWQ/GPTQ) target was measured: no quantization "
                         "comparison.")
    if round_name == "round3":
        spec = frame[frame["method"] != "vanilla"]
        if "default" not in set(spec["setting"]):
            notes.append("No speculative cell at the default server setting: a setting's "
                         "effect is measured only against the baseline, not against the "
                         "default.")
    levels = sorted({int(c) for c in frame["concurrency"].dropna()})
    if len(levels) == 1:
        notes.append(f"One concurrency level ({levels[0]}): no crossover can be located.")
    if not frame_slos(points):
        notes.append("No latency target (`slo:` in the config): no goodput or SLO verdict.")
    return notes


INTRO = ("Deployable settings only, each verdict from a 95 % interval of the speedup (output "
         "tokens/s with speculation ÷ without) judged on repeats the choice did not see, or "
         "where none could be held out on the point's own interval (each sentence says which):")
ASIDES = ((CHECK, "Pipeline checks", "the calibration pair, untrained heads and truncated "
           "drafts: their numbers check the workflow and vLLM's accounting, never a setting to "
           "deploy"),
          (WHAT_IF, "What-if", "drafts accepted by vLLM at a set rate: what a method would give "
           "at that acceptance, never what it gave"))


@dataclass(frozen=True)
class BottomLine:
    """A round's bottom line, as sentences: rendered as HTML (the reports, the index) or as
    text (the terminal), the same words in both."""

    verdicts: list[str]  # deployable settings, per workload and load
    asides: list[tuple[str, str, list[str]]]  # (title, what it is, lines): checks, what-ifs
    measured: str
    unanswered: list[str]

    def html(self, heading: str) -> str:
        parts = [f"<h2>{html.escape(heading)}</h2>", f"<p>{INTRO}</p><ul>"]
        parts += [f"<li>{html.escape(s)}</li>" for s in self.verdicts]
        parts.append("</ul>")
        for title, what, lines in self.asides:
            parts.append(GREY + f"<p><strong>{title}</strong> ({what}):</p><ul>"
                         + "".join(f"<li>{html.escape(line)}</li>" for line in lines)
                         + "</ul></div>")
        parts.append(f"<p><strong>Measured:</strong> {html.escape(self.measured)}</p>")
        if self.unanswered:
            parts.append("<p><strong>Not answered by this run:</strong> "
                         + " ".join(html.escape(n) for n in self.unanswered) + "</p>")
        return "\n".join(parts)

    def text(self, heading: str) -> str:
        lines = [heading, "=" * len(heading), INTRO, *(f"- {s}" for s in self.verdicts)]
        for title, what, asides in self.asides:
            lines += [f"{title} ({what}):", *(f"  - {line}" for line in asides)]
        lines.append(f"Measured: {self.measured}")
        if self.unanswered:
            lines.append("Not answered by this run: " + " ".join(self.unanswered))
        return "\n".join(lines)


def bottom_line(frame: pd.DataFrame, points: pd.DataFrame, round_name: str,
                decided: pd.DataFrame) -> BottomLine:
    """The bottom line of a round: deployable verdicts (`decided`: the study's decisions,
    `analyze.decisions`), then pipeline checks and what-if cells, then what the run could not
    answer."""
    frame, points = in_round(frame, round_name), in_round(points, round_name)
    table = of_kind(decided, RECOMMENDATION, round_name)
    asides = [(title, what, lines) for role, title, what in ASIDES
              if (lines := _role_lines(points, role))]
    return BottomLine(deployable_sentences(table, points), asides, measured(frame),
                      unanswered(frame, points, round_name))


def bottom_line_html(frame: pd.DataFrame, points: pd.DataFrame, round_name: str,
                     decided: pd.DataFrame, heading: str = "Bottom line") -> str:
    return bottom_line(frame, points, round_name, decided).html(heading)


def bottom_lines(summary: pd.DataFrame, points: pd.DataFrame, decided: pd.DataFrame,
                 reports: dict[str, str]) -> list[tuple[str, BottomLine]]:
    """(heading, bottom line) of each round with measurements, in the order of `reports`
    (title -> page: reports/<round>.html): what the index leads with and `make demo` prints."""
    out = []
    for title, page in reports.items():
        round_name = page.removesuffix(".html")
        rows = summary[summary["round"] == round_name]
        if rows.empty or not (rows["status"] == "ok").any():
            continue
        out.append((f"Bottom line — {title}",
                    bottom_line(summary, points, round_name, decided)))
    return out


def show_bottom_line(frame: pd.DataFrame, points: pd.DataFrame, round_name: str,
                     decided: pd.DataFrame) -> None:
    from IPython.display import HTML, display

    display(HTML(bottom_line_html(frame, points, round_name, decided)))


def recommendation_table(decided: pd.DataFrame, points: pd.DataFrame,
                         round_name: str) -> pd.DataFrame:
    """The setting to run per target, workload and load (the round's recommendations,
    `analyze.decisions`), with whether it meets each SLO."""
    table = of_kind(decided, RECOMMENDATION, round_name)
    if table.empty:
        return table
    out = pd.DataFrame({
        "target": table["target"], "workload": table["workload"],
        "concurrency": table["concurrency"], "run": table["run"],
        "held-out gain": [with_interval(m, lo, hi) for m, lo, hi in zip(
            table["gain_mean"], table["gain_ci_low"], table["gain_ci_high"], strict=True)],
        "gain judged on": held_out_basis(table, "gain_from"),
        "verdict": table["verdict"],
        "server starts": [_chosen_starts(points, row) for _, row in table.iterrows()],
        "as good within the intervals": table["rivals"],
        "settings compared": table["candidates"],
        "repeats × prompts": [f"{r} × {cell_text(p)}" for r, p in zip(
            table["repeats"], table["prompts"], strict=True)]})
    for slo in frame_slos(points):
        meets = []
        for _, row in table.iterrows():
            hit = points[(points["target"] == row["target"])
                         & (points["workload"] == row["workload"])
                         & (points["concurrency"] == row["concurrency"])
                         & ((points["method"] == "vanilla") if row["run"] == "speculation off"
                            else (points["speculator"] == row["speculator"])
                            & (points["k"] == row["k"]))]
            value = hit[f"slo_meets_{slo.name}"].iloc[0] if len(hit) else None
            meets.append("–" if value is None or pd.isna(value) else
                         "meets" if value else "misses")
        out[f"SLO {slo.name}"] = meets
    return out


def _point_starts(points: pd.DataFrame, target, workload, concurrency, speculator, k) -> str:
    """The server starts' share of one setting's point (`starts_text`); "–" where the point
    table has no such point."""
    hit = points[(points["target"] == target) & (points["workload"] == workload)
                 & (points["concurrency"] == concurrency)
                 & (points["speculator"] == speculator) & (points["k"] == k)]
    return starts_text(hit.iloc[0]) if len(hit) == 1 else "–"


def _chosen_starts(points: pd.DataFrame, row) -> str:
    """The server starts' share of the chosen setting's point; "–" where speculation off is
    chosen."""
    if row["run"] == "speculation off":
        return "–"
    return _point_starts(points, row["target"], row["workload"], row["concurrency"],
                         row["speculator"], row["k"])


def role_label(frame: pd.DataFrame) -> pd.Series:
    """A setting's name, its server setting where the rows have several (round 3: "draft k=2
    [draft-len-512]"), and its role where it is no setting to deploy ("calibration k=4
    (pipeline check)")."""
    label = pd.Series(setting_label(frame), index=frame.index)
    if "setting" in frame and frame["setting"].nunique() > 1:
        label = label + " [" + frame["setting"].astype(str) + "]"
    return label + role_marks(frame)


def checks_note(points: pd.DataFrame) -> str:
    """A line for the front and goodput sections of a run without a deployable speculative
    setting: what they show instead ("" otherwise)."""
    serve = points[(points["engine"] == "serve") & (points["load"] == "concurrency")]
    if serve.empty or not decision_rows(serve)[1]:
        return ""
    return ("No deployable speculative setting was measured, so this section shows the "
            "pipeline checks and what-if cells (their role in brackets): what the pipeline "
            "measured, not a setting to deploy.")


def show_checks_note(points: pd.DataFrame) -> None:
    from IPython.display import Markdown, display

    if note := checks_note(points):
        display(Markdown(f"*{note}*"))


# --- SLO goodput --------------------------------------------------------------------------

def slo_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per SLO, target, workload and setting (deployable, and no speculation): the highest
    concurrency whose point meets the SLO, its goodput there, and the goodput gain over no
    speculation at that concurrency (paired by repeat)."""
    slos = frame_slos(points)
    serve, _ = decision_rows(points[(points["engine"] == "serve")
                                    & (points["load"] == "concurrency")])
    rows = []
    for slo in slos:
        meets = f"slo_meets_{slo.name}"
        for (target, workload), group in serve.groupby(["target", "workload"]):
            group = group.assign(label=role_label(group))
            for label, setting in group.groupby("label", sort=False):
                ok = setting[setting[meets].fillna(False).astype(bool)]
                row = {"SLO": f"{slo.name}: {slo.describe()}", "target": target,
                       "workload": workload, "setting": label,
                       "levels measured": len(setting)}
                if ok.empty:
                    row.update({"highest concurrency meeting it": "none"})
                else:
                    top = ok.loc[ok["concurrency"].idxmax()]
                    tokens = f"goodput_tokens_{slo.name}"
                    gain = f"goodput_gain_{slo.name}"
                    row.update({
                        "highest concurrency meeting it": int(top["concurrency"]),
                        "attainment there": f"{top[f'slo_attainment_{slo.name}_mean']:.0%}",
                        "goodput there (output tok/s)": with_interval(
                            top[f"{tokens}_mean"], top[f"{tokens}_ci_low"],
                            top[f"{tokens}_ci_high"], ""),
                        "goodput gain over no speculation": (
                            "–" if (setting["method"] == "vanilla").all() else with_interval(
                                top[f"{gain}_mean"], top[f"{gain}_ci_low"],
                                top[f"{gain}_ci_high"]))})
                rows.append(row)
    return pd.DataFrame(rows)


def _panels(count: int, width: float, height: float) -> tuple[plt.Figure, list]:
    """A figure of `count` panels, at most PANELS_PER_ROW in a row (readable on a page)."""
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, squeeze=False,
                             figsize=(width * columns, height * rows))
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def goodput_plot(points: pd.DataFrame) -> plt.Figure | None:
    """Goodput (output tokens/s of requests meeting the SLO) against concurrency, a line per
    setting, a panel per SLO, target and workload; hollow markers where the point misses the
    SLO."""
    slos = frame_slos(points)
    serve, _ = decision_rows(points[(points["engine"] == "serve")
                                    & (points["load"] == "concurrency")])
    if not slos or serve.empty:
        return None
    serve = serve.assign(label=role_label(serve))
    panels = [(slo, key, part) for slo in slos
              for key, part in serve.groupby(["target", "workload"])]
    fig, axes = _panels(len(panels), 5.6, 3.8)
    several = serve["target"].nunique() > 1
    for ax, (slo, (target, workload), part) in zip(axes, panels, strict=True):
        for label, line in part.groupby("label", sort=False):
            line = line.sort_values("concurrency")
            y = line[f"goodput_tokens_{slo.name}_mean"]
            low = y - line[f"goodput_tokens_{slo.name}_ci_low"].fillna(y)
            high = line[f"goodput_tokens_{slo.name}_ci_high"].fillna(y) - y
            drawn = ax.errorbar(line["concurrency"], y, yerr=[low.clip(lower=0),
                                                               high.clip(lower=0)],
                                marker="o", capsize=3, label=label)
            missed = ~line[f"slo_meets_{slo.name}"].fillna(False).astype(bool)
            ax.scatter(line.loc[missed, "concurrency"], y[missed], s=60,
                       facecolors="white", edgecolors=drawn[0].get_color(), zorder=3)
        level_axis(ax, part["concurrency"].unique())
        ax.set_title(f"{workload}{f' ({target})' if several else ''} — SLO {slo.name}",
                     fontsize=10)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("goodput (output tok/s within SLO)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle("Goodput: output tokens/s of requests meeting each SLO "
                 "(hollow: the point misses it)", fontsize=11)
    fig.tight_layout()
    return fig


# --- the throughput-latency front ---------------------------------------------------------

def front_plot(points: pd.DataFrame, latency: str = "p90_tpot_ms") -> plt.Figure | None:
    """Output tokens/s per GPU against TPOT (p90 by default), a line per setting across
    concurrency (labelled at each point), the Pareto front dashed: a panel per target and
    workload."""
    table = front_points(points, latency)
    if table.empty:
        table, latency = front_points(points, "mean_tpot_ms"), "mean_tpot_ms"
    if table.empty:
        return None
    panels = list(table.groupby(["target", "workload"]))
    fig, axes = _panels(len(panels), 5.6, 4.2)
    names = {"p90_tpot_ms": "TPOT p90 (ms)", "mean_tpot_ms": "mean TPOT (ms)",
             "median_tpot_ms": "TPOT p50 (ms)"}
    for ax, ((target, workload), part) in zip(axes, panels, strict=True):
        part = part.assign(label=wrapped(role_label(part)))
        for label, line in part.groupby("label", sort=False):
            line = line.sort_values("concurrency")
            ax.plot(line["latency"], line["throughput_per_gpu"], marker="o", label=label)
            for _, r in line.iterrows():
                ax.annotate(f"c={int(r['concurrency'])}", (r["latency"],
                                                          r["throughput_per_gpu"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
        front = part[part["on_front"]].sort_values("latency")
        ax.plot(front["latency"], front["throughput_per_gpu"], linestyle="--", color="black",
                linewidth=1, label="Pareto front", zorder=0)
        ax.set_title(f"{workload} ({target})", fontsize=10)
        ax.set_xlabel(names.get(latency, latency) + " — lower is better")
        ax.set_ylabel("output tokens/s per GPU")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle("Throughput against per-user latency, a line per setting across concurrency",
                 fontsize=11)
    fig.tight_layout()
    return fig


def front_table(points: pd.DataFrame, latency: str = "p90_tpot_ms") -> pd.DataFrame:
    """The points on the front, per target and workload, lowest latency first."""
    table = front_points(points, latency)
    if table.empty:
        return table
    front = table[table["on_front"]].sort_values(["target", "workload", "latency"])
    return pd.DataFrame({
        "target": front["target"], "workload": front["workload"],
        "setting": role_label(front), "concurrency": front["concurrency"],
        "output tok/s per GPU": front["throughput_per_gpu"].round(1),
        "TPOT p90 (ms)" if latency == "p90_tpot_ms" else latency: front["latency"].round(1)}
    ).reset_index(drop=True)



def main(argv: list[str] | None = None) -> int:
    """Print each round's bottom line from the summary stage's tables (the index's words)."""
    parser = argparse.ArgumentParser(prog="python -m sdbench.report.decision",
                                     description=main.__doc__)
    tables = SummaryTables()
    parser.add_argument("--summary", default=tables.summary)
    parser.add_argument("--points", default=tables.points)
    parser.add_argument("--decisions", default=tables.decisions)
    args = parser.parse_args(argv)
    if not Path(args.decisions).exists():
        print(f"No decisions yet ({args.decisions} is written by the summary stage).")
        return 0
    summary = pd.read_parquet(args.summary)
    reports = {title: f"{name}.html" for name, title in ROUND_TITLES.items()}
    lines = bottom_lines(summary, pd.read_parquet(args.points), read_decisions(args.decisions),
                         reports)
    print("\n\n".join(line.text(heading) for heading, line in lines)
          or "No round has a measurement yet.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
