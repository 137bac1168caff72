"""One layout: every path the workflow reads or writes is spelled in sdbench.layout only."""

import re

from sdbench import layout
from sdbench.layout import SummaryTables

GENERATED = ("results", "logs", "data", "resources", "reports", "benchmarks")


def test_no_rule_script_or_library_module_spells_a_path_of_its_own(repo):
    literal = re.compile("[\"'](" + "|".join(GENERATED) + ")/")
    files = [*(repo / "src").rglob("*.py"), *(repo / "workflow" / "rules").glob("*.smk"),
             *(repo / "workflow" / "scripts").glob("*.py"), repo / "Snakefile"]
    offenders = [f"{path.relative_to(repo)}:{number}: {line.strip()}"
                 for path in files if path.name != "layout.py"
                 for number, line in enumerate(path.read_text().splitlines(), start=1)
                 if literal.search(line)]
    assert offenders == []


def test_a_cell_s_files_sit_beside_its_records_and_its_logs_mirror_them():
    output = layout.cell_output("abc123def456")
    assert str(layout.requests_output(output)) == "results/cells/abc123def456.requests.jsonl.gz"
    assert str(layout.partial_output(output)) == "results/cells/abc123def456.jsonl.partial"
    assert str(layout.error_output(output)) == "results/cells/abc123def456.error.json"
    assert str(layout.cell_log(output)) == layout.CELL_LOG.format(cell_id="abc123def456")
    derived = layout.dynamic_k_output("t", "w", "ngram")
    assert str(layout.cell_log(derived)) == layout.DERIVED_LOG.format(
        target="t", workload="w", speculator="ngram")


def test_a_salvaged_run_s_tables_sit_beside_the_run_s():
    run, salvaged = SummaryTables.of_run(), SummaryTables.of_run(incomplete=True)
    assert salvaged.summary == "results/summary.incomplete.parquet"
    assert salvaged.points_csv == "results/summary_points.incomplete.csv"
    assert set(run.as_dict()) == set(salvaged.as_dict())
    assert not set(run.as_dict().values()) & set(salvaged.as_dict().values())
    assert run.notebook_parameters()["cards_path"] == run.cards
