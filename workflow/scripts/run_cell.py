"""Run one cell (server config x workload): start vLLM, sweep concurrency, write records."""

from sdbench.measure.cell import run_cell
from sdbench.plan.grid import Cell
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log.cell):
    run_cell(Cell.from_dict(sm.params.cell), sm.config, sm.output.records,
             server_log=sm.log.server, baseline_records=sm.input.get("baseline"))
