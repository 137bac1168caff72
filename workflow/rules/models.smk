# Model checkpoints under resources/models/<name>/ (hub download, GGUF conversion, truncation).
# Models of kind `path` are used in place and have no rule.


rule model:
    input:
        unpack(model_build_inputs),
    output:
        directory("resources/models/{model}"),
    params:
        source=lambda wc: config["models"][wc.model]["source"],
    log:
        grid.MODEL_LOG,
    benchmark:
        timing.benchmark_file("model", "{model}")
    conda:
        ENV
    script:
        "../scripts/build_model.py"
