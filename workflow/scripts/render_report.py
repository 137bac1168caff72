"""Execute a report notebook with papermill and export it to offline HTML with nbconvert."""

from sdbench.layout import SummaryTables
from sdbench.report.pages import render_report
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    tables = SummaryTables(**{name: sm.input[name] for name in SummaryTables().as_dict()})
    render_report(sm.input.notebook, sm.output.executed, sm.output.html, tables,
                  sm.config["study"], title=f"{sm.params.title} — {sm.config['study']}")
