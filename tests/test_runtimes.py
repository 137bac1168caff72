"""Work-based time limits of cell jobs (sdbench.plan.runtimes, `cells.runtime: auto`)."""

import dataclasses
import json

import pytest

from sdbench import layout
from sdbench.data.builders import output_bound, request_bound
from sdbench.plan import grid, runtimes


@pytest.fixture
def config(demo_config):
    demo_config["cells"]["runtime"] = "auto"
    demo_config["server"]["startup_timeout_s"] = 600
    return demo_config


def served(config, speculator="vanilla", workload="spec_bench"):
    return next(c for c in grid.all_cells(config) if c.engine == grid.SERVE
                and c.speculator == speculator and c.workload["name"] == workload
                and not c.group)


def test_more_work_asks_for_more_time(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data cards: the prompt set's longest request
    cell = served(config)
    base = runtimes.cell_seconds(config, cell)
    more_prompts = dataclasses.replace(cell, workload={**cell.workload, "num_prompts": 96})
    more_repeats = dataclasses.replace(cell, repeats=cell.repeats + 2)
    one_level = dataclasses.replace(cell, concurrency=(1,))
    assert runtimes.cell_seconds(config, more_prompts) > base
    assert runtimes.cell_seconds(config, more_repeats) > base
    assert runtimes.cell_seconds(config, one_level) < base
    # a point at concurrency c sends its prompts in waves of c: 8 prompts at 8 take one wave
    # of the longest request, at 1 eight of them
    eight = {**cell.workload, "num_prompts": 8,
             "loadgen": {**cell.workload["loadgen"], "prompts_per_concurrency": None}}
    per_request = runtimes.cell_seconds(config, dataclasses.replace(
        cell, concurrency=(8,), request_rates=(), repeats=1, workload=eight))
    sequential = runtimes.cell_seconds(config, dataclasses.replace(
        cell, concurrency=(1,), request_rates=(), repeats=1, workload=eight))
    startup = config["server"]["startup_timeout_s"]
    warmups = config["loadgen"]["num_warmups"]
    wave = (per_request - startup) / (1 + warmups)
    assert sequential - startup == pytest.approx(wave * (8 + warmups))
    # the longest request: its prompt at the prefill rate, its output at the decode rate
    rates = config["cells"]["work_rates"]
    definition = cell.workload["definition"]
    output = output_bound(definition)
    assert wave == pytest.approx(runtimes.MARGIN * (
        (request_bound(definition) - output) / rates["prefill_tokens_per_s"]
        + output / rates["decode_tokens_per_s"]))


def test_the_data_card_means_replace_the_bounds(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cell = served(config)
    bound = runtimes.cell_seconds(config, cell, runtimes.read_card(cell))
    card = tmp_path / layout.card_path(cell.workload["dataset"], cell.workload["subset"])
    card.parent.mkdir(parents=True)
    card.write_text(json.dumps({"prompt_tokens": {"mean": 10.0},
                                "output_tokens": {"mean": 4.0}}))
    assert runtimes.request_tokens(cell, runtimes.read_card(cell)) == (10.0, 4.0)
    assert runtimes.cell_seconds(config, cell, runtimes.read_card(cell)) < bound
    card.write_text("{not json")  # a half-written card: the bounds again
    assert runtimes.read_card(cell) is None


def test_retries_get_more_time_up_to_the_cap_and_a_number_is_kept(config, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    cell = served(config)
    first = runtimes.job_minutes(config, [cell])
    assert first >= runtimes.ASSEMBLE_MINUTES
    assert runtimes.job_minutes(config, [cell], attempt=2) == 2 * first
    config["cells"]["max_runtime"] = first + 1
    assert runtimes.job_minutes(config, [cell], attempt=3) == first + 1
    config["cells"]["runtime"] = 240
    assert runtimes.job_minutes(config, [cell], attempt=3) == 240


def test_a_group_job_asks_for_all_its_servers_and_its_cells_jobs_for_little(
        config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = grid.cells_by_id(config)
    group = [cells[i] for i in next(c.group for c in cells.values() if c.group)]
    alone = [runtimes.cell_seconds(config, c) for c in group]
    assert runtimes.job_minutes(config, group) == pytest.approx(sum(alone) / 60, abs=1)
    assert runtimes.job_minutes(config, group[:1]) == runtimes.ASSEMBLE_MINUTES


def test_the_real_study_gets_limits_between_minutes_and_the_cap(tmp_path, monkeypatch):
    import yaml

    from sdbench.plan.config import validate_config

    from workflow_helpers import REPO

    monkeypatch.chdir(tmp_path)
    config = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    minutes = {c.cell_id: runtimes.job_minutes(config, [c]) for c in grid.all_cells(config)}
    assert len(set(minutes.values())) > 10
    assert max(minutes.values()) <= config["cells"]["max_runtime"]
    by_workload = {}
    for c in grid.all_cells(config):
        by_workload.setdefault(c.workload["name"], []).append(minutes[c.cell_id])
    # an 8k-token output bucket needs longer than a 256-token one
    assert min(by_workload["news_out8k"]) > max(by_workload["news_out0.25k"])
