"""Execute a report notebook with papermill and export it to offline HTML with nbconvert."""

from sdbench.report import render_report
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    render_report(sm.input.notebook, sm.output.executed, sm.output.html,
                  {"summary_path": sm.input.summary, "points_path": sm.input.points,
                   "study": sm.config["study"]},
                  title=f"{sm.params.title} — {sm.config['study']}")
