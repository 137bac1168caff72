"""Where a run's time went (sdbench.report.timing), from benchmark files, the sessions'
manifests and the records."""

import json

import pytest

from sdbench import layout
from sdbench.measure.server import covered
from sdbench.report import timing


def _bench(root, rule, name, seconds):
    path = root / layout.benchmark_file(rule, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s\th:m:s\tmax_rss\n" + f"{seconds}\t0:00:00\t1\n")


def _manifest(root, name, startup, measuring, servers, wall):
    path = root / layout.SESSIONS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"session": name, "timing": {
        "startup_s": startup, "measuring_s": measuring, "servers": servers, "wall_s": wall,
        "rest_s": wall - startup - measuring}}))


def _record(cell_id, duration, status="ok"):
    return {"cell_id": cell_id, "status": status, "metrics": {"duration": duration}}


def test_split_sums_jobs_per_part_and_takes_the_sessions_own_split(tmp_path):
    _bench(tmp_path, "fetch_source", "spec_bench/question.jsonl", 2)
    _bench(tmp_path, "prompts", "spec_bench/all", 10)
    _bench(tmp_path, "model", "smollm2-135m", 40)
    _bench(tmp_path, "session", "abc-i0", 100)
    _bench(tmp_path, "cell", "c1", 2)
    _bench(tmp_path, "cell", "c2", 3)
    _bench(tmp_path, "dynamic_k_cell", "t/w/calibration", 50)
    _bench(tmp_path, "report", "round1", 20)
    # a session of two servers side by side (its own clock counts their overlap once), and a
    # derived cell's standalone session (its job's benchmark is not the session's)
    _manifest(tmp_path, "abc-i0", 41.0, 40.0, 2, 99.0)
    _manifest(tmp_path, "standalone/d-i0", 25.0, 15.0, 1, 48.0)
    cells = tmp_path / "results" / "cells"
    cells.mkdir(parents=True)
    (cells / "c1.jsonl").write_text(json.dumps(_record("c1", 8.0)) + "\n"
                                    + json.dumps(_record("c1", 12.0)) + "\n")
    (cells / "c2.jsonl").write_text(json.dumps(_record("c2", 0.0, "unsupported")) + "\n")
    derived = tmp_path / "results" / "derived" / "t" / "w"
    derived.mkdir(parents=True)
    (derived / "calibration.jsonl").write_text(json.dumps(_record("d", 9.0)) + "\n")
    (cells / "partial.jsonl.partial").write_text("not read\n")
    split = timing.time_split(tmp_path)
    assert split["parts"] == {"data": 12.0, "models": 40.0, "cells": 155.0,
                              "summary and reports": 20.0}
    assert split["jobs"] == {"data": 2, "models": 1, "cells": 4, "summary and reports": 1}
    cells_split = split["cells"]
    assert cells_split["server start-up"] == pytest.approx(41 + 25)
    assert cells_split["measuring"] == pytest.approx(40 + 15)
    assert cells_split["timed requests"] == pytest.approx(8 + 12 + 9)
    assert cells_split["servers"] == 3 and cells_split["sessions"] == 2
    # the rest of each session: its job's wall time (benchmark, else its clock) less start-up
    # and measuring
    assert cells_split["session rest"] == {"results/sessions/abc-i0.json": pytest.approx(19.0),
                                           "results/sessions/standalone/d-i0.json":
                                           pytest.approx(8.0)}
    text = timing.format_split(split, wall_s=600)
    assert text.startswith("Wall time: 10.0 min")
    assert "server start-up      1.1 min  (3 servers in 2 sessions)" in text
    assert "measuring            0.9 min  (35 % of the cells' jobs" in text
    assert "the rest             0.6 min  (per session 19.0 s median, 19.0 s at most" in text


def test_split_of_a_run_without_benchmarks_is_empty_not_an_error(tmp_path):
    split = timing.time_split(tmp_path)
    assert split["parts"] == {} and split["cells"]["servers"] == 0
    assert "Where the time went" in timing.format_split(split)


def test_servers_started_side_by_side_count_once_for_their_overlap():
    # a group's two servers launched together (0-30 s and 1-41 s: 41 s of start-up, not 70),
    # a later one alone (45-55 s) and one without a launch time (counted in full)
    assert covered([(0.0, 30.0), (1.0, 40.0), (45.0, 10.0), (None, 7.0)]) == pytest.approx(
        41 + 10 + 7)
    assert covered([(0.0, 5.0), (1.0, 2.0), (10.0, 1.0)]) == pytest.approx(6.0)


def test_sessions_one_after_another_in_one_process_each_count_their_own_time(monkeypatch):
    """A job that runs several sessions (a derived schedule's cells taking turns): the second
    session's wall time starts where the first's ended, not at the process's start, so that
    the time split of the run counts each second once."""
    from sdbench.measure.server import Clock

    monkeypatch.setattr(Clock, "previous_end", None)
    first = Clock()
    first.measuring_s = 1.0
    one = first.split()
    assert one["phases"]["job start and imports"] > 0  # since the process started
    second = Clock()
    two = second.split()
    assert second.process_started >= first.process_started + one["wall_s"]  # the first's end
    assert two["wall_s"] < 1.0 and two["phases"]["job start and imports"] < 1.0
