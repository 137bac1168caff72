# Model checkpoints under resources/models/<name>/: hub downloads (download_model, a local rule:
# under a cluster executor it runs on the submitting node, which has the network and the
# token), GGUF conversion and the derived kinds (model: truncation, quantization, ...). Models
# of kind `path` are used in place and have no rule.


rule download_model:
    output:
        directory(layout.model_folder("{model}")),
    params:
        source=lambda wc: specs.model_source(config, wc.model),
    log:
        layout.MODEL_LOG,
    benchmark:
        layout.benchmark_file("model", "{model}")
    wildcard_constraints:
        model=names_regex(HUB_MODELS),
    priority: unlocking_priority
    conda:
        ENV
    script:
        "../scripts/build_model.py"


rule model:
    input:
        unpack(model_build_inputs),
    output:
        directory(layout.model_folder("{model}")),
    params:
        source=lambda wc: specs.model_source(config, wc.model),
    log:
        layout.MODEL_LOG,
    benchmark:
        layout.benchmark_file("model", "{model}")
    wildcard_constraints:
        model=names_regex(BUILT_MODELS),
    priority: unlocking_priority
    conda:
        ENV
    script:
        "../scripts/build_model.py"
