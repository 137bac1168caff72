"""A cell and what defines it: the Cell (a server configuration x a workload, its id a hash of
both), its points' prompts and blocks, and the specs a cell is built from: server configs,
workloads and prompt sets, models and their folders, GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property

from sdbench.data.builders import BUCKETED, sent_in_order
from sdbench.ids import short_hash
from sdbench.layout import model_folder, processed_path
from sdbench.plan.config import (
    CROSS_REQUEST_STATE,
    DERIVED_KINDS,
    VANILLA,
)
from sdbench.plan.settings import (
    adaptive_on,
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


def cell_models(cell: Cell) -> list[str]:
    """Model keys a cell needs on disk (target, then draft)."""
    names = [cell.server_config["target"]["name"]]
    if cell.server_config["draft"] is not None:
        names.append(cell.server_config["draft"]["name"])
    return names
