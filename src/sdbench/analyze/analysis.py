"""What the numbers say to configure: crossover concurrency, best settings, the gain of switching
proposers with load, and a derived batch-size schedule for speculative tokens.

The analyses take the per-measurement table (`aggregate.summarize`: one speedup per repeat,
paired with its baseline's repeat), because an honest estimate needs the repeats: a verdict
comes from an interval ("no clear gain" is an answer), choosing the best of many settings is
evaluated on repeats the choice did not see, speculation off is always a candidate, and levels
measured without a speedup are listed. `derive_schedule` takes the per-point table.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sdbench.analyze.stats import mean_interval, verdict

SETTING = ["target", "workload", "speculator", "k"]
OFF = "off"  # no speculation: a candidate everywhere, its speedup is 1 by definition
BOOTSTRAP = 2000
def speculative(frame: pd.DataFrame) -> pd.DataFrame:
    """Speculative rows with a speedup: per-measurement rows (`paired`) or per-point rows
    (`speedup_mean`)."""
    has = frame["paired"] if "paired" in frame else frame["speedup_mean"].notna()
    return frame[(frame["method"] != "vanilla") & has]


def _cube(group: pd.DataFrame) -> pd.DataFrame:
    """Per-repeat speedups: rows "<speculator> k=<k>", columns (concurrency, repeat), with
    "off" (speculation off: 1.0 at every level and repeat) as a candidate. Only the repeats
    every setting has (a method's `repeats` may differ): settings are chosen and judged on the
    same repeats."""
    table = group.assign(setting_label=[f"{s} k={int(k)}" for s, k in zip(
        group["speculator"], group["k"], strict=True)]).pivot_table(
        index="setting_label", columns=["concurrency", "repeat"], values="speedup",
        aggfunc="mean")
    has = table.notna().T.groupby(level="repeat").any().T  # setting x repeat
    common = has.columns[has.all(axis=0)]
    table = table.loc[:, table.columns.get_level_values("repeat").isin(common)]
    table.loc[OFF] = 1.0
    return table


def _missing_levels(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, list[int]]:
    """keys -> the concurrency levels measured (a speculative record exists) where no speedup
    could be computed (failed or invalid points, a missing or incomparable baseline)."""
    spec = frame[frame["method"] != "vanilla"]
    out: dict[tuple, list[int]] = {}
    for key, group in spec.groupby(keys, dropna=False):
        have = group.groupby("concurrency")["paired"].any()
        out[key] = sorted(
            int(c) for c, ok in have.items() if not ok)
    return out


def _geo(values: np.ndarray) -> float:
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.exp(np.log(np.clip(values, 1e-9, None)).mean())) if len(values) else np.nan


def _crossing(levels: list[int], values: list[float]) -> float | None:
    """The concurrency where `values` first falls below 1, interpolated in log2(concurrency);
    None if it never does; the lowest level if it is below 1 from the start."""
    for i, (level, value) in enumerate(zip(levels, values, strict=True)):
        if np.isnan(value) or value >= 1:
            continue
        if i == 0:
            return float(level)
        prev_level, prev = levels[i - 1], values[i - 1]
        if np.isnan(prev):
            return float(level)
        x0, x1 = math.log2(prev_level), math.log2(level)
        return float(2 ** (x0 + (prev - 1) / (prev - value) * (x1 - x0)))
    return None


def crossover(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per target/workload/method/k (from per-measurement rows): the concurrency where the mean
    speedup falls below 1, and a 95 % bootstrap interval for it (repeats resampled with
    replacement, whole repeats across levels; a resample that never falls below 1 counts as
    beyond the highest level). Levels measured without a speedup are listed, never dropped
    silently."""
    rows = []
    missing = _missing_levels(frame, SETTING)
    rng = np.random.default_rng(seed)
    for key, group in speculative(frame).groupby(SETTING, dropna=False):
        table = group.pivot_table(index="repeat", columns="concurrency", values="speedup")
        levels = [int(c) for c in table.columns]
        cross = _crossing(levels, table.mean(axis=0).tolist())
        values = table.to_numpy(dtype=float)
        low = high = None
        if len(values) > 1:
            picks = rng.integers(0, len(values), size=(BOOTSTRAP, len(values)))
            found = [_crossing(levels, np.nanmean(values[p], axis=0).tolist()) for p in picks]
            beyond = float(levels[-1]) * 2  # sorts above every measured level
            sample = np.array([beyond if c is None else c for c in found])
            low, high = (float(np.percentile(sample, q)) for q in (2.5, 97.5))
            low, high = (None if v >= beyond else v for v in (low, high))
        rows.append({**dict(zip(SETTING, key, strict=True)), "crossover": cross,
                     "crossover_low": low, "crossover_high": high,
                     "interval": (f"bootstrap over {len(values)} repeats" if len(values) > 1
                                  else "none (one repeat)"),
                     "levels": f"{levels[0]}–{levels[-1]}",
                     "missing_levels": ", ".join(map(str, missing.get(key, []))) or None,
                     "reading": ("above 1 at every level measured" if cross is None else
                                 "below 1 from the lowest level" if cross == levels[0] else
                                 f"falls below 1 near concurrency {cross:.1f}")})
    return pd.DataFrame(rows)


def _held_out(cube: pd.DataFrame, level) -> tuple[str, list[float]]:
    """(the setting with the best mean speedup over all repeats at `level`, the speedup of the
    setting chosen on the other repeats, evaluated on each held-out repeat)."""
    at = cube.xs(level, axis=1, level="concurrency")
    choice = at.mean(axis=1).idxmax()
    held = []
    if at.shape[1] > 1:
        for r in at.columns:
            pick = at.drop(columns=r).mean(axis=1).idxmax()
            held.append(float(at.loc[pick, r]))
    return choice, held


def best_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Per target, workload and concurrency: the setting with the best mean speedup over the
    repeats, speculation off (1.0) a candidate, and an estimate of it free of selection bias:
    the setting chosen on all repeats but one, evaluated on the held-out repeat (each in turn),
    with a 95 % interval; the verdict comes from that interval. With one repeat there is no
    held-out estimate and the verdict says so."""
    rows = []
    for (target, workload), group in speculative(frame).groupby(["target", "workload"]):
        cube = _cube(group)
        for level in sorted(cube.columns.get_level_values("concurrency").unique()):
            label, held = _held_out(cube, level)
            speculator, _, k = label.partition(" k=")
            chosen = cube.loc[label].xs(level, level="concurrency").to_numpy()
            mean, _, low, high = mean_interval(chosen.astype(float))
            h_mean, _, h_low, h_high = mean_interval(np.array(held, dtype=float))
            rows.append({"target": target, "workload": workload, "concurrency": int(level),
                         "speculator": speculator, "k": int(k) if k else None,
                         "speedup_mean": mean, "speedup_ci_low": low, "speedup_ci_high": high,
                         "heldout_mean": h_mean, "heldout_ci_low": h_low,
                         "heldout_ci_high": h_high, "repeats": int(len(chosen)),
                         "verdict": ("no speculation" if label == OFF
                                     else verdict(h_low, h_high))})
    return pd.DataFrame(rows)


def _choose(cube: pd.DataFrame, repeats: list) -> tuple[str, dict]:
    """On these repeats: (the best static setting by geometric mean over levels, level -> the
    best setting there)."""
    part = cube.loc[:, cube.columns.get_level_values("repeat").isin(repeats)]
    means = part.T.groupby(level="concurrency").mean().T  # setting x level
    return means.apply(_geo, axis=1).idxmax(), means.idxmax(axis=0).to_dict()


def _evaluate(cube: pd.DataFrame, static: str, switch: dict, repeat) -> tuple[float, float]:
    """(geometric-mean speedup of the static choice, of the per-level choices) on one repeat."""
    at = cube.xs(repeat, axis=1, level="repeat")
    return (_geo(at.loc[static].to_numpy()),
            _geo([at.loc[switch[c], c] for c in at.columns]))


def switch_gain(frame: pd.DataFrame) -> pd.DataFrame:
    """Per target and workload: the best single static setting (highest geometric-mean speedup
    over the levels every setting has) against a per-load switch (the best setting at each
    level), speculation off a candidate in both. Choosing the best of many noisy settings
    inflates a gain, so both choices are made on all repeats but one and evaluated on the
    held-out repeat, each in turn: `gain` is the mean held-out advantage of switching, with a
    95 % interval (none with one repeat: then the in-sample gain, biased upward)."""
    rows = []
    missing = _missing_levels(frame, ["target", "workload"])
    for (target, workload), group in speculative(frame).groupby(["target", "workload"]):
        cube = _cube(group)
        complete = [c for c in cube.columns.get_level_values("concurrency").unique()
                    if not cube.xs(c, axis=1, level="concurrency").isna().all(axis=1).any()]
        if not complete:
            continue
        cube = cube.loc[:, cube.columns.get_level_values("concurrency").isin(complete)]
        repeats = sorted(cube.columns.get_level_values("repeat").unique())
        static, switch = _choose(cube, repeats)
        if len(repeats) > 1:
            held = [_evaluate(cube, *_choose(cube, [r for r in repeats if r != out]), out)
                    for out in repeats]
            evaluation = f"held out: each of {len(repeats)} repeats in turn"
        else:
            held = [_evaluate(cube, static, switch, repeats[0])]
            evaluation = "in-sample (one repeat): biased upward"
        statics, switches = np.array(held).T
        gain, _, low, high = mean_interval(switches / statics - 1)
        rows.append({"target": target, "workload": workload,
                     "static_best": static, "static_speedup": float(statics.mean()),
                     "switch_speedup": float(switches.mean()), "gain": gain,
                     "gain_ci_low": low, "gain_ci_high": high, "evaluation": evaluation,
                     "switch_choice": ", ".join(f"c={int(c)}: {s}"
                                                for c, s in sorted(switch.items())),
                     "levels": len(complete),
                     "missing_levels": ", ".join(map(str, missing.get((target, workload),
                                                                      []))) or None})
    return pd.DataFrame(rows)


def dynamic_k_comparison(frame: pd.DataFrame, derived_setting: str) -> pd.DataFrame:
    """Each dynamic-K cell against the single best static k of its method (highest
    geometric-mean speedup over the levels both have, round 1), paired by level and repeat:
    the throughput ratio dynamic ÷ static (their speedup ratio: both are over the same
    baseline measurement) per level with a 95 % interval over repeats, and over all levels
    (geometric mean per repeat). The static k is chosen on the data it is judged by, which
    favours it."""
    derived = speculative(frame[frame["setting"] == derived_setting])
    rows = []
    for (target, workload, speculator), cell in derived.groupby(
            ["target", "workload", "speculator"]):
        method = speculator.removesuffix("+dynamic-k")
        static = speculative(frame[(frame["round"] == "round1") & (frame["target"] == target)
                                   & (frame["workload"] == workload)
                                   & (frame["speculator"] == method)])
        mine = cell.pivot_table(index="repeat", columns="concurrency", values="speedup")
        base = {"target": target, "workload": workload, "method": method}
        if static.empty:
            rows.append({**base, "concurrency": "all", "best static k": None,
                         "ratio_mean": np.nan, "ratio_ci_low": np.nan,
                         "ratio_ci_high": np.nan, "verdict": "no static k measured"})
            continue
        levels = [c for c in mine.columns if c in set(static["concurrency"])]
        by_k = static.pivot_table(index="k", columns="concurrency", values="speedup")[levels]
        best_k = int(by_k.apply(_geo, axis=1).idxmax())
        theirs = static[static["k"] == best_k].pivot_table(index="repeat", columns="concurrency",
                                                           values="speedup")
        ratio = (mine[levels] / theirs.reindex(columns=levels)).dropna(how="all")
        for level in levels + ["all"]:
            values = (ratio[level] if level != "all"
                      else ratio.apply(_geo, axis=1)).to_numpy(dtype=float)
            mean, _, low, high = mean_interval(values)
            rows.append({**base, "concurrency": level, "best static k": best_k,
                         "ratio_mean": mean, "ratio_ci_low": low, "ratio_ci_high": high,
                         "repeats": int(np.sum(~np.isnan(values))),
                         "verdict": {"speculate": "dynamic K faster",
                                     "no speculation": "static k faster"}.get(
                                         verdict(low, high), verdict(low, high))})
    return pd.DataFrame(rows)


def derive_schedule(points: pd.DataFrame, target: str, workload: str,
                    speculator: str) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size for one method: at each measured
    concurrency (taken as the batch size) the k with the best mean speedup, 0 (no speculation)
    where no k beats 1. Ranges are inclusive and start at 1; vLLM carries the last one forward
    to larger batches."""
    spec = speculative(points)
    if "load" in spec:  # batch sizes are concurrency levels: closed-loop points only
        spec = spec[spec["load"] == "concurrency"]
    part = spec[(spec["target"] == target) & (spec["workload"] == workload)
                & (spec["speculator"] == speculator)]
    if part.empty:
        raise ValueError(f"no measured speedups for {speculator!r} on target {target!r}, "
                         f"workload {workload!r}: nothing to derive a schedule from")
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


PREDICTION_TOLERANCE = 0.2  # a measured speedup further than this share from its prediction
PAIR_AGREEMENT = 95.0  # % of drafted tokens a calibration pair (exact draft) should accept


def _step_time(levels: np.ndarray, times: np.ndarray, batch: float) -> tuple[float, str]:
    """A no-speculation step time at `batch` sequences from the times measured at `levels`
    (mean TPOT at each concurrency): measured there, else interpolated linearly in
    log(batch)-log(time) between the neighbouring levels, or extrapolated from the last two
    (the report says which)."""
    order = np.argsort(levels)
    levels, times = levels[order], times[order]
    if batch in levels:
        return float(times[levels == batch][0]), "measured"
    if len(levels) < 2:
        return np.nan, "one level measured"
    x, y = np.log(levels), np.log(times)
    if batch < levels[0] or batch > levels[-1]:
        i = [0, 1] if batch < levels[0] else [-2, -1]
        slope = (y[i[1]] - y[i[0]]) / (x[i[1]] - x[i[0]])
        return float(np.exp(y[i[1]] + slope * (math.log(batch) - x[i[1]]))), "extrapolated"
    return float(np.exp(np.interp(math.log(batch), x, y))), "interpolated"


def predicted_speedups(points: pd.DataFrame) -> pd.DataFrame:
    """Draft-model speedups predicted from measured quantities, against the measured ones: for
    each draft-model point whose draft was also measured as a target without speculation (same
    round, workload and setting; the calibration pair), a speculation round at concurrency c
    costs k draft steps and one target pass over k+1 tokens per sequence and yields τ tokens
    (the mean acceptance length), so

        predicted = τ · t_T(c) / (k · t_D(c) + t_V(c)),   t_V(c) ≈ t_T(c · (k+1)),

    with t_T and t_D the target's and the draft's mean TPOT without speculation at that
    concurrency (their own vanilla cells) and the verification pass taken as one target step
    over c·(k+1) sequences (interpolated or extrapolated in log-log over the target's measured
    levels). The prediction is compared with the measured TPOT speedup (decode only, as the
    model is): `ratio` = measured ÷ predicted, its interval the measured one's (the variance
    over repeats of the speculative and vanilla points; the prediction's own inputs are
    means)."""
    need = {"mean_tpot_ms_mean", "spec_decode_acceptance_length_mean", "tpot_speedup_mean"}
    if points.empty or not need <= set(points):
        return pd.DataFrame()
    closed = points[(points["engine"] == "serve") & (points["load"] == "concurrency")]
    vanilla = closed[closed["method"] == "vanilla"]
    keys = ["round", "workload", "setting"]
    rows = []
    for _, row in closed[(closed["method"] == "draft_model")
                         & closed["tpot_speedup_mean"].notna()].iterrows():
        same = vanilla[(vanilla[keys] == row[keys]).all(axis=1)]
        target, draft = (same[same["target"] == name] for name in (row["target"], row["draft"]))
        if target.empty or draft.empty:
            continue
        c, k = int(row["concurrency"]), int(row["k"])
        t_target, t_draft = (part.set_index("concurrency")["mean_tpot_ms_mean"].get(c)
                             for part in (target, draft))
        if t_target is None or t_draft is None:
            continue
        t_verify, how = _step_time(target["concurrency"].to_numpy(dtype=float),
                                   target["mean_tpot_ms_mean"].to_numpy(dtype=float), c * (k + 1))
        tau = float(row["spec_decode_acceptance_length_mean"])
        predicted = tau * t_target / (k * t_draft + t_verify)
        measured = float(row["tpot_speedup_mean"])
        ratio = measured / predicted
        accepted = float(row.get("spec_decode_acceptance_rate_mean", np.nan))
        reading = ("as predicted" if abs(ratio - 1) <= PREDICTION_TOLERANCE else
                   f"measured {abs(ratio - 1):.0%} {'above' if ratio > 1 else 'below'} "
                   "the prediction")
        if accepted < PAIR_AGREEMENT:
            reading += (f"; acceptance {accepted:.1f} % < {PAIR_AGREEMENT:.0f} %: not an exact "
                        "draft for this target")
        rows.append({
            "round": row["round"], "setting": row["setting"], "target": row["target"],
            "draft": row["draft"], "workload": row["workload"], "k": k, "concurrency": c,
            "acceptance_length": tau, "acceptance_rate": accepted,
            "target_step_ms": t_target, "draft_step_ms": t_draft,
            "verify_ms": t_verify, "verify_from": f"target at c={c * (k + 1)} ({how})",
            "predicted": predicted, "measured": measured,
            "measured_ci_low": row.get("tpot_speedup_ci_low"),
            "measured_ci_high": row.get("tpot_speedup_ci_high"),
            "output_speedup": row.get("speedup_mean"), "ratio": ratio,
            "ratio_ci_low": row.get("tpot_speedup_ci_low", np.nan) / predicted,
            "ratio_ci_high": row.get("tpot_speedup_ci_high", np.nan) / predicted,
            "reading": reading})
    return pd.DataFrame(rows)
