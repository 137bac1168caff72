"""What the adaptive rule is projected to spend: each sweep of k values and levels the plan
measures, its share of the full design's point-repeats read off the simulated sweeps
(`sweeps.expected_share`), the arms of dynamic-K schedules measured in turn, and the work
they save."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sdbench.plan import (
    adaptive,
    dynamic_k,
    grid,
    rates,
    specs,
    sweeps,
)
from sdbench.plan.settings import settings
from sdbench.plan.work import (
    BASELINE,
    BATCH,
    RATE,
    SessionWork,
    in_flight,
    point_seconds,
    read_card,
)

# what a predicted sweep's levels are: closed-loop concurrency, open-loop request rates (their
# repeats stop on the TPOT speedup), or an offline or Transformers engine's batch sizes
CLOSED, RATES, BATCHES = "concurrency", "rate", "batch"


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


@dataclass(frozen=True)
class ArmSweep:
    """One cell of a derived dynamic-K schedule's split as the projection simulates it: the
    cells measured in turn stop against their static k (`sdbench.measure.stopping.turn_
    stops`: a look before each whole repeat, and before each block of prompts of the repeats
    whose turn comes after the static k's, no bisection), so each of the others is a sweep of
    one setting over its levels; `ratios`: the log throughput ratio to the static k the plan
    predicts at each level (the static k's own: empty), `weights` its measuring hours there;
    `instances`: the server instances its repeats take turns on (`dynamic_k.stops_in_turn`);
    `blocks`: the blocks of prompts a repeat is split into at each level, `inside`: per
    repeat, whether it looks inside it (`dynamic_k.after_lead`)."""

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


def arm_sweep(cell: specs.Cell, tally: Tally, config: dict,
              schedules: dict[int, PredictedSchedule], gpu: bool,
              turns: list[specs.Cell] | None = None) -> ArmSweep:
    """A derived dynamic-K cell of the plan (`derived_cells`) as `ArmSweep`, its hours from its
    sessions' `tally`: the constant schedule's ratio the mechanism's cost
    (`rates.DYNAMIC_K_MECHANISM`), the derived one's that times its schedule's predicted value
    over the static k (`PredictedSchedule.value`; 1 where the plan predicts none); `turns`:
    the cells it is measured in turn with (its entry's, `dynamic_k.after_lead`)."""
    entry = cell.server_config["method_options"]["derived"]
    hours: dict[int, float] = defaultdict(float)
    for (level, _), h in tally.levels.items():
        hours[level] += h
    levels = tuple(sorted(hours))
    arm = next(a for a in dynamic_k.ARMS if cell.speculator.endswith(a))
    mechanism = math.log(rates.DYNAMIC_K_MECHANISM[gpu])
    found = schedules.get(entry)
    value = dict(zip(found.levels, found.value, strict=True)) if found else {}
    ratios = (() if arm == dynamic_k.STATIC_ARM else
              tuple(mechanism + (math.log(value.get(c, 1.0)) if arm == dynamic_k.DERIVED_ARM else 0)
                    for c in levels))
    rule = adaptive.cell_rule(config, cell) or adaptive.Rule()
    blocks = tuple(specs.point_blocks(cell, {"mode": "concurrency", "concurrency": c})
                   for c in levels)
    instances = len(cell.used_instances)
    after = dynamic_k.after_lead(turns or [cell], cell)
    return ArmSweep(entry, arm, levels, tuple(hours[c] for c in levels), cell.repeats, ratios,
                    rule, instances, blocks,
                    tuple(r % instances in after for r in range(cell.repeats)))


def stopping_entries(arms: list[ArmSweep]) -> set[int]:
    """The dynamic-K entries whose cells stop against their static k: split (a static k
    among them) and on server instances that give their repeats in order (`grid.stops_in_
    turn`; an entry's cells share their instances and repeats)."""
    return {a.entry for a in arms
            if a.arm == dynamic_k.STATIC_ARM and dynamic_k.turns_in_order(a.instances, a.repeats)}


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
        shares = {id(a): a.share(predicted) for a in mine if a.arm != dynamic_k.STATIC_ARM}
        lead = max(shares.values(), default=1.0) if mine[0].instances > 1 else 1.0
        spent += sum(a.hours * shares.get(id(a), lead) for a in mine)
    return spent


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


def predicted_sweeps(config: dict, cells: dict[str, specs.Cell], model: rates.CalibratedRates,
                     root: str | Path = ".") -> dict[str, list[PredictedSweep]]:
    """Per round, its speculative cells' levels grouped as the adaptive rule races them (a
    served cell's closed-loop levels and its open-loop rates apart, by baseline and speculator
    where the round's cells are interleaved or chained, else each cell alone; an offline or
    Transformers cell's batch sizes alone), with the speedups the request model predicts
    there (at `model`'s rates: the same model that projects the full design's hours)."""
    chain = bool((config.get("adaptive") or {}).get("chain"))
    groups: dict[tuple, list[specs.Cell]] = defaultdict(list)
    cards: dict[str, dict | None] = {}
    for cell in cells.values():
        base = cells.get(cell.baseline_cell_id or "")
        if cell.is_baseline or base is None:
            continue
        together = cell.engine == specs.SERVE and (bool(cell.group) or (chain and bool(cell.chain)))
        kinds = ([CLOSED] * bool(cell.concurrency) + [RATES] * bool(cell.request_rates)
                 if cell.engine == specs.SERVE else [BATCHES] * bool(cell.concurrency))
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
        blocks = tuple(specs.point_blocks(members[0], load) for load in loads)
        # (a point's time is one block's prompts: a whole repeat is its blocks')
        weights = tuple(sum(times[c.cell_id][i] for c in members) * blocks[i] / len(members)
                        for i in range(len(loads)))
        # (GPU-hours on a GPU, as the round's tally counts them: a tensor-parallel target's
        # every GPU)
        gpus = specs.cell_gpus(members[0].server_config) if model.device.gpu else 1
        hours = sum(weights) * len(members) * members[0].repeats * gpus / 3600
        levels = tuple(grid.level_value(load) for load in loads)
        out[members[0].round].append(PredictedSweep(surface, blocks, weights, levels, hours,
                                                    kind))
    return dict(out)


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
