"""One cell's part of a session, as a typed object: what it measures there, what the point
cache already holds, and how its records are written.

`prepare` checks the cell's prompt file and models, asks the host whether it can run the cell
(sdbench.plan.hostcaps), reads the point cache and returns a `CellRun`; the session's servers
then measure its `missing` points and `keep` each one. Records of every point, measured or
cached, are appended to the cell's `.partial` file as they come (the salvaged reports of a
failed run read it); the cell's own job writes the finished records from the sessions'
manifests (sdbench.measure.cell.assemble).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from sdbench import layout
from sdbench.files import (
    append_jsonl,
    atomic_write_json,
    locked,
    read_jsonl,
    sha256_file,
    write_jsonl,
)
from sdbench.logcause import error_cause, first_line
from sdbench.measure import loadgen, points, provenance, stopping
from sdbench.models import checkpoints as models
from sdbench.plan import adaptive, checks, hostcaps, specs
from sdbench.plan.config import REPO_ROOT
from sdbench.plan.hostcaps import UNSUPPORTED
from sdbench.records import LoadPoint, Record, read_records
from sdbench.script_log import debug_enabled


def point_line(label: str, instance: int, status: str, reason: str, metrics: dict) -> str:
    """A measured point in one line: load and repeat, server instance, status (and why),
    throughput, acceptance (speculative cells) and requests completed and failed."""
    def number(key: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else f"{value:.1f}"

    acceptance = ""
    if metrics.get("spec_decode_acceptance_length") is not None:
        rate = metrics.get("spec_decode_acceptance_rate")
        acceptance = (f", acceptance length {metrics['spec_decode_acceptance_length']:.2f}"
                      + ("" if rate is None else f" ({rate:.1f} %)"))
    return (f"{label}, instance {instance}: {status}{' (' + reason + ')' if reason else ''}, "
            f"{number('output_throughput')} output tok/s ({number('total_token_throughput')} "
            f"total){acceptance}, {metrics.get('completed')} completed, "
            f"{metrics.get('failed')} failed")


class CellError(RuntimeError):
    """The cell could not complete; the message says which point and why."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT received: unwind (stopping the servers) and exit."""


def now(timestamp: float | None = None) -> str:
    """Now (or a Unix timestamp) as an ISO time in UTC."""
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds")


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into an exception so `finally` blocks stop the servers."""
    def handler(signum, _frame):
        raise Interrupted(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def write_error(cell: specs.Cell, message: str, **logs) -> None:
    """Why a cell did not finish, for the index and the reports (`logs`: the job's `log`, the
    `server_log`, the `session`)."""
    atomic_write_json(layout.error_output(layout.cell_output(cell.cell_id)),
                      {"cell_id": cell.cell_id, "label": cell.label,
                       "error": first_line(message), "detail": message,
                       **{k: str(v) for k, v in logs.items() if v is not None}, "at": now()})


def point_status(metrics: dict, error: str | None, max_failure_share: float) -> tuple[str, str]:
    """("ok" | "invalid" | "failed", reason). A point is failed when it could not be measured,
    invalid when more than `max_failure_share` of its requests failed (it is kept in the records
    and shown in the reports, but no speedup is computed from it)."""
    if error is not None:
        return "failed", error
    completed, failed = metrics.get("completed") or 0, metrics.get("failed") or 0
    share = failed / (completed + failed) if completed + failed else 1.0
    metrics["failure_share"] = share
    if share > max_failure_share:
        return "invalid", (f"{failed} of {completed + failed} requests failed ({share:.1%} > "
                           f"max_failure_share {max_failure_share:.1%})")
    return "ok", ""


def check_workload(cell: specs.Cell) -> int | None:
    """Check the prompt file can serve the workload; return its forced output length if any."""
    path = cell.workload["path"]
    if not Path(path).is_file():
        raise CellError(f"workload {cell.workload['name']!r}: prompt file {path} does not exist")
    try:
        available, min_tokens = loadgen.prompt_file_facts(path)
    except ValueError as exc:
        raise CellError(f"workload {cell.workload['name']!r}: {exc}; rebuild it (delete the "
                        "file and rerun the workflow)") from exc
    if available < cell.workload["num_prompts"]:
        raise CellError(
            f"workloads.{cell.workload['name']}.num_prompts = {cell.workload['num_prompts']}: "
            f"{path} has only {available} prompts (prompts are never repeated to fill a point)")
    if len(min_tokens) > 1:
        raise CellError(f"{path}: prompts force different output lengths "
                        f"{sorted(min_tokens, key=str)}; the load generator forces one per point")
    return min_tokens.pop()


def model_cards(cell: specs.Cell, config: dict) -> dict:
    server_cfg = cell.server_config
    target_dir = specs.model_dir(config, server_cfg["target"]["name"])
    cards = {"target": {"path": target_dir, "card": models.read_card(target_dir)}}
    if server_cfg["draft"] is not None:
        draft_dir = specs.model_dir(config, server_cfg["draft"]["name"])
        cards["draft"] = {"path": draft_dir, "card": models.read_card(draft_dir)}
    return cards


def run_args(cell: specs.Cell, config: dict, verdict: dict | None) -> dict:
    """The cell's engine arguments as run here (`dtype: host` resolved; by the cell's own
    verdict, or asked now when the caller has none)."""
    args = cell.server_config["args"]
    if args.get("dtype") == "host":
        return hostcaps.run_args(args, verdict or hostcaps.cell_verdict(config, cell))
    return args


def baseline_counts(cell: specs.Cell, baseline_records: str | Path | None = None
                    ) -> dict[tuple, int]:
    """point id -> the prompt count the baseline cell sent there (duration-bounded speculative
    cells send the same); empty when the counts are not duration-bounded."""
    if not specs.sends_baseline_counts(cell):
        return {}
    path = Path(baseline_records or layout.cell_output(cell.baseline_cell_id))
    if not path.is_file():
        raise CellError(f"cell {cell.cell_id} ({cell.label}): with loadgen.duration_s each "
                        f"point sends as many prompts as its baseline cell "
                        f"{cell.baseline_cell_id} sent there, and {path} does not exist: run "
                        "the baseline cell first")
    counts = {}
    for record in read_records(path):
        if record["status"] == "ok":
            counts[LoadPoint.of_load(record["load"], record["repeat"]).order] = int(
                (record.get("loadgen") or {}).get("num_prompts")
                or record["metrics"]["completed"] + record["metrics"]["failed"])
    return counts


@dataclass
class CellRun:
    """One cell in one session: its points there (`plan`: point id -> (load, repeat), in
    measuring order), the cache path of each, the points found or measured so far, those still
    to measure, and what every record of the cell carries."""

    cell: specs.Cell
    config: dict
    instance: int
    plan: dict[tuple, tuple[dict, int]]
    paths: dict[tuple, Path]
    points: dict[tuple, dict]
    missing: list[tuple]
    environment: dict
    prompts_sha256: str
    min_tokens: int | None
    verdict: dict
    cards: dict
    log: TextIO
    baseline_counts: dict[tuple, int] = field(default_factory=dict)
    checked: bool = False  # the checks made while its server starts are done
    adaptive: dict | None = None  # the stopping rule its points are measured under
    stops: object | None = None  # the rule applied (sdbench.measure.stopping.GroupStops)

    @property
    def cell_id(self) -> str:
        return self.cell.cell_id

    @property
    def partial(self) -> Path:
        return layout.partial_output(layout.cell_output(self.cell_id))

    @property
    def unsupported(self) -> str | None:
        """Why this host cannot run the cell (None: it can)."""
        return self.verdict["reason"]

    def say(self, line: str) -> None:
        print(f"[sdbench] cell {self.cell_id}{line}", file=self.log, flush=True)

    def debug(self, line: str) -> None:
        """A line for SDBENCH_LOG_LEVEL=debug only."""
        if debug_enabled():
            self.say(line)

    def record(self, load: dict, repeat: int, metrics: dict, status: str, reason: str,
               server: dict, loadgen_info: dict, started: str,
               finished: str | None = None) -> dict:
        cell = self.cell
        if (blocks := specs.point_blocks(cell, load)) > 1:  # a block of a repeat's prompts
            loadgen_info = {**loadgen_info, "blocks": blocks}
        return Record(
            cell_id=cell.cell_id, round=cell.round, speculator=cell.speculator,
            baseline_cell_id=cell.baseline_cell_id, server_config=cell.server_config,
            workload=cell.workload, engine=cell.engine, load=load, repeat=repeat,
            status=status, error=reason or None, metrics=metrics, server=server,
            loadgen=({**loadgen_info, "adaptive": self.adaptive}
                     if self.adaptive and "stop" not in loadgen_info else loadgen_info),
            provenance={**self.environment, "models": self.cards,
                        "dataset": {"path": cell.workload["path"],
                                    "sha256": self.prompts_sha256},
                        "started_at": started, "finished_at": finished or now()},
        ).to_dict()

    def add(self, pid: tuple, measured: dict) -> None:
        """A measured point: into the cache when valid (only valid points are done), into the
        partial records in any case."""
        record = measured["record"]
        if record["status"] in ("ok", stopping.STOPPED):
            points.write_point(self.paths[pid], record, measured["detail"])
        if record["status"] not in (stopping.STOPPED, UNSUPPORTED):  # the load generator ran
            append_jsonl(layout.measured_journal(self.cell_id), {
                "point": LoadPoint.of_load(record["load"], record["repeat"]).key,
                "status": record["status"], "job": os.environ.get("SLURM_JOB_ID"),
                "pid": os.getpid(), "finished_at": record["provenance"]["finished_at"]})
        self.points[pid] = measured
        with locked(self.lock):
            append_jsonl(self.partial, measured["record"])

    @property
    def lock(self) -> Path:
        return layout.partial_lock(self.cell_id)

    def report(self, load: dict, repeat: int, status: str, reason: str, metrics: dict,
               server_log: str | Path) -> None:
        """Stop the cell at a failed point (CellError), else log the point's line."""
        label = LoadPoint.of_load(load, repeat).label
        if status == "failed":
            first, _, rest = reason.partition("\n")
            raise CellError(f"cell {self.cell_id} ({self.cell.label}), {label}: {first}; later "
                            f"points were not attempted (log: {server_log})"
                            + (f"\n{rest}" if rest else ""))
        instance = self.cell.instance_of(repeat, load)
        self.say(f" {point_line(label, instance, status, reason, metrics)}")

    def record_unsupported(self) -> None:
        self.say(f": unsupported here: {self.unsupported}")
        for pid in self.missing:
            load, repeat = self.plan[pid]
            record = self.record(load, repeat, {}, UNSUPPORTED, self.unsupported, {}, {},
                                 now(), now())
            self.add(pid, {"record": record, "detail": None})
        self.missing = []

    def not_done(self) -> str | None:
        """Why the cell is not done in this session (points not valid), or None."""
        ordered = [self.points[pid] for pid in self.plan if pid in self.points]
        bad = [p["record"] for p in ordered
               if p["record"]["status"] not in ("ok", UNSUPPORTED, stopping.STOPPED)]
        missing = [pid for pid in self.plan if pid not in self.points]
        if not bad and not missing:
            return None
        parts = [f"{LoadPoint.of_load(r['load'], r['repeat']).label}: {r['error']}"
                 for r in bad]
        if missing:
            parts.append(f"{len(missing)} not measured")
        return (f"cell {self.cell_id} ({self.cell.label}): {len(bad) + len(missing)} of "
                f"{len(self.plan)} points not valid (" + "; ".join(parts) + "); the cell is "
                "not done: a rerun measures these points again (the valid ones are cached). "
                f"Records so far: {self.partial}")

    def num_prompts(self, load: dict, probe, repeat: int) -> tuple[int, dict]:
        """Prompts of one point: the workload's, or with loadgen.duration_s the count that
        lasts that long at the point's rate (request rate, or the request throughput a short
        probe at that concurrency measured), capped by the workload's num_prompts. A
        speculative cell takes its baseline's count at the same point: a pair must send the
        same prompts, and a faster server would otherwise get more of them. With
        loadgen.prompts_per_concurrency a closed-loop point has that many per unit of
        concurrency, at most num_prompts."""
        cell = self.cell
        available = specs.point_prompts(cell, load)
        duration = cell.workload["loadgen"].get("duration_s")
        if duration is None:
            return available, {}
        fixed = self.baseline_counts.get(LoadPoint.of_load(load, repeat).order)
        if fixed is not None:
            return fixed, {"duration_s": duration, "prompts_from": cell.baseline_cell_id}
        if load["mode"] == "rate":
            rate, info = load["request_rate"], {}
        else:
            rate = probe(load)
            info = {"probe_request_throughput": rate}
        wanted = max(math.ceil(rate * duration), load.get("concurrency") or 1)
        return min(wanted, available), {**info, "duration_s": duration,
                                        "duration_prompts_wanted": wanted,
                                        "duration_capped": wanted > available}


def prepare(cell: specs.Cell, config: dict, instance: int, plan: list[tuple[dict, int]], *,
            log: TextIO | None = None, baseline_records: str | Path | None = None) -> CellRun:
    """Check the cell can be measured here and read what its points in this session already
    have in the cache; its partial records then hold exactly what is known of it."""
    log = log or sys.stderr
    min_tokens = check_workload(cell)
    for name in specs.cell_models(cell):
        checks.check_quantization(config, name, source=f"cell {cell.cell_id}")
    checks.check_vocab(config, cell, features=checks.vllm_features(),
                       source=f"cell {cell.cell_id}")
    verdict = hostcaps.cell_verdict(config, cell)
    environment = {**provenance.environment(str(REPO_ROOT)),  # the workflow's own checkout
                   "host": verdict["host"], "dtype": verdict["dtype"]}
    prompts_sha256 = sha256_file(cell.workload["path"])
    ordered = {LoadPoint.of_load(load, r).order: (load, r) for load, r in plan}
    facts = points.point_facts(cell, config, prompts_sha256, min_tokens, environment,
                               verdict["dtype"]["resolved"])
    paths = {pid: points.point_path(cell.cell_id, load, r,
                                    points.point_key(cell, load, r, facts))
             for pid, (load, r) in ordered.items()}
    rule = adaptive.cell_rule(config, cell)
    rule = None if rule is None else adaptive.for_cell(rule, cell)  # as its stops were made
    found = {pid: point for pid, path in paths.items()
             if path.exists() and (point := points.read_point(path)) is not None
             and stopping.valid_cached(point, rule)}
    missing = [pid for pid in ordered if pid not in found]
    run = CellRun(cell, config, instance, ordered, paths, found, missing, environment,
                  prompts_sha256, min_tokens, verdict, model_cards(cell, config), log)
    run.say(f" ({cell.label}), instance {instance}: {len(found)} of {len(ordered)} points "
            f"cached, measuring {len(missing)}: {missing}; dtype "
            f"{verdict['dtype']['resolved'] or 'auto'} ({verdict['dtype']['why']})")
    if missing and not run.unsupported:
        for name in specs.cell_models(cell):
            if not Path(specs.model_dir(config, name)).exists():
                raise CellError(f"cell {cell.cell_id} ({cell.label}): model {name!r} "
                                f"({specs.model_dir(config, name)}) does not exist; the plan "
                                "expected this host not to run the cell (its verdict here "
                                "differs): build the model (snakemake "
                                f"{specs.model_dir(config, name)}) and run again")
        run.baseline_counts = baseline_counts(cell, baseline_records)
    if missing:  # (a cell with nothing to measure here keeps its files as they are)
        restart_partial(run)
    return run


def restart_partial(run: CellRun) -> None:
    """The partial records: other instances' records as they are, this instance's from the
    cache (points measured in this session are appended as they come)."""
    cell = run.cell
    with locked(run.lock):
        others = []
        if run.partial.exists():
            with contextlib.suppress(ValueError, OSError):
                others = [r for r in read_jsonl(run.partial)
                          if cell.instance_of(int(r.get("repeat", 0)), r.get("load"))
                          != run.instance]
        write_jsonl(run.partial, [*others, *(p["record"] for p in run.points.values())])


def with_causes(reason: str, detail: dict, server_log: str | Path, offset: int) -> str:
    """An invalid point's reason with what made its requests fail: the first request error the
    load generator saw and the first error the server logged during the point."""
    errors = [e for e in detail.get("errors") or [] if e]
    if errors:
        reason += f"; first request error: {first_line(str(errors[0]))[:300]}"
    cause = error_cause(server_log, since=offset)
    if cause:
        reason += f"; server log: {cause} (log: {server_log})"
    return reason


def log_size(path: str | Path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
