"""Dynamic K: the round 1 methods whose k schedule is derived from their static k's measurements
(`dynamic_k:`), the derived cells (placeholders before the schedule exists), their arms measured
in turn, and the cells paired with a baseline outside its group."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sdbench.plan.settings import (
    Speculator,
    settings,
    thawed,
)
from sdbench.plan.specs import (
    SERVE,
    Cell,
    cell_id_of,
    config_blocks,
    server_config,
    workload_spec,
)


def paired_outside(config: dict, cells: dict[str, Cell], baseline_id: str,
                   inside: set[str]) -> list[Cell]:
    """The cells paired with a baseline but measured outside `inside` (its group, its chain):
    the others paired with it, and the derived dynamic-K cells (placeholders) it is the
    baseline of where they are measured without the static k beside them (`split: false`:
    their net is against round 1's best static k, each repeat's speedup over this baseline's
    same repeat). They read its finished records later, so it measures every repeat of
    theirs. A split schedule's cells pair among themselves, repeat by repeat
    (`analyze.analysis.dynamic_k_comparison`), and need none of its repeats."""
    return [c for c in cells.values()
            if c.baseline_cell_id == baseline_id and c.cell_id not in inside] + [
        dynamic_k_placeholder(config, spec) for spec in dynamic_k_specs(config)
        if dynamic_k_baseline(config, spec) == baseline_id and not spec.get("split", True)]


def dynamic_k_specs(config: dict) -> list[dict]:
    """The derived dynamic-K cells: one per round 1 target x listed workload x speculator.
    Plain data (a Snakemake job's params; `method`: the method's config entry, so that a
    changed method reruns its derived cell), read as typed with `dynamic_k_method`."""
    round1 = settings(config).rounds["round1"]
    entries = dict(zip([m.name for m in round1.methods], config["round1"]["methods"],
                       strict=True))
    return [{"target": target, "workload": workload, "speculator": entry.speculator,
             "method": entries[entry.speculator], "repeats": entry.repeats,
             "split": entry.split, "model_runners": list(entry.model_runners),
             # the entry's server instances, else as many as the method's own cells (the
             # baseline gets as many)
             "instances": entry.server_instances or method.server_instances}
            for entry in settings(config).dynamic_k
            for method in [round1.method(entry.speculator)]
            for target in round1.method_targets(method)
            for workload in entry.workloads or round1.workloads]


def dynamic_k_method(config: dict, spec: dict) -> Speculator:
    """The round 1 method a derived dynamic-K cell's schedule is for."""
    return settings(config).rounds["round1"].method(spec["speculator"])


def dynamic_k_baseline(config: dict, spec: dict) -> str:
    """The vanilla cell a derived dynamic-K cell is paired with: round 1's for its target
    and workload."""
    return cell_id_of(server_config(config, spec["target"]),
                      workload_spec(config, spec["workload"]))


def dynamic_k_sources(spec: dict, cells: dict[str, Cell]) -> list[Cell]:
    """The round 1 cells a derived dynamic-K schedule is derived from: the served cells of its
    method and of no speculation on its target and workload."""
    return [c for c in cells.values()
            if c.round == "round1" and c.engine == SERVE
            and c.server_config["target"]["name"] == spec["target"]
            and c.workload["name"] == spec["workload"]
            and c.speculator in ("vanilla", spec["speculator"])]


def dynamic_k_repeats(config: dict) -> dict[str, int]:
    """baseline cell id -> the most repeats of a derived dynamic-K cell paired with it."""
    out: dict[str, int] = {}
    for spec in dynamic_k_specs(config):
        base = dynamic_k_baseline(config, spec)
        out[base] = max(out.get(base, 0), spec["repeats"])
    return out


# the cell id of a derived dynamic-K cell before its schedule is known (listings)
DERIVED_ID = "derived"


def dynamic_k_placeholder(config: dict, spec: dict) -> Cell:
    """The derived cell before its schedule is known (for listings): id 'derived'."""
    method = dynamic_k_method(config, spec)
    server = server_config(config, spec["target"], method.method, None, method.draft,
                           thawed(method.options))
    return Cell(DERIVED_ID, "round3", f"{spec['speculator']}{DERIVED_ARM}", server,
                workload_spec(config, spec["workload"]), None,
                settings(config).rounds["round1"].concurrency, spec["repeats"],
                instances=spec["instances"], blocks=config_blocks(config))


# The three servers a derived dynamic-K schedule is measured with, taking turns (`dynamic_k_
# arms`): report-name suffix of each. The static k runs without the dynamic mechanism, the
# constant schedule (that k at every batch size) through it, then the derived schedule.
STATIC_ARM, CONSTANT_ARM, DERIVED_ARM = "+static-k", "+constant-k", "+dynamic-k"


ARMS = (STATIC_ARM, CONSTANT_ARM, DERIVED_ARM)


# in the environment of the three servers (it changes nothing in vLLM): the static k's server
# is round 1's, measured again beside the others, and needs an identity (cell id, point cache,
# server logs) of its own
ARM_MARK = {"SDBENCH_MEASURED_WITH": "dynamic-k schedule"}


# `dynamic_k[].model_runners`: the arms again under each named vLLM model runner, by this
# variable; their report names carry RUNNER_TAG + the runner before the arm's suffix
# ("eagle@v2+constant-k"), so that each runner's arms are split among themselves
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


RUNNER_VALUES = {"v1": "0", "v2": "1"}


RUNNER_TAG = "@"


def runner_method(speculator: str) -> tuple[str, str | None]:
    """(round 1 method name, model runner or None) of a derived cell's name less its arm."""
    method, tag, runner = speculator.rpartition(RUNNER_TAG)
    return (method, runner) if tag and runner in RUNNER_VALUES else (speculator, None)


def _runners(spec: dict) -> list[str | None]:
    return list(spec.get("model_runners") or [None])


def dynamic_k_placeholders(config: dict, spec: dict) -> list[Cell]:
    """The cells a derived schedule will be measured with, before it is known (for estimates:
    `dynamic_k_arms`' three, each with a configuration of its own and the method's largest k;
    two where the schedule turns out constant; the derived one alone without `split`)."""
    placeholder = dynamic_k_placeholder(config, spec)
    server = placeholder.server_config
    return [replace(placeholder, cell_id=f"derived{tag}{arm}",
                    speculator=f"{spec['speculator']}{tag}{arm}",
                    server_config={**server, "num_speculative_tokens": max(
                        dynamic_k_method(config, spec).k),
                        "env": {**server["env"], **ARM_MARK, **_runner_env(runner)},
                        "method_options": {**server["method_options"], "arm": arm}})
            for runner in _runners(spec) for tag in [_runner_tag(runner)]
            for arm in (ARMS if spec.get("split", True) else (DERIVED_ARM,))]


def _runner_tag(runner: str | None) -> str:
    return "" if runner is None else f"{RUNNER_TAG}{runner}"


def _runner_env(runner: str | None) -> dict[str, str]:
    return {} if runner is None else {RUNNER_ENV: RUNNER_VALUES[runner]}


def constant_schedule(schedule: list[list[int]], k: int) -> list[list[int]]:
    """`k` at every batch size the derived schedule covers, in the same form."""
    return [[1, schedule[-1][1], k]]


def alike_levels(schedule: list[list[int]], k: int, levels) -> list[int]:
    """The closed-loop levels at which a schedule runs `k` at every batch size up to the level
    (a closed loop at concurrency c never batches more than c requests; vLLM carries the last
    range on): there the schedule serves exactly as `k`'s constant schedule does."""
    return [c for c in levels if all(step == k for low, _, step in schedule if low <= c)]


def turn_order(cells: list[Cell]) -> list[tuple[Cell, int]]:
    """(cell, server instance) in the order `measure.cell.measure_in_turns` runs them:
    instance 0 of every cell, then instance 1, ..., the cells' order rotating with the
    instance so that none is always measured first."""
    most = max(len(cell.used_instances) for cell in cells)
    return [(cell, i) for i in range(most)
            for cell in cells[i % len(cells):] + cells[:i % len(cells)]
            if i in cell.used_instances]


def turn_group(cells: list[Cell], cell: Cell) -> list[Cell]:
    """The cells of `cell`'s model runner among cells measured in turn (`dynamic_k_arms`:
    each runner's static k, then its others): those that stop against that static k."""
    groups: list[list[Cell]] = []
    for other in cells:
        if other.speculator.endswith(STATIC_ARM) or not groups:
            groups.append([])
        groups[-1].append(other)
    return next(g for g in groups if cell in g)


def after_lead(cells: list[Cell], cell: Cell) -> frozenset[int]:
    """The server instances at which `cell`'s turn comes after its runner's static k's
    (`turn_order`, `turn_group`): there the static k's repeat is measured first, so `cell`'s
    looks inside that repeat (past its first block of prompts) can read it
    (`measure.stopping.turn_stops`). None for the static k itself."""
    group = turn_group(cells, cell)
    lead = next((c for c in group if c.speculator.endswith(STATIC_ARM)), None)
    if lead is None or cell == lead:
        return frozenset()
    order = turn_order(cells)
    return frozenset(i for i in cell.used_instances
                     if (lead, i) in order and order.index((lead, i)) < order.index((cell, i)))


def stops_in_turn(cells: list[Cell]) -> bool:
    """Whether cells measured in turn (`turn_order`: instance by
    instance) can stop under the adaptive rule against each other: every cell's repeats
    before r are measured before any cell's repeat r, so that a look before r reads all of
    them (`measure.stopping.turn_stops`): each whole repeat on an instance of its own, or all
    of a cell's on one (each cell's turn then whole, one after another: `turns_in_order`)."""
    return all(turns_in_order(len(c.used_instances), c.repeats) for c in cells)


def turns_in_order(instances: int, repeats: int) -> bool:
    """Whether `repeats` repeats taking turns on `instances` server instances (repeat r on
    instance r mod n, instance by instance) come in order: one instance, or one a repeat."""
    return instances in (1, repeats)


def dynamic_k_cell(config: dict, spec: dict, schedule: list[list[int]],
                   arm: str = DERIVED_ARM, runner: str | None = None,
                   levels: list[int] | None = None) -> Cell:
    """A cell that measures a num_speculative_tokens_per_batch_size schedule (Round 3), paired
    with the same vanilla cell as round 1's; for `arm` STATIC_ARM the (constant) schedule's k
    served as a static k, without the dynamic mechanism; under vLLM's model `runner` where one
    is named (`RUNNER_VALUES`); at round 1's concurrency levels, or at `levels`."""
    method = dynamic_k_method(config, spec)
    if arm == STATIC_ARM:
        k, options = schedule[0][2], thawed(method.options)
    else:
        k = max([entry[2] for entry in schedule] + [min(method.k)])
        options = {**thawed(method.options), "num_speculative_tokens_per_batch_size": schedule}
    server = server_config(config, spec["target"], method.method, k, method.draft, options)
    server = {**server, "env": {**server["env"], **ARM_MARK, **_runner_env(runner)}}
    workload = workload_spec(config, spec["workload"])
    return Cell(cell_id_of(server, workload), "round3",
                f"{spec['speculator']}{_runner_tag(runner)}{arm}", server,
                workload, dynamic_k_baseline(config, spec),
                settings(config).rounds["round1"].concurrency if levels is None else tuple(levels),
                spec["repeats"], instances=spec["instances"], blocks=config_blocks(config))


def dynamic_k_arms(config: dict, spec: dict, schedule: list[list[int]],
                   static_k: int) -> list[Cell]:
    """The cells a derived schedule is measured with, in turn: the best static k of round 1
    (`static_k`), that k as a constant schedule through the dynamic mechanism, and the derived
    schedule; a derived schedule that is that constant one is measured once (its cell is the
    derived one), and the constant schedule only at the levels where the derived one differs
    from it (`alike_levels`: at the others the derived cell serves as it would). Without the
    spec's `split`: the derived schedule alone. With `model_runners`: those cells under each
    runner, one runner's after the other's."""
    arms = []
    levels = settings(config).rounds["round1"].concurrency
    differs = [c for c in levels if c not in alike_levels(schedule, static_k, levels)]
    for runner in _runners(spec):
        if not spec.get("split", True):
            arms.append(dynamic_k_cell(config, spec, schedule, runner=runner))
            continue
        constant = constant_schedule(schedule, static_k)
        arms.append(dynamic_k_cell(config, spec, constant, STATIC_ARM, runner))
        if differs:  # (none where the schedule is the constant one)
            arms.append(dynamic_k_cell(config, spec, constant, CONSTANT_ARM, runner, differs))
        arms.append(dynamic_k_cell(config, spec, schedule, runner=runner))
    return arms


def read_dynamic_k_arms(config: dict, spec: dict, schedule_file: str | Path) -> list[Cell]:
    """The cells of a derived schedule file (`dynamic_k_arms`, the derived one last); the file
    must be the one for this spec under this config (the cell ids it names are the ones the
    config gives now)."""
    entry = json.loads(Path(schedule_file).read_text())
    arms = dynamic_k_arms(config, spec, entry["schedule"], entry.get("static_k", -1))
    if entry.get("arms") != [cell.cell_id for cell in arms]:
        raise ValueError(f"{schedule_file}: cells {entry.get('arms')!r} are not the cells this "
                         f"config makes of its schedule ({[c.cell_id for c in arms]}); derive "
                         "it again (delete the file)")
    return arms
