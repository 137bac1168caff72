"""Latency in the decision: SLO goodput per setting and the throughput-latency front (the
chart a deployment decision turns on), from the point table."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from sdbench.analyze.decision import (
    decision_rows,
    front_points,
)
from sdbench.analyze.decisions import closed_loop
from sdbench.analyze.slo import frame_slos
from sdbench.report.decision import role_label
from sdbench.report.show import (
    level_axis,
    panel_grid,
    with_interval,
    wrapped,
)


def slo_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per SLO, target, workload and setting (deployable, and no speculation): the highest
    concurrency whose point meets the SLO, its goodput there, and the goodput gain over no
    speculation at that concurrency (paired by repeat)."""
    slos = frame_slos(points)
    serve, _ = decision_rows(closed_loop(points))
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


def goodput_finding(points: pd.DataFrame, most: int = 3) -> str:
    """What the goodput figure shows, from `slo_table`: per SLO, target and workload (at most
    `most` of them) the highest concurrency that meets it without speculation and with each
    setting: 'SLO chat on spec_bench (t) is met by no speculation up to concurrency 8; ngram
    k=3 up to concurrency 4.'"""
    table = slo_table(points)
    if table.empty:
        return ""
    sentences = []
    for (slo, target, workload), part in table.groupby(["SLO", "target", "workload"],
                                                      sort=False):
        part = part.assign(name=part["setting"].replace("vanilla", "no speculation"))
        part = part.sort_values("name", key=lambda n: n != "no speculation", kind="stable")
        reach = [f"{row['name']} " + ("at no load measured" if row[
            "highest concurrency meeting it"] == "none" else
            f"up to concurrency {row['highest concurrency meeting it']}")
            for _, row in part.iterrows()]
        sentences.append(f"SLO {slo.split(':')[0]} on {workload} ({target}) is met by "
                         + "; ".join(reach) + ".")
    more = len(sentences) - most
    return " ".join(sentences[:most]) + (f" ({more} more in the table.)" if more > 0 else "")


def goodput_plot(points: pd.DataFrame) -> plt.Figure | None:
    """Goodput (output tokens/s of requests meeting the SLO) against concurrency, a line per
    setting, a panel per SLO, target and workload; hollow markers where the point misses the
    SLO."""
    slos = frame_slos(points)
    serve, _ = decision_rows(closed_loop(points))
    if not slos or serve.empty:
        return None
    serve = serve.assign(label=role_label(serve))
    panels = [(slo, key, part) for slo in slos
              for key, part in serve.groupby(["target", "workload"])]
    fig, axes = panel_grid(len(panels), 5.6, 3.8)
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


def per_device(points: pd.DataFrame) -> str:
    """What a throughput is divided by: "per GPU", or on a CPU run "per server" (a CPU server
    counts as one device; `gpus` is 1 there)."""
    kinds = set(points["device_kind"].dropna()) if "device_kind" in points else {"gpu"}
    return "per GPU" if "gpu" in kinds or not kinds else "per server (CPU)"


def front_finding(points: pd.DataFrame, latency: str = "p90_tpot_ms") -> str:
    """What the front shows, in a sentence per target and workload: which settings it holds
    (speculation off included) and at which concurrency, "" where there is none."""
    table = front_points(points, latency)
    if table.empty:
        return ""
    fronts = table[table["on_front"]]
    if (fronts["method"] == "vanilla").all():
        return ("No speculative setting is on any panel's front: speculation off gives the "
                "best throughput-latency trade-off measured.")
    sentences = []
    for (target, workload), part in table.groupby(["target", "workload"]):
        front = part[part["on_front"]].assign(label=role_label(part[part["on_front"]]))
        held = "; ".join(
            f"{label} at c={', '.join(str(int(c)) for c in sorted(group['concurrency']))}"
            for label, group in front.groupby("label", sort=False))
        speculative = (front["method"] != "vanilla").any()
        sentences.append(f"{workload} ({target}): the front holds {held}"
                         + ("" if speculative else " — no speculative setting is on it") + ".")
    return " ".join(sentences)


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
    fig, axes = panel_grid(len(panels), 5.6, 3.0)
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
        ax.set_ylabel(f"output tokens/s {per_device(points)}")
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
        f"output tok/s {per_device(points)}": front["throughput_per_gpu"].round(1),
        "TPOT p90 (ms)" if latency == "p90_tpot_ms" else latency: front["latency"].round(1)}
    ).reset_index(drop=True)
