# Every cell's records -> one row per measurement (speedups, lossless check) and one row per
# point (means and 95 % intervals over repeats).


rule summary:
    input:
        records=all_cell_records(),
        models=list(SUMMARY_MODELS.values()),
    output:
        parquet="results/summary.parquet",
        csv="results/summary.csv",
        points_parquet="results/summary_points.parquet",
        points_csv="results/summary_points.csv",
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
