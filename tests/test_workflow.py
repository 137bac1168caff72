"""The workflow plans correctly (dry runs) and passes snakemake --lint."""

from workflow_helpers import REPO, job_counts, snakemake


def test_lint_is_clean():
    result = snakemake("--lint", configfile=REPO / "config" / "demo.yaml", timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Congratulations" in result.stdout + result.stderr


def test_real_study_plans(tmp_path):
    result = snakemake("-n", workdir=tmp_path, configfile=REPO / "config" / "config.yaml",
                       timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    counts = job_counts(result.stdout + result.stderr)
    # 1 target x 7 workloads x (vanilla + ngram k=1..5 + draft k=1..5)
    assert counts["cell"] == 7 * 11
    assert counts["model"] == 2                       # Qwen2.5-7B and 0.5B downloads
    assert counts["fetch_source"] == 2                # Spec-Bench (GitHub raw), CNN-DM (hub)
    assert counts["spec_bench_prompts"] == counts["cnn_dm_summary_prompts"] == 1
    assert counts["summary"] == counts["report_round1"] == counts["index"] == 1


def test_default_configfile_is_the_real_study(tmp_path):
    # without --configfile the workflow reads config/config.yaml (relative to the working dir)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(
        (REPO / "config" / "config.yaml").read_text())
    result = snakemake("-n", workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "resources/models/qwen2.5-7b-instruct" in result.stdout + result.stderr


def test_bad_config_fails_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "config" / "demo.yaml").read_text().replace(
        "targets: [smollm2-135m]", "targets: [smollm2-1b]"))
    result = snakemake("-n", workdir=tmp_path, configfile=bad, timeout=300)
    assert result.returncode != 0
    assert "round1.targets[0] = 'smollm2-1b'" in result.stderr + result.stdout
