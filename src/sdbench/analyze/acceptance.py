"""Synthetic acceptance: cells whose drafts vLLM accepts at a set rate, and their known answer.

vLLM's speculative config has `rejection_sample_method: synthetic` (vLLM 0.26+,
`vllm/config/speculative.py`): the proposer runs and costs what it costs, but its draft tokens
are accepted with calibrated per-position probabilities, set by `synthetic_acceptance_length`
(the mean acceptance length: 1 + accepted tokens per draft) or `synthetic_acceptance_rates`
(the unconditional rate at each position, non-increasing). A cell measured so answers "what
would this method give here at that acceptance", never "what did it give": its label says
"simulated" (`simulated_label`).

It also has a known answer, which checks the engine and the project's acceptance accounting
(`acceptance_check`): the mean acceptance length measured over a point's drafts must equal the
setting within the sampling error of that many drafts. A draft's accepted count A is the
number of positions accepted, position j accepted only if every position before it was, so
with unconditional rates p_1 >= ... >= p_k

    E[A] = sum_j p_j,   E[A^2] = sum_j (2j - 1) p_j,   Var[A] = E[A^2] - E[A]^2,

and the mean over n independent drafts has standard error sqrt(Var[A] / n); the rates are
the ones the point measured (vLLM's per-position acceptance counters).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy import stats

SYNTHETIC = "synthetic"
# the check's two-sided level: one false alarm in a thousand correct cells (every synthetic
# cell of a study is checked), beyond which a difference is the engine's or the accounting's
CHECK_LEVEL = 0.999


def _options(options) -> dict:
    if isinstance(options, str):
        return json.loads(options) if options else {}
    return dict(options) if isinstance(options, dict) else {}


def synthetic_setting(options) -> float | None:
    """The mean acceptance length a cell's speculative options set (its records'
    `spec_options`: a JSON text or a dict), or None where acceptance is not synthetic."""
    options = _options(options)
    if options.get("rejection_sample_method") != SYNTHETIC:
        return None
    if options.get("synthetic_acceptance_length") is not None:
        return float(options["synthetic_acceptance_length"])
    rates = options.get("synthetic_acceptance_rates")
    return None if rates is None else 1.0 + float(sum(rates))


def simulated_label(speculator: str, options) -> str:
    """A cell's name, marked as simulated where its acceptance is synthetic."""
    setting = synthetic_setting(options)
    return speculator if setting is None else (
        f"{speculator} (simulated: acceptance {setting:g})")


def accepted_variance(rates) -> float:
    """Var[A] of one draft's accepted count from the unconditional per-position rates."""
    p = np.asarray(rates, dtype=float)
    if p.size == 0:
        return 0.0
    j = np.arange(1, p.size + 1)
    return max(0.0, float(np.sum((2 * j - 1) * p) - np.sum(p) ** 2))


def acceptance_check(frame: pd.DataFrame) -> pd.DataFrame:
    """Per synthetic point (cell and concurrency, pooled over its repeats): the mean acceptance
    length it was set to, the one measured over its drafts, the range sampling allows at
    `CHECK_LEVEL` (plus one draft's worth, for a draft cut at the end of a sequence; from the
    variance the measured per-position rates give, else the largest one a count in [0, k]
    can have) and whether the measurement is in it."""
    need = {"spec_options", "spec_decode_num_drafts", "spec_decode_accepted_tokens"}
    if frame.empty or not need <= set(frame):
        return pd.DataFrame()
    measured = frame[frame["spec_decode_num_drafts"].fillna(0) > 0]
    setting = measured["spec_options"].map(synthetic_setting)
    measured = measured[setting.notna()].assign(setting=setting[setting.notna()])
    z = float(stats.norm.ppf(0.5 + CHECK_LEVEL / 2))
    rows = []
    for (cell, speculator, k, level), part in measured.groupby(
            ["cell_id", "speculator", "k", "concurrency"], sort=True):
        drafts = float(part["spec_decode_num_drafts"].sum())
        length = 1.0 + float(part["spec_decode_accepted_tokens"].sum()) / drafts
        rates = _pooled_rates(part)
        # without per-position rates: the largest variance a count in [0, k] can have
        variance = accepted_variance(rates) if rates is not None else k * k / 4
        allowed = z * math.sqrt(variance / drafts) + 1.0 / drafts
        set_to = float(part["setting"].iloc[0])
        rows.append({"cell_id": cell, "speculator": speculator, "k": int(k),
                     "concurrency": level, "set": set_to, "measured": length,
                     "drafts": int(drafts), "allowed_low": set_to - allowed,
                     "allowed_high": set_to + allowed,
                     "error_from": ("the per-position rates measured" if rates is not None
                                    else "the largest variance k allows"),
                     "passed": bool(abs(length - set_to) <= allowed)})
    return pd.DataFrame(rows)


def _pooled_rates(part: pd.DataFrame) -> list[float] | None:
    """The per-position acceptance rates of a point's repeats, weighted by their drafts."""
    if "spec_decode_per_position_acceptance_rates" not in part:
        return None
    weighted, total = None, 0.0
    for rates, drafts in zip(part["spec_decode_per_position_acceptance_rates"],
                             part["spec_decode_num_drafts"], strict=True):
        if isinstance(rates, str):  # the summary keeps lists as JSON text
            rates = json.loads(rates)
        if rates is None or not isinstance(rates, (list, tuple, np.ndarray)) or not len(rates):
            return None
        values = np.asarray(rates, dtype=float) * float(drafts)
        weighted = values if weighted is None else weighted + values
        total += float(drafts)
    return None if weighted is None else list(weighted / total)
