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
from scipy import optimize, special, stats

from sdbench.analyze.acceptance import simulated_lengths
from sdbench.analyze.noise import covariance, dof_text, point_noise
from sdbench.analyze.stats import (
    CONFIDENCE,
    MIN_INTERVAL_DF,
    level_text,
    ratio_interval,
    verdict,
)

SETTING = ["target", "workload", "speculator", "k"]
OFF = "off"  # no speculation: a candidate everywhere, its speedup is 1 by definition
BOOTSTRAP = 2000
def speculative(frame: pd.DataFrame) -> pd.DataFrame:
    """Speculative rows with a speedup: per-measurement rows (`paired`) or per-point rows
    (`speedup_mean`)."""
    has = frame["paired"] if "paired" in frame else frame["speedup_mean"].notna()
    return frame[(frame["method"] != "vanilla") & has]


def deployable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of cells whose drafts were accepted by comparison, not at a set rate: the
    candidates of a decision (a simulated cell says what a method would give at an acceptance
    it may not have)."""
    return frame[simulated_lengths(frame).isna()]


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


def crossing(levels: list[int], logs: np.ndarray) -> float | None:
    """The concurrency where the log speedup first falls below 0 (the speedup below 1),
    interpolated linearly in log2(concurrency); None if it never does; the lowest level if it
    is below from the start."""
    for i, (level, value) in enumerate(zip(levels, logs, strict=True)):
        if np.isnan(value) or value >= 0:
            continue
        if i == 0 or np.isnan(logs[i - 1]):
            return float(level)
        x0, x1 = math.log2(levels[i - 1]), math.log2(level)
        return float(2 ** (x0 + logs[i - 1] / (logs[i - 1] - value) * (x1 - x0)))
    return None


GRID = 200  # points per interval between two levels where the crossover's test is made


def _crossover_set(levels: list[int], logs: np.ndarray, cov: np.ndarray,
                   dfs: np.ndarray) -> tuple[float | None, float | None, str]:
    """The 95 % confidence set of the concurrency where the speedup first falls below 1, by
    inverting the test of "the speedup is 1 here" at every concurrency x (between two measured
    levels, the log speedup interpolated in log2 x, its variance from the levels' covariance):
    the first crossing lies at an x whose interval includes 1, and before the first x whose
    interval lies below 1. (low, high, how it reads): high None when no x is clearly below 1
    (the speedup may stay above 1 beyond the levels measured); low = high = the lowest level
    when it is clearly below 1 there."""
    xs, lines, halves = [], [], []
    w = np.linspace(0, 1, GRID + 1) if len(levels) > 1 else np.zeros(1)
    for i in range(max(1, len(levels) - 1)):
        j = min(i + 1, len(levels) - 1)
        a, b = (1 - w) ** 2 * cov[i, i], w ** 2 * cov[j, j]
        # the interpolation's degrees of freedom: Welch-Satterthwaite over its two parts
        with np.errstate(divide="ignore", invalid="ignore"):
            df = (a + b) ** 2 / (a ** 2 / dfs[i] + b ** 2 / dfs[j])
        t = np.where(df > 0, stats.t.ppf(0.975, np.where(df > 0, df, 1)), np.inf)
        xs.append(np.log2(levels[i]) + w * (np.log2(levels[j]) - np.log2(levels[i])))
        lines.append((1 - w) * logs[i] + w * logs[j])
        halves.append(t * np.sqrt(a + b + 2 * w * (1 - w) * cov[i, j]))
    x, line, half = (np.concatenate(v) for v in (xs, lines, halves))
    below = np.flatnonzero(line + half < 0)
    end = below[0] if len(below) else len(x)  # the first crossing comes before this
    plausible = np.flatnonzero(np.abs(line[:end]) <= half[:end])
    if end == 0:
        return float(levels[0]), float(levels[0]), "below 1 at the lowest level"
    high = None if end == len(x) else float(2 ** x[end])
    if not len(plausible):  # clearly above 1 up to where it is clearly below
        return (float(levels[-1]), None, "above 1 at every level") if high is None else \
            (float(2 ** x[end - 1]), high, "test inverted")
    return float(2 ** x[plausible[0]]), high, "test inverted"


def _noise(spec: pd.DataFrame, noise: pd.DataFrame | None) -> pd.DataFrame:
    """The pooled noise model's points at concurrency levels (given, or from `spec`)."""
    noise = point_noise(spec) if noise is None else noise
    return noise[noise["request_rate"].isna()] if not noise.empty else noise


def _crossover_reading(levels: list[int], cross: float | None, high: float | None) -> str:
    """What a crossover row says: a crossing of the means is claimed only where some
    concurrency is clearly below 1 (`high`, the confidence set's end, exists)."""
    if cross is None:
        return "above 1 at every level measured"
    where = ("from the lowest level" if cross == levels[0]
             else f"near concurrency {level_text(cross)}")
    if high is None:
        return (f"no clear crossover: the mean falls below 1 {where}, but no level is clearly "
                "below 1")
    return f"below 1 {where}" if cross == levels[0] else f"falls below 1 {where}"


def crossover(frame: pd.DataFrame, noise: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per target/workload/method/k (from per-measurement rows): the concurrency where the
    speedup (the geometric mean of each level's units, `noise.point_noise`) falls below 1,
    interpolated in log2(concurrency), and its 95 % confidence set from the pooled noise model:
    the concurrencies where the interpolated speedup's interval includes 1, with the levels'
    correlation (one server instance measures them all) pooled over the cells of the run.
    `crossover_high` None: the set reaches the highest level (the crossover may lie beyond);
    then a crossing of the means is not `established` and the reading says so. Levels measured
    without a speedup are listed, never dropped silently."""
    rows = []
    missing = _missing_levels(frame, SETTING)
    spec = speculative(frame)
    noise = _noise(spec, noise)
    for key, group in spec.groupby(SETTING, dropna=False):
        points = noise[noise["cell_id"].isin(group["cell_id"].unique())].sort_values(
            "concurrency")
        if points.empty or points["concurrency"].duplicated().any():
            continue
        levels = [int(c) for c in points["concurrency"]]
        logs = points["center"].to_numpy(float)
        cross = crossing(levels, logs)
        low, high, how = _crossover_set(levels, logs, covariance(points),
                                        points["df"].to_numpy(float))
        rows.append({**dict(zip(SETTING, key, strict=True)), "crossover": cross,
                     "crossover_low": low, "crossover_high": high,
                     "interval": (f"pooled noise model ({how})" if np.isfinite(
                         points["df"]).all() and (points["df"] > 0).all()
                         else "none (no spread measured)"),
                     "levels": f"{levels[0]}–{levels[-1]}",
                     "missing_levels": ", ".join(map(str, missing.get(key, []))) or None,
                     "established": cross is not None and high is not None,
                     "reading": _crossover_reading(levels, cross, high)})
    return pd.DataFrame(rows)


def _held_out(cube: pd.DataFrame, level) -> tuple[str, list[float], list[str]]:
    """(the setting with the best mean speedup over all repeats at `level`, the speedup of the
    setting chosen on the other repeats evaluated on each held-out repeat, and those settings:
    one per held-out repeat). A repeat the chosen setting did not measure at `level` (the
    adaptive rule stopped it there before that repeat while others went on) holds out nothing:
    the fold is left out, and so is its pick. Whether a setting measured it depends on its
    earlier repeats only, so each value left is still a fresh repeat of its pick."""
    at = cube.xs(level, axis=1, level="concurrency")
    choice = at.mean(axis=1).idxmax()
    held, picks = [], []
    if at.shape[1] > 1:
        for r in at.columns:
            pick = at.drop(columns=r).mean(axis=1).idxmax()
            if pd.notna(at.loc[pick, r]):
                held.append(float(at.loc[pick, r]))
                picks.append(pick)
    return choice, held, picks


# what a held-out estimate's interval rests on (`held_out_interval`)
HELD_OUT = "held out"
HELD_OUT_POOLED = "held out, σ from the pooled noise model"


def points_at(points: pd.DataFrame | None, target: str, workload: str, level) -> dict[str, dict]:
    """The point table's rows (`point_intervals.aggregate_points`) of the speculative vLLM-server
    points of one target and workload at one closed-loop level, by setting label ("<speculator>
    k=<k>", as `_cube` names them); a label with several rows (round 3's server settings under
    one speculator and k) is left out: which of them the cube's mean stands for is unknown."""
    if points is None or points.empty or "speedup_ci_low" not in points:
        return {}
    rows = points[(points["method"] != "vanilla") & (points["target"] == target)
                  & (points["workload"] == workload) & (points["concurrency"] == level)
                  & points["k"].notna()]
    if "engine" in rows:
        rows = rows[(rows["engine"] == "serve") & (rows["load"] == "concurrency")]
    labels = [f"{s} k={int(k)}" for s, k in zip(rows["speculator"], rows["k"], strict=True)]
    counts = pd.Series(labels, dtype=object).value_counts()
    return {label: row for label, row in zip(labels, rows.to_dict("records"), strict=True)
            if counts[label] == 1}


def held_out_interval(held: list[float], picks: list[str],
                      found: dict[str, dict]) -> tuple[float, float, float, str]:
    """(geometric mean, low, high, what the interval rests on) of held-out speedups (`held`,
    of the settings `picks` chosen on the other repeats; `found`: the level's point-table rows,
    `points_at`). Each held-out speedup is one repeat of its pick, not seen by the choice, so
    its noise is one repeat's, and the repeats held out of one pick share what its runs share
    (a server start that measured them all): where the point table gives every pick's (the
    noise model's `speedup_repeat_sd`, one run's σ, and `speedup_shared_sd`, what its runs
    share beyond independent runs) the interval is the mean's ± t at the fewest degrees of
    freedom among them × the mean's σ, widened by the largest sequential factor of an adaptive
    stop among them (as their own intervals are); else the Student t
    interval over the held-out values alone, whose n − 1 degrees of freedom (t 12.7 at two
    repeats, 4.3 at three) tell little from few repeats. Speculation off (`OFF`) is 1
    without noise."""
    rows = [found.get(pick) or {} for pick in picks if pick != OFF]
    if not rows or any(pd.isna(row.get("speedup_repeat_sd")) or pd.isna(row.get("speedup_df"))
                       or row["speedup_df"] <= 0 for row in rows):
        # a pick without one repeat's σ, or off in every fold (1, exactly)
        return (*ratio_interval(np.array(held, dtype=float)), HELD_OUT)
    dfs = [float(row["speedup_df"]) for row in rows]
    factors = [1.0] + [1.0 if pd.isna(f := row.get("sequential_factor", 1.0)) else float(f)
                       for row in rows]
    logs = np.log(np.array(held, dtype=float))
    mean = float(logs.mean())
    half = (float(stats.t.ppf(0.5 + CONFIDENCE / 2, max(min(dfs), 1.0))) * max(factors)
            * math.sqrt(_held_out_var(picks, found)))
    basis = HELD_OUT_POOLED + (", widened for adaptive stopping" if max(factors) > 1 else "")
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), basis


def _held_out_var(picks: list[str], found: dict[str, dict]) -> float:
    """The variance of the mean of held-out repeats, one per fold, of `picks`: each repeat one
    run's variance (`speedup_repeat_sd`²), two of one pick's repeats the covariance its runs
    share (a point's n runs whose mean has variance v, one run's r: (n v − r) ÷ (n − 1), from
    `speedup_shared_sd`² = v − r ÷ n); speculation off adds nothing."""
    total = 0.0
    counts: dict[str, int] = {}
    for pick in picks:
        counts[pick] = counts.get(pick, 0) + 1
    for pick, count in counts.items():
        if pick == OFF:
            continue
        row = found[pick]
        one = float(row["speedup_repeat_sd"]) ** 2
        shared = (0.0 if pd.isna(row.get("speedup_shared_sd")) else
                  float(row["speedup_shared_sd"]) ** 2)
        n = max(int(row.get("repeats_paired") or 2), 2)
        total += count * one + count * (count - 1) * n * shared / (n - 1)
    return total / len(picks) ** 2


def point_basis(row: dict) -> str:
    """What a point-table row's speedup interval is, in words (`aggregate`: the pooled noise
    model's; the repeated confidence interval where the adaptive rule stopped the point, valid
    at whatever look it stopped)."""
    factor = row.get("sequential_factor")
    if pd.notna(factor) and factor != 1.0:
        return "the point's interval, the adaptive rule's where it stopped"
    return "the point's interval, σ from the pooled noise model"


def judged(at: pd.DataFrame, found: dict[str, dict], choice: str, held: list[float],
           picks: list[str]) -> tuple[float, float, float, str | None]:
    """The chosen setting's speedup as a decision reads it: the held-out estimate
    (`held_out_interval`); with one repeat, none to hold out, the point's own interval where
    the choice is between one setting and speculation off (reading it against 1 is that
    choice) and the point table has it; else no interval (None: nothing to rest on)."""
    if held:
        return held_out_interval(held, picks, found)
    if choice != OFF and len(at.index) == 2 and choice in found:
        return (*own_interval(at, found, choice), point_basis(found[choice]))
    return np.nan, np.nan, np.nan, None


def own_interval(at: pd.DataFrame, found: dict[str, dict], label: str) -> tuple[float, float,
                                                                                 float]:
    """A candidate's speedup and interval at one level: the point table's where `found` has
    its point (`points_at`: the one the report's points table and figures show), else over its
    repeats in `at` (the level's slice of `_cube`); speculation off: 1."""
    if label == OFF:
        return 1.0, 1.0, 1.0
    if label in found:
        row = found[label]
        return (float(row["speedup_mean"]), float(row["speedup_ci_low"]),
                float(row["speedup_ci_high"]))
    return ratio_interval(at.loc[label].to_numpy(dtype=float))


def best_settings(frame: pd.DataFrame, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per target, workload and concurrency: the setting with the best mean speedup over the
    repeats, speculation off (1.0) a candidate, its speedup and interval (the point table's
    where `points` is given: `own_interval`), and an estimate of it free of selection bias:
    the setting chosen on all repeats but one, evaluated on the held-out repeat (each in turn),
    with a 95 % interval (`held_out_interval`: σ from the pooled noise model where the point
    table has it; `heldout_from` says which; `heldout_picks`: the setting chosen for each
    held-out repeat, in turn; `heldout_repeats`: how many, fewer than `repeats` where a pick
    had stopped before the repeat it would hold out, `_held_out`); the verdict comes from
    that interval. With one repeat there is no held-out estimate: one setting beside off is
    judged on its point's interval (`judged`), several have none and the verdict says so.
    Simulated cells are no candidates (`deployable`)."""
    rows = []
    for (target, workload), group in deployable(speculative(frame)).groupby(
            ["target", "workload"]):
        cube = _cube(group)
        for level in sorted(cube.columns.get_level_values("concurrency").unique()):
            label, held, picks = _held_out(cube, level)
            speculator, _, k = label.partition(" k=")
            at = cube.xs(level, axis=1, level="concurrency")
            found = points_at(points, target, workload, level)
            # geometric means and intervals on the log scale: a ratio's bound never reaches 0
            mean, low, high = own_interval(at, found, label)
            h_mean, h_low, h_high, basis = judged(at, found, label, held, picks)
            rows.append({"target": target, "workload": workload, "concurrency": int(level),
                         "speculator": speculator, "k": int(k) if k else None,
                         "speedup_mean": mean, "speedup_ci_low": low, "speedup_ci_high": high,
                         "heldout_mean": h_mean, "heldout_ci_low": h_low,
                         "heldout_ci_high": h_high, "heldout_from": basis,
                         "heldout_picks": ", ".join(picks) or None,
                         "repeats": int(at.shape[1]), "heldout_repeats": len(held),
                         "verdict": ("no speculation" if label == OFF
                                     else verdict(h_low, h_high))})
    return pd.DataFrame(rows)


def _choices(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """table: (draws, settings, levels) of log speedups -> per draw (the static setting with
    the best mean over levels, the best setting at each level)."""
    return table.mean(axis=2).argmax(axis=1), table.argmax(axis=1)


def _gain(table: np.ndarray, static: np.ndarray, switch: np.ndarray) -> np.ndarray:
    """Per draw: the mean log speedup over levels of the per-level choices less that of the
    static choice, both read from `table` (draws, settings, levels)."""
    draws = np.arange(table.shape[0])[:, None]
    levels = np.arange(table.shape[2])[None, :]
    return (table[draws, switch, levels].mean(axis=1)
            - table[np.arange(table.shape[0]), static].mean(axis=1))


def _log_mass(low: float, high: float) -> float:
    """log(Φ(high) − Φ(low)), accurate far in either tail."""
    if low > 0:  # both in the upper tail: through the survival function
        a, b = special.log_ndtr(-low), special.log_ndtr(-high)
    else:
        a, b = special.log_ndtr(high), special.log_ndtr(low)
    return a + np.log1p(-np.exp(min(b - a, 0.0))) if b < a else -np.inf


def _truncated_cdf(x: float, mean: float, sd: float, low: float, high: float) -> float:
    """The distribution function at x of a normal (mean, sd) truncated to [low, high]."""
    lo, hi, at = ((v - mean) / sd for v in (low, high, x))
    total = _log_mass(lo, hi)
    if not np.isfinite(total):  # all the mass beyond the truncation: a step at the end
        return float(at > (hi if lo > 0 else lo))
    return float(np.clip(np.exp(_log_mass(lo, at) - total), 0.0, 1.0))


def _selection(center: np.ndarray, static: int, switch: np.ndarray) -> np.ndarray:
    """The picks as linear constraints A y <= 0 on the measured log speedups y (settings x
    levels flattened, speculation off's row left out: it is 0 without error): the static pick
    has the best mean over levels, each level's pick the best value there."""
    settings, levels = center.shape
    unit = np.eye((settings - 1) * levels).reshape(settings - 1, levels, -1)
    row = np.vstack([unit, np.zeros((1, levels, unit.shape[2]))])  # off: no y
    rows = [row[s].mean(axis=0) - row[static].mean(axis=0) for s in range(settings)
            if s != static]
    rows += [row[s, c] - row[switch[c], c] for c in range(levels) for s in range(settings)
             if s != switch[c]]
    return np.array(rows)


BETA = 0.005  # the share of the error rate the hybrid interval spends on its outer bound


def _picked_gain(center: np.ndarray, static: int, switch: np.ndarray, cov: np.ndarray,
                 df: float) -> tuple[float, float, float]:
    """(log gain of the per-level picks `switch` over the static pick `static`, its 95 %
    interval) from the log speedups `center` (settings x levels, speculation off last; the
    picks `_choices` made on it) whose errors have covariance
    `cov` (settings but off, level by level within a setting) estimated with `df` degrees of
    freedom (the standard errors widened by the Student t factor).

    The picks are made on the same data, which makes the gain read on it optimistic. Given the
    picks (linear constraints on the data) the gain's estimate is a normal truncated to where
    other picks would have been made (Lee, Sun, Sun and Taylor 2016); that alone can give
    unbounded intervals, so the hybrid of Andrews, Kitagawa and McCloskey (2024, "Inference on
    winners") also truncates it to within the simultaneous bound of every gain the study could
    have picked (level 1 − BETA) and inverts the conditional test at (0.05 − BETA) ÷ (1 −
    BETA): coverage at least 95 %, a median-unbiased estimate, never wider than that bound."""
    settings, levels = center.shape
    eta = np.zeros((settings, levels))
    eta[switch, range(levels)] += 1 / levels
    eta[static] -= 1 / levels
    eta = eta[:-1].ravel()
    y = center[:-1].ravel()
    observed = float(eta @ y)
    var = float(eta @ cov @ eta)
    if not np.any(eta) or var <= 0:  # the same setting picked everywhere: no gain, exactly
        return observed, observed, observed
    if not (np.isfinite(df) and df > 0 and np.isfinite(var) and np.isfinite(cov).all()):
        return observed, np.nan, np.nan  # a point without a spread (one repeat measured)
    widen = stats.t.ppf(0.975, df) / stats.norm.ppf(0.975)
    sd = np.sqrt(var) * widen
    # the simultaneous bound: the largest error of any static-vs-switch gain, redrawn
    rng = np.random.default_rng(0)
    values, vectors = np.linalg.eigh(cov)
    errors = np.zeros((BOOTSTRAP, settings, levels))
    errors[:, :-1] = (rng.standard_normal((BOOTSTRAP, len(cov)))
                      @ (vectors * np.sqrt(np.clip(values, 0, None))).T * widen).reshape(
        BOOTSTRAP, settings - 1, levels)
    worst = np.maximum(errors.max(axis=1).mean(axis=1) - errors.mean(axis=2).min(axis=1),
                       errors.mean(axis=2).max(axis=1) - errors.min(axis=1).mean(axis=1))
    bound = float(np.quantile(worst, 1 - BETA))
    a = _selection(center, static, switch)
    direction = cov @ eta / var
    rest = y - direction * observed
    slope, room = a @ direction, -(a @ rest)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.max(room[slope < 0] / slope[slope < 0], initial=-np.inf)
        high = np.min(room[slope > 0] / slope[slope > 0], initial=np.inf)
    level = (0.05 - BETA) / (1 - BETA)

    def mean_at(share: float) -> float:
        """The gain whose truncated distribution puts `share` of its mass below `observed`."""
        def f(mean):
            return _truncated_cdf(observed, mean, sd, max(low, mean - bound),
                                  min(high, mean + bound)) - share
        lo, hi = observed - bound, observed + bound
        if f(lo) <= 0:
            return lo
        if f(hi) >= 0:
            return hi
        return float(optimize.brentq(f, lo, hi))

    return mean_at(0.5), mean_at(1 - level / 2), mean_at(level / 2)


def switch_gain(frame: pd.DataFrame, noise: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per target and workload: the best single static setting (highest geometric-mean speedup
    over the levels every setting has) against a per-load switch (the best setting at each
    level), speculation off a candidate in both, each point's speedup the geometric mean of its
    units (`noise.point_noise`). `gain` is what the switch the study picks gains over the
    static setting it picks. Picking the best of noisy settings makes the gain read on the same
    data too high; given the picks, its estimate and 95 % interval come from the pooled noise
    model (the points' standard errors and correlations: the cells at one level share a
    baseline, the levels of one cell its server instances) by `_picked_gain`."""
    rows = []
    missing = _missing_levels(frame, ["target", "workload"])
    spec = deployable(speculative(frame))
    noise = _noise(spec, noise)
    if noise.empty:
        return pd.DataFrame()
    label = {c: f"{s} k={int(k)}" for c, s, k in zip(spec["cell_id"], spec["speculator"],
                                                      spec["k"], strict=True)}
    for (target, workload), group in spec.groupby(["target", "workload"]):
        points = noise[noise["cell_id"].isin(group["cell_id"].unique())].assign(
            setting=lambda p: p["cell_id"].map(label))
        counts = points.groupby("concurrency")["setting"].nunique()
        complete = sorted(int(c) for c, n in counts.items()
                          if n == points["setting"].nunique())
        points = points[points["concurrency"].isin(complete)].sort_values(
            ["setting", "concurrency"])
        if points.empty or points.duplicated(["setting", "concurrency"]).any():
            continue
        settings = list(dict.fromkeys(points["setting"])) + [OFF]
        shape = (len(settings), len(complete))
        center = np.zeros(shape)
        center[:-1] = points["center"].to_numpy(float).reshape(shape[0] - 1, shape[1])
        static, switch = (c[0] for c in _choices(center[None]))
        df = float(points["df"].median())
        gain, low, high = _picked_gain(center, static, switch, covariance(points), df)
        evaluation = ("all repeats, given the picks (post-selection interval from the pooled "
                      f"noise model, {dof_text(df)})" if np.isfinite(low) else
                      "in-sample (no spread measured): biased upward")
        if all(i == static for i in switch):  # the same setting both ways: no comparison
            gain = low = high = np.nan
            evaluation = "the switch keeps the static setting at every level: nothing to gain"
        elif np.isfinite(low) and not df >= MIN_INTERVAL_DF:
            # too few degrees of freedom: the post-selection estimate and its interval run wild
            gain = float(center[switch, range(shape[1])].mean() - center[static].mean())
            low = high = np.nan
            evaluation = f"in-sample, {dof_text(df)}: too few for an interval (biased upward)"
        rows.append({"target": target, "workload": workload,
                     "static_best": settings[static],
                     "static_speedup": float(np.exp(center[static].mean())),
                     "switch_speedup": float(np.exp(center[switch, range(shape[1])].mean())),
                     "gain": float(np.expm1(gain)), "gain_ci_low": float(np.expm1(low)),
                     "gain_ci_high": float(np.expm1(high)),
                     "evaluation": evaluation,
                     "switch_choice": ", ".join(f"c={c}: {settings[i]}"
                                                for c, i in zip(complete, switch, strict=True)),
                     "levels": len(complete),
                     "missing_levels": ", ".join(map(str, missing.get((target, workload),
                                                                      []))) or None})
    return pd.DataFrame(rows)


