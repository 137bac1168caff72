"""Raw sources: tokenizers, fixtures, every accepted file format, and corrupt files refused with
a message that names the user's file, the rows and the reason."""

import base64
import copy
import hashlib
import json
import zipfile

import pytest

from sdbench.data import fixtures
from sdbench.data.raw import RawError, read_rows
from sdbench.data.sources import (
    SPEC_BENCH_GROUPS,
    SourceError,
    fetch_source,
    fingerprint,
    local_files,
    raw_path,
    skipped_summary,
)
from sdbench.data.tokens import load_tokenizer
from sdbench.plan import specs
from sdbench.plan.config import validate_config
from sdbench.plan.preflight import _hub_access, access_problems, unreachable_downloads

from real_files import (
    SPEC_BENCH,
    SPEC_BENCH_SHA256,
    cnn_dailymail,
    copy_lines,
    cut,
    sharegpt,
    thucnews,
    thucnews_rows,
    write_rows,
)

# a few merges on top of the 256 single bytes: enough to make tiktoken's BPE do real work
MERGES = [b"th", b"he", b"in", b"er", b"an", b" t", b"the", b" the", b"on", b"es"]


@pytest.fixture(scope="session")
def tiktoken_file(tmp_path_factory):
    """A local .tiktoken BPE file, built by the test (tiktoken downloads its encodings)."""
    path = tmp_path_factory.mktemp("tok") / "bytes-bpe.tiktoken"
    tokens = [bytes([i]) for i in range(256)] + MERGES
    path.write_text("".join(f"{base64.b64encode(t).decode()} {rank}\n"
                            for rank, t in enumerate(tokens)))
    return path


def fetch(tmp_path, source, spec):
    out = tmp_path / "out" / raw_path(source, spec)
    return fetch_source(source, spec, out, f"{out}.manifest.json"), out


def refused(tmp_path, source, path, **spec):
    """The fetch of a local file fails: its message, after checking that nothing that looks
    finished (or a temporary copy) was left."""
    with pytest.raises(SourceError) as info:
        fetch(tmp_path, source, {"kind": "path", "path": str(path), **spec})
    message = str(info.value)
    assert str(path) in message and ".tmp" not in message  # the user's file, not a copy
    left = list((tmp_path / "out").rglob("*")) if (tmp_path / "out").exists() else []
    assert [p for p in left if p.is_file()] == []
    return message


# ------------------------------------------------------------------------------ tokenizers

def test_local_tiktoken_file_counts_and_truncates(tiktoken_file):
    tok = load_tokenizer({"tiktoken_file": str(tiktoken_file)})
    text = "the theory of the thing"
    assert tok.count(text) < len(text.encode())  # merges were applied
    assert tok.decode(tok.encode(text)) == text
    cut_text = tok.truncate(text, 5)
    assert text.startswith(cut_text) and tok.count(cut_text) <= 5 < tok.count(text)
    chinese = "连接池类，用于包装连接"
    assert tok.count(chinese) == len(chinese.encode("utf-8"))  # byte-level for CJK
    assert tok.count(tok.truncate(chinese, 7)) <= 7
    assert tok.describe["sha256"]


def test_missing_tokenizer_inputs_are_clear(tmp_path):
    from sdbench.data.tokens import TokenizerError

    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer({"tiktoken_file": str(tmp_path / "none.tiktoken")})
    with pytest.raises(TokenizerError, match="model 'm'"):
        load_tokenizer({"model": "m"}, {"m": str(tmp_path / "missing")})


# ------------------------------------------------------------------------- raw sources

def test_fixtures_have_the_real_schemas(tmp_path):
    rows = fixtures.spec_bench_rows(rows_per_group=8, seed=0)
    assert len(rows) == 48 and {r["category"] for r in rows} <= set(SPEC_BENCH_GROUPS)
    assert all(len(r["turns"]) == 2 for r in rows
               if SPEC_BENCH_GROUPS[r["category"]] == "conversation")
    assert [sorted(r) for r in fixtures.cnn_dailymail_rows(3)] == [["article", "highlights",
                                                                     "id"]] * 3
    items = fixtures.sharegpt_items(4)
    assert all(t["from"] in ("human", "gpt") for i in items for t in i["conversations"])
    fixtures.write_fixture("thucnews", tmp_path / "THUCNews.zip", 6, 0)
    with zipfile.ZipFile(tmp_path / "THUCNews.zip") as archive:
        names = archive.namelist()
        first = archive.read(names[0]).decode("utf-8").splitlines()
    assert len(names) == 6 and names[0].startswith("THUCNews/")
    assert first[0] and any("\u4e00" <= ch <= "\u9fff" for ch in first[1])  # title, then body


def test_fixture_lengths_span_every_bucket():
    # articles of ~60 to ~2,400 words and news items of ~15 to ~3,000 characters, evenly on a
    # log scale: each length bucket gets whole texts whatever the row count
    words = sorted(len(r["article"].split()) for r in fixtures.cnn_dailymail_rows(40))
    assert words[0] < 120 and words[-1] > 2000
    assert all(b / a < 1.6 for a, b in zip(words, words[1:], strict=False))
    chars = sorted(len(i["body"]) for i in fixtures.thucnews_items(48))
    assert chars[0] < 60 and chars[-1] > 2500


def test_fetch_fixture_is_deterministic_and_manifested(tmp_path):
    for source in ("spec_bench", "cnn_dailymail", "sharegpt", "thucnews"):
        spec = {"kind": "fixture", "rows": 5, "seed": 3}
        out = tmp_path / raw_path(source, spec)
        first = fetch_source(source, spec, out, f"{out}.manifest.json")
        again = fetch_source(source, spec, out, f"{out}.manifest.json")
        assert first["sha256"] == again["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
        assert first["rows"] > 0 and first["skipped"] == {}


def test_the_shipped_spec_bench_file_is_the_pinned_one(tmp_path):
    assert hashlib.sha256(SPEC_BENCH.read_bytes()).hexdigest() == SPEC_BENCH_SHA256
    manifest, out = fetch(tmp_path, "spec_bench", {"kind": "path", "path": str(SPEC_BENCH),
                                                   "sha256": SPEC_BENCH_SHA256})
    assert manifest["rows"] == 480 and manifest["rows_read"] == 480 and out.name == \
        "question.jsonl"


def test_url_download_checks_the_pinned_hash(tmp_path):
    spec = {"kind": "url", "url": SPEC_BENCH.as_uri(), "sha256": SPEC_BENCH_SHA256}
    manifest, out = fetch(tmp_path, "spec_bench", spec)
    assert manifest["size_bytes"] > 0 and manifest["sha256"] == SPEC_BENCH_SHA256
    before = out.read_bytes()
    with pytest.raises(SourceError) as info:
        fetch(tmp_path, "spec_bench", {**spec, "sha256": "0" * 64})
    assert SPEC_BENCH_SHA256 in str(info.value) and "0" * 64 in str(info.value)
    assert out.read_bytes() == before  # the finished file is untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["question.jsonl",
                                                            "question.jsonl.manifest.json"]


def test_unreachable_source_names_url_path_and_remedy(tmp_path):
    url = (tmp_path / "not-there.jsonl").as_uri()
    with pytest.raises(SourceError) as info:
        fetch_source("spec_bench", {"kind": "url", "url": url, "sha256": "0" * 64},
                     tmp_path / "q.jsonl", tmp_path / "m.json")
    message = str(info.value)
    assert url in message and "kind: path" in message and "data/raw/spec_bench" in message
    assert not (tmp_path / "q.jsonl").exists()


def test_preflight_names_every_unreachable_download(demo_config_raw, tmp_path):
    raw = copy.deepcopy(demo_config_raw)
    raw["sources"]["spec_bench"] = {"kind": "url", "sha256": "0" * 64,
                                    "url": "https://sdbench-unreachable.invalid/q.jsonl"}
    raw["models"]["smollm2-135m"]["source"] = {"kind": "hf", "repo": "org/model",
                                               "revision": "main"}
    config = validate_config(raw)
    problems = unreachable_downloads(config, tmp_path, probe=lambda host, port: False)
    assert len(problems) == 2
    assert "https://sdbench-unreachable.invalid/q.jsonl" in problems[0]
    assert "data/raw/spec_bench/question.jsonl" in problems[0] and "kind: path" in problems[0]
    assert "org/model" in problems[1] and "resources/models/smollm2-135m" in problems[1]
    # a raw file already present needs no download; local kinds are never probed
    (tmp_path / "data/raw/spec_bench").mkdir(parents=True)
    (tmp_path / "data/raw/spec_bench/question.jsonl").write_text("{}\n")
    assert len(unreachable_downloads(config, tmp_path, probe=lambda h, p: False)) == 1
    assert unreachable_downloads(config, tmp_path, probe=lambda h, p: True) == []


def test_preflight_names_gated_models_and_models_the_token_cannot_read(demo_config_raw,
                                                                       tmp_path):
    repo = "meta-llama/Llama-3.1-8B-Instruct"
    raw = copy.deepcopy(demo_config_raw)
    raw["models"]["smollm2-135m"]["source"] = {"kind": "hf", "repo": repo, "revision": "main",
                                               "gated": True}
    config = validate_config(raw)
    problems = access_problems(config, tmp_path, token=None)
    assert len(problems) == 1 and problems[0].startswith("models.smollm2-135m: ")
    assert repo in problems[0] and "no Hugging Face token" in problems[0]
    assert f"https://huggingface.co/{repo}" in problems[0] and "HF_TOKEN" in problems[0]
    # with a token and no hub to ask there is nothing more to check
    assert access_problems(config, tmp_path, token="hf_x") == []
    # where the hub answers, the token's access is checked for every model still to download
    asked = []

    def no_access(repo_id, token):
        asked.append((repo_id, token))
        return "gated, and this account has not been granted access"

    problems = access_problems(config, tmp_path, token="hf_x", access=no_access,
                               hub_reachable=True)
    assert asked == [(repo, "hf_x")] and len(problems) == 1
    assert "not been granted access" in problems[0] and f"https://huggingface.co/{repo}" in \
        problems[0]
    # a model already downloaded needs neither a token nor a check
    (tmp_path / "resources/models/smollm2-135m").mkdir(parents=True)
    assert access_problems(config, tmp_path, token=None, access=no_access,
                           hub_reachable=True) == []
    assert len(asked) == 1
    # the flag changes no measurement: the model's identity (and so every cell id) ignores it
    ungated = copy.deepcopy(raw)
    del ungated["models"]["smollm2-135m"]["source"]["gated"]
    assert specs.model_identity(config, "smollm2-135m") == specs.model_identity(
        validate_config(ungated), "smollm2-135m")


def test_hub_access_reads_huggingface_hubs_errors(monkeypatch):
    import httpx
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    def check(error):
        def auth_check(repo_id, token=None):
            if error:
                response = httpx.Response(403, request=httpx.Request("GET", "https://hub"))
                raise error(f"{repo_id}: no", response=response)
        return auth_check

    monkeypatch.setattr(huggingface_hub, "auth_check", check(None))
    assert _hub_access("org/model", "hf_x") is None
    monkeypatch.setattr(huggingface_hub, "auth_check", check(GatedRepoError))
    assert "not been granted" in _hub_access("org/model", "hf_x")
    monkeypatch.setattr(huggingface_hub, "auth_check", check(RepositoryNotFoundError))
    assert "not found" in _hub_access("org/model", "hf_x")


# ----------------------------------------------------------------- the formats users have

@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_cnn_dailymail_in_every_tabular_format(tmp_path, fmt):
    path = cnn_dailymail(tmp_path / f"cnn.{fmt}", 20, fmt)
    manifest, out = fetch(tmp_path, "cnn_dailymail", {"kind": "path", "path": str(path)})
    assert manifest["rows"] == 20 and out.name == f"articles.{fmt}"
    rows, skipped = read_rows("cnn_dailymail", out)
    assert rows == fixtures.cnn_dailymail_rows(20) and skipped.total == 0


@pytest.mark.parametrize("fmt,text_field", [("jsonl", "content"), ("jsonl", "text"),
                                            ("parquet", "content"), ("json", "content"),
                                            ("zip", None)])
def test_thucnews_as_the_official_zip_or_a_mirror(tmp_path, fmt, text_field):
    path = thucnews(tmp_path / f"thucnews.{fmt}", 12, fmt, text_field=text_field)
    manifest, out = fetch(tmp_path, "thucnews", {"kind": "path", "path": str(path)})
    assert manifest["rows"] == 12
    rows, _ = read_rows("thucnews", out)
    items = fixtures.thucnews_items(12)
    assert sorted(r["text"] for r in rows) == sorted(i["body"] for i in items)  # Chinese intact
    assert sorted(r["title"] for r in rows) == sorted(i["title"] for i in items)


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_sharegpt_as_json_or_jsonl_skips_and_counts_bad_rows(tmp_path, fmt):
    items = fixtures.sharegpt_items(300)
    items[3]["conversations"] = "not a list"
    items[7]["conversations"][0] = {"from": "human", "value": None}
    path = write_rows(tmp_path / f"sharegpt.{fmt}", items, fmt)
    manifest, _ = fetch(tmp_path, "sharegpt", {"kind": "path", "path": str(path)})
    assert manifest["rows"] == 298
    row = "item" if fmt == "json" else "line"
    assert manifest["skipped"] == {
        "malformed conversations (a turn without string from/value)": {"rows": 1,
                                                                        "first": [f"{row} 8"]},
        "missing or mistyped field 'conversations'": {"rows": 1, "first": [f"{row} 4"]}}


def test_a_byte_order_mark_is_not_a_bad_row(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + SPEC_BENCH.read_bytes())
    rows, skipped = read_rows("spec_bench", path)
    assert len(rows) == 480 and skipped.total == 0


def test_a_json_array_where_json_lines_was_expected_reads_the_same(tmp_path):
    rows = json.loads("[" + ",".join(SPEC_BENCH.read_text().splitlines()) + "]")
    as_array = tmp_path / "question.jsonl"  # named .jsonl, holds a JSON array
    as_array.write_text(json.dumps(rows))
    assert read_rows("spec_bench", as_array)[0] == read_rows("spec_bench", SPEC_BENCH)[0]
    assert fetch(tmp_path, "spec_bench", {"kind": "path", "path": str(as_array)})[0][
        "rows"] == 480


# ----------------------------------------------------------------------------- bad input

def test_a_few_bad_rows_are_skipped_and_named(tmp_path):
    path = cnn_dailymail(tmp_path / "cnn.jsonl", 300)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[6] = b'{"article": "cut short\n'                                       # line 7
    lines[11] = json.dumps({"article": "x", "id": "no highlights"}).encode() + b"\n"  # line 12
    path.write_bytes(b"".join(lines))
    manifest, _ = fetch(tmp_path, "cnn_dailymail", {"kind": "path", "path": str(path)})
    assert manifest["rows"] == 298 and manifest["rows_read"] == 300
    summary = skipped_summary(manifest)
    assert "298 of 300 rows usable" in summary and str(path) in summary
    assert "malformed JSON: 1 (line 7)" in summary
    assert "missing or mistyped field 'highlights': 1 (line 12)" in summary


def test_more_bad_rows_than_max_skipped_share_refuse_the_file(tmp_path):
    path = cnn_dailymail(tmp_path / "cnn.jsonl", 100)
    lines = path.read_bytes().splitlines(keepends=True)
    for i in (2, 4, 6, 8, 10, 12, 14):
        lines[i] = b"{not json}\n"
    path.write_bytes(b"".join(lines))
    message = refused(tmp_path, "cnn_dailymail", path)
    assert "7 of 100 rows (7.0%) cannot be used (malformed JSON: 7 (line 3, line 5, line 7, " \
        "line 9, line 11, ...)), more than max_skipped_share 1.0% and max_skipped_rows 0" \
        in message
    assert "set sources.cnn_dailymail.max_skipped_rows: 7 to build from the rest" in message
    # an absolute allowance accepts it too
    manifest, _ = fetch(tmp_path, "cnn_dailymail", {"kind": "path", "path": str(path),
                                                    "max_skipped_rows": 7})
    assert manifest["rows"] == 93 and manifest["max_skipped_rows"] == 7
    # a larger allowance accepts it, the rows still counted
    manifest, _ = fetch(tmp_path, "cnn_dailymail", {"kind": "path", "path": str(path),
                                                    "max_skipped_share": 0.1})
    assert manifest["rows"] == 93 and manifest["skipped"]["malformed JSON"]["rows"] == 7


def test_a_jsonl_file_cut_mid_line_is_refused(tmp_path):
    path = cut(cnn_dailymail(tmp_path / "cnn.jsonl", 200), 0.6)
    message = refused(tmp_path, "cnn_dailymail", path)
    assert "ends in the middle of a row" in message and "truncated" in message
    lines = path.read_bytes().count(b"\n") + 1
    assert f"last line ({lines})" in message


def test_spec_bench_cut_in_half_is_refused(tmp_path):
    half = copy_lines(SPEC_BENCH, tmp_path / "q.jsonl", 240)  # cut at a line boundary
    message = refused(tmp_path, "spec_bench", half)
    assert "240 usable rows, expected 480" in message
    # cut mid-line: the cut is what is reported
    cut_file = tmp_path / "q2.jsonl"
    cut_file.write_bytes(SPEC_BENCH.read_bytes()[: len(SPEC_BENCH.read_bytes()) // 2])
    assert "ends in the middle of a row" in refused(tmp_path, "spec_bench", cut_file)


def test_spec_bench_groups_are_checked_and_a_custom_set_can_opt_out(tmp_path):
    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines()]
    for row in rows[:10]:  # ten MT-bench questions relabelled
        row["category"] = "translation"
    path = write_rows(tmp_path / "q.jsonl", rows, "jsonl")
    message = refused(tmp_path, "spec_bench", path)
    assert "80 questions per task group" in message and "'translation': 90" in message
    manifest, _ = fetch(tmp_path, "spec_bench", {"kind": "path", "path": str(path),
                                                 "expected_rows": None})
    assert manifest["rows"] == 480


def test_a_json_array_cut_short_or_followed_by_more_is_refused(tmp_path):
    path = cut(sharegpt(tmp_path / "sharegpt.json", 50), 0.7)
    message = refused(tmp_path, "sharegpt", path)
    assert "JSON array is cut off" in message and "truncated" in message
    joined = tmp_path / "joined.json"
    joined.write_text(json.dumps(fixtures.sharegpt_items(3)) + "\n" +
                      json.dumps(fixtures.sharegpt_items(3)))
    assert "more JSON after the end of its array (line 2" in refused(tmp_path, "sharegpt",
                                                                      joined)


def test_a_file_that_is_not_utf8_says_so(tmp_path):
    rows = thucnews_rows(20)
    gbk = tmp_path / "thucnews.jsonl"
    gbk.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\n"
                            for r in rows).encode("gb18030"))
    message = refused(tmp_path, "thucnews", gbk)
    assert "20 of 20 rows (100.0%) cannot be used" in message
    assert "not UTF-8: 20 (line 1, line 2" in message
    as_json = tmp_path / "sharegpt.json"
    as_json.write_bytes(json.dumps(fixtures.sharegpt_items(3), ensure_ascii=False)
                        .replace("from", "fröm").encode("latin-1"))
    assert "not UTF-8 text (first bad byte at offset" in refused(tmp_path, "sharegpt", as_json)


def test_a_file_of_another_schema_names_what_it_holds_and_what_is_needed(tmp_path):
    path = cnn_dailymail(tmp_path / "articles.jsonl", 30)
    message = refused(tmp_path, "spec_bench", path)
    assert "missing or mistyped field 'question_id': 30" in message
    assert "question_id (int), category (str), turns" in message
    assert "this file's first row has ['article', 'highlights', 'id']" in message


@pytest.mark.parametrize("name,content,expected", [
    ("empty.jsonl", b"", "no rows"),
    ("text.jsonl", b"id,article\n1,hello\n", "neither JSON Lines, a JSON array, Parquet"),
    ("broken.zip", b"PK\x03\x04 not really a zip", "not a readable zip archive"),
    ("broken.parquet", b"PAR1 not really parquet", "not a readable Parquet file"),
])
def test_unreadable_files_are_refused_by_cause(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content)
    source = "thucnews" if name.endswith(".zip") else "cnn_dailymail"
    assert expected in refused(tmp_path, source, path)


def test_a_zip_is_only_for_thucnews(tmp_path):
    path = thucnews(tmp_path / "THUCNews.zip", 5, "zip")
    with pytest.raises(RawError, match="a zip archive; cnn_dailymail is read from"):
        read_rows("cnn_dailymail", path)


def test_a_local_source_is_fingerprinted_by_size_and_mtime(tmp_path):
    import os

    path = copy_lines(SPEC_BENCH, tmp_path / "q.jsonl", 480)
    spec = {"kind": "path", "path": str(path)}
    assert local_files(spec) == [str(path)]
    assert local_files({"kind": "url", "url": path.as_uri(), "sha256": "0" * 64}) == [str(path)]
    assert local_files({"kind": "url", "url": "https://x/q.jsonl", "sha256": "0" * 64}) == []
    before = fingerprint(spec)
    copy_lines(SPEC_BENCH, path, 400)
    os.utime(path, ns=(before[0][2] - 10**9, before[0][2] - 10**9))  # an older mtime
    assert fingerprint(spec) != before
