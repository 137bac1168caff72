import pytest

from sdbench.files import atomic_path, atomic_write_json, read_jsonl, sha256_file, write_jsonl
from sdbench.ids import canonical_json, short_hash


def test_canonical_json_ignores_key_order():
    assert canonical_json({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == \
        canonical_json({"a": [1, {"x": 1, "y": 2}], "b": 1})


def test_short_hash_is_stable_and_sensitive():
    base = {"method": "ngram", "k": 2}
    assert short_hash(base) == short_hash(dict(reversed(base.items())))
    assert short_hash(base) != short_hash({"method": "ngram", "k": 3})
    assert len(short_hash(base)) == 12 and int(short_hash(base), 16) >= 0


def test_canonical_json_rejects_nan():
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    atomic_write_json(target, {"ok": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("writer died")
    # the finished file is untouched and no temporary file is left behind
    assert target.read_text().strip().endswith("}")
    assert "ok" in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_jsonl_roundtrip_and_error_names_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert write_jsonl(path, [{"a": 1}, {"a": "é"}]) == 2
    assert read_jsonl(path) == [{"a": 1}, {"a": "é"}]
    assert len(sha256_file(path)) == 64
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2"):
        read_jsonl(path)


def test_outputs_are_readable_by_others(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "report.json", {})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == 0o644
