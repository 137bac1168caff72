# Config -> grid of cells, input functions and wildcard constraints. All logic is in the
# sdbench library (src/); this file only connects it to Snakemake.
import os
import re
import sys
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
# scripts and notebooks run in child processes: let them import the library too
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))

from sdbench import checks, grid, preflight
from sdbench.report import salvage
from sdbench.config import validate_config
from sdbench.data.builders import subsets_of
from sdbench.data.sources import manifest_path, raw_path

CONFIG_SOURCE = ", ".join(map(str, workflow.overwrite_configfiles)) or "config/config.yaml"
validate_config(config, source=CONFIG_SOURCE)
checks.check_installed(config, source=CONFIG_SOURCE)

CELLS = grid.cells_by_id(config)
CELL_THREADS = (
    workflow.cores if config["cells"]["threads"] == "all" else config["cells"]["threads"]
)
ENV = "../../environment.yml"
# files of the workflow itself, found wherever the working directory is (snakemake -d ...)
NOTEBOOKS = Path(workflow.basedir) / "workflow" / "notebooks"


def names_regex(names):
    """Wildcard constraint matching exactly these names (or nothing when there are none)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


ALL_SUBSETS = {s for d in config["datasets"].values() for s in subsets_of(d)}
BUILT_MODELS = [n for n, m in config["models"].items() if m["source"]["kind"] != "path"]


wildcard_constraints:
    cell_id="[0-9a-f]{12}",
    source=names_regex(config["sources"]),
    model=names_regex(BUILT_MODELS),
    dataset=names_regex(config["datasets"]),
    subset=names_regex(ALL_SUBSETS),


def model_input(name):
    """What a job needing model `name` depends on: its built directory, or the user's path."""
    return grid.model_dir(config, name)


def cell_inputs(wildcards):
    cell = CELLS[wildcards.cell_id]
    inputs = {"prompts": cell.workload["path"]}
    for role, name in zip(("target", "draft"), grid.cell_models(cell)):
        inputs[role] = model_input(name)
    return inputs


def model_build_inputs(wildcards):
    source = config["models"][wildcards.model]["source"]
    return {"base": model_input(source["model"])} if source["kind"] == "truncate" else {}


def prompt_inputs(wildcards):
    """Raw file + manifest of the dataset's source, and the tokenizer's model folder."""
    source = config["datasets"][wildcards.dataset]["source"]
    spec = config["sources"][source]
    inputs = {"raw": raw_path(source, spec), "manifest": manifest_path(source, spec)}
    tokenizer = grid.tokenizer_spec(config, wildcards.dataset)
    if "model" in tokenizer:
        inputs["tokenizer_model"] = model_input(tokenizer["model"])
    return inputs


def preflight_check():
    """Before any job of a real run: fail at once if a download cannot be reached."""
    preflight.check(config)


def salvage_reports():
    """After a run with failed jobs: reports from what was measured, failures listed."""
    salvage(config, list(CELLS.values()), REPORTS)


REPORTS = {"Round 1: methods vs no speculation": "round1.html"}


def all_prompt_sets():
    """Every processed subset of every dataset (the sets later rounds read are built too)."""
    return [
        path
        for name, dataset in config["datasets"].items()
        for subset in subsets_of(dataset)
        for path in (grid.processed_path(name, subset), grid.card_path(name, subset))
    ]


def all_cell_records():
    return [grid.cell_output(cell_id) for cell_id in CELLS]
