"""Dynamic K from the records: a schedule derived from round 1's static k values (the best k per
load), and a measured schedule split three ways against the best static k (the mechanism's
cost, the schedule's value, the net), each a throughput ratio with its interval."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from sdbench.analyze import engine
from sdbench.analyze.analysis import speculative
from sdbench.analyze.stats import mean_interval, verdict
from sdbench.plan import adaptive, dynamic_k

SPLIT = {"mechanism": "mechanism cost: constant schedule ÷ static k",
         "schedule": "schedule value: derived ÷ constant schedule",
         "net": "net: derived ÷ static k"}


# the schedule's value where it runs the static k at every batch size up to the level
ALIKE = "1 by construction: the schedule runs the static k here"


SPLIT_VERDICTS = {"mechanism": ("the mechanism gains", "the mechanism costs"),
                  "schedule": ("the schedule gains", "the schedule loses"),
                  "net": ("dynamic K faster", "static k faster")}


def _log_ratio(mine: pd.DataFrame, theirs: pd.DataFrame, levels: list) -> pd.DataFrame:
    """Per repeat (rows) and level: log(mine ÷ theirs) of two (repeat x level) tables of
    output throughput, or of speedups over the same baseline measurement (whose ratio is the
    throughput ratio)."""
    ratio = mine.reindex(columns=levels) / theirs.reindex(columns=levels)
    return np.log(ratio.where(ratio > 0)).dropna(how="all")


def _ratio_row(logs: pd.DataFrame, level, name: str,
               rules: dict | None = None) -> dict:
    """The geometric-mean ratio at `level` ("all": of each repeat's levels) with a 95 %
    Student-t interval over repeats, on the log scale (never a bound below 0). Cells measured
    under the adaptive rule (`rules`: level -> (the rule there, repeats planned); their repeats
    stopped when a ratio was known, `sdbench.measure.stopping.turn_stops`): at a level the
    rule's repeated confidence interval (`_rule_interval`), and over all levels the mean of the
    levels' log bounds (it covers whatever the levels' correlation: the mean's standard error
    is at most the mean of theirs)."""
    if logs is None:
        return {f"{name}_mean": np.nan, f"{name}_ci_low": np.nan, f"{name}_ci_high": np.nan,
                f"{name}_verdict": None}
    if rules:
        levels = [c for c in (logs.columns if level == "all" else [level]) if c in rules]
        parts = np.array([_rule_interval(logs[c].dropna().to_numpy(float), *rules[c])
                          for c in levels]).reshape(-1, 3)
        mean, low, high = parts.mean(axis=0) if len(parts) else (np.nan,) * 3
        # the repeats behind it (over all levels: the fewest of any level's)
        repeats = int(logs[levels].notna().sum().min()) if levels else 0
    else:
        values = (logs[level] if level != "all" else logs.mean(axis=1, skipna=False)).to_numpy(
            dtype=float)
        mean, _, low, high = mean_interval(values)
        repeats = int(np.sum(~np.isnan(values)))
    faster, slower = SPLIT_VERDICTS[name]
    said = verdict(*np.exp([low, high]))
    return {f"{name}_mean": float(np.exp(mean)), f"{name}_ci_low": float(np.exp(low)),
            f"{name}_ci_high": float(np.exp(high)), f"{name}_repeats": repeats,
            f"{name}_verdict": {"speculate": faster, "no speculation": slower}.get(said, said)}


def _rule_interval(ys: np.ndarray, rule: adaptive.Rule, looks: int,
                   several: bool = False) -> tuple[float, ...]:
    """(centre, low, high) of a level's log ratios as the adaptive rule reads them: the
    repeated confidence interval after len(ys) of `looks` repeats, σ from the rule's priors
    and their own spread (`adaptive.rule_sigma`; `several`: each repeat on a server instance
    of its own, else all on one; it covers at whatever look the rule stopped; it has a width
    after one repeat, where a Student-t interval has none)."""
    if not len(ys):
        return np.nan, np.nan, np.nan
    starts = list(range(len(ys))) if several else [0] * len(ys)
    centre, half = adaptive.interval(ys, max(looks, len(ys)), rule,
                                     *adaptive.rule_sigma(rule, [(ys, starts)], starts,
                                                          several))
    return centre, centre - half, centre + half


def _turn_rules(frame: pd.DataFrame, cell_ids: set) -> dict:
    """level -> (the adaptive rule there, repeats planned) of cells measured in turn under the
    rule (their records' `adaptive`; {} where they were not): the rule as one level's repeats
    (or blocks of prompts, `blocks`) read it, the repeats every record of the level's cells
    counts, stopped or measured."""
    if "adaptive" not in frame:
        return {}
    mine = frame[frame["cell_id"].isin(cell_ids) & frame["concurrency"].notna()]
    rules = {}
    for level, at in mine.groupby("concurrency"):
        ruled = at[at["adaptive"].notna()]  # (a stopped record carries its stop instead)
        if ruled.empty:
            continue
        rule = adaptive.Rule(**json.loads(ruled["adaptive"].iloc[0]))
        blocks = int(ruled["blocks"].iloc[0]) if "blocks" in ruled else 1
        # (its repeats on server instances of their own: the rule's looks on several starts)
        several = "server_instance" in at and at["server_instance"].nunique() > 1
        rules[level] = (rule.at(blocks, int(level)), int(at.groupby("cell_id").size().max()),
                        several)
    return rules


def dynamic_k_comparison(frame: pd.DataFrame,
                         schedules: dict[str, list] | None = None) -> pd.DataFrame:
    """Each derived dynamic-K schedule split three ways, paired by level and repeat: the
    mechanism's cost (the best static k as a constant schedule through vLLM's dynamic
    mechanism ÷ that static k), the schedule's value (derived ÷ constant schedule) and the net
    (derived ÷ static k), each a geometric-mean throughput ratio with a 95 % interval over
    repeats, per level and over all levels. The three servers took turns (`grid.dynamic_k_
    arms`: found by their report names' suffixes): their output throughputs are paired by
    repeat directly (every repeat, whether its baseline repeat was measured or not); the static
    k is chosen on round 1's data and judged on these. A derived schedule that is the constant
    one has no schedule value (`constant`). Cells measured under a named vLLM model runner
    (`dynamic_k[].model_runners`) are split among themselves, one row set per runner
    (`model_runner`). Without the cells measured in turn (a schedule
    derived before they were, or `split: false`), the net is against round 1's best static k
    (`best_static_k`), chosen on the data it is judged by (which favours it), and there is no
    split.

    schedules: derived cell id -> the schedule it measured. At a level where the schedule runs
    the static k at every batch size up to the level (`dynamic_k.alike_levels`) the constant
    schedule is not measured (`dynamic_k.dynamic_k_arms`): the derived cell serves as it would, so
    it stands in for it there (the mechanism: derived ÷ static k) and the schedule's value is 1
    by construction (`schedule_alike`). Cells that took turns under the adaptive rule stopped
    their repeats once their ratios to the static k were known: their intervals are the rule's
    (`_ratio_row`)."""
    # the cells that took turns pair their own throughputs: every repeat they measured, whether
    # its baseline repeat was measured (`paired`) or not
    ok = frame["status"].eq("ok") if "status" in frame else pd.Series(True, index=frame.index)
    measured = frame.get("output_throughput", pd.Series(np.nan, index=frame.index)).notna()
    arm = frame["speculator"].map(lambda name: name.endswith(dynamic_k.ARMS)).astype(bool)
    paired = frame["paired"] if "paired" in frame else frame["speedup"].notna()
    spec = frame[(frame["method"] != "vanilla") & (paired | (arm & ok & measured))]
    rows = []
    for (target, workload, speculator), cell in spec[
            spec["speculator"].str.endswith(dynamic_k.DERIVED_ARM)].groupby(
            ["target", "workload", "speculator"]):
        method = speculator.removesuffix(dynamic_k.DERIVED_ARM)  # with its runner's tag, if any
        base = {"target": target, "workload": workload, "method": method,
                "model_runner": dynamic_k.runner_method(method)[1]}
        here = spec[(spec["target"] == target) & (spec["workload"] == workload)]
        static = here[here["speculator"] == method + dynamic_k.STATIC_ARM]
        constant = here[here["speculator"] == method + dynamic_k.CONSTANT_ARM]
        in_turn = not static.empty
        if not in_turn:  # round 1's best static k
            static = here[(here["round"] == "round1")
                          & (here["speculator"] == dynamic_k.runner_method(method)[0])]
        levels = [c for c in sorted(cell["concurrency"].unique())
                  if c in set(static["concurrency"])]
        if not levels:
            rows.append({**base, "concurrency": "all", "best static k": None,
                         "net_verdict": "no static k measured"})
            continue
        if not in_turn:
            means = static[static["concurrency"].isin(levels)].groupby(
                ["target", "workload", "speculator", "method", "k", "concurrency"],
                as_index=False)["speedup"].mean().rename(columns={"speedup": "speedup_mean"})
            static = static[static["k"] == best_static_k(means, target, workload,
                                                         dynamic_k.runner_method(method)[0])]
        # cells that took turns: their own throughputs, repeat by repeat (a baseline repeat
        # the adaptive rule did not measure leaves them a pair); round 1's static k, measured
        # at another time: its speedups, each over the baseline repeat the derived cell has too
        value = "output_throughput" if in_turn else "speedup"
        table = {name: part.pivot_table(index="repeat", columns="concurrency", values=value)
                 for name, part in (("static", static), ("constant", constant),
                                    ("derived", cell)) if not part.empty}
        constant_schedule = in_turn and constant.empty
        # levels where the schedule is the constant one's (its cell not measured there)
        schedule = (schedules or {}).get(cell["cell_id"].iloc[0])
        alike = []
        if in_turn and not constant_schedule and schedule:
            alike = [c for c in dynamic_k.alike_levels(schedule, int(static["k"].iloc[0]), levels)
                     if c not in table["constant"].columns]
        if alike:
            table["constant"] = table["constant"].combine_first(table["derived"][alike])
        logs = {"net": _log_ratio(table["derived"], table["static"], levels),
                "mechanism": (_log_ratio(table["derived" if constant_schedule else "constant"],
                                         table["static"], levels) if in_turn else None),
                "schedule": (_log_ratio(table["derived"], table["constant"], levels)
                             if in_turn and not constant_schedule else None)}
        # cells that took turns under the adaptive rule: its intervals (their repeats stopped)
        rules = _turn_rules(frame, set(pd.concat([static, constant, cell])["cell_id"])) \
            if in_turn else {}
        # what the dynamic mechanism changed in the engine against the static k's server
        differs = engine.pair_sentence(
            engine.first_settings(constant if not constant.empty else cell),
            engine.first_settings(static), who="dynamic K")
        for level in levels + ["all"]:
            row = {**base, "concurrency": level, "best static k": int(static["k"].iloc[0]),
                   "static measured": ("in turn with the schedule" if in_turn else
                                       "in round 1 (chosen on the data it is judged by)"),
                   "constant": constant_schedule, "engine_differs": differs,
                   "schedule_alike": level in alike}
            for name in SPLIT:
                row.update(_ratio_row(logs[name], level, name, rules))
            if level in alike:
                row["schedule_verdict"] = ALIKE
            rows.append(row)
    return pd.DataFrame(rows)


def derive_schedule(points: pd.DataFrame, target: str, workload: str,
                    speculator: str) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size for one method: at each measured
    concurrency (taken as the batch size) the k with the best mean speedup, 0 (no speculation)
    where no k beats 1. Ranges are inclusive and start at 1; vLLM carries the last one forward
    to larger batches. A level without a measured speedup (one the adaptive rule's bisection
    left out) takes the next measured level's k."""
    part = _method_points(points, target, workload, speculator)
    schedule, start = [], 1
    levels = sorted(int(level) for level in part["concurrency"].unique())
    for level in levels:
        at = part[part["concurrency"] == level]
        best = at.loc[at["speedup_mean"].idxmax()]
        k = int(best["k"]) if best["speedup_mean"] > 1 else 0
        if schedule and schedule[-1][2] == k:
            schedule[-1][1] = level  # merge equal neighbours
        else:
            schedule.append([start, level, k])
        start = level + 1
    return schedule


def _geo(values: np.ndarray) -> float:
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.exp(np.log(np.clip(values, 1e-9, None)).mean())) if len(values) else np.nan


def best_static_k(points: pd.DataFrame, target: str, workload: str, speculator: str) -> int:
    """The single k of a method with the highest geometric-mean speedup over the concurrency
    levels (round 1's points), among the ks measured at every level (a k the adaptive rule
    stopped at some level was beaten there); the best over its own levels where none was:
    the static k a derived dynamic-K schedule is measured against."""
    part = _method_points(points, target, workload, speculator)
    by_k = part.pivot_table(index="k", columns="concurrency", values="speedup_mean")
    complete = by_k.dropna(axis=0)
    return int((complete if not complete.empty else by_k).apply(
        lambda row: _geo(row.to_numpy(float)), axis=1).idxmax())


def _method_points(points: pd.DataFrame, target: str, workload: str,
                   speculator: str) -> pd.DataFrame:
    """A method's closed-loop points with a measured speedup on one target and workload."""
    spec = speculative(points)
    if "load" in spec:  # batch sizes are concurrency levels: closed-loop points only
        spec = spec[spec["load"] == "concurrency"]
    part = spec[(spec["target"] == target) & (spec["workload"] == workload)
                & (spec["speculator"] == speculator)]
    part = part[part["speedup_mean"].notna()]  # (not a level the bisection left out)
    if part.empty:
        raise ValueError(f"no measured speedups for {speculator!r} on target {target!r}, "
                         f"workload {workload!r}: nothing to derive a schedule from")
    return part
