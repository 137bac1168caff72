"""The typed record and load point: what the cell writes is valid against the record schema,
damaged or foreign files stop the reader with the file, line and key, and older records and
sidecars are still read."""

import gzip
import json

import pytest

from sdbench.analyze.aggregate import summarize
from sdbench.files import write_jsonl
from sdbench.records import LoadPoint, Record, RecordError, read_details, read_records, validate

from helpers import record


def test_records_of_every_status_and_load_are_valid_and_read_back(tmp_path):
    rows = [record("base", "vanilla", 1, 100.0), record("base", "vanilla", 1, 0.0, repeat=1,
                                                         status="failed"),
            record("ng", "ngram", 4, 90.0, baseline="base", k=3, status="invalid")]
    rate = dict(rows[0], load={"mode": "rate", "request_rate": 2.0, "burstiness": 1.0},
                concurrency=None, request_rate=2.0)
    batch = dict(rows[0], engine="offline", load={"mode": "batch", "concurrency": 8},
                 concurrency=8)
    write_jsonl(tmp_path / "cells.jsonl", [*rows, rate, batch])
    back = read_records(tmp_path / "cells.jsonl")
    assert [r["status"] for r in back] == ["ok", "failed", "invalid", "ok", "ok"]
    assert all(r["schema"] == "sdbench.record/1" for r in back)
    with pytest.raises(RecordError, match="status 'done'"):
        Record(**{**{k: rows[0][k] for k in Record.__dataclass_fields__}, "status": "done"}
               ).to_dict()


@pytest.mark.parametrize(("change", "says"), [
    (lambda r: r["metrics"].pop("output_throughput"), r":3: metrics: 'output_throughput'"),
    (lambda r: r.update(status="done"), r":3: status: 'done' is not one of"),
    (lambda r: r.update(repeat=-1), r":3: repeat: -1 is less than the minimum"),
    (lambda r: r["load"].pop("concurrency"), r":3: load: 'concurrency' is a required"),
    (lambda r: r["metrics"].update(total_token_throughput="fast"), r":3: metrics\."
                                                                   "total_token_throughput"),
    (lambda r: r.update(status="failed", error=None), r":3: error: None is not of type"),
])
def test_a_damaged_record_stops_the_summary_naming_file_line_and_key(tmp_path, change, says):
    rows = [record("base", "vanilla", c, 100.0) for c in (1, 2, 4)]
    change(rows[2])
    write_jsonl(tmp_path / "cells.jsonl", rows)
    with pytest.raises(RecordError, match=says) as caught:
        summarize([tmp_path / "cells.jsonl"])
    assert str(tmp_path / "cells.jsonl") in str(caught.value)


def test_a_file_that_is_not_json_lines_is_named_with_its_line(tmp_path):
    path = tmp_path / "cells.jsonl"
    path.write_text(json.dumps(record("base", "vanilla", 1, 100.0)) + "\n{\"cell_id\": \"x\"\n")
    with pytest.raises(RecordError, match=r"cells.jsonl:2: not JSON"):
        read_records(path)
    with pytest.raises(RecordError, match="a record is a JSON object, not list"):
        validate([], "somewhere")


def test_a_record_written_before_engine_and_load_existed_is_a_closed_loop_server_point():
    old = record("base", "vanilla", 4, 100.0)
    for key in ("schema", "engine", "load", "request_rate"):
        old.pop(key)
    read = validate(old, "old")
    assert read["engine"] == "serve" and read["request_rate"] is None
    assert read["load"] == {"mode": "concurrency", "concurrency": 4}


def test_one_load_point_spelling_for_keys_order_files_and_words():
    closed = LoadPoint.of_load({"mode": "concurrency", "concurrency": 4}, 1)
    rate = LoadPoint.of_load({"mode": "rate", "request_rate": 2, "burstiness": 1.0}, 0)
    batch = LoadPoint.of_load({"mode": "batch", "concurrency": 8}, 0)
    # the point cache's and the profiles' file names are what they were (c4, rate2)
    assert (closed.name, rate.name, batch.name) == ("c4", "rate2", "c8")
    assert closed.key == (4, None, 1) and rate.key == (None, 2.0, 0)
    assert sorted([rate.order, closed.order, batch.order]) == [closed.order, batch.order,
                                                               rate.order]
    assert closed.label == "concurrency 4, repeat 1" and rate.label == "rate 2/s, repeat 0"
    assert (closed.level, rate.level, batch.level) == ("concurrency 4", "request rate 2/s",
                                                       "batch size 8")
    # from a summary row, where an empty level is NA
    assert LoadPoint.of(float("nan"), 2.0, 0) == rate
    assert LoadPoint.of(8.0, float("nan"), 0, engine="offline") == batch


def test_sidecars_without_latencies_get_them_derived_when_read(tmp_path):
    path = tmp_path / "x.requests.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps({"cell_id": "c", "concurrency": 1, "repeat": 0,
                             "ttfts": [0.1, 0.0], "itls": [[0.01, 0.02], []]}) + "\n")
    detail = read_details(path)["c"][(1, None, 0)]
    assert detail["latencies"] == pytest.approx([0.13, 0.0])
