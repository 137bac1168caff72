"""Work-based time limits of session jobs (sdbench.plan.runtimes, `cells.runtime: auto`), by
the request model of sdbench.plan.work."""

import dataclasses
import json

import pytest

from sdbench import layout
from sdbench.data.builders import output_bound, request_bound
from sdbench.plan import dynamic_k, grid, runtimes, sessions, specs, work


@pytest.fixture
def config(demo_config):
    demo_config["cells"]["runtime"] = "auto"
    demo_config["server"]["startup_timeout_s"] = 600
    return demo_config


def served(config, speculator="vanilla", workload="spec_bench"):
    return next(c for c in grid.all_cells(config) if c.engine == specs.SERVE
                and c.speculator == speculator and c.workload["name"] == workload
                and not c.group)


def seconds(config, cell, card=None):
    """A cell alone: its sessions' work at the conservative rates."""
    rates = runtimes.ConservativeRates(config)
    return sum(work.session_work(s, {cell.cell_id: cell}, rates,
                                 {cell.cell_id: card}).total_s
               for s in sessions.standalone(cell).values())


def test_more_work_asks_for_more_time(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data cards: the prompt set's longest request
    cell = served(config)
    base = seconds(config, cell)
    more_prompts = dataclasses.replace(cell, workload={**cell.workload, "num_prompts": 96})
    more_repeats = dataclasses.replace(cell, repeats=cell.repeats + 2)
    one_level = dataclasses.replace(cell, concurrency=(1,))
    assert seconds(config, more_prompts) > base
    assert seconds(config, more_repeats) > base
    assert seconds(config, one_level) < base
    # a point at concurrency c sends its prompts in waves of c: 8 prompts at 8 take one wave
    # of the longest request, at 1 eight of them (and each cell's first point its warm-ups)
    eight = {**cell.workload, "num_prompts": 8,
             "loadgen": {**cell.workload["loadgen"], "prompts_per_concurrency": None}}
    per_request = seconds(config, dataclasses.replace(
        cell, concurrency=(8,), request_rates=(), repeats=1, workload=eight))
    sequential = seconds(config, dataclasses.replace(
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
    bound = seconds(config, cell, work.read_card(cell))
    card = tmp_path / layout.card_path(cell.workload["dataset"], cell.workload["subset"])
    card.parent.mkdir(parents=True)
    means = {"prompt_tokens": {"mean": 10.0}, "output_tokens": {"mean": 4.0}}
    # a card of another definition (another config's set at the same path) is not this one's
    card.write_text(json.dumps({**means, "definition": {**cell.workload["definition"],
                                                        "samples": 1}}))
    assert work.read_card(cell) is None
    card.write_text(json.dumps({**means, "definition": cell.workload["definition"]}))
    assert work.request_tokens(cell, work.read_card(cell)) == (10.0, 4.0)
    assert seconds(config, cell, work.read_card(cell)) < bound
    card.write_text("{not json")  # a half-written card: the bounds again
    assert work.read_card(cell) is None


def test_retries_get_more_time_up_to_the_cap_and_a_number_is_kept(config, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = grid.cells_by_id(config)
    cell = served(config)
    session = sessions.plan_sessions(cells)[sessions.cell_sessions(cell, cells)[0]]
    first = runtimes.session_minutes(config, session, cells)
    assert first >= runtimes.ASSEMBLE_MINUTES
    assert runtimes.session_minutes(config, session, cells, attempt=2) == 2 * first
    config["cells"]["max_runtime"] = first + 1
    assert runtimes.session_minutes(config, session, cells, attempt=3) == first + 1
    # a fixed limit grows the same way on a retry, up to max_runtime
    config["cells"].update(runtime=40, max_runtime=100)
    assert [runtimes.session_minutes(config, session, cells, attempt=a) for a in (1, 2, 3)] \
        == [40, 80, 100]


def test_a_session_asks_for_its_cells_work_and_one_start_per_server(config, tmp_path,
                                                                    monkeypatch):
    """A session of several workloads: their points' work and its own start-up, not one start
    per cell; a group's session: each of its servers' start-ups."""
    monkeypatch.chdir(tmp_path)
    cells = grid.cells_by_id(config)
    planned = sessions.plan_sessions(cells)
    rates = runtimes.ConservativeRates(config)
    startup = config["server"]["startup_timeout_s"]
    for session in planned.values():
        together = work.session_work(session, cells, rates)
        alone = [work.session_work(s, {c: cells[c]}, rates)
                 for c in session.cells for s in sessions.standalone(cells[c]).values()
                 if s.instance == session.instance]
        assert together.startup_s == startup * len(session.configs)
        assert together.measuring_s <= sum(w.measuring_s for w in alone)
        assert together.starts == len(session.configs)
    several = next(s for s in planned.values() if len(s.cells) > 2 and not s.interleaved)
    assert runtimes.session_minutes(config, several, cells) < sum(
        runtimes.cell_minutes(config, [cells[c]]) for c in several.cells)


def test_the_real_study_gets_limits_between_minutes_and_the_cap(tmp_path, monkeypatch):
    import yaml

    from sdbench.plan.config import validate_config

    from workflow_helpers import REPO

    monkeypatch.chdir(tmp_path)
    config = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    cells = grid.cells_by_id(config)
    planned = sessions.plan_sessions(cells)
    minutes = {sid: runtimes.session_minutes(config, s, cells) for sid, s in planned.items()}
    # at the conservative rates a session of every round 1 workload asks for the cap (it
    # resumes from its points if killed there); the Transformers reference for less
    assert max(minutes.values()) == config["cells"]["max_runtime"]
    reference = [m for sid, m in minutes.items() if planned[sid].engine == specs.TRANSFORMERS]
    assert reference and max(reference) < config["cells"]["max_runtime"]
    # a derived dynamic-K schedule's job measures its three cells alone, one after another
    spec = dynamic_k.dynamic_k_specs(config)[0]
    arms = dynamic_k.dynamic_k_placeholders(config, spec)
    assert len({c.config_id for c in arms}) == 3
    assert runtimes.ASSEMBLE_MINUTES <= runtimes.cell_minutes(config, arms[:1]) < \
        runtimes.cell_minutes(config, arms) <= config["cells"]["max_runtime"]


def test_sessions_start_longest_chain_first(config, tmp_path, monkeypatch):
    """A session's priority is its own estimated seconds, plus those of the derived dynamic-K
    cells whose schedules read its cells: where sessions run side by side, the chains that end
    last start first."""
    from sdbench.plan import rates

    monkeypatch.chdir(tmp_path)
    cells = grid.cells_by_id(config)
    planned = sessions.plan_sessions(cells)
    device = "cpu-avx2"
    priorities, derived = runtimes.job_priorities(config, planned, cells, device)
    model = rates.CalibratedRates(config, rates.DEVICES[device])
    own = {sid: work.session_work(s, cells, model).total_s for sid, s in planned.items()}
    (spec,) = dynamic_k.dynamic_k_specs(config)
    key = (spec["target"], spec["workload"], spec["speculator"])
    assert list(derived) == [key] and derived[key] > 0
    feeding = {c.cell_id for c in dynamic_k.dynamic_k_sources(spec, cells)}
    assert {cells[c].speculator for c in feeding} == {"vanilla", spec["speculator"]}
    waiting = {sid for sid, s in planned.items() if feeding & set(s.cells)}
    assert waiting and len(waiting) < len(planned)
    for sid in planned:
        if sid in waiting:  # the derived cell's own work comes after it
            assert abs(priorities[sid] - own[sid] - derived[key]) <= 1
        else:
            assert priorities[sid] == round(own[sid])
    # more work, higher priority (the longest session first)
    others = sorted((s for s in planned if s not in waiting), key=own.get)
    assert [priorities[s] for s in others] == sorted(priorities[s] for s in others)
    assert own[others[-1]] > own[others[0]]


def test_a_chains_first_stage_starts_before_shorter_sessions(demo_config_raw, tmp_path,
                                                              monkeypatch):
    """Under `adaptive.chain` a stage's priority is its own seconds plus the longest of what
    waits on it (the chain's later stages): the baseline's first stage, the head of the
    longest chain, comes first, and every stage outranks the stages that wait on it."""
    from sdbench.plan import rates
    from sdbench.plan.config import validate_config

    monkeypatch.chdir(tmp_path)
    demo_config_raw["round1"]["methods"] = [{"method": "ngram", "k": [2, 3]}]
    demo_config_raw["dynamic_k"] = []
    demo_config_raw["adaptive"] = {"noise": 0.05, "chain": True}
    config = validate_config(demo_config_raw)
    cells = grid.cells_by_id(config)
    planned = sessions.plan_sessions(cells)
    priorities, _ = runtimes.job_priorities(config, planned, cells, "cpu-avx2")
    model = rates.CalibratedRates(config, rates.DEVICES["cpu-avx2"])
    own = {sid: work.session_work(s, cells, model).total_s for sid, s in planned.items()}
    chained = {sid: s for sid, s in planned.items() if "-c" in sid}
    assert chained
    for sid, session in chained.items():
        for cell_id in session.cells:
            for needed in sessions.chain_inputs(cells[cell_id], session.instance, cells):
                assert priorities[needed] >= priorities[sid] + round(own[needed]) - 1
    heads = [sid for sid in chained if chained[sid].instance == 0
             and cells[chained[sid].cells[0]].is_baseline]
    assert heads and max(priorities, key=priorities.get) in heads
    lead = heads[0].split("-")[0]
    assert priorities[heads[0]] >= sum(round(own[s]) for s in chained
                                       if s.startswith(f"{lead}-c")) - 1  # (its own stages)
