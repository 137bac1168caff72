"""The summary stage: per measurement (speedups paired by repeat, lossless check), per point
(means and 95 % intervals over repeats), per-bucket speedups, dynamic-K schedules and data
cards: every table the reports read."""

from sdbench.analyze.summary import write_tables
from sdbench.layout import SummaryTables
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    tables = SummaryTables(**{name: sm.output[name] for name in SummaryTables().as_dict()})
    frame, points = write_tables(tables, sm.input.records, [],
                                 sm.config["loadgen"]["max_failure_share"], sm.params.models,
                                 sm.params.index, sm.input.schedules)
    print(f"{len(frame)} measurements, {len(points)} points, "
          f"{int(frame['paired'].sum())} measurements with a speedup")
