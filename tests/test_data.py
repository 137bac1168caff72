import hashlib
import json

import pytest

from sdbench.config import BUILDER_SUBSETS
from sdbench.data import fixtures
from sdbench.data.builders import SPEC_BENCH_GROUPS, BuildError, build_dataset
from sdbench.data.sources import SourceError, check_rows, fetch_source
from sdbench.files import read_jsonl


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_spec_bench_fixture_has_the_real_schema():
    rows = fixtures.spec_bench_rows(rows_per_group=8, seed=0)
    assert len(rows) == 8 * 6
    assert [r["question_id"] for r in rows] == list(range(1, 49))
    assert {r["category"] for r in rows} <= set(SPEC_BENCH_GROUPS)
    conversation = [r for r in rows if SPEC_BENCH_GROUPS[r["category"]] == "conversation"]
    assert len(conversation) == 8 and all(len(r["turns"]) == 2 for r in conversation)
    assert all(isinstance(t, str) and t.strip() for r in rows for t in r["turns"])
    assert rows == fixtures.spec_bench_rows(rows_per_group=8, seed=0)  # deterministic


def test_cnn_fixture_has_the_real_schema():
    rows = fixtures.cnn_dailymail_rows(rows=5)
    assert [sorted(r) for r in rows] == [["article", "highlights", "id"]] * 5
    assert all(len(r["article"].split()) > 100 for r in rows)
    assert len({r["id"] for r in rows}) == 5


def test_fetch_fixture_writes_rows_and_manifest(tmp_path):
    out, manifest = tmp_path / "q.jsonl", tmp_path / "q.jsonl.manifest.json"
    m = fetch_source("spec_bench", {"kind": "fixture", "rows": 4, "seed": 0}, out, manifest)
    assert m["rows"] == 24 == check_rows("spec_bench", out)
    assert m["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert json.loads(manifest.read_text())["origin"]["generator"] == "sdbench.data.fixtures"


def test_fetch_url_checks_the_pinned_hash(tmp_path):
    upstream = write_rows(tmp_path / "upstream.jsonl", fixtures.spec_bench_rows(2))
    digest = hashlib.sha256(upstream.read_bytes()).hexdigest()
    out, manifest = tmp_path / "raw" / "q.jsonl", tmp_path / "raw" / "m.json"
    spec = {"kind": "url", "url": upstream.as_uri(), "sha256": digest}
    assert fetch_source("spec_bench", spec, out, manifest)["sha256"] == digest
    # a mismatch names both hashes and leaves the finished file untouched
    before = out.read_bytes()
    with pytest.raises(SourceError) as info:
        fetch_source("spec_bench", {**spec, "sha256": "0" * 64}, out, manifest)
    assert digest in str(info.value) and "0" * 64 in str(info.value)
    assert out.read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.json", "q.jsonl"]


def test_fetch_path_rejects_rows_outside_the_schema(tmp_path):
    bad = write_rows(tmp_path / "bad.jsonl", [{"article": "x", "id": "1"}])
    with pytest.raises(SourceError, match=r"bad\.jsonl:1: .*'highlights'"):
        fetch_source("cnn_dailymail", {"kind": "path", "path": str(bad)}, tmp_path / "o.jsonl",
                     tmp_path / "m.json")
    assert not (tmp_path / "o.jsonl").exists()
    with pytest.raises(SourceError, match="does not exist"):
        fetch_source("cnn_dailymail", {"kind": "path", "path": str(tmp_path / "none.jsonl")},
                     tmp_path / "o.jsonl", tmp_path / "m.json")


def test_fetch_hf_goes_through_datasets(tmp_path):
    # a local dataset folder in the hub layout: `datasets` loads it like a hub repo
    folder = tmp_path / "cnn_local"
    folder.mkdir()
    rows = fixtures.cnn_dailymail_rows(rows=3)
    write_rows(folder / "test.jsonl", [{**r, "extra": 1} for r in rows])
    spec = {"kind": "hf", "dataset": str(folder), "config": None, "split": "test",
            "revision": "main"}
    manifest = fetch_source("cnn_dailymail", spec, tmp_path / "a.jsonl", tmp_path / "m.json")
    assert manifest["rows"] == 3
    assert read_jsonl(tmp_path / "a.jsonl") == rows  # only the schema's columns are kept


def _build(tmp_path, builder, source, rows, **options):
    raw = write_rows(tmp_path / "raw.jsonl", rows)
    manifest = fetch_source(source, {"kind": "path", "path": str(raw)}, tmp_path / "r.jsonl",
                            tmp_path / "r.json")
    dataset = {"builder": builder, "source": source, "max_output_tokens": 32,
               "max_records": None, **options}
    return build_dataset("ds", dataset, tmp_path / "r.jsonl", manifest, tmp_path / "out")


def test_spec_bench_builder_splits_task_groups(tmp_path):
    rows = fixtures.spec_bench_rows(rows_per_group=5)
    card = _build(tmp_path, "spec_bench", "spec_bench", rows)
    assert set(card["subsets"]) == set(BUILDER_SUBSETS["spec_bench"])
    assert {k: v["records"] for k, v in card["subsets"].items()} == {
        "conversation": 5, "translation": 5, "summarization": 5, "qa": 5,
        "math_reasoning": 5, "rag": 5, "all": 30}
    conversation = read_jsonl(tmp_path / "out" / "conversation.jsonl")
    first = next(r for r in rows if r["question_id"] == conversation[0]["question_id"])
    assert conversation[0]["prompt"] == first["turns"][0]  # first turn only
    assert conversation[0]["output_tokens"] == 32
    # rebuilding gives byte-identical outputs and card
    snapshot = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    _build(tmp_path, "spec_bench", "spec_bench", rows)
    assert snapshot == {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}


def test_spec_bench_builder_rejects_unknown_category(tmp_path):
    rows = fixtures.spec_bench_rows(rows_per_group=1)
    rows[2]["category"] = "poetry"
    with pytest.raises(BuildError, match=r"r\.jsonl:3: unknown Spec-Bench category 'poetry'"):
        _build(tmp_path, "spec_bench", "spec_bench", rows)


def test_cnn_dm_summary_builder(tmp_path):
    rows = fixtures.cnn_dailymail_rows(rows=4)
    rows.append({"article": "   ", "highlights": "", "id": "empty"})
    card = _build(tmp_path, "cnn_dm_summary", "cnn_dailymail", rows, max_records=3)
    assert card["subsets"]["all"]["records"] == 3
    assert card["filters"]["dropped"] == {"empty article": 1}
    out = read_jsonl(tmp_path / "out" / "all.jsonl")
    assert out[0]["prompt"].startswith("Summarize the following news article")
    assert rows[0]["article"] in out[0]["prompt"]
    with pytest.raises(BuildError, match="placeholder"):
        _build(tmp_path, "cnn_dm_summary", "cnn_dailymail", rows, instruction="Summarize.")
