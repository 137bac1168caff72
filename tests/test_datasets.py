"""Processed prompt sets as the original study built them (whole texts in [half the bucket, the
bucket), labelled joins, the study's output lengths, a shuffled mixed set without reuse,
Spec-Bench prefixes and context cap), today's rules as options, data cards, and every set of
config/config.yaml built from local real-format files."""

import copy
import json
import re

import pytest
import yaml

from sdbench import layout
from sdbench.data import fixtures
from sdbench.data.builders import BuildError, bucket_bounds, build_subset, request_bound, subsets_of
from sdbench.data.sources import SPEC_BENCH_GROUPS, fetch_source, raw_path
from sdbench.data.tokens import load_tokenizer
from sdbench.files import read_jsonl
from sdbench.plan import specs
from sdbench.plan.config import ConfigError, validate_config

from real_files import SPEC_BENCH, cnn_dailymail, sharegpt, thucnews, write_rows

# the sets of the real study whose buckets are the original study's (whole texts)
SEED_LIKE = ("cnn_dm_news_summary", "thucnews_polish", "mixed_length")


@pytest.fixture(scope="session")
def tok(demo_tokenizer_dir):
    """The demo target's own tokenizer (real token counts, English and Chinese)."""
    return load_tokenizer({"model": "demo"}, {"demo": str(demo_tokenizer_dir)})


@pytest.fixture
def config(demo_config_raw):
    """The demo config (fixture sources); the builders get the tokenizer directly."""
    return validate_config(copy.deepcopy(demo_config_raw))


def build(tmp_path, config, dataset, subset, tok, raw_file=None, **source):
    """Fetch the dataset's source (its fixture, or `raw_file`) and build one subset."""
    definition = specs.subset_definition(config, dataset, subset)
    name = definition["source"]
    spec = definition["source_spec"] if raw_file is None else {
        "kind": "path", "path": str(raw_file), **source}
    raw = tmp_path / raw_path(name, spec)
    manifest = fetch_source(name, spec, raw, f"{raw}.manifest.json")
    out = tmp_path / layout.processed_path(dataset, subset)
    card = build_subset(definition, raw, manifest, tok, out,
                        tmp_path / layout.card_path(dataset, subset))
    return read_jsonl(out), card


def articles_of(rows) -> dict[str, str]:
    return {r["id"]: r["article"].strip() for r in rows}


# ---------------------------------------------------------------------------- whole texts

def test_news_buckets_hold_whole_articles_below_the_bucket(tmp_path, config, tok):
    articles = articles_of(fixtures.cnn_dailymail_rows(40))
    definition = config["datasets"]["cnn_dm_news_summary"]
    instruction = definition["instruction"]
    for bucket in definition["buckets"]:
        records, card = build(tmp_path, config, "cnn_dm_news_summary", bucket["name"], tok)
        low, high = bucket["prompt_tokens"] // 2, bucket["prompt_tokens"]
        assert len(records) == definition["records_per_bucket"] == card["records"]
        for r in records:
            assert low <= r["prompt_tokens"] < high
            assert r["prompt_tokens"] == tok.count(r["prompt"])
            assert r["n_sources"] == 1 and not r["truncated"]
            # the prompt is the instruction around one whole article, nothing cut
            assert r["prompt"] == instruction.replace("{text}", articles[r["source_ids"][0]])
            assert r["output_tokens"] == bucket["output_tokens"]
        assert card["selection"]["prompt_tokens"] == [low, high]
        assert card["composition"]["share_cut"] == 0 == card["composition"]["share_joined"]
        assert card["composition"]["mean_texts_per_record"] == 1
        assert 0.8 < card["composition"]["source_text_share"] < 1
        assert sum(card["prompt_token_histogram"]["counts"]) == len(records)


def test_joined_prompts_label_each_whole_article_and_say_there_are_several(tmp_path, config,
                                                                           tok):
    articles = articles_of(fixtures.cnn_dailymail_rows(40))
    definition = config["datasets"]["cnn_dm_news_summary"]
    definition["buckets"].append({"name": "4k", "prompt_tokens": 4096, "output_tokens": 256,
                                  "texts_per_prompt": 2})
    records, card = build(tmp_path, config, "cnn_dm_news_summary", "4k", tok)
    head = definition["instruction_joined"].split("{text}")[0]
    assert "several" in head
    for r in records:
        assert 2048 <= r["prompt_tokens"] < 4096 and r["n_sources"] == 2
        first, second = (articles[i] for i in r["source_ids"])
        assert r["prompt"] == f"{head}**News 1**:\n{first}\n\n**News 2**:\n{second}"
    assert card["composition"]["share_joined"] == 1
    assert card["composition"]["mean_texts_per_record"] == 2
    assert card["selection"]["texts_per_prompt"] == [2]


def test_auto_joins_only_where_single_articles_cannot_fill_the_bucket(tmp_path, config, tok):
    source = cnn_dailymail(tmp_path / "cnn.jsonl", 200)
    buckets = config["datasets"]["cnn_dm_news_summary"]["buckets"]
    buckets.append({"name": "12k", "prompt_tokens": 12000, "output_tokens": 128})
    records, card = build(tmp_path, config, "cnn_dm_news_summary", "12k", tok, source)
    n = card["selection"]["texts_per_prompt"]
    assert len(n) == 1 and n[0] >= 2  # no single fixture article has 6,000 tokens
    assert all(6000 <= r["prompt_tokens"] < 12000 and r["n_sources"] == n[0] for r in records)
    # the fewest that fill it: one article fewer cannot
    buckets[-1]["texts_per_prompt"] = n[0] - 1
    with pytest.raises(BuildError):
        build(tmp_path, config, "cnn_dm_news_summary", "12k", tok, source)
    # where single articles fit, auto takes them: the demo's 1k bucket
    records, card = build(tmp_path, config, "cnn_dm_news_summary", "1k", tok)
    assert card["selection"]["texts_per_prompt"] == [1]


def test_cut_packing_keeps_the_earlier_rule(tmp_path, config, tok):
    definition = config["datasets"]["cnn_dm_news_summary"]
    definition["packing"] = "cut"
    for bucket in definition["buckets"]:
        records, card = build(tmp_path, config, "cnn_dm_news_summary", bucket["name"], tok)
        lo, hi = bucket["prompt_tokens"] * 0.9, bucket["prompt_tokens"] * 1.1
        assert all(lo <= r["prompt_tokens"] <= hi for r in records)
        assert card["selection"]["packing"] == "cut"
    assert card["composition"]["share_cut"] > 0  # this rule cuts articles to length
    assert bucket_bounds(definition, {"prompt_tokens": 1000}) == (900, 1101)
    definition["buckets"][0]["texts_per_prompt"] = 2
    with pytest.raises(ConfigError, match="only buckets of packing: whole"):
        validate_config(config)


def test_an_unfillable_bucket_says_what_the_source_offered(tmp_path, config, tok):
    config["datasets"]["cnn_dm_news_summary"]["records_per_bucket"] = 500
    with pytest.raises(BuildError) as info:
        build(tmp_path, config, "cnn_dm_news_summary", "1k", tok)
    message = str(info.value)
    assert "'cnn_dm_news_summary'" in message and "subset '1k'" in message
    assert "needed 500 prompts of [512, 1024) tokens, found" in message
    assert re.search(r"texts have p10/p50/p90 \d+/\d+/\d+ tokens", message)
    assert not (tmp_path / "data/processed/cnn_dm_news_summary/1k.jsonl").exists()
    config["datasets"]["cnn_dm_news_summary"]["allow_partial"] = True
    records, _ = build(tmp_path, config, "cnn_dm_news_summary", "1k", tok)
    assert 0 < len(records) < 500


# --------------------------------------------------------------------------------- mixed set

def test_mixed_set_is_shuffled_with_its_seed_and_uses_no_article_twice(tmp_path, config, tok):
    records, card = build(tmp_path, config, "mixed_length", "all", tok)
    buckets = [b["name"] for b in config["datasets"]["mixed_length"]["buckets"]]
    assert sorted(r["bucket"] for r in records) == sorted(b for b in buckets for _ in range(2))
    ids = [i for r in records for i in r["source_ids"]]
    assert len(ids) == len(set(ids)) and card["selection"]["texts_reused"] == 0
    assert card["selection"]["order"] == "shuffled" and card["seed"] == 0
    assert card["ordered"] is True  # sent in the file's (shuffled) order
    orders = {tuple(r["bucket"] for r in records)}
    for seed in (1, 2, 3):
        config["datasets"]["mixed_length"]["seed"] = seed
        orders.add(tuple(r["bucket"] for r in build(tmp_path, config, "mixed_length", "all",
                                                    tok)[0]))
    assert len(orders) > 1  # the seed decides the order (bucket order at most one of them)
    config["datasets"]["mixed_length"].update(order="buckets", seed=0)
    records, _ = build(tmp_path, config, "mixed_length", "all", tok)
    assert [r["bucket"] for r in records] == [b for b in buckets for _ in range(2)]


# ------------------------------------------------------------------ highlights, THUCNews

def test_highlights_prompts_count_the_instruction_and_force_the_output(tmp_path, config, tok):
    definition = config["datasets"]["cnn_dm_highlights_news"]
    assert 30 <= tok.count(definition["instruction"].replace("{text}", "")) <= 40
    low, high = definition["prompt_tokens_range"]
    for bucket in definition["buckets"]:
        records, card = build(tmp_path, config, "cnn_dm_highlights_news", bucket["name"], tok)
        assert len(records) == 4
        for r in records:
            assert r["output_tokens"] == r["min_tokens"] == bucket["output_tokens"]
            assert low <= r["prompt_tokens"] <= high
        assert "forced" in card["output_rule"]
    definition["prompt_tokens_range"] = [10, 20]  # shorter than the instruction alone
    with pytest.raises(BuildError) as info:
        build(tmp_path, config, "cnn_dm_highlights_news", "out64", tok)
    assert re.search(r"instruction of \d+ tokens \+ highlights\) had p10/p50/p90 \d+/\d+/\d+",
                     str(info.value))
    assert "prompt_tokens_range" in str(info.value) and "tolerance" not in str(info.value)


@pytest.mark.parametrize("fmt", ["zip", "jsonl"])
def test_thucnews_polish_uses_whole_items_with_the_instruction_counted(tmp_path, config, tok,
                                                                      fmt):
    items = {f"{i['title']}\n{i['body']}" for i in fixtures.thucnews_items(48)}
    raw = None if fmt == "zip" else thucnews(tmp_path / "t.jsonl", 48, "jsonl")
    instruction = config["datasets"]["thucnews_polish"]["instruction"]
    for bucket in config["datasets"]["thucnews_polish"]["buckets"]:
        records, card = build(tmp_path, config, "thucnews_polish", bucket["name"], tok, raw)
        low, high = bucket["prompt_tokens"] // 2, bucket["prompt_tokens"]
        for r in records:
            assert low <= r["prompt_tokens"] < high  # the instruction's tokens included
            text = r["prompt"].removeprefix(instruction.replace("{text}", ""))
            assert text in items  # a whole item, title and body, Chinese intact
            assert r["output_tokens"] == round(r["text_tokens"])
        assert card["composition"]["share_cut"] == 0 and len(records) == 4


# ------------------------------------------------------------------------ Spec-Bench, ShareGPT

def test_spec_bench_groups_from_the_real_file(tmp_path, config, tok):
    config["datasets"]["spec_bench"].update(per_task=None, max_prompt_tokens=None,
                                            max_output_tokens=64)
    counts = {}
    for subset in subsets_of(config["datasets"]["spec_bench"]):
        records, card = build(tmp_path, config, "spec_bench", subset, tok, SPEC_BENCH)
        counts[subset] = card["records"]
        assert all(r["output_tokens"] == 64 for r in records)
        assert all(subset in ("all", r["task"]) for r in records)
    assert counts == {"conversation": 80, "translation": 80, "summarization": 80, "qa": 80,
                      "math_reasoning": 80, "rag": 80, "all": 480}
    first = json.loads(SPEC_BENCH.read_text().splitlines()[0])
    conversation = read_jsonl(tmp_path / "data/processed/spec_bench/conversation.jsonl")
    assert conversation[0]["prompt"] == first["turns"][0]  # first turn only


def test_spec_bench_prefixes_and_context_cap(tmp_path, config, tok):
    definition = config["datasets"]["spec_bench"]
    definition.update(per_task=None, max_prompt_tokens=1000, max_output_tokens=64, task_prefixes={
        "summarization": "Summarize: ", "qa": "Answer the question: "})
    records, card = build(tmp_path, config, "spec_bench", "all", tok, SPEC_BENCH)
    by_task = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r)
        assert r["prompt_tokens"] <= 1000 == definition["max_prompt_tokens"]
    # the file's own prefix is kept, not doubled; a missing one is added
    assert all(r["prompt"].startswith("Summarize: ") and not r["prompt"].startswith(
        "Summarize: Summarize") and not r["prefix_added"] for r in by_task["summarization"])
    assert all(r["prompt"].startswith("Answer the question: ") and r["prefix_added"]
               for r in by_task["qa"])
    cut_records = [r for r in records if r["truncated"]]
    assert cut_records and all(r["task"] == "summarization" for r in cut_records)
    assert all(r["prompt"].rstrip()[-1] in ".!?\"'”’)" for r in cut_records)  # at a sentence
    assert card["selection"]["prefix_added"] == 80 and card["selection"]["max_prompt_tokens"] \
        == 1000
    assert card["composition"]["share_cut"] == len(cut_records) / 480
    assert request_bound(specs.subset_definition(config, "spec_bench", "all")) == 1000 + 64


def test_spec_bench_per_task_takes_the_first_of_each_group_in_turn(tmp_path, config, tok):
    config["datasets"]["spec_bench"]["per_task"] = 2
    records, card = build(tmp_path, config, "spec_bench", "all", tok, SPEC_BENCH)
    groups = ["conversation", "translation", "summarization", "qa", "math_reasoning", "rag"]
    assert [r["task"] for r in records] == groups * 2  # one of each group, then the next
    firsts = {}
    for row in read_jsonl(SPEC_BENCH):
        firsts.setdefault(SPEC_BENCH_GROUPS[row["category"]], []).append(row["question_id"])
    for task in groups:  # the first two questions of the group, in file order
        assert [r["question_id"] for r in records if r["task"] == task] == firsts[task][:2]
    # sent in file order, so the reports can map each request to its task group
    assert card["ordered"] and card["selection"]["per_task"] == 2
    config["workloads"]["spec_bench"]["num_prompts"] = 12
    assert specs.workload_spec(config, "spec_bench")["shuffle"] is False
    config["datasets"]["spec_bench"]["per_task"] = None
    assert specs.workload_spec(config, "spec_bench")["shuffle"] is True


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_sharegpt_samples_filters_and_output_caps(tmp_path, config, tok, fmt):
    path = sharegpt(tmp_path / f"s.{fmt}", 48, fmt)
    records, card = build(tmp_path, config, "sharegpt", "all", tok, path)
    assert len(records) == 16
    limits = config["datasets"]["sharegpt"]["filters"]
    for r in records:
        assert r["output_tokens"] == r["reference_tokens"]
        assert r["prompt_tokens"] <= limits["max_prompt_tokens"]
        assert r["prompt_tokens"] + r["output_tokens"] <= limits["max_total_tokens"]
    assert card["output_rule"].startswith("max_tokens = token length of the reference")


def test_sharegpt_filters_default_when_not_written(tmp_path, demo_config_raw, tok):
    raw = copy.deepcopy(demo_config_raw)
    del raw["datasets"]["sharegpt"]["filters"]
    config = validate_config(raw)
    assert config["datasets"]["sharegpt"]["filters"] == {
        "min_tokens": 4, "max_prompt_tokens": 1024, "max_total_tokens": 2048}
    records, _ = build(tmp_path, config, "sharegpt", "all", tok)
    assert len(records) == 16
    raw["datasets"]["sharegpt"]["filters"] = {"max_prompt_tokens": 512}
    assert validate_config(raw)["datasets"]["sharegpt"]["filters"] == {
        "min_tokens": 4, "max_prompt_tokens": 512, "max_total_tokens": 2048}


def test_builds_are_deterministic(tmp_path, config, tok):
    def snapshot():
        build(tmp_path, config, "cnn_dm_news_summary", "0.5k", tok)
        build(tmp_path, config, "sharegpt", "all", tok)
        build(tmp_path, config, "mixed_length", "all", tok)
        return {p: p.read_bytes() for p in (tmp_path / "data/processed").rglob("*.jsonl")}

    first = snapshot()
    assert snapshot() == first
    config["datasets"]["sharegpt"]["seed"] = 1  # another seed, another sample
    build(tmp_path, config, "sharegpt", "all", tok)
    path = tmp_path / "data/processed/sharegpt/all.jsonl"
    assert path.read_bytes() != first[path]


def test_thucnews_hub_mirror_goes_through_datasets(tmp_path, config, tok):
    folder = tmp_path / "mirror"
    write_rows(folder / "test.jsonl", [{"text": i["body"], "label": 3}
                                       for i in fixtures.thucnews_items(48)], "jsonl")
    spec = {"kind": "hf", "dataset": str(folder), "split": "test", "revision": "main"}
    out = tmp_path / raw_path("thucnews", spec)
    assert out.name == "thucnews.jsonl"
    manifest = fetch_source("thucnews", spec, out, f"{out}.manifest.json")
    assert manifest["rows"] == 48 and manifest["origin"]["rows"] == 48
    definition = specs.subset_definition(config, "thucnews_polish", "0.25k")
    card = build_subset(definition, out, manifest, tok, tmp_path / "p.jsonl",
                        tmp_path / "p.card.json")
    assert card["records"] == 4


# -------------------------------------------------------------- the real study's every set

def real_config(repo, tmp_path, demo_tokenizer_dir) -> dict:
    """config/config.yaml with its sources as local files in their real formats (CNN-DM as
    Parquet, THUCNews as title/content JSONL, ShareGPT as JSON, Spec-Bench's own file) and
    the demo target's tokenizer."""
    raw = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    raw["sources"] = {
        "spec_bench": {"kind": "path", "path": str(SPEC_BENCH)},
        "cnn_dailymail": {"kind": "path", "path": str(
            cnn_dailymail(tmp_path / "cnn_test.parquet", 1600, "parquet", seed=1))},
        "thucnews": {"kind": "path", "path": str(
            thucnews(tmp_path / "thucnews.jsonl", 800, "jsonl", seed=1))},
        "sharegpt": {"kind": "path", "path": str(sharegpt(tmp_path / "sg.json", 1200,
                                                           seed=1))},
    }
    raw["models"]["demo-tokenizer"] = {"source": {"kind": "path",
                                                  "path": str(demo_tokenizer_dir)}}
    raw["tokenizer"] = {"model": "demo-tokenizer"}
    return validate_config(raw)


def test_every_set_of_the_real_study_builds_from_local_files(repo, tmp_path, tok,
                                                            demo_tokenizer_dir):
    config = real_config(repo, tmp_path, demo_tokenizer_dir)
    cards = {}
    for name, dataset in config["datasets"].items():
        for subset in subsets_of(dataset):
            definition = specs.subset_definition(config, name, subset)
            spec = config["sources"][definition["source"]]
            raw = tmp_path / raw_path(definition["source"], spec)
            if not raw.exists():
                fetch_source(definition["source"], spec, raw, f"{raw}.manifest.json")
            manifest = json.loads((tmp_path / f"{raw}.manifest.json").read_text())
            out = tmp_path / layout.processed_path(name, subset)
            card = build_subset(definition, raw, manifest, tok, out,
                                tmp_path / layout.card_path(name, subset))
            records = read_jsonl(out)
            cards[(name, subset)] = card
            wanted = {"spec_bench": 480 if subset == "all" else 80, "sharegpt": 1024,
                      "mixed_length": 120}.get(name, 64)
            assert card["records"] == len(records) == wanted, (name, subset)
            bound = request_bound(definition)
            assert bound is None or all(r["prompt_tokens"] + r["output_tokens"] <= bound
                                        for r in records), (name, subset)
    assert len(cards) == 7 + 1 + 6 + 6 + 6 + 1
    for (name, subset), card in cards.items():
        if name in SEED_LIKE:  # the original study's buckets: whole texts, none cut
            assert card["composition"]["share_cut"] < 0.1, (name, subset)
    news = {s: cards[("cnn_dm_news_summary", s)] for s in ("0.25k", "2k", "4k", "8k")}
    assert news["0.25k"]["output_tokens"]["max"] == 64 and news["8k"]["output_tokens"][
        "max"] == 512
    assert news["2k"]["composition"]["share_joined"] == 0
    assert news["4k"]["composition"]["mean_texts_per_record"] == 2
    assert news["8k"]["composition"]["mean_texts_per_record"] == 4
    mixed = cards[("mixed_length", "all")]
    assert mixed["selection"]["texts_reused"] == 0 and mixed["selection"]["order"] == "shuffled"
    # Spec-Bench capped for the 2,048-token Vicuna target; ShareGPT within its filters
    assert cards[("spec_bench", "all")]["prompt_tokens"]["max"] <= 1280
    assert cards[("sharegpt", "all")]["prompt_tokens"]["max"] <= 1024
