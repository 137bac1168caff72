"""Fault suite: each fault costs one cell (or stops the run before any job) with a clear
message, never a finished result, and leaves no process behind.

Real vLLM (CPU) with the demo model wherever the fault is about vLLM. The models and prompt
sets come from the end-to-end run (copied into this module's own working directory).
"""

import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from sdbench.files import read_jsonl
from sdbench.measure.serving import VllmServer, server_command

from workflow_helpers import (
    REPO,
    SNAKEMAKE,
    e2e_config,
    job_counts,
    one_round,
    server_log,
    server_processes,
    session_of,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def base(e2e_inputs):
    """A small grid: vanilla + ngram k=2 on the Spec-Bench prompts, concurrency 1."""
    config = one_round(e2e_config(e2e_inputs["raw"]))
    config["round1"].update(targets=["smollm2-135m"], workloads=["spec_bench"], concurrency=[1],
                            methods=[{"method": "ngram", "k": [2],
                                      "options": {"prompt_lookup_min": 2,
                                                  "prompt_lookup_max": 4}}])
    config["loadgen"]["repeats"] = 1
    config["dynamic_k"] = []
    # (lifecycle faults of one session each: no instance probe's sessions besides)
    config["instance_probe"] = {"enabled": False}
    return config


def cell_cli(workdir, configfile, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "sdbench.measure.cell", "--config",
                           str(configfile), *args], capture_output=True, text=True, cwd=workdir,
                          timeout=timeout)


def cell_id_of(workdir, configfile, speculator="vanilla"):
    listing = cell_cli(workdir, configfile, "--list")
    assert listing.returncode == 0, listing.stderr
    return next(line.split()[0] for line in listing.stdout.splitlines()
                if line.split()[1] == speculator)


def cell_files(workdir, configfile) -> list[str]:
    """The records files of every cell of the config (Snakemake targets)."""
    listing = cell_cli(workdir, configfile, "--list")
    assert listing.returncode == 0, listing.stderr
    return [f"results/cells/{cell}.jsonl"
            for cell in re.findall(r"^([0-9a-f]{12})  ", listing.stdout, flags=re.M)]


def assert_no_server_left(workdir):
    deadline = time.monotonic() + 10  # zombies are reaped asynchronously
    while server_processes(workdir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert server_processes(workdir) == []


def assert_no_output(workdir, cell_id):
    assert not (workdir / "results" / "cells" / f"{cell_id}.jsonl").exists()
    assert not (workdir / "results" / "cells" / f"{cell_id}.requests.jsonl.gz").exists()


# 1. server exits during start-up (bad server argument): the other cell still runs ----------

def test_1_server_exits_during_startup_costs_one_cell(workdir, base):
    config = copy.deepcopy(base)
    # vLLM accepts the keys but refuses min > max when it starts
    config["round1"]["methods"][0]["options"] = {"prompt_lookup_min": 4, "prompt_lookup_max": 2}
    configfile = write_config(workdir / "f1.yaml", config)
    bad = cell_id_of(workdir, configfile, "ngram")
    good = cell_id_of(workdir, configfile, "vanilla")
    # no --keep-going here: profiles/default sets it
    result = snakemake(workdir=workdir, configfile=configfile, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert (workdir / "results" / "cells" / f"{good}.jsonl").is_file()  # the other cell finished
    assert_no_output(workdir, bad)
    error = json.loads((workdir / "results" / "cells" / f"{bad}.error.json").read_text())
    assert "during start-up" in error["error"] and "prompt_lookup_min" in error["error"]
    assert_no_server_left(workdir)
    # the index of the failed run lists the failure and why
    index = (workdir / "reports" / "index.html").read_text()
    assert "This run had failed jobs" in index
    assert "Problems" in index and bad in index and "prompt_lookup_min" in index
    assert "sdbench: reports of the incomplete run" in output
    # a rerun redoes only what is missing: the failed cell's session (its manifest counts the
    # session that left it unfinished) and the cell
    rerun = snakemake("-n", workdir=workdir, configfile=configfile)
    assert job_counts(rerun.stdout + rerun.stderr) == {
        "all": 1, "session": 1, "cell": 1, "summary": 1, "report": 1, "index": 1}


# 2. server never becomes ready ---------------------------------------------------------------

def test_2_startup_deadline(workdir, base):
    config = copy.deepcopy(base)
    config["server"]["startup_timeout_s"] = 3
    config["server"]["args"]["seed"] = 2  # a cell of its own (the timeout is not in the id)
    configfile = write_config(workdir / "f2.yaml", config)
    cell_id = cell_id_of(workdir, configfile)
    result = cell_cli(workdir, configfile, "--cell", cell_id)
    assert result.returncode == 1
    assert "not ready after 3 s" in result.stderr and "Last lines of" in result.stderr
    assert_no_output(workdir, cell_id)
    assert_no_server_left(workdir)


# 3. port already in use when the server starts ------------------------------------------------

def test_3_taken_port_is_retried_on_another(workdir):
    """Real vLLM on a taken port fails as a lost bind race (its own message), and the start is
    retried on another port. The retry is the stand-in server: what is tested is that vLLM's
    failure is recognised, not a second vLLM start (a minute on 2 cores)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])

    def pick(host):
        from sdbench.measure.serving import free_port

        return next(ports, None) or free_port(host)

    def build(port):
        if port != taken.getsockname()[1]:
            return [sys.executable, str(REPO / "tests" / "standin_server.py"), "--port",
                    str(port), "--mode", "solo"]
        return server_command("resources/models/smollm2-135m", "smollm2-135m", "127.0.0.1", port,
                              {"enforce_eager": True, "gpu_memory_utilization": 0.25,
                               "max_model_len": 1024}, None)

    log = workdir / "logs" / "f3.server.log"
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        with VllmServer(build, host="127.0.0.1", log_path=log, startup_timeout_s=600,
                        pick_port=pick) as server:
            assert server.port != taken.getsockname()[1] and server.alive()
    finally:
        os.chdir(cwd)
        taken.close()
    text = log.read_text()
    first, retry = text.split("### sdbench: starting")[1:]
    assert "vllm.entrypoints.openai.api_server" in first and "Address already in use" in first
    assert "stand-in server starting" in retry
    assert_no_server_left(workdir)


# 4. server killed during a concurrency point -------------------------------------------------

def test_4_server_killed_mid_point(workdir, base):
    config = copy.deepcopy(base)
    config["round1"]["concurrency"] = [1, 2]
    config["workloads"]["spec_bench"]["num_prompts"] = 6  # a longer point, to kill it mid-way
    configfile = write_config(workdir / "f4.yaml", config)
    cell_id = cell_id_of(workdir, configfile)
    other = workdir / "results" / "cells" / "000000000000.jsonl"  # another cell's finished file
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text('{"kept": true}\n')
    log = server_log(workdir, configfile, cell_id)
    log.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "sdbench.measure.cell", "--config",
                             str(configfile), "--cell", cell_id], cwd=workdir,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (log.exists() and "POST /v1/chat/completions" in log.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.5)
    api = [pid for pid, cmd in server_processes(workdir) if "api_server" in cmd]
    os.kill(api[0], signal.SIGKILL)  # the engine core survives this; the cell must clean up
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "exited during the point" in stderr and "later points were not attempted" in stderr
    records = [json.loads(x) for x in
               (workdir / "results" / "cells" / f"{cell_id}.jsonl.partial").read_text()
               .splitlines()]
    assert [(r["concurrency"], r["status"]) for r in records] == [(1, "failed")]
    assert "exited during the point" in records[0]["error"]
    assert_no_output(workdir, cell_id)
    assert other.read_text() == '{"kept": true}\n'
    assert_no_server_left(workdir)


# 5. SIGINT to a running snakemake ------------------------------------------------------------

def test_5_interrupt_then_resume(workdir, base):
    configfile = write_config(workdir / "f5.yaml", base)
    cells = [cell_id_of(workdir, configfile, s) for s in ("vanilla", "ngram")]
    for cell_id in cells:
        (workdir / "results" / "cells" / f"{cell_id}.jsonl").unlink(missing_ok=True)
        server_log(workdir, configfile, cell_id).unlink(missing_ok=True)
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfile", str(configfile), "--cores", "2", "--resources", "gpu=1"]
    # like Ctrl-C in a terminal: SIGINT to snakemake's whole process group
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=REPO)
    logs = [server_log(workdir, configfile, c) for c in cells]
    deadline = time.monotonic() + 600
    while not any(p.exists() and "Application startup complete" in p.read_text() for p in logs):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=180)
    assert proc.returncode != 0
    assert_no_server_left(workdir)
    assert not all((workdir / "results" / "cells" / f"{c}.jsonl").exists() for c in cells)
    # the cells' files (the summary and the reports are other tests' business)
    resumed = snakemake(*[f"results/cells/{c}.jsonl" for c in cells], workdir=workdir,
                        configfile=configfile, timeout=900)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert all((workdir / "results" / "cells" / f"{c}.jsonl").is_file() for c in cells)
    assert_no_server_left(workdir)


# 6. failed requests above the threshold ------------------------------------------------------

def test_6_an_invalid_point_is_kept_shown_and_measured_again(workdir, base):
    config = copy.deepcopy(base)
    config["workloads"]["mixed"] = {"dataset": "mixed_length", "subset": "all", "num_prompts": 4}
    config["round1"]["workloads"] = ["mixed"]
    configfile = write_config(workdir / "f6.yaml", config)
    cell_id = cell_id_of(workdir, configfile)
    # two of the four prompts (sent in file order) ask for 0 output tokens: the server refuses
    # them (a request too long for the context would be refused before the server starts)
    path = workdir / "data/processed/mixed_length/all.jsonl"
    original = path.read_bytes()
    records = [json.loads(line) for line in original.decode().splitlines()]
    for record in records[1:4:2]:
        record["output_tokens"] = 0
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        result = cell_cli(workdir, configfile, "--cell", cell_id)
    finally:
        path.write_bytes(original)
    # the point was measured, but it is not done: the cell fails naming it and why
    assert result.returncode == 1, result.stderr[-2000:]
    # (after the cell's progress lines) one line says what failed and why
    first = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert "1 of 1 points not valid" in first and "2 of 4 requests failed" in first
    assert "first request error" in first and "a rerun measures these points again" in first
    assert_no_output(workdir, cell_id)
    partial = workdir / "results" / "cells" / f"{cell_id}.jsonl.partial"
    record = json.loads(partial.read_text())
    assert record["status"] == "invalid"
    assert record["metrics"]["failed"] == 2 and record["metrics"]["completed"] == 2
    assert record["error"].startswith("2 of 4 requests failed")
    from sdbench.analyze.aggregate import summarize

    frame = summarize([], [partial])  # shown (the salvaged report reads it), never paired
    assert frame["speedup"].isna().all() and not frame["paired"].any()
    # only valid points are cached, so a rerun measures the point again (that a cached invalid
    # point is not reused is tested in test_cell_support)
    assert not list((workdir / "results" / "points" / cell_id).glob("*"))
    assert_no_server_left(workdir)


# 7. corrupt line in a processed dataset ------------------------------------------------------

def test_7_corrupt_prompt_file(workdir, base):
    config = copy.deepcopy(base)
    config["workloads"]["spec_bench"]["num_prompts"] = 3  # a cell of its own
    configfile = write_config(workdir / "f7.yaml", config)
    path = workdir / "data" / "processed" / "spec_bench" / "all.jsonl"
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b'{"prompt": "cut\n'] + lines[3:]))
    try:
        cell_id = cell_id_of(workdir, configfile)
        # (the configuration's session log may hold other tests' starts: count them)
        log = server_log(workdir, configfile, cell_id)
        starts = log.read_text().count("### sdbench: starting") if log.exists() else 0
        result = cell_cli(workdir, configfile, "--cell", cell_id)
    finally:
        path.write_bytes(original)
    assert result.returncode == 1
    assert "all.jsonl:3: not a valid JSON line" in result.stderr
    assert (log.read_text().count("### sdbench: starting") if log.exists() else 0) == \
        starts  # no server
    assert_no_output(workdir, cell_id)
    assert_no_server_left(workdir)


# 8.-10. configuration faults: refused before any job ------------------------------------------

def refused(workdir, config, name):
    configfile = write_config(workdir / name, config)
    result = snakemake("-n", workdir=workdir, configfile=configfile)
    assert result.returncode != 0
    return result.stdout + result.stderr


def test_8_bad_value_and_unknown_key(workdir, base):
    config = copy.deepcopy(base)
    config["loadgen"] = {"temperature": -1}
    assert "loadgen.temperature = -1" in refused(workdir, config, "f8a.yaml")
    config = copy.deepcopy(base)
    config["server"]["start_timeout"] = 5
    output = refused(workdir, config, "f8b.yaml")
    assert "start_timeout" in output and "Additional properties are not allowed" in output


def test_9_method_not_in_the_installed_vllm(workdir, base):
    config = copy.deepcopy(base)
    config["round1"]["methods"][0]["method"] = "eagle9"
    output = refused(workdir, config, "f9a.yaml")
    assert "round1.methods[0].method = 'eagle9'" in output and "vLLM 0.32.0" in output
    assert "'ngram'" in output  # the methods it does have
    config = copy.deepcopy(base)
    config["round1"]["methods"][0]["options"]["lookahead_tokens"] = 3
    output = refused(workdir, config, "f9b.yaml")
    assert "options.lookahead_tokens" in output and "vLLM 0.32.0" in output


def test_10_draft_vocabulary_mismatch(workdir, base):
    draft = workdir / "other-vocab-draft"
    draft.mkdir(exist_ok=True)
    target_config = json.loads(
        (workdir / "resources" / "models" / "smollm2-135m" / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**target_config, "vocab_size": 32000}))
    config = copy.deepcopy(base)
    config["models"]["other-draft"] = {"source": {"kind": "path", "path": str(draft)}}
    config["round1"]["methods"] = [{"method": "draft_model", "draft": "other-draft", "k": [2]}]
    output = refused(workdir, config, "f10.yaml")
    assert "vocab_size 32000" in output and "vocab_size 49152" in output
    assert "use_heterogeneous_vocab" in output


# 11. a failed data job: listed in the index with its reason and log --------------------------

def test_11_failed_data_job_is_listed_with_its_cause(e2e_inputs, base, tmp_path):
    workdir = tmp_path / "w"
    shutil.copytree(e2e_inputs["workdir"] / "data", workdir / "data")
    # without the Spec-Bench copy and its prompt set (a copied file has no Snakemake metadata
    # that would tell that its source changed), the fetch runs on the corrupt file
    for folder in ("raw", "processed"):
        shutil.rmtree(workdir / "data" / folder / "spec_bench")
    (workdir / "resources").symlink_to(e2e_inputs["workdir"] / "resources")
    bad = tmp_path / "question.jsonl"
    bad.write_text("not json\nnor this\n")
    config = copy.deepcopy(base)
    config["sources"]["spec_bench"] = {"kind": "path", "path": str(bad)}
    configfile = write_config(workdir / "f11.yaml", config)
    # a file the parse does not read (SDBENCH_CHECK_BYTES=0; as one changed after the parse:
    # otherwise the parse stops the run before any job, test_data_workflow)
    result = snakemake(workdir=workdir, configfile=configfile, timeout=600,
                       env={"SDBENCH_CHECK_BYTES": "0"})
    assert result.returncode != 0
    index = (workdir / "reports" / "index.html").read_text()
    problems = index.split("<h2>Problems</h2>")[1].split("<h2>")[0]
    assert "fetch source &#x27;spec_bench&#x27;" in problems
    assert "neither JSON Lines, a JSON array, Parquet nor a zip archive" in problems
    assert "logs/data/fetch_spec_bench_question.jsonl.log" in problems
    # no round has a measurement: each report says so in a sentence
    page = (workdir / "reports" / "round1.html").read_text()
    assert "No measurement of this run yet" in page
    assert_no_server_left(workdir)


# 12. a session killed at its time limit resumes when Snakemake retries it --------------------

def test_12_a_session_killed_at_its_limit_resumes_on_retry(workdir, base):
    """SLURM ends a job at its time limit with SIGTERM; the profile retries failed jobs
    (profiles/slurm: retries). The retry measures only the points the killed session
    had not finished: those it had stay in the point cache, untouched."""
    import psutil

    config = copy.deepcopy(base)
    config["round1"].update(methods=[], concurrency=[1])
    config["loadgen"]["repeats"] = 3
    configfile = write_config(workdir / "f12.yaml", config)
    cell_id = cell_id_of(workdir, configfile)
    records = workdir / "results" / "cells" / f"{cell_id}.jsonl"
    records.unlink(missing_ok=True)
    points = workdir / "results" / "points" / cell_id
    shutil.rmtree(points, ignore_errors=True)
    log = workdir / "logs" / "sessions" / f"{session_of(configfile, cell_id)}.log"
    log.unlink(missing_ok=True)
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfile", str(configfile), "--cores", "2", "--resources", "gpu=1",
           "--retries", "1", f"results/cells/{cell_id}.jsonl"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=REPO)
    deadline = time.monotonic() + 600

    def finished() -> list:
        # a point's file once written (not the hidden temporary file it is written to, which
        # a SIGTERM in that instant removes: the test then killed before any point was kept)
        return [p for p in points.iterdir()
                if not p.name.startswith(".") and p.name.endswith(".json.gz")] \
            if points.is_dir() else []

    while not finished():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    # (this test's: the end-to-end run may be measuring beside it, on another pytest worker)
    job = [p for p in psutil.process_iter(["cmdline", "cwd"])
           if any("run_session.py" in part for part in p.info["cmdline"] or [])
           and p.info["cwd"] == str(workdir)]
    assert len(job) == 1
    job[0].send_signal(signal.SIGTERM)  # as SLURM at the job's time limit
    job[0].wait(timeout=120)
    kept = {p.name: p.stat().st_mtime_ns for p in finished()}
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    assert "Trying to restart job" in out  # Snakemake's retry, not a clean first run
    # the retry found the killed session's points and measured the others only (Snakemake
    # clears the failed attempt's log: the last start is the retry's)
    starts = re.findall(r"(\d+) of (\d+) points cached, measuring (\d+)", log.read_text())
    cached, total, measured = map(int, starts[-1])
    assert cached == len(kept) and 1 <= cached < total and measured == total - cached
    assert {p.name: p.stat().st_mtime_ns for p in points.iterdir() if p.name in kept} == kept
    assert len(finished()) == total
    # the load generator ran once per point over both attempts, two processes between them
    journal = read_jsonl(workdir / "logs" / "points" / f"{cell_id}.jsonl")
    assert sorted(tuple(j["point"]) for j in journal) == sorted({tuple(j["point"])
                                                                 for j in journal})
    assert len(journal) == total and len({j["pid"] for j in journal}) == 2
    assert sorted((r["concurrency"], r["repeat"]) for r in map(json.loads, records.read_text()
                  .splitlines())) == [(1, r) for r in range(3)]
    assert_no_server_left(workdir)


# 13. sessions: a new workload costs one start per configuration; a cell can be asked alone ----

def test_13_a_new_workload_starts_each_server_once_and_a_cell_can_be_asked_alone(workdir, base):
    """Adding a workload to the configurations re-measures only the new cells, one server start
    per configuration; a stale cell's file asked for alone is rebuilt alone (from the cache: no
    start) or, when its definition changed, with one start of its session."""
    # the vanilla configuration alone (one server start fewer than with n-gram's beside it)
    config = copy.deepcopy(base)
    config["round1"]["methods"] = []
    first = write_config(workdir / "f13a.yaml", config)
    spec_bench = cell_id_of(workdir, first)
    # the cells' files only, here and below: the summary and reports are other tests' business
    assert snakemake(*cell_files(workdir, first), workdir=workdir, configfile=first,
                     timeout=900).returncode == 0
    log = server_log(workdir, first, spec_bench)
    starts = log.read_text().count("### sdbench: starting")
    kept = {p.name: p.stat().st_mtime_ns
            for p in (workdir / "results" / "points" / spec_bench).iterdir()}

    config["round1"]["workloads"] = ["spec_bench", "news_0.25k"]
    second = write_config(workdir / "f13b.yaml", config)
    targets = cell_files(workdir, second)
    plan = snakemake("-n", *targets, workdir=workdir, configfile=second)
    # the session gains a cell; the old cell's records are written again
    assert len(targets) == 2 and job_counts(plan.stdout + plan.stderr) == {
        "session": 1, "cell": 2}
    done = snakemake(*targets, workdir=workdir, configfile=second, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert log.read_text().count("### sdbench: starting") == starts + 1
    session_log = (workdir / "logs" / "sessions" / f"{session_of(second, spec_bench)}.log")
    assert f"cell {spec_bench} (vanilla | smollm2-135m | spec_bench), instance 0: 1 of 1 " \
           "points cached, measuring 0" in session_log.read_text()
    assert {p.name: p.stat().st_mtime_ns for p in (workdir / "results" / "points" /
                                                   spec_bench).iterdir()} == kept
    news = next(line.split()[0] for line in cell_cli(workdir, second, "--list").stdout
                .splitlines() if "vanilla | smollm2-135m | news_0.25k" in line)

    # the cell's records lost: asked for alone, they are written again from the cache
    target = f"results/cells/{news}.jsonl"
    (workdir / target).unlink()
    plan = snakemake("-n", target, workdir=workdir, configfile=second)
    assert job_counts(plan.stdout + plan.stderr) == {"cell": 1}
    assert snakemake(target, workdir=workdir, configfile=second).returncode == 0
    assert (workdir / target).is_file()
    assert log.read_text().count("### sdbench: starting") == starts + 1

    # its definition changed (another cell): asked for alone, one session measures it alone
    # (planned only: running it would be one more start of the session above)
    config["workloads"]["news_0.25k"]["num_prompts"] = 3
    third = write_config(workdir / "f13c.yaml", config)
    changed = next(line.split()[0] for line in cell_cli(workdir, third, "--list").stdout
                   .splitlines() if "vanilla | smollm2-135m | news_0.25k" in line)
    assert changed != news
    plan = snakemake("-n", f"results/cells/{changed}.jsonl", workdir=workdir, configfile=third)
    assert job_counts(plan.stdout + plan.stderr) == {"session": 1, "cell": 1}
    assert_no_server_left(workdir)
