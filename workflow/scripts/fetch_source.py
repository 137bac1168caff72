"""Fetch (or generate) one raw source into data/raw/ with its manifest."""

from sdbench.data.sources import fetch_source
from sdbench.script_log import to_log

with to_log(snakemake.log[0]):  # noqa: F821 - the snakemake object is injected by Snakemake
    manifest = fetch_source(snakemake.wildcards.source, snakemake.params.spec,  # noqa: F821
                            snakemake.output.raw, snakemake.output.manifest)  # noqa: F821
    print(f"{manifest['source']}: {manifest['rows']} usable rows, skipped {manifest['skipped']}, "
          f"sha256 {manifest['sha256']}")
