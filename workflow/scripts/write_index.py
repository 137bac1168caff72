"""Write reports/index.html: links to the reports, the failures, the status of every cell."""

import pandas as pd

from sdbench.grid import cell_output
from sdbench.report import problem_points, write_index
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    cells = [(cell, cell_output(cell.cell_id)) for cell in sm.params.cells]
    write_index(sm.config["study"], sm.params.reports, cells, sm.output[0],
                problem_points(pd.read_parquet(sm.input.summary)))
