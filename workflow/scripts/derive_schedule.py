"""Derive a num_speculative_tokens_per_batch_size schedule from round 1's records."""

from sdbench.analyze.aggregate import aggregate_points, summarize
from sdbench.analyze.analysis import derive_schedule
from sdbench.files import atomic_write_json
from sdbench.plan.grid import dynamic_k_cell
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    spec = sm.params.spec
    points = aggregate_points(summarize(sm.input.round1, [],
                                        sm.config["loadgen"]["max_failure_share"]))
    schedule = derive_schedule(points, spec["target"], spec["workload"], spec["speculator"])
    cell = dynamic_k_cell(sm.config, spec, schedule)
    print(f"derived schedule for {spec['speculator']} on {spec['target']}/{spec['workload']}: "
          f"{schedule} -> cell {cell.cell_id}")
    atomic_write_json(sm.output.schedule, {**spec, "schedule": schedule, "cell_id": cell.cell_id})
