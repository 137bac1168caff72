"""What the numbers say to configure: crossover concurrency, best settings, the gain of switching
proposers with load, and a derived batch-size schedule for speculative tokens.

The analyses take the per-measurement table (`aggregate.summarize`: one speedup per repeat,
paired with its baseline's repeat), because an honest estimate needs the repeats: a verdict
comes from an interval ("no clear gain" is an answer), choosing the best of many settings is
evaluated on repeats the choice did not see, speculation off is always a candidate, and levels
measured without a speedup are listed. `derive_schedule` takes the per-point table.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from sdbench.analyze import engine
from sdbench.analyze.acceptance import break_even, simulated_lengths, sweep_points
from sdbench.analyze.noise import covariance, dof_text, point_noise
from sdbench.analyze.stats import CONFIDENCE, level_text, mean_interval, ratio_interval, verdict
from sdbench.plan import adaptive, dynamic_k

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


def _geo(values: np.ndarray) -> float:
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.exp(np.log(np.clip(values, 1e-9, None)).mean())) if len(values) else np.nan


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
    """The point table's rows (`aggregate.aggregate_points`) of the speculative vLLM-server
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
        rows.append({"target": target, "workload": workload,
                     "static_best": settings[static],
                     "static_speedup": float(np.exp(center[static].mean())),
                     "switch_speedup": float(np.exp(center[switch, range(shape[1])].mean())),
                     "gain": float(np.expm1(gain)), "gain_ci_low": float(np.expm1(low)),
                     "gain_ci_high": float(np.expm1(high)),
                     "evaluation": ("all repeats, given the picks (post-selection interval "
                                    f"from the pooled noise model, {dof_text(df)})"
                                    if np.isfinite(low) else
                                    "in-sample (no spread measured): biased upward"),
                     "switch_choice": ", ".join(f"c={c}: {settings[i]}"
                                                for c, i in zip(complete, switch, strict=True)),
                     "levels": len(complete),
                     "missing_levels": ", ".join(map(str, missing.get((target, workload),
                                                                      []))) or None})
    return pd.DataFrame(rows)


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


PREDICTION_TOLERANCE = 0.2  # a measured speedup further than this share from its prediction
PAIR_AGREEMENT = 95.0  # % of drafted tokens a calibration pair (exact draft) should accept


def _step_weights(levels: np.ndarray, batch: float) -> tuple[dict[float, float], str]:
    """How `_step_time` weighs the step times measured at `levels` to get the one at `batch`
    sequences ({level: weight}, the weights summing to 1; beyond the measured levels one is
    negative) and how ("measured", "interpolated", "extrapolated"; none with "one level
    measured"): linearly in the number of sequences between the two neighbouring levels, or
    from the last two (the first two) beyond them."""
    levels = np.unique(np.asarray(levels, dtype=float))
    if batch in levels:
        return {float(batch): 1.0}, "measured"
    if len(levels) < 2:
        return {}, "one level measured"
    if batch < levels[0] or batch > levels[-1]:
        (i, j), how = ((0, 1) if batch < levels[0] else (-2, -1)), "extrapolated"
    else:
        j = int(np.searchsorted(levels, batch))
        i, how = j - 1, "interpolated"
    w = (batch - levels[i]) / (levels[j] - levels[i])
    return {float(levels[i]): 1 - w, float(levels[j]): w}, how


def _step_time(levels: np.ndarray, times: np.ndarray, batch: float) -> tuple[float, str]:
    """A no-speculation step time at `batch` sequences from the times measured at `levels`
    (mean TPOT at each concurrency): measured there, else on the straight line through the
    neighbouring levels (beyond them, through the last two; the report says which). A decode
    step costs a fixed part (the weights read once, the step's own overhead) and a part per
    sequence (its attention, sampling and output), the plan's rates model (`plan.rates.
    step_ms`): on an H100 the 7B-shape target's steps at 4 and 16 sequences lay within 1 %
    of the line through 1 and 64 (6.1 and 6.4 ms measured, 6.07 and 6.36 on the line) and
    5-8 % under the log-log curve this took until 2026-11-29 (6.45, 6.96), its draft's within
    2 % of the line and 15-23 % under the curve
    (docs/runs/2026-11-23-calibration-pair-7b-h100.md). NaN where it would not be positive."""
    weights, how = _step_weights(levels, batch)
    if not weights:
        return np.nan, how
    at = dict(zip(np.asarray(levels, dtype=float), np.asarray(times, dtype=float), strict=True))
    value = float(sum(w * at[level] for level, w in weights.items()))
    return (value if value > 0 else np.nan), how


def _log_step_se(part: pd.DataFrame, level: float) -> tuple[float, float]:
    """(standard error of log mean TPOT, its degrees of freedom) of a vanilla cell at a level,
    from its 95 % Student-t interval over repeats; NaN where it has none (one repeat)."""
    row = part[part["concurrency"] == level]
    if row.empty or not {"repeats_ok", "mean_tpot_ms_ci_low", "mean_tpot_ms_ci_high"} <= set(row):
        return np.nan, np.nan
    row = row.iloc[0]
    n = float(row["repeats_ok"]) if pd.notna(row["repeats_ok"]) else 0.0
    half = (row["mean_tpot_ms_ci_high"] - row["mean_tpot_ms_ci_low"]) / 2
    if n < 2 or not np.isfinite(half) or row["mean_tpot_ms_mean"] <= 0:
        return np.nan, np.nan
    return float(half / stats.t.ppf(0.975, n - 1) / row["mean_tpot_ms_mean"]), n - 1


def break_even_spread(points: pd.DataFrame, row, times: tuple) -> tuple[float, float]:
    """(low, high) of the step-time model's break-even τ* = (k · t_D + t_V) ÷ t_T at a
    draft-model point (`row`, its step `times` as `step_times` gives them), from the spread of
    the step times it rests on: each vanilla level's log mean TPOT with its standard error over
    repeats (independent), carried to log τ* to first order (t_V is the target's levels
    weighted as `_step_weights` weighs them), a 95 % Student-t interval on Welch-Satterthwaite
    degrees of freedom; NaN where a step time has no spread (one repeat)."""
    t_target, t_draft, t_verify, _ = times
    c, k = float(row["concurrency"]), int(row["k"])
    target, draft = _vanilla_steps(points, row)
    share = k * t_draft / (k * t_draft + t_verify)  # d log(k t_D + t_V) / d log t_D
    weights, _ = _step_weights(target["concurrency"].to_numpy(dtype=float), c * (k + 1))
    # t_V = Σ w_l t_l: d log t_V / d log t_l = w_l t_l / t_V
    step = target.set_index("concurrency")["mean_tpot_ms_mean"].astype(float)
    gradient = {level: (1 - share) * w * float(step.get(level, np.nan)) / t_verify
                for level, w in weights.items()}
    gradient[c] = gradient.get(c, 0.0) - 1.0  # ÷ t_T
    terms = [(share, *_log_step_se(draft, c))] + [
        (g, *_log_step_se(target, level)) for level, g in gradient.items()]
    variance = sum((g * se) ** 2 for g, se, _ in terms)
    if not np.isfinite(variance) or variance <= 0:
        return np.nan, np.nan
    dof = variance ** 2 / sum((g * se) ** 4 / d for g, se, d in terms if g)
    half = float(stats.t.ppf(0.975, dof)) * math.sqrt(variance)
    centre = math.log((k * t_draft + t_verify) / t_target)
    return float(math.exp(centre - half)), float(math.exp(centre + half))


def _vanilla_steps(points: pd.DataFrame, row) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The vanilla server points of a draft-model point's target and of its draft (`row`: its
    round, workload, setting, target and draft), closed-loop: their mean TPOT per level."""
    closed = points[(points["engine"] == "serve") & (points["load"] == "concurrency")]
    vanilla = closed[closed["method"] == "vanilla"]
    keys = ["round", "workload", "setting"]
    same = vanilla[(vanilla[keys] == pd.Series({key: row[key] for key in keys})).all(axis=1)]
    return tuple(same[same["target"] == name] for name in (row["target"], row["draft"]))


def step_times(points: pd.DataFrame, row) -> tuple[float, float, float, str] | None:
    """(t_T, t_D, t_V, how t_V was found) of a draft-model point (`row`: its round, workload,
    setting, target, draft, k and concurrency): the target's and the draft's mean TPOT without
    speculation at its concurrency (their own vanilla cells, same round, workload and setting)
    and the verification pass as one target step over c·(k+1) sequences (`_step_time`); None
    where either vanilla cell was not measured there."""
    target, draft = _vanilla_steps(points, row)
    if target.empty or draft.empty:
        return None
    c, k = int(row["concurrency"]), int(row["k"])
    t_target, t_draft = (part.set_index("concurrency")["mean_tpot_ms_mean"].get(c)
                         for part in (target, draft))
    if t_target is None or t_draft is None or pd.isna(t_target) or pd.isna(t_draft):
        return None
    t_verify, how = _step_time(target["concurrency"].to_numpy(dtype=float),
                               target["mean_tpot_ms_mean"].to_numpy(dtype=float), c * (k + 1))
    return float(t_target), float(t_draft), t_verify, how


def predicted_break_even(points: pd.DataFrame) -> pd.DataFrame:
    """Per acceptance sweep of a draft model (target, workload, k, concurrency): the
    break-even acceptance length the step-time model predicts, where its predicted TPOT
    speedup τ · t_T ÷ (k · t_D + t_V) reaches 1, τ* = (k · t_D + t_V) ÷ t_T (see
    `predicted_speedups`), beside the one the sweep measured on the same quantity (the TPOT
    speedup's line, `acceptance.break_even`, with its 95 % interval), and whether the
    prediction lies in that interval (`agrees`; `tested`: False where the interval is open at
    both ends, which rules nothing out) or, with the spread of the step times it rests on
    (`break_even_spread`), overlaps it (`overlaps`)."""
    measured = break_even(points, "tpot_speedup")
    sweep = sweep_points(points, "tpot_speedup")
    if measured.empty or sweep.empty:
        return pd.DataFrame()
    rows = []
    for _, found in measured.iterrows():
        part = sweep[(sweep["target"] == found["target"]) & (sweep["workload"] == found["workload"])
                     & (sweep["swept"] == found["method"]) & (sweep["k"] == found["k"])
                     & (sweep["concurrency"] == found["concurrency"])
                     & (sweep["method"] == "draft_model")]
        if part.empty or pd.isna(part["draft"].iloc[0]):
            continue
        times = step_times(points, part.iloc[0])
        if times is None:
            continue
        t_target, t_draft, t_verify, how = times
        k = int(found["k"])
        predicted = (k * t_draft + t_verify) / t_target
        spread_low, spread_high = break_even_spread(points, part.iloc[0], times)
        low = -np.inf if found["ci_low_side"] == "≤" else found["ci_low"]
        high = np.inf if found["ci_high_side"] == ">" else found["ci_high"]
        tested = bool(np.isfinite(low) or np.isfinite(high))
        # what a draft pass inside a round costs, as a share of the draft's own TPOT, for the
        # measured break-even to hold (the model takes 1): (τ* t_T − t_V) ÷ (k t_D), at the
        # estimate and at the interval's ends (an end open beyond the lengths fitted: at that
        # length, with its side); none where the estimate itself lies beyond them
        implied = [(tau * t_target - t_verify) / (k * t_draft)
                   if np.isfinite(tau) and found["break_even_side"] == "" else np.nan
                   for tau in (found["break_even"], found["ci_low"], found["ci_high"])]
        rows.append({**{key: found[key] for key in ("target", "workload", "method", "k",
                                                    "concurrency", "lengths", "real_in_fit",
                                                    "real_acceptance")},
                     "draft": part["draft"].iloc[0], "target_step_ms": t_target,
                     "draft_step_ms": t_draft, "verify_ms": t_verify,
                     "verify_from": f"target at c={int(found['concurrency']) * (k + 1)} ({how})",
                     "predicted": predicted, "predicted_low": spread_low,
                     "predicted_high": spread_high, "implied_draft_share": implied[0],
                     "implied_draft_share_low": implied[1],
                     "implied_draft_share_high": implied[2], "measured": found["break_even"],
                     "measured_side": found["break_even_side"],
                     "ci_low": found["ci_low"], "ci_low_side": found["ci_low_side"],
                     "ci_high": found["ci_high"], "ci_high_side": found["ci_high_side"],
                     # an interval open at both ends (beyond the lengths swept on either
                     # side) rules nothing out: no test of the prediction
                     "tested": tested, "agrees": bool(tested and low <= predicted <= high),
                     # the prediction rests on step times measured with spread: where it lies
                     # outside the measured interval, a difference is claimed only where the
                     # two intervals do not overlap
                     "overlaps": bool(tested and not np.isnan(spread_low)
                                      and spread_low <= high and low <= spread_high)})
    return pd.DataFrame(rows)


def predicted_speedups(points: pd.DataFrame) -> pd.DataFrame:
    """Draft-model speedups predicted from measured quantities, against the measured ones: for
    each draft-model point whose draft was also measured as a target without speculation (same
    round, workload and setting; the calibration pair), a speculation round at concurrency c
    costs k draft steps and one target pass over k+1 tokens per sequence and yields τ tokens
    (the mean acceptance length), so

        predicted = τ · t_T(c) / (k · t_D(c) + t_V(c)),   t_V(c) ≈ t_T(c · (k+1)),

    with t_T and t_D the target's and the draft's mean TPOT without speculation at that
    concurrency (their own vanilla cells) and the verification pass taken as one target step
    over c·(k+1) sequences (interpolated or extrapolated linearly over the target's measured
    levels). The prediction is compared with the measured TPOT speedup (decode only, as the
    model is): `ratio` = measured ÷ predicted, its interval the measured one's (the variance
    over repeats of the speculative and vanilla points; the prediction's own inputs are
    means)."""
    need = {"mean_tpot_ms_mean", "spec_decode_acceptance_length_mean", "tpot_speedup_mean"}
    if points.empty or not need <= set(points):
        return pd.DataFrame()
    closed = points[(points["engine"] == "serve") & (points["load"] == "concurrency")]
    rows = []
    for _, row in closed[(closed["method"] == "draft_model")
                         & closed["tpot_speedup_mean"].notna()].iterrows():
        times = step_times(points, row)
        if times is None:
            continue
        t_target, t_draft, t_verify, how = times
        c, k = int(row["concurrency"]), int(row["k"])
        tau = float(row["spec_decode_acceptance_length_mean"])
        predicted = tau * t_target / (k * t_draft + t_verify)
        measured = float(row["tpot_speedup_mean"])
        ratio = measured / predicted
        accepted = float(row.get("spec_decode_acceptance_rate_mean", np.nan))
        if not np.isfinite(predicted):  # the verification pass has no step time to read
            reading = (f"no prediction: the verification pass at c={c * (k + 1)} needs the "
                       f"target without speculation at two levels ({how})")
        elif abs(ratio - 1) <= PREDICTION_TOLERANCE:
            reading = "as predicted"
        else:
            reading = (f"measured {abs(ratio - 1):.0%} {'above' if ratio > 1 else 'below'} "
                       "the prediction")
        simulated = row.get("simulated_acceptance")
        temperature = row.get("temperature")
        if simulated is not None and pd.notna(simulated):
            reading += f"; simulated: drafts accepted at a set length {simulated:g}"
        elif temperature is not None and pd.notna(temperature) and temperature > 0:
            # an exact draft's acceptance under sampling is the temperature section's check
            reading += (f"; sampled at temperature {temperature:g}: drafts accepted by "
                        "rejection sampling (see the known answer under sampling)")
        elif accepted < PAIR_AGREEMENT:
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
