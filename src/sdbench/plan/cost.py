"""What a study will cost, before it runs: cells, server starts and projected GPU time per
round, with server sessions and without them (one start per cell and instance).

    make plan                                   # config/config.yaml
    make plan CONFIG=config/demo.yaml
    python -m sdbench.plan.cost --config config/config.yaml [--device h100]

The projection is the request model of `sdbench.plan.work` at the rates of one device class
(`sdbench.plan.rates`, calibrated from measured runs; `plan.device` in the config, else this
host's), the start-ups measured on this host by earlier runs where there are some (the session
manifests under results/sessions/), and the acceptance each speculative method is assumed to
reach (printed with the numbers).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import socket
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from sdbench import layout
from sdbench.files import atomic_write_json
from sdbench.ids import short_hash
from sdbench.plan import (
    adaptive,
    budget,
    checks,
    grid,
    hostcaps,
    inputs,
    rates,
    sessions,
    sweeps,
    wallclock,
)
from sdbench.plan.config import ConfigError, load_config
from sdbench.plan.settings import settings
from sdbench.plan.work import (
    BASELINE,
    BATCH,
    RATE,
    SessionWork,
    built_for,
    estimated_card,
    in_flight,
    point_seconds,
    read_card,
    session_work,
    stored_card,
)

PARTS = ("round1", "round2", "round3", grid.PROBE_ROUND, "dynamic-K")


@dataclass
class Tally:
    cells: int = 0
    sessions: int = 0
    starts: int = 0
    starts_without: int = 0
    startup_h: float = 0.0
    measuring_h: float = 0.0
    rest_h: float = 0.0
    startup_without_h: float = 0.0
    rest_without_h: float = 0.0
    exceptions: list[str] = field(default_factory=list)
    # (closed-loop concurrency or None, blocks of prompts there) -> measuring hours
    levels: dict = field(default_factory=dict)

    def add(self, work: SessionWork, without: bool = False, gpu: bool = True) -> None:
        """Add a session's work: GPU-hours (its wall time on every GPU it holds), or on a CPU
        host hours of the host."""
        hours = (work.gpus if gpu else 1) / 3600.0
        if without:
            self.starts_without += work.starts
            self.startup_without_h += work.startup_s * hours
            self.rest_without_h += work.rest_s * hours
        else:
            self.sessions += 1
            self.starts += work.starts
            self.startup_h += work.startup_s * hours
            self.measuring_h += work.measuring_s * hours
            for key, seconds in work.levels.items():
                self.levels[key] = self.levels.get(key, 0.0) + seconds * hours
            self.rest_h += work.rest_s * hours


class MeasuredStarts:
    """Start-ups measured on this host by earlier runs (session manifests), per configuration:
    a projection uses their median instead of the rates' where there is one."""

    def __init__(self, root: str | Path = ".", host: str | None = None):
        self.by_config: dict[str, list[float]] = defaultdict(list)
        host = host or socket.gethostname()
        for path in sorted(Path(root, layout.SESSIONS_DIR).rglob("*.json")):
            try:
                timing = json.loads(path.read_text()).get("timing") or {}
            except (OSError, ValueError):
                continue
            if timing.get("host") != host:
                continue
            for start in timing.get("starts") or []:
                self.by_config[start["config"]].append(float(start["startup_s"]))

    def __len__(self) -> int:
        return sum(map(len, self.by_config.values()))


class PlanRates(rates.CalibratedRates):
    """Calibrated rates, with this host's measured start-ups where there are some."""

    def __init__(self, config: dict, device: rates.DeviceRates, measured: MeasuredStarts,
                 root: str | Path = "."):
        super().__init__(config, device, root)
        self.measured = measured

    def startup_s(self, cell: grid.Cell, first: bool) -> float:
        seen = self.measured.by_config.get(cell.config_id)
        if seen:
            return statistics.median(seen)
        return super().startup_s(cell, first)


def _supported(config: dict, cells: dict[str, grid.Cell], here: bool) -> tuple[dict, dict]:
    """(cells that will measure, cells unsupported on this host: id -> reason)."""
    if not here:
        return cells, {}
    plan = hostcaps.host_plan(config, cells)
    skipped = {c: p["unsupported_here"] for c, p in plan.items() if p["unsupported_here"]}
    return {c: cell for c, cell in cells.items() if c not in skipped}, skipped


def derived_cells(config: dict, differs: dict[int, tuple] | None = None) -> list[grid.Cell]:
    """The cells of the derived dynamic-K schedules as the plan sees them before the schedules
    exist: per schedule its three (`grid.dynamic_k_placeholders`: the static k, the constant
    and the derived schedule; two where the schedule turns out constant), one configuration
    each; the constant schedule at the levels `differs` gives for its entry (by its place in
    the config), where it gives some (`PredictedSchedule.differs`), else at every level."""
    out = []
    for n, spec in enumerate(grid.dynamic_k_specs(config)):
        for cell in grid.dynamic_k_placeholders(config, spec):
            server = {**cell.server_config, "method_options": {
                **cell.server_config["method_options"], "derived": n}}
            levels = (differs or {}).get(n) if cell.speculator.endswith(
                grid.CONSTANT_ARM) else None
            out.append(replace(cell, cell_id=f"{cell.cell_id}{n}", server_config=server,
                               concurrency=levels or cell.concurrency))
    return out


@dataclass(frozen=True)
class PredictedSchedule:
    """A dynamic-K entry's schedule as the plan's rates predict it from round 1 (`predicted_
    schedules`): its closed-loop levels, the levels where it differs from its static k's
    constant schedule, and per level the derived schedule's throughput ÷ the static k's
    outside the dynamic mechanism (the best k's speedup there, 1 where none beats 1, ÷ the
    static k's)."""

    levels: tuple[int, ...]
    differs: tuple[int, ...]
    value: tuple[float, ...]


def predicted_schedules(config: dict, cells: dict[str, grid.Cell],
                        model: rates.CalibratedRates,
                        root: str | Path = ".") -> dict[int, PredictedSchedule]:
    """Per dynamic-K entry (by its place in the config): its schedule as the plan's rates
    predict it, as the workflow derives both it and its static k from round 1's speedups (at
    each level the best k, 0 where none beats 1; the static k best in geometric mean over the
    levels: `analyze.analysis.derive_schedule`, `best_static_k`), and the levels it measures
    the constant schedule at (where they differ: `grid.alike_levels`)."""
    out = {}
    for n, spec in enumerate(grid.dynamic_k_specs(config)):
        sources = grid.dynamic_k_sources(spec, cells)
        base = next((c for c in sources if c.is_baseline), None)
        ks = [c for c in sources if not c.is_baseline and c.concurrency]
        if base is None or not ks:
            continue
        card = read_card(base, root)
        loads = [load for load in base.load_points() if load["mode"] != "rate"]
        levels = [grid.level_value(load) for load in loads]
        speedups = {c.server_config["num_speculative_tokens"]: [
            point_seconds(base, load, model, card) / point_seconds(c, load, model, card)
            for load in loads] for c in ks}
        best = [max(speedups, key=lambda k: speedups[k][i]) for i in range(len(levels))]
        schedule = [[level, level, k if speedups[k][i] > 1 else 0]
                    for i, (level, k) in enumerate(zip(levels, best, strict=True))]
        static = max(speedups, key=lambda k: sum(map(math.log, speedups[k])))
        alike = grid.alike_levels(schedule, static, levels)
        out[n] = PredictedSchedule(
            tuple(levels), tuple(level for level in levels if level not in alike),
            tuple(max(speedups[k][i], 1.0) / speedups[static][i] for i, k in enumerate(best)))
    return out


@dataclass(frozen=True)
class ArmSweep:
    """One cell of a derived dynamic-K schedule's split as the projection simulates it: the
    cells measured in turn stop against their static k (`sdbench.measure.stopping.turn_
    stops`: a look before each whole repeat, and before each block of prompts of the repeats
    whose turn comes after the static k's, no bisection), so each of the others is a sweep of
    one setting over its levels; `ratios`: the log throughput ratio to the static k the plan
    predicts at each level (the static k's own: empty), `weights` its measuring hours there;
    `instances`: the server instances its repeats take turns on (`grid.stops_in_turn`);
    `blocks`: the blocks of prompts a repeat is split into at each level, `inside`: per
    repeat, whether it looks inside it (`grid.after_lead`)."""

    entry: int
    arm: str
    concurrency: tuple[int, ...]
    weights: tuple[float, ...]
    repeats: int
    ratios: tuple[float, ...]
    rule: adaptive.Rule
    instances: int = 1
    blocks: tuple[int, ...] = ()
    inside: tuple[bool, ...] = ()

    @property
    def hours(self) -> float:
        return sum(self.weights)

    def share(self, predicted: bool) -> float:
        """The expected share of its measuring the rule spends: simulated over the family of
        surfaces, or (`predicted`) with its predicted ratios as the truth."""
        weights, levels, ratios = self.weights, self.concurrency, self.ratios
        blocks = self.blocks or (1,) * len(levels)
        if len(levels) < 2:  # (one level: simulated as two alike)
            weights, levels, ratios = tuple(w / 2 for w in weights) * 2, levels * 2, ratios * 2
            blocks *= 2
        total = sum(weights) or 1.0  # (relative weights: sweeps alike simulate once)
        return sweeps.expected_share(
            self.rule, 1, len(levels), self.repeats, False, weights=tuple(
                round(w / total, 3) or 1e-3 for w in weights), concurrency=levels,
            blocks=blocks, chained=True, inside=self.inside,
            surface=(tuple(round(r, 3) for r in ratios),) if predicted else ())


def arm_sweep(cell: grid.Cell, tally: Tally, config: dict,
              schedules: dict[int, PredictedSchedule], gpu: bool,
              turns: list[grid.Cell] | None = None) -> ArmSweep:
    """A derived dynamic-K cell of the plan (`derived_cells`) as `ArmSweep`, its hours from its
    sessions' `tally`: the constant schedule's ratio the mechanism's cost
    (`rates.DYNAMIC_K_MECHANISM`), the derived one's that times its schedule's predicted value
    over the static k (`PredictedSchedule.value`; 1 where the plan predicts none); `turns`:
    the cells it is measured in turn with (its entry's, `grid.after_lead`)."""
    entry = cell.server_config["method_options"]["derived"]
    hours: dict[int, float] = defaultdict(float)
    for (level, _), h in tally.levels.items():
        hours[level] += h
    levels = tuple(sorted(hours))
    arm = next(a for a in grid.ARMS if cell.speculator.endswith(a))
    mechanism = math.log(rates.DYNAMIC_K_MECHANISM[gpu])
    found = schedules.get(entry)
    value = dict(zip(found.levels, found.value, strict=True)) if found else {}
    ratios = (() if arm == grid.STATIC_ARM else
              tuple(mechanism + (math.log(value.get(c, 1.0)) if arm == grid.DERIVED_ARM else 0)
                    for c in levels))
    rule = adaptive.cell_rule(config, cell) or adaptive.Rule()
    blocks = tuple(grid.point_blocks(cell, {"mode": "concurrency", "concurrency": c})
                   for c in levels)
    instances = len(cell.used_instances)
    after = grid.after_lead(turns or [cell], cell)
    return ArmSweep(entry, arm, levels, tuple(hours[c] for c in levels), cell.repeats, ratios,
                    rule, instances, blocks,
                    tuple(r % instances in after for r in range(cell.repeats)))


def stopping_entries(arms: list[ArmSweep]) -> set[int]:
    """The dynamic-K entries whose cells stop against their static k: split (a static k
    among them) and on server instances that give their repeats in order (`grid.stops_in_
    turn`; an entry's cells share their instances and repeats)."""
    return {a.entry for a in arms
            if a.arm == grid.STATIC_ARM and grid.turns_in_order(a.instances, a.repeats)}


def arms_adaptive(arms: list[ArmSweep], predicted: bool) -> float:
    """The measuring hours of the derived dynamic-K cells under the rule: each cell's own share
    of its hours (`ArmSweep.share`), the static k's the largest of its entry's others' (it
    measures a repeat where one of them goes on; on one server instance its turn, every
    repeat, comes first: in full); the entries that do not stop (`stopping_entries`: a
    schedule measured alone, `split: false`, or turns out of order) in full."""
    stopping = stopping_entries(arms)
    spent = sum(a.hours for a in arms if a.entry not in stopping)
    for entry in stopping:
        mine = [a for a in arms if a.entry == entry]
        shares = {id(a): a.share(predicted) for a in mine if a.arm != grid.STATIC_ARM}
        lead = max(shares.values(), default=1.0) if mine[0].instances > 1 else 1.0
        spent += sum(a.hours * shares.get(id(a), lead) for a in mine)
    return spent


def plan_cost(config: dict, device: str, root: str | Path = ".", here: bool = False,
              measured: MeasuredStarts | None = None) -> dict:
    """Per part (round, derived dynamic-K cells) and in total: cells, sessions, starts and
    GPU-hours, with sessions and with one start per cell and instance."""
    measured = measured if measured is not None else MeasuredStarts(root)
    model = PlanRates(config, rates.DEVICES[device], measured, root)
    cells = grid.cells_by_id(config)
    measuring, unsupported = _supported(config, cells, here)
    tallies = {part: Tally() for part in PARTS}
    for cell in cells.values():
        tallies[cell.round].cells += 1
    # the first start of each configuration on the host finds its compile caches cold, but
    # where this host measured one before
    cold = {c.config_id for c in measuring.values()} - set(
        measured.by_config)
    planned = sessions.plan_sessions(measuring)
    kept = grid.chain_kept(config, cells)
    works = {}
    for session in planned.values():
        work = works[session.session_id] = session_work(session, measuring, model,
                                                        cold=cold, root=root, kept=kept)
        part = measuring[session.cells[0]].round
        tallies[part].add(work, gpu=model.device.gpu)
        if session.fresh_per_point:
            tallies[part].exceptions.append(
                f"{session.session_id} ({measuring[session.cells[0]].label}): a fresh server "
                f"for each of its {work.starts} points")
    cold = {c.config_id for c in measuring.values()} - set(
        measured.by_config)
    for cell in measuring.values():
        for session in sessions.standalone(cell).values():
            tallies[cell.round].add(session_work(session, {cell.cell_id: cell}, model,
                                                 cold=cold, root=root), without=True,
                                    gpu=model.device.gpu)
    schedules = predicted_schedules(config, measuring, model, root)
    arms = []
    derived = derived_cells(config, {n: s.differs for n, s in schedules.items()})
    entries = defaultdict(list)  # (the cells measured in turn: an entry's)
    for cell in derived:
        entries[cell.server_config["method_options"]["derived"]].append(cell)
    later = []  # (seconds, GPUs) of the derived cells' sessions
    for cell in derived:
        tallies["dynamic-K"].cells += 1
        cold.add(cell.config_id)
        own = Tally()
        for session in sessions.standalone(cell).values():
            work = session_work(session, {cell.cell_id: cell}, model, cold=cold, root=root)
            later.append((work.total_s, work.gpus, work.measuring_s))
            tallies["dynamic-K"].add(work, gpu=model.device.gpu)
            tallies["dynamic-K"].add(work, without=True, gpu=model.device.gpu)
            own.add(work, gpu=model.device.gpu)
        arms.append(arm_sweep(cell, own, config, schedules, model.device.gpu,
                              entries[cell.server_config["method_options"]["derived"]]))
    probe = probe_work(planned, measuring, model, root)
    total = Tally()
    for tally in tallies.values():
        for name in ("cells", "sessions", "starts", "starts_without", "startup_h",
                     "measuring_h", "rest_h", "startup_without_h", "rest_without_h"):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
        total.exceptions += tally.exceptions
    return {"device": rates.DEVICES[device], "parts": tallies, "total": total,
            "unsupported": unsupported, "measured_starts": len(measured),
            "sessions": planned, "work": works, "cells": measuring,
            "cards": prompt_cards(measuring, root),
            "predicted": predicted_sweeps(config, measuring, model, root), "arms": arms,
            "probe": probe, "chained": chained_starts(planned, works),
            "jobs": wallclock.session_jobs(config, planned, measuring, works, later)}


def probe_work(planned: dict, cells: dict[str, grid.Cell], model, root) -> dict:
    """What the instance probe costs (`grid.probe_cells`): the starts and start-up of the
    sessions that measure nothing else (its first instance shares the cells' own start), the
    measuring of its cells in every session, and the configurations it probes."""
    out = {"starts": 0, "startup_h": 0.0, "measuring_h": 0.0, "cells": 0, "probed": set()}
    for session in planned.values():
        ids = [c for c in session.cells if grid.is_probe(cells[c])]
        if not ids:
            continue
        own = session_work(session.only(ids), cells, model, root=root)
        out["measuring_h"] += own.measuring_s / 3600 * own.gpus
        if len(ids) == len(session.cells):
            out["starts"] += own.starts
            out["startup_h"] += own.startup_s / 3600 * own.gpus
        out["probed"] |= {(cells[c].server_config["target"]["name"], cells[c].speculator)
                          for c in ids if not cells[c].is_baseline}
    out["cells"] = sum(1 for c in cells.values() if grid.is_probe(c))
    return out


def chained_starts(planned: dict, works: dict) -> dict:
    """The starts of the chained cells' stages (`adaptive.chain`: every repeat on a start of
    its own, which is what measures the spread between starts for them) and their start-up."""
    chained = [works[sid] for sid in planned if "-c" in sid]
    return {"starts": sum(w.starts for w in chained),
            "startup_h": sum(w.startup_s / 3600 * w.gpus for w in chained)}


# what a predicted sweep's levels are: closed-loop concurrency, open-loop request rates (their
# repeats stop on the TPOT speedup), or an offline or Transformers engine's batch sizes
CLOSED, RATES, BATCHES = "concurrency", "rate", "batch"


@dataclass(frozen=True)
class PredictedSweep:
    """The settings that race at one baseline's levels (one speculator's k values or
    settings; a cell deciding alone on its own), as the plan's rates predict them: each
    setting's log speedup at each level (closed loop and batches: its baseline's point time ÷
    its own; open-loop rates: the baseline's TPOT ÷ its own, at the requests each has in
    flight there), the blocks of prompts there, what one whole repeat of a setting costs there
    (seconds: all its blocks), the levels' values, what they are (`CLOSED`, `RATES`,
    `BATCHES`) and the sweep's hours in full (its settings', GPU-hours on a GPU)."""

    surface: tuple[tuple[float, ...], ...]
    blocks: tuple[int, ...]
    weights: tuple[float, ...]
    concurrency: tuple[float, ...]
    hours: float
    kind: str = CLOSED


def predicted_sweeps(config: dict, cells: dict[str, grid.Cell], model: rates.CalibratedRates,
                     root: str | Path = ".") -> dict[str, list[PredictedSweep]]:
    """Per round, its speculative cells' levels grouped as the adaptive rule races them (a
    served cell's closed-loop levels and its open-loop rates apart, by baseline and speculator
    where the round's cells are interleaved or chained, else each cell alone; an offline or
    Transformers cell's batch sizes alone), with the speedups the request model predicts
    there (at `model`'s rates: the same model that projects the full design's hours)."""
    chain = bool((config.get("adaptive") or {}).get("chain"))
    groups: dict[tuple, list[grid.Cell]] = defaultdict(list)
    cards: dict[str, dict | None] = {}
    for cell in cells.values():
        base = cells.get(cell.baseline_cell_id or "")
        if cell.is_baseline or base is None:
            continue
        together = cell.engine == grid.SERVE and (bool(cell.group) or (chain and bool(cell.chain)))
        kinds = ([CLOSED] * bool(cell.concurrency) + [RATES] * bool(cell.request_rates)
                 if cell.engine == grid.SERVE else [BATCHES] * bool(cell.concurrency))
        for kind in kinds:
            groups[(kind, cell.round, base.cell_id, cell.speculator, cell.concurrency,
                    cell.request_rates) if together else (kind, cell.cell_id)].append(cell)
    out: dict[str, list[PredictedSweep]] = defaultdict(list)
    for (kind, *_), members in groups.items():
        members.sort(key=lambda c: (c.server_config["num_speculative_tokens"] or 0, c.setting))
        base = cells[members[0].baseline_cell_id]
        loads = [load for load in members[0].load_points()
                 if (load["mode"] == "rate") == (kind == RATES)]
        card = cards.setdefault(base.cell_id, read_card(base, root))
        times = {c.cell_id: [point_seconds(c, load, model, card) for load in loads]
                 for c in [base, *members]}
        cost = (times if kind != RATES else
                {c.cell_id: [model.tpot_ms(c, in_flight(c, load, model, card)) for load in loads]
                 for c in [base, *members]})
        surface = tuple(tuple(math.log(b / s) for b, s in zip(
            cost[base.cell_id], cost[c.cell_id], strict=True)) for c in members)
        blocks = tuple(grid.point_blocks(members[0], load) for load in loads)
        # (a point's time is one block's prompts: a whole repeat is its blocks')
        weights = tuple(sum(times[c.cell_id][i] for c in members) * blocks[i] / len(members)
                        for i in range(len(loads)))
        # (GPU-hours on a GPU, as the round's tally counts them: a tensor-parallel target's
        # every GPU)
        gpus = grid.cell_gpus(members[0].server_config) if model.device.gpu else 1
        hours = sum(weights) * len(members) * members[0].repeats * gpus / 3600
        levels = tuple(grid.level_value(load) for load in loads)
        out[members[0].round].append(PredictedSweep(surface, blocks, weights, levels, hours,
                                                    kind))
    return dict(out)


def prompt_cards(cells: dict[str, grid.Cell], root: str | Path = ".") -> tuple:
    """(prompt sets of `cells` whose data card is built under `root`, prompt sets, sets whose
    file there was built from another definition: `work.built_for`, {how: sets} of those
    estimated from their source file: `work.estimated_card`): the projection reads the rest's
    requests at their longest (`work.request_tokens`)."""
    sets = {(c.workload["dataset"], c.workload["subset"]): c for c in cells.values()}
    built, other, estimated = 0, 0, Counter()
    for cell in sets.values():
        card = stored_card(cell.workload, root)
        if card is not None and built_for(card, cell.workload):
            built += 1
            continue
        other += card is not None
        if (guess := estimated_card(cell.workload, root)) is not None:
            estimated[guess["estimated"]] += 1
    return built, len(sets), other, dict(estimated)


def adaptive_needs(config: dict, device: str, root: str | Path = ".",
                   result: dict | None = None, here: bool = False) -> dict[str, float]:
    """Each part's GPU-hours under the adaptive rule where the config has it on (else in
    full), start-up and the rest included (`here`: as `plan_cost`'s)."""
    result = result if result is not None else plan_cost(config, device, root, here=here)
    if adaptive.Rule.from_config(config.get("adaptive")) is None:
        return {name: t.startup_h + t.measuring_h + t.rest_h
                for name, t in result["parts"].items()}
    needs: dict[str, float] = {}
    adaptive_projection(config, result["parts"], result.get("predicted"), result.get("arms"),
                        needs_out=needs)
    return needs


def answer_lines(result: dict, config: dict, needs: dict[str, float],
                 gpus: int | None = None) -> list[str]:
    """The plan's first lines: what the study costs in full and under the adaptive rule
    (`needs`: `adaptive_projection`'s, on or off in the config), its server starts and, on
    `gpus` GPUs, its wall clock."""
    total, device = result["total"], result["device"]
    unit = "GPU-hours" if device.gpu else "hours"
    full = total.startup_h + total.measuring_h + total.rest_h
    on = adaptive.Rule.from_config(config.get("adaptive")) is not None
    lines = [f"Plan on device class {device.name}: {total.cells} cells, {total.starts} server "
             f"starts; {full:.1f} {unit} measured in full (start-up {total.startup_h:.2f} + "
             f"measuring {total.measuring_h:.2f} + the rest {total.rest_h:.2f}), "
             + (f"{sum(needs.values()):.1f} with the adaptive rule (on in this config)" if on
                else f"the adaptive rule (off in this config) would need "
                f"{sum(needs.values()):.1f}")]
    if gpus:
        lines.append(wall_clock_line(result, gpus, needs if on else None))
    return lines


def design_lines(config: dict, device: str, root: str | Path, result: dict,
                 needs: dict[str, float], here: bool = False,
                 totals: dict | None = None) -> list[str]:
    """Under the adaptive rule: the design that runs (chained or not) and both designs' totals:
    `totals` where `resolve_design` chose it, else (forced by the config) projected here
    (`result`, `needs`: this config's own projection)."""
    section = config.get("adaptive") or {}
    if adaptive.Rule.from_config(section) is None:
        return []
    forced = totals is None
    if forced:
        totals = compare_designs(config, root, device, here,
                                 {bool(section.get("chain")): (result, needs)})
    unit = "GPU-hours" if result["device"].gpu else "hours"
    return [describe_design(totals, bool(section.get("chain")), forced, unit)]


def budget_lines(config: dict, device: str, root: str | Path, result: dict,
                 first: dict[str, float] | None = None, here: bool = False) -> list[str]:
    """Where `plan.budget_gpu_hours` is set: what the study needs against it and, above it,
    the config trimmed to fit (`budget.trim`). `first`: the config's own `adaptive_needs`."""
    limit = (config.get("plan") or {}).get("budget_gpu_hours")
    if limit is None:
        return []
    first = first or adaptive_needs(config, device, root, result)
    trimmed = budget.trim(config, lambda c: first if c is config else adaptive_needs(
        c, device, root, here=here), float(limit))
    return budget.describe(trimmed)


def wall_clock_line(result: dict, gpus: int, needs: dict[str, float] | None = None) -> str:
    """The study's wall-clock time on `gpus` GPUs (`wallclock.makespan`): with the adaptive
    rule where `needs` (its projection, part by part) is given, and every cell in full; beside
    GPU-hours ÷ GPUs and its longest chain of sessions."""
    jobs = result["jobs"]
    full = wallclock.makespan(jobs, gpus) / 3600
    longest = max(wallclock.critical_path(jobs).values(), default=0.0) / 3600
    total = result["total"]
    spent = total.startup_h + total.measuring_h + total.rest_h
    unit = "GPUs" if result["device"].gpu else "cells at once (gpu=N)"
    hours = "GPU-hours" if result["device"].gpu else "hours"
    head = f"wall clock on {gpus} {unit}: "
    if needs:
        shares = {name: min(1.0, max(0.0, (needs[name] - t.startup_h - t.rest_h)
                                     / t.measuring_h))
                  for name, t in result["parts"].items() if name in needs and t.measuring_h}
        adaptive_h = wallclock.makespan(wallclock.shortened(jobs, shares), gpus) / 3600
        head += (f"{adaptive_h:.1f} h with the adaptive rule (each session's measuring at its "
                 f"round's projected share), {full:.1f} h every cell in full")
    else:
        head += f"{full:.1f} h, every cell measured in full"
    return (head + f" ({len(jobs)} sessions, each when those it reads are done; the longest "
            f"chain of them in full {longest:.1f} h; {hours} ÷ {gpus}: {spent / gpus:.1f} h; "
            "downloads, builds and reports not counted)")


def request_lengths(found: int, sets: int, other: int, estimated: dict) -> str:
    """The plan's line on where its request lengths come from (`prompt_cards`)."""
    line = f"request lengths: the data cards' means for {found} of {sets} prompt sets"
    guessed = sum(estimated.values())
    if guessed:
        line += (f"; estimated from the source file for {guessed} (counted with "
                 + ", ".join(f"{how}: {n}" if len(estimated) > 1 else how
                             for how, n in sorted(estimated.items())) + ")")
    rest = sets - found - guessed
    if rest:
        line += (f"; {rest} (not built here yet"
                 + (f"; {other} of them on disk built from another definition, e.g. "
                    "another config's or the demo's fixtures, not read" if other else "")
                 + ") at their longest request, so the measuring projected is an upper bound")
    return line


def format_sessions(result: dict) -> str:
    """Each session's projected start-ups, measuring and rest (seconds), in run order."""
    lines = [f"{'session':<18} {'starts':>6} {'start-up s':>10} {'measuring s':>11} "
             f"{'rest s':>7}  cells"]
    for sid, session in result["sessions"].items():
        work = result["work"][sid]
        first = result["cells"][session.cells[0]]
        lines.append(f"{sid:<18} {work.starts:>6} {work.startup_s:>10.0f} "
                     f"{work.measuring_s:>11.0f} {work.rest_s:>7.0f}  {len(session.cells)}: "
                     f"{first.label.split(' | ')[0]} | {first.server_config['target']['name']}")
    return "\n".join(lines)


def _assumptions(config: dict, device: rates.DeviceRates) -> list[str]:
    methods = sorted({m.method for spec in settings(config).rounds.values()
                      for m in spec.methods})
    assumed = ", ".join(f"{m} {rates.ACCEPTANCE.get(m, 0.5):.2f}" for m in methods)
    return [f"rates: {device.name}: {device.source}",
            f"acceptance assumed per drafted token: {assumed or 'none'}; an exact draft "
            f"{rates.EXACT_ACCEPTANCE[device.gpu]:.2f}, the workflow's plumbing drafts "
            f"{rates.PLUMBING_ACCEPTANCE:.2f}",
            "derived dynamic-K cells at their method's largest k"]


def level_shape(spec, tally: Tally) -> tuple[tuple[int, ...], tuple[float, ...], float]:
    """A round's closed-loop levels as the projection simulates them: per level of its
    concurrency grid, the blocks of prompts carrying most of its measuring there and its
    measuring hours (what a repeat there costs, relative); and the hours no rule stops
    (offline batches, levels outside the grid: not the open-loop rates, `rate_shape`)."""
    blocks, weights = [], []
    for level in spec.concurrency:
        here = {b: h for (c, b), h in tally.levels.items() if c == level}
        blocks.append(max(here, key=here.get) if here else 1)
        weights.append(sum(here.values()))
    # (clamped: the parts' sum can exceed the whole by a rounding error, "-0.0 h" in the plan)
    return (tuple(blocks), tuple(weights),
            max(0.0, tally.measuring_h - sum(weights) - sum(rate_shape(tally))
                - sum(batch_shape(tally)[1])))


def rate_shape(tally: Tally) -> tuple[float, ...]:
    """A part's open-loop rates as the projection simulates them: each rate's measuring hours,
    lowest rate first."""
    return tuple(tally.levels[key] for key in sorted(k for k in tally.levels if k[0] == RATE))


def batch_shape(tally: Tally) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A part's speculative offline and Transformers batches as the projection simulates them:
    the batch sizes, smallest first, and each one's measuring hours."""
    sizes = sorted(k[1] for k in tally.levels if k[0] == BATCH)
    return tuple(sizes), tuple(tally.levels[(BATCH, size)] for size in sizes)


def predicted_share(rule: adaptive.Rule, found: list[PredictedSweep], repeats: int,
                    chained: bool, kind: str = CLOSED) -> float | None:
    """The share of a round's measuring of one `kind` of levels the adaptive design is
    expected to spend at the speedups its rates predict (`predicted_sweeps`): each sweep
    simulated with its own surface as the truth, as the family's line simulates that kind
    (closed-loop levels bisected, in blocks, chained where the round is; open-loop rates
    bisected, at the general prior; batch sizes bisected), weighted by its hours; None where
    there is none."""
    found = [s for s in found if s.kind == kind]
    hours = sum(s.hours for s in found)
    if not hours:
        return None
    spent = 0.0
    for s in found:
        surface, blocks, weights, levels = s.surface, s.blocks, s.weights, s.concurrency
        if len(levels) < 2:  # (one level: simulated as two alike)
            surface = tuple(row * 2 for row in surface)
            blocks, weights, levels = blocks * 2, tuple(w / 2 for w in weights) * 2, levels * 2
        # (rounded: sweeps alike up to the request model's rounding simulate once)
        shape = dict(weights=tuple(round(w, 1) for w in weights),
                     surface=tuple(tuple(round(v, 3) for v in row) for row in surface))
        if kind == CLOSED:
            shape.update(blocks=blocks, concurrency=levels, chained=chained)
        elif kind == BATCHES:
            shape.update(concurrency=tuple(int(level) for level in levels))
        spent += s.hours * sweeps.expected_share(rule, len(surface), len(levels), repeats,
                                                 rule.bisect, **shape)
    return spent / hours


def adaptive_projection(config: dict, parts: dict,
                        predicted: dict[str, list[PredictedSweep]] | None = None,
                        arms: list[ArmSweep] | None = None,
                        needs_out: dict | None = None, details: bool = True) -> list[str]:
    """Lines of the plan: each round's measuring under the adaptive rule, as the expected share
    of its closed-loop measuring that `sdbench.plan.sweeps` simulates for a sweep of its shape
    (its methods' most k values x its concurrency levels x loadgen.repeats, each level
    weighted by its projected hours and split into its blocks of prompts) at the rule's prior
    noise, as the workflow measures (repeats stop, settings race, and with the rule's `bisect`
    the levels are coarse first, then bisected), and the other way (with or without
    bisection) for comparison; open-loop rates and the batches of speculative offline and
    Transformers cells are simulated apart (`rate_shape`, `batch_shape`), the derived
    dynamic-K cells each against its static k (`arms`: `arms_adaptive`), and what no rule
    stops is counted in full. `needs_out` gets each part's adaptive GPU-hours, start-up and
    the rest included (what a budget reads: `budget_lines`)."""
    configured = adaptive.Rule.from_config(config.get("adaptive"))
    rule = configured or adaptive.Rule()
    repeats = int(config["loadgen"].get("repeats", 3))
    state = "on" if configured else "off"
    ways = ["levels bisected", "every level"] if rule.bisect else ["every level",
                                                                   "levels bisected"]
    lines = ["", f"adaptive measuring ({state} in this config; rule: ±{rule.precision:.0%}, "
             f"α {rule.alpha}, prior σ {rule.noise:g} of a repeat's log speedup within a "
             f"server start and {rule.instance_noise or 0:g} between starts, each on "
             f"{rule.prior_df:g} df, Δ {rule.shape}, futility {rule.futility:g}, "
             f"{rule.coarse} coarse levels, repeats split into at most {rule.blocks} "
             "block(s) of prompts):"]
    full = live = other = modelled = 0.0
    arms = arms or []
    stopping = stopping_entries(arms)  # (the dynamic-K entries whose cells stop)
    needs = {}  # each part's adaptive GPU-hours: start-ups, the rest, its measuring share
    for name, tally in parts.items():
        spec = settings(config).rounds.get(name)
        if not tally.measuring_h:
            needs[name] = tally.startup_h + tally.rest_h
            continue
        full += tally.measuring_h
        blocks, weights, fixed = ((), (), tally.measuring_h) if spec is None else level_shape(
            spec, tally)
        at_rates = rate_shape(tally) if spec is not None else ()
        sizes, at_batches = batch_shape(tally) if spec is not None else ((), ())
        if name == "dynamic-K" and stopping:
            # a derived schedule's cells stop against their static k, repeat by repeat (one
            # measured alone, `split: false`, in full)
            spent = [arms_adaptive(arms, False), arms_adaptive(arms, True)]
            rest = tally.measuring_h - sum(a.hours for a in arms)  # (none: all closed-loop)
            spent = [h + rest for h in spent]
            live, other, modelled = live + spent[0], other + spent[0], modelled + spent[1]
            needs[name] = tally.startup_h + tally.rest_h + max(spent)
            paired = [a for a in arms if a.entry in stopping]
            ratios = sorted({round(math.exp(r), 2) for a in paired for r in a.ratios})
            alone = sum(a.hours for a in arms if a.entry not in stopping)
            lines.append(
                f"  {name:<10} {len(paired)} cells against their static k, every level, "
                f"repeats stopping: full {tally.measuring_h:.1f} h, adaptive {spent[0]:.1f} h "
                f"({spent[0] / tally.measuring_h:.0%}); at the ratios to the static k this "
                f"plan predicts ({', '.join(f'{r:g}' for r in ratios)}: the mechanism's cost "
                "times the schedule's value) "
                f"{spent[1]:.1f} h ({spent[1] / tally.measuring_h:.0%})"
                + (f"; {alone:.1f} h in full (schedules measured alone, split: false, or "
                   "on fewer server instances than repeats but more than one)"
                   if alone else ""))
            continue
        if name == "dynamic-K" or not sum(weights) + sum(at_rates) + sum(at_batches):
            # a schedule measured alone has nothing to stop against, and a part with nothing
            # the rule stops is measured in full
            live, other = live + tally.measuring_h, other + tally.measuring_h
            modelled += tally.measuring_h
            needs[name] = tally.startup_h + tally.rest_h + tally.measuring_h
            why = ("no schedule's cells stop against a static k: measured alone, split: false, "
                   "or on more server instances than one but fewer than repeats"
                   if name == "dynamic-K" else "no closed-loop point the rule stops")
            lines.append(f"  {name:<10} measured in full ({why}): {tally.measuring_h:.1f} h")
            continue
        # a baseline not interleaved with its pairs is measured first, in full (they stop
        # against its records)
        alone = sum(h for (level, _), h in tally.levels.items() if level == BASELINE)
        # settings race inside an interleaved group (the cells of one speculator measured in
        # turn) and in a chain (as of each repeat's first block: `sweeps.Sweep.chained`); a
        # cell measured on its own otherwise decides alone
        chained = not any(m.interleave for m in spec.methods) and bool(
            (config.get("adaptive") or {}).get("chain"))
        racing = chained or any(m.interleave for m in spec.methods)
        ks = max((len(m.k or (1,)) for m in spec.methods), default=1) if racing else 1
        ks *= max(len(getattr(spec, "settings", ()) or ()), 1) if racing else 1
        levels = tuple(spec.concurrency)
        if len(blocks) < 2:  # (one level: simulated as two alike)
            blocks, weights, levels = blocks * 2, tuple(w / 2 for w in weights) * 2, levels * 2
        # open-loop rates: their repeats stop on the TPOT speedup, their settings race and they
        # are bisected as levels (a tree of their own); at the rule's general prior
        rated = [sum(at_rates) * sweeps.expected_share(
            rule, ks, max(len(at_rates), 2), repeats, bisect,
            weights=at_rates * (2 if len(at_rates) < 2 else 1)) if sum(at_rates) else 0.0
            for bisect in (rule.bisect, not rule.bisect)]
        # speculative offline and Transformers cells: each stops against its baseline's
        # records on its own (one setting: no race), its batch sizes bisected as levels
        if len(sizes) == 1:
            sizes, at_batches = sizes * 2, tuple(h / 2 for h in at_batches) * 2
        batched = [sum(at_batches) * sweeps.expected_share(
            rule, 1, len(sizes), repeats, bisect, weights=at_batches, concurrency=sizes)
            if sum(at_batches) else 0.0 for bisect in (rule.bisect, not rule.bisect)]
        closed = [sweeps.expected_share(rule, ks, len(blocks), repeats, bisect, blocks=blocks,
                                        weights=weights, concurrency=levels, chained=chained)
                  if sum(weights) else 0.0 for bisect in (rule.bisect, not rule.bisect)]
        spent = [fixed + rate + batch + sum(weights) * share
                 for share, rate, batch in zip(closed, rated, batched, strict=True)]
        live += spent[0]
        other += spent[1]
        # the same parts at the speedups the plan predicts, where it predicts them
        found = (predicted or {}).get(name, [])
        share = predicted_share(rule, found, repeats, chained)
        at_model = spent[0]
        if share is not None and sum(weights):
            at_model -= sum(weights) * (closed[0] - share)
        for kind, hours, family in ((RATES, sum(at_rates), rated[0]),
                                    (BATCHES, sum(at_batches), batched[0])):
            part = predicted_share(rule, found, repeats, chained, kind)
            if part is not None and hours:
                at_model -= family - hours * part
        modelled += at_model
        # (the budget reads the larger of the two projections)
        needs[name] = tally.startup_h + tally.rest_h + max(spent[0], at_model)
        split = "" if set(blocks) == {1} else f" (blocks {'/'.join(map(str, blocks))})"
        lines.append(f"  {name:<10} {ks} setting(s) x {len(blocks)} levels{split} x {repeats} "
                     f"repeats: full {tally.measuring_h:.1f} h, adaptive {spent[0]:.1f} h "
                     f"({spent[0] / tally.measuring_h:.0%}; {fixed:.1f} h measured in full"
                     + (f", {alone:.1f} h of it baselines measured first" if alone else "")
                     + (f"; open-loop rates {sum(at_rates):.1f} h -> {rated[0]:.1f} h"
                        if at_rates else "")
                     + (f"; offline and Transformers batches {sum(at_batches):.1f} h -> "
                        f"{batched[0]:.1f} h" if at_batches else "") + "); "
                     f"{ways[1]} {spent[1]:.1f} h ({spent[1] / tally.measuring_h:.0%})"
                     + ("" if not found else
                        f"; at the speedups this plan predicts {at_model:.1f} h "
                        f"({at_model / tally.measuring_h:.0%})"))
    lines.append(f"  total measuring: full {full:.1f} h, adaptive {live:.1f} h "
                 f"({live / full if full else 0:.0%}; {ways[0]}); {ways[1]} {other:.1f} h")
    if predicted:
        lines.append(f"  at the speedups this plan predicts (its rates and assumed acceptance, "
                     f"below): adaptive {modelled:.1f} h ({modelled / full if full else 0:.0%}"
                     "; each race simulated with them as the truth, what no rule stops as "
                     "above); the line above takes the simulation's whole family of "
                     "surfaces instead, crossing 1 anywhere in the grid (the budget reads "
                     "the larger of the two, part by part)")
    if details:
        lines.append("  assumptions: every speedup surface of the simulation's family "
                 "(docs/adaptive-simulation.md), the prior σ as the true noise of a repeat at "
                 "each level (level_noise where it names one; a block of 1/b of its prompts √b "
                 "times it), the instance prior as the true spread between server starts "
                 "(instance_noise); a level's "
                 "share of the measuring as this plan projects it; open-loop rates stop on "
                 "the TPOT speedup at the general prior, bisected as levels; a derived "
                 "dynamic-K schedule's cells each stop against its static k before each "
                 "whole repeat and, in the repeats whose turn comes after the static k's, "
                 "before each block of prompts, every level measured, the static k counted "
                 "at the larger "
                 "of its others' shares, their predicted ratios the mechanism's cost "
                 f"({rates.DYNAMIC_K_MECHANISM[True]:g} of the static k on a GPU, a draft "
                 "model's on an H100; 1 on a CPU) "
                 "times the schedule's predicted value; a baseline's repeats stop with its "
                 "pairs "
                 "where they are interleaved (interleave: true) or chained (adaptive.chain: "
                 "counted as stopping with them, though a chained baseline measures a "
                 "repeat's blocks all or none); a cell measured on its own otherwise "
                 "stops against its baseline's records, which are measured first and in full "
                 "(counted in full: 'baselines measured first'; so is a chained baseline at "
                 "the levels a cell outside its chain, e.g. a derived dynamic-K cell measured "
                 "alone (split: false), reads); "
                 "a speculative offline or Transformers cell stops on its own (no race), its "
                 "batch sizes bisected as levels")
    if needs_out is not None:
        needs_out.update(needs)
    return lines


def format_plan(result: dict, source: str, config: dict | None = None,
                needs_out: dict | None = None, details: bool = True) -> str:
    device, parts, total = result["device"], result["parts"], result["total"]
    unit = "GPU-hours" if device.gpu else "hours"
    lines = [f"Plan of {source} on device class {device.name}",
             "",
             f"{'part':<10} {'cells':>6} {'sessions':>8} {'starts':>7} {'(per cell)':>10} "
             f"{'start-up':>9} {'measuring':>10} {'rest':>7}   {'without sessions':>16}",
             f"{'':<10} {'':>6} {'':>8} {'':>7} {'':>10} {unit:>9} {unit:>10} {unit:>7}   "
             f"{'start-up + rest':>16}"]

    def row(name: str, t: Tally) -> str:
        return (f"{name:<10} {t.cells:>6} {t.sessions:>8} {t.starts:>7} {t.starts_without:>10} "
                f"{t.startup_h:>9.2f} {t.measuring_h:>10.2f} {t.rest_h:>7.2f}   "
                f"{t.startup_without_h + t.rest_without_h:>16.2f}")

    lines += [row(name, t) for name, t in parts.items() if t.cells]
    lines.append(row("total", total))
    lines.append("(a session counts under the round of its first cell: one serving rounds 1-3 "
                 "counts under round 1)")
    lines += ["",
              f"server starts: {total.starts} (one per cell and instance: "
              f"{total.starts_without})",
              f"projected {unit}: start-up {total.startup_h:.2f}, measuring "
              f"{total.measuring_h:.2f} (the rest {total.rest_h:.2f})",
              f"  without sessions: start-up {total.startup_without_h:.2f}, measuring "
              f"{total.measuring_h:.2f} (the rest {total.rest_without_h:.2f})",
              "A start is one (server configuration, instance); fresh-server-per-point "
              "exceptions: " + ("; ".join(total.exceptions) if total.exceptions else "none")]
    lines += instance_lines(result, unit)
    if result["unsupported"]:
        lines.append(f"{len(result['unsupported'])} cells are unsupported here (this host "
                     "or its vLLM; no start, nothing measured): " + "; ".join(sorted(set(
                         result["unsupported"].values()))))
    if config is not None:
        lines += adaptive_projection(config, parts, result.get("predicted"),
                                     result.get("arms"), needs_out, details)
    lines.append(request_lengths(*result["cards"]))
    if result["measured_starts"]:
        lines.append(f"start-ups: the median of {result['measured_starts']} measured on this "
                     "host where a configuration has one")
    return "\n".join(lines)


def instance_lines(result: dict, unit: str) -> list[str]:
    """What measuring the spread between server starts costs: the chained cells' stages (every
    repeat a start of its own) and the instance probe for the cells on one start."""
    probe, chained = result.get("probe") or {}, result.get("chained") or {}
    lines = ["how much two starts of a server differ (every interval carries it):"]
    if chained.get("starts"):
        lines.append(f"  chained cells: every repeat on a start of its own, {chained['starts']} "
                     f"starts, start-up {chained['startup_h']:.2f} {unit}")
    if probe.get("cells"):
        probed = sorted(probe["probed"])
        lines.append(
            f"  instance probe: {probe['starts']} starts more, start-up "
            f"{probe['startup_h']:.2f} + measuring {probe['measuring_h']:.2f} {unit} "
            f"({len(probed)} speculator(s) on their target: "
            + ", ".join(f"{s} on {t}" for t, s in probed) + ")")
    elif not chained.get("starts"):
        lines.append("  nothing measures it (no chained cell, instance_probe off or no cell "
                     "on one start): intervals cover the noise within one start only")
    return lines


# ----------------------------------------------------------------------- the design, per study
#
# `adaptive.chain` measures a baseline and the cells paired with it in stages, one server start
# each, so that the baseline's repeats stop with its cells': a large study saves far more
# measuring than the starts cost, a small one can pay more in start-up than it saves. With
# `chain: auto` the plan projects both designs (start-up, adaptive measuring and the rest, in
# GPU-hours) and the study runs the cheaper one; `true` or `false` forces one. The choice is made
# once per config (whatever is built later) and kept under `.sdbench/design/` in the working
# directory, so that every parse of a run (a dry run, each SLURM job) plans the same cells and
# sessions (`resolve_design`, called wherever a config becomes a grid: the workflow's parse,
# `make plan`, a cell run by hand); `make plan` prints both totals either way.

AUTO = "auto"
DESIGN_CACHE = Path(".sdbench") / "design"


def config_device(config: dict) -> str:
    """The config's `plan.device`, `auto` read off this host."""
    device = config["plan"]["device"]
    if device != "auto":
        return device
    try:
        caps = hostcaps.host_caps()
    except hostcaps.ProbeError:
        caps = None
    return rates.device_of_host(caps)


def compare_designs(config: dict, root: str | Path = ".", device: str | None = None,
                    here: bool = False, known: dict | None = None) -> dict:
    """{False: totals, True: totals} of the study unchained and chained, each {starts,
    startup_h, measuring_h (adaptive), total_h}; without a `device`, the config's on this
    host (`config_device`, the cells this host cannot run left out where it is `auto`).
    `known`: {chain: (its plan_cost result, its adaptive_needs)} already projected."""
    if device is None:
        device, here = config_device(config), config["plan"]["device"] == "auto"
    out = {}
    for chain in (False, True):
        if known and chain in known:
            result, needs = known[chain]
        else:
            variant = copy.deepcopy(config)
            variant["adaptive"] = {**(variant.get("adaptive") or {}), "chain": chain}
            result = plan_cost(variant, device, root, here=here)
            needs = adaptive_needs(variant, device, root, result)
        total = result["total"]
        whole = sum(needs.values())
        out[chain] = {"starts": total.starts, "startup_h": total.startup_h,
                      "measuring_h": whole - total.startup_h - total.rest_h,
                      "total_h": whole}
    return out


def resolve_design(config: dict, root: str | Path = ".") -> dict | None:
    """Where the config's `adaptive.chain` is AUTO: set it to the cheaper design
    (`compare_designs`, made once per config and kept: DESIGN_CACHE) and return the
    comparison; else None."""
    section = config.get("adaptive") or {}
    if section.get("chain") != AUTO or not section.get("enabled", True):
        return None
    key = short_hash({"config": {**config, "adaptive": {**section, "chain": None}}})
    path = Path(root) / DESIGN_CACHE / f"{key}.json"
    try:
        found = json.loads(path.read_text())
        totals = {False: found["unchained"], True: found["chained"]}
    except (OSError, ValueError, KeyError):
        totals = compare_designs({**config, "adaptive": {**section, "chain": False}}, root)
        atomic_write_json(path, {"unchained": totals[False], "chained": totals[True]})
    section["chain"] = totals[True]["total_h"] < totals[False]["total_h"]
    return totals


def describe_design(totals: dict, chosen: bool, forced: bool, unit: str = "GPU-hours") -> str:
    """One line: both designs' totals (in `unit`) and which one runs."""
    def one(chain: bool) -> str:
        t = totals[chain]
        return (f"{'chained' if chain else 'unchained'} {t['total_h']:.1f} {unit} "
                f"({t['starts']} starts, start-up {t['startup_h']:.2f} + adaptive measuring "
                f"{t['measuring_h']:.2f} + the rest)")

    why = "forced by the config" if forced else "the cheaper (adaptive.chain: auto)"
    return (f"design: {'chained' if chosen else 'unchained'} baselines, {why}; "
            f"{one(chosen)} against {one(not chosen)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.plan.cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--device", choices=sorted(rates.DEVICES),
                        help="device class (default: the config's plan.device, else this "
                             "host's)")
    parser.add_argument("--root", default=".", help="working directory of the runs")
    parser.add_argument("--sessions", action="store_true",
                        help="also list each session's projected split")
    parser.add_argument("--assumptions", action="store_true",
                        help="also print every assumption of the adaptive projection")
    parser.add_argument("--gpus", type=int, default=None,
                        help="the GPUs the study runs on (snakemake --resources gpu=N): "
                             "print its wall-clock time there")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        # what a dry run would refuse, refused here too: a method the installed vLLM does
        # not offer, a missing or malformed request file
        checks.check_installed(config, args.root, source=args.config)
        inputs.check_sources(config, source=args.config, root=args.root)
        chosen = resolve_design(config, args.root)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = args.device or config["plan"]["device"]
    here = device == "auto"
    if here:
        try:
            caps = hostcaps.host_caps()
        except hostcaps.ProbeError:
            caps = None
        device = rates.device_of_host(caps)
    result = plan_cost(config, device, args.root, here=here)
    projected: dict[str, float] = {}
    detail = format_plan(result, args.config, config, projected, args.assumptions)
    needs = (projected if adaptive.Rule.from_config(config.get("adaptive"))
             else adaptive_needs(config, device, args.root, result))
    print("\n".join(answer_lines(result, config, projected, args.gpus)
                    + design_lines(config, device, args.root, result, needs, here, chosen)
                    + budget_lines(config, device, args.root, result, needs, here)))
    print("\n" + detail)
    if args.sessions:
        print("\n" + format_sessions(result))
    print("\n".join(["", "Assumptions:", *(f"  {a}" for a in
                                           _assumptions(config, result["device"]))]
                    + ([] if args.assumptions else [
                        "  (the adaptive projection's own: --assumptions)"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
