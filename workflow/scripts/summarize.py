"""Aggregate every cell's records into results/summary.{parquet,csv} with speedups."""

from sdbench.aggregate import summarize, write_summary
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    frame = summarize(sm.input.records)
    write_summary(frame, sm.output.parquet, sm.output.csv)
    print(f"{len(frame)} points, {int(frame['paired'].sum())} with a speedup")
