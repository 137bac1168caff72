"""Cells measured in turn (`interleave`): the demo's calibration pair is one group with its
baseline; the group job takes the points in turn with both servers up, keeps what it measured
when stopped, measures again only the points some cell still misses, and the cells' own jobs
then write their records from the point cache.

The measuring itself is replaced here by a generator that logs what a server would do (the
real servers run in the end-to-end test, whose calibration pair is such a group)."""

import dataclasses
import json
import shutil

import pytest

from sdbench import layout
from sdbench.files import append_jsonl, read_jsonl
from sdbench.measure import cell as cellmod
from sdbench.measure import slots
from sdbench.plan import grid, hostcaps
from sdbench.plan.config import ConfigError, validate_config
from sdbench.records import LoadPoint


def test_the_calibration_pair_is_measured_with_its_baseline(demo_config, demo_config_raw):
    cells = grid.cells_by_id(demo_config)
    pair = next(c for c in cells.values() if c.speculator == "calibration" and c.engine ==
                grid.SERVE)
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
    assert (cellmod.point_key(pair, load, 0, facts)
            != cellmod.point_key(plain[pair.cell_id], load, 0, facts))


def test_interleaved_order_rotates_with_the_repeat():
    points = [("c", 1, 0), ("c", 6, 0), ("c", 1, 1), ("c", 6, 1), ("c", 1, 2)]
    assert cellmod.interleaved_order(["a", "b"], points) == [
        ("a", ("c", 1, 0)), ("b", ("c", 1, 0)), ("a", ("c", 6, 0)), ("b", ("c", 6, 0)),
        ("b", ("c", 1, 1)), ("a", ("c", 1, 1)), ("b", ("c", 6, 1)), ("a", ("c", 6, 1)),
        ("a", ("c", 1, 2)), ("b", ("c", 1, 2))]
    three = cellmod.interleaved_order(["a", "b", "c"], [("c", 1, 0), ("c", 1, 1), ("c", 1, 2)])
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


class Servers:
    """What the measuring would do, in order: ("start", cell), ("point", cell, pid),
    ("stop", cell); `fail_at` raises KeyboardInterrupt at that measurement (Ctrl-C)."""

    def __init__(self, fail_at=None):
        self.events, self.fail_at = [], fail_at

    def measure(self, cell, config, plan, context):
        for instance in cellmod.instances(cell, plan):
            self.events.append(("start", cell.cell_id))
            try:
                for load, repeat in instance:
                    pid = LoadPoint.of_load(load, repeat).order
                    if sum(e[0] == "point" for e in self.events) == self.fail_at:
                        raise KeyboardInterrupt
                    self.events.append(("point", cell.cell_id, pid))
                    record = cellmod._record(
                        cell, load, repeat, {"output_throughput": 1.0}, "ok", "",
                        {"interleaved_with": context["interleaved_with"]},
                        {"seed": repeat}, context, {}, cellmod._now())
                    append_jsonl(context["partial"], record)  # as the real one does
                    yield pid, {"record": record, "detail": {"generated_texts": ["x"]}}
            finally:
                self.events.append(("stop", cell.cell_id))

    def points(self):
        return [(e[1], e[2]) for e in self.events if e[0] == "point"]

    def server(self, cell, config, server_log, env, verdict):
        """A group's server, launched before any point (`cellmod.cell_server`)."""
        events = self.events

        class Launched:
            def launch(self):
                events.append(("launch", cell.cell_id))

            def start(self):
                events.append(("up", cell.cell_id))

            def stop(self):
                pass

        return Launched()


@pytest.fixture
def group(demo_config, tmp_path, monkeypatch):
    """The demo's calibration group in a working directory with its prompt file, on a host
    that runs it."""
    monkeypatch.chdir(tmp_path)
    demo_config["round1"]["request_rates"] = []  # concurrency points only: easier to follow
    cells = grid.cells_by_id(demo_config)
    members = [cells[i] for i in next(c.group for c in cells.values() if c.group)]
    prompts = tmp_path / members[0].workload["path"]
    prompts.parent.mkdir(parents=True)
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}", "output_tokens": 8}) + "\n"
                               for i in range(members[0].workload["num_prompts"])))
    verdict = {"reason": None, "host": {"device": "cpu"},
               "dtype": {"requested": "host", "resolved": "float32", "why": "test"}}
    monkeypatch.setattr(hostcaps, "cell_verdict", lambda config, cell, root=".": verdict)
    monkeypatch.setattr(cellmod.checks, "check_cell_context", lambda config, cell: None)
    return members


def run(members, config, servers, monkeypatch):
    monkeypatch.setattr(cellmod, "_measure", servers.measure)
    monkeypatch.setattr(cellmod, "cell_server", servers.server)
    return cellmod.run_group(members, config, layout.group_output(members[0].cell_id))


def test_a_group_takes_the_points_in_turn_and_its_cells_write_from_the_cache(
        group, demo_config, tmp_path, monkeypatch):
    base, pair = group
    servers = Servers()
    manifest = run(group, demo_config, servers, monkeypatch)
    plan = [LoadPoint.of_load(load, r).order for r in range(base.repeats)
            for load in base.load_points()]
    # both servers launched together and up before the first point; each point once per
    # cell, in turn
    assert servers.events[:6] == [("launch", base.cell_id), ("launch", pair.cell_id),
                                  ("up", base.cell_id), ("up", pair.cell_id),
                                  ("start", base.cell_id), ("point", base.cell_id, plan[0])]
    assert servers.points() == [(cell, pid) for pid in plan
                                for cell in ((base.cell_id, pair.cell_id) if pid[-1] % 2 == 0
                                             else (pair.cell_id, base.cell_id))]
    # a server stops right after its own last point
    last = {c: max(i for i, e in enumerate(servers.events) if e[:2] == ("point", c))
            for c in manifest["cells"]}
    for cell_id, i in last.items():
        assert servers.events[i + 1] == ("stop", cell_id)
    assert json.loads((tmp_path / layout.group_output(base.cell_id)).read_text())["cells"] == [
        base.cell_id, pair.cell_id]
    assert not list((tmp_path / "results" / "cells").glob("*.partial"))

    # the cells' jobs: every point from the cache, no server
    def no_server(*args, **kwargs):
        raise AssertionError("a grouped cell's job must not start a server")

    monkeypatch.setattr(cellmod, "_measure", no_server)
    for cell, other in ((base, pair), (pair, base)):
        records = cellmod.run_cell(cell, demo_config, layout.cell_output(cell.cell_id),
                                   server_log=tmp_path / "s.log")
        assert [(r["concurrency"], r["repeat"]) for r in records] == sorted(
            (c, r) for c in cell.concurrency for r in range(cell.repeats))
        assert {tuple(r["server"]["interleaved_with"]) for r in records} == {(other.cell_id,)}


def test_a_stopped_group_keeps_its_points_and_measures_again_only_what_is_missing(
        group, demo_config, tmp_path, monkeypatch):
    base, pair = group
    with pytest.raises(KeyboardInterrupt):
        run(group, demo_config, Servers(fail_at=5), monkeypatch)
    # both servers stopped; each cell says why it is not done; no finished output
    for cell in group:
        output = tmp_path / layout.cell_output(cell.cell_id)
        assert not output.exists()
        error = json.loads(layout.error_output(output).read_text())
        assert error["group"] == base.cell_id and error["error"].startswith("KeyboardInterrupt")
    assert not (tmp_path / layout.group_output(base.cell_id)).exists()
    cached = {c.cell_id: len(list((tmp_path / "results/points" / c.cell_id).iterdir()))
              for c in group}
    # 5 points measured before the stop: c=1 and c=24 of repeat 0 for both, c=1 of repeat 1
    # for the calibration cell (first in repeat 1's turn)
    assert cached == {base.cell_id: 2, pair.cell_id: 3}

    # each cell's records so far: one per point measured, none twice
    partial = {c.cell_id: [(r["concurrency"], r["repeat"]) for r in read_jsonl(
        tmp_path / f"{layout.cell_output(c.cell_id)}.partial")] for c in group}
    assert partial == {base.cell_id: [(1, 0), (24, 0)],
                       pair.cell_id: [(1, 0), (24, 0), (1, 1)]}

    # a grouped cell's own job does not measure alone
    with pytest.raises(cellmod.CellError, match="run their group job first"):
        cellmod.run_cell(pair, demo_config, layout.cell_output(pair.cell_id),
                         server_log=tmp_path / "s.log")

    servers = Servers()
    run(group, demo_config, servers, monkeypatch)
    plan = [LoadPoint.of_load(load, r).order for r in range(base.repeats)
            for load in base.load_points()]
    # the points both cells have are kept; the one only the calibration cell has is measured
    # again with its partner, and every later point for both
    assert {pid for _, pid in servers.points()} == set(plan[2:])
    assert len(servers.points()) == 2 * len(plan[2:])
    for cell in group:
        assert not layout.error_output(layout.cell_output(cell.cell_id)).exists()
        assert len(list((tmp_path / "results/points" / cell.cell_id).iterdir())) == len(plan)


def test_a_group_stopped_again_keeps_one_record_per_point(group, demo_config, tmp_path,
                                                          monkeypatch):
    """A point cached for one cell only is measured again with its partner: the records so far
    (`.partial`, read when the run is salvaged) hold it once."""
    base, pair = group
    with pytest.raises(KeyboardInterrupt):
        run(group, demo_config, Servers(fail_at=5), monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run(group, demo_config, Servers(fail_at=2), monkeypatch)
    for cell in group:
        points = [(r["concurrency"], r["repeat"]) for r in read_jsonl(
            tmp_path / f"{layout.cell_output(cell.cell_id)}.partial")]
        assert len(points) == len(set(points)) and (1, 1) in points


def test_servers_started_anew_per_repeat_take_their_turns_too(group, demo_config,
                                                              monkeypatch):
    """With loadgen.server_instances, each cell's instances take the repeats in turn (all of
    instance 0's, then instance 1's): the group follows that order."""
    two = [dataclasses.replace(c, workload={**c.workload, "loadgen": {
        **c.workload["loadgen"], "server_instances": 2}}) for c in group]
    servers = Servers()
    run(two, demo_config, servers, monkeypatch)
    repeats = [pid[-1] for cell, pid in servers.points() if cell == two[0].cell_id]
    assert two[0].repeats == 5 and repeats == [0, 0, 2, 2, 4, 4, 1, 1, 3, 3]
    assert [e[0] for e in servers.events].count("start") == 4  # 2 instances x 2 cells


def test_a_cell_with_fewer_repeats_takes_its_turn_only_at_its_own_points(
        group, demo_config, monkeypatch):
    """A method's `repeats`: its baseline measures every repeat of the most repeated cell paired
    with it; a cell with fewer repeats takes its turn at its own points only, and each cell's
    points keep their order, with server instances too."""
    base, pair = group
    fewer = dataclasses.replace(pair, cell_id="f" * 12, repeats=1)
    for instances_ in (1, 2):
        shutil.rmtree("results", ignore_errors=True)  # repeats in instance 0 keep their keys
        cells = [dataclasses.replace(c, workload={**c.workload, "loadgen": {
            **c.workload["loadgen"], "server_instances": instances_}}) for c in
            (base, pair, fewer)]
        servers = Servers()
        run(cells, demo_config, servers, monkeypatch)
        points = servers.points()
        for cell in cells:
            own = [pid for c, pid in points if c == cell.cell_id]
            plan = [LoadPoint.of_load(load, r).order for r in range(cell.repeats)
                    for load in cell.load_points()]
            assert sorted(own) == sorted(plan)
            assert own == [pid for instance in cellmod.instances(
                cell, [(load, r) for r in range(cell.repeats) for load in cell.load_points()])
                for pid in (LoadPoint.of_load(load, r).order for load, r in instance)]
        # the one-repeat cell measured beside the others at repeat 0, nowhere else
        assert {pid[-1] for c, pid in points if c == fewer.cell_id} == {0}
        assert len(points) == 2 * len(base.load_points()) * base.repeats + len(
            fewer.load_points())
