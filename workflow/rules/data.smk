# Raw sources -> data/raw/<source>/ (hashed, with a manifest) -> processed prompt sets.


rule fetch_source:
    output:
        raw="data/raw/{source}/{file}",
        manifest="data/raw/{source}/{file}.manifest.json",
    params:
        spec=lambda wc: config["sources"][wc.source],
    log:
        "logs/data/fetch_{source}_{file}.log",
    wildcard_constraints:
        file=r"[^/]+\.jsonl",
    conda:
        ENV
    script:
        "../scripts/fetch_source.py"


# one rule per dataset builder: each writes all of its subsets and the data card in one job
for builder in BUILDER_SUBSETS:

    rule:
        name:
            f"{builder}_prompts"
        input:
            unpack(dataset_inputs),
        output:
            processed_outputs(builder),
            card="data/processed/{dataset}/card.json",
        params:
            dataset=lambda wc: config["datasets"][wc.dataset],
            out_dir=lambda wc: f"data/processed/{wc.dataset}",
        log:
            "logs/data/build_{dataset}.log",
        wildcard_constraints:
            dataset=names_regex(datasets_of(builder)),
        conda:
            ENV
        script:
            "../scripts/build_dataset.py"
