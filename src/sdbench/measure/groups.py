"""Interleaved sessions: a baseline configuration's instance and the configurations whose
cells are measured in turn with it (a method's `interleave`) run side by side, and at each point
of each workload every cell takes its turn, so that a speedup's two sides are measured seconds
apart: a host whose speed drifts (a shared or throttling machine) moves both alike.

The servers a workload's turns need are launched side by side before its first point (their
start-ups overlap, and no server starts while another measures; the baseline's stays up for
every workload), and a server stops after its configuration's last point: on a CPU host at most
the baseline and one workload's partners hold memory at once. A point that any
cell of a workload still misses is measured again for all of that workload's cells, so that the
pairs stay seconds apart. A failed point (a server died) ends the session's measuring: the
cells not finished are not done, and the next run measures them again.
"""

from __future__ import annotations

import contextlib

from sdbench.layout import session_server_log
from sdbench.measure import slots, stopping
from sdbench.measure.run import CellError, CellRun, now, restart_partial
from sdbench.measure.server import Clock, SessionServer, checked, fail
from sdbench.measure.serving import ServerError
from sdbench.plan import adaptive, dynamic_k, specs
from sdbench.plan.sessions import Session
from sdbench.records import LoadPoint


def interleaved_order(cell_ids: list[str], points: list[tuple]) -> list[tuple[str, tuple]]:
    """(cell id, point id) in the order a group measures them: `points` in their order, every
    cell in turn at each, the cells' order rotating with the repeat (point ids end with it) so
    that no cell is always measured first."""
    order = []
    for pid in points:
        turn = pid[-1] % len(cell_ids)
        order += [(cell_id, pid) for cell_id in cell_ids[turn:] + cell_ids[:turn]]
    return order


def turns(session: Session, cells: dict[str, specs.Cell], runs: list[CellRun]
          ) -> list[tuple[CellRun, list[CellRun]]]:
    """Per workload of the lead configuration: (the lead's cell, the cells that take turns
    with it), those of them that measure something here. A point any of them misses is
    measured again for all (their runs' `missing` say which)."""
    by_id = {run.cell_id: run for run in runs}
    out = []
    for cell_id in session.cells:
        cell = cells[cell_id]
        if cell.config_id != session.lead or cell_id not in by_id:
            continue
        members = [by_id[cell_id]] + [by_id[c] for c in session.cells
                                      if c in by_id and cells[c].baseline_cell_id == cell_id]
        measured = [r for r in members if not r.unsupported]
        again = {pid for r in measured for pid in r.missing}
        if not again:
            continue
        for run in measured:
            run.missing = [pid for pid in run.plan if pid in again]
            for pid in run.missing:
                run.points.pop(pid, None)
            restart_partial(run)  # what stays cached; the points measured again are appended
        out.append((measured[0], measured[1:]))
    return out


def paired_elsewhere(lead: CellRun, members: list[CellRun], cells: dict[str, specs.Cell],
                     config: dict) -> frozenset[tuple]:
    """The baseline's points (point ids) that a cell outside the group measures with it: one
    measured on its own (not interleaved), or a derived dynamic-K cell measured alone (`split:
    false`; its placeholder, `dynamic_k.dynamic_k_placeholder`). Such a cell reads the baseline's
    records later and needs a baseline repeat for each of its own, so these may not stop with
    the group's cells."""
    outside = dynamic_k.paired_outside(config, cells, lead.cell_id, {r.cell_id for r in members})
    return frozenset(LoadPoint.of_load(load, r).order for cell in outside
                     for load in cell.load_points() for r in cell.load_repeats(load))


def measure_group(session: Session, cells: dict[str, specs.Cell], runs: list[CellRun],
                  held: slots.Slots, clock: Clock, failed: dict, config: dict) -> None:
    """Measure every workload's turns, the servers of its cells up side by side: those a
    workload needs are launched together before its first point (the baseline's once), and a
    server stops after its configuration's last point."""
    plan = [(lead, partners) for lead, partners in turns(session, cells, runs)
            if lead.cell_id not in failed]
    if not plan:
        return
    measuring = [r for lead, partners in plan for r in (lead, *partners)
                 if r.cell_id not in failed]
    configs = list(dict.fromkeys(r.cell.config_id for r in measuring))
    first = {cid: next(r for r in measuring if r.cell.config_id == cid)
             for cid in configs}
    counts = [specs.cell_gpus(first[cid].cell.server_config) for cid in configs]
    views = dict(zip(configs, slots.split(held, counts), strict=True))
    left = {cid: sum(len(r.missing) for r in measuring
                     if r.cell.config_id == cid) for cid in configs}
    rule = adaptive.Rule.from_config(config.get("adaptive"))
    servers: dict[str, SessionServer] = {}
    with contextlib.ExitStack() as stack:
        for lead, partners in plan:
            members = [r for r in (lead, *partners) if r.cell_id not in failed]
            if lead not in members:
                for run in members:
                    fail(run, failed, f"its baseline cell {lead.cell_id} is not measured: "
                          f"{failed[lead.cell_id].splitlines()[0]}")
                continue
            try:
                _up(session, members, servers, views, clock, failed, stack)
            except ServerError as exc:
                for run in members:
                    fail(run, failed, f"{type(exc).__name__}: {exc}")
                continue
            members = [r for r in members if r.cell_id not in failed]
            # (one workload per group; none for the instance probe's, measured in full)
            at = None if rule is None else adaptive.cell_rule(config, lead.cell)
            if at is not None:
                stops = stopping.GroupStops(at, lead, [r for r in members if r is not lead],
                                            keep=paired_elsewhere(lead, members, cells,
                                                                  config))
                for run in members:
                    run.adaptive, run.stops = at.to_dict(), stops
            # the baseline measures every point its cells do (`grid.with_baseline_repeats`);
            # a cell with fewer repeats takes its turn only at its own points, in order
            # (under the rule's level bisection: depth by depth, `GroupStops.order`)
            points = stopping.measuring_order(lead, lead.missing)
            order = [(r, pid) for cell_id, pid in interleaved_order(
                        [r.cell_id for r in members], points)
                     for r in members if r.cell_id == cell_id and pid in r.missing]
            for run, pid in order:
                if run.cell_id in failed:
                    continue
                cid = run.cell.config_id
                server = servers[cid]
                if stopping.skipped(run, pid, now()):
                    left[cid] -= 1
                    if not left[cid]:
                        server.stop()
                    continue
                try:
                    server.take(run, pid, [r.cell_id for r in members if r is not run])
                except CellError as exc:  # a server died: the session's measuring ends
                    for other in measuring:
                        if other.cell_id not in failed and other.not_done():
                            fail(other, failed, str(exc))
                    return
                left[cid] -= 1
                if not left[cid]:
                    server.stop()  # its last point: stop it now


def _up(session: Session, members: list[CellRun], servers: dict[str, SessionServer],
        views: dict[str, slots.Slots], clock: Clock, failed: dict,
        stack: contextlib.ExitStack) -> None:
    """The servers of a workload's turns, up: those not running are launched side by side (a
    start is mostly one core importing vLLM, or its own GPU) and waited for together, before
    any point; meanwhile each cell's prompts are checked."""
    launched = []
    for run in members:
        cid = run.cell.config_id
        if cid not in servers:
            server = SessionServer(run, session, views[cid],
                                   session_server_log(session.session_id, cid), clock)
            stack.callback(server.stop)
            servers[cid] = server
            server.launch()
            launched.append(server)
    for run in members:
        checked(run, failed, clock)
    for server in launched:
        server.wait()
