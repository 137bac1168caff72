"""Raw sources, fixtures, tokenizers and every processed prompt set."""

import base64
import copy
import hashlib
import json
import zipfile

import pytest

from sdbench import grid
from sdbench.config import validate_config
from sdbench.data import fixtures
from sdbench.data.builders import SPEC_BENCH_GROUPS, BuildError, build_subset, subsets_of
from sdbench.data.raw import read_rows
from sdbench.data.sources import SourceError, fetch_source, raw_path
from sdbench.data.tokens import load_tokenizer
from sdbench.files import read_jsonl
from sdbench.preflight import unreachable_downloads

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


@pytest.fixture(scope="session")
def tok(tiktoken_file):
    return load_tokenizer({"tiktoken_file": str(tiktoken_file)})


@pytest.fixture
def config(demo_config_raw, tiktoken_file):
    """The demo config with a model-agnostic tokenizer (no model needed)."""
    raw = copy.deepcopy(demo_config_raw)
    raw["tokenizer"] = {"tiktoken_file": str(tiktoken_file)}
    return validate_config(raw)


def build(tmp_path, config, dataset, subset, tok, raw_file=None):
    """Fetch the dataset's source (fixture, or `raw_file`) and build one subset."""
    definition = grid.subset_definition(config, dataset, subset)
    source = definition["source"]
    spec = definition["source_spec"] if raw_file is None else {"kind": "path",
                                                               "path": str(raw_file)}
    raw = tmp_path / raw_path(source, spec)
    manifest = fetch_source(source, spec, raw, f"{raw}.manifest.json")
    out = tmp_path / grid.processed_path(dataset, subset)
    card = build_subset(definition, raw, manifest, tok, out, tmp_path / grid.card_path(dataset,
                                                                                        subset))
    return read_jsonl(out), card


# ------------------------------------------------------------------------------ tokenizers

def test_local_tiktoken_file_counts_and_truncates(tok):
    text = "the theory of the thing"
    assert tok.count(text) < len(text.encode())  # merges were applied
    assert tok.decode(tok.encode(text)) == text
    cut = tok.truncate(text, 5)
    assert text.startswith(cut) and tok.count(cut) <= 5 < tok.count(text)
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


def test_fetch_fixture_is_deterministic_and_manifested(tmp_path):
    for source in ("spec_bench", "cnn_dailymail", "sharegpt", "thucnews"):
        spec = {"kind": "fixture", "rows": 5, "seed": 3}
        out = tmp_path / raw_path(source, spec)
        first = fetch_source(source, spec, out, f"{out}.manifest.json")
        again = fetch_source(source, spec, out, f"{out}.manifest.json")
        assert first["sha256"] == again["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
        assert first["rows"] > 0 and first["skipped"] == {}


def test_url_download_checks_the_pinned_hash(tmp_path):
    upstream = tmp_path / "upstream.jsonl"
    fixtures.write_fixture("spec_bench", upstream, 2, 0)
    digest = hashlib.sha256(upstream.read_bytes()).hexdigest()
    out = tmp_path / "raw" / "question.jsonl"
    spec = {"kind": "url", "url": upstream.as_uri(), "sha256": digest}
    assert fetch_source("spec_bench", spec, out, tmp_path / "raw" / "m.json")["size_bytes"] > 0
    before = out.read_bytes()
    with pytest.raises(SourceError) as info:
        fetch_source("spec_bench", {**spec, "sha256": "0" * 64}, out, tmp_path / "raw" / "m.json")
    assert digest in str(info.value) and "0" * 64 in str(info.value)
    assert out.read_bytes() == before  # the finished file is untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.json", "question.jsonl"]


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


def test_corrupted_rows_are_skipped_and_counted(tmp_path, config, tok):
    corrupted = tmp_path / "corrupt.jsonl"
    rows = fixtures.cnn_dailymail_rows(rows=30)
    lines = [json.dumps(r).encode() for r in rows]
    lines[1] = b'{"article": "cut short'                                # malformed JSON
    lines[2] = json.dumps({"article": "x", "id": "no highlights"}).encode()  # missing field
    lines[3] = json.dumps({**rows[3], "article": "  "}).encode()        # empty text
    lines[4] = json.dumps(rows[4]).encode().replace(b"a", b"\xff", 1)   # not UTF-8
    corrupted.write_bytes(b"\n".join(lines) + b"\n")
    usable, skipped = read_rows("cnn_dailymail", corrupted)
    assert len(usable) == 26
    assert skipped == {"malformed JSON": 1, "missing or mistyped field 'highlights'": 1,
                       "empty text": 1, "not UTF-8": 1}
    records, card = build(tmp_path, config, "cnn_dm_news_summary", "0.25k", tok,
                          raw_file=corrupted)
    assert card["skipped"]["not UTF-8"] == 1 and card["skipped"]["malformed JSON"] == 1
    assert len(records) == 4


# --------------------------------------------------------------------------- prompt sets

def test_spec_bench_task_groups(tmp_path, config, tok):
    counts = {}
    for subset in subsets_of(config["datasets"]["spec_bench"]):
        records, card = build(tmp_path, config, "spec_bench", subset, tok)
        counts[subset] = card["records"]
        assert all(r["output_tokens"] == 64 for r in records)
        assert all(r["prompt_tokens"] == tok.count(r["prompt"]) for r in records)
        assert all(subset in ("all", r["task"]) for r in records)
    assert counts == {"conversation": 8, "translation": 8, "summarization": 8, "qa": 8,
                      "math_reasoning": 8, "rag": 8, "all": 48}
    first = fixtures.spec_bench_rows(8)[0]
    conversation = read_jsonl(tmp_path / "data/processed/spec_bench/conversation.jsonl")
    assert conversation[0]["prompt"] == first["turns"][0]  # first turn only


def test_sharegpt_samples_filters_and_output_caps(tmp_path, config, tok):
    records, card = build(tmp_path, config, "sharegpt", "all", tok)
    assert len(records) == 16
    limits = config["datasets"]["sharegpt"]["filters"]
    for r in records:
        assert r["output_tokens"] == r["reference_tokens"]
        assert r["prompt_tokens"] <= limits["max_prompt_tokens"]
        assert r["prompt_tokens"] + r["output_tokens"] <= limits["max_total_tokens"]
    assert card["output_rule"].startswith("max_tokens = token length of the reference")
    # broken conversations are skipped and counted
    items = fixtures.sharegpt_items(40)
    items[0]["conversations"] = "not a list"
    items[1]["conversations"][0]["value"] = ""
    items[2]["conversations"] = [{"from": "gpt", "value": "no question"}]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(items))
    config["datasets"]["sharegpt"]["samples"] = 37
    config["datasets"]["sharegpt"]["filters"].update(max_prompt_tokens=10**6,
                                                     max_total_tokens=10**6)
    records, card = build(tmp_path, config, "sharegpt", "all", tok, raw_file=broken)
    assert len(records) == 37
    assert card["skipped"] == {"empty turn": 1, "missing or malformed conversations": 1,
                               "no human turn answered by the assistant": 1}


@pytest.mark.parametrize("dataset", ["cnn_dm_news_summary", "thucnews_polish"])
def test_prompt_length_buckets(tmp_path, config, tok, dataset):
    definition = config["datasets"][dataset]
    tolerance = definition["tolerance"]
    for bucket in definition["buckets"]:
        records, card = build(tmp_path, config, dataset, bucket["name"], tok)
        lo, hi = (bucket["prompt_tokens"] * (1 - tolerance), bucket["prompt_tokens"] *
                  (1 + tolerance))
        assert len(records) == definition["records_per_bucket"] == card["records"]
        for r in records:
            assert lo <= r["prompt_tokens"] <= hi
            assert r["prompt_tokens"] == tok.count(r["prompt"]) and r["bucket"] == bucket["name"]
            assert r["n_sources"] == len(r["source_ids"]) >= 1
            if dataset == "thucnews_polish":   # output about as long as the text to polish
                assert r["output_tokens"] == round(definition["output_ratio"] * r["text_tokens"])
                assert r["prompt"].startswith("请润色")
            else:
                assert r["output_tokens"] == bucket["output_tokens"]
        assert card["prompt_tokens"]["min"] >= lo and card["prompt_tokens"]["max"] <= hi
        assert sum(card["prompt_token_histogram"]["counts"]) == len(records)


def test_short_texts_are_joined_to_fill_a_bucket(tmp_path, config, tok):
    config["datasets"]["cnn_dm_news_summary"]["buckets"].append(
        {"name": "12k", "prompt_tokens": 12000, "output_tokens": 128})
    records, card = build(tmp_path, config, "cnn_dm_news_summary", "12k", tok)
    assert all(r["n_sources"] >= 2 for r in records)  # each fixture article is shorter
    assert card["joined_sources"]["min"] >= 2


def test_highlights_news_forces_output_length(tmp_path, config, tok):
    # the byte-level test tokenizer counts ~4x more tokens than a real one
    config["datasets"]["cnn_dm_highlights_news"]["prompt_tokens_range"] = [150, 400]
    low, high = 150, 400
    for bucket in config["datasets"]["cnn_dm_highlights_news"]["buckets"]:
        records, card = build(tmp_path, config, "cnn_dm_highlights_news", bucket["name"], tok)
        assert len(records) == 4
        for r in records:
            assert r["output_tokens"] == r["min_tokens"] == bucket["output_tokens"]
            assert low <= r["prompt_tokens"] <= high
        assert "forced" in card["output_rule"]


def test_mixed_length_set_is_ordered_by_bucket(tmp_path, config, tok):
    records, card = build(tmp_path, config, "mixed_length", "all", tok)
    buckets = [b["name"] for b in config["datasets"]["mixed_length"]["buckets"]]
    assert [r["bucket"] for r in records] == [b for b in buckets for _ in range(2)]
    assert card["ordered"] is True
    assert grid.workload_spec({**config, "workloads": {"w": {
        "dataset": "mixed_length", "subset": "all", "num_prompts": 6}}}, "w")["shuffle"] is False


def test_builds_are_deterministic(tmp_path, config, tok):
    def snapshot():
        build(tmp_path, config, "cnn_dm_news_summary", "0.5k", tok)
        build(tmp_path, config, "sharegpt", "all", tok)
        return {p: p.read_bytes() for p in (tmp_path / "data/processed").rglob("*.json*")}

    first = snapshot()
    assert snapshot() == first
    config["datasets"]["sharegpt"]["seed"] = 1  # another seed, another sample
    build(tmp_path, config, "sharegpt", "all", tok)
    path = tmp_path / "data/processed/sharegpt/all.jsonl"
    assert path.read_bytes() != first[path]


def test_unfillable_bucket_names_bucket_needed_and_found(tmp_path, config, tok):
    config["datasets"]["cnn_dm_news_summary"]["records_per_bucket"] = 500
    with pytest.raises(BuildError) as info:
        build(tmp_path, config, "cnn_dm_news_summary", "1k", tok)
    message = str(info.value)
    assert "'cnn_dm_news_summary'" in message and "subset '1k'" in message
    assert "needed 500" in message and "found" in message
    assert not (tmp_path / "data/processed/cnn_dm_news_summary/1k.jsonl").exists()
    config["datasets"]["cnn_dm_news_summary"]["allow_partial"] = True
    records, _ = build(tmp_path, config, "cnn_dm_news_summary", "1k", tok)
    assert 0 < len(records) < 500


def test_thucnews_hub_mirror_goes_through_datasets(tmp_path, config, tok):
    folder = tmp_path / "mirror"
    folder.mkdir()
    items = fixtures.thucnews_items(12)
    (folder / "test.jsonl").write_text("".join(
        json.dumps({"text": i["body"], "label": 3}, ensure_ascii=False) + "\n" for i in items))
    spec = {"kind": "hf", "dataset": str(folder), "split": "test", "revision": "main"}
    out = tmp_path / raw_path("thucnews", spec)
    assert out.name == "thucnews.jsonl"
    manifest = fetch_source("thucnews", spec, out, f"{out}.manifest.json")
    assert manifest["rows"] == 12
    definition = grid.subset_definition(config, "thucnews_polish", "0.125k")
    records_path = tmp_path / "p.jsonl"
    card = build_subset(definition, out, manifest, tok, records_path, tmp_path / "p.card.json")
    assert card["records"] == 4
