"""Download, convert or derive one model checkpoint into resources/models/<name>/."""

from sdbench.models.build import build_model
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    name, source, out = sm.wildcards.model, sm.params.source, sm.output[0]
    card = build_model(name, source, sm.input.get("base"), out)
    print(f"{name}: {len(card['files'])} files in {out}")
