"""How long a study takes on the GPUs a user has (`make plan GPUS=8`): its server sessions
scheduled on that many GPUs, each when the sessions it reads are done, as Snakemake runs them
with `--resources gpu=N`, instead of GPU-hours ÷ N.

Each session lasts its projected work (`plan.work.session_work`: start-ups, measuring, the
rest) and holds its GPUs (`SessionWork.gpus`; a CPU session one slot). A session waits for
those it reads: a chained stage for the stages before it (`sessions.chain_inputs`), a
speculative cell measured on its own under the adaptive rule or sending its baseline's prompt
counts for its baseline's sessions; the derived dynamic-K cells for every session (their
schedules read round 1's records: later than they need, an upper bound). Ready sessions start
longest remaining path first (list scheduling), on the first GPUs free. Under the adaptive rule
each session's measuring is cut to its part's projected share (`shortened`): the order of the
stops is not simulated. The downloads and builds before the sessions, and the summary and
reports after them, are not counted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from sdbench.plan import adaptive, sessions, specs


@dataclass(frozen=True)
class Job:
    seconds: float
    gpus: int
    after: frozenset[str]
    measuring: float = 0.0  # of `seconds`, the measuring (what the adaptive rule shortens)
    part: str = ""  # its round (or "dynamic-K")


def session_jobs(config: dict, planned: dict, cells: dict, works: dict,
                 derived: list | None = None) -> dict[str, Job]:
    """The sessions (and derived cells' work, `derived`: [(seconds, gpus, measuring
    seconds)]) as jobs."""
    jobs = {}
    waits = sessions.session_waits(planned, cells)
    for sid, session in planned.items():
        after = set(waits[sid])
        for cid in session.cells:
            cell = cells[cid]
            if not cell.chain and (specs.sends_baseline_counts(cell)
                                   or adaptive.reads_baseline(config, cell)):
                after.update(sessions.cell_sessions(cells[cell.baseline_cell_id], cells))
        work = works[sid]
        jobs[sid] = Job(work.total_s, max(work.gpus, 1),
                        frozenset(after & set(planned) - {sid}), work.measuring_s,
                        cells[session.cells[0]].round)
    every = frozenset(planned)
    for i, (seconds, gpus, measuring) in enumerate(derived or []):
        jobs[f"dynamic-K {i}"] = Job(seconds, max(gpus, 1), every, measuring, "dynamic-K")
    return jobs


def shortened(jobs: dict[str, Job], shares: dict[str, float]) -> dict[str, Job]:
    """The jobs with each one's measuring at its part's share (`shares`: part -> the share of
    its measuring the adaptive rule is projected to keep; 1 where none is given)."""
    return {name: replace(job, seconds=job.seconds - job.measuring * (
        1 - shares.get(job.part, 1.0))) for name, job in jobs.items()}


def critical_path(jobs: dict[str, Job]) -> dict[str, float]:
    """Each job's longest path to the end (its own time and the longest of those after it)."""
    later: dict[str, list[str]] = {name: [] for name in jobs}
    for name, job in jobs.items():
        for before in job.after:
            later[before].append(name)
    memo: dict[str, float] = {}
    for name in reversed(_order(jobs)):
        memo[name] = jobs[name].seconds + max((memo[n] for n in later[name]), default=0.0)
    return memo


def _order(jobs: dict[str, Job]) -> list[str]:
    """The jobs in an order that puts every job after those it waits for."""
    done: list[str] = []
    seen: set[str] = set()
    for start in jobs:
        stack = [(start, False)]
        while stack:
            name, ready = stack.pop()
            if ready:
                if name not in seen:
                    seen.add(name)
                    done.append(name)
                continue
            if name in seen:
                continue
            stack.append((name, True))
            stack.extend((b, False) for b in jobs[name].after if b not in seen)
    return done


def makespan(jobs: dict[str, Job], gpus: int) -> float:
    """Seconds until every job is done on `gpus` GPUs (a job wider than that runs alone on
    all of them)."""
    if not jobs:
        return 0.0
    rank = critical_path(jobs)
    waiting = {name: set(job.after) for name, job in jobs.items()}
    ready = [(-rank[n], n) for n, w in waiting.items() if not w]
    heapq.heapify(ready)
    running: list[tuple[float, str]] = []
    free, now, finished = gpus, 0.0, 0
    while finished < len(jobs):
        held = []
        while ready:
            _, name = heapq.heappop(ready)
            need = min(jobs[name].gpus, gpus)
            if need <= free:
                free -= need
                heapq.heappush(running, (now + jobs[name].seconds, name))
            else:
                held.append((-rank[name], name))
        for item in held:
            heapq.heappush(ready, item)
        now, name = heapq.heappop(running)
        free += min(jobs[name].gpus, gpus)
        finished += 1
        for other, left in waiting.items():
            if name in left:
                left.discard(name)
                if not left:
                    heapq.heappush(ready, (-rank[other], other))
    return now
