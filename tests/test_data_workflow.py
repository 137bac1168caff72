"""Data jobs through Snakemake: an edited local source reruns its raw copy and every set built
from it; a corrupt source fails its fetch with one line on the console (the traceback in the
log), leaves nothing that looks finished and is listed in the index; skipped rows are reported
on the console."""

import copy
import html
import json
import os

import pytest
import yaml

from real_files import cnn_dailymail, cut, sharegpt
from workflow_helpers import REPO, job_counts, snakemake, write_config

SET = "data/processed/cnn_dm_news_summary/0.25k.jsonl"
RAW = "data/raw/cnn_dailymail/articles.jsonl"


@pytest.fixture
def workdir(tmp_path, demo_tokenizer_dir):
    """A working directory whose config reads CNN-DailyMail from a local JSONL file and counts
    tokens with the demo target's tokenizer (a path model: nothing to build)."""
    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    raw = copy.deepcopy(raw)
    raw["sources"]["spec_bench"]["path"] = str(REPO / raw["sources"]["spec_bench"]["path"])
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


def _cut(source):
    cut(source, 0.6)
    return (f"sources.cnn_dailymail: {source}: its last line (", "ends in the middle of a row",
            "ends in the middle of a row")


def _not_utf8(source):
    source.write_bytes(source.read_text(encoding="utf-8").replace("e", "é").encode("latin-1"))
    return (f"sources.cnn_dailymail ({source}): 200 of 200 rows (100.0%) cannot be used",
            "not UTF-8: 200 (line 1, line 2", "not UTF-8: 200")


def _other_schema(source):
    sharegpt(source, 50, "jsonl")
    return (f"sources.cnn_dailymail ({source}): 50 of 50 rows",
            "this file's first row has ['conversations', 'id']",
            "missing or mistyped field 'article': 50")


@pytest.mark.parametrize("damage", [_cut, _not_utf8, _other_schema],
                         ids=["cut", "not-utf8", "other-schema"])
def test_a_corrupt_local_source_stops_the_run_before_any_job(workdir, damage):
    """Read at the parse, as its fetch would read it: the run and a dry run stop with one line
    naming the config, the source and the cause, and nothing is written."""
    start, cause, _ = damage(workdir / "user" / "cnn.jsonl")
    for dry in (("-n",), ()):
        result, output = run(workdir, *dry, SET)
        assert result.returncode != 0 and "Job stats" not in output
        line = next(x for x in output.splitlines() if start in x)
        assert line.startswith(f"{workdir / 'c.yaml'}: {start}") and cause in line, line
    assert not (workdir / "data").exists() and not (workdir / "reports").exists()


@pytest.mark.parametrize("damage", [_cut, _not_utf8, _other_schema],
                         ids=["cut", "not-utf8", "other-schema"])
def test_a_corrupt_source_fails_with_one_line_and_is_listed_in_the_index(workdir, damage):
    """A file the parse does not read (larger than SDBENCH_CHECK_BYTES; here 0: none, as a
    file changed after the parse) fails its fetch job, with one line, and the index lists it."""
    start, cause, listed = damage(workdir / "user" / "cnn.jsonl")
    result = snakemake(SET, "--configfile", str(workdir / "c.yaml"), workdir=workdir,
                       timeout=300, env={"SDBENCH_CHECK_BYTES": "0"})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    line = next(x for x in output.splitlines() if x.startswith("error: "))
    assert line.startswith(f"error: {start}") and cause in line
    assert "logs/data/fetch_cnn_dailymail" in line
    assert "Traceback" not in output  # the traceback is in the log only
    log = workdir / "logs/data/fetch_cnn_dailymail_articles.jsonl.log"
    assert "Traceback" in log.read_text()
    assert [p for p in (workdir / "data").rglob("*") if p.is_file()] == []
    index = (workdir / "reports" / "index.html").read_text()
    problems = index.split("<h2>Problems</h2>")[1].split("<h2>")[0]
    assert "fetch source &#x27;cnn_dailymail&#x27;" in problems
    assert html.escape(listed) in problems and str(log.relative_to(workdir)) in problems
