# Papermill-executed notebooks -> offline HTML reports; index.html links them.


rule report:
    input:
        # the summary stage's tables: the only files a report reads
        **SUMMARY.as_dict(),
        notebook=NOTEBOOKS / "{round}.ipynb",
    output:
        html=report(
            layout.report_page("{round}.html"),
            caption="../report/round.rst",
            category="Reports",
            labels={"report": "{round}"},
        ),
        executed=layout.executed_notebook("{round}"),
    params:
        title=lambda wc: ROUND_TITLES[wc.round],
    log:
        layout.REPORT_LOG,
    benchmark:
        layout.benchmark_file("report", "{round}")
    conda:
        ENV
    script:
        "../scripts/render_report.py"


rule methods:
    input:
        # each report section's explanation, written in its notebook
        notebooks=[NOTEBOOKS / page.replace(".html", ".ipynb") for page in REPORTS.values()],
        text=NOTEBOOKS / "methods.md",
    output:
        report(
            layout.report_page("methods.html"),
            caption="../report/methods.rst",
            category="Reports",
            labels={"report": "methods"},
        ),
    params:
        titles=list(REPORTS),
    log:
        layout.REPORT_LOG.format(round="methods"),
    conda:
        ENV
    script:
        "../scripts/write_methods.py"


rule index:
    input:
        reports=[layout.report_page(page) for page in REPORTS.values()],
        methods=layout.report_page("methods.html"),
        summary=SUMMARY.summary,
        # the rounds' bottom lines
        points=SUMMARY.points,
        decisions=SUMMARY.decisions,
        # each cell's status is read from its records file
        records=all_cell_records(),
    output:
        report(
            layout.report_page("index.html"),
            caption="../report/index.rst",
            category="Reports",
            labels={"report": "index"},
        ),
    params:
        cells=lambda wc: listed_cells(),
        reports=REPORTS,
    log:
        layout.INDEX_LOG,
    benchmark:
        layout.benchmark_file("index", "index")
    conda:
        ENV
    script:
        "../scripts/write_index.py"
