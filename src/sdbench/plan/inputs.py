"""Checks of a study's own input files before any job: `make plan` and every Snakemake parse
(a dry run included) read each local source file a prompt set is built from, as its fetch job
would, and stop with one line naming the file, the config key and, for rows, the line.

Checked: the file exists and can be read; its format is one the project reads (named, or
detected from its first row); its unusable rows are within `max_skipped_rows` (or
`max_skipped_share`); and a set of one's own requests (builder `chat`) has as many usable rows
as its `samples` and each workload's `num_prompts` ask for (the load generator would repeat
prompts to make up the count; `num_prompts` is checked against the highest concurrency).
Files larger than CHECK_BYTES (the published ShareGPT dump is 640 MB) are checked when they
are fetched instead: a parse must stay quick.
"""

from __future__ import annotations

import os
from pathlib import Path

from sdbench.data.builders import CHAT
from sdbench.data.sources import SourceError, local_files, read_source
from sdbench.plan.config import ConfigError

# the largest file read at every parse (`SDBENCH_CHECK_BYTES` sets another: 0, none; the fetch
# job checks every file it copies either way)
CHECK_BYTES = int(os.environ.get("SDBENCH_CHECK_BYTES", 64 * 2 ** 20))


def _usable(rows: list[dict], dataset: dict) -> int:
    """How many requests a `chat` set can take from `rows` before token limits: rows without a
    reference reply do not count where the output length is the reference's."""
    if dataset.get("output_tokens") != "reference":
        return len(rows)
    return sum(1 for row in rows if (row.get("reference") or "").strip()
               or "conversations" in row)


def _needs(config: dict, name: str, dataset: dict) -> list[tuple[int, str]]:
    """(requests, the key that asks for them) a chat set must supply."""
    needs = []
    if dataset.get("samples"):
        needs.append((dataset["samples"], f"datasets.{name}.samples"))
    for workload, spec in config["workloads"].items():
        if spec["dataset"] == name:
            needs.append((spec["num_prompts"], f"workloads.{workload}.num_prompts"))
    return needs  # a workload's num_prompts is at least its highest concurrency (`config`)


def check_sources(config: dict, source: str = "config", root: str | Path = ".") -> None:
    """Every local source file a configured prompt set reads, as its fetch would read it."""
    used: dict[str, list[str]] = {}
    for name, dataset in config["datasets"].items():
        used.setdefault(dataset["source"], []).append(name)
    for name in sorted(used):
        spec = config["sources"][name]
        for path in local_files(spec):
            _check_file(config, source, name, spec, Path(root) / path, path, used[name])


def _check_file(config: dict, source: str, name: str, spec: dict, path: Path, shown: str,
                datasets: list[str]) -> None:
    key = f"sources.{name}.path" if spec["kind"] == "path" else f"sources.{name}.url"
    if not path.is_file():
        raise ConfigError(f"{source}: {key} = {shown!r}: no such file (a relative path is read "
                          f"from {Path.cwd()})")
    if path.stat().st_size > CHECK_BYTES or not CHECK_BYTES:
        return
    try:
        _, rows, _ = read_source(name, spec, path, shown)
    except SourceError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{source}: {key} = {shown!r} cannot be read ({exc})") from exc
    for dataset in datasets:
        definition = config["datasets"][dataset]
        if definition["builder"] != CHAT:
            continue
        have = _usable(rows, definition)
        for need, asked in _needs(config, dataset, definition):
            if have < need:
                raise ConfigError(
                    f"{source}: {shown} (sources.{name}) has {have} usable requests for "
                    f"datasets.{dataset}; {asked} needs {need}. Add requests to the file or "
                    "ask for fewer.")
