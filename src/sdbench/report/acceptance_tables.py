"""How good must a draft be: the acceptance sweep's break-even tables and figure, the simulated
(synthetic) cells' table and the acceptance figure of round 1's report."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from sdbench.analyze.acceptance import (
    acceptance_check,
    break_even,
    real_point,
    simulated_label,
    sweep_points,
)
from sdbench.analyze.analysis import speculative
from sdbench.analyze.step_model import predicted_break_even
from sdbench.plan import grid
from sdbench.report.show import (
    METRIC_LABELS,
    MIN_DRAFTS,
    setting_label,
    wrapped,
)


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
    (`step_model.predicted_break_even`)."""
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
