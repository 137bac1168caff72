"""Download, convert or derive one model checkpoint into resources/models/<name>/."""

from sdbench import models
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    name, source, out = sm.wildcards.model, sm.params.source, sm.output[0]
    if source["kind"] == "gguf_package":
        card = models.build_from_gguf(name, source, out)
    elif source["kind"] == "truncate":
        card = models.build_truncated(name, source, sm.input.base, out)
    elif source["kind"] == "eagle_head":
        card = models.build_eagle_head(name, source, sm.input.base, out)
    elif source["kind"] == "quantize":
        card = models.build_quantized(name, source, sm.input.base, out)
    elif source["kind"] == "hf":
        card = models.download_hf(name, source, out)
    else:
        raise models.ModelError(f"models.{name}.source.kind {source['kind']!r} needs no build")
    print(f"{name}: {len(card['files'])} files in {out}")
