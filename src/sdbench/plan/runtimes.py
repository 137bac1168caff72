"""How long a job may run: Snakemake's `runtime` resource, which a SLURM job gets as its time
limit. One limit for every job either wastes the queue (a 4-minute session asking for 4 hours
waits behind longer jobs) or kills the long ones (8k-token outputs at concurrency 1 on a 72B
target take hours), so `cells.runtime: auto` estimates each session's limit from its work
(`sdbench.plan.work`: every point's prompts in waves of its concurrency, at the prompt set's
mean lengths) at conservative per-stream rates (`cells.work_rates`), with a margin, plus each
server's start-up limit. The limit is capped at `cells.max_runtime`, and each retry of the job
gets the estimate again on top (attempt 2: twice, up to the cap): a session killed at its limit
keeps its finished points in the point cache, and the retry measures only the missing ones.

A number instead of `auto` is the limit in minutes for every session, as before.
"""

from __future__ import annotations

import math
from pathlib import Path

from sdbench.plan import dynamic_k, rates, specs
from sdbench.plan.sessions import Session, session_waits, standalone
from sdbench.plan.settings import settings
from sdbench.plan.work import session_work

AUTO = "auto"
# on top of the estimate at the conservative rates (requests that stop late, slow points)
MARGIN = 1.5
# a cell's own job only writes its records from its sessions' manifests
ASSEMBLE_MINUTES = 10


class ConservativeRates:
    """`cells.work_rates` per stream whatever the model and load, the start-up limit per
    start: what even the slowest job of the study reaches."""

    def __init__(self, config: dict):
        typed = settings(config)
        self.rates = typed.cells.work_rates
        self.startup_limit_s = float(typed.server.startup_timeout_s)

    def request_s(self, cell: specs.Cell, prompt: float, output: float,
                  concurrency: int) -> float:
        return MARGIN * (prompt / self.rates["prefill_tokens_per_s"]
                         + output / self.rates["decode_tokens_per_s"])

    def startup_s(self, cell: specs.Cell, first: bool) -> float:
        return self.startup_limit_s

    def point_overhead_s(self, cell: specs.Cell) -> float:
        return 0.0

    def rest_s(self, session: Session) -> float:
        return 0.0

    def side_by_side_s(self, spans: list[float]) -> float:
        return sum(spans)


def session_minutes(config: dict, session: Session, cells: dict[str, specs.Cell],
                    attempt: int = 1) -> int:
    """The `runtime` (minutes) of one session job on its `attempt`-th try (a fixed
    `cells.runtime` or the estimate, times the attempt, up to `max_runtime`); the prompt sets'
    data cards are read where they are built (Snakemake asks again once a job's inputs
    exist: a card built since counts then)."""
    limits = settings(config).cells
    if limits.runtime != AUTO:
        return min(int(limits.runtime) * attempt, limits.max_runtime)
    work = session_work(session, cells, ConservativeRates(config))
    minutes = max(ASSEMBLE_MINUTES, math.ceil(work.total_s / 60)) * attempt
    return min(minutes, limits.max_runtime)


def cell_minutes(config: dict, cells: list[specs.Cell], attempt: int = 1) -> int:
    """The `runtime` of a job that measures cells alone (a derived dynamic-K schedule's): their
    sessions one after another."""
    limits = settings(config).cells
    if limits.runtime != AUTO:
        return min(int(limits.runtime) * attempt, limits.max_runtime)
    seconds = sum(session_work(s, {cell.cell_id: cell}, ConservativeRates(config)).total_s
                  for cell in cells for s in standalone(cell).values())
    minutes = max(ASSEMBLE_MINUTES, math.ceil(seconds / 60)) * attempt
    return min(minutes, limits.max_runtime)


def job_priorities(config: dict, planned: dict[str, Session], cells: dict[str, specs.Cell],
                  device: str, root: str | Path = ".") -> tuple[dict[str, int], dict[tuple, int]]:
    """Snakemake's `priority` of the measuring jobs: (session id -> the estimated seconds, at
    `device`'s calibrated rates (`sdbench.plan.rates`), of the longest chain of work that waits
    on it, i.e. the session itself plus the longest of what waits on it: the later stages of
    a chain (`adaptive.chain`: the sessions whose `sessions.chain_inputs` name it, and so on)
    and the derived dynamic-K cells whose schedules read its cells; (target, workload,
    speculator) -> a derived dynamic-K cell's own seconds). Where several jobs run at once
    (GPUs or CPU cell slots), the longest chains start first and the run does not end on one
    long job started late (longest-processing-time first)."""
    model = rates.CalibratedRates(config, rates.DEVICES[device], root)
    own = {sid: session_work(s, cells, model, root=root).total_s
           for sid, s in planned.items()}
    after: dict[str, float] = {}
    derived: dict[tuple, int] = {}
    for spec in dynamic_k.dynamic_k_specs(config):
        seconds = sum(session_work(s, {cell.cell_id: cell}, model, root=root).total_s
                      for cell in dynamic_k.dynamic_k_placeholders(config, spec)
                      for s in standalone(cell).values())
        derived[(spec["target"], spec["workload"], spec["speculator"])] = round(seconds)
        feeding = {c.cell_id for c in dynamic_k.dynamic_k_sources(spec, cells)}
        for sid, session in planned.items():
            if feeding & set(session.cells):
                after[sid] = max(after.get(sid, 0.0), seconds)
    waiting: dict[str, set[str]] = {}  # session -> the chained sessions that wait on it
    for sid, needs in session_waits(planned, cells).items():
        for needed in needs:
            waiting.setdefault(needed, set()).add(sid)
    longest: dict[str, float] = {}

    def path(sid: str) -> float:
        if sid not in longest:
            longest[sid] = own[sid] + max([after.get(sid, 0.0)] + [
                path(other) for other in waiting.get(sid, ()) if other in planned])
        return longest[sid]

    return {sid: round(path(sid)) for sid in planned}, derived
