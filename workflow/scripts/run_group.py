"""Measure a group of cells (a baseline and its `interleave` cells): servers side by side,
points in turn, every point into the point cache (the cells' own jobs write their records)."""

from sdbench.measure.cell import run_group
from sdbench.plan.grid import Cell
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    run_group([Cell.from_dict(c) for c in sm.params.cells], sm.config, sm.output.manifest)
