"""Untrained speculator heads in the layouts vLLM loads (`kind: random_head`): EAGLE, EAGLE-3,
Medusa, MLP speculator and DFlash shapes derived from the target's config, random weights,
so that each method's code path runs without a download."""

from __future__ import annotations

import json
from pathlib import Path

from sdbench.models.checkpoints import (
    ModelError,
    _atomic_dir,
    _write_card,
    random_tensors,
    with_text_config,
)

# `kind: random_head`: an untrained speculator in the checkpoint layout vLLM loads for each
# method, sized from its target's config; the defaults are the published heads' own configs
# (EAGLE-3: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B; Medusa: FasterDecoding/medusa-vicuna-7b-v1.3
# as converted for vLLM, abhigoyal/vllm-medusa-vicuna-7b-v1.3; MLP speculator:
# ibm-ai-platform/llama3-8b-accelerator). Their cost is the trained head's; their acceptance is
# nothing (set it with vLLM's synthetic rejection sampling). DFlash: the layout of z-lab's
# drafts for Qwen3 targets (z-lab/Qwen3-8B-DFlash-b16; z-lab/dflash's dflash/model.py): 5
# non-causal Qwen3 layers over the hidden states of 5 target layers, blocks of 16.
HEAD_DEFAULTS = {
    "eagle3": {"num_hidden_layers": 1, "draft_vocab_size": 32000},
    "medusa": {"num_heads": 5, "num_hidden_layers": 1},
    "mlp_speculator": {"n_predict": 4, "inner_dim": 3072, "tie_weights": True,
                       "scale_input": True},
    "dflash": {"num_hidden_layers": 5, "block_size": 16},
}


# the target config's keys a drafter in the target's own architecture copies
TARGET_KEYS = ("hidden_act", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "rms_norm_eps", "max_position_embeddings", "rope_theta", "rope_scaling",
               "rope_parameters", "bos_token_id", "eos_token_id", "head_dim")


def dflash_target_layers(target_layers: int, draft_layers: int) -> list[int]:
    """The target layers whose hidden states a DFlash draft reads: spread evenly from layer 1
    to the fourth-last (z-lab/dflash's `build_target_layer_ids`; Qwen3-8B's 36 layers and 5
    draft layers give 1, 9, 17, 25, 33)."""
    if draft_layers == 1:
        return [target_layers // 2]
    span = target_layers - 4
    return [int(round(1 + i * span / (draft_layers - 1))) for i in range(draft_layers)]


def dflash_layout(target: dict, spec: dict, mask_token_id: int
                  ) -> tuple[dict, dict[str, tuple[int, ...]]]:
    """(config.json, tensor shapes) of a DFlash draft for a Qwen3 target, as vLLM 0.26-0.32
    loads it (vllm/model_executor/models/qwen3_dflash.py, `DFlashDraftModel`): its own
    decoder layers (Qwen3's, with q/k norms), `fc` from the target layers' hidden states,
    `hidden_norm` and `norm`; the embedding and the LM head are the target's."""
    if target.get("model_type") != "qwen3":
        raise ModelError("a DFlash draft is built for a Qwen3 target (vLLM's qwen3_dflash), "
                         f"not model_type {target.get('model_type')!r}")
    layers = int(spec["num_hidden_layers"])
    read = spec.get("target_layer_ids") or dflash_target_layers(
        target["num_hidden_layers"], layers)
    hidden, heads, kv = (target["hidden_size"], target["num_attention_heads"],
                         target["num_key_value_heads"])
    head_dim = target.get("head_dim") or hidden // heads
    inter = target["intermediate_size"]
    config = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
              **{k: target[k] for k in TARGET_KEYS if target.get(k) is not None},
              "hidden_size": hidden, "vocab_size": target["vocab_size"],
              "num_hidden_layers": layers, "num_target_layers": target["num_hidden_layers"],
              "tie_word_embeddings": False, "block_size": int(spec["block_size"]),
              "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": read}}
    shapes = {"fc.weight": (hidden, len(read) * hidden), "hidden_norm.weight": (hidden,),
              "norm.weight": (hidden,)}
    for i in range(layers):
        shapes.update({
            f"layers.{i}.input_layernorm.weight": (hidden,),
            f"layers.{i}.post_attention_layernorm.weight": (hidden,),
            f"layers.{i}.self_attn.q_proj.weight": (heads * head_dim, hidden),
            f"layers.{i}.self_attn.k_proj.weight": (kv * head_dim, hidden),
            f"layers.{i}.self_attn.v_proj.weight": (kv * head_dim, hidden),
            f"layers.{i}.self_attn.o_proj.weight": (hidden, heads * head_dim),
            f"layers.{i}.self_attn.q_norm.weight": (head_dim,),
            f"layers.{i}.self_attn.k_norm.weight": (head_dim,),
            f"layers.{i}.mlp.gate_proj.weight": (inter, hidden),
            f"layers.{i}.mlp.up_proj.weight": (inter, hidden),
            f"layers.{i}.mlp.down_proj.weight": (hidden, inter)})
    return config, shapes


def head_layout(method: str, target: dict, overrides: dict | None = None,
                tokens: int | None = None) -> tuple[dict, dict[str, tuple[int, ...]]]:
    """(config.json, {tensor name: shape}) of a `method` head for a target whose Hugging Face
    config is `target`, in the layout vLLM 0.26-0.32 loads (vllm/model_executor/models/
    llama_eagle3.py, medusa.py, mlp_speculator.py, qwen3_dflash.py). `tokens`: the length of
    the target's tokenizer (DFlash's mask token is the first id past it, as z-lab's drafts add
    one)."""
    if method not in HEAD_DEFAULTS:
        raise ModelError(f"a random head of method {method!r}: known are "
                         f"{sorted(HEAD_DEFAULTS)}")
    spec = {**HEAD_DEFAULTS[method], **(overrides or {})}
    hidden, vocab = target["hidden_size"], target["vocab_size"]
    if method == "dflash":
        mask = vocab - 1 if tokens is None or tokens >= vocab else tokens
        return dflash_layout(target, spec, mask)
    if method == "medusa":
        config = {"architectures": ["MedusaModel"], "model_type": "medusa",
                  "hidden_size": hidden, "vocab_size": vocab, **spec}
        shapes = {f"blocks.{i}.layers.{j}.weight": (hidden, hidden)
                  for i in range(spec["num_heads"]) for j in range(spec["num_hidden_layers"])}
        shapes.update({f"lm_heads.{i}.weight": (vocab, hidden)
                       for i in range(spec["num_heads"])})
        return config, shapes
    if method == "mlp_speculator":
        n, inner = spec["n_predict"], spec["inner_dim"] or hidden
        config = {"architectures": ["MLPSpeculatorPreTrainedModel"],
                  "model_type": "mlp_speculator", "emb_dim": hidden, "vocab_size": vocab,
                  "top_k_tokens_per_head": [1] * n, "n_candidates": 1, **spec}
        distinct = 1 if spec["tie_weights"] else n  # tied: one embedding, one norm, two projs
        shapes = {f"emb.{i}.weight": (vocab, inner) for i in range(distinct)}
        shapes.update({f"proj.{i}.weight": (inner, hidden if i == 0 else inner)
                       for i in range(2 if spec["tie_weights"] else n)})
        shapes.update({f"head.{i}.weight": (vocab, inner) for i in range(n)})
        for i in range(distinct):
            shapes[f"ln.{i}.weight"] = shapes[f"ln.{i}.bias"] = (inner,)
        return config, shapes
    # eagle3: one decoder layer whose attention reads [embedding, fc(3 target hidden states)]
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
              **{k: target[k] for k in TARGET_KEYS if k != "rope_parameters"
                 and target.get(k) is not None},
              "hidden_size": hidden, "vocab_size": vocab, "tie_word_embeddings": False,
              **spec}
    config["draft_vocab_size"] = min(config["draft_vocab_size"], vocab)
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    inter, draft_vocab = config["intermediate_size"], config["draft_vocab_size"]
    layer = "midlayer"
    shapes = {f"{layer}.hidden_norm.weight": (hidden,),
              f"{layer}.input_layernorm.weight": (hidden,),
              f"{layer}.post_attention_layernorm.weight": (hidden,),
              f"{layer}.self_attn.q_proj.weight": (heads * head_dim, 2 * hidden),
              f"{layer}.self_attn.k_proj.weight": (kv * head_dim, 2 * hidden),
              f"{layer}.self_attn.v_proj.weight": (kv * head_dim, 2 * hidden),
              f"{layer}.self_attn.o_proj.weight": (hidden, heads * head_dim),
              f"{layer}.mlp.gate_proj.weight": (inter, hidden),
              f"{layer}.mlp.up_proj.weight": (inter, hidden),
              f"{layer}.mlp.down_proj.weight": (hidden, inter),
              "fc.weight": (hidden, 3 * hidden), "norm.weight": (hidden,),
              "lm_head.weight": (draft_vocab, hidden)}
    if draft_vocab < vocab:
        shapes["d2t"] = (draft_vocab,)  # draft id -> target id offsets (zeros: the first ids)
    return config, shapes


def build_random_head(name: str, source: dict, base_dir: str | Path, out_dir: str | Path
                      ) -> dict:
    """An untrained `source.method` head for the model in `base_dir` (`head_layout`): normal
    weights (std 0.02, norms 1, seeded), the target's tokenizer."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    target = with_text_config(json.loads((Path(base_dir) / "config.json").read_text()))
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    config, shapes = head_layout(source["method"], target, source.get("config"),
                                 tokens=len(tokenizer))
    weights = random_tensors({k: v for k, v in shapes.items() if k != "d2t"},
                             source.get("seed", 0))
    if "d2t" in shapes:
        weights["d2t"] = torch.zeros(shapes["d2t"], dtype=torch.long)
    with _atomic_dir(out_dir) as tmp:
        save_file(weights, tmp / "model.safetensors", metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"},
                                                    indent=1))
        tokenizer.save_pretrained(tmp)
        card = _write_card(tmp, name, source, {
            "dtype": "bfloat16", "trained": False, "method": source["method"],
            "parameters": sum(w.numel() for w in weights.values()),
            "note": f"UNTRAINED {source['method']} head (random weights) in the published "
                    "heads' layout: its cost is a trained head's, its acceptance nothing; "
                    "measure it with synthetic acceptance"})
    return card
