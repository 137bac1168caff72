"""Measure a derived dynamic-K schedule (its own rule derives it) with the best static k and
that k as a constant schedule: each on its own servers, taking turns by server instance."""

from sdbench.measure.cell import measure_in_turns
from sdbench.plan.dynamic_k import read_dynamic_k_arms
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    arms = read_dynamic_k_arms(sm.config, sm.params.spec, sm.input.schedule)
    print(f"measuring the schedule of {sm.input.schedule}: cells "
          + ", ".join(f"{c.cell_id} ({c.speculator})" for c in arms))
    measure_in_turns(arms, sm.config, sm.output.records)
