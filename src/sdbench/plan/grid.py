"""From a validated config to the grid of cells (server config x workload).

A cell's id is a short stable hash of its canonical server config + workload, so a cell whose
definition did not change keeps its id (and its results) when other parts of the config change.
Every speculative cell names the vanilla cell it is compared with (`baseline_cell_id`): the same
target, server arguments and workload, without speculation.
"""

from __future__ import annotations

import math
from dataclasses import replace

from sdbench.plan.config import (
    TRANSFORMERS_METHODS,
    VANILLA,
    ConfigError,
)
from sdbench.plan.dynamic_k import (
    dynamic_k_repeats,
    paired_outside,
)
from sdbench.plan.settings import (
    SYNTHETIC,
    Engine,
    adaptive_on,
    settings,
    thawed,
)
from sdbench.plan.specs import (
    DEFAULT_SETTING,
    OFFLINE,
    SERVE,
    TRANSFORMERS,
    Cell,
    cell_id_of,
    config_blocks,
    server_config,
    workload_spec,
)


def round_cells(config: dict, round_name: str) -> list[Cell]:
    """One round's cells: per setting x target x workload, vanilla and every method x k.
    A setting's `server` arguments apply to both (vanilla under the same arguments is the
    baseline); its `speculative` keys only to the speculative cells. Settings that change
    only speculation share one vanilla cell."""
    spec = settings(config).rounds[round_name]
    loadgen = settings(config).loadgen
    cells: dict[str, Cell] = {}
    origin: dict[str, str] = {}

    def add(cell: Cell, where: str) -> None:
        if cell.cell_id in cells:
            if cell.is_baseline:
                return  # settings that change only speculation share their baseline
            raise ConfigError(
                f"{where} defines the same cell as {origin[cell.cell_id]} "
                f"(cell {cell.cell_id}: {cell.label}); remove one of them")
        cells[cell.cell_id] = cell
        origin[cell.cell_id] = where

    rates = dict(request_rates=spec.request_rates, burstiness=spec.burstiness)
    for setting in spec.settings:
        args, extra, name = thawed(setting.server), thawed(setting.speculative), setting.name
        at = "" if name == DEFAULT_SETTING else f", setting {name!r}"
        for target in spec.all_targets:
            for workload_name in spec.workloads:
                workload = workload_spec(config, workload_name)
                levels = workload_levels(config, workload_name, spec.concurrency)
                base_server = server_config(config, target, args=args)
                base_id = cell_id_of(base_server, workload)
                add(Cell(base_id, round_name, VANILLA, base_server, workload, None,
                         levels, loadgen.repeats, name if args else DEFAULT_SETTING,
                         **rates, instances=loadgen.server_instances),
                    f"{round_name} vanilla for target {target!r}, workload {workload_name!r}{at}")
                temperature = workload["loadgen"]["temperature"]
                for i, method in enumerate(spec.methods):
                    if (target not in spec.method_targets(method)
                            or not spec.measures(method, temperature)):
                        continue
                    # an acceptance sweep at the study's temperature only: its acceptance is
                    # set, so a sampled variant would measure the same line again
                    swept = (method.acceptance_sweep
                             if temperature == config["loadgen"]["temperature"] else ())
                    # (at its own `sweep_concurrency` levels where it names them)
                    swept_levels = tuple(c for c in levels if method.sweep_concurrency is None
                                         or c in method.sweep_concurrency)
                    for k, length in ((k, length) for k in method.k
                                      for length in (None, *swept)
                                      if length is None or length <= k + 1):
                        if length is not None and not swept_levels:
                            continue
                        options = {**thawed(method.options), **extra,
                                   **({} if length is None else synthetic_options(length))}
                        server = server_config(config, target, method.method, k, method.draft,
                                               options, args)
                        add(Cell(cell_id_of(server, workload), round_name,
                                 method.name if length is None else sweep_name(method.name,
                                                                               length),
                                 server, workload, base_id,
                                 levels if length is None else swept_levels,
                                 method.repeats if length is None else method.sweep_repeats,
                                 name, **rates, profile=method.profile,
                                 interleave=method.interleave,
                                 instances=method.server_instances,
                                 sweep_anchor=length is None and bool(swept)
                                 and bool(swept_levels)),
                            f"{round_name}.methods[{i}] (k={k}, target {target!r}, "
                            f"workload {workload_name!r}{at}"
                            + ("" if length is None else f", acceptance {length:g}") + ")")
    if round_name == "round1":
        for cell in offline_cells(config) + transformers_cells(config):
            add(cell, f"round1.{cell.engine}")
    blocks = config_blocks(config)
    return [replace(cell, blocks=blocks) for cell in with_baseline_repeats(
        list(cells.values()), dynamic_k_repeats(config) if round_name == "round1" else {})]


def workload_levels(config: dict, name: str, levels: tuple[int, ...]) -> tuple[int, ...]:
    """The round's concurrency levels a workload is measured at: those of its own
    `concurrency` list (e.g. a sampled variant at concurrency 1 only), else all."""
    own = config["workloads"][name].get("concurrency")
    return levels if own is None else tuple(c for c in levels if c in own)


# `methods[].acceptance_sweep`: a method's cells again with their drafts accepted by vLLM at a
# set mean acceptance length, named "<method> at acceptance <length>"
SWEEP_MARK = " at acceptance "


def synthetic_options(length: float) -> dict:
    """vLLM's speculative_config keys that accept drafts at mean acceptance length `length`."""
    return {"rejection_sample_method": SYNTHETIC, "synthetic_acceptance_length": length}


def sweep_name(method: str, length: float) -> str:
    return f"{method}{SWEEP_MARK}{length:g}"


def swept_method(speculator: str) -> str | None:
    """The method an acceptance-sweep cell's name belongs to (None: not a sweep cell)."""
    method, mark, _ = speculator.rpartition(SWEEP_MARK)
    return method if mark else None


def with_baseline_repeats(cells: list[Cell], extra: dict[str, int] | None = None) -> list[Cell]:
    """The cells with each baseline measured as often, and on as many server instances, as the
    most repeated (most spread) cell paired with it (a method's `repeats` and
    `server_instances`; `extra`: baseline id -> repeats of cells made later, the derived
    dynamic-K cells), so that every repeat of every speculative cell has its baseline repeat.
    A baseline nothing is paired with keeps its own."""
    wanted = dict(extra or {})
    spread: dict[str, int] = {}
    for cell in cells:
        if cell.baseline_cell_id is not None:
            base = cell.baseline_cell_id
            wanted[base] = max(cell.repeats, wanted.get(base, 0))
            spread[base] = max(cell.instances, spread.get(base, 0))
    return [replace(cell, repeats=wanted.get(cell.cell_id, cell.repeats),
                    instances=max(cell.instances, spread.get(cell.cell_id, 0)))
            if cell.is_baseline and cell.cell_id in wanted else cell for cell in cells]


def _engine_cells(config: dict, engine: str, section: Engine,
                  args: dict | None = None) -> list[Cell]:
    """Round 1 cells of another engine: vanilla and the chosen methods on each of their
    targets and the chosen workloads, each paired with that engine's vanilla cell."""
    round1 = settings(config).rounds["round1"]
    loadgen = settings(config).loadgen
    chosen = section.speculators
    methods = [m for m in round1.methods
               if (m.name in chosen if chosen is not None
                   else engine != TRANSFORMERS or m.method in TRANSFORMERS_METHODS)]
    targets = list(dict.fromkeys(t for m in methods for t in round1.method_targets(m)))
    cells = []
    for target in targets or round1.targets:
        for workload_name in section.workloads or round1.workloads:
            workload = workload_spec(config, workload_name)
            base_server = server_config(config, target, args=args, engine=engine)
            base_id = cell_id_of(base_server, workload)
            cells.append(Cell(base_id, "round1", VANILLA, base_server, workload, None,
                              section.batch_sizes, loadgen.repeats,
                              instances=loadgen.server_instances))
            for method in methods:
                if target not in round1.method_targets(method):
                    continue
                for k in section.k or method.k:
                    server = server_config(config, target, method.method, k, method.draft,
                                           thawed(method.options), args, engine)
                    cells.append(Cell(cell_id_of(server, workload), "round1", method.name,
                                      server, workload, base_id, section.batch_sizes,
                                      method.repeats, instances=method.server_instances))
    return cells


def offline_cells(config: dict) -> list[Cell]:
    """vLLM's offline engine (LLM.generate) over round 1's batch-size sweep."""
    section = settings(config).rounds["round1"].offline
    return [] if section is None else _engine_cells(config, OFFLINE, section)


def transformers_cells(config: dict) -> list[Cell]:
    """The Transformers reference at batch size 1 (assisted generation vs plain generate)."""
    section = settings(config).rounds["round1"].transformers
    return [] if section is None else _engine_cells(config, TRANSFORMERS, section,
                                                    {"dtype": section.dtype})


# the instance probe (`probe_cells`): its cells' round and role, and the mark in their workload
# (part of the cell id, so that a probe's points are never a study cell's)
PROBE_ROUND, PROBE_ROLE, PROBE_MARK = "probe", "instance probe", "instance_probe"


def is_probe(cell: Cell) -> bool:
    """Whether a cell is the instance probe's (`probe_cells`)."""
    return bool(cell.workload.get(PROBE_MARK))


def one_start(cell: Cell) -> bool:
    """Whether every repeat of a cell runs on one start of its configuration (not chained, one
    server instance): its points' own spread cannot see how much two starts differ."""
    return not cell.chain and cell.instances <= 1


def _probe_levels(levels: tuple[int, ...], wanted: tuple[int, ...] | None) -> tuple[int, ...]:
    if wanted is not None:
        return tuple(c for c in levels if c in wanted)
    return tuple(sorted({min(levels), max(levels)})) if levels else ()


def probe_cells(config: dict, cells: list[Cell]) -> list[Cell]:
    """The instance probe's cells (config `instance_probe`): per engine, target and method
    (what the noise model pools: `analyze.noise.CLASS`) whose cells all run on one start of
    their configuration (`one_start`, as `all_cells` plans them), one of its cells (its first
    speculator's, its round's first workload, the k nearest its method's middle, the default
    setting; not a what-if's, not a sweep's) and that cell's baseline again, each on `starts`
    server instances with `repeats` runs on each (repeat r on instance r mod starts: the first
    instance shares the cells' own start), at the probe's levels, in a workload of their own
    (marked, so their ids and points are their own), interleaved as the cell is, in round
    "probe". Not measured under the adaptive rule (`adaptive.cell_rule`)."""
    spec = settings(config).instance_probe
    if not spec.enabled:
        return []
    planned = _grouped(config, cells)
    by_id = {cell.cell_id: cell for cell in planned}
    order = {name: i for i, name in enumerate(config["workloads"])}

    def key_of(cell: Cell) -> tuple:
        return (cell.engine, cell.server_config["target"]["name"], cell.server_config["method"])

    # (a method some cell of which runs on several starts: its class sees them already)
    seen = {key_of(c) for c in planned if not c.is_baseline and not one_start(c)}
    candidates: dict[tuple, list[Cell]] = {}
    for cell in planned:
        if (cell.is_baseline or cell.baseline_cell_id not in by_id or not one_start(cell)
                or key_of(cell) in seen
                or cell_role(config, cell) == WHAT_IF or swept_method(cell.speculator)
                or cell.setting != DEFAULT_SETTING or not cell.concurrency
                or (spec.speculators is not None and cell.speculator not in spec.speculators)):
            continue
        candidates.setdefault(key_of(cell), []).append(cell)
    out: dict[str, Cell] = {}
    for group in candidates.values():
        first = group[0].speculator
        group = [c for c in group if c.speculator == first]
        ks = sorted({c.server_config["num_speculative_tokens"] or 0 for c in group})
        middle = ks[(len(ks) - 1) // 2]
        pick = min(group, key=lambda c: (order.get(c.workload["name"], 0),
                                         abs((c.server_config["num_speculative_tokens"] or 0)
                                             - middle), c.cell_id))
        baseline = by_id[pick.baseline_cell_id]
        levels = _probe_levels(pick.concurrency, spec.levels)
        if not levels:
            continue
        per = spec.repeats or pick.repeats
        workload = {**pick.workload, "name": f"{pick.workload['name']} (instance probe)",
                    PROBE_MARK: True}
        common = dict(round=PROBE_ROUND, workload=workload, concurrency=levels,
                      request_rates=(), repeats=spec.starts * per, instances=spec.starts,
                      group=(), chain=(), blocks=1, sweep_anchor=False,
                      setting=DEFAULT_SETTING, profile=None)
        base = replace(baseline, cell_id=cell_id_of(baseline.server_config, workload),
                       interleave=False, **common)
        out.setdefault(base.cell_id, base)
        probe = replace(pick, cell_id=cell_id_of(pick.server_config, workload),
                        baseline_cell_id=base.cell_id, **common)
        out[probe.cell_id] = probe
    return list(out.values())


def _grouped(config: dict, cells: list[Cell]) -> list[Cell]:
    """`cells` with their interleave groups and chains, as `all_cells` plans them."""
    member = {cell_id: tuple(ids) for ids in interleave_groups(cells).values()
              for cell_id in ids}
    spread = {cell.cell_id: cell.instances for cell in cells}
    cells = [replace(cell, group=member.get(cell.cell_id, ()),
                     instances=spread[member[cell.cell_id][0]] if cell.cell_id in member
                     else cell.instances)
             for cell in cells]
    return chain_cells(config, cells)


def _cells_and_rounds(config: dict) -> dict[str, tuple[Cell, list[str]]]:
    """cell id -> (the cell as the first round defines it, every round that uses it; the
    instance probe's cells in round "probe", `probe_cells`)."""
    found = _round_cells(config)
    for cell in probe_cells(config, [cell for cell, _ in found.values()]):
        found.setdefault(cell.cell_id, (cell, [PROBE_ROUND]))
    return found


def _round_cells(config: dict) -> dict[str, tuple[Cell, list[str]]]:
    """cell id -> (the cell as the first round defines it, every round that uses it)."""
    found: dict[str, tuple[Cell, list[str]]] = {}
    for round_name in settings(config).rounds:
        for cell in round_cells(config, round_name):
            first, rounds = found.setdefault(cell.cell_id, (cell, []))
            rounds.append(round_name)
            # a baseline two rounds pair differently: the most of either
            if (cell.repeats, cell.instances) != (first.repeats, first.instances):
                found[cell.cell_id] = (replace(
                    first, repeats=max(cell.repeats, first.repeats),
                    instances=max(cell.instances, first.instances)), rounds)
    return found


def all_cells(config: dict) -> list[Cell]:
    """Every round's cells, each once: a cell two rounds share (the same server config and
    workload) is measured once and listed under the first (see `cell_rounds`); cells measured
    together carry their `group` (see `interleave_groups`), and a cell measured in turn with
    its baseline runs on as many server instances as the baseline (each instance of the
    baseline measures its repeats beside the cell's same repeats)."""
    return _grouped(config, [cell for cell, _ in _cells_and_rounds(config).values()])


def chainable(cell: Cell, baseline: Cell) -> bool:
    """Whether a speculative cell measured on its own can be chained with its baseline: a
    served cell not interleaved, on one server instance, at its baseline's levels and repeats
    (so that their stages hold the same points), without loadgen.duration_s."""
    return (cell.engine == SERVE and baseline.engine == SERVE and not cell.group
            and not baseline.group and cell.instances == 1 and baseline.instances == 1
            and (cell.concurrency, cell.request_rates, cell.repeats)
            == (baseline.concurrency, baseline.request_rates, baseline.repeats)
            and cell.workload["loadgen"].get("duration_s") is None)


def chain_cells(config: dict, cells: list[Cell]) -> list[Cell]:
    """The cells with their `chain` where the adaptive rule's `chain` is on: every
    speculative cell measured on its own that `chainable` allows, and the baseline of any
    such cell. Each level's depth is its depth in the rule's level tree over the cell's sorted
    levels (`level_tree`; all 0 without `bisect`): its concurrency levels', then its open-loop
    request rates' (a tree of their own), as `measure.stopping.GroupStops` builds them."""
    section = config.get("adaptive") or {}
    if not adaptive_on(section) or not section.get("chain"):
        return cells
    coarse, bisect = int(section.get("coarse", 3)), bool(section.get("bisect", True))
    by_id = {cell.cell_id: cell for cell in cells}
    chained = {cell.cell_id for cell in cells
               if cell.baseline_cell_id in by_id and not cell.is_baseline
               and chainable(cell, by_id[cell.baseline_cell_id])}
    chained |= {by_id[c].baseline_cell_id for c in chained}

    def depths(values: tuple) -> tuple[int, ...]:
        levels = sorted(values)
        tree = level_tree(len(levels), coarse, bisect)
        return tuple(tree[levels.index(v)][0] for v in values)

    return [replace(cell, chain=depths(cell.concurrency) + depths(cell.request_rates) or (0,))
            if cell.cell_id in chained else cell for cell in cells]


def coarse_levels(count: int, coarse: int = 3) -> list[int]:
    """Indices of the `coarse` levels of `count` a sweep measures first: the lowest, the
    highest, and the rest evenly spaced (by index) between them."""
    if count <= coarse:
        return list(range(count))
    return sorted({int(math.floor(i * (count - 1) / (coarse - 1) + 0.5)) for i in range(coarse)})


def level_tree(count: int, coarse: int = 3, bisect: bool = True
               ) -> dict[int, tuple[int, int | None, int | None]]:
    """Every level index of `count` -> (its depth, the lower and upper level that decide
    whether it is measured): the coarse levels depth 0 (measured, no neighbours), then each
    level `bisect` would add between two neighbours one deeper than the deeper of them. A
    level is measured iff both its neighbours are and their decisions differ. Without
    `bisect` every level is depth 0."""
    if not bisect:
        return {i: (0, None, None) for i in range(count)}
    tree: dict[int, tuple[int, int | None, int | None]] = {
        i: (0, None, None) for i in coarse_levels(count, coarse)}
    pairs = [(a, b, 1) for a, b in zip(sorted(tree), sorted(tree)[1:], strict=False)]
    while pairs:
        a, b, depth = pairs.pop()
        if b - a > 1:
            mid = (a + b) // 2
            tree[mid] = (depth, a, b)
            pairs += [(a, mid, depth + 1), (mid, b, depth + 1)]
    return tree


def level_value(load: dict) -> float:
    """A load point's level: its concurrency (batch size), or its request rate."""
    return load["request_rate"] if load["mode"] == "rate" else load["concurrency"]


def load_level(load: dict) -> tuple[bool, float]:
    """A load point's level told apart from the other kind's (a request rate of 4 per second
    is not concurrency 4): (whether it is an open-loop rate, its `level_value`)."""
    return load["mode"] == "rate", level_value(load)


def chain_kept(config: dict, cells: dict[str, Cell]) -> dict[str, set]:
    """chained baseline id -> the levels (`load_level`) at which a cell outside its chain is
    paired with it (`paired_outside`): the baseline measures every repeat there
    (`measure.groups.paired_elsewhere`)."""
    chained = {c.cell_id for c in cells.values() if c.chain}
    kept = {base: {load_level(load) for cell in paired_outside(config, cells, base, chained)
                   for load in cell.load_points()}
            for base in chained if cells[base].is_baseline}
    return {base: levels for base, levels in kept.items() if levels}


def interleave_groups(cells: list[Cell]) -> dict[str, list[str]]:
    """group id (its baseline's cell id) -> the cell ids measured together in one job: the
    baseline, then every cell of an `interleave` method paired with it. Their servers are up
    side by side and take the points in turn (`sdbench.measure.cell.run_group`), so that a speedup's
    two sides are measured seconds apart, not minutes: a host whose speed drifts (a shared or
    throttling machine) then moves both alike."""
    groups: dict[str, list[str]] = {}
    for cell in cells:
        if cell.interleave and cell.baseline_cell_id is not None:
            groups.setdefault(cell.baseline_cell_id, [cell.baseline_cell_id]).append(
                cell.cell_id)
    return groups


def cell_rounds(config: dict) -> dict[str, list[str]]:
    """cell id -> the rounds that use it (reports of each round show it)."""
    return {cell_id: rounds for cell_id, (_, rounds) in _cells_and_rounds(config).items()}


def round_targets(config: dict) -> list[str]:
    """Targets of every round (a method's own targets included), in order, once."""
    return list(dict.fromkeys(t for spec in settings(config).rounds.values()
                              for t in spec.all_targets))


def full_precision(config: dict, name: str) -> str | None:
    """The full-precision model a quantized one is compared with (None if not quantized)."""
    model = config["models"][name]
    if not model.get("quantization"):
        return None
    if model["source"]["kind"] == "quantize":
        return model["source"]["model"]
    return model.get("full_precision")


# model sources whose weights are not a trained draft's or target's: built by the workflow to
# check the pipeline (random or untrained heads, truncated drafts, the calibration pair)
CHECK_SOURCES = ("random_init", "random_head", "eagle_head", "truncate", "deepen")
DEPLOYABLE, CHECK, WHAT_IF = "deployable", "pipeline check", "what-if"


def built_for_checks(config: dict, model: str | None) -> bool:
    """Whether a model's weights were built by the workflow rather than trained (a quantized
    copy is what it was made from)."""
    source = ((config.get("models") or {}).get(model) or {}).get("source") or {}
    if source.get("kind") == "quantize":
        return built_for_checks(config, source.get("model"))
    return source.get("kind") in CHECK_SOURCES


def cell_role(config: dict, cell: Cell) -> str:
    """What a cell's numbers can decide: "instance probe" (its starts measure the spread
    between starts, `probe_cells`: no verdict of its own), "what-if" (drafts accepted at a set
    rate: what a method would give), "pipeline check" (its target or draft built by the
    workflow: the calibration pair, untrained heads, truncated drafts), else "deployable"."""
    if is_probe(cell):
        return PROBE_ROLE
    server = cell.server_config
    if (server.get("method_options") or {}).get("rejection_sample_method") == "synthetic":
        return WHAT_IF
    models = [server["target"]["name"], (server.get("draft") or {}).get("name")]
    return CHECK if any(built_for_checks(config, m) for m in models) else DEPLOYABLE


def summary_index(config: dict) -> dict:
    """What the summary takes from the current config: rounds, setting, method name and
    acceptance source (`methods[].acceptance_source`) of every cell, each target's
    full-precision counterpart, and the latency targets (`slo`)."""
    typed = settings(config)
    sources = {m.name: m.acceptance_source for r in typed.rounds.values() for m in r.methods
               if m.acceptance_source}
    return {"cells": {cell_id: {"rounds": rounds, "setting": cell.setting,
                                "speculator": cell.speculator,
                                "acceptance_source": sources.get(cell.speculator),
                                "role": cell_role(config, cell)}
                      for cell_id, (cell, rounds) in _cells_and_rounds(config).items()},
            "targets": {t: {"full_precision": full_precision(config, t)}
                        for t in round_targets(config)},
            # latency targets: the summary computes each one's goodput (sdbench.analyze.slo)
            "slo": config.get("slo") or {}}


def cells_by_id(config: dict) -> dict[str, Cell]:
    return {cell.cell_id: cell for cell in all_cells(config)}


