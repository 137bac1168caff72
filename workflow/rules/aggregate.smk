# Every cell's records -> one tidy table with speedups against the matching vanilla point.


rule summary:
    input:
        records=all_cell_records(),
    output:
        parquet="results/summary.parquet",
        csv="results/summary.csv",
    log:
        "logs/summary.log",
    conda:
        ENV
    script:
        "../scripts/summarize.py"
