"""Derive a num_speculative_tokens_per_batch_size schedule from round 1's records, and the best
static k it is measured against (beside that k as a constant schedule)."""

from sdbench.analyze.aggregate import summarize
from sdbench.analyze.point_intervals import aggregate_points
from sdbench.analyze.schedule_analysis import best_static_k, derive_schedule
from sdbench.files import atomic_write_json
from sdbench.plan.dynamic_k import DERIVED_ARM, dynamic_k_arms
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    spec = sm.params.spec
    points = aggregate_points(summarize(sm.input.round1, [],
                                        sm.config["loadgen"]["max_failure_share"]))
    key = (spec["target"], spec["workload"], spec["speculator"])
    schedule = derive_schedule(points, *key)
    static_k = best_static_k(points, *key)
    arms = dynamic_k_arms(sm.config, spec, schedule, static_k)
    print(f"derived schedule for {spec['speculator']} on {spec['target']}/{spec['workload']}: "
          f"{schedule}, best static k {static_k} -> cells "
          + ", ".join(f"{c.cell_id} ({c.speculator})" for c in arms))
    atomic_write_json(sm.output.schedule, {**spec, "schedule": schedule, "static_k": static_k,
                                           "cell_id": arms[-1].cell_id,
                                           "arms": [c.cell_id for c in arms],
                                           "derived_cells": [c.cell_id for c in arms
                                                             if c.speculator.endswith(
                                                                 DERIVED_ARM)]})
