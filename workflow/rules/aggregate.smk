# Every cell's records -> one row per measurement (speedups, lossless check) and one row per
# point (means and 95 % intervals over repeats).


rule summary:
    input:
        records=all_cell_records(),
        models=list(SUMMARY_MODELS.values()),
    output:
        parquet="results/summary.parquet",
        csv=report(
            "results/summary.csv",
            caption="../report/summary.rst",
            category="Tables",
            labels={"table": "one row per measurement"},
        ),
        points_parquet="results/summary_points.parquet",
        points_csv=report(
            "results/summary_points.csv",
            caption="../report/summary.rst",
            category="Tables",
            labels={"table": "one row per load point"},
        ),
    params:
        models=SUMMARY_MODELS,
        index=SUMMARY_INDEX,
    log:
        "logs/summary.log",
    benchmark:
        timing.benchmark_file("summary", "summary")
    conda:
        ENV
    script:
        "../scripts/summarize.py"
