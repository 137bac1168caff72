"""Aggregate every cell's records: per measurement (speedups paired by repeat, lossless check)
and per point (means and 95 % intervals over repeats)."""

from sdbench.aggregate import build_summary, write_summary
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    frame, points = build_summary(sm.input.records, [],
                                  sm.config["loadgen"]["max_failure_share"], sm.params.models,
                                  sm.params.index)
    write_summary(frame, sm.output.parquet, sm.output.csv)
    write_summary(points, sm.output.points_parquet, sm.output.points_csv)
    print(f"{len(frame)} measurements, {len(points)} points, "
          f"{int(frame['paired'].sum())} measurements with a speedup")
