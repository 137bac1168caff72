"""Checks at the start of a real run (not a dry run), before any job.

A source or model that must be downloaded but whose server cannot be reached fails the run at
once, naming what is missing, where it would come from and how to provide it offline, instead
of failing hours later or halfway through the grid.
"""

from __future__ import annotations

import socket
from pathlib import Path

from . import grid
from .config import DERIVED_KINDS
from .data.sources import describe_location, offline_advice, raw_path, remote_host

PROBE_TIMEOUT_S = 5.0


class PreflightError(RuntimeError):
    """Something the run needs cannot be had from here."""


def reachable(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _model_host(config: dict, name: str) -> tuple[str, int] | None:
    source = config["models"][name]["source"]
    if source["kind"] != "hf":
        return None
    return remote_host({"kind": "hf_file", "repo": source["repo"]})


def unreachable_downloads(config: dict, workdir: str | Path = ".",
                          probe=reachable) -> list[str]:
    """One message per source/model that still has to be downloaded but cannot be."""
    workdir = Path(workdir)
    cells = grid.all_cells(config)
    sources = {config["datasets"][c.workload["dataset"]]["source"] for c in cells}
    models = {name for c in cells for name in grid.cell_models(c)}
    models |= {config["models"][m]["source"]["model"] for m in models
               if config["models"][m]["source"]["kind"] in DERIVED_KINDS}
    models |= {spec["model"] for spec in [config["tokenizer"]] + [
        config["datasets"][d].get("tokenizer", {}) for d in
        {c.workload["dataset"] for c in cells}] if "model" in spec}
    problems, probed = [], {}
    for name in sorted(sources):
        spec = config["sources"][name]
        target = workdir / raw_path(name, spec)
        where = remote_host(spec)
        if where is None or target.exists():
            continue
        if probed.setdefault(where, probe(*where)):
            continue
        problems.append(f"sources.{name}: {target} is missing and {describe_location(spec)} "
                        f"cannot be reached ({where[0]}:{where[1]}). {offline_advice(name, spec)}")
    for name in sorted(models):
        where = _model_host(config, name)
        folder = workdir / grid.model_dir(config, name)
        if where is None or folder.exists():
            continue
        if probed.setdefault(where, probe(*where)):
            continue
        repo = config["models"][name]["source"]["repo"]
        problems.append(
            f"models.{name}: {folder} is missing and {repo} cannot be downloaded "
            f"({where[0]}:{where[1]} unreachable). Download it elsewhere (huggingface-cli "
            f"download {repo} --local-dir <dir>), copy it here and set "
            f"`models.{name}.source: {{kind: path, path: <dir>}}`.")
    return problems


def check(config: dict, workdir: str | Path = ".") -> None:
    problems = unreachable_downloads(config, workdir)
    if problems:
        raise PreflightError("cannot start: " + "\n  ".join(["", *problems]))
