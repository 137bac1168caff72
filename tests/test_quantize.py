"""Quantized checkpoints: 4-bit GPTQ/AWQ packing (values survive a round trip, the error stays
within half a level, the AWQ order is the one vLLM's loader undoes, bad shapes are refused by
name) and W8A8 in the compressed-tensors format."""

import numpy as np
import pytest
import torch

from sdbench.models import quantize


@pytest.fixture
def weight():
    rng = np.random.default_rng(0)
    return rng.normal(0, 0.05, size=(96, 128)).astype(np.float32)  # [out, in]


@pytest.mark.parametrize("fmt", ("gptq", "awq"))
def test_dequantized_weight_is_within_half_a_level(weight, fmt):
    tensors = (quantize.quantize_gptq if fmt == "gptq" else quantize.quantize_awq)(weight, 32)
    restored = quantize.dequantize(fmt, tensors, 32)
    assert restored.shape == weight.shape
    step = tensors["scales"].astype(np.float32)                       # [in/g, out]
    bound = np.repeat(step, 32, axis=0).T / 2 + 1e-6                  # [out, in]
    assert (np.abs(restored - weight) <= bound * 1.01).all()
    assert np.abs(restored - weight).max() > 0  # 4 bits do lose something
    # a coarser grid loses more
    coarse = (quantize.quantize_gptq if fmt == "gptq" else quantize.quantize_awq)(weight, 128)
    assert np.abs(quantize.dequantize(fmt, coarse, 128) - weight).mean() > \
        np.abs(restored - weight).mean()


def test_gptq_layout_is_the_standard_one(weight):
    t = quantize.quantize_gptq(weight, 32)
    assert t["qweight"].dtype == np.int32 and t["qweight"].shape == (128 // 8, 96)
    assert t["qzeros"].shape == (4, 96 // 8) and (t["qzeros"].view(np.uint32) == 0x77777777).all()
    assert t["scales"].dtype == np.float16 and t["scales"].shape == (4, 96)
    assert list(t["g_idx"][[0, 31, 32, 127]]) == [0, 0, 1, 3]
    # value of input row 8*i + j sits at bits 4j of qweight[i]
    q = np.clip(np.rint(weight.T[:8, 0] / t["scales"][0, 0].astype(np.float32)) + 8, 0, 15)
    word = int(t["qweight"][0, 0].view(np.uint32))
    assert [(word >> (4 * j)) & 0xF for j in range(8)] == [int(v) for v in q]


def test_awq_order_is_the_one_vllm_undoes(weight, monkeypatch):
    from vllm.model_executor import parameter
    from vllm.model_executor.layers.quantization.auto_awq import (
        _convert_awq_to_standard_format,
    )

    # a single-process loader: tensor parallelism of 1 (no process group is set up here)
    monkeypatch.setattr(parameter, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(parameter, "get_tensor_model_parallel_world_size", lambda: 1)

    t = quantize.quantize_awq(weight, 32)
    assert t["qweight"].shape == (128, 96 // 8) and t["qzeros"].shape == (4, 96 // 8)
    layer = torch.nn.Module()
    layer.qweight = torch.nn.Parameter(torch.from_numpy(t["qweight"].copy()),
                                       requires_grad=False)
    layer.qzeros = torch.nn.Parameter(torch.from_numpy(t["qzeros"].copy()), requires_grad=False)
    _convert_awq_to_standard_format(layer, "qweight", "qzeros", 4)
    # vLLM's result is packed along the input dimension in the standard order: unpack it
    standard = quantize._unpack(layer.qweight.data.numpy(), axis=0)      # [in, out]
    ours = quantize._unpack(t["qweight"], axis=1, order=quantize.AWQ_ORDER)
    assert (standard == ours).all()
    zeros = quantize._unpack(layer.qzeros.data.numpy(), axis=0).T        # [groups, out]
    assert (zeros == quantize._unpack(t["qzeros"], axis=1, order=quantize.AWQ_ORDER)).all()


def test_shapes_the_cpu_kernel_cannot_take_are_refused():
    with pytest.raises(quantize.QuantizeError, match="does not divide the input size 576"):
        quantize.check_shapes({"model.layers.0.mlp.up_proj": (1536, 576)}, 128, "models.q")
    with pytest.raises(quantize.QuantizeError, match="output size 200"):
        quantize.check_shapes({"model.layers.0.self_attn.k_proj": (200, 576)}, 64, "models.q")
    with pytest.raises(quantize.QuantizeError, match="must be even"):
        quantize.check_shapes({}, 33, "models.q")
    quantize.check_shapes({"model.layers.0.mlp.up_proj": (1536, 576)}, 64, "models.q")


def test_config_blocks_are_what_the_loaders_read():
    gptq = quantize.quantization_config("gptq", 64)
    assert (gptq["quant_method"], gptq["bits"], gptq["sym"], gptq["desc_act"]) == \
        ("gptq", 4, True, False)
    awq = quantize.quantization_config("awq", 64)
    assert (awq["quant_method"], awq["zero_point"], awq["version"]) == ("awq", True, "gemm")


def test_w8a8_is_per_channel_int8_within_half_a_level(weight):
    weight = weight.copy()
    weight[3] *= 40  # an outlier channel gets its own scale, the others keep theirs
    t = quantize.quantize_w8a8(weight)
    assert t["weight"].dtype == np.int8 and t["weight"].shape == weight.shape
    assert t["weight_scale"].shape == (96, 1)
    assert np.abs(t["weight"]).max() == 127
    restored = quantize.dequantize("w8a8", t, 0)
    assert (np.abs(restored - weight) <= t["weight_scale"] / 2 * 1.001).all()
    assert t["weight_scale"][3, 0] > 30 * t["weight_scale"][2, 0]
    # 8 bits per channel lose far less than 4 bits per group of 32
    gptq = quantize.dequantize("gptq", quantize.quantize_gptq(weight, 32), 32)
    assert np.abs(restored - weight).mean() < np.abs(gptq - weight).mean() / 4


def test_w8a8_state_dict_keeps_the_checkpoint_dtype_for_scales():
    state = {"model.layers.0.mlp.up_proj.weight": torch.randn(64, 32, dtype=torch.bfloat16),
             "model.norm.weight": torch.ones(32, dtype=torch.bfloat16)}
    packed = quantize.quantized_weights(state, 64, "w8a8", "models.q")
    assert packed["model.layers.0.mlp.up_proj.weight"].dtype == np.int8
    assert packed["model.layers.0.mlp.up_proj.weight_scale"].dtype == torch.bfloat16
    assert packed["model.norm.weight"] is state["model.norm.weight"]
    assert quantize.quantized_prefixes(packed, "w8a8") == ["model.layers.0.mlp.up_proj"]


def test_a_w8a8_model_must_declare_compressed_tensors(demo_config_raw):
    import copy

    from sdbench.plan.config import ConfigError, validate_config

    config = copy.deepcopy(demo_config_raw)
    config["models"]["smollm2-135m-w8a8"]["quantization"] = "gptq"
    with pytest.raises(ConfigError, match="declare `quantization: compressed-tensors`"):
        validate_config(config)
