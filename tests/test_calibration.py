"""The calibration pair (a deeper target made of no-op layers, the base model its exact draft)
and the speedup predicted from measured step times."""

import math

import numpy as np
import pandas as pd
import pytest

from sdbench.analyze.step_model import _step_time, predicted_speedups
from sdbench.models import checkpoints as models
from sdbench.report.plots import calibration_table


def test_deepened_weights_put_zeroed_copies_after_each_layer():
    import torch

    weights = {"model.embed_tokens.weight": torch.randn(8, 4), "model.norm.weight": torch.ones(4)}
    for i in range(2):
        for name in ("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj",
                     "input_layernorm"):
            weights[f"model.layers.{i}.{name}.weight"] = torch.randn(4, 4) + 5
    deep = models.deepen_state_dict(weights, layers=2, noop_per_layer=2)
    assert models.deepened_layout(2, 2) == [0, None, None, 1, None, None]
    assert {int(k.split(".")[2]) for k in deep if k.startswith("model.layers.")} == set(range(6))
    for new, base in ((0, 0), (3, 1)):  # the real layers, unchanged, at their new places
        for name in ("self_attn.o_proj", "mlp.down_proj", "self_attn.q_proj"):
            assert torch.equal(deep[f"model.layers.{new}.{name}.weight"],
                               weights[f"model.layers.{base}.{name}.weight"])
    for new, base in ((1, 0), (2, 0), (4, 1), (5, 1)):  # no-op copies of the layer before
        assert not deep[f"model.layers.{new}.self_attn.o_proj.weight"].any()
        assert not deep[f"model.layers.{new}.mlp.down_proj.weight"].any()
        assert torch.equal(deep[f"model.layers.{new}.self_attn.q_proj.weight"],
                           weights[f"model.layers.{base}.self_attn.q_proj.weight"])
    assert torch.equal(deep["model.embed_tokens.weight"], weights["model.embed_tokens.weight"])
    assert weights["model.layers.0.mlp.down_proj.weight"].any()  # the base is not modified


def test_the_deeper_model_computes_exactly_what_the_base_model_does(tmp_path,
                                                                   demo_tokenizer_dir):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True)
    base = LlamaForCausalLM(config).eval()
    base.save_pretrained(tmp_path / "base")
    AutoTokenizer.from_pretrained(demo_tokenizer_dir).save_pretrained(tmp_path / "base")
    card = models.build_deepened("deep", {"kind": "deepen", "model": "base", "noop_per_layer": 2},
                                 tmp_path / "base", tmp_path / "deep")
    assert card["layers"] == 9 and card["base_layers"] == 3 and card["files"]
    deep = LlamaForCausalLM.from_pretrained(tmp_path / "deep").eval()
    assert deep.config.num_hidden_layers == 9
    ids = torch.randint(0, 49152, (2, 12))
    with torch.no_grad():
        assert torch.equal(deep(ids).logits, base(ids).logits)  # bit for bit
        assert torch.equal(deep.generate(ids, max_new_tokens=8, do_sample=False),
                           base.generate(ids, max_new_tokens=8, do_sample=False))


def test_step_times_interpolate_and_extrapolate_on_a_line_in_the_sequences():
    """A step over c sequences costs a fixed part and a part per sequence: between measured
    levels the step time lies on their straight line, beyond them on the last two's (the
    log-log curve, used until 2026-11-29, gives 12.65 and 100 here)."""
    import numpy as np

    levels, times = np.array([1.0, 4.0, 16.0]), np.array([10.0, 16.0, 40.0])
    assert _step_time(levels, times, 4) == (16.0, "measured")
    value, how = _step_time(levels, times, 2)
    assert how == "interpolated" and value == pytest.approx(12.0)
    value, how = _step_time(levels, times, 64)
    assert how == "extrapolated" and value == pytest.approx(136.0)  # 2 ms a sequence
    assert math.isnan(_step_time(levels[:1], times[:1], 4)[0])
    # a line falling to zero or below has no step time there
    assert math.isnan(_step_time(np.array([4.0, 16.0]), np.array([16.0, 4.0]), 64)[0])


def _point(target, method, c, tpot, workload="w", draft=None, k=None, tau=None, measured=None):
    return {"round": "round1", "setting": "default", "engine": "serve", "load": "concurrency",
            "target": target, "draft": draft, "method": method, "k": k, "workload": workload,
            "concurrency": c, "mean_tpot_ms_mean": tpot,
            "spec_decode_acceptance_length_mean": tau, "tpot_speedup_mean": measured,
            "spec_decode_acceptance_rate_mean": None if tau is None else (tau - 1) / k * 100,
            "tpot_speedup_ci_low": None if measured is None else measured * 0.9,
            "tpot_speedup_ci_high": None if measured is None else measured * 1.1,
            "speedup_mean": measured}


def test_predicted_speedup_uses_each_side_s_own_step_times_and_flags_a_gap():
    target_ms = {1: 10.0, 4: 14.0, 16: 30.0}
    draft_ms = {1: 4.0, 4: 5.0, 16: 9.0}
    verify_64 = 30.0 + (64 - 16) * (30.0 - 14.0) / (16 - 4)  # on the line through 4 and 16
    expected = {1: 3.5 * 10 / (3 * 4 + 14), 4: 3.5 * 14 / (3 * 5 + 30),
                16: 3.5 * 30 / (3 * 9 + verify_64)}
    rows = []
    for c in (1, 4, 16):
        rows += [_point("deep", "vanilla", c, target_ms[c]), _point("base", "vanilla", c,
                                                                    draft_ms[c]),
                 # another workload with other times must not leak into this one's prediction
                 _point("deep", "vanilla", c, 99.0, workload="other"),
                 _point("deep", "draft_model", c, None, draft="base", k=3, tau=3.5,
                        measured=expected[c] * (0.7 if c == 16 else 1.0)),
                 # a draft never measured as a target: nothing to predict from
                 _point("deep", "draft_model", c, None, draft="unmeasured", k=3, tau=3.5,
                        measured=1.0)]
    table = predicted_speedups(pd.DataFrame(rows)).set_index("concurrency")
    assert list(table.index) == [1, 4, 16] and set(table["draft"]) == {"base"}
    for c in (1, 4, 16):
        assert table.loc[c, "predicted"] == pytest.approx(expected[c])
    assert table.loc[1, "verify_from"] == "target at c=4 (measured)"
    assert table.loc[16, "verify_from"] == "target at c=64 (extrapolated)"
    assert table.loc[1, "ratio"] == pytest.approx(1.0)
    assert table.loc[1, "reading"].startswith("as predicted")
    assert table.loc[16, "ratio"] == pytest.approx(0.7)
    assert table.loc[16, "reading"].startswith("measured 30% below the prediction")
    assert table.loc[16, "ratio_ci_low"] == pytest.approx(0.63)
    assert table.loc[1, "acceptance_rate"] == pytest.approx(250 / 3)  # 2.5 of 3 drafts
    # a pair that does not agree says so (here 2.5 of 3 drafted tokens accepted: 83 %)
    assert "acceptance 83.3 % < 95 %: not an exact draft" in table.loc[1, "reading"]
    # drafts accepted at a set rate: said so, not flagged as an inexact draft
    simulated = predicted_speedups(pd.DataFrame(rows).assign(simulated_acceptance=3.5))
    assert simulated["reading"].str.endswith(
        "simulated: drafts accepted at a set length 3.5").all()
    # a workload measured at one level only (a sampled variant at concurrency 1): the
    # verification pass has no step time, and the row says so instead of "nan %"
    one = [r for r in rows if r["concurrency"] == 1]
    alone = predicted_speedups(pd.DataFrame(one)).iloc[0]
    assert np.isnan(alone["predicted"])
    assert alone["reading"].startswith("no prediction: the verification pass at c=4 needs")
    shown = calibration_table(pd.DataFrame(one)).iloc[0]
    assert shown["predicted TPOT speedup"] == "–" and "nan" not in " ".join(map(str, shown))


def test_a_start_of_turn_eos_becomes_the_end_of_turn_token(demo_tokenizer_dir):
    from transformers import AutoTokenizer, LlamaConfig

    tokenizer = AutoTokenizer.from_pretrained(demo_tokenizer_dir)
    config = LlamaConfig(eos_token_id=1)
    assert models.fix_end_of_turn(tokenizer, config) is None  # EOS is not BOS: left alone
    tokenizer.eos_token = tokenizer.bos_token  # what some GGUF conversions report
    assert tokenizer.eos_token == "<|im_start|>"
    assert models.fix_end_of_turn(tokenizer, config) == "<|im_end|>"
    assert tokenizer.eos_token == "<|im_end|>"
    assert config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>") == 2


def test_a_random_model_has_the_shape_asked_for_and_the_donor_s_tokenizer(tmp_path,
                                                                         demo_tokenizer_dir):
    from transformers import AutoConfig

    source = {"kind": "random_init", "model": "demo", "seed": 0, "config": {
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 49152, "tie_word_embeddings": False}}
    card = models.build_random("r", source, demo_tokenizer_dir, tmp_path / "r")
    config = AutoConfig.from_pretrained(tmp_path / "r")
    assert (config.model_type, config.hidden_size, config.num_hidden_layers) == ("qwen2", 64, 2)
    assert config.eos_token_id == 2 and (tmp_path / "r" / "tokenizer.json").is_file()
    assert card["parameters"] > 2 * 49152 * 64  # embeddings and an untied head
    with pytest.raises(models.ModelError, match="vocab_size = 100"):
        models.build_random("r", {**source, "config": {**source["config"], "vocab_size": 100}},
                            demo_tokenizer_dir, tmp_path / "r2")


def test_a_random_model_with_mtp_layers_is_one_vllm_serves_with_method_mtp(
        tmp_path, demo_tokenizer_dir):
    """`random_init` with `mtp_layers`: a Qwen2 model with untrained MTP layers in MiMo-7B's
    layout, which vLLM's speculative config reads as MiMo's MTP draft (its own override), the
    tensors in the shapes it loads; a Llama config is refused by name."""
    from safetensors.torch import load_file
    from vllm.config.speculative import SpeculativeConfig
    from vllm.transformers_utils.config import get_config

    source = {"kind": "random_init", "model": "demo", "seed": 0, "mtp_layers": 1, "config": {
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 49152, "tie_word_embeddings": False}}
    card = models.build_random("m", source, demo_tokenizer_dir, tmp_path / "m")
    weights = load_file(tmp_path / "m" / models.MTP_FILE)
    shapes = models.mtp_layout(source["config"], 1)
    assert {k: tuple(v.shape) for k, v in weights.items()} == shapes
    assert shapes["model.mtp_layers.0.input_proj.weight"] == (64, 128)
    assert "UNTRAINED MTP" in card["note"]
    read = get_config(str(tmp_path / "m"), trust_remote_code=False)
    assert read.architectures == ["MiMoForCausalLM"] and read.num_nextn_predict_layers == 1
    draft = SpeculativeConfig.hf_config_override(read)
    assert draft.architectures == ["MiMoMTPModel"] and draft.n_predict == 1
    with pytest.raises(models.ModelError, match="mtp_layers = 1: .* qwen2"):
        models.build_random("l", {**source, "config": {**source["config"],
                                                       "model_type": "llama"}},
                            demo_tokenizer_dir, tmp_path / "l")


def test_the_gpu_calibration_study_plans_the_pair_at_7b_scale():
    from pathlib import Path

    from sdbench.plan import dynamic_k, grid
    from sdbench.plan.config import load_config

    config = load_config(Path(__file__).resolve().parents[1] / "config"
                         / "gpu-calibration.yaml")
    cells = grid.all_cells(config)
    # Spec-Bench greedy and sampled at 1.0 (spec_bench-t1), summarization greedy; the pair
    # with a probabilistic draft at 1.0 only (the known answer under sampling)
    assert sorted(c.label for c in cells) == sorted(
        [f"{setting} | {workload}" for setting in (
            "calibration k=4 | qwen7b-shape-calib", "vanilla | qwen7b-shape-2l",
            "vanilla | qwen7b-shape-calib")
         for workload in ("spec_bench", "spec_bench-t1", "spec_bench_summarization")]
        + ["calibration-probabilistic k=4 | qwen7b-shape-calib | spec_bench-t1"])
    # the pair (and so its baseline) over 2 server instances: one session per configuration
    # instance serves all its workloads
    from sdbench.plan import sessions

    by_id = {c.cell_id: c for c in cells}
    assert {c.server_config["target"]["name"]: c.instances for c in cells
            if c.speculator != "calibration-probabilistic"} == {
        "qwen7b-shape-2l": 1, "qwen7b-shape-calib": 2}
    planned = sessions.plan_sessions(by_id)
    assert len(planned) == 6
    assert sorted(len(s.cells) for s in planned.values()) == [1, 3, 3, 3, 3, 3]
    # the draft is the target's first 2 layers: the same random weights, built once
    models = config["models"]
    assert models["qwen7b-shape-calib"]["source"] == {
        "kind": "deepen", "model": "qwen7b-shape-2l", "noop_per_layer": 13}
    shape = models["qwen7b-shape-2l"]["source"]["config"]
    assert shape["num_hidden_layers"] * (1 + 13) == 28 and shape["hidden_size"] == 3584
    # a derived schedule on the first workload only (its split's server starts are the
    # config's largest cost after round 1)
    assert [(s["speculator"], s["workload"]) for s in dynamic_k.dynamic_k_specs(config)] == [
        ("calibration", "spec_bench")]
