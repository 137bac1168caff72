"""Every path the workflow reads or writes, in one place: the rules' outputs and logs and the
library's readers both take them from here (relative to the working directory).

    data/raw/<source>/<file>                  a raw source and its .manifest.json
    data/processed/<dataset>/<subset>.jsonl   a prompt set and its .card.json
    resources/models/<model>/                 a built or downloaded checkpoint
    results/cells/<cell id>.jsonl             a cell's records (.partial until it finishes),
                                              .requests.jsonl.gz, .error.json
    results/points/<cell id>/                 the point cache
    results/sessions/<session id>.json        a session's manifest (what it measured, and its
                                              time split); standalone/: sessions of one cell
    results/derived/<target>/<workload>/<method>.jsonl   a dynamic-K cell; .schedule.json
    results/profiles/<cell id>/               Nsight Systems reports
    results/summary*                          the summary stage's tables (`SummaryTables`)
    results/notebooks/<round>.ipynb           an executed report notebook
    reports/<round>.html, reports/index.html  the reports
    logs/...                                  one log per job (the patterns below)
    logs/points/<cell id>.jsonl               every load-generator run of a cell, by which job
                                              (appended across attempts, never reset)
    benchmarks/<rule>/<job>.tsv               Snakemake's per-job timing
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

RAW_DIR = "data/raw"
PROCESSED_DIR = "data/processed"
MODELS_DIR = "resources/models"
CELLS_DIR = "results/cells"
POINTS_DIR = "results/points"
SESSIONS_DIR = "results/sessions"
DERIVED_DIR = "results/derived"
PROFILES_DIR = "results/profiles"
EXECUTED_DIR = "results/notebooks"
VALIDATION_DIR = "results/validation"
REPORTS_DIR = "reports"
BENCHMARKS_DIR = "benchmarks"

# job logs (the rules' `log:` patterns; the index reads them to say why a job failed)
FETCH_LOG = "logs/data/fetch_{source}_{file}.log"
SUBSET_LOG = "logs/data/{dataset}/{subset}.log"
MODEL_LOG = "logs/models/{model}.log"
CELL_LOG = "logs/cells/{cell_id}.log"
SESSION_LOG = "logs/sessions/{session_id}.log"
SESSION_SERVER_LOG = "logs/sessions/{session_id}/{config_id}.server.log"
DERIVED_LOG = "logs/derived/{target}/{workload}/{speculator}.log"
SCHEDULE_LOG = "logs/derived/{target}/{workload}/{speculator}.schedule.log"
SUMMARY_LOG = "logs/summary.log"
REPORT_LOG = "logs/reports/{round}.log"
INDEX_LOG = "logs/reports/index.log"


# --- data and models -------------------------------------------------------------------------

def raw_file(source: str, name: str) -> str:
    """A source's raw copy (`data.sources.raw_name` names it)."""
    return f"{RAW_DIR}/{source}/{name}"


def manifest_of(raw: str | Path) -> str:
    """The manifest beside a raw copy: origin, size, sha256, rows."""
    return f"{raw}.manifest.json"


def processed_path(dataset: str, subset: str) -> str:
    return f"{PROCESSED_DIR}/{dataset}/{subset}.jsonl"


def card_path(dataset: str, subset: str) -> str:
    return f"{PROCESSED_DIR}/{dataset}/{subset}.card.json"


def prompt_sets(workloads) -> list[str]:
    """The processed prompt files and data cards of these workloads (summary inputs)."""
    keys = sorted({(w["dataset"], w["subset"]) for w in workloads})
    return [path for key in keys for path in (processed_path(*key), card_path(*key))]


def model_folder(name: str) -> str:
    """Where a built or downloaded model lives (a `path` model stays where the user keeps it:
    `specs.model_dir`)."""
    return f"{MODELS_DIR}/{name}"


# --- cells -----------------------------------------------------------------------------------

def cell_output(cell_id: str) -> str:
    return f"{CELLS_DIR}/{cell_id}.jsonl"


def requests_output(output: str | Path) -> Path:
    """Sidecar with the per-request detail (texts, latencies) of every point of a cell."""
    output = Path(output)
    return output.with_name(output.name.removesuffix(".jsonl") + ".requests.jsonl.gz")


def partial_output(output: str | Path) -> Path:
    """The records of a cell that has not finished (renamed onto the output when it does)."""
    output = Path(output)
    return output.with_name(output.name + ".partial")


def error_output(output: str | Path) -> Path:
    """Written when a cell fails: why, for the index and the reports (removed on success)."""
    output = Path(output)
    return output.with_name(output.name.removesuffix(".jsonl") + ".error.json")


def cell_log(output: str | Path) -> Path:
    """A cell job's log, beside its records under logs/ (results/cells/<id>.jsonl ->
    logs/cells/<id>.log; derived cells alike)."""
    output = Path(output)
    parts = output.parts
    if "results" in parts:
        index = parts.index("results")
        output = Path(*parts[:index], "logs", *parts[index + 1:])
    return output.with_name(output.name.removesuffix(".jsonl") + ".log")


def point_cache(cell_id: str) -> Path:
    """The folder of a cell's cached measurements, one file per point."""
    return Path(POINTS_DIR) / cell_id


def measured_journal(cell_id: str) -> Path:
    """A line per point measured for a cell, whichever attempt or job measured it: what each
    attempt of a killed and resumed session did, and that none measured a point twice (beside
    the logs: the point cache holds valid points only, and Snakemake clears a job's own log
    before each attempt)."""
    return Path("logs") / "points" / f"{cell_id}.jsonl"


def partial_lock(cell_id: str) -> Path:
    """What the sessions of a cell's server instances lock while they rewrite its partial
    records (`files.locked` adds .lock)."""
    return Path(".sdbench/locks") / cell_id


def profile_dir(cell_id: str) -> Path:
    return Path(PROFILES_DIR) / cell_id


def session_output(session_id: str) -> str:
    """A session's manifest: per cell its points in the point cache (or why it is not done),
    and the session's time split."""
    return f"{SESSIONS_DIR}/{session_id}.json"


def standalone_session_output(cell_id: str, instance: int) -> str:
    """The manifest of a session that served one cell alone (a derived dynamic-K cell, a cell
    run from the command line)."""
    return f"{SESSIONS_DIR}/standalone/{cell_id}-i{instance}.json"


def session_server_log(session_id: str, config_id: str) -> str:
    """The log of a session's server of one configuration (every start of it appends)."""
    return SESSION_SERVER_LOG.format(session_id=session_id, config_id=config_id)


def dynamic_k_output(target: str, workload: str, speculator: str) -> str:
    return f"{DERIVED_DIR}/{target}/{workload}/{speculator}.jsonl"


def dynamic_k_schedule_path(target: str, workload: str, speculator: str) -> str:
    """The derived schedule (its own job, from round 1's records) the dynamic-K cell measures."""
    return f"{DERIVED_DIR}/{target}/{workload}/{speculator}.schedule.json"


# --- summary and reports ---------------------------------------------------------------------

@dataclass(frozen=True)
class SummaryTables:
    """Where the summary stage writes its tables (the notebooks' parameters by these names)."""

    summary: str = "results/summary.parquet"
    points: str = "results/summary_points.parquet"
    buckets: str = "results/summary_buckets.parquet"
    acceptance: str = "results/summary_acceptance.parquet"
    schedules: str = "results/summary_schedules.json"
    cards: str = "results/summary_cards.json"
    # the decisions (`analyze.decisions`), computed once here; CSV beside it
    decisions: str = "results/decisions.parquet"

    @classmethod
    def of_run(cls, incomplete: bool = False) -> SummaryTables:
        """The tables of a run; those of a salvaged (failed) run sit beside them."""
        if not incomplete:
            return cls()
        return cls(**{f.name: _incomplete(f.default) for f in fields(cls)})

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def notebook_parameters(self) -> dict[str, str]:
        """The report notebooks' parameters: summary_path, points_path, ..."""
        return {f"{name}_path": str(path) for name, path in asdict(self).items()}

    @property
    def summary_csv(self) -> str:
        return str(Path(self.summary).with_suffix(".csv"))

    @property
    def decisions_csv(self) -> str:
        return str(Path(self.decisions).with_suffix(".csv"))

    @property
    def points_csv(self) -> str:
        return str(Path(self.points).with_suffix(".csv"))


def _incomplete(path: str) -> str:
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}.incomplete{dot}{suffix}"


def report_page(page: str) -> str:
    """A report page by its file name (round1.html, index.html)."""
    return f"{REPORTS_DIR}/{page}"


def executed_notebook(name: str) -> str:
    """The executed notebook behind a report page (name: round1, round1.incomplete)."""
    return f"{EXECUTED_DIR}/{name}.ipynb"


def benchmark_file(rule: str, name: str) -> str:
    """The benchmark file of one job of `rule` (Snakemake writes its wall time there)."""
    return f"{BENCHMARKS_DIR}/{rule}/{name}.tsv"
