"""Round-to-nearest quantized checkpoints (4-bit GPTQ and AWQ, 8-bit W8A8 in the
compressed-tensors format), so that the embedded default compares quantized and full-precision
targets with no hub access.

The weights are rounded to the nearest level of a per-group grid (no calibration: what GPTQ and
AWQ add on top is better rounding, not another storage format) and written in each format's
standard packing, which vLLM's `gptq` and `awq` loaders (and transformers) read:

- GPTQ (AutoGPTQ "gptq" checkpoint format, symmetric, no act-order): `qweight` int32
  [in/8, out] packed along the input dimension, value i at bits 4i; `qzeros` int32
  [in/group, out/8] storing zero - 1 (the v1 convention; 7 for the symmetric zero 8);
  `scales` fp16 [in/group, out]; `g_idx` int32 [in]. w = scale * (q - 8).
- AWQ (AutoAWQ "gemm" version, with zero points): `qweight` int32 [in, out/8] packed along the
  output dimension in AWQ's interleaved order (bit slot s holds column AWQ_ORDER[s]);
  `qzeros` int32 [in/group, out/8] packed the same way; `scales` fp16 [in/group, out].
  w = scale * (q - zero).
- W8A8 (compressed-tensors "int-quantized", the scheme llm-compressor's `W8A8` preset writes):
  `weight` int8 [out, in], symmetric per output channel; `weight_scale` [out, 1] in the
  checkpoint's dtype; activations are quantized per token at run time (no stored scale).
  w = scale * q. vLLM's CPU build runs it through oneDNN's int8 GEMM, which its AVX2 extension
  has too: the quantized target every x86-64 CPU can serve (the 4-bit kernel is AVX-512 only).

vLLM's CPU 4-bit kernel needs input and output sizes that are multiples of 32 and an even
group size; `check_shapes` refuses a model that breaks that before anything is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

BITS = 4
PACK = 32 // BITS  # values per int32
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
# the projections of a Llama/Qwen decoder layer that GPTQ and AWQ checkpoints quantize
QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FORMATS = ("gptq", "awq", "w8a8")


class QuantizeError(ValueError):
    """A model or group size the 4-bit formats (or vLLM's CPU kernel) cannot take."""


def _pack(values: np.ndarray, axis: int, order: list[int] | None = None) -> np.ndarray:
    """Pack 4-bit values (0..15) eight to an int32 along `axis`."""
    values = np.moveaxis(values.astype(np.uint32), axis, -1)
    grouped = values.reshape(*values.shape[:-1], -1, PACK)
    if order is not None:
        grouped = grouped[..., order]
    shifts = np.arange(PACK, dtype=np.uint32) * BITS
    packed = np.bitwise_or.reduce(grouped << shifts, axis=-1).astype(np.uint32)
    return np.moveaxis(packed.view(np.int32), -1, axis)


def _unpack(packed: np.ndarray, axis: int, order: list[int] | None = None) -> np.ndarray:
    packed = np.moveaxis(packed.view(np.uint32), axis, -1)
    shifts = np.arange(PACK, dtype=np.uint32) * BITS
    slots = (packed[..., None] >> shifts) & 0xF
    if order is not None:
        columns = np.empty_like(slots)
        columns[..., order] = slots
        slots = columns
    values = slots.reshape(*packed.shape[:-1], -1)
    return np.moveaxis(values, -1, axis).astype(np.int64)


def _groups(weight: np.ndarray, group_size: int) -> np.ndarray:
    """[out, in] -> [in/group, group, out]: one row of groups per input block."""
    out_features, in_features = weight.shape
    return weight.T.reshape(in_features // group_size, group_size, out_features)


def quantize_gptq(weight: np.ndarray, group_size: int) -> dict[str, np.ndarray]:
    """Symmetric 4-bit RTN of a [out, in] float weight, as GPTQ tensors."""
    groups = _groups(weight.astype(np.float32), group_size)
    amax = np.abs(groups).max(axis=1)                        # [in/g, out]
    scales = np.where(amax > 0, 2 * amax / 15, 1.0).astype(np.float16)
    q = np.clip(np.rint(groups / scales.astype(np.float32)[:, None, :]) + 8, 0, 15)
    q = q.reshape(weight.shape[1], weight.shape[0])          # [in, out]
    zeros = np.full((scales.shape[0], weight.shape[0]), 8 - 1)
    return {"qweight": _pack(q, axis=0), "qzeros": _pack(zeros, axis=1), "scales": scales,
            "g_idx": (np.arange(weight.shape[1]) // group_size).astype(np.int32)}


def quantize_awq(weight: np.ndarray, group_size: int) -> dict[str, np.ndarray]:
    """Asymmetric 4-bit RTN (with zero points) of a [out, in] float weight, as AWQ tensors."""
    groups = _groups(weight.astype(np.float32), group_size)
    low, high = groups.min(axis=1), groups.max(axis=1)       # [in/g, out]
    span = high - low
    scales = np.where(span > 0, span / 15, 1.0).astype(np.float16)
    scale32 = scales.astype(np.float32)
    zeros = np.clip(np.rint(-low / scale32), 0, 15)
    q = np.clip(np.rint(groups / scale32[:, None, :]) + zeros[:, None, :], 0, 15)
    q = q.reshape(weight.shape[1], weight.shape[0])          # [in, out]
    return {"qweight": _pack(q, axis=1, order=AWQ_ORDER),
            "qzeros": _pack(zeros, axis=1, order=AWQ_ORDER), "scales": scales}


def quantize_w8a8(weight: np.ndarray) -> dict[str, np.ndarray]:
    """Symmetric 8-bit RTN per output channel of a [out, in] float weight (compressed-tensors)."""
    weight = weight.astype(np.float32)
    amax = np.abs(weight).max(axis=1, keepdims=True)        # [out, 1]
    scale = np.where(amax > 0, amax / 127, 1.0).astype(np.float32)
    q = np.clip(np.rint(weight / scale), -128, 127).astype(np.int8)
    return {"weight": q, "weight_scale": scale}


def dequantize(fmt: str, tensors: dict[str, np.ndarray], group_size: int) -> np.ndarray:
    """The [out, in] float weight a checkpoint's tensors stand for (the loaders' arithmetic)."""
    if fmt == "w8a8":
        return tensors["weight"].astype(np.float32) * tensors["weight_scale"].astype(np.float32)
    scales = tensors["scales"].astype(np.float32)           # [in/g, out]
    if fmt == "gptq":
        q = _unpack(tensors["qweight"], axis=0)              # [in, out]
        zeros = _unpack(tensors["qzeros"], axis=1) + 1       # v1 stores zero - 1
    elif fmt == "awq":
        q = _unpack(tensors["qweight"], axis=1, order=AWQ_ORDER)
        zeros = _unpack(tensors["qzeros"], axis=1, order=AWQ_ORDER)
    else:
        raise QuantizeError(f"unknown format {fmt!r}: one of {FORMATS}")
    rows = np.arange(q.shape[0]) // group_size
    return ((q - zeros[rows]) * scales[rows]).T


def quantization_config(fmt: str, group_size: int) -> dict:
    """The `quantization_config` block of config.json, as the real tools write it."""
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": BITS, "group_size": group_size,
                "desc_act": False, "sym": True, "true_sequential": True,
                "checkpoint_format": "gptq"}
    if fmt == "awq":
        return {"quant_method": "awq", "bits": BITS, "group_size": group_size,
                "zero_point": True, "version": "gemm", "modules_to_not_convert": None}
    if fmt == "w8a8":
        # written by compressed-tensors itself: the W8A8 preset (int8 weights per channel,
        # dynamic per-token int8 activations) on every Linear but the lm_head
        from compressed_tensors.quantization import (
            QuantizationConfig,
            QuantizationStatus,
            preset_name_to_scheme,
        )

        return QuantizationConfig(
            config_groups={"group_0": preset_name_to_scheme("W8A8", ["Linear"])},
            ignore=["lm_head"], format="int-quantized",
            quantization_status=QuantizationStatus.COMPRESSED).model_dump(mode="json")
    raise QuantizeError(f"unknown format {fmt!r}: one of {FORMATS}")


def planned_config(fmt: str, group_size: int) -> dict:
    """What `quantization_config` will say, without importing compressed-tensors (the plan
    reads it to decide where a checkpoint can run before the checkpoint exists)."""
    if fmt != "w8a8":
        return quantization_config(fmt, group_size)
    return {"quant_method": "compressed-tensors", "format": "int-quantized",
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"type": "int", "num_bits": 8, "strategy": "channel",
                            "symmetric": True, "dynamic": False},
                "input_activations": {"type": "int", "num_bits": 8, "strategy": "token",
                                      "symmetric": True, "dynamic": True}}}}


def check_shapes(shapes: dict[str, tuple[int, int]], group_size: int, where: str) -> None:
    """Refuse weights the 4-bit formats or vLLM's CPU kernel cannot take, naming the first."""
    if group_size % 2 or group_size < PACK:
        raise QuantizeError(f"{where}: group_size {group_size} must be even and at least {PACK}")
    for name, (out_features, in_features) in shapes.items():
        if in_features % group_size:
            raise QuantizeError(f"{where}: group_size {group_size} does not divide the input "
                                f"size {in_features} of {name}; pick a divisor of it")
        for size, what in ((in_features, "input"), (out_features, "output")):
            if size % 32:
                raise QuantizeError(f"{where}: {name} has {what} size {size}; vLLM's 4-bit "
                                    "kernels need multiples of 32")


def quantized_weights(state: dict, group_size: int, fmt: str, where: str) -> dict:
    """The model's state dict with every decoder projection replaced by its 4-bit tensors."""
    targets = {name[: -len(".weight")]: tensor for name, tensor in state.items()
               if name.endswith(".weight") and ".layers." in name
               and name.split(".")[-2] in QUANTIZED}
    if not targets:
        raise QuantizeError(f"{where}: no decoder projections ({', '.join(QUANTIZED)}) found")
    out = {name: tensor for name, tensor in state.items()
           if name[: -len(".weight")] not in targets}
    if fmt == "w8a8":
        for prefix, tensor in targets.items():
            for suffix, array in quantize_w8a8(tensor.float().numpy()).items():
                # the scale in the checkpoint's own dtype, as llm-compressor writes it
                out[f"{prefix}.{suffix}"] = (array if suffix == "weight" else
                                             _torch_from(array).to(tensor.dtype))
        return out
    check_shapes({n: tuple(t.shape) for n, t in targets.items()}, group_size, where)
    quantize = quantize_gptq if fmt == "gptq" else quantize_awq
    for prefix, tensor in targets.items():
        for suffix, array in quantize(tensor.float().numpy(), group_size).items():
            out[f"{prefix}.{suffix}"] = array
    return out


def _torch_from(array: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def build_quantized(name: str, source: dict, base_dir: str | Path, tmp: Path) -> dict:
    """Write a GPTQ, AWQ or W8A8 checkpoint of the bf16 model in `base_dir` into `tmp`; returns
    the card fields (quantization_config, max weight error)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fmt, group_size = source["format"], source["group_size"]
    where = f"models.{name}"
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: saved once, as the embedding
    packed = quantized_weights(state, group_size, fmt, where)
    tensors = {}
    for key, value in packed.items():
        tensors[key] = _torch_from(value) if isinstance(value, np.ndarray) else value.contiguous()
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config_dict = model.config.to_dict()  # the base model's config, read once with the model
    config_dict["quantization_config"] = quantization_config(fmt, group_size)
    config_dict["torch_dtype"] = "bfloat16"
    (tmp / "config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")
    if (Path(base_dir) / "generation_config.json").exists():
        shutil.copy(Path(base_dir) / "generation_config.json", tmp / "generation_config.json")
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(tmp)
    errors = [float(np.abs(dequantize(fmt, {s: _numpy(packed[f"{p}.{s}"]) for s in parts},
                                      group_size) - state[f"{p}.weight"].float().numpy()).max())
              for p in quantized_prefixes(packed, fmt)
              for parts in [("weight", "weight_scale") if fmt == "w8a8"
                            else ("qweight", "qzeros", "scales")]]
    note = ("8-bit round-to-nearest per output channel (no calibration), activations "
            "quantized per token at run time" if fmt == "w8a8" else
            "4-bit round-to-nearest (no calibration) in the format's standard packing")
    return {"quantization": quantization_config(fmt, group_size),
            "max_abs_weight_error": max(errors), "note": note}


def quantized_prefixes(packed: dict, fmt: str) -> list[str]:
    """The layers a quantized state dict holds quantized (by their tensor name prefix)."""
    marker = ".weight_scale" if fmt == "w8a8" else ".qweight"
    return sorted(k.removesuffix(marker) for k in packed if k.endswith(marker))


def _numpy(value) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.float().numpy()
