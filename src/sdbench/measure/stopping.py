"""Adaptive stopping inside an interleaved group (`sdbench.plan.adaptive`, the config's
`adaptive:`): before each repeat of a speculative cell at a load level, the rule looks at the
repeats that level already has, paired with the baseline's, and the point either goes on or
stops: its later repeats there are recorded as "stopped" (with why, and the numbers the rule
decided on) instead of being measured. The baseline's repeat at a level is measured while any
cell paired with it there still needs it, and always at the points a cell outside the group
measures with it (`keep`: a cell measured on its own, a derived dynamic-K cell measured alone,
`split: false`: `dynamic_k.paired_outside`), which reads its records later and needs a baseline
repeat for every repeat it measures.

At a closed-loop level (concurrency) the rule reads the output-token throughput's paired ratio;
at an open-loop request rate the throughput is the offered load's, so there it reads the time
per output token's (the baseline's mean TPOT ÷ the speculative cell's: the TPOT speedup), and
the stop says which (`METRICS`). Rates are levels of their own: their repeats stop, their
settings race and they are bisected (the lowest and highest rate first, the rates between where
the decision differs) as the concurrency levels are, in a tree of their own.

A speculative cell measured on its own (not interleaved) follows the same rule against its
baseline cell's finished records (`RecordedBaseline`: with the rule on, its session waits for
them, `adaptive.reads_baseline`); its baseline is measured in full. Under `adaptive.chain` such
cells and their baseline run in stages instead (`specs.Cell.chain`: one session each, depth by
depth of the level tree, repeat by repeat, the baseline's stage first): a cell's looks are its
stages' points so far (`ChainRun`), its group the chained cells of its baseline as of their
stages before, the group's σ and race as they stood at the whole repeat's first block, but
inside the repeat with the rivals that measure the stage before it as far as the stage
(`sessions.chain_rivals`, k ascending; `GroupStops._look`: `seen_before` in the stop), and
the baseline measures a repeat where one
of them goes on at its first block (`settle`: a stage with nothing to measure starts no
server).

A decision before repeat r uses only repeats measured before r (a session measures every level's
repeat r − 1 before any repeat r): it is the same whenever it is made, so a resumed session
decides as the interrupted one did, and the report recomputes it from the stored records
(`sdbench.analyze.stops`). The first look that stops a point is final. σ pools the spread of
the repeats of every speculative cell of the group at the level (the noise model's class; the
cell alone when it is not interleaved) with the rule's prior, and the stop names the cells it
pooled; the race is among the cells of one speculator (its k values or settings) in a group.
"""

from __future__ import annotations

import math
from collections import ChainMap
from pathlib import Path

from sdbench import layout
from sdbench.measure import points as point_cache
from sdbench.metrics import THROUGHPUT, TPOT
from sdbench.plan import adaptive, dynamic_k, sessions, specs
from sdbench.plan.hostcaps import UNSUPPORTED
from sdbench.records import STOPPED, LoadPoint, read_records


def _level(pid: tuple) -> tuple:
    return pid[:-1]


# the speedup the rule reads at a point, by its kind (`LoadPoint.order`'s first item): the
# output-token throughput's at a closed-loop level, the TPOT's at an open-loop rate
METRICS = {"c": THROUGHPUT, "q": TPOT}


def metric_of(pid: tuple) -> str:
    """The summary's per-record speedup the rule stops a point (`pid`, or its level) on: the
    output-token throughput's at a closed-loop level, the TPOT's at an open-loop rate."""
    return METRICS[pid[0]].name


def _log_ratio(run, base, pid: tuple) -> float | None:
    """The log speedup of one paired repeat (output-token throughput at a closed-loop level,
    TPOT at an open-loop rate: `METRICS`), None unless both sides were measured and valid."""
    mine, theirs = run.points.get(pid), base.points.get(pid)
    if mine is None or theirs is None:
        return None
    speedup = METRICS[pid[0]]
    values = [p["record"]["metrics"].get(speedup.metric)
              if p["record"]["status"] == "ok" else None for p in (mine, theirs)]
    return speedup.log_ratio(*values)


class RecordedBaseline:
    """A baseline cell's finished records, read as a run's points are (by point id)."""

    def __init__(self, path: str | Path):
        self.points = {LoadPoint.of_load(r["load"], r["repeat"]).order: {"record": r}
                       for r in read_records(path)}


def full_plan(cell: specs.Cell) -> dict[tuple, tuple[dict, int]]:
    """Every point of a cell, all its repeats (point id -> (load, repeat))."""
    return {LoadPoint.of_load(load, r).order: (load, r) for load in cell.load_points()
            for r in cell.load_repeats(load)}


def stage_points(cell: specs.Cell, stages: range) -> tuple[dict[tuple, dict], list[int]]:
    """What a chained cell's sessions of `stages` kept (their manifests: a measured point's
    cache file, a stopped or unsupported point's record), by point id; and the stages whose
    session has not finished the cell."""
    found, not_done = {}, []
    for stage in stages:
        sid = sessions.session_id(cell.config_id, stage, True)
        if not manifest_points(cell, layout.session_output(sid), found):
            not_done.append(stage)
    return found, not_done


def manifest_points(cell: specs.Cell, manifest: str | Path, found: dict[tuple, dict]) -> bool:
    """Add to `found` what one session's manifest kept of `cell` (a measured point's cache
    file, a stopped or unsupported point's record), by point id; False where the manifest does
    not have the cell finished."""
    entry = (sessions.read_manifest(manifest) or {}).get("cells", {}).get(cell.cell_id)
    if entry is None:
        return False
    for point in entry["points"]:
        kept = (point_cache.read_point(point["file"]) if "file" in point
                else {"record": point["record"]})
        if kept is not None:
            found[LoadPoint.of_load(point["load"], point["repeat"]).order] = kept
    return True


class ChainRun:
    """A chained cell as its stage's rule sees it (`specs.Cell.chain`): every point of the
    cell planned (its looks are the whole point's), the points of its earlier stages (their
    sessions' manifests) with, for the cell measured in this session, those measured so far."""

    def __init__(self, cell: specs.Cell, earlier: dict[tuple, dict], run=None):
        self.cell, self.cell_id, self.run = cell, cell.cell_id, run
        # a cell this host could not run (its records say so) needs no baseline points
        self.unsupported = run.unsupported if run is not None else next(
            (p["record"]["error"] for p in earlier.values()
             if p["record"]["status"] == UNSUPPORTED), None)
        self.plan = full_plan(cell)
        self.points = earlier if run is None else ChainMap(run.points, earlier)


class GroupStops:
    """The rule applied to one workload's turns: the baseline's run and its partners' runs."""

    def __init__(self, rule: adaptive.Rule, lead, partners: list,
                 keep: frozenset[tuple] = frozenset(), chained: bool = False,
                 turns: bool = False, inside: dict[str, frozenset[int]] | None = None):
        # `turns`: cells measured in turn, whole repeat by whole repeat, each on its own
        # servers (`turn_stops`): a look before a whole repeat, as a chain's group, and inside
        # one only on the server instances where the cell's turn comes after the lead's
        # (`inside`: cell id -> those instances, `dynamic_k.after_lead`)
        self.rule, self.lead, self.keep, self.turns = rule, lead, keep, turns
        self.inside = inside or {}
        self.chained = chained or turns
        self.partners = [p for p in partners if not p.unsupported]
        # a session's run -> how the rule sees it (a chained stage's `ChainRun`)
        self.views = {id(v.run): v for v in (lead, *partners) if getattr(v, "run", None)}
        self.decided: dict[tuple[str, tuple], dict | None] = {}
        # level -> (depth, lower neighbour, upper neighbour): the concurrency levels' tree and
        # the open-loop rates' (`METRICS`' kinds), each bisected on its own
        self.tree: dict[tuple, tuple] = {}
        for kind in METRICS:
            levels = sorted({_level(pid) for p in self.partners for pid in p.plan
                             if pid[0] == kind})
            tree = adaptive.level_tree(len(levels), self.rule.coarse, self.rule.bisect)
            self.tree.update({levels[i]: (depth, None if a is None else levels[a],
                                          None if b is None else levels[b])
                              for i, (depth, a, b) in tree.items()})
        self.gates: dict[tuple, dict] = {}
        # level -> the blocks of prompts its repeats are split into (`specs.point_blocks`)
        self.blocks = {_level(pid): specs.point_blocks(p.cell, p.plan[pid][0])
                       for p in self.partners for pid in p.plan}

    def rule_at(self, level: tuple) -> adaptive.Rule:
        """The rule at a level: its prior σ the level's own, a block's where repeats are split
        (`Rule.at`)."""
        return self.rule.at(self.blocks.get(level, 1), level[1] if level[0] == "c" else None)

    def order(self, pids: list[tuple]) -> list[tuple]:
        """`pids` in the order the rule needs them measured: depth by depth of the level trees
        (concurrency levels and open-loop rates alike), each depth repeat by repeat."""
        def key(item):
            i, pid = item
            return (self.tree.get(_level(pid), (0,))[0], pid[-1], i)
        return [pid for _, pid in sorted(enumerate(pids), key=key)]

    def decisions(self, level: tuple) -> dict:
        """The level's `adaptive.level_decisions` from every partner's repeats there."""
        return adaptive.level_decisions(
            {p.cell_id: (p.cell.speculator, *self._looks(p, level, math.inf)[:1],
                         len(self._repeats(p, level)), self._looks(p, level, math.inf)[1])
             for p in self.partners if self._repeats(p, level)}, self.rule_at(level))

    def gate(self, level: tuple) -> dict:
        """Which cells measure a level: {"cells": the contenders (None: all; []: none), and the
        neighbours' decisions it was decided on}."""
        if level not in self.gates:
            depth, lower, upper = self.tree.get(level, (0, None, None))
            if depth == 0:
                self.gates[level] = {"cells": None}
            elif [] in (self.gate(lower)["cells"], self.gate(upper)["cells"]):  # not measured
                self.gates[level] = {"cells": [], "lower": lower[1], "upper": upper[1],
                                     "metric": metric_of(level),
                                     "why": "a neighbour was not measured"}
            else:
                found = {str(lower[1]): self.decisions(lower),
                         str(upper[1]): self.decisions(upper)}
                cells = adaptive.level_contenders(*found.values())
                self.gates[level] = {
                    "cells": sorted(cells or []),
                    "lower": lower[1], "upper": upper[1], "decisions": found,
                    "blocks": {str(n[1]): self.blocks.get(n, 1) for n in (lower, upper)},
                    "metric": metric_of(level),
                    "why": ("every method's verdict agrees at its neighbours" if cells is None
                            else "not the best of its method at either neighbour")}
        return self.gates[level]

    def _level_stop(self, run, pid: tuple) -> dict | None:
        """The level's gate, for `run` at `pid`: a stop where the level is not measured, or not
        by this cell."""
        gate = self.gate(_level(pid))
        if gate["cells"] is None or run.cell_id in gate["cells"]:
            return None
        return {**{k: v for k, v in gate.items() if k != "cells"}, "contenders": gate["cells"],
                "reason": adaptive.LEVEL, "before_repeat": 0, "repeats": 0,
                "looks": len(self._repeats(run, _level(pid))),
                "rule": adaptive.for_cell(self.rule, run.cell).to_dict(),
                "pooled_cells": sorted(p.cell_id for p in self.partners)}

    def _repeats(self, run, level: tuple) -> list[tuple]:
        return sorted((pid for pid in run.plan if _level(pid) == level), key=lambda p: p[-1])

    def _ys(self, run, level: tuple, before: int) -> list[float]:
        return self._looks(run, level, before)[0]

    def _starts(self, run, level: tuple) -> int:
        """The server starts `run`'s point at `level` is planned on (a chained cell's stages,
        its instances)."""
        return len({run.cell.instance_of(pid[-1], run.plan[pid][0])
                    for pid in self._repeats(run, level)})

    def _looks(self, run, level: tuple, before: int) -> tuple[list[float], list[int]]:
        """`run`'s paired log speedups at `level` before repeat `before`, and the server start
        (instance: a chained cell's stage) each was measured on."""
        ys, starts = [], []
        for pid in self._repeats(run, level):
            if pid[-1] < before and (y := _log_ratio(run, self.lead, pid)) is not None:
                ys.append(y)
                starts.append(run.cell.instance_of(pid[-1], run.plan[pid][0]))
        return ys, starts

    def _before(self, run, other, level: tuple, repeat: int) -> int:
        """How far `run`'s look before `repeat` at `level` sees `other`'s repeats: its own
        before `repeat`; in a chain the others' as they stood at the whole repeat's first block
        (its cells measure a stage one after another), but inside the repeat (past its first
        block) a rival that measures the stage before it (`sessions.chain_rivals`: its
        speculator's, before it in `sessions.race_order`) as far as the repeat's end. (The
        look at a repeat's first block is the one the baseline's stage, measured first,
        recomputes.)"""
        if other is run or not self.chained:
            return repeat
        start = self._first_block((*level, repeat))[-1]
        if not self.turns and repeat > start and sessions.races_before(other.cell, run.cell):
            return start + self.blocks.get(level, 1)
        return start

    def _look(self, run, level: tuple, repeat: int) -> dict | None:
        """The rule's look before `repeat` at `level` (None: go on), from each cell's repeats
        as far as it sees them (`_before`): σ pooled over the cells, the race among a
        speculator's settings."""
        ys, own = self._looks(run, level, repeat)
        if not ys:
            return None
        start = self._first_block((*level, repeat))[-1] if self.chained else repeat
        seen = {other.cell_id: self._before(run, other, level, repeat)
                for other in self.partners}
        looks = [self._looks(other, level, seen[other.cell_id]) for other in self.partners]
        ss, df = adaptive.spread(values for values, _ in looks)
        rule = adaptive.for_cell(self.rule_at(level), run.cell)
        several = self._starts(run, level) > 1
        sigma, pooled_df = adaptive.rule_sigma(rule, looks, own, several)
        looks = len(self._repeats(run, level))
        rivals = [other for other in self.partners
                  if other.cell.speculator == run.cell.speculator]
        bar, racing = adaptive.race({other.cell_id: self._ys(other, level, seen[other.cell_id])
                                     for other in rivals},
                                    run.cell_id, looks, rule, sigma, pooled_df)
        if self.chained and start == 0:
            # a chain's first repeat: a rival that measures it after this cell has not been
            # seen at this level yet, so it counts as racing (a settled point goes on until
            # precise)
            gate = self.gate(level)["cells"]
            racing = racing or any(
                other is not run and (gate is None or other.cell_id in gate)
                and seen[other.cell_id] == start for other in rivals)
        look = adaptive.decide(ys, looks, rule, sigma, pooled_df, bar, racing)
        if look.reason == adaptive.CONTINUE or look.n >= looks:
            return None
        return {**look.to_dict(), "before_repeat": repeat,
                **({"group_before": start} if start != repeat else {}),
                # (in a chain: how far the look saw each cell's repeats, `_before`)
                **({"seen_before": seen} if self.chained else {}),
                "rule": adaptive.for_cell(self.rule, run.cell).to_dict(),
                "blocks": self.blocks.get(level, 1), "metric": metric_of(level),
                "bar": bar, "rivals": racing, "pooled_ss": ss, "pooled_df": df,
                **({"several_starts": True} if several else {}),
                "pooled_cells": sorted(p.cell_id for p in self.partners),
                **({"against": self.lead.cell_id} if self.turns else {}),
                "speedup": math.exp(look.mean), "low": math.exp(look.low),
                "high": math.exp(look.high)}

    def stop(self, run, pid: tuple) -> dict | None:
        """Why `run`'s point `pid` is not measured (the look that stopped its level), or None."""
        run = self.views.get(id(run), run)
        key = (run.cell_id, pid)
        if key not in self.decided:
            self.decided[key] = None
            if run is not self.lead:
                if (look := self._level_stop(run, pid)) is not None:
                    self.decided[key] = look
                    return look
                for earlier in self._repeats(run, _level(pid)):
                    if earlier[-1] > pid[-1]:
                        break
                    if (self.turns and earlier != self._first_block(earlier)
                            and run.cell.instance_of(earlier[-1], run.plan[earlier][0])
                            not in self.inside.get(run.cell_id, ())):
                        # (in turns: inside a whole repeat only after the lead's turn there)
                        continue
                    if (look := self._look(run, _level(pid), earlier[-1])) is not None:
                        self.decided[key] = look
                        break
            elif self.partners and pid not in self.keep:
                # a chained baseline's stage comes before its pairs' same stage: it measures
                # a repeat's blocks where a pair goes on at the repeat's first block (their
                # later decisions need blocks it has not measured)
                ask = self._first_block(pid) if self.chained else pid
                needing = [p for p in self.partners if ask in p.plan]
                if needing and all(self.stop(p, ask) is not None for p in needing):
                    self.decided[key] = {
                        "reason": adaptive.BASELINE, "before_repeat": ask[-1],
                        "rule": self.rule.to_dict(),
                        # (in turns the lead is a speculative cell: the report's check reads
                        # which cells it stopped with, `analyze.stops`)
                        **({"partners": sorted(p.cell_id for p in needing)} if self.turns
                           else {})}
        return self.decided[key]

    def _first_block(self, pid: tuple) -> tuple:
        """The first block of the whole repeat `pid` is a block of."""
        blocks = self.blocks.get(_level(pid), 1)
        return (*_level(pid), pid[-1] - pid[-1] % blocks)


def turn_stops(rule: adaptive.Rule, run, group: list[specs.Cell],
               manifests: dict[str, list[str | Path]],
               inside: dict[str, frozenset[int]] | None = None) -> GroupStops:
    """The rule over cells measured in turn (`sdbench.measure.cell.measure_in_turns`: a
    derived dynamic-K schedule, its static k and that k as a constant schedule), for `run`'s
    session: the static k leads (`dynamic_k.STATIC_ARM`), and each other cell's looks are its output
    throughput ÷ the static k's, repeat by repeat (the net and the mechanism's cost), from
    their sessions so far (`manifests`: cell id -> the manifests of its turns before). Turns
    go instance by instance, so before repeat r every cell's repeats before r are measured: a
    look is made there (`GroupStops.turns`), and inside repeat r (before each of its blocks
    of prompts) on the server instances where the cell's turn comes after the static k's
    (`inside`: cell id -> those instances, `dynamic_k.after_lead`), and the static k measures a
    repeat while one of the others goes on at its first block."""
    views = []
    for cell in group:
        found: dict[tuple, dict] = {}
        for manifest in manifests.get(cell.cell_id, []):
            manifest_points(cell, manifest, found)
        views.append(ChainRun(cell, found, run if cell.cell_id == run.cell_id else None))
    lead = next(v for v in views if v.cell.speculator.endswith(dynamic_k.STATIC_ARM))
    return GroupStops(rule, lead, [v for v in views if v is not lead], turns=True,
                      inside=inside)


def settle(run, when: str) -> None:
    """Before a chained stage's server starts (or a turn's, `turn_stops`): record the stops
    its rule can decide from the stages before (a baseline's, all of them; a speculative
    cell's, each level's first point here and, where that one stops, the level's others), so
    that a stage with nothing left to measure starts no server."""
    if run.stops is None:
        return
    going: set[tuple] = set()
    for pid in list(run.missing):
        if _level(pid) not in going and not skipped(run, pid, when) and not run.cell.is_baseline:
            going.add(_level(pid))
    run.missing = [pid for pid in run.missing if pid not in run.points]


def measuring_order(run, pids: list[tuple]) -> list[tuple]:
    """`run`'s points to measure in the order its rule needs (`GroupStops.order`), else as
    planned."""
    return run.stops.order(pids) if run.stops is not None else list(pids)


def skipped(run, pid: tuple, when: str) -> bool:
    """Whether the rule stopped `run`'s point `pid` (`run.stops`): then its stopped record is
    kept (cache, partial records) and logged instead of a measurement."""
    if run.stops is None or (stop := run.stops.stop(run, pid)) is None:
        return False
    record = stopped_record(run, pid, stop, when)
    run.add(pid, {"record": record, "detail": None})
    run.say(f" {LoadPoint.of_load(*run.plan[pid]).label}: {record['error']}")
    return True


def reason_line(stop: dict) -> str:
    """One line for the record's error field and the cell's log."""
    if stop["reason"] == adaptive.BASELINE:
        return "stopped: every speculative cell paired with it at this level has stopped"
    if stop["reason"] == adaptive.LEVEL:
        if stop.get("metric") == "tpot_speedup":
            return (f"not measured at this rate: {stop['why']} (request rates "
                    f"{stop['lower']:g} and {stop['upper']:g}/s; rates bisected where "
                    "decisions differ)")
        return (f"not measured at this level: {stop['why']} (concurrency {stop['lower']} and "
                f"{stop['upper']}; levels bisected where decisions differ)")
    interval = f"{stop['speedup']:.3f}x [{stop['low']:.3f}, {stop['high']:.3f}]"
    if stop.get("metric") == "tpot_speedup":
        interval = f"TPOT speedup {interval}"
    why = {adaptive.SETTLED: f"settled ({interval} excludes 1)",
           adaptive.PRECISE: f"precise ({interval} within ±{stop['rule']['precision']:.0%})",
           adaptive.BEATEN: f"beaten ({interval}: another setting is clearly faster here)",
           adaptive.FUTILE: f"futile ({interval}: no verdict expected by the cap)"}
    return (f"stopped after {stop['repeats']} of {stop['looks']} "
            f"{adaptive.look_unit(stop.get('blocks', 1))}: "
            f"{why.get(stop['reason'], stop['reason'])}")


def stopped_record(run, pid: tuple, stop: dict, when: str) -> dict:
    """The record of a point the rule stopped (`when`: the time it was decided)."""
    load, repeat = run.plan[pid]
    return run.record(load, repeat, {}, STOPPED, reason_line(stop), {}, {"stop": stop},
                      when, when)


def valid_cached(point: dict, rule: adaptive.Rule | None) -> bool:
    """Whether a cached point stands: a measured one always, a stopped one under the same rule."""
    record = point["record"]
    if record["status"] == "ok":
        return True
    stop = (record.get("loadgen") or {}).get("stop")
    return (record["status"] == STOPPED and rule is not None and stop is not None
            and stop.get("rule") == rule.to_dict())

