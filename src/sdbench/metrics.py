"""The speedups: each defined once (its name in the summary, the record's metric it is a ratio
of, the unit and whether more of the metric is faster), for the stopping rule, the summary
stage and the reports.

A speedup is the metric with speculation over the same metric without it (same target,
workload, load and repeat), turned so that above 1 is better for speculation: throughput
with ÷ without, a time or an energy without ÷ with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Speedup:
    name: str  # the summary's per-measurement column
    metric: str  # the record's metric (and the summary's column) it is a ratio of
    unit: str  # the metric's
    higher_is_better: bool  # whether more of the metric is faster

    def ratio(self, mine, theirs):
        """Speculation's metric (`mine`) over its baseline's (`theirs`), turned so that > 1
        is better; works on numbers and on pandas Series alike (no guard for zero here)."""
        return mine / theirs if self.higher_is_better else theirs / mine

    def log_ratio(self, mine: float, theirs: float) -> float | None:
        """The log of `ratio`; None where either side is missing or not positive."""
        if mine is None or theirs is None or mine <= 0 or theirs <= 0:
            return None
        return math.log(self.ratio(mine, theirs))


THROUGHPUT = Speedup("speedup", "output_throughput", "tok/s", True)  # the headline
TOTAL = Speedup("total_speedup", "total_token_throughput", "tok/s", True)
TPOT = Speedup("tpot_speedup", "mean_tpot_ms", "ms", False)
# energy per output token without speculation ÷ with it (> 1: speculation saves energy); NaN
# without GPU readings
ENERGY = Speedup("energy_gain", "energy_per_output_token_j", "J", False)
SPEEDUPS = {s.name: s for s in (THROUGHPUT, TOTAL, TPOT, ENERGY)}
