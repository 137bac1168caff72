"""One row per point from the paired measurements: means, spreads and 95 % intervals over the
repeats (the headline speedup's from the pooled noise model, a point the adaptive rule stopped
with the interval it stopped on), what each interval covers, and acceptance efficiency."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy import stats

from sdbench.analyze.acceptance import FROM_DRAFTS, FROM_REPEATS, draft_interval, synthetic_setting
from sdbench.analyze.noise import (
    SPEC_START,
    WITHIN,
    minimum_detectable,
    point_key,
    point_noise,
)
from sdbench.analyze.slo import frame_slos, point_stats
from sdbench.analyze.stats import MIN_INTERVAL_DF, mean_interval, ratio_interval, verdict
from sdbench.plan import adaptive
from sdbench.records import STOPPED

# a point: closed-loop concurrency (batch size for offline / Transformers cells) or open-loop
# request rate (concurrency empty)
LEVEL = ["concurrency", "request_rate"]


KEY = ["cell_id", *LEVEL, "repeat"]


POINT_KEYS = ["round", "setting", "role", "cell_id", "speculator", "method", "k", "target",
              "quantization", "full_precision", "draft", "workload", "dataset", "subset",
              "engine", "load", "concurrency", "request_rate", "baseline_cell_id", "dtype", "gpus",
              "device_kind", "temperature", "draft_sample_method"]


# statistics over repeats: mean, std, 95 % interval
STAT_COLUMNS = ["total_token_throughput", "output_throughput", "mean_tpot_ms", "mean_ttft_ms",
                "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "p90_ttft_ms", "p99_ttft_ms",
                "p90_e2el_ms", "p99_e2el_ms",
                "speedup", "total_speedup", "tpot_speedup", "output_drift",
                "spec_decode_acceptance_rate", "tokens_per_target_step",
                "spec_decode_acceptance_length", "lossless_exact_share",
                "lossless_token_agreement", "energy_per_output_token_j", "energy_gain",
                "gpu_avg_power_w", "gpu_util_pct"]


# per-measurement counts a point sums over its repeats -> its column
COUNTS = {"completed": "requests", "total_output_tokens": "output_tokens",
          "spec_decode_num_drafts": "drafts", "spec_decode_draft_tokens": "draft_tokens",
          "spec_decode_accepted_tokens": "accepted_tokens"}


# ratios among STAT_COLUMNS (their interval on the log scale: a bound never at or below 0;
# the headline speedup's comes from the pooled noise model, `with_pooled_intervals`), and the
# columns that may be negative (the others' Student t intervals are cut at 0)
RATIO_COLUMNS = ("speedup", "total_speedup", "tpot_speedup", "energy_gain")


SIGNED_COLUMNS = ("output_drift",)


# the values a per-point mean can take, where they are not [0, ∞): its interval is kept inside
VALUE_RANGE = {"spec_decode_acceptance_length": (1.0, "k+1"),
               "spec_decode_acceptance_rate": (0.0, 100.0)}


def interval_covers(group: pd.DataFrame, blocks: int = 1) -> str:
    """What a point's interval covers, in words: how many repeats (or `blocks` blocks of prompts
    each, where the adaptive rule split its repeats: `specs.point_blocks`), over how many server
    instances, with their own seeds or one."""
    n = int((group["status"] == "ok").sum())
    instances = group["server_instance"].dropna().nunique() if "server_instance" in group else 0
    seeds = group["seed"].dropna().nunique() if "seed" in group else 0
    servers = (f"{instances} server instances" if instances > 1
               else "one server instance" if group["engine"].iloc[0] == "serve"
               else "one engine instance")
    if "isolation" in group and (group["isolation"] == "fresh server per point").any():
        servers = "a fresh server per point"
    seeding = "per-repeat seeds" if seeds > 1 else "one seed"
    if "interleaved_with" in group and group["interleaved_with"].notna().all():
        servers += ", measured in turn with the other side of its pair (one job)"
    measured = (f"{n} block{'s' * (n != 1)} of 1/{blocks} of a repeat's prompts" if blocks > 1
                else f"{n} repeat{'s' * (n != 1)}")
    return f"{measured}, {servers}, {seeding}"


def acceptance_efficiency(ok: pd.DataFrame, k) -> float:
    """Mean acceptance length ÷ (1 + the tokens each step drafted): the share of each step's
    possible tokens kept. The drafted tokens per step are the k of each step (a dynamic-K
    cell's k changes with the batch size), from the drafts and draft tokens counted; k when the
    counts are missing."""
    length = ok["spec_decode_acceptance_length"].astype(float)
    if {"spec_decode_draft_tokens", "spec_decode_num_drafts"} <= set(ok):
        per_step = (ok["spec_decode_draft_tokens"].astype(float)
                    / ok["spec_decode_num_drafts"].astype(float).where(
                        ok["spec_decode_num_drafts"] > 0))
    else:
        per_step = pd.Series(np.nan, index=ok.index)
    per_step = per_step.fillna(float(k))
    return float((length / (1 + per_step)).mean())


def aggregate_points(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, concurrency): repeat counts, status, and for every STAT_COLUMNS metric
    <metric>_mean/_std/_ci_low/_ci_high over the successful repeats (speedups: paired ones)."""
    rows = []
    keys = [k for k in POINT_KEYS if k in frame]
    slos = frame_slos(frame)
    for values, group in frame.groupby(keys, dropna=False, sort=False):
        row = dict(zip(keys, values, strict=True))
        ok = group[group["status"] == "ok"]
        stopped = group[group["status"] == STOPPED]
        row.update(repeats=len(group), repeats_ok=len(ok),
                   repeats_paired=int(group["paired"].sum()), repeats_stopped=len(stopped),
                   stop_reason=_stop_reason(stopped), adaptive=_rule(group),
                   blocks=int(group["blocks"].max()) if "blocks" in group else 1,
                   sequential_factor=_sequential_factor(group),
                   stop_interval=_stop_interval(stopped),
                   status="ok" if len(ok) + len(stopped) == len(group) else ", ".join(
                       f"{n} {s}" for s, n in group["status"].value_counts().items()),
                   errors="; ".join(sorted({str(e) for e in group["error"].dropna()})) or None)
        if "lossless_flag" in group:
            row["lossless_flag"] = bool(group["lossless_flag"].fillna(False).any())
            row["lossless_first_divergence"] = group["lossless_first_divergence"].median()
        if "lossless_sampling" in group and group["lossless_sampling"].notna().any():
            # the cell's check under sampling (pooled over its points: one per cell)
            first = group[group["lossless_sampling"].notna()].iloc[0]
            row["lossless_sampling"] = first["lossless_sampling"]
            row["lossless_sampling_verdict"] = first["lossless_sampling_verdict"]
        counts = sorted({int(n) for n in group["num_prompts"].dropna()})
        row["num_prompts"] = (counts[0] if len(counts) == 1
                              else ", ".join(map(str, counts)) if counts else None)
        # what the point rests on, summed over its measured repeats: requests, output tokens,
        # drafts (steps that drafted) and draft tokens proposed and accepted; the acceptance
        # pooled by draft count (accepted ÷ proposed over every repeat, not a mean of rates)
        for column, name in COUNTS.items():
            row[name] = (float(ok[column].astype(float).sum()) if column in ok
                         and ok[column].notna().any() else np.nan)
        row["acceptance_pooled"] = (row["accepted_tokens"] / row["draft_tokens"]
                                    if row["draft_tokens"] > 0 else np.nan)
        row["drift_flag"] = bool(group["drift_flag"].fillna(False).any())
        row["pair_issues"] = "; ".join(sorted(set(group["pair_issue"].dropna()))) or None
        if "engine_differs" in group:
            row["engine_differs"] = "; ".join(
                sorted(set(group["engine_differs"].dropna()))) or None
        row["interval_covers"] = interval_covers(group, row["blocks"])
        if "spec_options" in group:  # drafts accepted at a set rate: a simulated point
            row["simulated_acceptance"] = synthetic_setting(group["spec_options"].iloc[0])
        if "acceptance_source" in group:
            row["acceptance_source"] = group["acceptance_source"].iloc[0]
        if "spec_decode_acceptance_length" in group and pd.notna(row["k"]):
            row["acceptance_efficiency"] = acceptance_efficiency(ok, row["k"])
        for column in STAT_COLUMNS:
            if column not in group:
                continue
            values = ok[column].astype(float).to_numpy()
            mean, std, low, high = mean_interval(values)
            if column in RATIO_COLUMNS:  # a ratio: geometric mean, interval on the log scale
                mean, low, high = ratio_interval(values)
            elif column not in SIGNED_COLUMNS and pd.notna(low):
                # an interval kept to the values the quantity can take (it covers no less):
                # a throughput, latency or share is never below 0, an acceptance length never
                # below 1 nor above k + 1, an acceptance rate (%) never above 100
                floor, ceiling = VALUE_RANGE.get(column, (0.0, None))
                low = max(low, floor)
                ceiling = row.get("k", np.nan) + 1 if ceiling == "k+1" else ceiling
                if ceiling is not None and pd.notna(ceiling):
                    high = min(high, float(ceiling))
            row.update({f"{column}_mean": mean, f"{column}_std": std,
                        f"{column}_ci_low": low, f"{column}_ci_high": high})
        _acceptance_from_drafts(row)
        if (row["adaptive"] is not None and pd.notna(row.get("request_rate"))
                and row.get("method") != "vanilla" and "tpot_speedup" in ok):
            row.update(zip(("tpot_speedup_mean", "tpot_speedup_ci_low", "tpot_speedup_ci_high"),
                           rule_interval(ok["tpot_speedup"].to_numpy(float), row, len(group),
                                         ok.get("server_instance")),
                           strict=True))
        if slos:
            row.update(point_stats(group, slos), slos=group["slos"].iloc[0])
        rows.append(row)
    points = pd.DataFrame(rows)
    # no speculation against itself is 1 by construction, not a finding: no interval
    bounds = [f"{c}_ci_{side}" for c in RATIO_COLUMNS for side in ("low", "high")
              if f"{c}_ci_{side}" in points]
    if bounds and "method" in points:
        points.loc[points["method"] == "vanilla", bounds] = np.nan
    if "speedup_ci_low" in points:
        points = with_pooled_intervals(points, frame)
        # what each point's interval says ("no clear gain" when it spans 1); none for vanilla
        points["verdict"] = [
            (verdict(low, high, "one repeat" if pd.isna(df) or df >= MIN_INTERVAL_DF
                     else f"fewer than {MIN_INTERVAL_DF:g} degrees of freedom")
             if method != "vanilla" and pd.notna(mean) else None)
            for method, mean, low, high, df in zip(
                points["method"], points["speedup_mean"], points["speedup_ci_low"],
                points["speedup_ci_high"], points["speedup_df"], strict=True)]
    if "spec_decode_acceptance_length_mean" in points:
        # the physical bound: a speedup cannot exceed the tokens each target step yields
        points["efficiency"] = (points["speedup_mean"]
                                / points["spec_decode_acceptance_length_mean"])
    points["k"] = points["k"].astype("Int64")
    return points.sort_values(["round", "target", "workload", "engine", "method", "k", "load",
                               "concurrency", "request_rate"],
                              na_position="first").reset_index(drop=True)


def _acceptance_from_drafts(row: dict) -> None:
    """A point measured once: its acceptance length's and rate's intervals over its drafts
    (`acceptance.draft_interval`) instead of none; `acceptance_interval_from` says which."""
    mean = row.get("spec_decode_acceptance_length_mean", np.nan)
    if pd.isna(mean):
        return
    if pd.notna(row.get("spec_decode_acceptance_length_ci_low", np.nan)):
        row["acceptance_interval_from"] = FROM_REPEATS
        return
    drafts, tokens = row.get("drafts", np.nan), row.get("draft_tokens", np.nan)
    low, high = draft_interval(row.get("accepted_tokens", np.nan), drafts, tokens)
    if pd.isna(low):
        return
    per_draft = tokens / drafts  # k (a dynamic-K cell: the mean of its steps' k)
    row.update(spec_decode_acceptance_length_ci_low=min(1 + per_draft * low, mean),
               spec_decode_acceptance_length_ci_high=max(1 + per_draft * high, mean),
               acceptance_interval_from=FROM_DRAFTS)
    rate = row.get("spec_decode_acceptance_rate_mean", np.nan)
    if pd.notna(rate):
        row.update(spec_decode_acceptance_rate_ci_low=min(100 * low, rate),
                   spec_decode_acceptance_rate_ci_high=max(100 * high, rate))


def _stop_reason(stopped: pd.DataFrame) -> str | None:
    """Why a point stopped early ("settled after 1 of 5 repeats"), from its first stopped
    repeat; None for a point measured in full."""
    if stopped.empty or "stop" not in stopped:
        return None
    stop = json.loads(stopped.sort_values("repeat")["stop"].dropna().iloc[0])
    if stop["reason"] == adaptive.BASELINE:
        return "paired cells stopped"
    if stop["reason"] == adaptive.LEVEL:
        return "level left out by the bisection"
    return (f"{stop['reason']} after {stop['repeats']} of {stop['looks']} "
            f"{adaptive.look_unit(stop.get('blocks', 1))}")


# the stops whose interval is the point's reported one (`_stop_interval`): they stopped on
# what the interval said, at a look before the cap
INTERVAL_STOPS = (adaptive.SETTLED, adaptive.PRECISE, adaptive.BEATEN, adaptive.FUTILE)


def _stop_interval(stopped: pd.DataFrame) -> str | None:
    """The adaptive rule's interval at the look a point stopped on its output-token speedup
    (JSON: its log mean, half-width, σ, degrees of freedom and looks): what the rule decided
    on, the point's reported interval (`with_pooled_intervals`); None for a point measured to
    the cap, stopped with its baseline or level, at an open-loop rate (stopped on the TPOT
    speedup) or against another cell (measured in turn)."""
    if stopped.empty or "stop" not in stopped or stopped["stop"].isna().all():
        return None
    stop = json.loads(stopped.sort_values("repeat")["stop"].dropna().iloc[0])
    if (stop.get("reason") not in INTERVAL_STOPS or stop.get("metric", "speedup") != "speedup"
            or "against" in stop or "half_log" not in stop):
        return None
    return json.dumps({k: stop.get(k) for k in ("mean_log", "half_log", "sigma", "df",
                                                 "repeats", "reason")})


def _rule(group: pd.DataFrame) -> str | None:
    """The adaptive rule a point was measured under (its JSON), or None."""
    if "adaptive" not in group or group["adaptive"].isna().all():
        return None
    return group["adaptive"].dropna().iloc[0]


def _sequential_factor(group: pd.DataFrame) -> float:
    """How much wider a point's interval is under the adaptive rule it was measured with: the
    repeated confidence interval's multiplier at the look it stopped (its paired repeats of
    the planned ones) over the fixed-sample normal quantile; 1 for a point measured without."""
    looks, n = len(group), int(group["paired"].sum())
    if (rule := _rule(group)) is None or n < 1:
        return 1.0
    rule = adaptive.Rule(**json.loads(rule))
    return (adaptive.boundary(looks, rule.alpha, rule.shape)[min(n, looks) - 1]
            / stats.norm.ppf(1 - rule.alpha / 2))


def rule_interval(ratios: np.ndarray, row: dict, looks: int,
                  instances=None) -> tuple[float, float, float]:
    """(geometric mean, low, high) of a point's paired `ratios` (of `looks` planned; measured on
    server `instances`, where given) as the adaptive rule it was measured under (`row`'s)
    reads them at an open-loop rate, where it stops on the TPOT speedup
    (`sdbench.measure.stopping.METRICS`): the repeated confidence interval at the look it
    stopped, σ from the rule's priors and their own spread (`adaptive.rule_sigma`). It covers
    at that look whatever the stop (tests/test_adaptive.py simulates it), and it has a width
    after one repeat, where a Student-t interval over the repeats has none."""
    values = np.asarray(ratios, dtype=float)
    keep = np.isfinite(values) & (values > 0)
    ys = np.log(values[keep])
    if not len(ys):
        return np.nan, np.nan, np.nan
    starts = ([0] * len(ys) if instances is None else
              [0 if pd.isna(i) else int(i) for i in np.asarray(instances)[keep]])
    rule = adaptive.Rule(**json.loads(row["adaptive"])).at(int(row.get("blocks") or 1))
    centre, half = adaptive.interval(ys, max(looks, len(ys)), rule,
                                     *adaptive.rule_sigma(rule, [(ys, starts)], starts))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def _with_prior(row: dict, rule: adaptive.Rule) -> dict:
    """A point measured under the adaptive rule: its variance from the noise model pooled with
    the rule's priors for its looks (`prior_df` degrees of freedom: within a start `noise` per
    look, the starts' share `instance_noise`, as the rule pooled them when it decided), and
    the interval, standard error and minimum detectable effect from that. (A rule stored
    without an instance prior pooled only a point measured on one server instance, with its
    prior σ, as it did then.)"""
    if rule.instance_noise is None:
        own_df = row["df"] if pd.notna(row["df"]) else 0.0
        if row["kind"] != WITHIN and own_df > 0:
            return row
        within = row["var"] * row["n"]  # one run's variance, as that rule read it
        df = rule.prior_df + own_df
        var = (rule.prior_df * rule.noise ** 2 + own_df * within) / df / row["n"]
    else:
        # part by part: the server starts' share with `instance_noise`, the runs' with `noise`
        # (a part measured with many degrees of freedom keeps its own; one with few leans on
        # its prior), as the rule pools them (`adaptive.look_variance`)
        loads = row["loads"].get(SPEC_START, {})
        shared = float(sum(w * w for w in loads.values())) if loads else 1.0
        parts = []
        for prior, own, own_df in (
                (rule.instance_noise ** 2 * shared, row["instance_var"],
                 row["instance_df"] if row["instance_from"] else 0.0),
                (rule.noise ** 2 / row["n"], row["run_var"], row["run_df"])):
            # (a part not measured counts for nothing; one known exactly, for a great deal)
            own_df = 0.0 if pd.isna(own) or pd.isna(own_df) else min(float(own_df), 1e6)
            d = rule.prior_df + own_df
            parts.append(((rule.prior_df * prior + own_df * own) / d if d > 0 else prior, d))
        var = sum(v for v, _ in parts)
        spread = sum(v * v / d for v, d in parts if v > 0 and d > 0)
        df = var ** 2 / spread if spread > 0 else rule.prior_df
    se = float(np.sqrt(var))
    half = stats.t.ppf(1 - rule.alpha / 2, max(df, 1.0)) * se
    return {**row, "df": df, "se": se, "var": var, "low": float(np.exp(row["center"] - half)),
            "high": float(np.exp(row["center"] + half)), "mde": minimum_detectable(se, df),
            "covers": f"{row['covers']}; pooled with the adaptive rule's priors (σ "
                      f"{rule.noise:g} a look within a start"
                      + (f", {rule.instance_noise:g} between starts" if rule.instance_noise
                         else "") + f", on {rule.prior_df:g} degrees of freedom)"}


def with_pooled_intervals(points: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The speedup of every speculative point from the noise model (`noise.point_noise`): its
    estimate (the geometric mean of its runs), its interval (the Student-t interval over its
    own repeats alone, on the log scale, kept as `speedup_unpooled_mean`,
    `speedup_unpooled_ci_low/high`), their degrees of freedom, the standard error of the log
    speedup (`speedup_se`), the minimum detectable speedup, the server starts' share of its
    variance and where it was measured (`speedup_instance_sd`, `speedup_instance_from`), what
    the interval covers, and one run's variance and what its runs share beyond independent runs
    (`speedup_repeat_sd`, `speedup_shared_sd`: what a held-out estimate's interval reads,
    `analysis.held_out_interval`). A point measured under the adaptive rule gets the repeated
    confidence interval (`_sequential_factor`): it covers at the look the point stopped,
    whatever the rule's stop."""
    points = points.assign(speedup_unpooled_mean=points["speedup_mean"],
                           speedup_unpooled_ci_low=points["speedup_ci_low"],
                           speedup_unpooled_ci_high=points["speedup_ci_high"],
                           speedup_df=np.nan, speedup_se=np.nan, speedup_mde=np.nan,
                           speedup_repeat_sd=np.nan, speedup_shared_sd=np.nan,
                           speedup_instance_sd=np.nan, speedup_instance_from=None)
    noise = point_noise(frame)
    found = {point_key(*k): row for k, row in zip(
        noise[["cell_id", "concurrency", "request_rate"]].itertuples(index=False, name=None),
        noise.to_dict("records"), strict=True)}
    for i, point in enumerate(zip(points["cell_id"], points["concurrency"],
                                  points["request_rate"], strict=True)):
        row = found.get(point_key(*point))
        if row is None:
            continue
        at = points.index[i]
        factor = points.at[at, "sequential_factor"]
        if factor != 1.0:
            rule = adaptive.Rule(**json.loads(points.at[at, "adaptive"]))
            level = points.at[at, "concurrency"]
            row = _with_prior(row, rule.at(int(points.at[at, "blocks"]),
                                           None if pd.isna(level) else int(level)))
        low, high = row["low"], row["high"]
        if factor != 1.0:
            center = row["center"]
            low = float(np.exp(center - factor * (center - np.log(low))))
            high = float(np.exp(center + factor * (np.log(high) - center)))
        stopped = points.at[at, "stop_interval"] if "stop_interval" in points else None
        if isinstance(stopped, str) and factor != 1.0 and rule.instance_noise is not None:
            # the interval the rule stopped on (its σ from its priors and the looks it saw):
            # the verdict it settled is the one reported (read with σ from every later look,
            # a stop made at the boundary would often read otherwise)
            stop = json.loads(stopped)
            low, high = (float(np.exp(stop["mean_log"] + sign * stop["half_log"]))
                         for sign in (-1, 1))
            se = stop["sigma"] / np.sqrt(stop["repeats"])
            df = np.inf if stop["df"] is None else stop["df"]
            row = {**row, "df": min(df, 1e6), "se": se,
                   "mde": minimum_detectable(se, min(df, 1e6)),
                   "covers": f"{row['covers']}; the interval the adaptive rule stopped on "
                             f"({stop['reason']}: σ {stop['sigma']:.3g} a look, from its "
                             "priors and the looks it saw)"}
        if not row["df"] >= MIN_INTERVAL_DF:  # a t interval on 1 df spans 1/50 to 50 times
            low = high = np.nan
        # the estimate the interval is around: the geometric mean of its runs
        points.loc[at, ["speedup_mean", "speedup_ci_low", "speedup_ci_high", "speedup_df",
                        "speedup_se", "speedup_mde", "speedup_repeat_sd", "speedup_shared_sd",
                        "speedup_instance_sd"]] = [
            np.exp(row["center"]), low, high, row["df"], row["se"], row["mde"],
            np.sqrt(row["repeat_var"]), np.sqrt(row["shared_var"]),
            np.sqrt(row["instance_var"]) if row["instance_from"] else np.nan]
        points.loc[at, "speedup_instance_from"] = row["instance_from"]
        parts = [points.loc[at, "interval_covers"]]
        if factor != 1.0:
            parts.append(f"sequential (adaptive stopping: the interval {factor:.2f}x wider)")
        points.loc[at, "interval_covers"] = "; ".join(p for p in [*parts, row["covers"]] if p)
    return points
