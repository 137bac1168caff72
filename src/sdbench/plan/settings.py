"""Typed, read-only views of the settings sections the code reads most: `loadgen`, `cells`,
`server`, the rounds (their methods, settings and other engines) and `dynamic_k`. Models,
sources, datasets and workloads are read from the validated dict (the data and model stages
below `plan/` take them as dicts).

They are built from a validated config (`sdbench.plan.config.validate_config` builds them
once): the schema (workflow/schemas/config.schema.yaml) is the one place for defaults, so
nothing here supplies its own, and each fact derived from several keys is computed in one
place below (how often a method's cells are measured, on how many server instances:
`Speculator.of`; the targets a method runs on: `Round.method_targets`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


def _frozen(value: Any) -> Any:
    """Mappings read-only, lists as tuples (a settings object cannot be changed by a caller)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A frozen value as the config had it (dicts and lists): what goes into a cell's server
    config, whose id hashes it."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


class _Section:
    @classmethod
    def of(cls, section: Mapping):
        """The section's keys as this class's fields (KeyError names a key the schema did not
        fill in: the config was not validated)."""
        return cls(**{f.name: _frozen(section[f.name]) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Loadgen(_Section):
    """How each point is measured (config `loadgen`)."""

    endpoint: str
    temperature: float
    repeats: int
    num_warmups: int
    warm_up_levels: bool | None
    seed: int
    server_instances: int
    ignore_eos: bool
    duration_s: float | None
    prompts_per_concurrency: int | None
    percentiles: tuple[float, ...]
    ready_check_timeout_s: int
    max_failure_share: float


@dataclass(frozen=True)
class Cells(_Section):
    """What a measuring job asks of its host and scheduler (config `cells`)."""

    threads: int | str
    runtime: int | str
    max_runtime: int
    work_rates: Mapping[str, Any]
    mem_mb: int
    gpu_sample_interval_ms: float
    slot_timeout_s: float

    @property
    def gpu_sample_interval_s(self) -> float:
        return self.gpu_sample_interval_ms / 1000.0


@dataclass(frozen=True)
class Server(_Section):
    """How vLLM servers are started and stopped (config `server`)."""

    host: str
    startup_timeout_s: float
    stop_timeout_s: float
    args: Mapping[str, Any]
    env: Mapping[str, str]


def speculator_name(spec: Mapping) -> str:
    """A method entry's label: its `name`, else the method (with the draft's key, if any)."""
    return spec.get("name") or (spec["method"] if spec.get("draft") is None
                                else f"{spec['method']}-{spec['draft']}")


def _sorted(values) -> tuple:
    return tuple(sorted(values))


def _names(values) -> tuple[str, ...] | None:
    """An optional list of names (None: not given, the default applies)."""
    return None if values is None else tuple(values)


@dataclass(frozen=True)
class Speculator:
    """One speculative method of a round (an entry of `roundN.methods`)."""

    name: str  # the report label (`speculator_name`)
    method: str
    k: tuple[int, ...]
    draft: str | None
    targets: tuple[str, ...] | None  # its own targets (None: the round's)
    options: Mapping[str, Any]
    profile: str | None
    interleave: bool
    repeats: int  # its own `repeats`, else loadgen's
    server_instances: int  # its own `server_instances`, else loadgen's
    # mean acceptance lengths its cells are measured at again, drafts accepted at that rate
    acceptance_sweep: tuple[float, ...] = ()
    # where the acceptance its synthetic options set comes from (the reports' label)
    acceptance_source: str | None = None
    # the sampling temperatures of the round's workloads it is measured at (None: every one)
    temperatures: tuple[float, ...] | None = None
    # the repeats of its acceptance-sweep cells (its own `sweep_repeats`, else `repeats`)
    sweep_repeats: int | None = None
    # the concurrency levels its acceptance-sweep cells are measured at (None: the round's)
    sweep_concurrency: tuple[int, ...] | None = None

    @classmethod
    def of(cls, spec: Mapping, loadgen: Loadgen) -> Speculator:
        return cls(speculator_name(spec), spec["method"], tuple(spec["k"]), spec.get("draft"),
                   _names(spec.get("targets")), _frozen(spec["options"]), spec.get("profile"),
                   bool(spec["interleave"]), int(spec.get("repeats") or loadgen.repeats),
                   int(spec.get("server_instances") or loadgen.server_instances),
                   tuple(float(x) for x in spec.get("acceptance_sweep") or ()),
                   spec.get("acceptance_source"),
                   None if spec.get("temperatures") is None
                   else tuple(float(t) for t in spec["temperatures"]),
                   int(spec.get("sweep_repeats") or spec.get("repeats") or loadgen.repeats),
                   None if spec.get("sweep_concurrency") is None
                   else tuple(int(c) for c in spec["sweep_concurrency"]))


@dataclass(frozen=True)
class Setting:
    """A round's server-parameter setting: `server` arguments for all its cells, `speculative`
    keys for its speculative cells."""

    name: str
    server: Mapping[str, Any]
    speculative: Mapping[str, Any]


@dataclass(frozen=True)
class Engine:
    """Round 1's `offline` or `transformers` section: the methods mirrored on another engine
    (None: the default, every method that engine can run; every round 1 workload)."""

    workloads: tuple[str, ...] | None
    speculators: tuple[str, ...] | None
    k: tuple[int, ...] | None
    batch_sizes: tuple[int, ...] = (1,)  # offline's sweep; Transformers runs at batch 1
    dtype: str | None = None  # Transformers' torch dtype

    @classmethod
    def of(cls, section: Mapping) -> Engine:
        return cls(_names(section.get("workloads")), _names(section.get("speculators")),
                   _names(section.get("k")), _sorted(section.get("batch_sizes") or (1,)),
                   section.get("dtype"))


@dataclass(frozen=True)
class Round:
    """One round (config `round1`, `round2`, `round3`)."""

    name: str
    targets: tuple[str, ...]
    workloads: tuple[str, ...]
    concurrency: tuple[int, ...]  # sorted
    request_rates: tuple[float, ...]  # sorted
    burstiness: float
    methods: tuple[Speculator, ...]
    settings: tuple[Setting, ...]
    offline: Engine | None
    transformers: Engine | None

    @classmethod
    def of(cls, name: str, spec: Mapping, loadgen: Loadgen) -> Round:
        return cls(name, tuple(spec["targets"]), tuple(spec["workloads"]),
                   _sorted(spec["concurrency"]), _sorted(spec["request_rates"]),
                   float(spec["burstiness"]),
                   tuple(Speculator.of(m, loadgen) for m in spec["methods"]),
                   tuple(Setting(s["name"], _frozen(s.get("server") or {}),
                                 _frozen(s.get("speculative") or {}))
                         for s in spec["settings"]),
                   Engine.of(spec["offline"]) if spec.get("offline") else None,
                   # an empty transformers section still asks for the reference
                   Engine.of(spec["transformers"]) if spec.get("transformers") is not None
                   else None)

    def method_targets(self, method: Speculator) -> tuple[str, ...]:
        """The targets a method runs on: its own `targets`, else the round's."""
        return method.targets or self.targets

    @staticmethod
    def measures(method: Speculator, temperature: float) -> bool:
        """Whether `method` is measured on a workload sampled at `temperature` (its own
        `temperatures`, else every one)."""
        return method.temperatures is None or float(temperature) in method.temperatures

    @property
    def all_targets(self) -> tuple[str, ...]:
        """The round's targets and its methods' own, in order, once."""
        return tuple(dict.fromkeys(self.targets + tuple(
            t for method in self.methods for t in method.targets or ())))

    def method(self, name: str) -> Speculator:
        """A method by its report name (KeyError if the round has none of that name)."""
        for method in self.methods:
            if method.name == name:
                return method
        raise KeyError(name)


@dataclass(frozen=True)
class DynamicK:
    """An entry of `dynamic_k`: a round 1 method whose schedule is derived and measured."""

    speculator: str
    workloads: tuple[str, ...] | None  # None: every round 1 workload
    repeats: int  # its own `repeats`, else loadgen's
    split: bool  # measured in turn with the static k and that k as a constant schedule
    model_runners: tuple[str, ...] = ()  # each measured under these vLLM model runners; ():
    # whichever vLLM picks
    server_instances: int | None = None  # its own (the cells take turns by instance), else
    # the method's


@dataclass(frozen=True)
class InstanceProbe:
    """Server starts made on purpose to measure how much two starts of one configuration
    differ (config `instance_probe`; `grid.probe_cells`)."""

    enabled: bool
    starts: int  # starts of each side's configuration (the first the cells' own)
    repeats: int | None  # runs on each start (None: the probed cell's repeats)
    levels: tuple[int, ...] | None  # concurrency levels (None: the lowest and highest)
    speculators: tuple[str, ...] | None  # the speculators probed (None: every one that needs)

    @classmethod
    def of(cls, section: Mapping) -> InstanceProbe:
        return cls(bool(section["enabled"]), int(section["starts"]),
                   None if section.get("repeats") is None else int(section["repeats"]),
                   None if section.get("levels") is None else _sorted(section["levels"]),
                   _names(section.get("speculators")))


ROUNDS = ("round1", "round2", "round3")
# each round's report title (its page: reports/<round>.html)
ROUND_TITLES = {
    "round1": "Round 1: methods vs no speculation",
    "round2": "Round 2: context length, target size and quantization",
    "round3": "Round 3: server parameters",
}


def adaptive_on(section: Mapping | None) -> bool:
    """Whether a config's `adaptive:` section turns the rule on (present, not `enabled:
    false`)."""
    return bool(section) and bool(section.get("enabled", True))


@dataclass(frozen=True)
class Settings:
    loadgen: Loadgen
    cells: Cells
    server: Server
    rounds: Mapping[str, Round]  # the rounds the config has, in order
    dynamic_k: tuple[DynamicK, ...]
    instance_probe: InstanceProbe

    @classmethod
    def of(cls, config: Mapping) -> Settings:
        loadgen = Loadgen.of(config["loadgen"])
        rounds = {name: Round.of(name, config[name], loadgen) for name in ROUNDS
                  if config.get(name)}
        return cls(loadgen, Cells.of(config["cells"]), Server.of(config["server"]),
                   MappingProxyType(rounds),
                   tuple(DynamicK(e["speculator"], _names(e.get("workloads")),
                                  int(e.get("repeats") or loadgen.repeats),
                                  bool(e.get("split", True)),
                                  tuple(e.get("model_runners") or ()),
                                  e.get("server_instances"))
                         for e in config.get("dynamic_k") or ()),
                   InstanceProbe.of(config["instance_probe"]))


SECTIONS = ("loadgen", "cells", "server", "dynamic_k", "instance_probe") + ROUNDS
# id(config) -> (the config, a copy of its sections when built, the settings)
_BUILT: dict[int, tuple[Mapping, dict, Settings]] = {}


def _sections(config: Mapping) -> dict:
    return {s: config.get(s) for s in SECTIONS}


def build(config: Mapping) -> Settings:
    """Build (and keep) the settings of a validated config."""
    built = Settings.of(config)
    if len(_BUILT) > 64:
        _BUILT.clear()
    # a deep copy, compared with the config's sections as they are now (a dict comparison in
    # C: a point's or session's call costs microseconds)
    _BUILT[id(config)] = (config, copy.deepcopy(_sections(config)), built)
    return built


def settings(config: Mapping) -> Settings:
    """The typed settings of `config`: those built when it was validated, or built again if
    its sections changed since (tests and derived configs edit a validated config)."""
    kept = _BUILT.get(id(config))
    if kept is not None and kept[0] is config and kept[1] == _sections(config):
        return kept[2]
    return build(config)


# vLLM's rejection_sample_method whose drafts are accepted at a set rate
SYNTHETIC = "synthetic"


def synthetic_setting(options) -> float | None:
    """The mean acceptance length a cell's speculative options set (a dict, or its records'
    `spec_options` JSON text), or None where acceptance is not synthetic."""
    if isinstance(options, str):
        options = json.loads(options) if options else {}
    options = dict(options) if isinstance(options, dict) else {}
    if options.get("rejection_sample_method") != SYNTHETIC:
        return None
    if options.get("synthetic_acceptance_length") is not None:
        return float(options["synthetic_acceptance_length"])
    rates = options.get("synthetic_acceptance_rates")
    return None if rates is None else 1.0 + float(sum(rates))
