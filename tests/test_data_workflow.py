"""Data jobs through Snakemake: an edited local source reruns its raw copy and every set built
from it; a corrupt source fails its fetch with one line on the console (the traceback in the
log), leaves nothing that looks finished and is listed in the index; skipped rows are reported
on the console."""

import copy
import json
import os

import pytest
import yaml

from real_files import cnn_dailymail, cut
from workflow_helpers import REPO, job_counts, snakemake, write_config

SET = "data/processed/cnn_dm_news_summary/0.25k.jsonl"
RAW = "data/raw/cnn_dailymail/articles.jsonl"


@pytest.fixture
def workdir(tmp_path, demo_tokenizer_dir):
    """A working directory whose config reads CNN-DailyMail from a local JSONL file and counts
    tokens with the demo target's tokenizer (a path model: nothing to build)."""
    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    raw = copy.deepcopy(raw)
    raw["models"]["demo-tokenizer"] = {"source": {"kind": "path",
                                                  "path": str(demo_tokenizer_dir)}}
    raw["tokenizer"] = {"model": "demo-tokenizer"}
    source = cnn_dailymail(tmp_path / "user" / "cnn.jsonl", 200)
    raw["sources"]["cnn_dailymail"] = {"kind": "path", "path": str(source)}
    write_config(tmp_path / "c.yaml", raw)
    return tmp_path


def run(workdir, *args):
    # the targets first: --configfile takes every argument after it
    result = snakemake(*args, "--configfile", str(workdir / "c.yaml"), workdir=workdir,
                       timeout=300)
    return result, result.stdout + result.stderr


def test_an_edited_local_source_reruns_its_copy_and_its_sets(workdir):
    result, output = run(workdir, SET)
    assert result.returncode == 0, output[-3000:]
    source = workdir / "user" / "cnn.jsonl"
    assert json.loads((workdir / f"{RAW}.manifest.json").read_text())["rows"] == 200
    assert job_counts(run(workdir, "-n", SET)[1]) == {}  # up to date
    # replaced in place by a shorter file: the fetch and the set are stale
    cnn_dailymail(source, 150)
    for extra in ((), ("--rerun-triggers", "mtime")):
        assert job_counts(run(workdir, "-n", SET, *extra)[1]) == {"fetch_source": 1,
                                                                 "prompts": 1}
    # replaced by a file with an older mtime than the copy: still stale (size + mtime)
    old = (workdir / RAW).stat().st_mtime_ns - 3600 * 10**9
    os.utime(source, ns=(old, old))
    assert job_counts(run(workdir, "-n", SET)[1]) == {"fetch_source": 1, "prompts": 1}
    result, output = run(workdir, SET)
    assert result.returncode == 0, output[-3000:]
    assert json.loads((workdir / f"{RAW}.manifest.json").read_text())["rows"] == 150


def test_skipped_rows_and_each_set_are_reported_on_the_console(workdir):
    source = workdir / "user" / "cnn.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    lines[4] = b'{"article": "cut\n'
    source.write_bytes(b"".join(lines))
    result, output = run(workdir, SET)
    assert result.returncode == 0, output[-3000:]
    assert (f"sdbench: sources.cnn_dailymail ({source}): 199 of 200 rows usable; skipped "
            "malformed JSON: 1 (line 5)") in output
    assert "sdbench: cnn_dm_news_summary/0.25k: 4 records, prompt tokens p50" in output
    assert "0% cut, 0% joined" in output


def test_a_corrupt_source_fails_with_one_line_and_is_listed_in_the_index(workdir):
    source = cut(workdir / "user" / "cnn.jsonl", 0.6)
    result, output = run(workdir, SET)
    assert result.returncode != 0
    line = next(x for x in output.splitlines() if x.startswith("error: "))
    assert line.startswith(f"error: sources.cnn_dailymail: {source}: its last line (")
    assert "ends in the middle of a row" in line and "logs/data/fetch_cnn_dailymail" in line
    assert "Traceback" not in output  # the traceback is in the log only
    log = workdir / "logs/data/fetch_cnn_dailymail_articles.jsonl.log"
    assert "Traceback" in log.read_text()
    assert not (workdir / RAW).exists() and not (workdir / SET).exists()
    assert [p for p in (workdir / "data").rglob("*") if p.is_file()] == []
    index = (workdir / "reports" / "index.html").read_text()
    problems = index.split("<h2>Problems</h2>")[1].split("<h2>")[0]
    assert "fetch source &#x27;cnn_dailymail&#x27;" in problems
    assert "ends in the middle of a row" in problems and str(log.relative_to(workdir)) in \
        problems
