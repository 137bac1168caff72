# Speculative-decoding benchmark workflow for vLLM.
#
#   snakemake --cores all --resources gpu=N                                 # the real study
#   snakemake --cores all --resources gpu=1 --configfile config/demo.yaml   # the CPU demo
#   snakemake --profile workflow/profiles/slurm                             # on SLURM
#
# A --configfile replaces config/config.yaml (it is not merged into it).

if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/reports.smk"


# under a cluster executor these run on the submitting node: downloads need its network, the
# summary and the reports take seconds
localrules:
    all,
    fetch_source,
    summary,
    report,
    index,


onstart:
    preflight_check()


onerror:
    salvage_reports()


rule all:
    default_target: True
    input:
        "reports/index.html",
        [f"reports/{page}" for page in REPORTS.values()],
        all_prompt_sets(),
        # directly too: after a failed run the reports exist (listing the failures) and only
        # the missing cells make a rerun redo the cells, the summary and the reports
        all_cell_records(),
