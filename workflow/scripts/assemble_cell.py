"""Write one cell's records from the manifests of the sessions that measured it."""

from sdbench.measure.cell import assemble
from sdbench.plan.specs import Cell
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    assemble(Cell.from_dict(sm.params.cell), list(sm.input.sessions), sm.output.records)
