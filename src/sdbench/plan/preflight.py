"""Checks at the start of a real run (not a dry run), before any job.

A source or model that must be downloaded but whose server cannot be reached fails the run at
once, naming what is missing, where it would come from and how to provide it offline, instead
of failing hours later or halfway through the grid. So does a gated hub model (Llama 3 / 3.1:
`gated: true` in its source) with no hub token on this machine, and, where the hub answers,
any model to download that the token cannot read (a gated licence not accepted, a misspelt
repository).
"""

from __future__ import annotations

import socket
from pathlib import Path

from sdbench.data.sources import describe_location, offline_advice, raw_path, remote_host
from sdbench.plan import grid, specs
from sdbench.plan.config import DERIVED_KINDS

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


def _needed(config: dict) -> tuple[set[str], set[str]]:
    """(sources, models) the configured grid reads."""
    cells = grid.all_cells(config)
    sources = {config["datasets"][c.workload["dataset"]]["source"] for c in cells}
    models = {name for c in cells for name in specs.cell_models(c)}
    models |= {config["models"][m]["source"]["model"] for m in models
               if config["models"][m]["source"]["kind"] in DERIVED_KINDS}
    models |= {spec["model"] for spec in [config["tokenizer"]] + [
        config["datasets"][d].get("tokenizer", {}) for d in
        {c.workload["dataset"] for c in cells}] if "model" in spec}
    return sources, models


def hub_downloads(config: dict, workdir: str | Path = ".") -> list[str]:
    """The hub models the grid needs that are not downloaded yet."""
    _, models = _needed(config)
    return sorted(name for name in models if config["models"][name]["source"]["kind"] == "hf"
                  and not (Path(workdir) / specs.model_dir(config, name)).exists())


def unreachable_downloads(config: dict, workdir: str | Path = ".",
                          probe=reachable) -> list[str]:
    """One message per source/model that still has to be downloaded but cannot be."""
    workdir = Path(workdir)
    sources, models = _needed(config)
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
        folder = workdir / specs.model_dir(config, name)
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


def _hub_access(repo: str, token: str) -> str | None:
    """None if `token` can read the hub model `repo`, else why not (huggingface_hub's
    auth_check: a gated repository whose licence this account has not accepted, or one that
    does not exist or is private)."""
    from huggingface_hub import auth_check
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        auth_check(repo, token=token)
    except GatedRepoError:
        return "gated, and this account has not been granted access"
    except RepositoryNotFoundError:
        return "not found (misspelt, private, or gated for this token)"
    return None


def access_problems(config: dict, workdir: str | Path = ".", token: str | None = None,
                    access=_hub_access, hub_reachable: bool = False,
                    to_download: list[str] | None = None) -> list[str]:
    """One message per hub model to download (`to_download`, default hub_downloads) that this
    machine's token cannot read: gated models (`gated: true`) need a token at all; where the
    hub can be reached, every model to download is checked with the token."""
    problems = []
    if to_download is None:
        to_download = hub_downloads(config, workdir)
    for name in to_download:
        source = config["models"][name]["source"]
        repo, page = source["repo"], f"https://huggingface.co/{source['repo']}"
        if source.get("gated") and not token:
            problems.append(
                f"models.{name}: {repo} is gated and no Hugging Face token is set on this "
                f"machine. Accept its licence at {page}, then `huggingface-cli login` (or export "
                f"HF_TOKEN=<token>) and start again.")
        elif hub_reachable and (why := access(repo, token)):
            problems.append(f"models.{name}: {repo} cannot be downloaded with this machine's "
                            f"token: {why}. Check the name; for a gated model accept its "
                            f"licence at {page} with the account whose token is set here.")
    return problems


def check(config: dict, workdir: str | Path = ".") -> None:
    from huggingface_hub import get_token

    problems = unreachable_downloads(config, workdir)
    to_download = hub_downloads(config, workdir)
    hub_reachable = bool(to_download) and reachable(*_model_host(config, to_download[0]))
    problems += access_problems(config, workdir, token=get_token(), hub_reachable=hub_reachable,
                                to_download=to_download)
    if problems:
        raise PreflightError("cannot start: " + "\n  ".join(["", *problems]))
