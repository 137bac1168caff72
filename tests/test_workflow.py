"""The workflow plans correctly (dry runs) and passes snakemake --lint."""

import re
import subprocess

import yaml

from workflow_helpers import (
    REPO,
    SNAKEMAKE,
    greedy_only,
    job_counts,
    snakemake,
    with_left_out,
    without_sweeps,
    write_config,
)


def test_lint_is_clean():
    result = snakemake("--lint", configfile=REPO / "config" / "demo.yaml", timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Congratulations" in result.stdout + result.stderr


# round 1, 7 workloads each: Qwen2.5-7B x (vanilla + ngram k=1..5 + ngram_gpu k=2,4 + suffix
# k=8,16 + draft k=1..5), Llama 3 8B x (vanilla + EAGLE k=1..5 + MLP speculator k=1..4), Vicuna
# x (vanilla + Medusa k=1..5), Llama 3.1 x (vanilla + EAGLE-3 k=1..5), MiMo x (vanilla + MTP
# k=1..3); offline: 2 workloads x (vanilla + ngram k=1..5 + draft k=1..5); Transformers: 2
# workloads x (vanilla + ngram + draft, k=3);
# round 2: 12 targets (7B-72B, each also AWQ and GPTQ) x 18 buckets x (vanilla + draft k=3);
# round 3: vanilla, 4 speculative-only settings (one shared vanilla), 3 server settings (each
# with its own vanilla); the instance probe: the offline and Transformers cells run on one
# start, so n-gram and the draft on each engine again, with the engine's vanilla (2 x 3)
REAL_STUDY_CELLS = (7 * (15 + 10 + 6 + 6 + 4) + 2 * 11 + 2 * 3
                    + 12 * 18 * 2 + (1 + 4) + 3 * 2 + 2 * 3)


def test_real_study_plans(tmp_path):
    result = snakemake("-n", workdir=tmp_path, configfile=REPO / "config" / "config.yaml",
                       timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    counts = job_counts(result.stdout + result.stderr)
    assert counts["cell"] == REAL_STUDY_CELLS
    assert counts["dynamic_k_cell"] == 2 * 7       # ngram and the draft, per round 1 workload
    # 12 Qwen targets and the 0.5B draft; Llama 3 8B + an EAGLE head, Vicuna 7B + Medusa
    # heads, Llama 3.1 8B + an EAGLE-3 head, MiMo-7B (MTP); not the MLP speculator, whose
    # cells the installed vLLM cannot run (planned as unsupported: nothing downloads for them)
    assert counts["download_model"] == 13 + 7 and "model" not in counts
    assert counts["fetch_source"] == 4    # Spec-Bench (GitHub), ShareGPT, CNN-DM, THUCNews (hub)
    # Spec-Bench 6 groups + all, ShareGPT, 6 news->summary, 6 highlights->news, 6 THUCNews
    # polish buckets, the mixed-length set
    assert counts["prompts"] == 7 + 1 + 6 + 6 + 6 + 1
    assert counts["summary"] == counts["index"] == 1 and counts["report"] == 3


def test_the_readme_command_finds_the_root_snakefile_and_the_default_profile(tmp_path):
    """`snakemake --cores all --resources gpu=1` from the repository root (no -s): Snakemake
    finds ./Snakefile and reads profiles/default beside it (--keep-going and the rest), and
    says so."""
    assert (REPO / "Snakefile").is_file() and not (REPO / "workflow" / "Snakefile").exists()
    profile = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    assert profile["keep-going"] is True and profile["rerun-incomplete"] is True
    # the demo (its shipped Spec-Bench file by its full path: the run is in tmp_path)
    configfile = write_config(tmp_path / "demo.yaml", with_left_out(
        yaml.safe_load((REPO / "config" / "demo.yaml").read_text())))
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "all", "--resources", "gpu=1", "--configfile",
         str(configfile), "-d", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert re.search(r"Using workflow specific profile \S*profiles/default for setting default "
                     r"command line arguments", out), out[:3000]
    assert job_counts(out)["cell"] > 0


def test_default_configfile_is_the_real_study(tmp_path):
    # without --configfile the workflow reads config/config.yaml (relative to the working dir)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(
        (REPO / "config" / "config.yaml").read_text())
    result = snakemake("-n", workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "resources/models/qwen2.5-7b-instruct" in result.stdout + result.stderr


def test_offline_run_fails_at_the_start_with_what_to_do(tmp_path):
    import yaml

    url = "https://sdbench-unreachable.invalid/question.jsonl"
    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    raw["sources"]["spec_bench"] = {"kind": "url", "url": url, "sha256": "0" * 64}
    config = write_config(tmp_path / "offline.yaml", raw)
    result = snakemake(workdir=tmp_path, configfile=config, timeout=300)  # a real run
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "cannot start" in output and url in output
    assert "data/raw/spec_bench/question.jsonl" in output and "kind: path" in output
    assert not (tmp_path / "data").exists() and not (tmp_path / "resources").exists()


def test_bad_config_fails_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "config" / "demo.yaml").read_text().replace(
        "targets: [smollm2-135m, smollm2-135m-10l]", "targets: [smollm2-1b, smollm2-135m-10l]"))
    result = snakemake("-n", workdir=tmp_path, configfile=bad, timeout=300)
    assert result.returncode != 0
    assert "round1.targets[0] = 'smollm2-1b'" in result.stderr + result.stdout


def test_slurm_profile_plans_gpu_runtime_and_memory_per_session(tmp_path):
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.utils import set_gres_string

    from sdbench.plan import grid, sessions
    from sdbench.plan.config import load_config

    # as the README runs it: no --resources (Snakemake would cap each job's gpu to N)
    result = subprocess.run(
        [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n",
         "--profile", str(REPO / "profiles" / "slurm"), "--configfile",
         str(REPO / "config" / "config.yaml")], capture_output=True, text=True, timeout=300,
        cwd=REPO)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    counts = job_counts(out)
    assert counts["cell"] == REAL_STUDY_CELLS
    # one GPU job per server session (configuration instance), each serving every workload
    # of its configuration; the cells' own jobs only write their records
    cells = grid.cells_by_id(load_config(REPO / "config" / "config.yaml"))
    planned = sessions.plan_sessions(cells)
    assert counts["session"] == len(planned)
    # (fewer configurations than cells; a chained configuration has a session per stage)
    assert len({s.lead for s in planned.values()}) < REAL_STUDY_CELLS
    # every download (20 hub checkpoints, 4 sources) is a job of a local rule: the submitting
    # node has the network and the token, compute nodes may have neither (a dry run does not
    # print which jobs are local: the Snakefile's localrules say it); so is a cell's records
    assert counts["download_model"] == 20 and counts["fetch_source"] == 4
    block = re.search(r"^localrules:\n((?:\s+\w+,\n)+)", (REPO / "Snakefile")
                      .read_text(), flags=re.M)
    local = set(re.findall(r"\w+", block.group(1)))
    assert {"download_model", "fetch_source", "cell"} <= local
    assert not {"model", "session"} & local
    gpus_by_target, minutes, modelless = {}, [], 0
    for block in out.split("rule session:")[1:]:
        found = re.search(r"resources/models/([\w.\-]+)", block)
        if found is None:  # a session of cells the installed vLLM cannot run: no model needed
            modelless += 1  # and no GPU: nothing will start
            assert re.search(r"\bgpu=0\b", block.split("resources:", 1)[1].splitlines()[0])
            continue
        target = found.group(1)
        resources = dict(re.findall(r"(\w+)=([^,\s]+)", block.split("resources:", 1)[1]
                                    .splitlines()[0]))
        assert resources["mem_mb"] == "64000"
        gpus_by_target.setdefault(target, set()).add(int(resources["gpu"]))
        minutes.append(int(resources["runtime"]))
    # time limits from each session's work (cells.runtime: auto), within the cap; a failed
    # job is retried (a session killed at its limit resumes from its points)
    assert len(set(minutes)) > 1 and max(minutes) <= 2880
    # the MLP speculator's (vLLM 0.32 names the method but cannot load its draft)
    assert modelless == len({s for s in sessions.plan_sessions(cells).values()
                             if cells[s.cells[0]].server_config["method"] == "mlp_speculator"})
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml")
                             .read_text())
    assert profile["retries"] >= 1
    assert gpus_by_target["qwen2.5-72b-instruct"] == {4}
    assert gpus_by_target["qwen2.5-32b-instruct"] == {2}
    assert gpus_by_target["qwen2.5-7b-instruct"] == {1}
    # the plugin turns a session's gpu resource into the job's GPU request
    job = SimpleNamespace(resources=SimpleNamespace(
        get=lambda key, default=None: {"gpu": 4}.get(key, default), gpu=4))
    assert set_gres_string(job).strip() == "--gpus=4"


def test_plan_names_the_cells_this_host_cannot_run_and_keeps_going(tmp_path):
    """As on a CPU without AVX-512 (emulated, whatever this CPU is): the dry run lists the
    GPTQ and AWQ cells (the demo with what it leaves out) with the reason before anything
    runs; the workflow's default profile (--keep-going) is in force."""
    import yaml

    configfile = write_config(tmp_path / "left-out.yaml", without_sweeps(greedy_only(
        with_left_out(yaml.safe_load((REPO / "config" / "demo.yaml").read_text())))))
    result = snakemake("-n", workdir=tmp_path, configfile=configfile,
                       env={"SDBENCH_CPU_ISA": "avx2"}, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"workflow specific profile \S*profiles/default ", output), output[:2000]
    # round 1: 6 server, 2 offline, 4 Transformers cells; round 2: (vanilla, draft) x 4
    # targets; round 3: 2
    assert "4 of 23 cells cannot run on this host" in output
    for fmt in ("GPTQ", "AWQ"):
        assert (f"runs {fmt} int4 (smollm2-135m-{fmt.lower()}) only on CPUs with AVX-512: its "
                "cpu_gemm_wna16 kernel is built into _C and _C_AVX512, not into _C_AVX2") in output
    listed = re.findall(r"^    [0-9a-f]{12}  (.+)$", output, flags=re.M)
    assert len(listed) == 4 and all("-gptq" in x or "-awq" in x for x in listed)
    assert "emulated: SDBENCH_CPU_ISA=avx2" in output
    # the unsupported cells are still planned: each records why it measured nothing
    assert job_counts(output)["cell"] == 23
    bad = snakemake("-n", workdir=tmp_path, configfile=configfile,
                    env={"SDBENCH_CPU_ISA": "sse2"}, timeout=300)
    assert bad.returncode != 0
    assert "SDBENCH_CPU_ISA = 'sse2' is not allowed" in bad.stdout + bad.stderr


def test_duration_bounded_speculative_cells_wait_for_their_baseline(tmp_path):
    """With loadgen.duration_s, a speculative cell sends its baseline's prompt counts, so
    asking for it alone plans the baseline cell first; so does the adaptive rule (a cell
    measured on its own stops against its baseline's records); without either, the cell
    alone."""
    import yaml

    from sdbench import layout
    from sdbench.plan import grid, specs
    from sdbench.plan.config import validate_config

    raw = greedy_only(with_left_out(yaml.safe_load(
        (REPO / "config" / "demo.yaml").read_text())))
    for method in raw["round1"]["methods"]:
        method.pop("interleave", None)  # a pair measured in turn cannot share counts
    assert raw["adaptive"]  # the demo measures adaptively
    adaptive = write_config(tmp_path / "adaptive.yaml", raw)
    raw["adaptive"] = {"enabled": False}
    plain = write_config(tmp_path / "plain.yaml", raw)
    raw["loadgen"]["duration_s"] = 5
    path = write_config(tmp_path / "duration.yaml", raw)
    for configfile, cells in ((path, 2), (adaptive, 2), (plain, 1)):
        config = validate_config(yaml.safe_load(configfile.read_text()))
        spec = next(c for c in grid.round_cells(config, "round1")
                    if not c.is_baseline and c.engine == specs.SERVE)
        result = snakemake("-n", layout.cell_output(spec.cell_id), workdir=tmp_path / "w",
                           configfile=configfile, timeout=300)
        assert result.returncode == 0, result.stderr + result.stdout
        assert job_counts(result.stdout + result.stderr)["cell"] == cells


def test_inputs_builds_what_the_cells_read_and_starts_no_server(tmp_path):
    """`snakemake inputs`: every prompt set and every model of the cells this host runs (as on
    a CPU without AVX-512: not the GPTQ and AWQ copies, whose cells are unsupported there),
    and no session, cell, summary or report."""
    configfile = write_config(tmp_path / "left-out.yaml", without_sweeps(greedy_only(
        with_left_out(yaml.safe_load((REPO / "config" / "demo.yaml").read_text())))))
    result = snakemake("-n", "inputs", workdir=tmp_path, configfile=configfile,
                       env={"SDBENCH_CPU_ISA": "avx2"}, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    assert set(counts) == {"fetch_source", "prompts", "model", "inputs"}, counts
    built = set(re.findall(r"^\s+wildcards: model=(\S+)$", output, flags=re.M))
    assert built and not {"smollm2-135m-gptq", "smollm2-135m-awq"} & built
    assert "smollm2-135m-w8a8" in built and counts["model"] == len(built)
    everything = snakemake("-n", workdir=tmp_path, configfile=configfile,
                           env={"SDBENCH_CPU_ISA": "avx2"}, timeout=300)
    whole = job_counts(everything.stdout + everything.stderr)
    assert all(counts[rule] == whole[rule] for rule in ("fetch_source", "prompts", "model"))
