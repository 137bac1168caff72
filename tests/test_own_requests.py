"""A user's own requests: a source of any name in the formats people have (OpenAI chat,
ShareGPT, a prompt per row or per line), named or told from the file; conversations sent as the
service would send them (system prompt and earlier turns kept); the output-length policy on
every request and on the card; the checks before any job (`make plan` and a dry run), one line
naming file, key and row; and the worked example's plan and dry run."""

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sdbench.data.builders import build_subset
from sdbench.data.raw import RawError, detect_format, read_rows
from sdbench.data.sources import fetch_source, raw_path
from sdbench.data.tokens import load_tokenizer
from sdbench.measure import loadgen
from sdbench.plan import specs
from sdbench.plan.config import ConfigError, validate_config

from workflow_helpers import REPO, snakemake, write_config

EXAMPLE = REPO / "config" / "examples" / "service.yaml"
CHATS = REPO / "data" / "examples" / "support_chats.jsonl"


def example(tmp_path, chats=CHATS, chain=False, **changes) -> dict:
    """The worked example with its request file at `chats`, `changes` applied (dotted keys),
    its chained design forced (`chain`; the example's own `auto` plans the study twice)."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["sources"]["support_chats"]["path"] = str(chats)
    raw["adaptive"]["chain"] = chain
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = value
    return raw


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tok(demo_tokenizer_dir):
    return load_tokenizer({"model": "demo"}, {"demo": str(demo_tokenizer_dir)})


def build(tmp_path, tok, raw: dict, source: str = "support_chats", dataset: str = "support"):
    """Fetch the example's source and build its set as the workflow's jobs do."""
    config = validate_config(raw)
    spec = config["sources"][source]
    out = tmp_path / raw_path(source, spec)
    manifest = fetch_source(source, spec, out, f"{out}.manifest.json")
    definition = specs.subset_definition(config, dataset, "all")
    card = build_subset(definition, out, manifest, tok, tmp_path / "set.jsonl",
                        tmp_path / "set.card.json")
    return rows_of(tmp_path / "set.jsonl"), card, manifest


def test_openai_chat_rows_keep_the_system_prompt_and_the_earlier_turn():
    rows, skipped = read_rows("openai_chat", CHATS)
    assert len(rows) == 64 and skipped.total == 0
    two_turn = [r for r in rows if sum(m["role"] == "user" for m in r["messages"]) == 2]
    assert len(two_turn) == 32
    first = two_turn[0]
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant", "user"]
    # the last assistant message is the reference reply, not part of the request
    raw = rows_of(CHATS)[rows.index(first)]
    assert first["reference"] == raw["messages"][-1]["content"]
    assert first["max_tokens"] == raw["max_tokens"]


@pytest.mark.parametrize("content,expected", [
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', "openai_chat"),
    ('[{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}]', "sharegpt"),
    ('{"prompt": "hi", "output_tokens": 8}\n', "prompts"),
    ("What is a GPU?\nWhy is the sky blue?\n", "prompts"),
    ('{not json}\n{"prompt": "hi"}\n', "prompts"),
])
def test_the_format_is_told_from_the_first_row(tmp_path, content, expected):
    path = tmp_path / "mine.jsonl"
    path.write_text(content)
    assert detect_format(path) == expected


def test_an_unrecognised_format_names_the_fields_it_has_and_the_formats_known(tmp_path):
    path = write_rows(tmp_path / "mine.jsonl", [{"question": "hi", "answer": "ho"}])
    with pytest.raises(RawError) as error:
        detect_format(path, "mine.jsonl")
    message = str(error.value)
    assert "mine.jsonl: its format is not recognised" in message
    assert "['answer', 'question']" in message
    for name in ("openai_chat", "sharegpt", "prompts"):
        assert name in message


def test_a_plain_text_file_is_one_prompt_per_line(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("What is a GPU?\n\nWhy is the sky blue?\n")
    rows, _ = read_rows("prompts", path)
    assert [r["messages"] for r in rows] == [
        [{"role": "user", "content": "What is a GPU?"}],
        [{"role": "user", "content": "Why is the sky blue?"}]]
    assert [r["id"] for r in rows] == ["line 1", "line 3"]


def test_the_example_builds_a_set_that_sends_each_conversation_whole(tmp_path, tok):
    records, card, manifest = build(tmp_path, tok, example(tmp_path))
    assert manifest["format"] == "openai_chat" and manifest["rows"] == 64
    assert len(records) == 64
    source = rows_of(CHATS)
    for record, row in zip(records, source, strict=True):
        # what is sent: every message but the reference reply, the system prompt first
        assert record["messages"] == row["messages"][:-1]
        assert record["messages"][0]["role"] == "system"
        assert record["output_tokens"] == row["max_tokens"]
        assert record["output_from"] == "request"
        assert record["prompt_tokens"] == tok.count(record["prompt"])
        assert row["messages"][0]["content"] in record["prompt"]
    assert sum(r["turns"] == 2 for r in records) == 32
    assert card["selection"]["with_system_prompt"] == 64
    assert card["selection"]["multi_turn"] == 32
    assert card["selection"]["format"] == "openai_chat"
    assert card["output_rule"].startswith("max_tokens = the request's own")
    assert "may stop at its end-of-sequence token" in card["output_rule"]


def test_the_output_length_policies(tmp_path, tok):
    by_reference, card, _ = build(tmp_path / "a", tok, example(
        tmp_path, **{"datasets.support.output_tokens": "reference",
                     "datasets.support.max_output_tokens": 40}))
    references = [r["messages"][-1]["content"] for r in rows_of(CHATS)]
    for record, reference in zip(by_reference, references, strict=True):
        assert record["output_tokens"] == min(tok.count(reference), 40)
        assert record["output_from"] in ("reference", "reference, capped")
    assert "reference reply" in card["output_rule"]
    fixed, card, _ = build(tmp_path / "b", tok, example(
        tmp_path, **{"datasets.support.output_tokens": 32,
                     "datasets.support.stop_at_eos": False}))
    assert {(r["output_tokens"], r["min_tokens"], r["output_from"]) for r in fixed} == {
        (32, 32, "fixed")}
    assert "forced" in card["output_rule"]


def test_sharegpt_conversations_keep_their_system_turn_and_earlier_turns(tmp_path, tok):
    rows = [{"id": "c1", "conversations": [
        {"from": "system", "value": "You answer in French."},
        {"from": "human", "value": "Hello"}, {"from": "gpt", "value": "Bonjour"},
        {"from": "human", "value": "How are you?"}, {"from": "gpt", "value": "Très bien"}]},
        {"id": "c2", "conversations": [{"from": "gpt", "value": "no question"}]}]
    path = write_rows(tmp_path / "mine.jsonl", rows)
    raw = example(tmp_path, path, **{"workloads.support.num_prompts": 1,
                                     "round1.concurrency": [1],
                                     "sources.support_chats.max_skipped_rows": 1})
    records, card, manifest = build(tmp_path, tok, raw)
    assert manifest["format"] == "sharegpt"
    assert records[0]["messages"] == [
        {"role": "system", "content": "You answer in French."},
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "How are you?"}]
    assert len(records) == 1 and card["skipped"] == {"no human turn": 1}


def test_the_chat_endpoint_receives_the_whole_conversation(tmp_path):
    """The load generator's chat request function, as `run_point` wraps it, posts a record's
    messages instead of its prompt as one user message."""
    from vllm.benchmarks.lib import endpoint_request_func as functions

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    path = write_rows(tmp_path / "set.jsonl", [
        {"prompt": "system: Be brief.\n\nuser: Hi", "messages": messages, "output_tokens": 4},
        {"prompt": "plain", "output_tokens": 4}])
    posted = []

    async def original(request_func_input, session, pbar=None):
        session.post(url="http://x/v1/chat/completions",
                     json={"messages": [{"role": "user", "content": request_func_input.prompt}]})
        return None

    class Session:
        def post(self, url, json=None, **kwargs):
            posted.append(json["messages"])

    saved = functions.ASYNC_REQUEST_FUNCS[loadgen.CHAT_BACKEND]
    functions.ASYNC_REQUEST_FUNCS[loadgen.CHAT_BACKEND] = original
    try:
        with loadgen.sending_conversations(loadgen.conversations(str(path))):
            request = functions.ASYNC_REQUEST_FUNCS[loadgen.CHAT_BACKEND]
            for prompt in ("system: Be brief.\n\nuser: Hi", "plain"):
                asyncio.run(request(SimpleNamespace(prompt=prompt), Session()))
        assert functions.ASYNC_REQUEST_FUNCS[loadgen.CHAT_BACKEND] is original
    finally:
        functions.ASYNC_REQUEST_FUNCS[loadgen.CHAT_BACKEND] = saved
    assert posted == [messages, [{"role": "user", "content": "plain"}]]


def test_a_source_of_ones_own_needs_a_file_and_a_builder_that_reads_it(tmp_path):
    raw = example(tmp_path)
    raw["sources"]["support_chats"] = {"kind": "fixture"}
    with pytest.raises(ConfigError, match=r"sources.support_chats.kind = 'fixture'"):
        validate_config(raw)
    raw = example(tmp_path, **{"datasets.support.builder": "sharegpt"})
    raw["datasets"]["support"] = {"builder": "spec_bench", "source": "support_chats"}
    with pytest.raises(ConfigError, match=r"reads the raw source 'spec_bench' \(for your own "
                                          r"requests: builder: chat\)"):
        validate_config(raw)
    raw = example(tmp_path, **{"datasets.support.stop_at_eos": False})
    with pytest.raises(ConfigError, match="needs a fixed output_tokens"):
        validate_config(raw)


def _bad_inputs(tmp_path):
    """(name, config, what the one line must say) of each input the checks refuse."""
    rows = rows_of(CHATS)
    lines = CHATS.read_text().splitlines(keepends=True)
    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text("".join(lines[:16] + ['{"messages": [{"role": "user"\n'] + lines[17:]))
    short = write_rows(tmp_path / "fifty.jsonl", rows[:50])
    other = write_rows(tmp_path / "qa.jsonl", [{"question": "q", "answer": "a"}] * 64)
    missing = tmp_path / "nowhere.jsonl"
    return [
        ("missing file", example(tmp_path, missing),
         [f"sources.support_chats.path = '{missing}': no such file"]),
        ("unrecognised format", example(tmp_path, other),
         [str(other), "sources.support_chats.format", "not recognised", "['answer', 'question']"]),
        ("a malformed row", example(tmp_path, malformed),
         [str(malformed), "sources.support_chats", "malformed JSON: 1 (line 17)",
          "max_skipped_rows: 1"]),
        ("too few rows", example(tmp_path, short),
         [str(short), "50 usable requests", "workloads.support.num_prompts needs 64"]),
        ("a misspelt method", example(tmp_path, **{"round1.methods.0.method": "eagel3"}),
         ["round1.methods[0].method = 'eagel3'", "did you mean 'eagle3'?"]),
    ]


def test_bad_inputs_stop_the_plan_and_the_dry_run_before_any_job(tmp_path):
    for name, raw, said in _bad_inputs(tmp_path):
        config = write_config(tmp_path / f"{name.replace(' ', '-')}.yaml", raw)
        plan = subprocess.run([sys.executable, "-m", "sdbench.plan.cost", "--config",
                               str(config)], capture_output=True, text=True, cwd=REPO,
                              timeout=120)
        assert plan.returncode == 2, (name, plan.stdout[-2000:], plan.stderr[-2000:])
        errors = [line for line in plan.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and all(s in errors[0] for s in said), (name, plan.stderr)
        dry = snakemake("-n", workdir=tmp_path / "w", configfile=config, timeout=300)
        output = dry.stdout + dry.stderr
        assert dry.returncode != 0 and "Job stats" not in output, (name, output[-3000:])
        line = next((x for x in output.splitlines() if said[0] in x), "")
        assert all(s in line for s in said), (name, output[-3000:])


def test_the_example_plans_and_dry_runs():
    """`make plan GPUS=8` on the worked example: its answer first (GPU-hours in full and
    adaptive, starts), the wall clock on 8 GPUs, the design it chose with both totals (not
    the chained baselines, whose start-ups cost more than they save here); then a dry run."""
    plan = subprocess.run([sys.executable, "-m", "sdbench.plan.cost", "--config",
                           str(EXAMPLE), "--gpus", "8"], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    lines = plan.stdout.splitlines()
    assert lines[0].startswith("Plan on device class h100: 25 cells, 20 server starts; ")
    assert "with the adaptive rule (on in this config)" in lines[0]
    adaptive, full = (float(x) for x in re.match(
        r"wall clock on 8 GPUs: ([\d.]+) h with the adaptive rule \(each session's measuring at "
        r"its round's projected share\), ([\d.]+) h every cell in full", lines[1]).groups())
    quotient = float(re.search(r"GPU-hours ÷ 8: ([\d.]+) h", lines[1]).group(1))
    assert 0 < adaptive <= full and full >= quotient > 0
    design = re.match(r"design: unchained baselines, the cheaper \(adaptive.chain: auto\); "
                      r"unchained ([\d.]+) GPU-hours \((\d+) starts, start-up ([\d.]+) \+ "
                      r"adaptive measuring ([\d.]+) \+ the rest\) against chained ([\d.]+) "
                      r"GPU-hours \((\d+) starts, start-up ([\d.]+) \+ adaptive measuring "
                      r"([\d.]+)", lines[2])
    assert design, lines[2]
    plain, chained = [float(design.group(i)) for i in (1, 5)]
    added = float(design.group(7)) - float(design.group(3))
    saved = float(design.group(4)) - float(design.group(8))
    assert plain < chained and added > saved
    assert "projected GPU-hours" in plan.stdout
    dry = snakemake("-n", configfile=EXAMPLE, timeout=300, gpus=8)
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output[-3000:]
    assert "prompts               1" in output or "prompts 1" in " ".join(output.split())


@pytest.mark.parametrize("tokenizer_here", [True, False])
def test_the_plan_reads_request_lengths_from_the_file_before_the_set_is_built(
        tmp_path, demo_tokenizer_dir, tok, tokenizer_here):
    """Before the example's set is built, `make plan` estimates its requests from the file
    (with the study's tokenizer where it is on this machine, else 4 characters a token) and
    projects the measuring the built set's card gives, within 25 % (it was 3.3× with every
    request at its longest)."""
    from sdbench import layout
    from sdbench.plan import cost, estimate

    raw = example(tmp_path)
    folder = demo_tokenizer_dir if tokenizer_here else tmp_path / "not-downloaded"
    raw["models"]["demo-tokenizer"] = {"source": {"kind": "path", "path": str(folder)}}
    raw["tokenizer"] = {"model": "demo-tokenizer"}
    config = validate_config(raw)
    root = tmp_path / "run"
    before = estimate.plan_cost(config, "h100", root)
    how = "the tokenizer of demo-tokenizer" if tokenizer_here else "4 characters a token"
    assert before["cards"] == (0, 1, 0, {how: 1})
    assert f"estimated from the source file for 1 (counted with {how})" in cost.format_plan(
        before, "example")
    spec = config["sources"]["support_chats"]
    out = root / raw_path("support_chats", spec)
    manifest = fetch_source("support_chats", spec, out, f"{out}.manifest.json")
    built = root / layout.processed_path("support", "all")
    built.parent.mkdir(parents=True)
    build_subset(specs.subset_definition(config, "support", "all"), out, manifest, tok, built,
                 root / layout.card_path("support", "all"))
    after = estimate.plan_cost(config, "h100", root)
    assert after["cards"] == (1, 1, 0, {})
    ratio = before["total"].measuring_h / after["total"].measuring_h
    assert 0.75 <= ratio <= 1.25, ratio
    # every request at its longest: what the plan projected before it read the file
    config["datasets"]["support"]["source"] = "support_chats"
    config["sources"]["support_chats"] = {**spec, "path": str(tmp_path / "elsewhere.jsonl")}
    longest = estimate.plan_cost(config, "h100", tmp_path / "empty")
    assert longest["total"].measuring_h > 2 * after["total"].measuring_h


def test_a_budget_trims_k_levels_and_methods_never_a_workload_or_the_only_round(tmp_path):
    """With `plan.budget_gpu_hours` at half of what the example needs, the plan lists the
    config edits that fit it: k values and methods dropped, every workload and temperature
    and round 1 (the study's only round) kept; the trimmed study does fit."""
    from sdbench.plan import budget, estimate

    config = validate_config(example(tmp_path))
    needed = sum(estimate.adaptive_needs(config, "h100", tmp_path).values())
    result = budget.trim(config, lambda c: estimate.adaptive_needs(c, "h100", tmp_path),
                         needed / 2)
    assert result.fits and result.total <= needed / 2 < result.needed
    assert result.dropped and not result.left_out
    assert any(" k=" in item for item in result.dropped)
    trimmed = result.config
    assert trimmed["round1"]["workloads"] == config["round1"]["workloads"]
    assert set(trimmed["workloads"]) == set(config["workloads"]) == {"support", "support-t0.7"}
    assert trimmed["round1"]["methods"] and all(m["k"] for m in trimmed["round1"]["methods"])
    assert sum(estimate.adaptive_needs(trimmed, "h100", tmp_path).values()) == pytest.approx(
        result.total)
    lines = budget.describe(result)
    assert lines[0].startswith(f"budget {needed / 2:g} GPU-hours: the study needs")
    assert "it fits; every workload and temperature still measured" in lines[0]
    assert lines[1:] == [f"  - {item}" for item in result.dropped]
    # a budget nothing fits: trimmed as far as it goes, the only round never left out
    tiny = budget.trim(config, lambda c: estimate.adaptive_needs(c, "h100", tmp_path), 0.01)
    assert not tiny.fits and "round1" not in tiny.left_out
    assert "still over the budget" in budget.describe(tiny)[0]


def test_the_wall_clock_schedules_sessions_on_the_gpus_after_those_they_read():
    from sdbench.plan.wallclock import Job, critical_path, makespan, shortened

    jobs = {"a": Job(10, 1, frozenset()), "b": Job(10, 1, frozenset()),
            "c": Job(5, 1, frozenset({"a"})), "wide": Job(4, 2, frozenset({"b"}))}
    assert critical_path(jobs) == {"a": 15, "b": 14, "c": 5, "wide": 4}
    assert makespan(jobs, 1) == 29  # one after another
    # a and b at once; c after a; wide after b, on both GPUs once c is done
    assert makespan(jobs, 2) == 19
    assert makespan(jobs, 8) == 15
    assert makespan({}, 8) == 0
    # under the adaptive rule each job's measuring is cut to its round's share
    measured = {name: Job(job.seconds, job.gpus, job.after, job.seconds / 2, "round1")
                for name, job in jobs.items()}
    assert makespan(shortened(measured, {"round1": 0.0}), 8) == 7.5
    assert makespan(shortened(measured, {}), 8) == 15


def test_the_plan_on_a_cpu_without_avx512_leaves_out_what_it_cannot_run():
    """`make plan GPUS=2` for the demo as on a CPU without AVX-512 (SDBENCH_CPU_ISA=avx2: what
    the host probe reads; the end-to-end AVX2 rerun runs it on vLLM's AVX2 extension): its
    device class, the 4-bit cells it leaves out, and the same cells in the answer, the wall
    clock and both designs (every line on this host's cells, none on the int4 targets)."""
    from sdbench.plan import hostcaps

    def plan(isa):
        env = {k: v for k, v in os.environ.items() if k != hostcaps.ISA_ENV}
        env.update({hostcaps.ISA_ENV: isa} if isa else {})
        out = subprocess.run([sys.executable, "-m", "sdbench.plan.cost", "--config",
                              str(REPO / "config" / "demo.yaml"), "--gpus", "2"],
                             capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()

    lines = plan("avx2")
    answer = re.match(r"Plan on device class cpu-avx2: (\d+) cells, (\d+) server starts;",
                      lines[0])
    assert answer, lines[0]
    assert lines[1].startswith("wall clock on 2 cells at once (gpu=N): ")
    starts = int(answer.group(2))
    assert re.match(rf"design: unchained baselines, forced by the config; unchained [\d.]+ "
                    rf"hours \({starts} starts,", lines[2]), lines[2]
    skipped = next(line for line in lines if "cells are unsupported here" in line)
    assert skipped.startswith("4 cells are unsupported here") and "cpu_gemm_wna16" in skipped
    # on this host's own CPU: with AVX-512 the int4 cells run, and more servers start
    if "avx512f" in Path("/proc/cpuinfo").read_text().split():
        assert int(re.search(r"(\d+) server starts", plan(None)[0]).group(1)) > starts
