"""Typed, read-only views of the settings sections the code reads most: `loadgen`, `cells` and
`server` (the rounds and their methods are still read from the validated dict).

They are built from a validated config (`sdbench.plan.config.validate_config` builds them
once): the schema (workflow/schemas/config.schema.yaml) is the one place for defaults, so
nothing here supplies its own, and each fact derived from several keys (how often a method's
cells are measured, on how many server instances) is computed in one function below.
"""

from __future__ import annotations

import dataclasses
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


@dataclass(frozen=True)
class Settings:
    loadgen: Loadgen
    cells: Cells
    server: Server

    @classmethod
    def of(cls, config: Mapping) -> Settings:
        return cls(Loadgen.of(config["loadgen"]), Cells.of(config["cells"]),
                   Server.of(config["server"]))


SECTIONS = ("loadgen", "cells", "server")
# id(config) -> (the config, a copy of its sections when built, the settings)
_BUILT: dict[int, tuple[Mapping, dict, Settings]] = {}


def build(config: Mapping) -> Settings:
    """Build (and keep) the settings of a validated config."""
    built = Settings.of(config)
    if len(_BUILT) > 64:
        _BUILT.clear()
    _BUILT[id(config)] = (config, {s: _frozen(config[s]) for s in SECTIONS}, built)
    return built


def settings(config: Mapping) -> Settings:
    """The typed settings of `config`: those built when it was validated, or built again if
    its sections changed since (tests and derived configs edit a validated config)."""
    kept = _BUILT.get(id(config))
    if kept is not None and kept[0] is config and all(
            kept[1][s] == _frozen(config[s]) for s in SECTIONS):
        return kept[2]
    return build(config)


def method_repeats(config: Mapping, method: Mapping) -> int:
    """How often a method's cells measure each point: its own `repeats`, else loadgen's."""
    return int(method.get("repeats") or settings(config).loadgen.repeats)


def method_instances(config: Mapping, method: Mapping | None = None) -> int:
    """Over how many server instances a method's repeats are spread: its own
    `server_instances`, else loadgen's (a baseline takes the most of its pairs: grid)."""
    own = (method or {}).get("server_instances")
    return int(own or settings(config).loadgen.server_instances)
