"""The point cache: one file per valid measurement (results/points/<cell id>/), keyed by
everything that determines it, so that a rerun, a retry or a session that serves a new
workload measures only what is missing, and nothing measured under other conditions is
reused.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from sdbench.files import atomic_path
from sdbench.ids import short_hash
from sdbench.layout import point_cache
from sdbench.models import checkpoints as models
from sdbench.plan import specs
from sdbench.records import LoadPoint


def repeat_seed(cell: specs.Cell, repeat: int) -> int:
    """Each repeat its own seed (prompt order, arrival times, sampling), so that the interval
    over repeats covers them; a block of prompts (`specs.point_blocks`) is a repeat of its own:
    its seed draws its prompts, the same on both sides of a pair."""
    return int(cell.workload["loadgen"]["seed"]) + repeat


def point_facts(cell: specs.Cell, config: dict, prompts_sha256: str, min_tokens: int | None,
                environment: dict, dtype: str | None) -> dict:
    """What, besides the cell's definition, determines its measurements here: the prompt
    file's bytes, the forced output length, the vLLM build, the resolved dtype, every
    checkpoint's fingerprint (a re-downloaded or rebuilt model is another model), and for
    Transformers cells the transformers and torch versions."""
    facts = {"prompts_sha256": prompts_sha256, "min_tokens": min_tokens,
             "vllm": environment["vllm"],
             "checkpoints": {role: models.checkpoint_fingerprint(specs.model_dir(config, name))
                             for role, name in zip(("target", "draft"), specs.cell_models(cell),
                                                   strict=False)}}
    if cell.server_config["args"].get("dtype") == "host":
        facts["dtype"] = dtype
    if cell.engine == specs.TRANSFORMERS:
        facts["libraries"] = {"transformers": environment.get("transformers"),
                              "torch": environment.get("torch")}
    return facts


def point_key(cell: specs.Cell, load: dict, repeat: int, facts: dict) -> str:
    """Content hash of everything that determines one measurement: the server config, the
    workload without reporting-only settings (`specs.workload_identity`), the point, its seed,
    its server instance and `point_facts`. A cached measurement is reused only under the same
    key; changing how results are reported keeps every key, and so does serving the cell in a
    session with other workloads."""
    fields = {"server_config": cell.server_config,
              "workload": specs.workload_identity(cell.workload),
              "concurrency": load.get("concurrency"), "repeat": repeat,
              "seed": repeat_seed(cell, repeat), "instance": cell.instance_of(repeat, load),
              **facts}
    if load["mode"] == "rate":
        fields["load"] = load
    if (blocks := specs.point_blocks(cell, load)) > 1:  # a block of prompts, not a whole repeat
        fields["blocks"] = blocks
    if cell.profile:
        fields["profile"] = cell.profile
    if cell.group:  # measured in turn with the other cells of its group, their servers up
        fields["interleaved"] = True
    return short_hash(fields, length=16)


def point_path(cell_id: str, load: dict, repeat: int, key: str) -> Path:
    name = LoadPoint.of_load(load, repeat).name
    return point_cache(cell_id) / f"{name}-r{repeat}-{key}.json.gz"


def read_point(path: str | Path) -> dict | None:
    """A cached measurement (or a point the adaptive rule stopped: the caller checks it was
    stopped under the rule in force), or None when it is not a valid one (an older cache may
    hold invalid points; an unreadable file is measured again)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            point = json.load(fh)
    except (OSError, EOFError, ValueError):
        return None
    return point if point.get("record", {}).get("status") in ("ok", "stopped") else None


def write_point(path: str | Path, record: dict, detail: dict) -> None:
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump({"record": record, "detail": detail}, fh)
