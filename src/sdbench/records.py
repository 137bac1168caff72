"""The record: one measurement (a cell at one load point and repeat), as the cell writes it and
the summary, the lossless check and the tests read it, and the load point it was taken at.

A record is one JSON line of results/cells/<cell id>.jsonl; its JSON Schema is
workflow/schemas/record.schema.yaml (`schema`: sdbench.record/1). `read_records` validates
every line against it, so a damaged or foreign file stops the summary with the file, line and
key at fault instead of turning into wrong numbers; records written before `schema`, `engine`
and `load` existed are read as closed-loop vLLM server points (`upgrade`).

The per-request detail beside it (<cell id>.requests.jsonl.gz, one line per point) carries
end-to-end latencies from the moment it is written (`with_latencies`: vLLM 0.26 does not save
them); `read_details` derives them for sidecars written before that.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from sdbench.plan.config import REPO_ROOT

SCHEMA_ID = "sdbench.record/1"
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "record.schema.yaml"
STATUSES = ("ok", "invalid", "failed", "unsupported", "stopped")
STOPPED = "stopped"  # not measured: the adaptive rule stopped its point (sdbench.plan.adaptive)
# a record's server.engine.settings (what vLLM resolved, sdbench.measure.engine_report) that
# the two servers of a pair are compared on (sdbench.analyze.engine), with their labels
ENGINE_COMPARED = {
    "cudagraph_mode": "CUDA graphs",
    "compilation_mode": "compilation mode",
    "attention_backend": "attention backend",
    "dtype": "dtype",
    "model_runner": "model runner",
    "async_scheduling_off": "asynchronous scheduling turned off by vLLM",
    "chunked_prefill": "chunked prefill",
    "prefix_caching": "prefix caching",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enforce_eager": "enforce_eager",
    "kv_cache_dtype": "KV-cache dtype",
    "kv_cache_tokens": "KV-cache tokens",
    "engine_fixes": "sdbench's fixes of engine faults",
}


class RecordError(ValueError):
    """A record that is not one: the message names the file, line and key."""


@dataclass(frozen=True)
class LoadPoint:
    """Where in its cell a measurement was taken: closed-loop `concurrency` (the batch size of
    an offline or Transformers cell, `mode` batch) or open-loop `request_rate`, and the repeat.
    The one spelling of a point: its key, order, file name and labels all come from here."""

    mode: str
    concurrency: int | None
    request_rate: float | None
    repeat: int

    @classmethod
    def of_load(cls, load: dict, repeat: int) -> LoadPoint:
        """From a cell's load dict (`specs.Cell.load_points`) and a repeat."""
        if load["mode"] == "rate":
            return cls("rate", None, float(load["request_rate"]), int(repeat))
        return cls(load["mode"], int(load["concurrency"]), None, int(repeat))

    @classmethod
    def of(cls, concurrency, request_rate, repeat, engine: str = "serve") -> LoadPoint:
        """From a record, a detail line or a summary row (where an empty level is NA)."""
        if concurrency is None or pd.isna(concurrency):
            return cls("rate", None, float(request_rate), int(repeat))
        return cls("concurrency" if engine == "serve" else "batch", int(concurrency), None,
                   int(repeat))

    @property
    def key(self) -> tuple:
        """(concurrency or None, request rate or None, repeat): pairs a point across cells."""
        return (self.concurrency, self.request_rate, self.repeat)

    @property
    def order(self) -> tuple:
        """Sortable within a cell: closed-loop levels first, then request rates."""
        if self.mode == "rate":
            return ("q", self.request_rate, self.repeat)
        return ("c", self.concurrency, self.repeat)

    @property
    def name(self) -> str:
        """In file names (point cache, profiles): c<level> or rate<requests per s>."""
        return (f"rate{self.request_rate:g}" if self.mode == "rate"
                else f"c{self.concurrency}")

    @property
    def level(self) -> str:
        """In words: 'concurrency 4', 'batch size 4', 'request rate 2/s'."""
        if self.mode == "rate":
            return f"request rate {self.request_rate:g}/s"
        return f"{'batch size' if self.mode == 'batch' else 'concurrency'} {self.concurrency}"

    @property
    def label(self) -> str:
        """In a cell's log lines and errors: 'concurrency 4, repeat 1', 'rate 2/s, repeat 0'."""
        level = (f"rate {self.request_rate:g}/s" if self.mode == "rate"
                 else f"{self.mode} {self.concurrency}")
        return f"{level}, repeat {self.repeat}"


@dataclass(frozen=True)
class Record:
    """One measurement as written (`to_dict`: one JSON line, valid against the schema)."""

    cell_id: str
    round: str
    speculator: str
    baseline_cell_id: str | None
    server_config: dict
    workload: dict
    engine: str
    load: dict
    repeat: int
    status: str
    error: str | None
    metrics: dict
    server: dict
    loadgen: dict
    provenance: dict

    @property
    def point(self) -> LoadPoint:
        return LoadPoint.of_load(self.load, self.repeat)

    def to_dict(self) -> dict[str, Any]:
        if self.status not in STATUSES:
            raise RecordError(f"cell {self.cell_id}: status {self.status!r} is not one of "
                              f"{', '.join(STATUSES)}")
        return {"schema": SCHEMA_ID, "cell_id": self.cell_id, "round": self.round,
                "speculator": self.speculator, "baseline_cell_id": self.baseline_cell_id,
                "server_config": self.server_config, "workload": self.workload,
                "engine": self.engine, "load": self.load,
                "concurrency": self.load.get("concurrency"),
                "request_rate": self.load.get("request_rate"), "repeat": self.repeat,
                "status": self.status, "error": self.error or None, "metrics": self.metrics,
                "server": self.server, "loadgen": self.loadgen, "provenance": self.provenance}


@cache
def _validator():
    import jsonschema
    import yaml

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema)


def upgrade(data: dict) -> dict:
    """A record of an earlier shape, as the schema describes it now: before `engine` and `load`
    were written every record was a vLLM server point."""
    if all(key in data for key in ("engine", "load", "request_rate")):
        return data
    data = dict(data)
    data.setdefault("engine", "serve")
    if "load" not in data:
        data["load"] = ({"mode": "rate", "request_rate": data["request_rate"]}
                        if data.get("concurrency") is None and data.get("request_rate")
                        else {"mode": "concurrency" if data["engine"] == "serve" else "batch",
                              "concurrency": data.get("concurrency")})
    data.setdefault("request_rate", None)
    return data


def validate(data: Any, where: str) -> dict:
    """The record upgraded and checked against the schema; RecordError names `where` and the
    first key at fault."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a record is a JSON object, not {type(data).__name__}")
    data = upgrade(data)
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        key = ".".join(map(str, first.absolute_path)) or "(record)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RecordError(f"{where}: {key}: {first.message}{more}")
    return data


def read_records(path: str | Path) -> list[dict]:
    """Every record of a records file (a cell's .jsonl or .jsonl.partial), validated."""
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{path}:{number}: not JSON ({exc.msg}); the file is "
                                  "damaged: delete it and rerun its cell") from exc
            out.append(validate(data, f"{path}:{number}"))
    return out


def with_latencies(detail: dict[str, list]) -> dict[str, list]:
    """The detail with per-request end-to-end `latencies`: vLLM 0.26 does not save them (0.32
    does), so they are derived as time to first token + the inter-token gaps (the time the last
    token arrived), 0 for failed requests as vLLM itself writes."""
    if "latencies" in detail or "ttfts" not in detail or "itls" not in detail:
        return detail
    return {**detail, "latencies": [ttft + sum(itl or []) if ttft else 0.0
                                    for ttft, itl in zip(detail["ttfts"], detail["itls"],
                                                         strict=True)]}


def read_details(path: str | Path) -> dict[str, dict[tuple, dict]]:
    """Per-request detail of a cell's sidecar: {cell_id: {LoadPoint key: detail}}."""
    out: dict[str, dict] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for detail in map(json.loads, fh):
            point = LoadPoint.of(detail["concurrency"], detail.get("request_rate"),
                                 detail.get("repeat", 0))
            out.setdefault(detail["cell_id"], {})[point.key] = with_latencies(detail)
    return out
