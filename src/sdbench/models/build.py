"""Build a model of the config from its source: a converted GGUF package, a hub download, or a
model derived from another (truncated, deepened, quantized, an untrained head or EAGLE head,
random weights)."""

from __future__ import annotations

from pathlib import Path

from sdbench.models.checkpoints import (
    ModelError,
    build_deepened,
    build_eagle_head,
    build_from_gguf,
    build_quantized,
    build_random,
    build_truncated,
    download_hf,
)
from sdbench.models.heads import build_random_head


def build_model(name: str, source: dict, base_dir: str | Path | None, out_dir: str | Path
                ) -> dict:
    """Build the model `name` of the config from its `source` (base_dir: the model a derived
    kind starts from)."""
    kind = source["kind"]
    if kind == "gguf_package":
        return build_from_gguf(name, source, out_dir)
    if kind == "hf":
        return download_hf(name, source, out_dir)
    builders = {"truncate": build_truncated, "eagle_head": build_eagle_head,
                "random_head": build_random_head,
                "quantize": build_quantized, "deepen": build_deepened,
                "random_init": build_random}
    if kind not in builders:
        raise ModelError(f"models.{name}.source.kind {kind!r} needs no build")
    return builders[kind](name, source, base_dir, out_dir)
