# Config -> grid of cells, input functions and wildcard constraints. All logic is in the
# sdbench library (src/); this file only connects it to Snakemake.
import os
import re
import sys
from pathlib import Path

# workflow.basedir is the main Snakefile's folder: the repository root
REPO = Path(workflow.basedir)
SRC = str(REPO / "src")
sys.path.insert(0, SRC)
# scripts and notebooks run in child processes: let them import the library too
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))

from sdbench.plan import (
    adaptive,
    checks,
    design_choice,
    dynamic_k,
    grid,
    hostcaps,
    inputs,
    lock,
    preflight,
    rates,
    runtimes,
    sessions,
    specs,
)
from sdbench import layout
from sdbench.measure import provenance
from sdbench.layout import SummaryTables
from sdbench.plan.config import DERIVED_KINDS, ROUNDS, validate_config
from sdbench.plan.settings import ROUND_TITLES
from sdbench.data.builders import subsets_of
from sdbench.data.sources import fingerprint, local_files, manifest_path, raw_path

CONFIG_SOURCE = ", ".join(map(str, workflow.overwrite_configfiles)) or "config/config.yaml"
validate_config(config, source=CONFIG_SOURCE)
# hub revisions pinned to commits by `python -m sdbench.plan.lock` (a lock file beside the config)
LOCK_NOTES = lock.apply_files(config, workflow.configfiles)
if workflow.is_main_process and LOCK_NOTES:
    print("\n".join(LOCK_NOTES), file=sys.stderr)
checks.check_installed(config, source=CONFIG_SOURCE)
# the local files prompt sets are built from: missing, unreadable or too short stops here
inputs.check_sources(config, source=CONFIG_SOURCE)
# `adaptive.chain: auto`: the design the plan projects cheaper, chosen once per config
design_choice.resolve_design(config)

CELLS = grid.cells_by_id(config)
# server sessions: one per configuration instance (with the configurations interleaved with
# it), each measuring every cell of its configuration (sdbench.plan.sessions)
SESSIONS = sessions.plan_sessions(CELLS)
CHAINED_PAIRS = sessions.chained_pairs(CELLS)
# baseline -> the cells paired with it: a session job's cells are its own and their families
FAMILIES = sessions.families(CELLS)
DYNAMIC_K = {
    (spec["target"], spec["workload"], spec["speculator"]): spec
    for spec in dynamic_k.dynamic_k_specs(config)
}
CELL_THREADS = (
    workflow.cores if config["cells"]["threads"] == "all" else config["cells"]["threads"]
)
ENV = "../../environment.yml"
# a cell job reruns when the vLLM build changes (its point cache then measures again)
VLLM_BUILD = provenance.vllm_distribution()
# what this host decides for each cell before it runs (unsupported here, `dtype: host`): a
# cell job reruns when that changes (e.g. the results moved to a host with AVX-512)
HOST_PLAN = hostcaps.host_plan(config, CELLS)
if workflow.is_main_process and hostcaps.plan_message(HOST_PLAN, CELLS):
    print(hostcaps.plan_message(HOST_PLAN, CELLS), file=sys.stderr)
# files of the workflow itself, found wherever the working directory is (snakemake -d ...)
NOTEBOOKS = REPO / "workflow" / "notebooks"


def names_regex(names):
    """Wildcard constraint matching exactly these names (or nothing when there are none)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


ALL_SUBSETS = {s for d in config["datasets"].values() for s in subsets_of(d)}
# hub checkpoints are downloaded on the submitting node (download_model, a local rule: it has
# the network); the others are converted or derived (model, a job like any other)
HUB_MODELS = [n for n, m in config["models"].items() if m["source"]["kind"] == "hf"]
BUILT_MODELS = [
    n for n, m in config["models"].items() if m["source"]["kind"] not in ("path", "hf")
]


wildcard_constraints:
    cell_id="[0-9a-f]{12}",
    session_id=sessions.SESSION_ID_PATTERN,
    round="round[123]",
    target=names_regex({t for (t, _, _) in DYNAMIC_K}),
    workload=names_regex(config["round1"]["workloads"]),
    speculator=names_regex({s for (_, _, s) in DYNAMIC_K}),
    source=names_regex(config["sources"]),
    model=names_regex(BUILT_MODELS + HUB_MODELS),
    dataset=names_regex(config["datasets"]),
    subset=names_regex(ALL_SUBSETS),


def model_input(name):
    """What a job needing model `name` depends on: its built directory, or the user's path."""
    return specs.model_dir(config, name)


def cell_inputs(wildcards):
    """A cell's own job reads the manifests of its sessions (one per server instance)."""
    return {"sessions": [layout.session_output(s)
                         for s in sessions.cell_sessions(CELLS[wildcards.cell_id], CELLS)]}


_CELL_DICTS = {}


def cell_dict(cell_id):
    """A cell as a job's params carry it (`Cell.to_dict`), made once a parse: a session's
    family shares its cells with the other sessions of its baselines."""
    if cell_id not in _CELL_DICTS:
        _CELL_DICTS[cell_id] = CELLS[cell_id].to_dict()
    return _CELL_DICTS[cell_id]


def session_cells(wildcards):
    return [CELLS[c] for c in SESSIONS[wildcards.session_id].cells]


def session_inputs(wildcards):
    """What a session needs: every cell's prompts and models (but the models of a cell this
    host cannot run), and for a duration-bounded speculative cell its baseline's records (their
    prompt counts), as for one measured on its own under the adaptive rule (its stops). A
    chained cell's stage (`adaptive.chain`) waits instead for the sessions of its chain
    before it (`sessions.chain_inputs`)."""
    inputs, prompts, models = {}, {}, {}
    session = SESSIONS[wildcards.session_id]
    for cell in session_cells(wildcards):
        prompts[cell.workload["path"]] = None
        if HOST_PLAN[cell.cell_id]["unsupported_here"]:
            continue  # recorded as unsupported here: its models are never loaded (nor built)
        models.update(dict.fromkeys(model_input(name) for name in specs.cell_models(cell)))
        if cell.chain:
            for sid in sessions.chain_inputs(cell, session.instance, CELLS,
                                            CHAINED_PAIRS):
                inputs[f"chain_{sid}"] = layout.session_output(sid)
        elif specs.sends_baseline_counts(cell) or adaptive.reads_baseline(config, cell):
            inputs[f"baseline_{cell.cell_id}"] = layout.cell_output(cell.baseline_cell_id)
    # each file once (a configuration's cells share its models; Snakemake formats, checks and
    # prints every input of every job)
    return {"prompts": list(prompts), "models": list(models), **inputs}


def session_gpus(wildcards):
    """GPUs of a session: its server's, or the sum of servers side by side; none where this
    host's plan has every cell of it unsupported (no server starts: a cluster job of it asks
    for no GPU)."""
    session = SESSIONS[wildcards.session_id]
    if all(HOST_PLAN[c.cell_id]["unsupported_here"] for c in session_cells(wildcards)):
        return 0
    first = {c.config_id: c for c in session_cells(wildcards)}
    counts = [specs.cell_gpus(c.server_config) for c in first.values()]
    return sum(counts) if session.interleaved else counts[0]


def session_runtime(wildcards, attempt):
    """Minutes a session may run (cells.runtime; `auto`: from its work, more on a retry)."""
    return runtimes.session_minutes(config, SESSIONS[wildcards.session_id], CELLS, attempt)


_PRIORITIES = []


def _priorities():
    """(session id -> its priority, dynamic-K key -> the derived cell's), estimated once at
    the host's calibrated rates; none where no scheduler chooses among jobs (a dry run, a
    cluster job's own process: its one job)."""
    if not workflow.is_main_process or workflow.dryrun:
        return {}, {}
    if not _PRIORITIES:
        device = rates.device_of_host(hostcaps.host_caps())
        _PRIORITIES.extend(runtimes.job_priorities(config, SESSIONS, CELLS, device))
    return _PRIORITIES


def session_priority(wildcards):
    """Where sessions run side by side (several GPUs, or CPU cell slots), the longest chains
    of work (a session, then the derived dynamic-K cells waiting on it) start first."""
    return _priorities()[0].get(wildcards.session_id, 0)


def dynamic_k_priority(wildcards):
    return _priorities()[1].get((wildcards.target, wildcards.workload, wildcards.speculator), 0)


def unlocking_priority(wildcards):
    """Short jobs that other jobs wait on (data, models, a cell's records, a schedule) run
    before any measuring job: a long chain's session would otherwise wait behind the others."""
    sessions_, derived = _priorities()
    return max([*sessions_.values(), *derived.values()], default=0) + 1


def session_retries(wildcards):
    """Sessions of this id that left a cell unfinished: a parameter, so that the next run
    measures those points again."""
    return sessions.retries(layout.session_output(wildcards.session_id))


def dynamic_k_runtime(wildcards, attempt):
    spec = DYNAMIC_K[(wildcards.target, wildcards.workload, wildcards.speculator)]
    return runtimes.cell_minutes(config, dynamic_k.dynamic_k_placeholders(config, spec), attempt)


def model_build_inputs(wildcards):
    source = config["models"][wildcards.model]["source"]
    return {"base": model_input(source["model"])} if source["kind"] in DERIVED_KINDS else {}


def prompt_inputs(wildcards):
    """Raw file + manifest of the dataset's source, and the tokenizer's model folder."""
    source = config["datasets"][wildcards.dataset]["source"]
    spec = config["sources"][source]
    inputs = {"raw": raw_path(source, spec), "manifest": manifest_path(source, spec)}
    tokenizer = specs.tokenizer_spec(config, wildcards.dataset)
    if "model" in tokenizer:
        inputs["tokenizer_model"] = model_input(tokenizer["model"])
    return inputs


def preflight_check():
    """Before any job of a real run: fail at once if a download cannot be reached."""
    preflight.check(config)


def listed_cells():
    """(cell, records file) of every cell, the derived ones included, for the index."""
    return [(cell, layout.cell_output(cell.cell_id)) for cell in CELLS.values()] + [
        (dynamic_k.dynamic_k_placeholder(config, spec), layout.dynamic_k_output(*key))
        for key, spec in DYNAMIC_K.items()
    ]


def salvage_reports():
    """After a run with failed jobs: reports from what was measured, failures listed."""
    from sdbench.report.pages import salvage  # (pandas, matplotlib: not at every parse)

    salvage(config, listed_cells(), REPORTS, SUMMARY_MODELS, SUMMARY_INDEX, all_schedules())


# the report of every round the config has (title -> page)
REPORTS = {ROUND_TITLES[r]: f"{r}.html" for r in ROUNDS if config.get(r)}


def all_prompt_sets():
    """Every processed subset of every dataset (the sets later rounds read are built too), but
    Spec-Bench's task groups only where a workload reads them: each is a part of its `all`."""
    used = {(w["dataset"], w["subset"]) for w in config["workloads"].values()}
    return [
        path
        for name, dataset in config["datasets"].items()
        for subset in subsets_of(dataset)
        if dataset["builder"] != "spec_bench" or subset == "all" or (name, subset) in used
        for path in (layout.processed_path(name, subset), layout.card_path(name, subset))
    ]


def all_models():
    """The model folders every cell this host can run reads (targets and drafts; a model of
    kind `path` as the user's folder, which no rule builds)."""
    return sorted({model_input(name) for cell in CELLS.values()
                   if not HOST_PLAN[cell.cell_id]["unsupported_here"]
                   for name in specs.cell_models(cell)})


def all_cell_records():
    """Every cell's records: the grid's, then the derived dynamic-K cells'."""
    return [layout.cell_output(cell_id) for cell_id in CELLS] + [
        layout.dynamic_k_output(*key) for key in DYNAMIC_K
    ]


def dynamic_k_round1(wildcards):
    """Round 1 records of the method and its baseline on that target and workload (what its
    schedule is derived from)."""
    spec = DYNAMIC_K[(wildcards.target, wildcards.workload, wildcards.speculator)]
    return {
        "round1": [layout.cell_output(c.cell_id) for c in dynamic_k.dynamic_k_sources(spec, CELLS)]
    }


def dynamic_k_inputs(wildcards):
    """The derived schedule, the prompts and the models the derived cell serves."""
    key = (wildcards.target, wildcards.workload, wildcards.speculator)
    spec = DYNAMIC_K[key]
    inputs = {
        "schedule": layout.dynamic_k_schedule_path(*key),
        "prompts": specs.workload_spec(config, wildcards.workload)["path"],
        "target": model_input(wildcards.target),
    }
    draft = dynamic_k.dynamic_k_method(config, spec).draft
    if draft:
        inputs["draft"] = model_input(draft)
    return inputs


def all_schedules():
    """Every derived dynamic-K schedule file (the summary's schedules table)."""
    return [layout.dynamic_k_schedule_path(*key) for key in DYNAMIC_K]


def summary_inputs(wildcards):
    """Everything the summary stage reads: records with their per-request detail, the prompt
    sets and cards sent (per-bucket speedups, data cards), the schedules, the tokenizers."""
    records = all_cell_records()
    cells = [*CELLS.values(), *(dynamic_k.dynamic_k_placeholder(config, s) for s in DYNAMIC_K.values())]
    return {
        "records": records,
        "requests": [str(layout.requests_output(r)) for r in records],
        "prompt_sets": layout.prompt_sets(c.workload for c in cells),
        "schedules": all_schedules(),
        "models": list(SUMMARY_MODELS.values()),
    }


# checkpoint folders of the targets (their tokenizers serve the lossless check), and the rounds
# and settings of every cell (the summary's columns): computed once per parse
# (a target this host runs no cell of is never built: nothing of it is measured)
SUMMARY_MODELS = {t: model_input(t) for t in grid.round_targets(config)
                  if any(c.server_config["target"]["name"] == t
                         and not HOST_PLAN[c.cell_id]["unsupported_here"]
                         for c in CELLS.values())}
SUMMARY_INDEX = grid.summary_index(config)
# the summary stage's tables (the reports read these and nothing else)
SUMMARY = SummaryTables()
