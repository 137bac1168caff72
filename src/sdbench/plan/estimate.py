"""The study's cost before it runs: server starts, start-up, measuring and the rest per part
(round, instance probe, dynamic K) at a device's calibrated rates, from the sessions it plans
and the prompt sets' lengths (their cards, or estimated from the source files)."""

from __future__ import annotations

import json
import math
import socket
import statistics
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from sdbench import layout
from sdbench.plan import (
    adaptive,
    dynamic_k,
    grid,
    hostcaps,
    rates,
    sessions,
    specs,
    wallclock,
)
from sdbench.plan.projection import (
    PredictedSchedule,
    Tally,
    adaptive_projection,
    arm_sweep,
    predicted_sweeps,
)
from sdbench.plan.work import (
    built_for,
    estimated_card,
    point_seconds,
    read_card,
    session_work,
    stored_card,
)

PARTS = ("round1", "round2", "round3", grid.PROBE_ROUND, "dynamic-K")


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

    def startup_s(self, cell: specs.Cell, first: bool) -> float:
        seen = self.measured.by_config.get(cell.config_id)
        if seen:
            return statistics.median(seen)
        return super().startup_s(cell, first)


def _supported(config: dict, cells: dict[str, specs.Cell], here: bool) -> tuple[dict, dict]:
    """(cells that will measure, cells unsupported on this host: id -> reason)."""
    if not here:
        return cells, {}
    plan = hostcaps.host_plan(config, cells)
    skipped = {c: p["unsupported_here"] for c, p in plan.items() if p["unsupported_here"]}
    return {c: cell for c, cell in cells.items() if c not in skipped}, skipped


def derived_cells(config: dict, differs: dict[int, tuple] | None = None) -> list[specs.Cell]:
    """The cells of the derived dynamic-K schedules as the plan sees them before the schedules
    exist: per schedule its three (`dynamic_k.dynamic_k_placeholders`: the static k, the constant
    and the derived schedule; two where the schedule turns out constant), one configuration
    each; the constant schedule at the levels `differs` gives for its entry (by its place in
    the config), where it gives some (`PredictedSchedule.differs`), else at every level."""
    out = []
    for n, spec in enumerate(dynamic_k.dynamic_k_specs(config)):
        for cell in dynamic_k.dynamic_k_placeholders(config, spec):
            server = {**cell.server_config, "method_options": {
                **cell.server_config["method_options"], "derived": n}}
            levels = (differs or {}).get(n) if cell.speculator.endswith(
                dynamic_k.CONSTANT_ARM) else None
            out.append(replace(cell, cell_id=f"{cell.cell_id}{n}", server_config=server,
                               concurrency=levels or cell.concurrency))
    return out


def predicted_schedules(config: dict, cells: dict[str, specs.Cell],
                        model: rates.CalibratedRates,
                        root: str | Path = ".") -> dict[int, PredictedSchedule]:
    """Per dynamic-K entry (by its place in the config): its schedule as the plan's rates
    predict it, as the workflow derives both it and its static k from round 1's speedups (at
    each level the best k, 0 where none beats 1; the static k best in geometric mean over the
    levels: `analyze.analysis.derive_schedule`, `best_static_k`), and the levels it measures
    the constant schedule at (where they differ: `dynamic_k.alike_levels`)."""
    out = {}
    for n, spec in enumerate(dynamic_k.dynamic_k_specs(config)):
        sources = dynamic_k.dynamic_k_sources(spec, cells)
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
        alike = dynamic_k.alike_levels(schedule, static, levels)
        out[n] = PredictedSchedule(
            tuple(levels), tuple(level for level in levels if level not in alike),
            tuple(max(speedups[k][i], 1.0) / speedups[static][i] for i, k in enumerate(best)))
    return out


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


def probe_work(planned: dict, cells: dict[str, specs.Cell], model, root) -> dict:
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


def prompt_cards(cells: dict[str, specs.Cell], root: str | Path = ".") -> tuple:
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
