"""Pin every hub revision of a config to a commit, once.

A model or data source on the Hugging Face hub names a `revision`: a commit, or a branch or tag
such as `main` that moves. Two runs a month apart on `main` can measure different checkpoints
under one name. This resolves every branch or tag to the commit it points to now and writes a
lock file beside the config (`config/config.yaml` -> `config/config.lock.yaml`); every later run
with that config reads it and downloads exactly those commits (`apply`). A revision that is
already a commit needs no lock. Run it where the hub answers (with a token for gated models):

    python -m sdbench.plan.lock --config config/config.yaml [--output FILE]

Model cards and data manifests record the commit each download resolved to (and every record
carries its models' cards); the index names what still runs on a moving revision (`unpinned`).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

from sdbench.files import atomic_write_text
from sdbench.plan.config import ConfigError, load_config

COMMIT = re.compile(r"^[0-9a-f]{40}$")
LOCK_SCHEMA = "sdbench.lock/1"


class LockError(RuntimeError):
    """A revision could not be resolved, or the lock file is unreadable."""


def lock_path(config_file: str | Path) -> Path:
    """The lock file of a config file: beside it, `<name>.lock.yaml`."""
    path = Path(config_file)
    return path.with_name(path.name.removesuffix(".yaml").removesuffix(".yml") + ".lock.yaml")


def hub_refs(config: dict) -> dict[str, dict]:
    """'models.<name>' / 'sources.<name>' -> {repo, repo_type, revision} of every hub download
    of the config (a local dataset folder given as `dataset` is not one)."""
    refs = {}
    for name, model in config["models"].items():
        source = model["source"]
        if source["kind"] == "hf":
            refs[f"models.{name}"] = {"repo": source["repo"], "repo_type": "model",
                                      "revision": source["revision"]}
    for name, source in config["sources"].items():
        if source["kind"] == "hf_file":
            refs[f"sources.{name}"] = {"repo": source["repo"], "repo_type": "dataset",
                                       "revision": source["revision"]}
        elif source["kind"] == "hf" and not Path(source["dataset"]).exists():
            refs[f"sources.{name}"] = {"repo": source["dataset"], "repo_type": "dataset",
                                       "revision": source["revision"]}
    return refs


def unpinned(config: dict) -> list[str]:
    """Hub downloads of the config still on a moving revision (a branch or tag): 'key (repo@
    revision)'."""
    return [f"{key} ({ref['repo']}@{ref['revision']})" for key, ref in hub_refs(config).items()
            if not COMMIT.match(ref["revision"])]


def resolve(refs: dict[str, dict], api=None) -> dict[str, dict]:
    """Each ref with the commit its revision points to now (`huggingface_hub.HfApi`: model_info
    / dataset_info); a revision that is a commit is kept as it is."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    pins = {}
    for key, ref in refs.items():
        commit = ref["revision"]
        if not COMMIT.match(commit):
            info = api.model_info if ref["repo_type"] == "model" else api.dataset_info
            try:
                commit = info(ref["repo"], revision=ref["revision"]).sha
            except Exception as exc:  # hub errors come in many types
                raise LockError(f"{key}: could not resolve {ref['repo']}@{ref['revision']} "
                                f"on the hub: {type(exc).__name__}: {exc}") from exc
        pins[key] = {**ref, "commit": commit}
    return pins


def write_lock(path: str | Path, pins: dict[str, dict], config_file: str | Path) -> None:
    doc = {"schema": LOCK_SCHEMA, "config": str(config_file),
           "resolved_at": datetime.now(UTC).isoformat(timespec="seconds"), "pins": pins}
    atomic_write_text(path, f"# written by python -m sdbench.plan.lock: every hub revision of "
                      f"{config_file}\n# resolved to a commit; runs with that config download "
                      "these commits\n" + yaml.safe_dump(doc, sort_keys=False))


def read_lock(path: str | Path) -> dict[str, dict]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LockError(f"{path}: not a readable lock file ({exc}); write it again with "
                        "python -m sdbench.plan.lock") from exc
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema != LOCK_SCHEMA:
        raise LockError(f"{path}: schema is {schema!r}, not {LOCK_SCHEMA}: write it again with "
                        "python -m sdbench.plan.lock")
    for key, pin in (doc.get("pins") or {}).items():
        commit = pin.get("commit") if isinstance(pin, dict) else pin
        if not COMMIT.match(str(commit)):
            raise LockError(f"{path}: pins.{key}.commit = {commit!r} is not a 40-character "
                            "commit")
    return doc.get("pins") or {}


def apply(config: dict, pins: dict[str, dict]) -> list[str]:
    """Replace each locked revision by its commit, in place. A pin whose repository or revision
    no longer matches the config is left out (the config changed since the lock): returned as
    'key: why', for the caller to say."""
    refs = hub_refs(config)
    stale = []
    for key, pin in pins.items():
        ref = refs.get(key)
        if ref is None:
            continue  # no longer in the config: nothing to pin
        if (ref["repo"], ref["revision"]) != (pin["repo"], pin["revision"]):
            if ref["revision"] != pin["commit"]:
                stale.append(f"{key}: the config has {ref['repo']}@{ref['revision']}, the lock "
                             f"{pin['repo']}@{pin['revision']}")
            continue
        section, name = key.split(".", 1)
        source = (config["models"][name]["source"] if section == "models"
                  else config["sources"][name])
        source["revision"] = pin["commit"]
    return stale


def apply_files(config: dict, config_files: list) -> list[str]:
    """Apply the lock file beside each config file that has one (in place); return what to
    tell the user: the pins applied, pins the config no longer matches, and what stays on a
    moving revision (with the command that pins it)."""
    notes = []
    for config_file in config_files:
        path = lock_path(config_file)
        if path.is_file():
            pins = read_lock(path)
            stale = apply(config, pins)
            notes.append(f"sdbench: hub revisions pinned by {path} ({len(pins) - len(stale)} "
                         "commits)")
            notes += [f"sdbench: {path}: stale pin, not applied ({why}); write the lock "
                      "again" for why in stale]
    moving = unpinned(config)
    if moving:
        configs = " ".join(f"--config {f}" for f in config_files[:1]) or "--config <config>"
        notes.append(f"sdbench: {len(moving)} hub downloads on a moving revision (a later run "
                     f"may get other checkpoints): {', '.join(moving)}; pin them with "
                     f"python -m sdbench.plan.lock {configs}")
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.plan.lock", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="workflow config (YAML)")
    parser.add_argument("--output", help="lock file (default: beside the config, .lock.yaml)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        pins = resolve(hub_refs(config))
    except (ConfigError, LockError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    output = Path(args.output) if args.output else lock_path(args.config)
    write_lock(output, pins, args.config)
    moved = sum(not COMMIT.match(p["revision"]) for p in pins.values())
    print(f"{output}: {len(pins)} hub revisions, {moved} branches or tags pinned to commits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
