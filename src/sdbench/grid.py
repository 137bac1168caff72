"""From a validated config to the grid of cells (server config x workload).

A cell's id is a short stable hash of its canonical server config + workload, so a cell whose
definition did not change keeps its id (and its results) when other parts of the config change.
Every speculative cell names the vanilla cell it is compared with (`baseline_cell_id`): the same
target, server arguments and workload, without speculation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .config import VANILLA, ConfigError
from .data.builders import BUCKETED, ORDERED
from .ids import short_hash

MODELS_DIR = "resources/models"
PROCESSED_DIR = "data/processed"
CELLS_DIR = "results/cells"


@dataclass(frozen=True)
class Cell:
    cell_id: str
    round: str
    speculator: str  # report label: "vanilla", "ngram", "draft_model", or the configured name
    server_config: dict
    workload: dict
    baseline_cell_id: str | None
    concurrency: tuple[int, ...] = field(default=())

    @property
    def is_baseline(self) -> bool:
        return self.server_config["method"] == VANILLA

    @property
    def label(self) -> str:
        k = self.server_config["num_speculative_tokens"]
        name = self.speculator if k is None else f"{self.speculator} k={k}"
        return f"{name} | {self.server_config['target']['name']} | {self.workload['name']}"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["concurrency"] = list(self.concurrency)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Cell:
        return cls(**{**data, "concurrency": tuple(data["concurrency"])})


def model_dir(config: dict, name: str) -> str:
    """Directory the server loads model `name` from (built/downloaded by the models rule)."""
    source = config["models"][name]["source"]
    if source["kind"] == "path":
        return source["path"]
    return f"{MODELS_DIR}/{name}"


def model_identity(config: dict, name: str) -> dict:
    model = config["models"][name]
    identity = {"name": name, "source": model["source"], "quantization": model["quantization"]}
    if model["source"]["kind"] == "truncate":
        # a derived model changes when the model it is cut from changes
        identity["base"] = model_identity(config, model["source"]["model"])
    return identity


def processed_path(dataset: str, subset: str) -> str:
    return f"{PROCESSED_DIR}/{dataset}/{subset}.jsonl"


def card_path(dataset: str, subset: str) -> str:
    return f"{PROCESSED_DIR}/{dataset}/{subset}.card.json"


def tokenizer_spec(config: dict, dataset: str) -> dict:
    """The dataset's tokenizer (default: the config's), with the model's identity if any."""
    spec = dict(config["datasets"][dataset].get("tokenizer") or config["tokenizer"])
    if "model" in spec:
        spec["model_identity"] = model_identity(config, spec["model"])
    return spec


def subset_definition(config: dict, dataset: str, subset: str) -> dict:
    """Everything one processed subset is built from, and nothing else: changing one bucket
    changes only that bucket's definition (and so rebuilds only that file)."""
    definition = {k: v for k, v in config["datasets"][dataset].items() if k != "buckets"}
    builder = definition["builder"]
    if builder in BUCKETED:
        definition["bucket"] = next(b for b in config["datasets"][dataset]["buckets"]
                                    if b["name"] == subset)
    elif "buckets" in config["datasets"][dataset]:
        definition["buckets"] = config["datasets"][dataset]["buckets"]
    return {**definition, "dataset": dataset, "subset": subset,
            "tokenizer": tokenizer_spec(config, dataset),
            "source_spec": config["sources"][definition["source"]]}


def workload_spec(config: dict, name: str) -> dict:
    """The workload as it enters the cell identity: prompts, output rule, sampling."""
    workload = config["workloads"][name]
    definition = subset_definition(config, workload["dataset"], workload["subset"])
    return {
        "name": name,
        "dataset": workload["dataset"],
        "subset": workload["subset"],
        "definition": definition,
        "num_prompts": workload["num_prompts"],
        "shuffle": definition["builder"] not in ORDERED,
        "path": processed_path(workload["dataset"], workload["subset"]),
        "loadgen": config["loadgen"],
    }


def server_config(config: dict, target: str, method: str = VANILLA, k: int | None = None,
                  draft: str | None = None, options: dict | None = None) -> dict:
    return {
        "target": model_identity(config, target),
        "method": method,
        "num_speculative_tokens": k,
        "draft": None if draft is None else model_identity(config, draft),
        "method_options": dict(options or {}),
        "args": config["server"]["args"],
        "env": config["server"]["env"],
    }


def cell_id_of(server: dict, workload: dict) -> str:
    return short_hash({"server_config": server, "workload": workload})


def round1_cells(config: dict) -> list[Cell]:
    round1 = config["round1"]
    concurrency = tuple(sorted(round1["concurrency"]))
    cells: dict[str, Cell] = {}
    origin: dict[str, str] = {}

    def add(cell: Cell, where: str) -> None:
        if cell.cell_id in cells:
            raise ConfigError(
                f"{where} defines the same cell as {origin[cell.cell_id]} "
                f"(cell {cell.cell_id}: {cell.label}); remove one of them")
        cells[cell.cell_id] = cell
        origin[cell.cell_id] = where

    for target in round1["targets"]:
        for workload_name in round1["workloads"]:
            workload = workload_spec(config, workload_name)
            base_server = server_config(config, target)
            base_id = cell_id_of(base_server, workload)
            add(Cell(base_id, "round1", VANILLA, base_server, workload, None, concurrency),
                f"round1 vanilla for target {target!r}, workload {workload_name!r}")
            for i, spec in enumerate(round1["methods"]):
                name = spec.get("name") or (
                    spec["method"] if spec.get("draft") is None
                    else f"{spec['method']}:{spec['draft']}")
                for k in spec["k"]:
                    server = server_config(config, target, spec["method"], k, spec.get("draft"),
                                           spec["options"])
                    add(Cell(cell_id_of(server, workload), "round1", name, server, workload,
                             base_id, concurrency),
                        f"round1.methods[{i}] (k={k}, target {target!r}, "
                        f"workload {workload_name!r})")
    return list(cells.values())


def all_cells(config: dict) -> list[Cell]:
    return round1_cells(config)


def cells_by_id(config: dict) -> dict[str, Cell]:
    return {cell.cell_id: cell for cell in all_cells(config)}


def cell_output(cell_id: str) -> str:
    return f"{CELLS_DIR}/{cell_id}.jsonl"


def cell_models(cell: Cell) -> list[str]:
    """Model keys a cell needs on disk (target, then draft)."""
    names = [cell.server_config["target"]["name"]]
    if cell.server_config["draft"] is not None:
        names.append(cell.server_config["draft"]["name"])
    return names
