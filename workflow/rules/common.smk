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

from sdbench import grid
from sdbench.config import BUILDER_SUBSETS, validate_config
from sdbench.data.sources import manifest_path, raw_path

CONFIG_SOURCE = ", ".join(map(str, workflow.overwrite_configfiles)) or "config/config.yaml"
validate_config(config, source=CONFIG_SOURCE)

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


def datasets_of(builder):
    return [n for n, d in config["datasets"].items() if d["builder"] == builder]


BUILT_MODELS = [n for n, m in config["models"].items() if m["source"]["kind"] != "path"]


wildcard_constraints:
    cell_id="[0-9a-f]{12}",
    source=names_regex(config["sources"]),
    model=names_regex(BUILT_MODELS),


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


def dataset_inputs(wildcards):
    source = config["datasets"][wildcards.dataset]["source"]
    return {"raw": raw_path(source), "manifest": manifest_path(source)}


def processed_outputs(builder):
    return expand(
        "data/processed/{{dataset}}/{subset}.jsonl", subset=BUILDER_SUBSETS[builder]
    )


def all_cell_records():
    return [grid.cell_output(cell_id) for cell_id in CELLS]
