"""What a report leads with: the bottom line and the setting to run per workload and load, with
what it does to latency and the SLOs (the SLO goodput and the front: `report.front`). Every
sentence is generated from the numbers it cites (`analyze.decision.Claim` refuses one its
interval does not carry)."""

from __future__ import annotations

import argparse
import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sdbench.analyze.analysis import HELD_OUT
from sdbench.analyze.decision import (
    NO_WINNER,
    Claim,
    by_role,
    decision_rows,
    direction_of,
)
from sdbench.analyze.decisions import (
    RECOMMENDATION,
    closed_loop,
    in_round,
    of_kind,
    read_decisions,
)
from sdbench.analyze.slo import frame_slos
from sdbench.layout import SummaryTables
from sdbench.plan.grid import CHECK, DEPLOYABLE, WHAT_IF
from sdbench.plan.settings import ROUND_TITLES
from sdbench.report.show import (
    cell_text,
    decision_key,
    held_out_basis,
    held_out_of,
    marked_verdict,
    point_key,
    role_marks,
    setting_label,
    starts_text,
    with_interval,
)

# sentences about deployable settings in a bottom line (one per workload and load); the
# recommendation table has all
MAX_SENTENCES = 6
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
        lead = ("Run without speculation" if row["verdict"] == "speculation off" else
                "No clear winner, speculation off measured best")  # (a setting clearly pays)
        return f"{lead} — {claim.text()}"
    starts = "" if points is None else _chosen_starts(points, row)
    sample = (_sample(row["repeats"], row["prompts"], row.get("gain_from"),
                      row.get("heldout_repeats"))
              + (f"; server starts {starts}" if starts not in ("", "–") else ""))
    rivals = (f" As good within the intervals: {row['rivals']}."
              if isinstance(row.get("rivals"), str) else "")
    if row["verdict"] == NO_WINNER:  # the choice is unsettled: no claim on a point
        mde = Claim(where, "no clear gain", row["gain_mean"], row["gain_ci_low"],
                    row["gain_ci_high"], sample).mde()
        seen = "" if mde is None else f"; this design could not see gains below {mde:.2f}×"
        held = with_interval(row["gain_mean"], row["gain_ci_low"], row["gain_ci_high"])
        gain = (f"held-out {held}" if pd.notna(row["gain_mean"]) else
                f"{row['mean']:.2f}× on the repeat it was chosen on, no interval")
        return (f"{where}: no clear winner; {row['run']} measured best, {gain} "
                f"({sample}){seen}.{rivals}")
    claim = Claim(f"{where}, {row['run']}",
                  "gain" if row["verdict"] == "speculate" else "loss",
                  row["gain_mean"], row["gain_ci_low"], row["gain_ci_high"], sample)
    return ("" if row["verdict"] == "speculate" else "Run without speculation — ") + \
        claim.text() + rivals


def recommendation_marks(row) -> dict:
    """What a recommendation decides, for `show.marked_verdict`: its decision (target |
    workload | c=<level>) and choice, and where its verdict is a claim on the chosen setting's
    point (speculate; speculation off judged on a speculative choice), that point and claim."""
    marks = {"decision": decision_key(row["target"], row["workload"], row["concurrency"]),
             "choice": row["verdict"]}
    if row["run"] != "speculation off" and row["verdict"] != NO_WINNER:
        marks.update(point=point_key(row["target"], row["workload"], row["concurrency"],
                                     row["speculator"], row["k"]),
                     verdict="speculate" if row["verdict"] == "speculate" else "no speculation")
    return marks


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
    spec = closed_loop(spec)
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


def caveats(points: pd.DataFrame) -> list[str]:
    """What the deployable verdicts must be read with: speedups whose two servers resolved
    other engine settings than speculation (⚠ engine), with the most common difference."""
    spec = by_role(points[(points["method"] != "vanilla") & points["speedup_mean"].notna()],
                   DEPLOYABLE)
    spec = closed_loop(spec)
    differs = spec.get("engine_differs", pd.Series(dtype=object)).dropna()
    if spec.empty or differs.empty:
        return []
    common = differs.value_counts().index[0]
    common = common if len(common) <= 160 else common[:157].rstrip() + "…"
    return [f"{len(differs)} of {len(spec)} speculative speedups here ran other engine "
            f"settings than their baseline (⚠ engine; most often: {common}), so they measure "
            "that difference too."]


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
    marks: list[dict] = ()  # what each verdict decides (`recommendation_marks`), for the page
    caveats: list[str] = ()  # what every verdict above must be read with (`caveats`)

    def html(self, heading: str) -> str:
        # what the verdicts are said once above them (none where there are none)
        parts = [f"<h2>{html.escape(heading)}</h2>", f"<p>{INTRO}</p><ul>" if self.marks
                 else "<ul>"]
        marks = list(self.marks) + [{}] * (len(self.verdicts) - len(self.marks))
        parts += [f"<li>{marked_verdict(s, **m)}</li>"
                  for s, m in zip(self.verdicts, marks, strict=True)]
        parts.append("</ul>")
        parts += [f"<p><strong>Read with:</strong> {html.escape(c)}</p>" for c in self.caveats]
        for title, what, lines in self.asides:
            # details on demand: a line per setting, collapsed under its count
            parts.append(GREY + f"<details><summary><strong>{title}</strong> ({what}): "
                         f"{_count(len(lines), 'setting')}</summary><ul>"
                         + "".join(f"<li>{html.escape(line)}</li>" for line in lines)
                         + "</ul></details></div>")
        parts.append(f"<p><strong>Measured:</strong> {html.escape(self.measured)}</p>")
        if self.unanswered:
            parts.append("<p><strong>Not answered by this run:</strong> "
                         + " ".join(html.escape(n) for n in self.unanswered) + "</p>")
        return "\n".join(parts)

    def text(self, heading: str) -> str:
        lines = [heading, "=" * len(heading), INTRO, *(f"- {s}" for s in self.verdicts),
                 *(f"Read with: {c}" for c in self.caveats)]
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
    sentences = deployable_sentences(table, points)
    marks = [recommendation_marks(row) for _, row in table.iterrows()][:len(sentences)]
    if len(sentences) < len(table) or table.empty:  # the last line counts the rest
        marks = marks[:len(sentences) - 1]
    return BottomLine(sentences, asides, measured(frame), unanswered(frame, points, round_name)
                      + slo_summary(decided, points, round_name), marks, caveats(points))


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

    display(HTML(f'<div id="bottom-line">'
                 f"{bottom_line_html(frame, points, round_name, decided)}</div>"))


# latency columns of the recommendation table: (points-table column, header), ms
LATENCIES = (("median_tpot_ms", "TPOT p50 (ms)"), ("p90_tpot_ms", "TPOT p90 (ms)"),
             ("mean_ttft_ms", "TTFT mean (ms)"), ("p90_ttft_ms", "TTFT p90 (ms)"))


def _point_at(points: pd.DataFrame, target, workload, concurrency, speculator=None,
              k=None) -> pd.Series | None:
    """One point of the point table: a setting's (speculator, k) or, without them, no
    speculation's at that target, workload and concurrency; None where there is none."""
    rows = points[(points["target"] == target) & (points["workload"] == workload)
                  & (points["concurrency"] == concurrency)]
    rows = (rows[rows["method"] == "vanilla"] if speculator is None
            else rows[(rows["speculator"] == speculator) & (rows["k"] == k)])
    rows = closed_loop(rows)
    return rows.iloc[0] if len(rows) == 1 else None


def compared_setting(row) -> tuple[str, int] | None:
    """The speculative setting a recommendation speaks of: the chosen one, or where
    speculation off is chosen the best deployable setting it was judged against."""
    if row["run"] != "speculation off":
        return row["speculator"], int(row["k"])
    if isinstance(row.get("best_speculator"), str):
        return row["best_speculator"], int(row["best_k"])
    return None


def _ms(point: pd.Series | None, column: str) -> str:
    value = None if point is None else point.get(f"{column}_mean")
    return "–" if value is None or pd.isna(value) else f"{value:,.0f}" if value >= 100 \
        else f"{value:.1f}"


def _slo_text(point: pd.Series | None, slo) -> str:
    value = None if point is None else point.get(f"slo_meets_{slo.name}")
    return "–" if value is None or pd.isna(value) else "meets" if value else "misses"


def _compared_points(points: pd.DataFrame, row) -> tuple[pd.Series | None, pd.Series | None]:
    """(no speculation's point, the compared setting's point) at a recommendation's load."""
    setting = compared_setting(row)
    at = (row["target"], row["workload"], row["concurrency"])
    return _point_at(points, *at), None if setting is None else _point_at(points, *at, *setting)


def latency_effects(points: pd.DataFrame, row, slos) -> dict[str, str]:
    """What a recommendation's setting does to latency and the SLOs: each latency and SLO
    status without speculation → with the setting (`compared_setting`) at that load."""
    setting = compared_setting(row)
    off, on = _compared_points(points, row)
    out = {"compared": "–" if setting is None else f"{setting[0]} k={setting[1]}"}
    for column, header in LATENCIES:
        out[header] = f"{_ms(off, column)} → {_ms(on, column)}"
    for slo in slos:
        out[f"SLO {slo.name}"] = f"{_slo_text(off, slo)} → {_slo_text(on, slo)}"
    return out


# how the recommendation table's latency and SLO columns read, said under it
EFFECTS_NOTE = ("Latency and SLO columns read *without speculation → with the setting* named "
                "under *latency of* (the chosen one, else the best one judged against).")


def recommendation_table(decided: pd.DataFrame, points: pd.DataFrame,
                         round_name: str) -> pd.DataFrame:
    """The setting to run per target, workload and load (the round's recommendations,
    `analyze.decisions`): its throughput gain and verdict, then what the setting compared
    (the chosen one, else the best one judged against) does to latency and to each SLO."""
    table = of_kind(decided, RECOMMENDATION, round_name)
    if table.empty:
        return table
    slos = frame_slos(points)
    out = pd.DataFrame({
        "target": table["target"], "workload": table["workload"],
        "concurrency": table["concurrency"], "run": table["run"],
        "verdict": [marked_verdict(row["verdict"], **recommendation_marks(row))
                    for _, row in table.iterrows()],
        "throughput gain (held-out)": [with_interval(m, lo, hi) for m, lo, hi in zip(
            table["gain_mean"], table["gain_ci_low"], table["gain_ci_high"], strict=True)],
        "gain judged on": held_out_basis(table, "gain_from"),
        "server starts": [_chosen_starts(points, row) for _, row in table.iterrows()]})
    effects = pd.DataFrame([latency_effects(points, row, slos) for _, row in table.iterrows()])
    out = pd.concat([out, effects.rename(columns={"compared": "latency of"})], axis=1)
    out["as good within the intervals"] = table["rivals"]
    out["rests on"] = [f"{_count(n, 'setting')}; {_count(r, 'repeat')} × {cell_text(p)} prompts"
                       for n, r, p in zip(table["candidates"], table["repeats"],
                                          table["prompts"], strict=True)]
    return out


def slo_summary(decided: pd.DataFrame, points: pd.DataFrame, round_name: str) -> list[str]:
    """Per SLO, one sentence where no recommendation's load meets it with or without
    speculation (what a reader of a table of "misses" must not have to find out alone)."""
    table = of_kind(decided, RECOMMENDATION, round_name)
    lines = []
    for slo in frame_slos(points):
        met = [_slo_text(point, slo) == "meets" for _, row in table.iterrows()
               for point in _compared_points(points, row)]
        if met and not any(met):
            lines.append(f"No setting meets the latency target {slo.name} ({slo.describe()}) "
                         "at any load measured, speculation off included.")
    return lines


def _point_starts(points: pd.DataFrame, target, workload, concurrency, speculator, k) -> str:
    """The server starts' share of one setting's point (`starts_text`); "–" where the point
    table has no such point."""
    hit = _point_at(points, target, workload, concurrency, speculator, k)
    return "–" if hit is None else starts_text(hit)


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
    serve = closed_loop(points)
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


# --- the throughput-latency front ---------------------------------------------------------


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
