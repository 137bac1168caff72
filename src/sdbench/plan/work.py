"""The work of a session, in seconds, by one request model with two sets of rates.

Every point sends its prompts (`specs.point_prompts`) at the prompt set's mean prompt and output
lengths (its data card; before the set is built, estimated from its local source file where
its builder reads one request per row, `estimated_card`; else its longest request): a
closed-loop point in waves of its concurrency, an open-loop point at its request rate plus one
request. Each cell's first point in a session adds its warm-up requests, each server's first
point its readiness check (one request, where `loadgen.ready_check_timeout_s` asks for one). A
session adds its servers' start-ups and the rest of its job (job start, imports, checks, stopping).

- `sdbench.plan.runtimes` sizes a job's time limit with conservative rates
  (`cells.work_rates`, the start-up limit): a limit must not kill a slow cell.
- `sdbench.plan.cost` (`make plan`) projects what a run will cost with rates calibrated from
  measured runs per device class (`sdbench.plan.rates`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from sdbench import layout
from sdbench.data.builders import BUILDERS, CHAT, output_bound, request_bound
from sdbench.data.sources import local_files, read_source
from sdbench.data.tokens import Tokenizer, load_tokenizer
from sdbench.plan import grid, specs
from sdbench.plan.sessions import Session, session_points

# the first item of an open-loop rate's key in `SessionWork.levels`, of a speculative offline
# or Transformers cell's batch size (the adaptive rule stops those), and of any point of a
# baseline cell that is neither interleaved with its pairs nor chained with them (or chained,
# at a level a cell outside its chain reads): measured before them (they read its records),
# it is measured in full whatever the rule
RATE, BATCH, BASELINE = "rate", "batch", "baseline"
# a request bounded only by the server's context, where the server sets none
UNBOUNDED_REQUEST_TOKENS = 32768


def request_tokens(cell: specs.Cell, card: dict | None = None) -> tuple[float, float]:
    """(prompt, output) tokens of a typical request of the cell's prompt set: the means of its
    data card, or without one the longest request its definition allows."""
    if card and card.get("prompt_tokens") and card.get("output_tokens"):
        return float(card["prompt_tokens"]["mean"]), float(card["output_tokens"]["mean"])
    definition = cell.workload["definition"]
    output = output_bound(definition)
    total = request_bound(definition)
    if total is None:  # a prompt set bounded only by the server's context
        total = cell.server_config["args"].get("max_model_len") or UNBOUNDED_REQUEST_TOKENS
    return float(max(total - output, 0)), float(output)


def stored_card(workload: dict, root: str | Path = ".") -> dict | None:
    """The data card at the path of a workload's prompt set (`specs.workload_spec`, a cell's),
    whatever built it (None where there is none, or it is not whole)."""
    path = Path(root) / layout.card_path(workload["dataset"], workload["subset"])
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read_card(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=256)
def _read_card(path: str, size: int, mtime: int) -> dict | None:
    """A card file's content, read once per version of the file (a parse asks for each
    prompt set's card once per session)."""
    try:
        card = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None


def built_for(card: dict, workload: dict) -> bool:
    """Whether a data card is of the prompt set a workload (`specs.workload_spec`, a cell's)
    defines: built from the same definition (source, selection, filters, tokenizer:
    `specs.subset_definition`). The path is the same for every config, so another config's set
    (the demo's, built from fixtures) can be the one on disk."""
    return card.get("definition") == json.loads(json.dumps(workload["definition"]))


def workload_card(workload: dict, root: str | Path = ".") -> dict | None:
    """The data card of a workload's prompt set (None before it is built, or where the set on
    disk was built from another definition: `built_for`)."""
    card = stored_card(workload, root)
    return card if card is not None and built_for(card, workload) else None


def read_card(cell: specs.Cell, root: str | Path = ".") -> dict | None:
    """The data card of the cell's prompt set (`workload_card`), before it is built the one
    estimated from its source file (`estimated_card`)."""
    return workload_card(cell.workload, root) or estimated_card(cell.workload, root)


# builders whose requests are one a row of their source, never cut to a token budget: their
# set's lengths are estimated by running the builder on the file before the set is built
ESTIMATED_BUILDERS = (CHAT, "sharegpt")
# the largest source file estimated (the published ShareGPT dump, 640 MB, is not)
ESTIMATE_BYTES = 64 * 2 ** 20
# characters a token, where the study's tokenizer is not on this machine yet (English prose
# in a Llama-, Qwen- or GPT-size BPE vocabulary: about 4)
CHARS_PER_TOKEN = 4


def estimating_tokenizer(spec: dict, root: str | Path = ".") -> tuple[Tokenizer, str]:
    """The prompt set's own tokenizer where it is on this machine (a model's checkpoint folder
    with its tokenizer files, a local .tiktoken file), else CHARS_PER_TOKEN characters a token;
    and how it counts, for the plan's lines."""
    if "model" in spec:
        source = spec.get("model_identity", {}).get("source", {})
        folder = Path(source["path"]) if source.get("kind") == "path" else \
            Path(root) / layout.model_folder(spec["model"])
        if any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            tok = load_tokenizer({"model": spec["model"]}, {spec["model"]: str(folder)})
            return tok, f"the tokenizer of {spec['model']}"
    elif "tiktoken_file" in spec and Path(spec["tiktoken_file"]).is_file():
        return load_tokenizer(spec), f"the tiktoken file {spec['tiktoken_file']}"
    chars = Tokenizer(lambda text: [0] * math.ceil(len(text) / CHARS_PER_TOKEN),
                      lambda ids: "", {"chars_per_token": CHARS_PER_TOKEN})
    return chars, f"{CHARS_PER_TOKEN} characters a token"


def estimated_card(workload: dict, root: str | Path = ".") -> dict | None:
    """The means a prompt set's card would have, from its source file before the set is built
    (its builder run on the file with `estimating_tokenizer`): {prompt_tokens: {mean},
    output_tokens: {mean}, estimated: how}; None where its builder cuts prompts to a token
    budget, the file is remote, missing, too large or cannot be built from."""
    definition = workload["definition"]
    files = local_files(definition["source_spec"])
    if definition["builder"] not in ESTIMATED_BUILDERS or len(files) != 1:
        return None
    path = Path(root) / files[0]
    try:
        stat = path.stat()
    except OSError:
        return None
    if stat.st_size > ESTIMATE_BYTES:
        return None
    return _estimate(json.dumps(definition, sort_keys=True), str(path), stat.st_size,
                     stat.st_mtime_ns, str(root))


@lru_cache(maxsize=64)
def _estimate(definition_json: str, path: str, size: int, mtime: int, root: str) -> dict | None:
    definition = json.loads(definition_json)
    try:
        tok, how = estimating_tokenizer(definition["tokenizer"], root)
        _, rows, _ = read_source(definition["source"], definition["source_spec"], path, path)
        records = BUILDERS[definition["builder"]](
            rows, {**definition, "allow_partial": True}, tok, Counter())
    except Exception:  # noqa: BLE001 - the checks and the build say what is wrong with it
        return None
    if not records:
        return None
    return {"prompt_tokens": {"mean": sum(r["prompt_tokens"] for r in records) / len(records)},
            "output_tokens": {"mean": sum(r["output_tokens"] for r in records) / len(records)},
            "records": len(records), "estimated": how}


class Rates(Protocol):
    """Seconds of the parts of a session's work."""

    def request_s(self, cell: specs.Cell, prompt: float, output: float,
                  concurrency: int) -> float:
        """One request of `cell` among `concurrency` in flight (its wall time)."""

    def startup_s(self, cell: specs.Cell, first: bool) -> float:
        """One start of the cell's server (`first`: the first of its configuration on the
        host: compile caches are cold)."""

    def point_overhead_s(self, cell: specs.Cell) -> float:
        """The load generator's own time around a point (its start, reading the prompts)."""

    def rest_s(self, session: Session) -> float:
        """A session's job outside start-ups and points (job start, imports, checks, stop)."""

    def side_by_side_s(self, spans: list[float]) -> float:
        """Start-ups of servers launched together (each on its own GPUs, or sharing CPUs)."""


@dataclass(frozen=True)
class SessionWork:
    startup_s: float
    measuring_s: float
    rest_s: float
    starts: int
    gpus: int
    # its share of measuring_s by level: (closed-loop concurrency, blocks of prompts there),
    # (RATE, requests per second) at an open-loop rate, (BATCH, batch size) of a speculative
    # offline or Transformers cell; (BASELINE, level) a baseline's measured in full (neither
    # interleaved nor chained with its pairs, `level_key`)
    levels: dict = field(default_factory=dict, compare=False)

    @property
    def total_s(self) -> float:
        return self.startup_s + self.measuring_s + self.rest_s


def in_flight(cell: specs.Cell, load: dict, rates: Rates, card: dict | None) -> int:
    """The requests a cell has in flight at an open-loop rate: about the rate × one request's
    time (at least 1, at most the point's prompts)."""
    prompt, output = request_tokens(cell, card)
    single = rates.request_s(cell, prompt, output, 1)
    return max(1, min(specs.point_prompts(cell, load), math.ceil(load["request_rate"] * single)))


def point_seconds(cell: specs.Cell, load: dict, rates: Rates, card: dict | None,
                  warm_ups: int = 0, ready_check: bool = False) -> float:
    """One point of the cell: its prompts in waves of its concurrency (or at its rate), the
    warm-up requests and readiness check before it, the load generator's own time."""
    prompt, output = request_tokens(cell, card)
    prompts = specs.point_prompts(cell, load)
    if load["mode"] == "rate":
        level = in_flight(cell, load, rates, card)
        seconds = prompts / load["request_rate"] + rates.request_s(cell, prompt, output, level)
    else:
        level = max(1, min(load["concurrency"], prompts))
        seconds = math.ceil(prompts / level) * rates.request_s(cell, prompt, output, level)
    if warm_ups:
        level = max(1, min(warm_ups, load.get("concurrency") or 1))
        seconds += math.ceil(warm_ups / level) * rates.request_s(cell, prompt, output, level)
    if ready_check:
        seconds += rates.request_s(cell, prompt, output, 1)
    return seconds + rates.point_overhead_s(cell)


def level_key(session: Session, cell: specs.Cell, load: dict,
              kept: dict[str, set] | None = None) -> tuple:
    """Where a point's measuring counts in `SessionWork.levels` (see there). `kept`: chained
    baselines' levels measured in full (`grid.chain_kept`)."""
    if cell.is_baseline and not session.interleaved and (
            not cell.chain or grid.load_level(load) in (kept or {}).get(cell.cell_id, ())):
        return BASELINE, grid.level_value(load)
    if load["mode"] == "concurrency":
        return load["concurrency"], specs.point_blocks(cell, load)
    if load["mode"] == "rate":
        return RATE, float(load["request_rate"])
    return BATCH, int(load["concurrency"])  # (an engine cell's baseline: never interleaved)


def session_work(session: Session, cells: dict[str, specs.Cell], rates: Rates,
                 cards: dict[str, dict | None] | None = None,
                 cold: set[str] | None = None, root: str | Path = ".",
                 kept: dict[str, set] | None = None) -> SessionWork:
    """The session's start-ups, measuring and rest at `rates`. `cards`: cell id -> its prompt
    set's data card (read under `root` where built, when not given); `cold`: config ids whose
    first start on this host this is (their compile caches are cold); the set is updated."""
    cards = {} if cards is None else cards
    cold = set() if cold is None else cold
    measuring, startup, served = 0.0, 0.0, set()
    firsts: dict[str, specs.Cell] = {}
    points_per_config: dict[str, int] = {}
    levels: dict[str, set] = {}  # concurrencies each configuration's server has measured
    by_level: dict[tuple, float] = {}
    for cell_id in session.cells:
        cell = cells[cell_id]
        if cell_id not in cards:
            cards[cell_id] = read_card(cell, root)
        cid = cell.config_id
        firsts.setdefault(cid, cell)
        for load, _repeat in session_points(session, cell):
            fresh = session.fresh_per_point
            first_of_cell = cell_id not in served and not fresh
            first_of_server = (fresh or points_per_config.get(cid, 0) == 0) and bool(
                cell.workload["loadgen"].get("ready_check_timeout_s"))
            level = load.get("concurrency") if load["mode"] != "rate" else None
            seen = set() if fresh else levels.setdefault(cid, set())
            wave = specs.level_warm_up(cell, None if level in seen else level)
            seconds = point_seconds(cell, load, rates, cards[cell_id],
                                    specs.warm_up_requests(cell, first_of_cell) + wave,
                                    first_of_server)
            measuring += seconds
            key = level_key(session, cell, load, kept)
            by_level[key] = by_level.get(key, 0.0) + seconds
            seen.add(level)
            served.add(cell_id)
            points_per_config[cid] = points_per_config.get(cid, 0) + 1
            if fresh:
                startup += rates.startup_s(cell, cid in cold)
                cold.discard(cid)
    starts = len(firsts)
    if session.fresh_per_point:
        starts = sum(points_per_config.values())
    else:
        spans = [rates.startup_s(cell, cid in cold) for cid, cell in firsts.items()]
        startup = rates.side_by_side_s(spans) if session.interleaved else sum(spans)
        cold.difference_update(firsts)
    gpus = sum(specs.cell_gpus(cell.server_config) for cell in firsts.values()) \
        if session.interleaved else specs.cell_gpus(next(iter(firsts.values())).server_config)
    return SessionWork(startup, measuring, rates.rest_s(session), starts, gpus, by_level)
