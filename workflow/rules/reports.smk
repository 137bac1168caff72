# Papermill-executed notebooks -> offline HTML reports; index.html links them.


rule report:
    input:
        # the summary stage's tables: the only files a report reads
        **SUMMARY.as_dict(),
        notebook=NOTEBOOKS / "{round}.ipynb",
    output:
        html=report(
            "reports/{round}.html",
            caption="../report/round.rst",
            category="Reports",
            labels={"report": "{round}"},
        ),
        executed="results/notebooks/{round}.ipynb",
    params:
        title=lambda wc: ROUND_TITLES[wc.round],
    log:
        "logs/reports/{round}.log",
    benchmark:
        timing.benchmark_file("report", "{round}")
    conda:
        ENV
    script:
        "../scripts/render_report.py"


rule index:
    input:
        reports=[f"reports/{page}" for page in REPORTS.values()],
        summary=SUMMARY.summary,
        # each cell's status is read from its records file
        records=all_cell_records(),
    output:
        report(
            "reports/index.html",
            caption="../report/index.rst",
            category="Reports",
            labels={"report": "index"},
        ),
    params:
        cells=lambda wc: listed_cells(),
        reports=REPORTS,
    log:
        "logs/reports/index.log",
    benchmark:
        timing.benchmark_file("index", "index")
    conda:
        ENV
    script:
        "../scripts/write_index.py"
