"""Write reports/index.html: links to the reports, the failures, the status of every cell."""

import pandas as pd

from sdbench.analyze.decisions import read_decisions
from sdbench.plan.lock import unpinned
from sdbench.report.pages import (
    failed_jobs,
    index_bottom_line,
    problem_points,
    stopped_points,
    write_index,
)
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    summary = pd.read_parquet(sm.input.summary)
    write_index(sm.config["study"], sm.params.reports, sm.params.cells, sm.output[0],
                problem_points(summary), jobs=failed_jobs(sm.config),
                unpinned=unpinned(sm.config), stopped=stopped_points(summary),
                bottom_line=index_bottom_line(summary, pd.read_parquet(sm.input.points),
                                              sm.params.reports,
                                              read_decisions(sm.input.decisions)))
