"""All cell records -> tidy tables with speedups against the matching vanilla point.

Speedup is measured against no speculation on the same target, server arguments, workload and
concurrency, paired by repeat: every speculative record names its baseline cell, and the join is
on (baseline cell, concurrency, repeat). A record without a successful baseline point gets no
speedup (NaN), never one computed against something else; a pair that is not comparable
(different device, vLLM build, dtype, prompt count or prefix-cache state) gets none either, and
its row says why (`pair_issue`).

The headline `speedup` is the output-token throughput ratio: the total-token ratio
(`total_speedup`, kept as a column) counts prompt tokens both servers process alike, so with
long prompts it tends to a ratio of durations and moves with the output length. Outputs end
where the model stops (unless `loadgen.ignore_eos`), so each speculative measurement also
records its output tokens relative to its baseline's (`output_drift`), flagged above 2 %.

`summarize` gives one row per measurement (cell, concurrency, repeat); `aggregate_points` one
row per point (cell, concurrency) with the mean, the standard deviation and a 95 % Student-t
interval over the repeats of every throughput, latency and speedup: for a speedup, over the
per-repeat ratios (each repeat divided by the baseline's same repeat), a geometric mean with
its interval on the log scale (a ratio's bounds are never below 0). The headline speedup's
estimate (a geometric mean), interval and verdict come from the pooled noise model
(`sdbench.analyze.noise`: server instances as units, variance pooled over the points of the
same engine, target, method and level), with the smallest speedup the design could have told
from 1 (`speedup_mde`); the estimate and interval over the point's own repeats are kept as
`speedup_unpooled_*`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sdbench.analyze import engine
from sdbench.analyze.lossless import lossless_columns, read_all_details, sampling_columns
from sdbench.analyze.point_intervals import (
    KEY,
    LEVEL,
    aggregate_points,
)
from sdbench.analyze.prompts import with_prompt_intervals
from sdbench.analyze.slo import slos_of, with_slo_columns
from sdbench.files import atomic_path
from sdbench.metrics import SPEEDUPS, Speedup
from sdbench.plan import dynamic_k, grid, specs
from sdbench.plan.specs import config_id, prefix_caching
from sdbench.records import STOPPED, read_records, upgrade

# which server start measured a record (`noise`: a start's offset is shared by its runs)
START_COLUMNS = ("config_id", "server_started_at", "session")
# output tokens of a speculative measurement vs its baseline's beyond this share: flagged
DRIFT_LIMIT = 0.02
# what both sides of a pair must share (column, what the issue says)
PAIR_CHECKS = {"device": "device", "vllm_version": "vLLM version",
               "vllm_distribution": "vLLM build", "dtype": "dtype",
               "num_prompts": "prompt count", "prefix_cache": "prefix-cache state"}


def _prefix_cache(record: dict) -> str | None:
    """"off", or with prefix caching on whether the server had served points before this one
    ("warm") or not ("cold"); None for records that do not say (before it was recorded)."""
    if prefix_caching(record["server_config"]) is False:
        return "off"
    before = record["server"].get("points_before")
    if before is None:
        return None
    return "warm" if before else "cold"


def _engine_warnings(record: dict) -> str | None:
    """The engine's performance warnings as JSON; None where the record has no engine report."""
    warnings = (record["server"].get("engine") or {}).get("warnings")
    return None if warnings is None else json.dumps(warnings)


def _row(record: dict) -> dict:
    server = record["server_config"]
    workload = record["workload"]
    prov = record["provenance"]
    loadgen = record.get("loadgen") or {}  # engine cells and older records: fewer fields
    row = {
        "cell_id": record["cell_id"],
        "round": record["round"],
        "speculator": record["speculator"],
        "method": server["method"],
        "k": server["num_speculative_tokens"],
        "target": server["target"]["name"],
        "quantization": server["target"]["quantization"],
        "draft": server["draft"]["name"] if server["draft"] else None,
        "workload": workload["name"],
        # the sampling temperature its requests were sent with (a `temperatures:` sweep)
        "temperature": (workload.get("loadgen") or {}).get("temperature"),
        # how a draft samples its tokens (vLLM's draft_sample_method; unset: its default,
        # greedy); decides how much acceptance falls above temperature 0
        "draft_sample_method": (server.get("method_options") or {}).get("draft_sample_method"),
        "dataset": workload["dataset"],
        "subset": workload["subset"],
        # the prompts this point sent (duration-bounded points: fewer than the workload's)
        # (none for a point the adaptive rule stopped: it sent nothing)
        "num_prompts": None if record["status"] == STOPPED
        else loadgen.get("num_prompts") or workload["num_prompts"],
        "engine": record["engine"],
        "load": record["load"]["mode"],
        "concurrency": record["concurrency"],
        "request_rate": record["request_rate"],
        "burstiness": record["load"].get("burstiness"),
        "repeat": record["repeat"],
        "status": record["status"],
        "error": record["error"],
        "baseline_cell_id": record["baseline_cell_id"],
        "vllm_version": prov["vllm"]["version"],
        "vllm_distribution": prov["vllm"]["distribution"],
        "torch_version": prov.get("torch"),
        "driver": prov["device"]["gpus"][0].get("driver") if prov["device"]["gpus"] else None,
        "device_kind": prov["device"]["kind"],
        "device": (prov["device"]["gpus"][0]["name"] if prov["device"]["gpus"]
                   else prov["device"]["cpu_model"]),
        "hostname": prov["hostname"],
        # what `dtype: host` resolved to and the ISA vLLM saw (records before these: None)
        "dtype": (prov.get("dtype") or {}).get("resolved"),
        "host_isa": (prov.get("host") or {}).get("isa"),
        "git_commit": prov["workflow"]["commit"],
        "git_dirty": prov["workflow"]["dirty"],
        "dataset_sha256": prov["dataset"]["sha256"],
        "started_at": prov["started_at"],
        "finished_at": prov["finished_at"],
        "server_startup_s": record["server"].get("startup_s"),
        "server_instance": record["server"].get("instance"),
        # which server start measured it (the noise model's start component): its
        # configuration, and when it started (engine cells: their session)
        "config_id": config_id(server),
        "server_started_at": record["server"].get("started_at"),
        "session": record["server"].get("session"),
        "isolation": record["server"].get("isolation"),
        # the cells whose servers took the points in turn with this one (`interleave`)
        "interleaved_with": ",".join(record["server"].get("interleaved_with") or []) or None,
        "prefix_cache": _prefix_cache(record),
        "seed": loadgen.get("seed"),
        # the sampling seed every request carried (`loadgen.request_seed`; None: none)
        "request_seed": loadgen.get("request_seed"),
        "spec_options": json.dumps(server.get("method_options") or {}, sort_keys=True),
        # the adaptive rule the point was measured under, and (a stopped point) its decision
        "adaptive": json.dumps(loadgen["adaptive"], sort_keys=True)
        if loadgen.get("adaptive") else None,
        "stop": json.dumps(loadgen["stop"], sort_keys=True) if loadgen.get("stop") else None,
        # the blocks of prompts a repeat was split into (`specs.point_blocks`; 1: whole repeats)
        "blocks": int(loadgen.get("blocks") or 1),
        "server_args": json.dumps(server.get("args") or {}, sort_keys=True),
        # the GPUs one server uses (tensor parallel): throughput per GPU divides by it
        "gpus": specs.cell_gpus({"args": server.get("args") or {}}),
        # what vLLM resolved and warned about (sdbench.measure.engine_report)
        "engine_settings": engine.settings_of(record),
        "engine_warnings": _engine_warnings(record),
    }
    for key, value in record["metrics"].items():
        if isinstance(value, list | dict):
            value = json.dumps(value)
        row.setdefault(key, value)
    return row


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record (records of an earlier shape read as `records.upgrade` says)."""
    frame = pd.DataFrame([_row(upgrade(r)) for r in records])
    frame["k"] = frame["k"].astype("Int64")  # integer, empty for vanilla
    frame["concurrency"] = frame["concurrency"].astype("Int64")  # empty for rate points
    frame["request_rate"] = frame["request_rate"].astype(float)
    duplicated = frame.duplicated(KEY, keep=False)
    if duplicated.any():
        dups = frame.loc[duplicated, KEY].drop_duplicates().to_dict("records")
        raise ValueError(f"several records for the same (cell, level, repeat): {dups}")
    return frame


def _ratio(speedup: Speedup, value: pd.Series, baseline: pd.Series) -> pd.Series:
    """The speedup of each row (`Speedup.ratio`); NaN, not infinite, where either side is zero
    or missing (a TPOT of 0: single-token outputs)."""
    value, baseline = value.astype(float), baseline.astype(float)
    return speedup.ratio(value, baseline).where((value != 0) & (baseline != 0))


def add_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """Join each row with its baseline point and add the speedup columns, the output-token
    drift and `pair_issue` (why a pair is not comparable; no speedup then)."""
    frame = frame.copy()
    ok = frame["status"] == "ok"
    metrics = list(dict.fromkeys([s.metric for s in SPEEDUPS.values()]
                                 + ["total_output_tokens"]))
    for column in metrics + list(PAIR_CHECKS):
        if column not in frame:
            frame[column] = np.nan
    for column in ("server_instance", *START_COLUMNS):
        if column not in frame:
            frame[column] = np.nan
    if "engine_settings" not in frame:
        frame["engine_settings"] = None
    base = frame.loc[ok, KEY + metrics + list(PAIR_CHECKS) + ["server_instance",
                                                              "engine_settings",
                                                              *START_COLUMNS]].rename(
        columns={"cell_id": "_base", "server_instance": "baseline_server_instance",
                 "engine_settings": "_base_engine",
                 **{c: f"baseline_{c}" for c in START_COLUMNS},
                 **{m: f"baseline_{m}" for m in metrics},
                 **{c: f"_pair_{c}" for c in PAIR_CHECKS}})
    # vanilla rows are their own baseline
    own = frame["baseline_cell_id"].fillna(frame["cell_id"])
    merged = frame.assign(_base=own).merge(base, on=["_base", *LEVEL, "repeat"], how="left",
                                           validate="many_to_one", indicator="_found")
    # a point the adaptive rule stopped has no pair to check
    found = (merged["_found"] == "both") & (merged["status"] != STOPPED)
    issues = [[] for _ in range(len(merged))]
    for column, what in PAIR_CHECKS.items():
        mine, theirs = merged[column], merged[f"_pair_{column}"]
        differ = found & ~((mine == theirs) | (mine.isna() & theirs.isna()))
        for i in np.flatnonzero(differ.to_numpy()):
            issues[i].append(f"different {what} ({mine.iloc[i]} vs baseline {theirs.iloc[i]})")
    merged["pair_issue"] = ["; ".join(i) or None for i in issues]
    # a pair whose servers resolved other settings than speculation: flagged, still paired
    merged["engine_differs"] = [
        engine.pair_sentence(mine, theirs) if hit else None for mine, theirs, hit in zip(
            merged["engine_settings"], merged["_base_engine"], found, strict=True)]
    comparable = (merged["status"] == "ok") & merged["pair_issue"].isna()
    for name, speedup in SPEEDUPS.items():
        ratio = _ratio(speedup, merged[speedup.metric], merged[f"baseline_{speedup.metric}"])
        merged[name] = ratio.where(comparable)
    drift = (merged["total_output_tokens"].astype(float)
             / merged["baseline_total_output_tokens"].astype(float) - 1)
    merged["output_drift"] = drift.where(comparable)
    merged["drift_flag"] = merged["output_drift"].abs() > DRIFT_LIMIT
    merged["paired"] = merged["speedup"].notna()
    return merged.drop(columns=["_base", "_found", "_base_engine",
                                *[f"_pair_{c}" for c in PAIR_CHECKS]])


def apply_failure_threshold(frame: pd.DataFrame, max_failure_share: float) -> pd.DataFrame:
    """Mark measured points invalid (or valid again) by the configured share of failed
    requests, whatever threshold was in force when they were measured."""
    frame = frame.copy()
    measured = frame["status"].isin(["ok", "invalid"]) & frame["failure_share"].notna()
    invalid = measured & (frame["failure_share"] > max_failure_share)
    frame.loc[measured, "status"] = np.where(invalid[measured], "invalid", "ok")
    frame.loc[measured & ~invalid, "error"] = None
    frame.loc[invalid, "error"] = [
        f"{int(f)} of {int(c + f)} requests failed ({s:.1%} > max_failure_share "
        f"{max_failure_share:.1%})" for c, f, s in
        frame.loc[invalid, ["completed", "failed", "failure_share"]].itertuples(index=False)]
    return frame


def summarize(cell_files: list[str | Path], partial_files: list[str | Path] = (),
              max_failure_share: float | None = None) -> pd.DataFrame:
    """One row per measurement. `partial_files` are the records of cells that did not finish
    (after a failed run); their rows have cell_complete = False. With `max_failure_share`, the
    invalid marks follow that threshold."""
    records = [{**record, "_complete": complete}
               for files, complete in ((cell_files, True), (partial_files, False))
               for path in files for record in read_records(path)]
    if not records:
        raise ValueError("no records in the cell files given")
    frame = records_frame(records)
    frame["cell_complete"] = [r["_complete"] for r in records]
    if max_failure_share is not None and "failure_share" in frame:
        frame = apply_failure_threshold(frame, max_failure_share)
    frame = add_speedups(frame)
    return frame.sort_values(["round", "target", "workload", "engine", "method", "k", "load",
                              "concurrency", "request_rate", "repeat"],
                             na_position="first").reset_index(drop=True)


def write_summary(frame: pd.DataFrame, parquet: str | Path, csv: str | Path) -> None:
    with atomic_path(parquet) as tmp:
        frame.to_parquet(tmp, index=False)
    with atomic_path(csv) as tmp:
        frame.to_csv(tmp, index=False)


def apply_index(frame: pd.DataFrame, index: dict | None) -> pd.DataFrame:
    """Rounds, settings and method names from the current config (a cell two rounds share is
    listed under both: one row per round; a method renamed in the config is named so without
    being measured again), and each target's full-precision counterpart."""
    index = index or {}
    cells, targets = index.get("cells", {}), index.get("targets", {})
    frame = frame.copy()
    frame["speculator"] = [cells.get(c, {}).get("speculator", s)
                           for c, s in zip(frame["cell_id"], frame["speculator"], strict=True)]
    frame["setting"] = [cells.get(c, {}).get("setting", _derived_setting(s) if r == "round3"
                                             else "default")
                        for c, r, s in zip(frame["cell_id"], frame["round"], frame["speculator"],
                                           strict=True)]
    frame["round"] = [cells.get(c, {}).get("rounds", [r])
                      for c, r in zip(frame["cell_id"], frame["round"], strict=True)]
    frame["full_precision"] = frame["target"].map(
        lambda t: targets.get(t, {}).get("full_precision"))
    frame["acceptance_source"] = [cells.get(c, {}).get("acceptance_source")
                                  for c in frame["cell_id"]]
    # what a cell's numbers can decide (grid.cell_role); a cell not in the config (derived
    # dynamic K, named "<method> ...") is its method's
    roles = sorted(((entry["speculator"], entry.get("role")) for entry in cells.values()),
                   key=lambda pair: -len(pair[0]))
    frame["role"] = [cells.get(c, {}).get("role") or next(
        (role for name, role in roles if role and s.startswith(name)), grid.DEPLOYABLE)
        for c, s in zip(frame["cell_id"], frame["speculator"], strict=True)]
    return frame.explode("round").reset_index(drop=True)


DERIVED_SETTING = "derived dynamic K"
# the cells a derived schedule is measured with, by their report name's suffix (`grid.
# dynamic_k_arms`): its setting in the summary
ARM_SETTINGS = {dynamic_k.STATIC_ARM: "best static k (beside dynamic K)",
                dynamic_k.CONSTANT_ARM: "constant schedule (dynamic K at the static k)",
                dynamic_k.DERIVED_ARM: DERIVED_SETTING}
DYNAMIC_K_SETTINGS = tuple(ARM_SETTINGS.values())


def arm_setting(speculator: str) -> str | None:
    """The setting of a dynamic-K cell, by its name's suffix; None for any other cell."""
    return next((setting for suffix, setting in ARM_SETTINGS.items()
                 if speculator.endswith(suffix)), None)


def _derived_setting(speculator: str) -> str:
    """The setting of a cell that is not in the config's grid (a derived dynamic-K cell)."""
    return arm_setting(speculator) or DERIVED_SETTING


def build_summary(record_files: list[str | Path], partial_files: list[str | Path],
                  max_failure_share: float, model_dirs: dict[str, str],
                  index: dict | None = None,
                  details: dict[str, dict] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per measurement with speedups and the lossless check, one row per point with
    intervals). model_dirs: target -> checkpoint folder (its tokenizer counts tokens for the
    lossless check); a cell's per-request detail sits beside its records file (`details`:
    read from there when not given). index: see `apply_index`; its `slo` (the config's) adds
    every SLO's goodput columns (`sdbench.analyze.slo`)."""
    from transformers import AutoTokenizer

    frame = summarize(record_files, partial_files, max_failure_share)
    if details is None:
        details = read_all_details(record_files)
    encoders = {}
    for target in frame.loc[frame["status"] == "ok", "target"].unique():  # measured ones
        tokenizer = AutoTokenizer.from_pretrained(model_dirs[target])
        encoders[target] = lambda text, tok=tokenizer: tok.encode(text, add_special_tokens=False)
    lossless = lossless_columns(frame, details, encoders)
    frame = frame.merge(lossless, on=KEY, how="left", validate="one_to_one")
    frame = frame.merge(sampling_columns(frame, details, encoders), on="cell_id", how="left",
                        validate="many_to_one")
    frame = with_slo_columns(frame, details, slos_of((index or {}).get("slo")))
    frame = apply_index(frame, index)
    return frame, with_prompt_intervals(aggregate_points(frame), frame, details)
