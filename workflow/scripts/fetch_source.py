"""Fetch (or generate) one raw source into data/raw/ with its manifest."""

from sdbench.data.sources import fetch_source, skipped_summary
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - the snakemake object is injected by Snakemake
with to_log(sm.log[0]) as say:
    manifest = fetch_source(sm.wildcards.source, sm.params.spec, sm.output.raw,
                            sm.output.manifest)
    say(f"{skipped_summary(manifest)}; sha256 {manifest['sha256']}")
