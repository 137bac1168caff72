"""Hub revisions pinned once (`python -m sdbench.plan.lock`): the lock file beside a config pins
every branch or tag to a commit, the run downloads those commits, and what is still on a moving
revision is named at the start and in the index. The hub itself is replaced by a stand-in that
answers as huggingface_hub's HfApi does (no network here)."""

import copy
import hashlib
from types import SimpleNamespace

import pytest

from sdbench.plan import lock, specs
from sdbench.plan.config import load_config
from sdbench.report.pages import write_index

from workflow_helpers import REPO, snakemake


class Hub:
    """model_info / dataset_info(repo, revision) -> an object with .sha, as HfApi answers."""

    def __init__(self, missing=()):
        self.asked, self.missing = [], set(missing)

    def _info(self, repo, revision):
        self.asked.append((repo, revision))
        if repo in self.missing:
            raise RuntimeError(f"404 Client Error: Repository Not Found for url: .../{repo}")
        return SimpleNamespace(sha=hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest())

    def model_info(self, repo, revision):
        return self._info(repo, revision)

    def dataset_info(self, repo, revision):
        return self._info(repo, revision)


@pytest.fixture(scope="module")
def real():
    return load_config(REPO / "config" / "config.yaml")


def test_every_hub_download_of_the_study_is_found(real):
    refs = lock.hub_refs(real)
    models = [k for k in refs if k.startswith("models.")]
    assert len(models) == 21
    assert {k for k in refs if k.startswith("sources.")} == {
        "sources.sharegpt", "sources.cnn_dailymail", "sources.thucnews"}
    assert refs["sources.sharegpt"]["repo_type"] == "dataset"
    # two models are pinned in the config already; the rest move with their branch
    moving = lock.unpinned(real)
    assert len(moving) == 19 + 3
    assert "models.qwen2.5-7b-instruct-awq (Qwen/Qwen2.5-7B-Instruct-AWQ@main)" in moving


def test_the_lock_pins_every_branch_and_the_run_uses_it(real, tmp_path):
    hub = Hub()
    pins = lock.resolve(lock.hub_refs(real), api=hub)
    assert len(hub.asked) == 22  # a commit already in the config is not asked for
    config_file = tmp_path / "config.yaml"
    path = lock.lock_path(config_file)
    assert path.name == "config.lock.yaml"
    lock.write_lock(path, pins, config_file)
    assert lock.read_lock(path) == pins

    config = copy.deepcopy(real)
    notes = lock.apply_files(config, [config_file])
    assert notes == [f"sdbench: hub revisions pinned by {path} (24 commits)"]
    assert lock.unpinned(config) == []
    source = specs.model_source(config, "qwen2.5-7b-instruct-awq")
    assert source["revision"] == pins["models.qwen2.5-7b-instruct-awq"]["commit"]
    assert config["sources"]["sharegpt"]["revision"] == pins["sources.sharegpt"]["commit"]
    # the pinned checkpoint is another model than the branch's: downloaded (and measured) anew
    assert source != specs.model_source(real, "qwen2.5-7b-instruct-awq")

    # the config moved on since the lock: that pin is not applied, and the user is told
    moved = copy.deepcopy(real)
    moved["models"]["qwen2.5-7b-instruct-awq"]["source"]["revision"] = "v2"
    notes = lock.apply_files(moved, [config_file])
    assert "stale pin, not applied (models.qwen2.5-7b-instruct-awq: the config has " \
           "Qwen/Qwen2.5-7B-Instruct-AWQ@v2, the lock Qwen/Qwen2.5-7B-Instruct-AWQ@main)" \
           in notes[1]
    assert lock.unpinned(moved) == ["models.qwen2.5-7b-instruct-awq "
                                    "(Qwen/Qwen2.5-7B-Instruct-AWQ@v2)"]
    assert "python -m sdbench.plan.lock --config" in notes[-1]


def test_a_revision_the_hub_cannot_resolve_names_the_key(real):
    with pytest.raises(lock.LockError, match=r"models\.llama-3-8b-instruct: could not resolve "
                       r"meta-llama/Meta-Llama-3-8B-Instruct@main on the hub: RuntimeError: "
                       r"404"):
        lock.resolve(lock.hub_refs(real), api=Hub(missing={"meta-llama/Meta-Llama-3-8B-Instruct"}))


@pytest.mark.parametrize("text, what", [
    ("{not yaml", "not a readable lock file"),
    ("schema: other/1\npins: {}\n", "schema is 'other/1'"),
    ("schema: sdbench.lock/1\npins: {models.x: {repo: a/b, revision: main, commit: main}}\n",
     "pins.models.x.commit = 'main' is not a 40-character commit"),
])
def test_a_corrupt_lock_file_is_refused_with_its_name(tmp_path, text, what):
    path = tmp_path / "config.lock.yaml"
    path.write_text(text)
    with pytest.raises(lock.LockError) as info:
        lock.read_lock(path)
    assert str(path) in str(info.value) and what in str(info.value)


def test_the_index_names_what_runs_on_a_moving_revision(tmp_path, real):
    out = tmp_path / "index.html"
    first = lock.unpinned(real)[0]
    write_index("study", {}, [], out, unpinned=[first])
    page = out.read_text()
    assert "moving revision" in page and f"<code>{first}</code>" in page
    write_index("study", {}, [], out, unpinned=[])
    assert "moving revision" not in out.read_text()


def test_the_workflow_reads_the_lock_beside_its_config(tmp_path, real):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    config_file = config_dir / "config.yaml"
    config_file.write_text((REPO / "config" / "config.yaml").read_text())
    moving = snakemake("-n", workdir=tmp_path, configfile=config_file, timeout=300)
    assert moving.returncode == 0, moving.stderr
    assert "22 hub downloads on a moving revision" in moving.stderr
    lock.write_lock(lock.lock_path(config_file),
                    lock.resolve(lock.hub_refs(real), api=Hub()), config_file)
    # the default config (no --configfile: config/config.yaml of the working directory) too
    pinned = snakemake("-n", workdir=tmp_path, timeout=300)
    assert pinned.returncode == 0, pinned.stderr
    assert "hub revisions pinned by" in pinned.stderr and "moving revision" not in pinned.stderr
