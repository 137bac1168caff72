"""The cluster path on a real scheduler: a one-node SLURM cluster on this host
(scripts/slurm_cluster.sh: Debian's slurm-wlm, munge, slurmdbd over MariaDB) runs a small study
through profiles/slurm, as a site without GPUs whose partition is called `cpu` runs it (the
command line of docs/real-study.md). Every session is its own SLURM job; a one-minute time
limit kills sessions that SLURM then reports as TIMEOUT, Snakemake resubmits them and they
resume from the points they finished; a session whose server cannot start fails as its own
cell. Skipped, saying why, where the host cannot install the packages (no root, no package
index).
"""

from __future__ import annotations

import getpass
import html
import json
import os
import re
import subprocess
import sys

import psutil
import pytest

from sdbench.files import read_jsonl

from workflow_helpers import REPO, SNAKEMAKE, e2e_config, server_processes, write_config

pytestmark = pytest.mark.e2e

CLUSTER = REPO / "scripts" / "slurm_cluster.sh"
DAEMONS = ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged")
# a site without GPUs, its partition named cpu (docs/real-study.md, "A site of its own")
SITE = ["--default-resources", "slurm_partition=cpu", "runtime=30", "mem_mb=2000",
        "--set-resources", "session:gpu=0", "dynamic_k_cell:gpu=0", "model:runtime=30",
        "model:mem_mb=4000"]
BAD = "prompt_lookup_min=5 must be <= prompt_lookup_max=2"


def _running(name: str) -> bool:
    return any(p.info["name"] == name for p in psutil.process_iter(["name"]))


@pytest.fixture(scope="module")
def cluster():
    """The one-node cluster, up for this module; stopped after it, no daemon left."""
    started = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True,
                             timeout=900)
    if started.returncode == 3:
        pytest.skip("no SLURM on this host: " + started.stdout.strip().splitlines()[-1])
    assert started.returncode == 0, started.stdout + started.stderr
    yield
    stopped = subprocess.run([str(CLUSTER), "stop"], capture_output=True, text=True,
                             timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert [d for d in DAEMONS if _running(d)] == []


def slurm_config(raw: dict) -> dict:
    """The shrunk demo cut to round 1 on Spec-Bench at concurrency 1 and 2: no speculation,
    n-gram k=2 with 6 repeats (more work than a minute holds, with a server start per
    attempt), and n-gram k=3 whose lookup window vLLM refuses at start-up; every session's
    time limit one minute on its first attempt, a minute more on each retry."""
    config = e2e_config(raw)
    config["study"] = "SLURM test"
    for key in ("round2", "round3", "dynamic_k"):
        config.pop(key, None)
    config["instance_probe"] = {"speculators": [], "levels": [1], "repeats": 1}
    config["datasets"] = {"spec_bench": {**config["datasets"]["spec_bench"],
                                         "max_output_tokens": 16}}
    config["workloads"] = {"spec_bench": {**config["workloads"]["spec_bench"],
                                          "num_prompts": 8}}
    config["sources"] = {"spec_bench": config["sources"]["spec_bench"]}
    config["models"] = {"smollm2-135m": config["models"]["smollm2-135m"]}
    config["cells"].update(runtime=1, mem_mb=3000)
    config["round1"] = {
        "targets": ["smollm2-135m"], "workloads": ["spec_bench"], "concurrency": [1, 2],
        "methods": [{"method": "ngram", "k": [2], "repeats": 6,
                     "options": {"prompt_lookup_min": 2, "prompt_lookup_max": 4}},
                    {"method": "ngram", "name": "ngram-bad", "k": [3],
                     "options": {"prompt_lookup_min": 5, "prompt_lookup_max": 2}}]}
    return config


def submitted(log: str) -> dict[str, tuple[str, str]]:
    """SLURM job id -> (rule, its job's wildcards folder) from Snakemake's log."""
    return {job: (rule, where) for job, rule, where in re.findall(
        r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/(\S+)/\d+\.log\)",
        log)}


def states(jobs) -> dict[str, str]:
    out = subprocess.run(["sacct", "-X", "-n", "--parsable2", "--format=JobID,State",
                          "-j", ",".join(jobs)], capture_output=True, text=True, check=True)
    return dict(line.split("|")[:2] for line in out.stdout.split())


def test_sessions_are_slurm_jobs_killed_at_their_limit_resumed_and_contained(
        cluster, tmp_path, demo_config_raw):
    configfile = write_config(tmp_path / "slurm.yaml", slurm_config(demo_config_raw))
    listed = subprocess.run([sys.executable, "-m", "sdbench.measure.cell", "--config",
                             str(configfile), "--list"], capture_output=True, text=True,
                            cwd=tmp_path, check=True).stdout
    sessions = re.findall(r"^session (\S+):", listed, re.M)
    cells = dict(re.findall(r"^([0-9a-f]{12})  (\S+)", listed, re.M))
    bad = next(c for c, name in cells.items() if name == "ngram-bad")
    run = subprocess.run(
        [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--configfile",
         str(configfile), "--profile", str(REPO / "profiles" / "slurm"), "--retries", "4",
         "--slurm-keep-successful-logs", *SITE],
        capture_output=True, text=True, timeout=1800, cwd=tmp_path,
        # (the plugin looks the account up by $USER where the profile names none)
        env={**os.environ, "USER": getpass.getuser()})
    log = run.stdout + run.stderr
    jobs = submitted(log)
    state = states(jobs)
    # one SLURM job per server session and attempt, every session's last one done
    by_session: dict[str, list[str]] = {}
    for job, (rule, where) in sorted(jobs.items(), key=lambda j: int(j[0])):
        if rule == "session":
            by_session.setdefault(where, []).append(job)
    assert sorted(by_session) == sorted(sessions), log[-3000:]
    assert all(state[ids[-1]] == "COMPLETED" for ids in by_session.values()), state
    # a session killed at its limit (SLURM's TIMEOUT), resubmitted and finished
    killed = {s: ids for s, ids in by_session.items()
              if any(state[j] == "TIMEOUT" for j in ids)}
    assert killed, state
    # the n-gram cell: its planned points once each in its records, and the load generator
    # ran once per point over all its session's attempts (the journal), in this run's jobs
    ngram = next(c for c, name in cells.items() if name == "ngram")
    records = read_jsonl(tmp_path / "results" / "cells" / f"{ngram}.jsonl")
    keys = [(r["load"]["concurrency"], r["repeat"]) for r in records]
    assert sorted(keys) == sorted({(c, r) for c in (1, 2) for r in range(6)})
    journal = read_jsonl(tmp_path / "logs" / "points" / f"{ngram}.jsonl")
    assert sorted(tuple(j["point"]) for j in journal) == sorted(
        (c, None, r) for c in (1, 2) for r in range(6))
    assert all(j["job"] in jobs for j in journal)
    # the server that cannot start: its own cell failed, with vLLM's reason, on the index
    error = json.loads((tmp_path / "results" / "cells" / f"{bad}.error.json").read_text())
    assert BAD in error["detail"]
    index = (tmp_path / "reports" / "index.html").read_text()
    assert bad in index and html.escape(BAD) in index
    assert (tmp_path / "reports" / "round1.html").exists()
    # nothing left: no job in the queue, no vLLM process
    queue = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    assert queue.stdout.split() == []
    assert server_processes(tmp_path) == []  # (this run's: other tests may be measuring)
    # Snakemake's own verdict: one cell failed, the rest done (keep-going)
    assert run.returncode == 1
