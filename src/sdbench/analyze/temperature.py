"""Speculation under sampling: acceptance and speedup by temperature, and the known answer an
exact draft gives when it samples.

A workload swept over temperatures (`workloads.<name>.temperatures`) is one workload per
temperature, `<name>-t<T>` (`plan.config.expand_temperatures`), each speculative cell paired
with the baseline at its own temperature. `by_temperature` lines the points of one setting up
across the temperatures of one workload.

The known answer (vLLM's rejection sampler, `vllm/v1/sample/rejection_sampler.py`): a draft
token x drawn from the draft's distribution q is accepted with probability min(1, p(x)/q(x)),
p the target's. A draft that equals its target and samples its tokens from its own
distribution (`draft_sample_method: probabilistic`) has q = p: every draft token is accepted
at any temperature, as at temperature 0. A draft that proposes its argmax token
(`draft_sample_method: greedy`, vLLM's default) is taken as one-hot, q(x) = 1: its token is
accepted with the target's probability of it, below 1 whenever the target samples, so its
acceptance falls with temperature even when it is exact. `exact_draft_check` states both for
every draft-model point above temperature 0 whose draft is exact at temperature 0 (the
calibration pair: its acceptance length there is at least `EXACT_SHARE` of the k + 1 an exact
draft reaches, a request's last step aside) and checks the first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sdbench.analyze.step_model import PAIR_AGREEMENT
from sdbench.plan.config import temperature_name

GREEDY, PROBABILISTIC = "greedy", "probabilistic"  # vLLM's draft_sample_method values
# an exact draft's acceptance length is k + 1 but for each request's last step (which drafts
# past the output's end): 5.6 of 6 with 24-token outputs, 4.9 of 5 with 128
EXACT_SHARE = 0.9
# the setting a point belongs to, but for its temperature
SAME_SETTING = ["round", "setting", "engine", "target", "speculator", "method", "k", "draft",
                "base_workload", "concurrency"]


def base_workload(name: str, temperature) -> str:
    """The swept workload a temperature variant comes from (`<name>-t<T>` -> `<name>`)."""
    if temperature is None or pd.isna(temperature):
        return name
    suffix = temperature_name("", float(temperature), None)  # the sweep's own naming
    return name[:-len(suffix)] if name.endswith(suffix) else name


def with_temperature(points: pd.DataFrame) -> pd.DataFrame:
    """Closed-loop served points with their temperature (0 where the summary predates the
    column) and `base_workload`; empty where no workload was measured at two temperatures."""
    if points.empty or "temperature" not in points:
        return pd.DataFrame()
    part = points[(points["engine"] == "serve") & (points["load"] == "concurrency")].copy()
    if part.empty:
        return part
    part["temperature"] = part["temperature"].astype(float).fillna(0.0)
    part["base_workload"] = [base_workload(w, t) for w, t in zip(
        part["workload"], part["temperature"], strict=True)]
    swept = part.groupby(["round", "base_workload"])["temperature"].transform("nunique") > 1
    return part[swept]


def by_temperature(points: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative point of a workload measured at several temperatures: its
    setting (`SAME_SETTING`), temperature, draft sampling, acceptance length (mean over
    repeats, 95 % interval), pooled acceptance rate, drafts, and paired speedup with its
    interval and verdict. Sorted so that one setting's temperatures follow each other."""
    part = with_temperature(points)
    if part.empty:
        return part
    spec = part[part["method"] != "vanilla"].copy()
    if spec.empty:
        return spec
    spec["draft_sampling"] = np.where(
        spec["draft"].notna(), spec["draft_sample_method"].fillna(GREEDY)
        if "draft_sample_method" in spec else GREEDY, "–")
    # accepted ÷ drafted tokens (%), pooled over the point's repeats
    spec["acceptance_rate_pooled"] = 100 * spec.get(
        "acceptance_pooled", pd.Series(np.nan, index=spec.index)).astype(float)
    keep = [*SAME_SETTING, "temperature", "draft_sampling", "role", "workload",
            "spec_decode_acceptance_length_mean", "spec_decode_acceptance_length_ci_low",
            "spec_decode_acceptance_length_ci_high", "acceptance_interval_from",
            "acceptance_rate_pooled", "drafts",
            "repeats_ok", "speedup_mean", "speedup_ci_low", "speedup_ci_high", "verdict",
            "output_drift_mean", "drift_flag"]
    spec = spec[[c for c in keep if c in spec]]
    return spec.sort_values([*SAME_SETTING, "temperature"], kind="stable",
                            na_position="first").reset_index(drop=True)


EXACT_KEYS = ["round", "setting", "target", "draft", "k", "base_workload", "concurrency"]


def exact_draft_check(points: pd.DataFrame) -> pd.DataFrame:
    """Per draft-model point above temperature 0 whose draft is exact at temperature 0 (same
    target, draft, k, workload, concurrency and setting; acceptance length at least
    EXACT_SHARE of k + 1): its acceptance length against that greedy level, and what vLLM's
    rejection sampler implies. A probabilistic draft must keep the greedy level: the check
    holds when the greedy level lies in its 95 % interval over repeats or it still accepts
    at least PAIR_AGREEMENT % of its drafted tokens, or reaches the greedy level's share of
    k + 1 (a request's last step drafts past its end, which moves the length a little with
    the output lengths sampling gives). A greedy draft's acceptance falls: shown, not
    checked (how far depends on the target's entropy)."""
    rows = by_temperature(points)
    if rows.empty:
        return pd.DataFrame()
    rows = rows[rows["method"] == "draft_model"]
    greedy_level = rows[(rows["temperature"] == 0) & (
        rows["spec_decode_acceptance_length_mean"] >= EXACT_SHARE * (rows["k"] + 1))]
    out = []
    for _, row in rows[rows["temperature"] > 0].iterrows():
        ref = greedy_level[(greedy_level[EXACT_KEYS] == row[EXACT_KEYS]).all(axis=1)]
        if ref.empty:
            continue
        level = float(ref["spec_decode_acceptance_length_mean"].mean())
        mean = row["spec_decode_acceptance_length_mean"]
        low, high = (row["spec_decode_acceptance_length_ci_low"],
                     row["spec_decode_acceptance_length_ci_high"])
        rate = row["acceptance_rate_pooled"]
        if row["draft_sampling"] == PROBABILISTIC:
            expected = "unchanged: every token of an exact draft is accepted"
            covered = pd.notna(low) and low <= level <= high
            holds = bool(covered or (pd.notna(rate) and rate >= PAIR_AGREEMENT)
                         or (pd.notna(mean) and mean >= level - (1 - EXACT_SHARE)))
            reading = ("holds" if holds else
                       f"fails: {mean:.2f} against {level:.2f} at temperature 0 (the engine's "
                       "rejection sampling does not accept an exact draft's sampled tokens)")
        else:
            expected = "lower: accepted with the target's probability of the argmax token"
            holds = None
            reading = ("lower, as expected" if pd.notna(mean) and mean < level
                       else "not lower (shown, not checked)")
        out.append({**{k: row[k] for k in EXACT_KEYS}, "speculator": row["speculator"],
                    "temperature": row["temperature"], "draft_sampling": row["draft_sampling"],
                    "greedy_level": level, "acceptance_length": mean,
                    "acceptance_ci_low": low, "acceptance_ci_high": high,
                    "acceptance_rate_pooled": rate, "repeats_ok": row.get("repeats_ok"),
                    "drafts": row.get("drafts"), "expected": expected, "holds": holds,
                    "reading": reading})
    return pd.DataFrame(out)
