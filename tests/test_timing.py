"""Where a run's time went (sdbench.report.timing), from benchmark files and records."""

import json

import pytest

from sdbench import layout
from sdbench.report import timing


def _bench(root, rule, name, seconds):
    path = root / layout.benchmark_file(rule, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s\th:m:s\tmax_rss\n" + f"{seconds}\t0:00:00\t1\n")


def _record(cell_id, instance, startup, start, end, duration, status="ok"):
    return {"cell_id": cell_id, "status": status, "metrics": {"duration": duration},
            "server": {"startup_s": startup, "instance": instance},
            "provenance": {"started_at": f"2026-11-23T10:00:{start:02d}+00:00",
                           "finished_at": f"2026-11-23T10:00:{end:02d}+00:00"}}


def test_split_sums_jobs_per_part_and_counts_each_server_once(tmp_path):
    _bench(tmp_path, "fetch_source", "spec_bench/question.jsonl", 2)
    _bench(tmp_path, "prompts", "spec_bench/all", 10)
    _bench(tmp_path, "model", "smollm2-135m", 40)
    _bench(tmp_path, "cell", "abc", 100)
    _bench(tmp_path, "dynamic_k_cell", "t/w/calibration", 50)
    _bench(tmp_path, "report", "round1", 20)
    cells = tmp_path / "results" / "cells"
    cells.mkdir(parents=True)
    # two points of one server (its start-up counted once), one point of a second instance
    (cells / "abc.jsonl").write_text("\n".join(json.dumps(r) for r in [
        _record("abc", 0, 30.0, 0, 10, 8.0), _record("abc", 0, 30.0, 10, 25, 12.0),
        _record("abc", 1, 20.0, 30, 40, 9.0)]) + "\n")
    derived = tmp_path / "results" / "derived" / "t" / "w"
    derived.mkdir(parents=True)
    (derived / "calibration.jsonl").write_text(json.dumps(_record("d", 0, 25.0, 0, 5, 4.0))
                                               + "\n")
    # a cell this host cannot run: no server, nothing measured
    (cells / "q.jsonl").write_text(json.dumps(_record("q", None, None, 0, 0, 0.0,
                                                      "unsupported")) + "\n")
    (cells / "partial.jsonl.partial").write_text("not read\n")
    split = timing.time_split(tmp_path)
    assert split["parts"] == {"data": 12.0, "models": 40.0, "cells": 150.0,
                              "summary and reports": 20.0}
    assert split["jobs"] == {"data": 2, "models": 1, "cells": 2, "summary and reports": 1}
    cells_split = split["cells"]
    assert cells_split["server start-up"] == pytest.approx(30 + 20 + 25)
    assert cells_split["measuring"] == pytest.approx(10 + 15 + 10 + 5)
    assert cells_split["timed requests"] == pytest.approx(8 + 12 + 9 + 4)
    assert cells_split["servers"] == 3
    text = timing.format_split(split, wall_s=600)
    assert text.startswith("Wall time: 10.0 min")
    assert "server start-up      1.2 min  (3 servers)" in text
    assert "the rest             0.6 min" in text  # 150 - 75 - 40 s


def test_split_of_a_run_without_benchmarks_is_empty_not_an_error(tmp_path):
    split = timing.time_split(tmp_path)
    assert split["parts"] == {} and split["cells"]["servers"] == 0
    assert "Where the time went" in timing.format_split(split)


def test_servers_started_side_by_side_count_once_for_their_overlap(tmp_path):
    cells = tmp_path / "results" / "cells"
    cells.mkdir(parents=True)

    def launched(cell_id, at, startup):
        record = _record(cell_id, 0, startup, 50, 55, 4.0)
        record["server"]["started_at"] = f"2026-11-23T10:00:{at:02d}+00:00"
        return json.dumps(record)

    # a group's two servers launched together (0-30 s and 1-41 s: 41 s of start-up, not 70),
    # a later one alone (45-55 s) and one of a record without a launch time (counted in full)
    (cells / "a.jsonl").write_text(launched("a", 0, 30.0) + "\n")
    (cells / "b.jsonl").write_text(launched("b", 1, 40.0) + "\n")
    (cells / "c.jsonl").write_text(launched("c", 45, 10.0) + "\n")
    (cells / "d.jsonl").write_text(json.dumps(_record("d", 0, 7.0, 50, 55, 4.0)) + "\n")
    split = timing.cell_split(tmp_path)
    assert split["server start-up"] == pytest.approx(41 + 10 + 7)
    assert split["servers"] == 4
    assert timing.covered([(0.0, 5.0), (1.0, 2.0), (10.0, 1.0)]) == pytest.approx(6.0)
