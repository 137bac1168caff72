# Raw sources -> data/raw/<source>/ (hashed, with a manifest) -> processed prompt sets, one job
# per (dataset, subset) so that changing one bucket rebuilds that bucket alone.


# A local source file is an input (editing it reruns the fetch), and its size and mtime are a
# param: a file replaced by one with an older mtime reruns it too.
rule fetch_source:
    input:
        lambda wc: local_files(config["sources"][wc.source]),
    output:
        raw=layout.raw_file("{source}", "{file}"),
        manifest=layout.manifest_of(layout.raw_file("{source}", "{file}")),
    params:
        spec=lambda wc: config["sources"][wc.source],
        local=lambda wc: fingerprint(config["sources"][wc.source]),
    log:
        layout.FETCH_LOG,
    benchmark:
        layout.benchmark_file("fetch_source", "{source}/{file}")
    wildcard_constraints:
        file=r"[^/]+\.(jsonl|json|parquet|zip)",
    priority: unlocking_priority
    conda:
        ENV
    script:
        "../scripts/fetch_source.py"


rule prompts:
    input:
        unpack(prompt_inputs),
    output:
        records=layout.processed_path("{dataset}", "{subset}"),
        card=layout.card_path("{dataset}", "{subset}"),
    params:
        definition=lambda wc: specs.subset_definition(config, wc.dataset, wc.subset),
    log:
        layout.SUBSET_LOG,
    benchmark:
        layout.benchmark_file("prompts", "{dataset}/{subset}")
    priority: unlocking_priority
    conda:
        ENV
    script:
        "../scripts/build_subset.py"
