"""Measure the cell of a derived dynamic-K schedule (its own rule derives the schedule): its
sessions serve it alone, one per server instance."""

from sdbench.measure.cell import measure_cell
from sdbench.plan.grid import read_dynamic_k_cell
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    cell = read_dynamic_k_cell(sm.config, sm.params.spec, sm.input.schedule)
    print(f"measuring the schedule of {sm.input.schedule}: cell {cell.cell_id}")
    measure_cell(cell, sm.config, sm.output.records)
