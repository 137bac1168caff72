"""Cells measured in turn (`interleave`): the demo's calibration pair is one group with its
baseline; its session takes the points in turn with both servers up, keeps what it measured
when stopped, measures again only the points some cell still misses, and the cells' own jobs
then write their records from the session's manifest.

The server and load generator are stand-ins that log what they were asked (tests/stand_ins.py;
the real servers run in the end-to-end test, whose calibration pair is such a group)."""

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from stand_ins import Stand, use

from sdbench import layout
from sdbench.files import read_jsonl
from sdbench.measure import cell as cellmod
from sdbench.measure import groups, points, session, slots
from sdbench.plan import adaptive, dynamic_k, grid, sessions, specs
from sdbench.plan.config import ConfigError, validate_config


def test_the_calibration_pair_is_measured_with_its_baseline(demo_config, demo_config_raw):
    cells = grid.cells_by_id(demo_config)
    pair = next(c for c in cells.values() if c.speculator == "calibration" and c.engine ==
                specs.SERVE)
    base = cells[pair.baseline_cell_id]
    assert pair.interleave and pair.group == base.group == (base.cell_id, pair.cell_id)
    assert grid.interleave_groups(list(cells.values())) == {base.cell_id: list(pair.group)}
    # every other cell is measured on its own
    assert {c.cell_id for c in cells.values() if c.group} == {base.cell_id, pair.cell_id}
    # interleaving is how a cell is measured, not what it is: the ids stay
    raw = demo_config_raw
    for method in raw["round1"]["methods"]:
        method.pop("interleave", None)
    plain = grid.cells_by_id(validate_config(raw))
    assert set(plain) == set(cells) and not any(c.group for c in plain.values())
    # ... but a point measured beside another server is another measurement
    load, facts = pair.load_points()[0], {"prompts_sha256": "x"}
    assert (points.point_key(pair, load, 0, facts)
            != points.point_key(plain[pair.cell_id], load, 0, facts))


def test_interleaved_order_rotates_with_the_repeat():
    order = [("c", 1, 0), ("c", 6, 0), ("c", 1, 1), ("c", 6, 1), ("c", 1, 2)]
    assert groups.interleaved_order(["a", "b"], order) == [
        ("a", ("c", 1, 0)), ("b", ("c", 1, 0)), ("a", ("c", 6, 0)), ("b", ("c", 6, 0)),
        ("b", ("c", 1, 1)), ("a", ("c", 1, 1)), ("b", ("c", 6, 1)), ("a", ("c", 6, 1)),
        ("a", ("c", 1, 2)), ("b", ("c", 1, 2))]
    three = groups.interleaved_order(["a", "b", "c"], [("c", 1, 0), ("c", 1, 1), ("c", 1, 2)])
    assert [cell for cell, _ in three] == list("abc" "bca" "cab")


def test_gpus_are_shared_out_among_servers_side_by_side():
    held = slots.Slots([4, 5, 6], "pinned")
    parts = slots.split(held, [2, 1])
    assert [p.gpu_ids for p in parts] == [[4, 5], [6]]
    assert parts[1].env["CUDA_VISIBLE_DEVICES"] == "6"
    # a scheduler's job: each server gets its own of the GPUs the job sees
    sched = slots.Slots([], "scheduler", scheduler_ids=[0, 1])
    assert [p.gpu_ids for p in slots.split(sched, [1, 1])] == [[0], [1]]
    assert [p.gpu_ids for p in slots.split(sched, [1])] == [[]]  # one server: as before
    cpu = slots.Slots([], "no GPU")
    assert [p.env for p in slots.split(cpu, [1, 1])] == [{}, {}]
    with pytest.raises(slots.SlotError, match="need 3 GPUs"):
        slots.split(slots.Slots([0, 1], "pinned"), [2, 1])


def test_interleave_with_duration_bounded_points_is_refused(demo_config_raw):
    demo_config_raw["loadgen"]["duration_s"] = 30
    with pytest.raises(ConfigError, match=r"round1\.methods\[1\]\.interleave = True"):
        validate_config(demo_config_raw)


@pytest.fixture
def group(demo_config, served_dir):
    """The demo's calibration group (concurrency points only: easier to follow), its cells and
    its session."""
    demo_config["round1"]["request_rates"] = []
    cells = grid.cells_by_id(demo_config)
    members = [cells[i] for i in next(c.group for c in cells.values() if c.group)]
    (sid,) = sessions.cell_sessions(members[0], cells)
    return members, cells, sessions.plan_sessions(cells)[sid]


def run(group, config, stand, monkeypatch, cells=None, the_session=None):
    members, all_cells, planned = group
    use(stand, monkeypatch)
    the_session = the_session or planned
    return session.run_session(the_session, cells or all_cells, config,
                               layout.session_output(the_session.session_id))


def measured(stand):
    """(seed, workload) of each point the stand-in load generator ran, in order."""
    return [(p[2], p[1]) for p in stand.point_events()]


def test_a_stopped_group_keeps_its_points_and_measures_again_only_what_is_missing(
        group, demo_config, monkeypatch):
    (base, pair), cells, planned = group
    with pytest.raises(KeyboardInterrupt):
        run(group, demo_config, Stand(kill_at=6), monkeypatch)
    # both servers stopped; each cell says why it is not done; no finished output
    for cell in (base, pair):
        output = layout.cell_output(cell.cell_id)
        assert not (layout.partial_output(output).parent / f"{cell.cell_id}.jsonl").exists()
        error = json.loads(layout.error_output(output).read_text())
        assert error["session"] == planned.session_id
        assert error["error"].startswith("KeyboardInterrupt")
    assert not layout.error_output(layout.cell_output(base.cell_id)).parent.joinpath(
        f"{base.cell_id}.jsonl").exists()
    cached = {c.cell_id: len(list(layout.point_cache(c.cell_id).iterdir())) for c in (base, pair)}
    # 5 points measured before the stop: c=1 and c=24 of repeat 0 for both, c=1 of repeat 1
    # for the calibration cell (first in repeat 1's turn)
    assert cached == {base.cell_id: 2, pair.cell_id: 3}
    # each cell's records so far: one per point measured, none twice
    partial = {c.cell_id: [(r["concurrency"], r["repeat"]) for r in read_jsonl(
        layout.partial_output(layout.cell_output(c.cell_id)))] for c in (base, pair)}
    assert partial == {base.cell_id: [(1, 0), (24, 0)],
                       pair.cell_id: [(1, 0), (24, 0), (1, 1)]}
    stand = Stand()
    manifest = run(group, demo_config, stand, monkeypatch)
    plan = [r for r in range(base.repeats) for _ in base.load_points()]
    # the points both cells have are kept; the one only the calibration cell has is measured
    # again with its partner, and every later point for both
    seed = demo_config["loadgen"]["seed"]
    assert [s for s, _ in measured(stand)] == [seed + r for r in plan[2:] for _ in (0, 1)]
    assert manifest["not_done"] == {}
    for cell in (base, pair):
        assert not layout.error_output(layout.cell_output(cell.cell_id)).exists()
        assert len(list(layout.point_cache(cell.cell_id).iterdir())) == len(plan)
        cellmod.assemble(cell, [layout.session_output(planned.session_id)],
                         layout.cell_output(cell.cell_id))


def test_a_point_only_a_partner_misses_is_measured_again_with_its_cached_baseline(
        group, demo_config, monkeypatch):
    """Every point of the baseline cached, one of its partner's gone (a point measured under
    another rule, a cache cleared): the session measures that point again for both sides, in
    turn, not only the partner's (and never leaves the partner undone)."""
    (base, pair), cells, planned = group
    run(group, demo_config, Stand(), monkeypatch)
    gone = sorted(layout.point_cache(pair.cell_id).iterdir())[0]
    gone.unlink()
    stand = Stand()
    manifest = run(group, demo_config, stand, monkeypatch)
    assert manifest["not_done"] == {}
    assert len(measured(stand)) == 2  # that point, both sides
    assert len(list(layout.point_cache(pair.cell_id).iterdir())) == len(
        list(layout.point_cache(base.cell_id).iterdir()))


def test_a_group_stopped_again_keeps_one_record_per_point(group, demo_config, monkeypatch):
    """A point cached for one cell only is measured again with its partner: the records so far
    (`.partial`, read when the run is salvaged) hold it once."""
    (base, pair), _, _ = group
    with pytest.raises(KeyboardInterrupt):
        run(group, demo_config, Stand(kill_at=6), monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run(group, demo_config, Stand(kill_at=3), monkeypatch)
    for cell in (base, pair):
        seen = [(r["concurrency"], r["repeat"]) for r in read_jsonl(
            layout.partial_output(layout.cell_output(cell.cell_id)))]
        assert len(seen) == len(set(seen)) and (1, 1) in seen


def test_each_server_instance_is_a_session_of_its_own_with_its_repeats(
        group, demo_config, monkeypatch):
    """With server_instances, instance i's session measures the repeats r = i (mod n) of both
    cells, in turn: two sessions, two servers each."""
    (base, pair), cells, _ = group
    two = {c.cell_id: dataclasses.replace(c, instances=2) for c in cells.values()}
    planned = sessions.plan_sessions(two)
    ids = sessions.cell_sessions(two[pair.cell_id], two)
    assert len(ids) == 2 and ids == sessions.cell_sessions(two[base.cell_id], two)
    seed = demo_config["loadgen"]["seed"]
    for instance, sid in enumerate(ids):
        stand = Stand()
        run(group, demo_config, stand, monkeypatch, two, planned[sid])
        assert [e[0] for e in stand.events].count("launch") == 2
        repeats = [s - seed for s, _ in measured(stand)][::2]
        assert base.repeats == 5 and repeats == [r for r in range(5) if r % 2 == instance
                                                 for _ in base.load_points()]
    for cell in (base, pair):
        records = cellmod.assemble(two[cell.cell_id], [layout.session_output(s) for s in ids],
                                   layout.cell_output(cell.cell_id))
        assert {(r["repeat"], r["server"]["instance"]) for r in records} == {
            (r, r % 2) for r in range(5)}


def test_a_cell_with_fewer_repeats_takes_its_turn_only_at_its_own_points(
        group, demo_config, monkeypatch):
    """A method's `repeats`: its baseline measures every repeat of the most repeated cell paired
    with it; a cell with fewer repeats takes its turn at its own points only."""
    (base, pair), cells, planned = group
    fewer = dataclasses.replace(pair, cell_id="f" * 12, repeats=1,
                                server_config={**pair.server_config,
                                               "num_speculative_tokens": 3})
    three = {**cells, fewer.cell_id: fewer}
    the_session = dataclasses.replace(planned, cells=(*planned.cells, fewer.cell_id),
                                      configs=(*planned.configs,
                                               fewer.config_id))
    stand = Stand()
    run(group, demo_config, stand, monkeypatch, three, the_session)
    assert [e[0] for e in stand.events].count("launch") == 3
    seeds = [s for s, _ in measured(stand)]
    seed = demo_config["loadgen"]["seed"]
    # at repeat 0 three turns per point, later two
    assert seeds == [seed + r for r in range(base.repeats) for _ in base.load_points()
                     for _ in range(3 if r == 0 else 2)]


ADAPTIVE = {"enabled": True, "precision": 0.05, "alpha": 0.05, "shape": 0.25, "noise": 0.05,
            "prior_df": 20, "futility": 0.1}


def test_adaptive_stopping_ends_a_settled_pair_and_its_baseline(group, demo_config,
                                                                monkeypatch):
    """A clear 2x gain settles at the first look: the calibration cell's later repeats (and
    its baseline's, paired with nothing else) are recorded as stopped, with why; a rerun
    measures nothing; the summary widens the interval to the sequential one and the report's
    check recomputes every stop."""
    from sdbench.analyze import aggregate, point_intervals, stops

    (base, pair), cells, planned = group
    demo_config["adaptive"] = dict(ADAPTIVE)
    del demo_config["dynamic_k"]  # the baseline paired with nothing but the pair
    stand = Stand(throughput={"calibration": 20.0})
    manifest = run(group, demo_config, stand, monkeypatch)
    assert manifest["not_done"] == {}
    levels = len(pair.load_points())
    # repeat 0 of both cells at each level, then nothing: the gain is settled
    assert len(measured(stand)) == 2 * levels
    for cell in (base, pair):
        cellmod.assemble(cell, [layout.session_output(planned.session_id)],
                         layout.cell_output(cell.cell_id))
    records = {c.cell_id: list(read_jsonl(layout.cell_output(c.cell_id))) for c in (base, pair)}
    spec = records[pair.cell_id]
    assert [r["status"] for r in spec].count("ok") == levels
    stopped = [r for r in spec if r["status"] == "stopped"]
    assert len(stopped) == levels * (pair.repeats - 1)
    assert all(r["error"].startswith(f"stopped after 1 of {pair.repeats} repeats: settled")
               for r in stopped)
    assert all(r["loadgen"]["stop"]["reason"] == "settled" for r in stopped)
    assert [r["status"] for r in records[base.cell_id]].count("stopped") == levels * (
        base.repeats - 1)
    # a rerun: every point is cached (stopped ones under the same rule)
    again = Stand(throughput={"calibration": 20.0})
    run(group, demo_config, again, monkeypatch)
    assert measured(again) == []
    # a changed rule is another plan: the stopped points are due again
    demo_config["adaptive"]["precision"] = 0.01
    third = Stand(throughput={"calibration": 20.0})
    run(group, demo_config, third, monkeypatch)
    assert measured(third) == []  # ... and stop again at once under the new rule
    cellmod.assemble(pair, [layout.session_output(planned.session_id)],
                     layout.cell_output(pair.cell_id))
    assert {r["loadgen"]["stop"]["rule"]["precision"]
            for r in read_jsonl(layout.cell_output(pair.cell_id))
            if r["status"] == "stopped"} == {0.01}
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in (base, pair)])
    points = point_intervals.aggregate_points(frame)
    row = points[points["cell_id"] == pair.cell_id].iloc[0]
    assert row["repeats_stopped"] == pair.repeats - 1 and row["status"] == "ok"
    assert row["stop_reason"] == f"settled after 1 of {pair.repeats} repeats"
    assert row["verdict"] == "speculate" and "sequential" in row["interval_covers"]
    checks = stops.recheck_frame(frame)
    assert len(checks) == levels and checks["holds"].all()
    # a stored decision that the data do not support is caught
    frame.loc[frame["status"] == "stopped", "stop"] = frame.loc[
        frame["status"] == "stopped", "stop"].str.replace('"settled"', '"precise"')
    assert not stops.recheck_frame(frame)["holds"].any()
    # the tables the summary stage writes hold stopped points (they sent no prompts)
    tmp = Path(layout.cell_output(pair.cell_id)).parent
    points.to_parquet(tmp / "points.parquet")
    frame.to_parquet(tmp / "frame.parquet")


def test_a_baseline_a_later_cell_pairs_with_keeps_the_repeats_that_cell_needs(
        group, demo_config, monkeypatch):
    """The demo's dynamic-K cell is measured later, on its own, against the calibration pair's
    baseline records, every one of its 3 repeats: when the pair settles at its first look, the
    baseline still measures its first 3 repeats at every level (then stops with the pair),
    so that every repeat of the dynamic-K cell has its baseline repeat. Split (measured in
    turn with the static k) the dynamic-K cells pair among themselves and keep none."""
    (base, pair), cells, planned = group
    demo_config["adaptive"] = dict(ADAPTIVE)
    later = dynamic_k.dynamic_k_repeats(demo_config)[base.cell_id]
    assert 1 < later < base.repeats
    stand = Stand(throughput={"calibration": 20.0})
    assert run(group, demo_config, stand, monkeypatch)["not_done"] == {}
    levels = len(pair.load_points())
    assert len(measured(stand)) == levels * (1 + later)  # the pair once, its baseline 3 times
    cellmod.assemble(base, [layout.session_output(planned.session_id)],
                     layout.cell_output(base.cell_id))
    statuses = {}
    for r in read_jsonl(layout.cell_output(base.cell_id)):
        statuses.setdefault(r["repeat"], set()).add(r["status"])
    assert statuses == {**{r: {"ok"} for r in range(later)},
                        **{r: {"stopped"} for r in range(later, base.repeats)}}
    # measured in turn with the static k (`split`, the default), the dynamic-K cells pair
    # among themselves: the baseline stops with the pair, after its first repeat
    demo_config["dynamic_k"] = [{**e, "split": True} for e in demo_config["dynamic_k"]]
    shutil.rmtree("results", ignore_errors=True)
    stand = Stand(throughput={"calibration": 20.0})
    assert run(group, demo_config, stand, monkeypatch)["not_done"] == {}
    assert len(measured(stand)) == levels * 2  # the pair once, its baseline once


def test_an_acceptance_sweep_cell_is_measured_twice_before_it_stops(demo_config_raw, served_dir,
                                                                      monkeypatch):
    """A swept point (drafts accepted at a set rate) settles no earlier than its second
    repeat, and so does the real cell beside it, which anchors the line (where the rule alone
    settles it at its first): the break-even line pools their spread over repeats. The
    report's check recomputes both stops."""
    from sdbench.analyze import stops

    raw = demo_config_raw
    raw["round1"]["request_rates"] = []
    raw["adaptive"] = dict(ADAPTIVE)
    del raw["dynamic_k"]
    calibration = next(m for m in raw["round1"]["methods"] if m.get("name") == "calibration")
    calibration["acceptance_sweep"] = [4.0]
    config = validate_config(raw)
    cells = grid.cells_by_id(config)
    members = [cells[i] for i in next(c.group for c in cells.values()
                                      if c.group and c.speculator == "calibration")]
    swept = next(c for c in members if grid.swept_method(c.speculator))
    (sid,) = sessions.cell_sessions(swept, cells)
    stand = Stand(throughput={"calibration": 20.0, swept.speculator: 20.0})
    use(stand, monkeypatch)
    frame = _session_frame(config, cells, members, sid)
    measured_ok = frame[frame["status"] == "ok"].groupby("speculator")["repeat"].nunique()
    assert measured_ok["calibration"] == 2 and measured_ok[swept.speculator] == 2
    real = next(c for c in members if c.speculator == "calibration")
    assert real.sweep_anchor and adaptive.for_cell(
        adaptive.Rule.from_config(config["adaptive"]), real).min_repeats == 2
    checks = stops.recheck_frame(frame)
    assert len(checks) == 2 * len(swept.load_points()) and checks["holds"].all()


def test_a_repeat_split_into_blocks_of_prompts_stops_after_a_block(
        demo_config_raw, served_dir, monkeypatch):
    """`adaptive.blocks`: at concurrency 1 (24 prompts a repeat: 6 waves) each of the
    calibration pair's 5 repeats is 4 blocks of 6 prompts, each with its own seed that both
    sides send; a clear 2x gain settles after the first block (the rule's prior σ a block's),
    not the first repeat. At 24 (one wave) repeats stay whole. The check recomputes both."""
    from sdbench.analyze import aggregate, point_intervals, stops

    raw = demo_config_raw
    raw["round1"]["request_rates"] = []
    raw["loadgen"]["prompts_per_concurrency"] = 24
    raw["adaptive"] = {**ADAPTIVE, "blocks": 4}
    del raw["dynamic_k"]  # the baseline paired with nothing but the pair
    config = validate_config(raw)
    cells = grid.cells_by_id(config)
    members = [cells[i] for i in next(c.group for c in cells.values() if c.group)]
    base, pair = members
    one, many = pair.load_points()
    assert (specs.point_blocks(pair, one), specs.point_prompts(pair, one)) == (4, 6)
    assert (specs.point_blocks(pair, many), specs.point_prompts(pair, many)) == (1, 24)
    assert len(pair.load_repeats(one)) == 4 * pair.repeats == 20
    # a whole repeat's blocks are measured by one server instance (repeat r on instance r
    # mod n: cells measured in turn stop on whole repeats in order, `dynamic_k.stops_in_turn`): a
    # cell of 2 repeats on 3 instances measures on 2 of them, blocks or not
    spread = dataclasses.replace(pair, repeats=2, instances=3)
    assert len(spread.used_instances) == 2
    assert len(dataclasses.replace(spread, blocks=1).used_instances) == 2
    assert spread.instance_repeats(1, one) == [4, 5, 6, 7]
    assert spread.instance_repeats(1, many) == [1] and spread.instance_repeats(2, one) == []
    assert dynamic_k.stops_in_turn([spread]) and not dynamic_k.stops_in_turn(
        [dataclasses.replace(spread, repeats=3, instances=2)])
    # a block is another measurement than a whole repeat: its own cache key
    facts = {"prompts_sha256": "x"}
    assert points.point_key(pair, one, 0, facts) != points.point_key(
        dataclasses.replace(pair, blocks=1), one, 0, facts)
    (sid,) = sessions.cell_sessions(pair, cells)
    planned = sessions.plan_sessions(cells)[sid]
    stand = Stand(throughput={"calibration": 20.0})
    use(stand, monkeypatch)
    manifest = session.run_session(planned, cells, config, layout.session_output(sid))
    assert manifest["not_done"] == {}
    seed = config["loadgen"]["seed"]
    # (seed, concurrency, prompts) of each point: block 0 at 1, repeat 0 at 24, both sides
    assert [(e[2], e[5], e[6]) for e in stand.point_events()] == [
        (seed, 1, 6), (seed, 1, 6), (seed, 24, 24), (seed, 24, 24)]
    for cell in members:
        cellmod.assemble(cell, [layout.session_output(sid)], layout.cell_output(cell.cell_id))
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in members])
    spec = frame[(frame["cell_id"] == pair.cell_id) & (frame["status"] == "stopped")]
    errors = set(spec["error"])
    assert {e.split(":")[0] for e in errors} == {"stopped after 1 of 20 blocks of prompts",
                                                 "stopped after 1 of 5 repeats"}
    assert {json.loads(s)["blocks"] for s in spec["stop"]} == {4, 1}
    checks = stops.recheck_frame(frame)
    assert len(checks) == 2 and checks["holds"].all()
    # the summary's point: its blocks, why it stopped, and its interval on a block's prior
    summary = point_intervals.aggregate_points(frame)
    row = summary[(summary["cell_id"] == pair.cell_id) & (summary["concurrency"] == 1)].iloc[0]
    assert row["blocks"] == 4 and row["repeats"] == 20
    assert row["stop_reason"] == "settled after 1 of 20 blocks of prompts"
    assert "priors (σ 0.1 a look within a start, 0.03 between starts, on 20 degrees of " \
        "freedom)" in row["interval_covers"]
    assert row["interval_covers"].startswith("1 block of 1/4 of a repeat's prompts, ")
    whole = summary[(summary["cell_id"] == pair.cell_id) & (summary["concurrency"] == 24)]
    assert whole.iloc[0]["interval_covers"].startswith("1 repeat, ")
    # the check holds a block's stop to a block's prior: recomputed at a whole repeat's, its
    # σ differs
    # the report's account: runs counted as blocks, then in whole repeats (a block a quarter):
    # each side 1 block at 1 and 1 repeat at 24 measured, of 5 repeats at each
    from sdbench.report import point_tables

    spent = point_tables.adaptive_table(frame.assign(round="round1")).iloc[0]
    assert (spent["repeats planned"], spent["measured"]) == (2 * (20 + 5), 4)
    assert spent["measured, in whole repeats"].startswith("2.5 of 20 (")
    frame["stop"] = frame["stop"].str.replace('"blocks": 4', '"blocks": 1')
    assert not stops.recheck_frame(frame)["holds"].all()


def test_a_level_with_its_own_prior_stops_where_the_general_prior_goes_on(
        demo_config_raw, served_dir, monkeypatch):
    """`adaptive.level_noise`: a 1.15x gain is settled after one repeat at concurrency 1 under
    a prior of σ 0.02 there, while at 24 (the general σ 0.05) it needs more; without the level
    prior concurrency 1 needs more too. The stop stores the rule with its level priors and the
    check recomputes it on the level's prior (and catches it recomputed on the general one)."""
    from sdbench.analyze import aggregate, stops
    from sdbench.plan import adaptive

    def measured_at(level_noise: dict, root: Path) -> tuple[dict, object]:
        raw = json.loads(json.dumps(demo_config_raw))
        raw["round1"]["request_rates"] = []
        raw["adaptive"] = {**ADAPTIVE, "level_noise": level_noise}
        del raw["dynamic_k"]
        config = validate_config(raw)
        cells = grid.cells_by_id(config)
        members = [cells[i] for i in next(c.group for c in cells.values() if c.group)]
        (sid,) = sessions.cell_sessions(members[1], cells)
        stand = Stand(throughput={"calibration": 11.5})
        use(stand, monkeypatch)
        monkeypatch.chdir(root)
        manifest = session.run_session(sessions.plan_sessions(cells)[sid], cells, config,
                                       layout.session_output(sid))
        assert manifest["not_done"] == {}
        counts: dict = {}
        for event in stand.point_events():
            counts[event[5]] = counts.get(event[5], 0) + 1
        for cell in members:
            cellmod.assemble(cell, [layout.session_output(sid)],
                             layout.cell_output(cell.cell_id))
        return counts, aggregate.summarize([layout.cell_output(c.cell_id) for c in members])

    assert adaptive.Rule.from_config({**ADAPTIVE, "level_noise": {"1": 0.02}}).noise_at(1) == 0.02
    other = served_dir / "general"  # the same prompt sets and models, no results
    other.mkdir()
    for path in served_dir.iterdir():
        if path != other:
            (other / path.name).symlink_to(path)
    own, frame = measured_at({1: 0.02}, served_dir)
    general, _ = measured_at({}, other)
    # both sides once at concurrency 1 under its own prior; more often without it, and at 24
    assert own[1] == 2 and general[1] > 2 and own[24] > 2
    spec = frame[(frame["status"] == "stopped") & (frame["concurrency"] == 1)
                 & frame["stop"].str.contains('"settled"')]
    stop = json.loads(spec["stop"].iloc[0])
    assert stop["rule"]["level_noise"] == [[1, 0.02]] and stop["sigma"] < 0.03
    checks = stops.recheck_frame(frame)
    assert len(checks) and checks["holds"].all()
    frame["stop"] = frame["stop"].str.replace("[[1, 0.02]]", "[]", regex=False)
    assert not stops.recheck_frame(frame)["holds"].all()


def _session_frame(config: dict, cells: dict, members: list, sid: str) -> pd.DataFrame:
    """Run session `sid` to the end and summarize its `members`' records."""
    from sdbench.analyze import aggregate

    manifest = session.run_session(sessions.plan_sessions(cells)[sid], cells, config,
                                   layout.session_output(sid))
    assert manifest["not_done"] == {}
    for cell in members:
        cellmod.assemble(cell, [layout.session_output(sid)], layout.cell_output(cell.cell_id))
    return aggregate.summarize([layout.cell_output(c.cell_id) for c in members])


def _rated_group(raw: dict, rates: list[float], rule: dict) -> tuple:
    """The demo's first interleaved group with open-loop `rates` under the adaptive `rule`:
    (config, cells, its members, its baseline, its pair, its session id)."""
    raw["round1"]["request_rates"] = rates
    raw["adaptive"] = dict(rule)
    del raw["dynamic_k"]
    config = validate_config(raw)
    cells = grid.cells_by_id(config)
    members = [cells[i] for i in next(c.group for c in cells.values() if c.group)]
    base = next(c for c in members if c.is_baseline)
    pair = next(c for c in members if not c.is_baseline)
    (sid,) = sessions.cell_sessions(pair, cells)
    return config, cells, members, base, pair, sid


def test_an_open_loop_rate_stops_on_the_tpot_speedup(demo_config_raw, served_dir, monkeypatch):
    """At an open-loop rate the throughput is the offered load's (here the same on both sides):
    the rule reads the TPOT speedup there (the baseline's mean TPOT ÷ the pair's), so a pair
    that halves the time per token settles after its first repeat at the rate, its stop says
    which speedup it read, and the report's check recomputes it from the per-record TPOT
    speedups (and catches it read as the throughput's). Where the servers report no TPOT, the
    rate's repeats are all measured."""
    from sdbench.analyze import aggregate, point_intervals, stops

    config, cells, members, base, pair, sid = _rated_group(demo_config_raw, [2.0], ADAPTIVE)

    def measure(stand: Stand) -> pd.DataFrame:
        use(stand, monkeypatch)
        shutil.rmtree("results", ignore_errors=True)  # (measured afresh)
        manifest = session.run_session(sessions.plan_sessions(cells)[sid], cells, config,
                                       layout.session_output(sid))
        assert manifest["not_done"] == {}
        for cell in members:
            cellmod.assemble(cell, [layout.session_output(sid)],
                             layout.cell_output(cell.cell_id))
        frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in members])
        return frame[(frame["cell_id"] == pair.cell_id) & (frame["request_rate"] == 2.0)]

    at_rate = measure(Stand(tpot={base.speculator: 10.0, "calibration": 5.0}))
    assert at_rate["status"].tolist().count("ok") == 1
    stopped = at_rate[at_rate["status"] == "stopped"]
    assert len(stopped) == pair.repeats - 1
    stop = json.loads(stopped["stop"].iloc[0])
    assert stop["metric"] == "tpot_speedup" and stop["reason"] == "settled"
    assert stop["speedup"] == pytest.approx(2.0)
    assert "settled (TPOT speedup 2.000x" in stopped["error"].iloc[0]
    frame = aggregate.summarize([layout.cell_output(c.cell_id) for c in members])
    checks = stops.recheck_frame(frame)
    assert checks["holds"].all() and (checks["request_rate"] == 2.0).sum() == 1
    # the summary's TPOT speedup there: the rule's interval, with a width after one repeat
    point = point_intervals.aggregate_points(frame).set_index(["cell_id", "request_rate"]).loc[
        (pair.cell_id, 2.0)]
    assert point["tpot_speedup_mean"] == pytest.approx(2.0)
    assert 1.0 < point["tpot_speedup_ci_low"] < 2.0 < point["tpot_speedup_ci_high"]
    assert point["tpot_speedup_ci_low"] == pytest.approx(stop["low"])
    baseline = point_intervals.aggregate_points(frame).set_index(["cell_id", "request_rate"]).loc[
        (base.cell_id, 2.0)]  # no speculation: against itself, 1 and no rule's interval
    assert baseline["tpot_speedup_mean"] == 1.0 and not baseline["tpot_speedup_ci_low"] < 1.0
    frame["stop"] = frame["stop"].str.replace('"metric": "tpot_speedup", ', "", regex=False)
    assert not stops.recheck_frame(frame)["holds"].all()
    # the report's account counts the rate's repeats and names the rate a stop fails at
    from sdbench.report import point_tables

    spent = point_tables.adaptive_table(frame.assign(round="round1")).iloc[0]
    assert spent["repeats planned"] == len(frame)
    recomputed = spent["stop decisions recomputed"]
    assert recomputed.startswith(f"{len(checks) - 1} of {len(checks)} hold; not: ")
    assert f"{pair.cell_id} at 2 req/s: recomputed" in recomputed
    # no TPOT reported: no paired ratio at the rate, every repeat measured there
    unread = measure(Stand())
    assert (unread["status"] == "ok").sum() == pair.repeats


def test_open_loop_rates_are_bisected_where_the_verdict_changes(demo_config_raw, served_dir,
                                                                monkeypatch):
    """Four open-loop rates, the lowest and highest first (a tree of their own, beside the
    concurrency levels'): the pair halves the time per token at 1 request/s and doubles it
    from 2 on, so 2 is measured (the verdict changes between 1 and 8) and 4 is not (it agrees
    at 2 and 8). The rate left out is a stopped record saying why, for the pair and its
    baseline, and the report's check recomputes the decision from the TPOT speedups."""
    from sdbench.analyze import stops

    config, cells, members, base, pair, sid = _rated_group(
        demo_config_raw, [1.0, 2.0, 4.0, 8.0], {**ADAPTIVE, "coarse": 2})
    use(Stand(tpot={base.speculator: 10.0,
                    "calibration": lambda rate: 5.0 if rate <= 1 else 20.0}), monkeypatch)
    frame = _session_frame(config, cells, members, sid)
    rates = frame[frame["request_rate"].notna()]
    measured = rates[rates["status"] == "ok"].groupby("cell_id")["request_rate"].unique()
    assert sorted(measured[pair.cell_id]) == [1.0, 2.0, 8.0]
    assert sorted(measured[base.cell_id]) == [1.0, 2.0, 8.0]
    at4 = rates[rates["request_rate"] == 4.0]
    assert len(at4) and (at4["status"] == "stopped").all()
    stop = json.loads(at4[at4["cell_id"] == pair.cell_id]["stop"].iloc[0])
    assert stop["reason"] == "level" and stop["metric"] == "tpot_speedup"
    assert (stop["lower"], stop["upper"]) == (2.0, 8.0)
    error = at4[at4["cell_id"] == pair.cell_id]["error"].iloc[0]
    assert "not measured at this rate: every method's verdict agrees" in error
    assert "request rates 2 and 8/s" in error
    checks = stops.recheck_frame(frame)
    assert checks["holds"].all() and (checks["request_rate"] == 4.0).sum() == 1
    # a stored decision the records do not support is caught (read as the throughput's, or
    # with another verdict at a neighbour)
    for wrong in ('"metric": "tpot_speedup", ', ', -1]'):
        tampered = frame.copy()
        at = tampered["request_rate"] == 4.0
        tampered.loc[at, "stop"] = tampered.loc[at, "stop"].str.replace(
            wrong, "" if "metric" in wrong else ", 1]", regex=False)
        assert not stops.recheck_frame(tampered)["holds"].all()


def test_a_stopped_cell_beside_one_still_measuring_keeps_its_baseline_and_no_pair_issue(
        demo_config_raw, served_dir, monkeypatch):
    """n-gram settles at once, the EAGLE cell does not (futility off): the baseline goes on
    for the EAGLE cell (and stops where n-gram alone needed it), and n-gram's stopped repeats
    are not flagged as unpaired."""
    from sdbench.analyze import aggregate

    raw = demo_config_raw
    raw["round1"]["request_rates"] = []
    for method in raw["round1"]["methods"]:
        method["interleave"] = True  # as in the demo (the tests' copy measures them alone)
    raw["adaptive"] = {**ADAPTIVE, "futility": 0.0}
    demo_config = validate_config(raw)
    cells = grid.cells_by_id(demo_config)
    served = [c for c in cells.values() if c.engine == specs.SERVE]
    ngram = next(c for c in served if c.speculator == "ngram")
    eagle = next(c for c in served if c.speculator.startswith("eagle"))
    base = cells[ngram.baseline_cell_id]
    assert eagle.baseline_cell_id == base.cell_id
    (sid,) = sessions.cell_sessions(ngram, cells)
    stand = Stand(throughput={"ngram": 30.0, eagle.speculator: 10.5})
    use(stand, monkeypatch)
    planned = sessions.plan_sessions(cells)[sid]
    manifest = session.run_session(planned, cells, demo_config, layout.session_output(sid))
    assert manifest["not_done"] == {}
    files = []
    for cell in (base, ngram, eagle):
        cellmod.assemble(cell, [layout.session_output(sid)], layout.cell_output(cell.cell_id))
        files.append(layout.cell_output(cell.cell_id))
    frame = aggregate.summarize(files)
    status = frame.groupby("cell_id")["status"].apply(lambda s: (s == "stopped").sum())
    levels = len(ngram.load_points())
    assert status[ngram.cell_id] == levels * (ngram.repeats - 1)
    # the EAGLE cell measures its 2 repeats; the baseline's third repeat was n-gram's only
    assert eagle.repeats == 2 < ngram.repeats == base.repeats
    assert status[eagle.cell_id] == 0 and status[base.cell_id] == levels
    assert frame["pair_issue"].isna().all()


def test_levels_are_bisected_where_the_verdict_changes_and_measured_by_the_best_settings(
        demo_config_raw, served_dir, monkeypatch):
    """n-gram k 2 and 4 over five levels: the session measures concurrency 1, 4 and 16 first
    (the coarse grid), then 2 (the verdict changes between 1 and 4) with the best k there only,
    and not 8 (no gain at 4 nor at 16); every point it leaves out is a stopped record saying
    why, and the report's check recomputes those decisions from the records."""
    from sdbench.analyze import aggregate, point_intervals, stops

    raw = demo_config_raw
    raw["round1"].update(request_rates=[], concurrency=[1, 2, 4, 8, 16])
    raw["round1"]["methods"] = [{**m, "k": [2, 4], "interleave": True}
                                for m in raw["round1"]["methods"] if m["method"] == "ngram"]
    raw["adaptive"] = dict(ADAPTIVE)
    raw.pop("dynamic_k", None)
    config = validate_config(raw)
    cells = grid.cells_by_id(config)
    ngram = sorted((c for c in cells.values() if c.speculator == "ngram"
                    and c.engine == specs.SERVE),
                   key=lambda c: c.server_config["num_speculative_tokens"])
    base = cells[ngram[0].baseline_cell_id]
    (sid,) = sessions.cell_sessions(ngram[0], cells)
    # k=4 gains 2x at concurrency 1 and 2, k=2 1.5x; from 4 on k=4 loses half, k=2 more
    stand = Stand(throughput={f"ngram k={k}": (lambda c, s=speed, t=loss: s if c <= 2 else t)
                              for k, speed, loss in ((2, 15.0, 4.0), (4, 20.0, 5.0))})
    use(stand, monkeypatch)
    planned = sessions.plan_sessions(cells)[sid]
    manifest = session.run_session(planned, cells, config, layout.session_output(sid))
    assert manifest["not_done"] == {}
    files = []
    for cell in (base, *ngram):
        cellmod.assemble(cell, [layout.session_output(sid)], layout.cell_output(cell.cell_id))
        files.append(layout.cell_output(cell.cell_id))
    concurrency = [p[5] for p in stand.point_events()]
    # depth by depth: the coarse levels (all their repeats) before 2; 8 never
    assert set(concurrency[:concurrency.index(2)]) == {1, 4, 16}
    assert 2 in concurrency and 8 not in concurrency
    frame = aggregate.summarize(files)
    at8 = frame[frame["concurrency"] == 8]
    assert len(at8) and (at8["status"] == "stopped").all()
    spec8 = at8[at8["method"] != "vanilla"]
    assert all(json.loads(s)["reason"] == "level" for s in spec8["stop"])
    assert all("verdict agrees" in e for e in spec8["error"])
    # at 2 only k=4 (the best at both neighbours) is measured
    at2 = frame[(frame["concurrency"] == 2) & (frame["cell_id"] == ngram[0].cell_id)]
    assert (at2["status"] == "stopped").all()
    assert all("not the best of its method" in e for e in at2["error"])
    assert (frame[(frame["concurrency"] == 2) & (frame["cell_id"] == ngram[1].cell_id)][
        "status"] == "ok").any()
    checks = stops.recheck_frame(frame)
    assert len(checks) and checks["holds"].all()
    # the GPU check's comparison (scripts/gpu_run.sh adaptive), here of the run with itself
    points = point_intervals.aggregate_points(frame)
    lines = stops.compare_designs(points, points, frame)
    assert "- concurrency 8: full best k = " not in "\n".join(lines)
    assert any(line.startswith("- same verdict at 7 of the 7 points") for line in lines)
    assert f"- stops recomputed from the records: {len(checks)} of {len(checks)} hold" in lines
    # a stored decision the records do not support is caught
    frame.loc[frame["concurrency"] == 8, "stop"] = frame.loc[
        frame["concurrency"] == 8, "stop"].str.replace(', -1]', ', 1]')
    assert not stops.recheck_frame(frame)["holds"].all()
