"""How long a cell job may run: Snakemake's `runtime` resource, which a SLURM job gets as its
time limit. One limit for every cell either wastes the queue (a 4-minute cell asking for 4
hours waits behind longer jobs) or kills the long ones (8k-token outputs at concurrency 1 on a
72B target take hours), so `cells.runtime: auto` estimates each job's limit from its work:
every point's prompts in waves of its concurrency, each request at the prompt set's mean
prompt and output lengths (its data card; before the set is built, its longest request) at
conservative per-stream rates (`cells.work_rates`), with a margin, plus every server's
start-up limit. The limit is capped at `cells.max_runtime`, and each retry of the job gets
the estimate again on top (attempt 2: twice, up to the cap): a cell killed at its limit keeps
its finished points in the point cache, and the retry measures only the missing ones.

A number instead of `auto` is the limit in minutes for every cell job, as before.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sdbench import layout
from sdbench.data.builders import output_bound, request_bound
from sdbench.plan import grid

AUTO = "auto"
# a request bounded only by the server's context, where the server sets none
UNBOUNDED_REQUEST_TOKENS = 32768
# on top of the estimate at the conservative rates (requests that stop late, slow points)
MARGIN = 1.5
# a grouped cell's own job only writes its records from the point cache
ASSEMBLE_MINUTES = 10


def request_tokens(cell: grid.Cell, card: dict | None = None) -> tuple[float, float]:
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


def cell_seconds(config: dict, cell: grid.Cell, card: dict | None = None) -> float:
    """Seconds a cell's measurements can take: each server's start-up limit, and per point
    and repeat its prompts in waves of the point's concurrency (or at its request rate, plus
    one request), warm-up requests included, at the conservative rates with the margin."""
    rates, settings = config["cells"]["work_rates"], cell.workload["loadgen"]
    prompt, output = request_tokens(cell, card)
    per_request = MARGIN * (prompt / rates["prefill_tokens_per_s"]
                            + output / rates["decode_tokens_per_s"])
    instances = max(1, min(settings.get("server_instances") or 1, cell.repeats))
    seconds = instances * (config["server"]["startup_timeout_s"]
                           + settings.get("num_warmups", 0) * per_request)
    for load in cell.load_points():
        prompts = grid.point_prompts(cell, load)
        if load["mode"] == "rate":
            point = prompts / load["request_rate"] + per_request
        else:
            point = math.ceil(prompts / max(load["concurrency"], 1)) * per_request
        seconds += cell.repeats * point
    return seconds


def read_card(cell: grid.Cell) -> dict | None:
    """The data card of the cell's prompt set (None before it is built)."""
    path = Path(layout.card_path(cell.workload["dataset"], cell.workload["subset"]))
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def job_minutes(config: dict, cells: list[grid.Cell], attempt: int = 1) -> int:
    """The `runtime` (minutes) of one job measuring `cells` (one cell, or a group's cells, whose
    servers take the points in turn), on its `attempt`-th try; the prompt sets' data cards are
    read where they are built."""
    fixed = config["cells"]["runtime"]
    if fixed != AUTO:
        return int(fixed)
    if len(cells) == 1 and cells[0].group:
        return ASSEMBLE_MINUTES * attempt
    seconds = sum(cell_seconds(config, cell, read_card(cell)) for cell in cells)
    minutes = max(ASSEMBLE_MINUTES, math.ceil(seconds / 60)) * attempt
    return min(minutes, config["cells"]["max_runtime"])
