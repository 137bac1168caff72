"""Server sessions (sdbench.plan.sessions, sdbench.measure.session): one start per server
configuration instance, every workload of the configuration through it; cells stay the unit of
results. The server and vLLM's load generator are replaced here by stand-ins that log what
they were asked (the real ones run in the end-to-end and fault tests)."""

import dataclasses
import json
import math
import sys

import numpy as np
import pytest
from stand_ins import Stand, use
from test_hostcaps import cpu_caps

from sdbench import layout
from sdbench.analyze import aggregate, point_intervals, stops
from sdbench.files import read_jsonl
from sdbench.measure import cell as cellmod
from sdbench.measure import groups, points, server, session
from sdbench.plan import adaptive, checks, dynamic_k, grid, hostcaps, rates, sessions, specs, work
from sdbench.plan.config import ConfigError, validate_config
from sdbench.records import LoadPoint


def vanilla_session(config):
    """The demo target's vanilla configuration: one cell per round (three workloads)."""
    cells = grid.cells_by_id(config)
    planned = sessions.plan_sessions(cells)
    base = next(c for c in cells.values() if c.is_baseline and c.engine == specs.SERVE
                and c.server_config["target"]["name"] == "smollm2-135m" and not c.group)
    sid = sessions.cell_sessions(base, cells)[0]
    return cells, planned[sid]


def test_one_session_per_configuration_instance_serves_every_workload(demo_config):
    cells = grid.cells_by_id(demo_config)
    planned = sessions.plan_sessions(cells)
    cells_session = {c: sid for sid, s in planned.items() for c in s.cells}
    assert set(cells_session) == set(cells)  # every cell in exactly one session per instance
    _, vanilla = vanilla_session(demo_config)
    workloads = {cells[c].workload["name"] for c in vanilla.cells}
    assert workloads == {"spec_bench", "news_0.25k", "mixed"} and len(vanilla.configs) == 1
    assert sessions.starts(vanilla, cells) == 1
    # the calibration pair is measured in turn with its baseline: one session, two servers
    pair = next(c for c in cells.values() if c.speculator == "calibration"
                and c.engine == specs.SERVE)
    (sid,) = sessions.cell_sessions(pair, cells)
    group = planned[sid]
    assert group.interleaved and group.lead == cells[pair.baseline_cell_id].config_id
    assert set(group.cells) == {pair.cell_id, pair.baseline_cell_id}
    assert sessions.starts(group, cells) == 2
    # starts: one per distinct (configuration, instance)
    configs = {(c.config_id, i) for c in cells.values()
               for i in c.used_instances}
    assert sum(sessions.starts(s, cells) for s in planned.values()) == len(configs)


def test_server_instances_per_method_and_a_baseline_spreads_as_far_as_its_cells(
        demo_config_raw):
    demo_config_raw["adaptive"] = {"enabled": False}  # (the rule takes one instance)
    demo_config_raw["round1"]["methods"][0]["server_instances"] = 3  # ngram
    cells = grid.cells_by_id(validate_config(demo_config_raw))
    ngram = next(c for c in cells.values() if c.speculator == "ngram"
                 and c.engine == specs.SERVE)
    base = cells[ngram.baseline_cell_id]
    assert ngram.instances == 3 and base.instances == 3
    assert ngram.instance_repeats(1) == [1] and list(base.used_instances) == [0, 1, 2]
    other = next(c for c in cells.values() if c.speculator == "draft-6l-plumbing")
    assert other.instances == 1  # loadgen.server_instances, as before
    planned = sessions.plan_sessions(cells)
    assert len(sessions.cell_sessions(ngram, cells)) == 3
    assert all(sid in planned for sid in sessions.cell_sessions(base, cells))
    # an interleaved cell runs on its baseline's instances: the calibration pair
    demo_config_raw["round1"]["methods"][1]["server_instances"] = 2
    cells = grid.cells_by_id(validate_config(demo_config_raw))
    pair = next(c for c in cells.values() if c.speculator == "calibration"
                and c.engine == specs.SERVE)
    assert pair.instances == cells[pair.baseline_cell_id].instances == 2


def test_with_warm_up_levels_each_new_concurrency_is_warmed_by_a_wave(served_dir,
                                                                       demo_config_raw,
                                                                       monkeypatch):
    """A GPU's first batches of a new size are slow: with `loadgen.warm_up_levels` an untimed
    run of one wave of the workload's prompts at each concurrency goes before the server's
    first point there (another seed than the points'), and the plan counts it."""
    demo_config_raw["loadgen"]["warm_up_levels"] = True
    demo_config = validate_config(demo_config_raw)
    cells, vanilla = vanilla_session(demo_config)
    stand = Stand()
    use(stand, monkeypatch)
    session.run_session(vanilla, cells, demo_config, layout.session_output(vanilla.session_id))
    closed = [p for p in stand.point_events() if p[5]]  # closed-loop runs, in order
    seeds = {points.repeat_seed(cells[c], r) for c in vanilla.cells
             for r in range(cells[c].repeats)}
    waves = [p for p in closed if p[2] not in seeds]
    levels = sorted({p[5] for p in closed})
    # one wave per concurrency, before the first measured point there, with the level's prompts
    assert sorted(p[5] for p in waves) == levels and len(levels) > 1
    for wave in waves:
        later = closed[closed.index(wave) + 1]
        assert later[5] == wave[5] and later[2] in seeds and wave[3] == 0
        assert wave[6] == wave[5]  # one wave: as many prompts as the concurrency
    measured = [p for p in closed if p[2] in seeds]
    assert len(measured) == sum(len([lv for lv in cells[c].load_points()
                                     if lv["mode"] != "rate"]) * cells[c].repeats
                                for c in vanilla.cells)
    # the work model counts the waves: more measuring than without them
    plain = validate_config({**demo_config_raw,
                             "loadgen": {**demo_config_raw["loadgen"], "warm_up_levels": None}})
    speeds = rates.CalibratedRates(demo_config, rates.DEVICES["h100"])
    with_levels = work.session_work(vanilla, cells, speeds).measuring_s
    cells_plain, session_plain = vanilla_session(plain)
    assert with_levels > work.session_work(session_plain, cells_plain, speeds).measuring_s


def test_a_fresh_server_per_point_is_counted_per_point_and_refuses_to_take_turns(
        demo_config_raw):
    method = {"method": "suffix", "k": [4],
              "options": {"suffix_decoding_max_cached_requests": 100}}
    demo_config_raw["round1"]["methods"].append(method)
    cells = grid.cells_by_id(validate_config(demo_config_raw))
    suffix = next(c for c in cells.values() if c.speculator == "suffix")
    planned = sessions.plan_sessions(cells)
    (sid,) = sessions.cell_sessions(suffix, cells)
    assert planned[sid].fresh_per_point
    assert sessions.starts(planned[sid], cells) == suffix.repeats * len(suffix.load_points())
    method["interleave"] = True
    with pytest.raises(ConfigError, match=r"round1\.methods\[3\]\.interleave = True"):
        validate_config(demo_config_raw)


def test_a_session_starts_once_and_warms_up_each_workload(served_dir, demo_config_raw,
                                                          monkeypatch):
    demo_config_raw["loadgen"]["ready_check_timeout_s"] = 60  # the default, 0, checks nothing
    demo_config = validate_config(demo_config_raw)
    cells, vanilla = vanilla_session(demo_config)
    stand = Stand()
    use(stand, monkeypatch)
    manifest = session.run_session(vanilla, cells, demo_config,
                                   layout.session_output(vanilla.session_id))
    assert [e[0] for e in stand.events].count("launch") == 1
    assert stand.events[0][0] == "launch" and stand.events[-1][0] == "stop"
    points = stand.point_events()
    assert len(points) == sum(c.repeats * len(c.load_points())
                              for c in (cells[i] for i in vanilla.cells))
    # a readiness check (if set) before the server's first point only; warm-ups before each
    # workload's first point only
    assert [p[4] > 0 for p in points] == [True] + [False] * (len(points) - 1)
    warmups = demo_config["loadgen"]["num_warmups"]
    firsts = {}
    for p in points:
        firsts.setdefault(p[1], p)
    assert [p for p in points if p[3]] == [p for p in firsts.values()] and all(
        p[3] == warmups for p in firsts.values())
    assert manifest["not_done"] == {} and manifest["retries"] == 0
    assert set(manifest["cells"]) == set(vanilla.cells)
    timing = manifest["timing"]
    assert timing["servers"] == 1 and timing["startup_s"] == pytest.approx(1.5)
    assert timing["wall_s"] >= timing["startup_s"] + timing["measuring_s"]
    assert [s["config"] for s in timing["starts"]] == [vanilla.lead]
    # each cell's own job writes its records from the manifest, no server
    monkeypatch.setattr(server, "cell_server", None)
    for cell_id in vanilla.cells:
        cell = cells[cell_id]
        records = cellmod.assemble(cell, [layout.session_output(vanilla.session_id)],
                                   layout.cell_output(cell_id))
        assert [(r["load"]["mode"], r["concurrency"], r["request_rate"], r["repeat"])
                for r in records] == [(p.mode, p.concurrency, p.request_rate, p.repeat) for p in
                                      sorted((LoadPoint.of_load(load, r) for r in
                                              range(cell.repeats) for load in
                                              cell.load_points()), key=lambda p: p.order)]
        assert {r["server"]["session"] for r in records} == {vanilla.session_id}
        assert not layout.partial_output(layout.cell_output(cell_id)).exists()


def test_adding_a_workload_measures_only_the_new_cell_in_one_start(served_dir, demo_config,
                                                                   monkeypatch):
    cells, vanilla = vanilla_session(demo_config)
    first = vanilla.only(vanilla.cells[:2])
    use(Stand(), monkeypatch)
    session.run_session(first, cells, demo_config, layout.session_output(first.session_id))
    stand = Stand()
    use(stand, monkeypatch)
    manifest = session.run_session(vanilla, cells, demo_config,
                                   layout.session_output(vanilla.session_id))
    new = cells[vanilla.cells[2]]
    assert [e[0] for e in stand.events].count("launch") == 1
    assert {p[1] for p in stand.point_events()} == {new.workload["path"]}
    assert len(stand.point_events()) == new.repeats * len(new.load_points())
    assert set(manifest["cells"]) == set(vanilla.cells)
    # nothing due: no start at all
    stand = Stand()
    use(stand, monkeypatch)
    manifest = session.run_session(vanilla, cells, demo_config,
                                   layout.session_output(vanilla.session_id))
    assert stand.events == [] and manifest["timing"]["servers"] == 0


def test_a_killed_session_resumes_from_the_points_it_finished(served_dir, demo_config,
                                                              monkeypatch):
    cells, vanilla = vanilla_session(demo_config)
    output = layout.session_output(vanilla.session_id)
    stand = Stand(kill_at=4)
    use(stand, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        session.run_session(vanilla, cells, demo_config, output)
    assert stand.events[-1] == ("stop", ("vanilla", "smollm2-135m"))
    assert not (served_dir / output).exists()  # no manifest: the job reruns
    first = cells[vanilla.cells[0]]
    error = json.loads(layout.error_output(layout.cell_output(first.cell_id)).read_text())
    assert error["error"].startswith("KeyboardInterrupt") and error["session"] == \
        vanilla.session_id
    assert len(read_jsonl(layout.partial_output(layout.cell_output(first.cell_id)))) == 3
    stand = Stand()
    use(stand, monkeypatch)
    session.run_session(vanilla, cells, demo_config, output)
    total = sum(cells[c].repeats * len(cells[c].load_points()) for c in vanilla.cells)
    assert len(stand.point_events()) == total - 3
    records = cellmod.assemble(first, [output], layout.cell_output(first.cell_id))
    assert len(records) == first.repeats * len(first.load_points())
    assert not layout.error_output(layout.cell_output(first.cell_id)).exists()


@pytest.mark.parametrize("status", ["invalid", "failed"])
def test_a_cell_that_fails_costs_that_cell_only_and_is_measured_again(
        served_dir, demo_config, monkeypatch, status):
    cells, vanilla = vanilla_session(demo_config)
    output = layout.session_output(vanilla.session_id)
    bad = cells[vanilla.cells[1]]
    stand = Stand(fail={bad.workload["path"]: status})
    use(stand, monkeypatch)
    manifest = session.run_session(vanilla, cells, demo_config, output)
    assert set(manifest["not_done"]) == {bad.cell_id} and manifest["retries"] == 1
    assert set(manifest["cells"]) == set(vanilla.cells) - {bad.cell_id}
    if status == "failed":  # the server died: started again for the next workload
        assert [e[0] for e in stand.events].count("launch") == 2
        assert "later points were not attempted" in manifest["not_done"][bad.cell_id]
    else:
        assert "requests failed" in manifest["not_done"][bad.cell_id]
    with pytest.raises(cellmod.NotDone):
        cellmod.assemble(bad, [output], layout.cell_output(bad.cell_id))
    assert json.loads(layout.error_output(layout.cell_output(bad.cell_id)).read_text())[
        "session"] == vanilla.session_id
    for cell_id in set(vanilla.cells) - {bad.cell_id}:
        cellmod.assemble(cells[cell_id], [output], layout.cell_output(cell_id))
    # the next run measures the bad cell's points again, and only those
    assert sessions.retries(output) == 1
    stand = Stand()
    use(stand, monkeypatch)
    manifest = session.run_session(vanilla, cells, demo_config, output)
    assert {p[1] for p in stand.point_events()} == {bad.workload["path"]}
    assert manifest["not_done"] == {} and manifest["retries"] == 1  # stable: no rerun after
    cellmod.assemble(bad, [output], layout.cell_output(bad.cell_id))


def test_an_unsupported_cell_starts_nothing(served_dir, demo_config, monkeypatch):
    cells = grid.cells_by_id(demo_config)
    gptq = next(c for c in cells.values() if c.is_baseline
                and c.server_config["target"]["name"] == "smollm2-135m-gptq")
    (sid,) = sessions.cell_sessions(gptq, cells)
    reason = "runs GPTQ int4 only with AVX-512"
    verdict = {"reason": reason, "host": {"device": "cpu", "extension": "_C_AVX2"},
               "dtype": {"requested": "host", "resolved": "bfloat16", "why": "test"}}
    monkeypatch.setattr(hostcaps, "cell_verdict", lambda config, cell, root=".": verdict)
    stand = Stand()
    use(stand, monkeypatch)
    planned = sessions.plan_sessions(cells)
    manifest = session.run_session(planned[sid], cells, demo_config, layout.session_output(sid))
    assert stand.events == [] and manifest["timing"]["servers"] == 0
    records = cellmod.assemble(gptq, [layout.session_output(sid)],
                               layout.cell_output(gptq.cell_id))
    assert {r["status"] for r in records} == {"unsupported"} and records[0]["error"] == reason
    assert not (served_dir / "results" / "points").exists()


def test_interleaved_session_takes_turns_and_stops_each_server_after_its_last_point(
        served_dir, demo_config, monkeypatch):
    cells = grid.cells_by_id(demo_config)
    pair = next(c for c in cells.values() if c.speculator == "calibration"
                and c.engine == specs.SERVE)
    base = cells[pair.baseline_cell_id]
    (sid,) = sessions.cell_sessions(pair, cells)
    stand = Stand()
    use(stand, monkeypatch)
    manifest = session.run_session(sessions.plan_sessions(cells)[sid], cells, demo_config,
                                   layout.session_output(sid))
    names = [("vanilla", "smollm2-135m-deep"), ("calibration", "smollm2-135m-deep")]
    # both servers launched, then both up, before any point
    assert stand.events[:4] == [("launch", names[0]), ("launch", names[1]),
                                ("up", names[0]), ("up", names[1])]
    seeds = [p[2] for p in stand.point_events()]
    seed = demo_config["loadgen"]["seed"]
    plan = [r for r in range(base.repeats) for _ in base.load_points()]
    assert seeds == [seed + r for r in plan for _ in (0, 1)]  # each point twice, in turn
    assert manifest["not_done"] == {}
    for cell, other in ((base, pair), (pair, base)):
        records = cellmod.assemble(cell, [layout.session_output(sid)],
                                   layout.cell_output(cell.cell_id))
        assert {tuple(r["server"]["interleaved_with"]) for r in records} == {(other.cell_id,)}
    # the turns rotate with the repeat: no cell always goes first
    assert groups.interleaved_order(["a", "b"], [("c", 1, 0), ("c", 1, 1)]) == [
        ("a", ("c", 1, 0)), ("b", ("c", 1, 0)), ("b", ("c", 1, 1)), ("a", ("c", 1, 1))]


def test_a_cell_alone_from_the_command_line_serves_only_it(served_dir, demo_config, monkeypatch):
    cells, vanilla = vanilla_session(demo_config)
    cell = cells[vanilla.cells[1]]
    stand = Stand()
    use(stand, monkeypatch)
    records = cellmod.measure_cell(cell, demo_config, layout.cell_output(cell.cell_id),
                                   cells=cells)
    assert {p[1] for p in stand.point_events()} == {cell.workload["path"]}
    assert len(records) == cell.repeats * len(cell.load_points())
    # its points are cached: the whole session later measures only the other cells
    stand = Stand()
    use(stand, monkeypatch)
    session.run_session(vanilla, cells, demo_config, layout.session_output(vanilla.session_id))
    assert cell.workload["path"] not in {p[1] for p in stand.point_events()}


def test_point_keys_do_not_depend_on_the_session(demo_config):
    """A cell's points keep their keys whichever other cells share its server."""
    cells = grid.cells_by_id(demo_config)
    cell = next(iter(cells.values()))
    facts = {"prompts_sha256": "x"}
    load = cell.load_points()[0]
    key = points.point_key(cell, load, 0, facts)
    assert points.point_key(dataclasses.replace(cell, instances=1), load, 0, facts) == key
    assert points.point_key(dataclasses.replace(cell, instances=2), load, 1, facts) != \
        points.point_key(cell, load, 1, facts)


def test_a_proposer_with_state_across_requests_gets_a_fresh_server_per_point(
        served_dir, demo_config_raw, monkeypatch):
    """Suffix decoding with its global response tree on: every point in a server of its own,
    without warm-ups (a warm-up would show it one of the point's answers)."""
    demo_config_raw["round1"]["methods"].append(
        {"method": "suffix", "k": [4], "options": {"suffix_decoding_max_cached_requests": 100}})
    config = validate_config(demo_config_raw)
    monkeypatch.setattr(checks, "check_cell_tools", lambda cell, source=None: None)
    cells = grid.cells_by_id(config)
    suffix = next(c for c in cells.values() if c.speculator == "suffix")
    (sid,) = sessions.cell_sessions(suffix, cells)
    stand = Stand()
    use(stand, monkeypatch)
    manifest = session.run_session(sessions.plan_sessions(cells)[sid], cells, config,
                                   layout.session_output(sid))
    points = stand.point_events()
    assert len(points) == suffix.repeats * len(suffix.load_points())
    assert [e[0] for e in stand.events].count("launch") == len(points) == \
        manifest["timing"]["servers"]
    assert all(p[3] == 0 for p in points)  # no warm-up request anywhere
    records = cellmod.assemble(suffix, [layout.session_output(sid)],
                               layout.cell_output(suffix.cell_id))
    assert {r["server"]["isolation"] for r in records} == {specs.FRESH_PER_POINT}
    assert {r["server"]["points_before"] for r in records} == {0}


def test_a_cell_measured_alone_stops_against_its_baseline_records(
        served_dir, demo_config_raw, monkeypatch):
    """Under the adaptive rule a speculative cell that is not interleaved reads its baseline
    cell's finished records: with a clear gain each concurrency stops after its first repeat (a
    fresh-server-per-point cell then starts no server for the rest), request rates are measured
    in full, and the stops name what they pooled."""
    demo_config_raw["round1"]["methods"].append(
        {"method": "suffix", "k": [4], "options": {"suffix_decoding_max_cached_requests": 100}})
    demo_config_raw["adaptive"] = {"noise": 0.05}
    config = validate_config(demo_config_raw)
    monkeypatch.setattr(checks, "check_cell_tools", lambda cell, source=None: None)
    cells = grid.cells_by_id(config)
    suffix = next(c for c in cells.values() if c.speculator == "suffix")
    base = cells[suffix.baseline_cell_id]
    assert adaptive.reads_baseline(config, suffix) and not adaptive.reads_baseline(config, base)
    planned = sessions.plan_sessions(cells)
    (bid,) = sessions.cell_sessions(base, cells)
    use(Stand(), monkeypatch)
    session.run_session(planned[bid].only([base.cell_id]), cells, config,
                        layout.session_output(bid))
    cellmod.assemble(base, [layout.session_output(bid)], layout.cell_output(base.cell_id))
    (sid,) = sessions.cell_sessions(suffix, cells)
    stand = Stand(throughput={"suffix": 25.0})
    use(stand, monkeypatch)
    manifest = session.run_session(planned[sid], cells, config, layout.session_output(sid))
    assert manifest["not_done"] == {}
    levels = [lp for lp in suffix.load_points() if lp["mode"] == "concurrency"]
    rates = [lp for lp in suffix.load_points() if lp["mode"] == "rate"]
    expected = len(levels) + len(rates) * suffix.repeats
    assert len(stand.point_events()) == expected
    assert [e[0] for e in stand.events].count("launch") == expected
    records = cellmod.assemble(suffix, [layout.session_output(sid)],
                               layout.cell_output(suffix.cell_id))
    stopped = [r for r in records if r["status"] == "stopped"]
    assert len(stopped) == len(levels) * (suffix.repeats - 1)
    assert {r["loadgen"]["stop"]["pooled_cells"][0] for r in stopped} == {suffix.cell_id}
    assert all(r["concurrency"] is not None for r in stopped)


# A stand-in for the engine's child process (sdbench.measure.engines): the real job loop and
# its gate (`engines._points`), each point's throughput set by the engine's method, a line per
# point measured into CALLS; with DIE_AFTER it exits after that many points
ENGINE_STAND_IN = """
import json, os, sys, time
from sdbench.measure import engines

def fake(job):
    rate = 10.0 if job["method"] == "vanilla" else 25.0
    measured = 0
    for cell_index, part, index, point in engines._points(job):
        if measured == int(os.environ.get("DIE_AFTER", "-1")):
            sys.exit(3)
        n, started = part["num_prompts"], time.perf_counter()
        duration = n * 8 / rate
        metrics = {**engines.throughput_metrics(duration, [4] * n, [8] * n, [duration / n] * n),
                   "window_perf_counter": [started, started + duration]}
        with open(os.environ["CALLS"], "a") as fh:
            fh.write(json.dumps([job["method"], cell_index, point["concurrency"],
                                 point["repeat"]]) + "\\n")
        measured += 1
        yield cell_index, index, point, metrics, {"input_lens": [4] * n, "output_lens": [8] * n}

engines.RUNNERS = {"offline": fake, "transformers": fake}
sys.exit(engines.main(sys.argv[1:]))
"""


def _engine_stand_in(tmp_path, monkeypatch, die_after=None):
    from sdbench.measure import engine_cells

    script = tmp_path / "engine_stand_in.py"
    script.write_text(ENGINE_STAND_IN)
    calls = tmp_path / "engine_calls.jsonl"
    monkeypatch.setenv("CALLS", str(calls))
    if die_after is not None:
        monkeypatch.setenv("DIE_AFTER", str(die_after))
    else:
        monkeypatch.delenv("DIE_AFTER", raising=False)
    monkeypatch.setattr(engine_cells, "child_command",
                        lambda job_path: [sys.executable, str(script), str(job_path)])
    return calls


def _offline_pair(served_dir, demo_config_raw, monkeypatch):
    demo_config_raw["adaptive"] = {"noise": 0.05}
    config = validate_config(demo_config_raw)
    monkeypatch.setattr(checks, "check_cell_tools", lambda cell, source=None: None)
    cells = grid.cells_by_id(config)
    offline = next(c for c in cells.values() if c.engine == specs.OFFLINE and not c.is_baseline)
    base = cells[offline.baseline_cell_id]
    return config, cells, offline, base


def test_an_offline_cell_stops_between_its_engine_s_batches(
        served_dir, demo_config_raw, monkeypatch, tmp_path):
    """Under the adaptive rule an offline (or Transformers) cell stops against its baseline's
    records as a server cell measured on its own does, in one engine start: the child asks
    before each point, so with a clear gain each batch size measures its first repeat only,
    the rest are recorded as stopped (with why), and its baseline is measured in full."""
    config, cells, offline, base = _offline_pair(served_dir, demo_config_raw, monkeypatch)
    assert adaptive.reads_baseline(config, offline) and not adaptive.reads_baseline(config, base)
    calls = _engine_stand_in(tmp_path, monkeypatch)
    planned = sessions.plan_sessions(cells)
    (bid,) = sessions.cell_sessions(base, cells)
    manifest = session.run_session(planned[bid].only([base.cell_id]), cells, config,
                                   layout.session_output(bid))
    assert manifest["not_done"] == {}
    baseline = cellmod.assemble(base, [layout.session_output(bid)],
                                layout.cell_output(base.cell_id))
    batches = [lp["concurrency"] for lp in base.load_points()]
    assert offline.repeats > 1 and len(batches) > 1
    assert len(baseline) == len(batches) * base.repeats
    assert {r["status"] for r in baseline} == {"ok"}
    (sid,) = sessions.cell_sessions(offline, cells)
    calls.unlink()
    manifest = session.run_session(planned[sid].only([offline.cell_id]), cells, config,
                                   layout.session_output(sid))
    assert manifest["not_done"] == {} and manifest["timing"]["servers"] == 1
    measured = [json.loads(line) for line in calls.read_text().splitlines()]
    assert sorted((c, r) for _, _, c, r in measured) == [(b, 0) for b in sorted(batches)]
    records = cellmod.assemble(offline, [layout.session_output(sid)],
                               layout.cell_output(offline.cell_id))
    stopped = [r for r in records if r["status"] == "stopped"]
    assert len(records) == len(batches) * offline.repeats
    assert len(stopped) == len(batches) * (offline.repeats - 1)
    assert all(r["loadgen"]["stop"]["reason"] == "settled" for r in stopped)
    assert all(r["error"].startswith("stopped after 1 of ") for r in stopped)
    assert {r["loadgen"]["stop"]["pooled_cells"][0] for r in stopped} == {offline.cell_id}
    ok = [r for r in records if r["status"] == "ok"]
    assert all(r["metrics"]["output_throughput"] == pytest.approx(25.0) for r in ok)
    # the summary pairs them with the baseline, and the report's check recomputes every stop
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in (base, offline)])
    row = point_intervals.aggregate_points(frame).query("cell_id == @offline.cell_id").iloc[0]
    assert row["repeats_stopped"] == offline.repeats - 1 and row["verdict"] == "speculate"
    checks = stops.recheck_frame(frame)
    assert len(checks) == len(batches) and checks["holds"].all()


def test_an_offline_child_that_dies_keeps_what_it_measured(
        served_dir, demo_config_raw, monkeypatch, tmp_path):
    """A gated child that exits before a point it was told to measure: the points it finished
    are kept, the cell is not done with the child's exit, and a rerun measures only the rest."""
    config, cells, offline, base = _offline_pair(served_dir, demo_config_raw, monkeypatch)
    _engine_stand_in(tmp_path, monkeypatch)
    planned = sessions.plan_sessions(cells)
    (bid,) = sessions.cell_sessions(base, cells)
    session.run_session(planned[bid].only([base.cell_id]), cells, config,
                        layout.session_output(bid))
    cellmod.assemble(base, [layout.session_output(bid)], layout.cell_output(base.cell_id))
    calls = _engine_stand_in(tmp_path, monkeypatch, die_after=1)
    calls.unlink()
    (sid,) = sessions.cell_sessions(offline, cells)
    manifest = session.run_session(planned[sid].only([offline.cell_id]), cells, config,
                                   layout.session_output(sid))
    why = manifest["not_done"][offline.cell_id]
    assert "exited with code 3 before finishing it" in why
    assert len(calls.read_text().splitlines()) == 1
    _engine_stand_in(tmp_path, monkeypatch)
    calls.unlink()
    manifest = session.run_session(planned[sid].only([offline.cell_id]), cells, config,
                                   layout.session_output(sid))
    assert manifest["not_done"] == {}
    batches = [lp["concurrency"] for lp in offline.load_points()]
    again = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(again) == len(batches) - 1  # the first batch size's first repeat was kept


def _chained_pair(served_dir, demo_config_raw, monkeypatch, rates=()):
    """Round 1 of the demo with two k values of n-gram measured on their own (not
    interleaved), at three levels (and open-loop `rates`), under the rule with `chain`."""
    round1 = demo_config_raw["round1"]
    round1.update(targets=["smollm2-135m"], workloads=["spec_bench"], concurrency=[1, 2, 4],
                  methods=[{"method": "ngram", "k": [2, 3], "options": {"prompt_lookup_min": 2}}])
    for extra in ("request_rates", "offline", "transformers"):
        round1.pop(extra, None)
    if rates:
        round1["request_rates"] = list(rates)
    demo_config_raw["dynamic_k"] = []
    demo_config_raw["loadgen"]["prompts_per_concurrency"] = 16  # (4 blocks of 4 at 1)
    demo_config_raw["workloads"]["spec_bench"]["num_prompts"] = 48
    demo_config_raw["adaptive"] = {"noise": 0.05, "coarse": 2, "blocks": 4, "chain": True}
    config = validate_config(demo_config_raw)
    monkeypatch.setattr(checks, "check_cell_tools", lambda cell, source=None: None)
    cells = grid.cells_by_id(config)
    pairs = [c for c in cells.values() if c.round == "round1" and c.speculator == "ngram"]
    return config, cells, pairs, cells[pairs[0].baseline_cell_id]


def _run_chain(config, cells, base, pairs, stand):
    """Every stage of the chain in the order the workflow's dependencies allow: the
    baseline's stage, then its pairs'. Each session gets the cells its job gets
    (`sessions.session_family`) and builds no grid. Returns the session ids that ran."""
    from unittest import mock

    planned = sessions.plan_sessions(cells)
    ran = []
    for stage in base.used_instances:
        for cell in (base, *pairs):
            sid = sessions.session_id(cell.config_id, stage, True)
            for needed in sessions.chain_inputs(cell, stage, cells):
                assert needed in ran  # (what the workflow makes it wait for)
            alone = planned[sid].only([cell.cell_id])
            family = sessions.session_family(alone, cells)
            assert len(family) < len(cells)
            with mock.patch.object(grid, "cells_by_id",
                                   side_effect=AssertionError("a session built the grid")):
                manifest = session.run_session(alone, family, config,
                                               layout.session_output(sid))
            assert manifest["not_done"] == {}
            ran.append(sid)
    return ran


def test_a_chained_baseline_stops_with_its_pairs(served_dir, demo_config_raw, monkeypatch):
    """Under `adaptive.chain` a baseline and the cells measured on their own against it run in
    stages (depth by depth of the level tree, repeat by repeat), the baseline's first: a pair
    decides on its whole point's looks (its stages before it and the baseline's) and races the
    other k at each repeat's first block, the baseline measures a repeat at a level exactly
    where a pair measured it, a stage with nothing to measure starts no server, a stage run
    before the one it reads is not done, and the report's check recomputes every stop."""
    config, cells, pairs, base = _chained_pair(served_dir, demo_config_raw, monkeypatch)
    assert base.chain and all(p.chain for p in pairs) and len(pairs) == 2
    assert base.chain == pairs[0].chain == (0, 1, 0)  # concurrency 2 between the coarse two
    assert len(base.used_instances) == 2 * base.repeats
    assert all("-c" in sid for sid in sessions.cell_sessions(base, cells))
    # a clear gain at 1 (k=3 the best), none at 4
    stand = Stand(throughput={"ngram k=3": lambda c: 25.0 if c == 1 else 10.0,
                              "ngram k=2": lambda c: 20.0 if c == 1 else 10.0})
    use(stand, monkeypatch)
    # a pair's stage before its baseline's: not done, naming what it waits for
    first = sessions.session_id(pairs[0].config_id, 0, True)
    early = session.run_session(sessions.plan_sessions(cells)[first], cells, config,
                                layout.session_output(first))
    assert f"its baseline cell {base.cell_id}'s stage 0 not done" in early["not_done"][
        pairs[0].cell_id]
    assert not stand.events
    ran = _run_chain(config, cells, base, pairs, stand)
    records = {c.cell_id: cellmod.assemble(
        c, [layout.session_output(s) for s in sessions.cell_sessions(c, cells)],
        layout.cell_output(c.cell_id)) for c in (base, *pairs)}
    for cell in (base, *pairs):
        assert len(records[cell.cell_id]) == sum(len(cell.load_repeats(lp))
                                                 for lp in cell.load_points())
    measured = {c.cell_id: {(r["concurrency"], r["repeat"]) for r in records[c.cell_id]
                            if r["status"] == "ok"} for c in (base, *pairs)}
    blocks = {c: specs.point_blocks(base, {"mode": "concurrency", "concurrency": c})
              for c in base.concurrency}
    assert blocks[1] > 1  # (a repeat at 1 is split: a pair can stop after a block)
    # the baseline measured a whole repeat where some pair measured a block of it, else none
    wanted = {(c, r - r % blocks[c] + b) for p in pairs for c, r in measured[p.cell_id]
              for b in range(blocks[c])}
    assert measured[base.cell_id] == wanted
    stopped_base = [r for r in records[base.cell_id] if r["status"] == "stopped"]
    assert stopped_base and {r["loadgen"]["stop"]["reason"] for r in stopped_base} == {
        "baseline"}
    # at 1 the two k values race through their first repeat (no rival measured before it)
    # and into their second (on one start the starts' share is read at twice its prior, and
    # a difference of 1.25x does not stand out of it), then k=2 is beaten and k=3 settled,
    # so the baseline's last stage there measures nothing; the stops count the whole point's
    # looks, not a stage's
    assert {r for c, r in measured[base.cell_id] if c == 1} == set(range(2 * blocks[1]))
    stops_at_1 = {p.label.split(" | ")[0]: {
        r["loadgen"]["stop"]["reason"] for r in records[p.cell_id]
        if r["status"] == "stopped" and r["concurrency"] == 1} for p in pairs}
    assert stops_at_1 == {"ngram k=2": {"beaten"}, "ngram k=3": {"settled"}}
    assert all(r["loadgen"]["stop"]["looks"] == blocks[1] * base.repeats
               for p in pairs for r in records[p.cell_id]
               if r["status"] == "stopped" and r["concurrency"] == 1)
    # one server start per stage that measured something, none for the others
    busy = {sid for sid in ran if any(
        p.get("file") for c in sessions.read_manifest(layout.session_output(sid))[
            "cells"].values() for p in c["points"])}
    assert [e[0] for e in stand.events].count("launch") == len(busy) < len(ran)
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in (base, *pairs)])
    checks_ = stops.recheck_frame(frame)
    assert len(checks_) and checks_["holds"].all(), checks_.to_dict("records")


def test_a_chain_bisects_its_open_loop_rates_in_stages_of_their_own_depth(
        served_dir, demo_config_raw, monkeypatch):
    """A chained cell's open-loop rates have their own level tree: the lowest and highest
    rate in the first stages, the rate between them one depth later; where the pairs halve the
    time per token at both, no stage measures the rate between (pairs nor baseline), and the
    report's check recomputes the decision."""
    config, cells, pairs, base = _chained_pair(served_dir, demo_config_raw, monkeypatch,
                                               rates=(1.0, 2.0, 4.0))
    assert base.chain == pairs[0].chain == (0, 1, 0, 0, 1, 0)
    rate = {"mode": "rate", "request_rate": 2.0, "burstiness": 1.0}
    assert base.stage_of(0, rate) == base.repeats
    assert base.stage_of(0, {**rate, "request_rate": 4.0}) == 0
    stand = Stand(throughput={"ngram": lambda c: 25.0 if c == 1 else 10.0},
                  tpot={base.speculator: 10.0, "ngram": 5.0})
    use(stand, monkeypatch)
    _run_chain(config, cells, base, pairs, stand)
    for cell in (base, *pairs):
        cellmod.assemble(cell, [layout.session_output(s)
                                for s in sessions.cell_sessions(cell, cells)],
                         layout.cell_output(cell.cell_id))
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in (base, *pairs)])
    at_rates = frame[frame["request_rate"].notna()]
    assert set(at_rates[at_rates["status"] == "ok"]["request_rate"]) == {1.0, 4.0}
    at2 = at_rates[at_rates["request_rate"] == 2.0]
    assert len(at2) and (at2["status"] == "stopped").all()
    assert {json.loads(s)["reason"] for s in at2[at2["method"] != "vanilla"]["stop"]} == {
        "level"}
    checks_ = stops.recheck_frame(frame)
    assert (checks_["request_rate"] == 2.0).sum() == len(pairs) and checks_["holds"].all()


def test_the_first_session_asks_vllm_about_every_quantized_checkpoint_the_host_runs(
        demo_config, monkeypatch):
    """A session asks vLLM once about the quantized checkpoints of the whole config that this
    host can run (one child process importing vLLM), so that the sessions of quantized targets
    after it find them cached; on a CPU without AVX-512 the int4 ones are not asked about."""
    cells, vanilla = vanilla_session(demo_config)
    own = {name for cell_id in vanilla.cells for name in specs.cell_models(cells[cell_id])}
    quantized = ["smollm2-135m-awq", "smollm2-135m-gptq", "smollm2-135m-w8a8"]
    assert not own & set(quantized)  # the session serves none of them itself
    asked = []
    monkeypatch.setattr(hostcaps, "model_facts", lambda folders: asked.append(folders) or {})
    for avx512, expected in ((True, quantized), (False, ["smollm2-135m-w8a8"])):
        monkeypatch.setattr(hostcaps, "host_caps", lambda avx512=avx512: cpu_caps(avx512))
        asked.clear()
        session._read_checkpoints(vanilla, demo_config)
        assert asked == [[specs.model_dir(demo_config, name) for name in expected]]


def _split_in_turns(demo_config_raw, monkeypatch, repeats, instances, blocks=1):
    """The demo's dynamic-K entry split (static k 5, the schedule k = 3 at 1 and 5 above:
    the constant schedule at both levels) under the rule at σ 0.05 (with its `blocks`), its
    cells with `repeats` on `instances` server instances. Returns the config and the cells."""
    demo_config_raw["adaptive"] = {"noise": 0.05, "blocks": blocks}
    config = validate_config(demo_config_raw)
    monkeypatch.setattr(checks, "check_cell_tools", lambda cell, source=None: None)
    spec = {**dynamic_k.dynamic_k_specs(config)[0], "split": True}
    return config, [dataclasses.replace(c, repeats=repeats, instances=instances)
                    for c in dynamic_k.dynamic_k_arms(config, spec, [[1, 1, 3], [2, 24, 5]], 5)]


def test_cells_measured_in_turn_stop_against_their_static_k(served_dir, demo_config_raw,
                                                             monkeypatch):
    """Under the adaptive rule a dynamic-K split's cells (measured in turn, repeat by repeat:
    `measure_in_turns`) stop against their static k: the constant schedule, clearly slower,
    after its first repeat; the derived schedule where it is clearly faster; the static k
    where every cell paired with it has stopped, and a turn with nothing due starts no server.
    The report's check recomputes every stop from the records (and catches a changed one), and
    the split's intervals are the rule's: one with a width after one repeat."""
    config, arms = _split_in_turns(demo_config_raw, monkeypatch, repeats=4, instances=4)
    static, constant, derived = arms
    assert [c.concurrency for c in arms] == [(1, 24)] * 3
    stand = Stand(throughput={static.speculator: 20.0, constant.speculator: 13.0,
                              derived.speculator: lambda c: 26.0 if c == 24 else 22.4})
    use(stand, monkeypatch)
    output = layout.cell_output(derived.cell_id)
    records = cellmod.measure_in_turns(arms, config, output)
    status = {(r["cell_id"], r["concurrency"], r["repeat"]): r["status"] for r in records}
    assert len(status) == len(records) == 3 * 2 * 4
    stops_ = {key: r["loadgen"]["stop"] for r in records if r["status"] == "stopped"
              for key in [(r["cell_id"], r["concurrency"], r["repeat"])]}
    # the constant schedule (0.65 of the static k's throughput) stops after one repeat
    for level in (1, 24):
        assert [status[(constant.cell_id, level, r)] for r in range(4)] == [
            "ok", "stopped", "stopped", "stopped"]
        stop = stops_[(constant.cell_id, level, 1)]
        assert stop["reason"] == "settled" and stop["against"] == static.cell_id
        assert stop["high"] < 1
    # the derived schedule: 30 % faster at 24 (stops after its second repeat: after one,
    # on one start, the starts' share is read at twice its prior), 12 % faster at 1 (goes on
    # until that is clear)
    assert [status[(derived.cell_id, 24, r)] for r in range(4)] == [
        "ok", "ok", "stopped", "stopped"]
    assert stops_[(derived.cell_id, 24, 2)]["low"] > 1
    assert [status[(derived.cell_id, 1, r)] for r in range(4)] == [
        "ok", "ok", "stopped", "stopped"]
    assert stops_[(derived.cell_id, 1, 2)]["low"] > 1
    # the static k measures a repeat exactly where a cell paired with it does
    for level in (1, 24):
        for r in range(4):
            going = any(status[(c.cell_id, level, r)] == "ok" for c in (constant, derived))
            assert (status[(static.cell_id, level, r)] == "ok") == going
            if not going:
                assert stops_[(static.cell_id, level, r)]["reason"] == "baseline"
    # one server start per turn that measured something
    busy = {(cid, r) for (cid, _, r), s in status.items() if s == "ok"}
    assert [e[0] for e in stand.events].count("launch") == len(busy) < 3 * 4
    frame = aggregate.summarize([output])
    checks_ = stops.recheck_frame(frame)
    assert len(checks_) == 2 * 3 and checks_["holds"].all(), checks_.to_dict("records")
    tampered = frame.copy()
    first = ((tampered["cell_id"] == static.cell_id) & (tampered["concurrency"] == 24)
             & (tampered["repeat"] == 0))
    tampered.loc[first, "output_throughput"] = 13.0  # (the constant schedule's ratio then 1)
    again = stops.recheck_frame(tampered)
    assert not again.set_index(["cell_id", "concurrency"]).loc[
        (constant.cell_id, 24), "holds"]
    from sdbench.analyze.schedule_analysis import dynamic_k_comparison
    split = dynamic_k_comparison(frame, {derived.cell_id: [[1, 1, 3], [2, 24, 5]]})
    at24 = split[split["concurrency"] == 24].iloc[0]
    assert at24["mechanism_repeats"] == 1 and at24["mechanism_ci_high"] < 1 < at24[
        "net_ci_low"]
    assert at24["mechanism_mean"] == pytest.approx(0.65)
    assert at24["mechanism_ci_low"] < 0.65 < at24["mechanism_ci_high"]
    # the rule's repeated interval after 1 of the 4 planned repeats (stopped ones count)
    rule = adaptive.Rule.from_config(config["adaptive"]).at(1, 24)
    _, half = adaptive.interval([math.log(0.65)], 4, rule,
                                *adaptive.rule_sigma(rule, [([math.log(0.65)], [0])], [0],
                                                     True))
    assert at24["mechanism_ci_high"] == pytest.approx(0.65 * math.exp(half))
    # over both levels: the mean of their bounds (each level one repeat of the constant's)
    every = split[split["concurrency"] == "all"].iloc[0]
    assert every["mechanism_repeats"] == 1 and every["mechanism_mean"] == pytest.approx(0.65)
    assert every["mechanism_ci_low"] == pytest.approx(math.exp(np.mean(np.log([
        split.loc[split["concurrency"] == c, "mechanism_ci_low"].iloc[0] for c in (1, 24)]))))


def test_cells_whose_turns_give_no_sequence_of_repeats_measure_every_repeat(
        served_dir, demo_config_raw, monkeypatch):
    """Cells measured in turn on 2 server instances with 3 repeats: instance 0 measures
    repeats 0 and 2 before instance 1 measures repeat 1, so a look before repeat 2 could not
    read repeat 1 (`dynamic_k.stops_in_turn`): under the rule they measure every repeat."""
    config, arms = _split_in_turns(demo_config_raw, monkeypatch, repeats=3, instances=2)
    assert not dynamic_k.stops_in_turn(arms)
    stand = Stand(throughput={arms[0].speculator: 20.0, arms[1].speculator: 13.0,
                              arms[2].speculator: 26.0})
    use(stand, monkeypatch)
    records = cellmod.measure_in_turns(arms, config, layout.cell_output(arms[2].cell_id))
    assert len(records) == 3 * 2 * 3 and {r["status"] for r in records} == {"ok"}
    assert not any(r["loadgen"].get("adaptive") for r in records)


def test_a_chain_races_its_k_values_in_turn_inside_each_stage(served_dir, demo_config_raw,
                                                             monkeypatch):
    """Inside a chain's stage the k values measure one after another, k ascending: k=3's stage
    waits for k=2's same stage (a session run before it is not done, naming it), and its looks
    inside the stage see k=2's whole stage, so a k clearly slower than the other is beaten
    after its first block instead of measuring its whole first repeat; the stop says how far
    it saw each cell, and the report's check recomputes it."""
    config, cells, pairs, base = _chained_pair(served_dir, demo_config_raw, monkeypatch)
    two, three = sorted(pairs, key=sessions.race_order)
    assert two.server_config["num_speculative_tokens"] == 2
    assert sessions.chain_rivals(three, cells) == [two] and sessions.chain_rivals(two, cells) == []
    mine = sessions.chain_inputs(three, 1, cells)
    assert sessions.session_id(two.config_id, 1, True) in mine
    stand = Stand(throughput={"ngram k=2": lambda c: 25.0 if c == 1 else 10.0,
                              "ngram k=3": lambda c: 5.0 if c == 1 else 10.0})
    use(stand, monkeypatch)
    planned = sessions.plan_sessions(cells)
    first = {c.cell_id: sessions.session_id(c.config_id, 0, True)
             for c in (base, two, three)}
    session.run_session(planned[first[base.cell_id]], cells, config,
                        layout.session_output(first[base.cell_id]))
    early = session.run_session(planned[first[three.cell_id]], cells, config,
                                layout.session_output(first[three.cell_id]))
    assert f"its rival cell {two.cell_id}'s stage 0 not done" in early["not_done"][
        three.cell_id]
    _run_chain(config, cells, base, pairs, stand)
    records = {c.cell_id: cellmod.assemble(
        c, [layout.session_output(s) for s in sessions.cell_sessions(c, cells)],
        layout.cell_output(c.cell_id)) for c in (base, *pairs)}
    blocks = specs.point_blocks(base, {"mode": "concurrency", "concurrency": 1})
    at1 = {c.cell_id: [r for r in records[c.cell_id] if r["concurrency"] == 1]
           for c in pairs}
    measured = [r["repeat"] for r in at1[three.cell_id] if r["status"] == "ok"]
    assert measured == [0]  # (one block of its first repeat, not the whole repeat)
    stop = next(r["loadgen"]["stop"] for r in at1[three.cell_id] if r["status"] == "stopped")
    assert stop["reason"] == "beaten" and stop["before_repeat"] == 1
    assert stop["seen_before"] == {three.cell_id: 1, two.cell_id: blocks}
    assert len([r for r in at1[two.cell_id] if r["status"] == "ok"]) >= blocks
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in (base, *pairs)])
    checks_ = stops.recheck_frame(frame)
    assert len(checks_) and checks_["holds"].all(), checks_.to_dict("records")
    # a stored stop that says it saw less of k=2 than it did no longer holds (its σ pooled
    # k=2's spread on fewer degrees of freedom)
    at = frame.index[(frame["cell_id"] == three.cell_id) & frame["stop"].notna()
                     & (frame["concurrency"] == 1)][0]
    stored = json.loads(frame.at[at, "stop"])
    frame.at[at, "stop"] = json.dumps({**stored, "seen_before": {**stored["seen_before"],
                                                                 two.cell_id: 0}})
    again = stops.recheck_frame(frame)
    assert not again[again["cell_id"] == three.cell_id]["holds"].all()


def test_cells_measured_in_turn_look_inside_a_repeat_after_the_static_k_s_turn(
        served_dir, demo_config_raw, monkeypatch):
    """Where a repeat at a level is split into blocks of prompts, a cell measured in turn looks
    before each block of a repeat whose turn comes after the static k's on that instance
    (`dynamic_k.after_lead`), and only before the whole repeat where its turn comes first: the
    constant schedule, clearly slower, stops after one block of its first repeat; the report's
    check recomputes every stop."""
    demo_config_raw["loadgen"]["prompts_per_concurrency"] = 16  # (4 blocks of 4 at 1)
    config, arms = _split_in_turns(demo_config_raw, monkeypatch, repeats=3, instances=3,
                                   blocks=4)
    static, constant, derived = arms
    at1 = {"mode": "concurrency", "concurrency": 1}
    blocks = specs.point_blocks(constant, at1)
    assert blocks > 1
    # instance by instance: S C D, then C D S, then D S C
    assert [dynamic_k.after_lead(arms, c) for c in arms] == [frozenset(), {0, 2}, {0}]
    stand = Stand(throughput={static.speculator: 20.0, constant.speculator: 13.0,
                              derived.speculator: lambda c: 26.0 if c == 24 else 22.4})
    use(stand, monkeypatch)
    records = cellmod.measure_in_turns(arms, config, layout.cell_output(derived.cell_id))
    mine = [r for r in records if r["cell_id"] == constant.cell_id and r["concurrency"] == 1]
    measured = [r["repeat"] for r in mine if r["status"] == "ok"]
    stop = next(r["loadgen"]["stop"] for r in mine if r["status"] == "stopped")
    # (before its second whole repeat, at `blocks`, without looks inside one)
    assert measured == list(range(stop["before_repeat"])) and 0 < len(measured) < blocks
    assert stop["against"] == static.cell_id and stop["high"] < 1
    # a look inside a repeat only on an instance where the static k's turn came first
    for record in records:
        if record["status"] == "stopped" and record["cell_id"] != static.cell_id:
            look = record["loadgen"]["stop"]["before_repeat"]
            cell = next(c for c in arms if c.cell_id == record["cell_id"])
            step = specs.point_blocks(cell, {"mode": "concurrency",
                                            "concurrency": record["concurrency"]})
            assert look % step == 0 or look // step in dynamic_k.after_lead(arms, cell)
    frame = aggregate.summarize([layout.cell_output(derived.cell_id)])
    checks_ = stops.recheck_frame(frame)
    assert len(checks_) and checks_["holds"].all(), checks_.to_dict("records")
