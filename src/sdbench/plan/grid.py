"""From a validated config to the grid of cells (server config x workload).

A cell's id is a short stable hash of its canonical server config + workload, so a cell whose
definition did not change keeps its id (and its results) when other parts of the config change.
Every speculative cell names the vanilla cell it is compared with (`baseline_cell_id`): the same
target, server arguments and workload, without speculation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path

from sdbench.data.builders import BUCKETED, sent_in_order
from sdbench.ids import short_hash
from sdbench.layout import model_folder, processed_path
from sdbench.plan.config import (
    CROSS_REQUEST_STATE,
    DERIVED_KINDS,
    TRANSFORMERS_METHODS,
    VANILLA,
    ConfigError,
)
from sdbench.plan.settings import (
    SYNTHETIC,
    Engine,
    Speculator,
    adaptive_on,
    settings,
    thawed,
)

DEFAULT_SETTING = "default"
# how a cell measures: a vLLM server + vLLM's load generator (the default, not in the server
# config so that such cells keep their ids), vLLM's offline engine, or Transformers at batch 1
SERVE, OFFLINE, TRANSFORMERS = "serve", "offline", "transformers"


def engine_of(server: dict) -> str:
    return server.get("engine", SERVE)


def config_id(server_config: dict) -> str:
    """A server configuration's short stable id (its canonical JSON's hash)."""
    return short_hash({"server_config": server_config})


@dataclass(frozen=True)
class Cell:
    cell_id: str
    round: str
    speculator: str  # report label: "vanilla", "ngram", "draft_model", or the configured name
    server_config: dict
    workload: dict
    baseline_cell_id: str | None
    concurrency: tuple[int, ...] = field(default=())  # batch sizes for offline cells
    repeats: int = 1
    setting: str = DEFAULT_SETTING  # the round's server-parameter setting (not in the identity)
    request_rates: tuple[float, ...] = field(default=())  # open-loop points (serve cells)
    burstiness: float = 1.0
    profile: str | None = None  # "nsys": servers run under Nsight Systems
    # the method's `interleave`: measured point by point in turn with its baseline, both
    # servers up, in one job (not in the identity); `group` is filled by `all_cells`: the ids of
    # the cells measured together (the baseline first), empty for a cell measured on its own
    interleave: bool = False
    group: tuple[str, ...] = field(default=())
    # fresh servers of its configuration the repeats are spread over (repeat r in instance
    # r mod n): the method's `server_instances`, else loadgen's; a baseline takes the most of
    # the cells paired with it, an interleaved cell its baseline's. Not in the identity
    instances: int = 1
    # the adaptive rule's `blocks`: the most blocks of prompts a repeat is split into at a
    # low closed-loop concurrency (`point_blocks`; 1 without the rule). Not in the identity
    blocks: int = 1
    # a method's real cell whose acceptance sweep (`acceptance_sweep`) runs beside it: its point
    # anchors the sweep's break-even line (`analyze.acceptance.break_even`). Not in the identity
    sweep_anchor: bool = False
    # under the adaptive rule's `chain` (`chain_cells`): the depth of each of its concurrency
    # levels (in `concurrency`'s order), then of each open-loop request rate (in
    # `request_rates`' order), in the rule's level tree of each, and its points are measured
    # in stages, one session (server start) each: depth by depth, repeat by repeat (all of a
    # repeat's blocks), each stage after its pair's or baseline's stage before it
    # (`stage_of`). Empty: not chained. Not in the identity
    chain: tuple[int, ...] = field(default=())

    @property
    def engine(self) -> str:
        return engine_of(self.server_config)

    @cached_property
    def config_id(self) -> str:
        """Its server configuration's id (`config_id`), hashed once per cell."""
        return config_id(self.server_config)

    def stage_of(self, repeat: int, load: dict) -> int:
        """A chained cell's stage of `repeat` at `load`: depth x repeats + the whole repeat
        (an open-loop rate at its depth in the rates' own tree)."""
        index = (len(self.concurrency) + self.request_rates.index(load["request_rate"])
                 if load["mode"] == "rate" else self.concurrency.index(load["concurrency"]))
        return self.chain[index] * self.repeats + repeat // point_blocks(self, load)

    def instance_of(self, repeat: int, load: dict | None = None) -> int:
        """The server instance that measures `repeat` (at `load`: a chained cell's stage,
        which needs it): whole repeat r on instance r mod n, its blocks of prompts
        (`point_blocks`) together."""
        if self.chain:
            if load is None:
                raise ValueError(f"cell {self.cell_id}: a chained cell's instance needs the load")
            return self.stage_of(repeat, load)
        blocks = 1 if load is None else point_blocks(self, load)
        return repeat // blocks % self.instances

    def instance_repeats(self, instance: int, load: dict | None = None) -> list[int]:
        """The repeats server instance `instance` measures (at `load`: its blocks)."""
        return [r for r in self.load_repeats(load) if self.instance_of(r, load) == instance]

    @cached_property
    def _points_of(self) -> dict[int, list[tuple[int, int]]]:
        """instance -> (load index, repeat) of every point it measures (once a cell)."""
        out: dict[int, list[tuple[int, int]]] = {}
        for i, load in enumerate(self.load_points()):
            for r in self.load_repeats(load):
                out.setdefault(self.instance_of(r, load), []).append((i, r))
        return out

    def instance_points(self, instance: int) -> list[tuple[int, dict, int]]:
        """(load index, load, repeat) of every point server instance `instance` measures, in
        the order of `load_points` and then of the repeats."""
        loads = self.load_points()
        return [(i, loads[i], r) for i, r in self._points_of.get(instance, ())]

    def load_repeats(self, load: dict | None = None) -> range:
        """The repeat indices of a point at `load`: `repeats`, each split into the point's
        blocks of prompts (`point_blocks`), so that a point has repeats x blocks of them."""
        return range(self.repeats * (1 if load is None else point_blocks(self, load)))

    @property
    def used_instances(self) -> range:
        """The instances that measure something (no more than there are repeats)."""
        if self.chain:
            return range((max(self.chain) + 1) * self.repeats)
        return range(min(self.instances, self.repeats))

    def load_points(self) -> list[dict]:
        """The cell's load points: closed-loop concurrency (batch size offline), then
        open-loop request rates."""
        mode = "concurrency" if self.engine == SERVE else "batch"
        return ([{"mode": mode, "concurrency": c} for c in self.concurrency]
                + [{"mode": "rate", "request_rate": r, "burstiness": self.burstiness}
                   for r in self.request_rates])

    @property
    def is_baseline(self) -> bool:
        return self.server_config["method"] == VANILLA

    @property
    def label(self) -> str:
        k = self.server_config["num_speculative_tokens"]
        name = self.speculator if k is None else f"{self.speculator} k={k}"
        if self.engine != SERVE:
            name += f" ({self.engine})"
        if self.setting != DEFAULT_SETTING:
            name += f" [{self.setting}]"
        return f"{name} | {self.server_config['target']['name']} | {self.workload['name']}"

    def to_dict(self) -> dict:
        # shallow: the nested dicts are shared, not copied (asdict's deep copy took ~0.4 ms a
        # cell, most of a 2,000-cell dry run's params); callers only read them
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["concurrency"] = list(self.concurrency)
        out["request_rates"] = list(self.request_rates)
        out["group"] = list(self.group)
        out["chain"] = list(self.chain)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Cell:
        return cls(**{**data, "concurrency": tuple(data["concurrency"]),
                      "request_rates": tuple(data.get("request_rates", ())),
                      "group": tuple(data.get("group", ())),
                      "chain": tuple(data.get("chain", ()))})


def repeat_prompts(cell: Cell, load: dict) -> int:
    """Prompts a whole repeat of a point may send: the workload's num_prompts, and with
    loadgen.prompts_per_concurrency at most that many per unit of concurrency at a closed-loop
    point (loadgen.duration_s sends fewer where they last longer: `sdbench.measure.cell`)."""
    available = cell.workload["num_prompts"]
    per = cell.workload["loadgen"].get("prompts_per_concurrency")
    if per and load["mode"] == "concurrency":
        available = min(available, per * load["concurrency"])
    return available


# a block of prompts holds at least this many waves of its concurrency (4 concurrent requests
# take 16 prompts): fewer, and the ramp-up and the last stragglers weigh on its throughput
BLOCK_WAVES = 4


def point_blocks(cell: Cell, load: dict) -> int:
    """How many blocks of prompts each repeat of a point is split into under the adaptive
    rule (`Cell.blocks` at most): at a closed-loop level of a served cell, as many as keep
    `BLOCK_WAVES` waves of its concurrency in a block (1 elsewhere, and with
    loadgen.duration_s). A block is a repeat of its own with its own seed, so a pair's two sides
    send the same prompts in it, and the rule can stop a point after a block, not a repeat."""
    if (cell.blocks <= 1 or load["mode"] != "concurrency" or cell.engine != SERVE
            or cell.workload["loadgen"].get("duration_s") is not None):
        return 1
    waves = repeat_prompts(cell, load) // (BLOCK_WAVES * load["concurrency"])
    return max(1, min(cell.blocks, waves))


def point_prompts(cell: Cell, load: dict) -> int:
    """Prompts one repeat of a point sends: a whole repeat's (`repeat_prompts`), or one
    block's where the adaptive rule splits it (`point_blocks`)."""
    return repeat_prompts(cell, load) // point_blocks(cell, load)


def config_blocks(config: dict) -> int:
    """The adaptive rule's `blocks` where the rule is on, else 1."""
    section = config.get("adaptive") or {}
    return int(section.get("blocks", 1)) if adaptive_on(section) else 1


def model_dir(config: dict, name: str) -> str:
    """Directory the server loads model `name` from (built/downloaded by the models rule)."""
    source = config["models"][name]["source"]
    if source["kind"] == "path":
        return source["path"]
    return model_folder(name)


# source keys that change no checkpoint (kept out of the model's identity and of the rule's
# params: setting them redownloads and remeasures nothing)
SOURCE_NOTES = ("gated",)


def model_source(config: dict, name: str) -> dict:
    """Where model `name` comes from, as far as it decides the checkpoint."""
    return {k: v for k, v in config["models"][name]["source"].items() if k not in SOURCE_NOTES}


def model_identity(config: dict, name: str) -> dict:
    model = config["models"][name]
    identity = {"name": name, "source": model_source(config, name),
                "quantization": model["quantization"]}
    if model["source"]["kind"] in DERIVED_KINDS:
        # a derived model changes when the model it is made from changes
        identity["base"] = model_identity(config, model["source"]["model"])
    return identity


def tokenizer_spec(config: dict, dataset: str) -> dict:
    """The dataset's tokenizer (default: the config's), with the model's identity if any."""
    spec = dict(config["datasets"][dataset].get("tokenizer") or config["tokenizer"])
    if "model" in spec:
        spec["model_identity"] = model_identity(config, spec["model"])
    return spec


def subset_definition(config: dict, dataset: str, subset: str) -> dict:
    """Everything one processed subset is built from, and nothing else: changing one bucket
    changes only that bucket's definition (and so rebuilds only that file)."""
    definition = {k: v for k, v in config["datasets"][dataset].items() if k != "buckets"}
    builder = definition["builder"]
    if builder in BUCKETED:
        definition["bucket"] = next(b for b in config["datasets"][dataset]["buckets"]
                                    if b["name"] == subset)
    elif "buckets" in config["datasets"][dataset]:
        definition["buckets"] = config["datasets"][dataset]["buckets"]
    return {**definition, "dataset": dataset, "subset": subset,
            "tokenizer": tokenizer_spec(config, dataset),
            "source_spec": config["sources"][definition["source"]]}


# load-generator settings added after cells were measured: in the identity only when set
OPTIONAL_LOADGEN = ("duration_s", "prompts_per_concurrency", "warm_up_levels", "request_seed")


def _in_identity(key: str, value, temperature: float) -> bool:
    """Whether a load-generator setting enters a workload's identity: not `repeats` and
    `max_failure_share` (they do not change what a measurement is), not an optional setting
    left unset, and not a request seed where nothing is sampled (temperature 0)."""
    if key in ("repeats", "max_failure_share"):
        return False
    if key in OPTIONAL_LOADGEN and value is None:
        return False
    return not (key == "request_seed" and (not value or not temperature))


def workload_spec(config: dict, name: str) -> dict:
    """The workload as it enters the cell identity: prompts, output rule, sampling."""
    workload = config["workloads"][name]
    definition = subset_definition(config, workload["dataset"], workload["subset"])
    return {
        "name": name,
        "dataset": workload["dataset"],
        "subset": workload["subset"],
        "definition": definition,
        "num_prompts": workload["num_prompts"],
        "shuffle": not sent_in_order(definition),
        "path": processed_path(workload["dataset"], workload["subset"]),
        # how many repeats and which failure share makes a point invalid do not change what a
        # measurement is: more repeats add points, the threshold is applied when summarizing
        # (duration_s and prompts_per_concurrency only when set: cells measured before they
        # existed keep their ids)
        "loadgen": {**{k: v for k, v in config["loadgen"].items()
                       if _in_identity(k, v, workload.get("temperature",
                                                          config["loadgen"]["temperature"]))},
                    # a workload's own temperature (`temperatures:` sweeps); without one the
                    # study's, as before (so its cells keep their ids)
                    **({"temperature": workload["temperature"]}
                       if "temperature" in workload else {})},
    }


# how results are reported or how the variance is sampled, not what one measurement is: kept in
# the records, out of the cell id and the point key (changing them re-measures nothing)
REPORTING_ONLY = ("percentiles", "ready_check_timeout_s", "server_instances")


def workload_identity(workload: dict) -> dict:
    """The workload as it enters the cell id and the point key: without its name (a label; the
    definition and, in the point key, the prompt file's hash say what is sent) and without
    reporting-only load-generator settings."""
    return {**{k: v for k, v in workload.items() if k != "name"},
            "loadgen": {k: v for k, v in workload["loadgen"].items()
                        if k not in REPORTING_ONLY}}


def server_config(config: dict, target: str, method: str = VANILLA, k: int | None = None,
                  draft: str | None = None, options: dict | None = None,
                  args: dict | None = None, engine: str = SERVE) -> dict:
    if engine == TRANSFORMERS:  # no vLLM: the server's arguments and environment do not apply
        run_args, env = dict(args or {}), {}
    else:
        run_args = {**config["server"]["args"], **target_args(config, target), **(args or {})}
        if not any(flag in run_args for flag in PREFIX_CACHING):
            # vLLM caches prefixes by default: every point after the first would measure
            # "all prompts cached", and a rerun would pair a cold point with a warm partner
            run_args = {PREFIX_CACHING[0]: False, **run_args}
        env = config["server"]["env"]
    options = dict(options or {})
    if method in CROSS_REQUEST_STATE:
        option, off = CROSS_REQUEST_STATE[method]
        options.setdefault(option, off)
    return {
        **({} if engine == SERVE else {"engine": engine}),
        "target": model_identity(config, target),
        "method": method,
        "num_speculative_tokens": k,
        "draft": None if draft is None else model_identity(config, draft),
        "method_options": options,
        "args": run_args,
        "env": env,
    }


PREFIX_CACHING = ("enable_prefix_caching", "enable-prefix-caching")
SHARED, FRESH_PER_POINT = "shared server", "fresh server per point"


def isolation(server: dict) -> str:
    """How the points of a cell are kept from learning from each other: SHARED (no state
    across requests: one server, or `loadgen.server_instances` servers, measures the points)
    or FRESH_PER_POINT (the proposer keeps state across requests: every point starts its own
    server, without warm-up requests, which would show it one of the point's own answers)."""
    stateful = CROSS_REQUEST_STATE.get(server["method"])
    if stateful and server["method_options"].get(stateful[0], stateful[1]) != stateful[1]:
        return FRESH_PER_POINT
    return SHARED


def warm_up_requests(cell: Cell, first_of_cell: bool) -> int:
    """The load generator's warm-up requests (`loadgen.num_warmups`, the first prompt again and
    again) before a cell's first point on a server; none in a fresh server per point (a warm-up
    sends one of the point's own prompts, and a proposer with state across requests would
    learn its answer)."""
    if isolation(cell.server_config) == FRESH_PER_POINT or not first_of_cell:
        return 0
    return cell.workload["loadgen"].get("num_warmups", 0)


def level_warm_up(cell: Cell, new_level: int | None) -> int:
    """With `loadgen.warm_up_levels`: the prompts of an untimed run at `new_level` (a
    concurrency this server has not measured yet), one wave of the workload's own prompts,
    before the first point there. A GPU's first batches of a new size are slow (kernels,
    CUDA-graph shapes, compiled plans), and a batch of one prompt repeated does not warm them
    (an H200's exact-draft server still ran its first point at concurrency 16 24 % slower
    after one). None in a fresh server per point."""
    if (not new_level or not cell.workload["loadgen"].get("warm_up_levels")
            or isolation(cell.server_config) == FRESH_PER_POINT):
        return 0
    return min(new_level, cell.workload["num_prompts"])


def sends_baseline_counts(cell: Cell) -> bool:
    """A duration-bounded speculative cell sends the prompt counts its baseline cell's probes
    chose (so it needs the baseline's records first)."""
    return not cell.is_baseline and cell.workload["loadgen"].get("duration_s") is not None


def server_arg(args: dict, name: str):
    """A server argument given with underscores or dashes (None when absent)."""
    return args.get(name, args.get(name.replace("_", "-")))


def prefix_caching(server: dict) -> bool | None:
    """The server's prefix-caching flag; None when its arguments do not state it (records
    from before it was stated: vLLM's default, on)."""
    value = server_arg(server.get("args") or {}, PREFIX_CACHING[0])
    return None if value is None else bool(value)


def target_args(config: dict, target: str) -> dict:
    """Server arguments the target model declares: its tensor parallelism (none when 1, so that
    single-GPU cells keep their ids) and its own context length."""
    model = config["models"][target]
    tp = model.get("tensor_parallel_size", 1)
    args = {} if tp == 1 else {"tensor_parallel_size": tp}
    if model.get("max_model_len") is not None:
        args["max_model_len"] = model["max_model_len"]
    return args


PARALLEL_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


def cell_gpus(server: dict) -> int:
    """GPUs one cell's server takes: the product of its parallel sizes (at least 1)."""
    n = 1
    for key in PARALLEL_ARGS:
        n *= int(server["args"].get(key) or 1)
    return n


def cell_id_of(server: dict, workload: dict) -> str:
    return short_hash({"server_config": server, "workload": workload_identity(workload)})


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


def cells_by_id(config: dict) -> dict[str, Cell]:
    return {cell.cell_id: cell for cell in all_cells(config)}


def cell_models(cell: Cell) -> list[str]:
    """Model keys a cell needs on disk (target, then draft)."""
    names = [cell.server_config["target"]["name"]]
    if cell.server_config["draft"] is not None:
        names.append(cell.server_config["draft"]["name"])
    return names
