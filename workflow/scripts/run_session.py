"""Run one server session: its server starts once and measures every due point of every cell
of its configuration instance (sdbench.measure.session)."""

from sdbench.measure.session import run_session
from sdbench.plan.sessions import Session
from sdbench.plan.specs import Cell
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    cells = {c["cell_id"]: Cell.from_dict(c) for c in sm.params.cells}
    baselines = {name.removeprefix("baseline_"): path for name, path in sm.input.items()
                 if name.startswith("baseline_")}
    run_session(Session.from_dict(sm.params.session), cells, sm.config, sm.output.manifest,
                baseline_records=baselines)
