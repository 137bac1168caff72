# Speculative-decoding benchmark workflow for vLLM. Run from the repository root (Snakemake
# finds this Snakefile there, and its defaults in profiles/default: --keep-going, so that one
# failed cell costs that cell only). Rules, scripts, notebooks and schemas live in workflow/:
#
#   snakemake --cores all --resources gpu=N                                 # the real study
#   snakemake --cores all --resources gpu=1 --configfile config/demo.yaml   # the CPU demo
#   snakemake --profile profiles/slurm                                      # on SLURM
#
# A --configfile replaces config/config.yaml (it is not merged into it).

if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# Snakemake's own report (snakemake --report report.zip) bundles the three round reports, the
# index and the summary tables (outputs marked report(...))
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/reports.smk"


# under a cluster executor these run on the submitting node: downloads need its network (and
# the hub token); a cell's records (from its sessions' manifests), a dynamic-K schedule, the
# summary and the reports take seconds
localrules:
    all,
    inputs,
    fetch_source,
    download_model,
    cell,
    dynamic_k_schedule,
    summary,
    report,
    methods,
    index,


onstart:
    preflight_check()


onerror:
    salvage_reports()


rule all:
    default_target: True
    input:
        layout.report_page("index.html"),
        [layout.report_page(page) for page in REPORTS.values()],
        all_prompt_sets(),
        # directly too: after a failed run the reports exist (listing the failures) and only
        # the missing cells make a rerun redo the cells, the summary and the reports
        all_cell_records(),


# `snakemake inputs`: every prompt set and every model the cells this host runs read, built
# without starting a server (their cards read, a failed build fixed, before any measuring)
rule inputs:
    input:
        all_prompt_sets(),
        all_models(),
