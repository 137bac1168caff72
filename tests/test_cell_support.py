"""A cell the host cannot run writes "unsupported" records and starts nothing; only valid points
are taken from the point cache (a failed or invalid attempt is measured again)."""

import copy
import dataclasses
import gzip
import json

import pytest

from sdbench import layout
from sdbench.measure import cell as cellmod
from sdbench.measure import points, server, slots
from sdbench.plan import grid, hostcaps, specs
from sdbench.plan.config import validate_config

from helpers import num_prompts

REASON = ("vLLM 0.32.0 (CPU build) runs GPTQ int4 (smollm2-135m-gptq) only on CPUs with "
          "AVX-512: its cpu_gemm_wna16 kernel is built into _C and _C_AVX512, not into "
          "_C_AVX2, which this CPU loads (AVX2, no AVX-512)")


@pytest.fixture
def gptq_cell(demo_config, tmp_path, monkeypatch):
    """The demo's GPTQ vanilla cell in a working directory with its prompt file, on a host
    whose verdict is REASON (the verdict itself is tested in test_hostcaps)."""
    monkeypatch.chdir(tmp_path)
    cell = next(c for c in grid.all_cells(demo_config)
                if c.server_config["target"]["name"] == "smollm2-135m-gptq" and c.is_baseline)
    prompts = tmp_path / cell.workload["path"]
    prompts.parent.mkdir(parents=True)
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}", "output_tokens": 8}) + "\n"
                               for i in range(cell.workload["num_prompts"])))
    verdict = {"reason": REASON, "host": {"device": "cpu", "isa": "AVX2, no AVX-512",
                                          "extension": "_C_AVX2"},
               "dtype": {"requested": "host", "resolved": "bfloat16", "why": "test"}}
    monkeypatch.setattr(hostcaps, "cell_verdict", lambda config, cell, root=".": verdict)

    def no_server(*args, **kwargs):
        raise AssertionError("an unsupported cell must not start a server")

    monkeypatch.setattr(server, "cell_server", no_server)
    monkeypatch.setattr(slots, "held", no_server)
    return cell


def test_unsupported_cell_records_the_reason_and_measures_nothing(gptq_cell, demo_config,
                                                                  tmp_path):
    output = tmp_path / layout.cell_output(gptq_cell.cell_id)
    records = cellmod.measure_cell(gptq_cell, demo_config, output)
    assert gptq_cell.concurrency == (1, 4)
    assert [(r["concurrency"], r["repeat"]) for r in records] == [
        (c, repeat) for c in (1, 4) for repeat in range(gptq_cell.repeats)]
    for r in records:
        assert r["status"] == "unsupported" and r["error"] == REASON and r["metrics"] == {}
        assert r["provenance"]["host"]["extension"] == "_C_AVX2"
        assert r["provenance"]["dtype"]["resolved"] == "bfloat16"
    assert [json.loads(x) for x in output.read_text().splitlines()] == records
    with gzip.open(layout.requests_output(output), "rt") as fh:
        assert fh.read() == ""  # nothing was sent
    assert not (tmp_path / "results" / "points").exists()  # nothing cached
    assert not layout.error_output(output).exists()
    assert not (tmp_path / "logs" / "sessions").exists()  # no server, no server log


def test_only_valid_cached_points_are_reused(gptq_cell, demo_config, tmp_path):
    """A valid cached point is kept (measured before, e.g. on a host that runs the cell), an
    invalid or unreadable one is not: it is a missing point (here: unsupported)."""
    gptq_cell = dataclasses.replace(gptq_cell, repeats=2)  # in neither the id nor a point key
    output = tmp_path / layout.cell_output(gptq_cell.cell_id)
    first = cellmod.measure_cell(gptq_cell, demo_config, output)
    prompts_sha = first[0]["provenance"]["dataset"]["sha256"]
    facts = points.point_facts(gptq_cell, demo_config, prompts_sha, None,
                               first[0]["provenance"], "bfloat16")
    loads = gptq_cell.load_points()

    def cache(load, repeat, status):
        key = points.point_key(gptq_cell, load, repeat, facts)
        path = points.point_path(gptq_cell.cell_id, load, repeat, key)
        record = {**first[0], "status": status, "concurrency": load["concurrency"],
                  "repeat": repeat, "metrics": {"total_token_throughput": 1.0}}
        points.write_point(path, record, {"generated_texts": []})
        return path

    cache(loads[0], 0, "ok")
    cache(loads[1], 0, "invalid")
    broken = cache(loads[0], 1, "ok")
    broken.write_bytes(b"not gzip")
    assert points.read_point(broken) is None
    records = cellmod.measure_cell(gptq_cell, demo_config, output)
    # in point order: c=1 r0 (cached, ok), c=1 r1 (unreadable), c=4 r0 (invalid), c=4 r1
    assert [r["status"] for r in records] == ["ok", "unsupported", "unsupported",
                                              "unsupported"]


def test_prompts_per_concurrency_scale_a_point_with_its_level(demo_config_raw):
    """loadgen.prompts_per_concurrency: a closed-loop point sends that many prompts per unit of
    concurrency, at most the workload's; request-rate points send them all. Unset, it is not in
    the cell's identity (cells measured before it existed keep their ids)."""
    assert demo_config_raw["loadgen"]["prompts_per_concurrency"] == 6
    raw = copy.deepcopy(demo_config_raw)
    cell = next(c for c in grid.all_cells(validate_config(raw)) if c.engine == specs.SERVE)
    assert cell.workload["num_prompts"] == 24
    sent = [num_prompts(cell, {"mode": "concurrency", "concurrency": c})[0] for c in (1, 2, 6)]
    assert sent == [6, 12, 24]
    assert num_prompts(cell, {"mode": "rate", "request_rate": 2.0, "burstiness": 1.0})[0] == 24
    raw = copy.deepcopy(demo_config_raw)
    del raw["loadgen"]["prompts_per_concurrency"]
    unset = next(c for c in grid.all_cells(validate_config(raw)) if c.engine == specs.SERVE)
    assert "prompts_per_concurrency" not in unset.workload["loadgen"]
    assert unset.cell_id != cell.cell_id
    assert num_prompts(unset, {"mode": "concurrency", "concurrency": 1})[0] == 24
