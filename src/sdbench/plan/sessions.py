"""Server sessions: the unit of GPU time.

A cell is a server configuration x a workload, and stays the unit of results (its id, records
file, point cache and staleness). A session is one server instance of one configuration: it
starts once, measures every due point of every cell of that configuration assigned to its
instance (all workloads, load points, and the repeats r with r mod n = instance), then stops.
Adding a workload to a configuration thus costs no start beyond the session's own, and the
session measures only the new cell's points (the others are in the point cache).

Two exceptions, both planned here:

- **Interleaved cells** (a method's `interleave`): the session of the baseline configuration's
  instance also runs the servers of every configuration interleaved with it, side by side, and
  at each point of each workload they take turns (`sdbench.measure.groups`). Their cells run on
  the baseline's instances (`grid.all_cells`).
- **Fresh server per point** (`specs.isolation`: a proposer that keeps state across requests):
  the session starts a server for each of its points; `starts` counts each.
- **Chained cells** (`adaptive.chain`, `specs.Cell.chain`): a configuration's chained cells are
  measured in stages, one session each (`<config id>-c<stage>`: depth by depth of the rule's
  level tree, repeat by repeat), a speculative cell's stage after its baseline's same stage,
  its own stage before and its rivals' same stage before it (k ascending: `race_order`), a
  baseline's after its chained cells' stage before (`chain_inputs`).

The session id is the lead configuration's id (a short hash of its canonical server config)
and the instance: `<config id>-i<instance>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from sdbench.plan import specs


def session_id(lead: str, instance: int, chained: bool = False) -> str:
    """`<config id>-i<instance>`, or for a chained cell's stage `<config id>-c<stage>` (a
    configuration's cells not chained keep sessions of their own, so that none of them waits
    on a chain that waits on it)."""
    return f"{lead}-{'c' if chained else 'i'}{instance}"


SESSION_ID_PATTERN = "[0-9a-f]{12}-[ic][0-9]+"


@dataclass(frozen=True)
class Session:
    """One server instance of one configuration (with, for interleaved cells, the servers that
    take turns with it) and the cells it measures."""

    session_id: str
    lead: str  # config id of its first server (a group's baseline)
    instance: int
    configs: tuple[str, ...]  # config ids of its servers, the lead first
    cells: tuple[str, ...]  # cell ids it measures, the lead's cells first, in grid order
    engine: str
    fresh_per_point: bool  # every point in a server of its own

    @property
    def interleaved(self) -> bool:
        return len(self.configs) > 1

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "configs": list(self.configs), "cells": list(self.cells)}

    @classmethod
    def from_dict(cls, data: dict) -> Session:
        return cls(**{**data, "configs": tuple(data["configs"]),
                      "cells": tuple(data["cells"])})

    def only(self, cell_ids: Iterable[str]) -> Session:
        """The same session measuring only these of its cells (a cell run alone)."""
        keep = set(cell_ids)
        return Session(self.session_id, self.lead, self.instance, self.configs,
                       tuple(c for c in self.cells if c in keep), self.engine,
                       self.fresh_per_point)


def lead_configs(cells: dict[str, specs.Cell]) -> dict[str, str]:
    """config id -> the config id of the session lead it runs under: its own, or for a
    configuration with interleaved cells its baseline's."""
    lead: dict[str, str] = {}
    for cell in cells.values():
        own = cell.config_id
        lead.setdefault(own, own)
        if cell.group and cell.cell_id != cell.group[0]:
            lead[own] = cells[cell.group[0]].config_id
    return lead


def plan_sessions(cells: dict[str, specs.Cell]) -> dict[str, Session]:
    """session id -> Session, for every configuration instance that measures something."""
    leads = lead_configs(cells)
    members: dict[tuple[str, int, bool], list[specs.Cell]] = {}
    for cell in cells.values():
        own = cell.config_id
        for instance in cell.used_instances:
            members.setdefault((leads[own], instance, bool(cell.chain)), []).append(cell)
    sessions = {}
    for (lead, instance, chained), group in members.items():
        configs = list(dict.fromkeys(
            [lead] + [c.config_id for c in group]))
        # the lead's cells first (a group's baseline measures every instance its partners do)
        ordered = sorted(group, key=lambda c: configs.index(c.config_id))
        first = ordered[0]
        sid = session_id(lead, instance, chained)
        sessions[sid] = Session(
            sid, lead, instance, tuple(configs), tuple(c.cell_id for c in ordered),
            first.engine, specs.isolation(first.server_config) == specs.FRESH_PER_POINT)
    return sessions


def cell_sessions(cell: specs.Cell, cells: dict[str, specs.Cell]) -> list[str]:
    """The session ids that measure `cell` (one per instance it uses)."""
    own = cell.config_id
    lead = cells[cell.group[0]].config_id if cell.group else own
    return [session_id(lead, i, bool(cell.chain)) for i in cell.used_instances]


def race_order(cell: specs.Cell) -> tuple:
    """Where a chained speculative cell measures each stage among its rivals (`chain_rivals`):
    k ascending, then its setting, then its server configuration's id (one order for every
    workload, so that no session waits on one that waits on it)."""
    return (cell.server_config.get("num_speculative_tokens") or 0, cell.setting,
            cell.config_id)


def races_before(other: specs.Cell, cell: specs.Cell) -> bool:
    """Whether chained `other` measures each stage before `cell` and is its rival there: of
    the same speculator (its other k values or settings), before it in `race_order`."""
    return other.speculator == cell.speculator and race_order(other) < race_order(cell)


def chained_pairs(cells: dict[str, specs.Cell]) -> dict[str, list[specs.Cell]]:
    """baseline cell id -> the chained speculative cells paired with it (one pass over the
    grid: `chain_rivals` and `chain_inputs` look them up instead of scanning every cell)."""
    out: dict[str, list[specs.Cell]] = {}
    for c in cells.values():
        if c.chain and not c.is_baseline:
            out.setdefault(c.baseline_cell_id, []).append(c)
    return out


def chain_rivals(cell: specs.Cell, cells: dict[str, specs.Cell],
                 pairs: dict[str, list[specs.Cell]] | None = None) -> list[specs.Cell]:
    """The chained cells a speculative cell races in each stage and that measure that stage
    before it: its baseline's chained cells of its speculator (its other k values or
    settings) before it in `race_order`. Its looks inside a stage see theirs
    (`measure.stopping.GroupStops._look`). `pairs`: `chained_pairs(cells)`, where given."""
    if not cell.chain or cell.is_baseline:
        return []
    pairs = chained_pairs(cells) if pairs is None else pairs
    return sorted((c for c in pairs.get(cell.baseline_cell_id, ()) if races_before(c, cell)),
                  key=race_order)


def chain_inputs(cell: specs.Cell, stage: int, cells: dict[str, specs.Cell],
                 pairs: dict[str, list[specs.Cell]] | None = None) -> list[str]:
    """The sessions a chained cell's stage waits for: a speculative cell's, its baseline's
    same stage, its own stage before and the same stage of the rivals that measure it before
    it (`chain_rivals`); a baseline's, the stage before of every chained cell paired with it
    (whose decisions say which of its points it still measures)."""
    if not cell.chain:
        return []
    pairs = chained_pairs(cells) if pairs is None else pairs
    if cell.is_baseline:
        return [] if stage == 0 else [
            session_id(c.config_id, stage - 1, True) for c in pairs.get(cell.cell_id, ())]
    own = [session_id(cell.config_id, stage - 1, True)] if stage else []
    return [session_id(cells[cell.baseline_cell_id].config_id, stage, True),
            *own, *(session_id(c.config_id, stage, True)
                    for c in chain_rivals(cell, cells, pairs))]


def session_waits(planned: dict[str, Session],
                  cells: dict[str, specs.Cell]) -> dict[str, list[str]]:
    """session id -> the sessions its chained cells' stages wait for (`chain_inputs`), for
    every planned session at once."""
    pairs = chained_pairs(cells)
    return {sid: list(dict.fromkeys(
                needed for cell_id in session.cells
                for needed in chain_inputs(cells[cell_id], session.instance, cells, pairs)))
            for sid, session in planned.items()}


def families(cells: dict[str, specs.Cell]) -> dict[str, list[str]]:
    """baseline cell id -> it and the cells paired with it (one pass over the grid)."""
    out: dict[str, list[str]] = {}
    for cid, c in cells.items():
        out.setdefault(c.baseline_cell_id or cid, []).append(cid)
    return out


def session_family(session: Session, cells: dict[str, specs.Cell],
                   by_baseline: dict[str, list[str]] | None = None) -> dict[str, specs.Cell]:
    """The cells a session's job reads: its own and every cell paired with the same baselines
    (its chained cells' partners and rivals, the cells outside a baseline's group that read
    its records: `measure.session.run_session`), so that the job need not build the grid.
    `by_baseline`: `families(cells)`, where given."""
    by_baseline = families(cells) if by_baseline is None else by_baseline
    bases = dict.fromkeys(cells[c].baseline_cell_id or c for c in session.cells)
    ids = dict.fromkeys([*session.cells, *(m for b in bases for m in by_baseline.get(b, ()))])
    return {cid: cells[cid] for cid in ids}


def chain_partners(cell: specs.Cell, cells: dict[str, specs.Cell]) -> list[specs.Cell]:
    """A chained cell's other side: a speculative cell's baseline, a baseline's chained cells."""
    if not cell.chain:
        return []
    if cell.is_baseline:
        return [c for c in cells.values() if c.baseline_cell_id == cell.cell_id and c.chain]
    return [cells[cell.baseline_cell_id]]


def session_points(session: Session, cell: specs.Cell) -> list[tuple[dict, int]]:
    """(load, repeat) of `cell` that `session` measures, in measuring order: every load point
    once, then again (repeats interleaved; a point split into blocks of prompts takes a
    repeat's blocks in turn, `specs.point_blocks`)."""
    points = cell.instance_points(session.instance)
    blocks = [specs.point_blocks(cell, load) for load in cell.load_points()]
    points.sort(key=lambda p: (p[2] // blocks[p[0]], p[0], p[2]))
    return [(load, r) for _, load, r in points]


def starts(session: Session, cells: dict[str, specs.Cell]) -> int:
    """Server (or engine) starts of the session: one per server, or one per point where each
    point gets a fresh server."""
    if session.fresh_per_point:
        return sum(len(session_points(session, cells[c])) for c in session.cells)
    return len(session.configs)


def standalone(cell: specs.Cell) -> dict[str, Session]:
    """The sessions of one cell measured on its own (a derived dynamic-K cell, or a cell run
    from the command line): one per instance, with this cell only."""
    alone = replace(cell, group=())
    return plan_sessions({alone.cell_id: alone})


def read_manifest(path: str | Path) -> dict | None:
    """A session's manifest (sdbench.measure.session), or None when there is none."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def retries(path: str | Path) -> int:
    """How many runs of the session left a cell unfinished (a parameter of its rule: a run
    after one that did measures those points again)."""
    return int((read_manifest(path) or {}).get("retries", 0))
