"""Would another vLLM release take what the workflow passes it? Checked without a GPU, a model
or a server: every cell's server command line and load generator arguments are parsed by that
release's own parsers, and every speculative_config key and value is checked against the
fields (and Literal values) of its SpeculativeConfig.

Two halves, two Python environments (`scripts/check_vllm_version.sh` runs both):

  python scripts/vllm_args_check.py dump --config config/config.yaml > cells.json
      the project's environment: what the workflow would pass for every vLLM cell
  OTHER/bin/python scripts/vllm_args_check.py check cells.json > checked.json
      the other vLLM's environment (imports nothing of sdbench): each cell's findings
  python scripts/vllm_args_check.py report checked.json --config config/config.yaml
      the project's environment again: a Markdown page of what changed, and what the plan
      says of each refused cell under that vLLM
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib
import importlib.util
import io
import json
import os
import sys
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# --- the project's side --------------------------------------------------------------------

def dump(config_path: str) -> list[dict]:
    sys.path.insert(0, str(REPO / "src"))
    from types import SimpleNamespace

    from sdbench.measure import server
    from sdbench.measure.serving import server_command
    from sdbench.plan import checks, grid, specs
    from sdbench.plan.config import load_config, validate_config
    from sdbench.plan.settings import settings

    config = validate_config(load_config(config_path))
    srv = settings(config).server
    fake = SimpleNamespace(connect_host="127.0.0.1", port=8000)
    cells = []
    for cell in grid.all_cells(config):
        if cell.engine != specs.SERVE:
            continue  # the offline engine and Transformers cells pass no server command line
        target = cell.server_config["target"]["name"]
        # `dtype: host` as a GPU resolves it (the checkpoint's: vLLM's "auto")
        args = {k: v for k, v in cell.server_config["args"].items()
                if not (k == "dtype" and v == "host")}
        spec = server.speculative_config(cell, config)
        # per-request acceptance as this (0.32+) vLLM's servers report it
        args = server.reporting_args(args, spec, checks.vllm_features())
        argv = server_command(specs.model_dir(config, target), target, srv.host, 8000, args,
                              spec, python="python")
        level = cell.concurrency[0] if cell.concurrency else 1
        load = server.point_argv(cell, config, fake, {"concurrency": level}, None)
        cells.append({"cell_id": cell.cell_id, "label": cell.label,
                      "method": cell.server_config["method"],
                      "draft_architecture": checks.METHOD_ARCHITECTURES.get(
                          cell.server_config["method"]),
                      "server_argv": argv[3:], "module": argv[2], "loadgen_argv": load})
    return cells


def plan_reasons(checked: dict, config_path: str) -> dict[str, str | None]:
    """cell id -> what the plan says of the cell when the installed vLLM is the checked one
    (its speculative methods; the host's own verdicts left out)."""
    sys.path.insert(0, str(REPO / "src"))
    from sdbench.plan import checks, grid, hostcaps
    from sdbench.plan.config import load_config, validate_config

    config = validate_config(load_config(config_path))
    features = checks.VllmFeatures(checked["version"], frozenset(checked["methods"]),
                                   frozenset(), architectures=frozenset(
                                       checked["architectures"]))
    return {c.cell_id: hostcaps.plan_reason(config, c, None, features=features)
            for c in grid.all_cells(config)}


def _compared(checked: dict) -> str:
    """What the checked vLLM's methods add and lose against this environment's vLLM."""
    from sdbench.plan import checks

    here = checks.vllm_features()
    if here is None:
        return "- (no vLLM in this environment to compare with)"
    theirs = set(checked["methods"])
    lost, added = sorted(here.methods - theirs), sorted(theirs - here.methods)
    return (f"- against this environment's vLLM {here.version}: methods removed: "
            f"{', '.join(lost) or 'none'}; added: {', '.join(added) or 'none'}")


def report(checked: dict, config_path: str) -> str:
    cells = checked["cells"]
    bad = [c for c in cells if c["problems"]]
    planned = plan_reasons(checked, config_path)
    lines = [f"# The workflow's arguments under vLLM {checked['version']}", "",
             f"Written by `scripts/check_vllm_version.sh {checked['version']}` (do not edit) "
             f"on {datetime.date.today().isoformat()}: vLLM {checked['version']} (torch "
             f"{checked['torch']}, platform {checked.get('platform')}) installed from PyPI in "
             "an environment of its own, on a CPU machine; no model loaded, no server started. "
             "Every vLLM-served cell of `config/config.yaml`: its server command line parsed "
             "by that release's own `vllm serve` parser (and `validate_parsed_serve_args`), "
             "turned into `EngineArgs`, each `--speculative-config` key checked against the "
             "fields of its `SpeculativeConfig` and each value of a `Literal` field against "
             "the values it allows, a Medusa or MLP-speculator draft's architecture looked up "
             "in its model registry; the load generator's arguments of the cell's first point "
             "parsed by its `vllm bench serve` parser.", "",
             f"- cells: {len(cells)}; accepted: {len(cells) - len(bad)}; with problems: "
             f"{len(bad)}",
             f"- server module `{checked['module']}`: {checked['module_note']}",
             f"- speculative methods it has: {', '.join(checked['methods'])}",
             _compared(checked), ""]
    groups: dict[tuple, list[dict]] = {}
    for c in bad:
        groups.setdefault((c["method"], "; ".join(c["problems"]), planned[c["cell_id"]]),
                          []).append(c)
    if groups:
        lines += ["| method | cells | what that vLLM says | the plan | e.g. |",
                  "|---|---|---|---|---|"]
        for (method, problems, reason), members in sorted(groups.items(), key=str):
            plan = (f"planned as unsupported: “{reason}”; the rest runs" if reason
                    else "**planned to run: the cell would fail**")
            example = members[0]["label"].replace("|", "·")
            lines.append(f"| {method} | {len(members)} | {problems} | {plan} | {example} "
                         f"(`{members[0]['cell_id']}`) |")
        lines.append("")
    unexpected = [c for c in bad if not planned[c["cell_id"]]]
    lines.append("Verdict: " + ("every cell is accepted except the cells the plan lists as "
                                "unsupported by this vLLM."
                                if not unexpected else
                                f"{len(unexpected)} cells this vLLM would refuse and the plan "
                                "does not expect."))
    return "\n".join(lines) + "\n"


# --- the other vLLM's side (nothing of sdbench) --------------------------------------------

def _first(*names: str):
    for name in names:
        module, _, attr = name.rpartition(".")
        with contextlib.suppress(ImportError, AttributeError):
            return getattr(importlib.import_module(module), attr)
    raise ImportError(f"none of {names} in this vLLM")


def _literals(tp) -> list[str]:
    values = []
    for arg in typing.get_args(tp):
        values += _literals(arg) if typing.get_args(arg) else [arg]
    return [v for v in values if isinstance(v, str)]


def _parse(parser, argv: list[str]) -> tuple[object | None, str | None]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv), None
    except SystemExit:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue() else "refused"


def check(cells: list[dict]) -> dict:
    # a CUDA build of vLLM on a machine without a GPU finds no platform, and building its
    # parser fails on the default device; its CPU platform parses the same arguments
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import torch
    import vllm
    from vllm import ModelRegistry
    from vllm.benchmarks import serve as bench
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    from vllm.engine.arg_utils import AsyncEngineArgs

    parser_cls = _first("vllm.utils.argparse_utils.FlexibleArgumentParser",
                        "vllm.utils.FlexibleArgumentParser")
    # where `vllm serve` keeps its parser: 0.33, 0.32, older releases
    places = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
              "vllm.entrypoints.openai.cli_args")
    make_parser = _first(*(f"{place}.make_arg_parser" for place in places))
    validate = None
    with contextlib.suppress(ImportError):
        validate = _first(*(f"{place}.validate_parsed_serve_args" for place in places))
    methods = set(_literals(SpeculativeMethod))
    registered = set(ModelRegistry.get_supported_archs())
    hints = typing.get_type_hints(SpeculativeConfig)
    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    out = []
    for cell in cells:
        problems = []
        args, error = _parse(make_parser(parser_cls()), cell["server_argv"])
        if error:
            problems.append(f"server arguments refused: {error}")
        else:
            try:
                if validate is not None:
                    validate(args)
                AsyncEngineArgs.from_cli_args(args)
            except Exception as exc:  # noqa: BLE001 - what that release says, recorded
                problems.append(f"server arguments refused: {type(exc).__name__}: {exc}")
            spec = getattr(args, "speculative_config", None) or {}
            if isinstance(spec, str):
                spec = json.loads(spec)
            for key, value in sorted(spec.items()):
                if key not in fields:
                    problems.append(f"speculative_config has no field {key!r}")
                    continue
                allowed = _literals(hints.get(key))
                if key == "method" and value not in methods:
                    problems.append(f"method {value!r} is not one of its speculative methods")
                elif allowed and isinstance(value, str) and value not in allowed:
                    problems.append(f"speculative_config.{key} = {value!r} is not one of "
                                    f"{allowed}")
        architecture = cell.get("draft_architecture")
        if architecture and cell["method"] in methods and architecture not in registered:
            problems.append(f"its model registry has no {architecture} (the {cell['method']} "
                            "draft's architecture)")
        bench_parser = parser_cls()
        bench.add_cli_args(bench_parser)
        _, error = _parse(bench_parser, cell["loadgen_argv"])
        if error:
            problems.append(f"load generator arguments refused: {error}")
        out.append({**cell, "problems": problems})
    module = cells[0]["module"] if cells else "vllm.entrypoints.openai.api_server"
    source = importlib.util.find_spec(module)
    text = Path(source.origin).read_text() if source else ""
    note = ("missing" if source is None else
            "present but deprecated (its `__main__` warns: use `vllm serve`)"
            if "deprecated" in text else "present")
    return {"version": vllm.__version__, "torch": torch.__version__, "module": module,
            "platform": os.environ["VLLM_TARGET_DEVICE"],
            "module_note": note, "methods": sorted(methods),
            "architectures": sorted(registered), "cells": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("dump").add_argument("--config", default="config/config.yaml")
    sub.add_parser("check").add_argument("cells")
    reporting = sub.add_parser("report")
    reporting.add_argument("checked")
    reporting.add_argument("--config", default="config/config.yaml")
    args = parser.parse_args(argv)
    if args.what == "dump":
        json.dump(dump(args.config), sys.stdout, indent=1)
    elif args.what == "check":
        json.dump(check(json.loads(Path(args.cells).read_text())), sys.stdout, indent=1)
    else:
        sys.stdout.write(report(json.loads(Path(args.checked).read_text()), args.config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
