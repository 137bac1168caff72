"""What a figure shows, in a sentence generated from the numbers it draws: its caption and alt
text lead with it (`show.show_figure`'s `finding`). Verdicts are counted as the points table
gives them (`verdict`), never judged again here."""

from __future__ import annotations

import pandas as pd

from sdbench.analyze.analysis import speculative
from sdbench.plan.grid import DEPLOYABLE
from sdbench.report.show import METRIC_LABELS, cell_text, role_marks, setting_label, verdict_class

# sentences of a finding at most: it leads a caption and an alt text
MAX_SENTENCES = 3


def _named(rows: pd.DataFrame) -> pd.Series:
    """'ngram k=3', a pipeline check or what-if marked so, a server setting other than the
    default named in brackets."""
    settings = rows["setting"] if "setting" in rows else pd.Series("default", index=rows.index)
    return (pd.Series(setting_label(rows), index=rows.index) + role_marks(rows)
            + settings.map(lambda s: f" [{s}]" if isinstance(s, str) and s != "default" else ""))


def deployable_mask(rows: pd.DataFrame) -> pd.Series:
    """Whether each row is of a setting to deploy (no pipeline check or what-if)."""
    if "role" not in rows:
        return pd.Series(True, index=rows.index)
    return rows["role"].fillna(DEPLOYABLE) == DEPLOYABLE


def speedup_finding(points: pd.DataFrame) -> str:
    """'Of 4 deployable speculative points, 0 clearly faster than no speculation, 4 clearly
    slower, 0 with no clear difference; the highest mean speedup ngram k=3 on spec_bench at
    concurrency 1, 0.80×. Also drawn: 8 point(s) of pipeline checks or what-ifs.' (the counts
    and the best of the checks where nothing deployable is drawn); "" where no point has a
    speedup."""
    spec = speculative(points)
    if spec.empty:
        return ""
    deployable = deployable_mask(spec)
    counted = spec[deployable] if deployable.any() else spec
    kind = "deployable speculative points" if deployable.any() else (
        "speculative points, all pipeline checks or what-ifs")
    classes = (counted["verdict"].map(verdict_class) if "verdict" in counted
               else pd.Series(None, index=counted.index)).value_counts()
    gain, loss = int(classes.get("gain", 0)), int(classes.get("loss", 0))
    best = counted.loc[[counted["speedup_mean"].idxmax()]]
    text = (f"Of {len(counted)} {kind}, {gain} clearly faster than no speculation, {loss} "
            f"clearly slower, {len(counted) - gain - loss} with no clear difference; the "
            f"highest mean speedup {_named(best).iloc[0]} on {best['workload'].iloc[0]} at "
            f"concurrency {cell_text(best['concurrency'].iloc[0])}, "
            f"{best['speedup_mean'].iloc[0]:.2f}×.")
    others = len(spec) - len(counted)
    return text + (f" Also drawn: {others} point(s) of pipeline checks or what-ifs."
                   if others else "")


def latency_finding(points: pd.DataFrame, metric: str) -> str:
    """Per target and workload at its highest concurrency, the metric without speculation
    against the speculative setting with the lowest (a deployable one where there is one):
    'At concurrency 24 on spec_bench (t): mean TPOT 88 ms without speculation, 109 ms at best
    with it (ngram k=3).'"""
    column = f"{metric}_mean"
    if column not in points or points[column].isna().all():
        return ""
    label = METRIC_LABELS.get(metric, metric).split(" (")[0]
    rows = points[points[column].notna()]
    panels = rows.groupby(["target", "workload"], sort=True)
    # the panels with a deployable setting, where there are any
    deployable = [key for key, part in panels
                  if (deployable_mask(part) & (part["method"] != "vanilla")).any()]
    sentences = []
    for (target, workload), part in panels:
        if deployable and (target, workload) not in deployable:
            continue
        top = part[part["concurrency"] == part["concurrency"].max()]
        base, spec = top[top["method"] == "vanilla"], top[top["method"] != "vanilla"]
        if base.empty or spec.empty:
            continue
        spec = spec[deployable_mask(spec)] if deployable_mask(spec).any() else spec
        lowest = spec.loc[[spec[column].idxmin()]]
        sentences.append(
            f"At concurrency {cell_text(top['concurrency'].iloc[0])} on {workload} "
            f"({target}): {label} {base[column].mean():.0f} ms without speculation, "
            f"{lowest[column].iloc[0]:.0f} ms at best with it ({_named(lowest).iloc[0]}).")
    shown = sentences[:MAX_SENTENCES]
    more = len(sentences) - len(shown)
    return " ".join(shown) + (f" ({more} more in the points table.)" if more else "")
