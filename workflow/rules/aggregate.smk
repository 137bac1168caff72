# The summary stage: every cell's records -> one row per measurement (speedups, lossless check),
# one row per point (means and 95 % intervals over repeats), and the other tables the reports
# read (per-bucket speedups, dynamic-K schedules, data cards): a report reads nothing else.


rule summary:
    input:
        unpack(summary_inputs),
    output:
        summary=SUMMARY.summary,
        csv=report(
            SUMMARY.summary_csv,
            caption="../report/summary.rst",
            category="Tables",
            labels={"table": "one row per measurement"},
        ),
        points=SUMMARY.points,
        points_csv=report(
            SUMMARY.points_csv,
            caption="../report/summary.rst",
            category="Tables",
            labels={"table": "one row per load point"},
        ),
        buckets=SUMMARY.buckets,
        acceptance=SUMMARY.acceptance,
        schedules=SUMMARY.schedules,
        cards=SUMMARY.cards,
        decisions=SUMMARY.decisions,
        decisions_csv=report(
            SUMMARY.decisions_csv,
            caption="../report/summary.rst",
            category="Tables",
            labels={"table": "the decisions"},
        ),
    params:
        models=SUMMARY_MODELS,
        index=SUMMARY_INDEX,
    log:
        layout.SUMMARY_LOG,
    benchmark:
        layout.benchmark_file("summary", "summary")
    conda:
        ENV
    script:
        "../scripts/summarize.py"
