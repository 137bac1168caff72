# Papermill-executed notebooks -> offline HTML reports; index.html links them.


rule report_round1:
    input:
        summary="results/summary.parquet",
        notebook=NOTEBOOKS / "round1.ipynb",
    output:
        html="reports/round1.html",
        executed="results/notebooks/round1.ipynb",
    params:
        title="Round 1: methods vs no speculation",
    log:
        "logs/reports/round1.log",
    conda:
        ENV
    script:
        "../scripts/render_report.py"


rule index:
    input:
        report="reports/round1.html",
        summary="results/summary.parquet",
    output:
        "reports/index.html",
    params:
        cells=lambda wc: list(CELLS.values()),
        reports=REPORTS,
    log:
        "logs/reports/index.log",
    conda:
        ENV
    script:
        "../scripts/write_index.py"
