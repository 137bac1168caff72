# Raw sources -> data/raw/<source>/ (hashed, with a manifest) -> processed prompt sets, one job
# per (dataset, subset) so that changing one bucket rebuilds that bucket alone.


rule fetch_source:
    output:
        raw="data/raw/{source}/{file}",
        manifest="data/raw/{source}/{file}.manifest.json",
    params:
        spec=lambda wc: config["sources"][wc.source],
    log:
        grid.FETCH_LOG,
    wildcard_constraints:
        file=r"[^/]+\.(jsonl|json|zip)",
    conda:
        ENV
    script:
        "../scripts/fetch_source.py"


rule prompts:
    input:
        unpack(prompt_inputs),
    output:
        records="data/processed/{dataset}/{subset}.jsonl",
        card="data/processed/{dataset}/{subset}.card.json",
    params:
        definition=lambda wc: grid.subset_definition(config, wc.dataset, wc.subset),
    log:
        grid.SUBSET_LOG,
    conda:
        ENV
    script:
        "../scripts/build_subset.py"
