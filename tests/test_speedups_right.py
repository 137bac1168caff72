"""Speedups that are right (issue 15): each test reproduces one way a speedup was wrong or
misleading, on synthetic records or cells, and fails on the behaviour before the fix."""

import copy
import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sdbench.analyze.aggregate import add_speedups, records_frame
from sdbench.analyze.point_intervals import aggregate_points
from sdbench.files import write_jsonl
from sdbench.measure import engines, loadgen, points, run
from sdbench.measure import server as measured_by
from sdbench.measure.serving import format_server_args
from sdbench.models import checkpoints as models
from sdbench.plan import grid, sessions, specs
from sdbench.plan.config import validate_config
from sdbench.records import LoadPoint

from helpers import num_prompts, record

REPO = Path(__file__).resolve().parents[1]


def parse_loadgen(argv):
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    return parser.parse_args(argv)


def serve_cell(config, method="vanilla", k=None, options=None, baseline=None, target=None):
    target = target or config["round1"]["targets"][0]
    server = specs.server_config(config, target, method, k, None, options)
    workload = specs.workload_spec(config, config["round1"]["workloads"][0])
    return specs.Cell(specs.cell_id_of(server, workload), "round1", method, server, workload,
                     baseline, (1, 4), 3)


# 1. state across requests ------------------------------------------------------------------

def test_suffix_decoding_cannot_learn_earlier_points_answers(demo_config):
    """Every point sends the same prompts: vLLM's suffix tree of past responses (10,000 by
    default) would have seen every answer from the second point on."""
    off = serve_cell(demo_config, "suffix", 8)
    spec = measured_by.speculative_config(off, demo_config)
    assert spec["suffix_decoding_max_cached_requests"] == 0  # global response tree off
    assert specs.isolation(off.server_config) == specs.SHARED
    (shared,) = sessions.standalone(off).values()
    assert not shared.fresh_per_point and sessions.starts(shared, {off.cell_id: off}) == 1

    # a cell that studies the global tree measures every point in its own server, without
    # warm-ups (a warm-up sends one of the point's own prompts)
    on = serve_cell(demo_config, "suffix", 8, {"suffix_decoding_max_cached_requests": 1000})
    assert specs.isolation(on.server_config) == specs.FRESH_PER_POINT
    (fresh,) = sessions.standalone(on).values()
    assert fresh.fresh_per_point
    assert sessions.starts(fresh, {on.cell_id: on}) == len(on.load_points()) * on.repeats
    assert measured_by.point_settings(on, 1, warm_up=True)["num_warmups"] == 0
    assert measured_by.point_settings(off, 1, warm_up=True)["num_warmups"] == \
        demo_config["loadgen"]["num_warmups"]
    # a shared server is warmed before each cell's first point only: the points before warmed
    # it
    assert demo_config["loadgen"]["num_warmups"] > 0
    assert measured_by.point_settings(off, 1, warm_up=False)["num_warmups"] == 0
    # stateless proposers are untouched
    ngram = serve_cell(demo_config, "ngram", 2, {"prompt_lookup_max": 3})
    assert "suffix_decoding_max_cached_requests" not in ngram.server_config["method_options"]


# 2. duration-bounded prompt counts -------------------------------------------------------------

def test_duration_bounded_pairs_send_the_baselines_prompt_counts(demo_config_raw, tmp_path):
    raw = copy.deepcopy(demo_config_raw)
    raw["loadgen"]["duration_s"] = 3
    for method in raw["round1"]["methods"]:
        method.pop("interleave", None)  # a pair measured in turn cannot share counts
    config = validate_config(raw)
    base = serve_cell(config)
    spec = serve_cell(config, "ngram", 2, {"prompt_lookup_max": 3}, baseline=base.cell_id)
    closed = base.load_points()[0]
    fast = lambda load: 100.0  # noqa: E731 - the faster server would probe a higher rate

    with pytest.raises(run.CellError, match="run the baseline cell first"):
        run.baseline_counts(spec, tmp_path / "missing.jsonl")
    records = [{**record(base.cell_id, "vanilla", 1, 10.0, loadgen={"num_prompts": 3}),
                "load": closed}]
    write_jsonl(tmp_path / "base.jsonl", records)
    counts = run.baseline_counts(spec, tmp_path / "base.jsonl")
    assert counts == {LoadPoint.of_load(closed, 0).order: 3}
    n, info = num_prompts(spec, closed, fast, counts)
    assert n == 3 and info["prompts_from"] == base.cell_id
    assert run.baseline_counts(base) == {}  # a baseline probes its own server

    # pairs whose prompt counts differ (records of the old behaviour) get no speedup
    frame = add_speedups(records_frame([
        record("b", "vanilla", 1, 100.0, loadgen={"num_prompts": 3}),
        record("s", "ngram", 1, 150.0, baseline="b", k=2, loadgen={"num_prompts": 8})]))
    row = frame.set_index("cell_id").loc["s"]
    assert math.isnan(row["speedup"]) and "different prompt count (8 vs baseline 3)" in \
        row["pair_issue"]
    assert row["num_prompts"] == 8  # the count used, not the workload's


# 3. the point cache and the cell id ----------------------------------------------------------

def test_point_key_follows_the_checkpoint_not_its_name(demo_config, tmp_path, monkeypatch):
    cell = serve_cell(demo_config)
    model = tmp_path / "m"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    monkeypatch.setattr(specs, "model_dir", lambda config, name: str(model))
    env = {"vllm": {"version": "0.32.0"}, "transformers": "5.0", "torch": "2.13"}
    load = cell.load_points()[0]

    def key():
        facts = points.point_facts(cell, demo_config, "sha", None, env, None)
        return points.point_key(cell, load, 0, facts)

    first = key()
    (model / "model.safetensors").write_bytes(b"weights v2, rebuilt")  # a path model changed
    assert key() != first
    models._write_card(model, "m", {"kind": "hf"}, {"resolved_commit": "aaa"})
    carded = key()
    card = json.loads((model / models.CARD_NAME).read_text())
    card["resolved_commit"] = "bbb"  # `revision: main` re-downloaded at another commit
    (model / models.CARD_NAME).write_text(json.dumps(card))
    assert key() != carded

    hf = specs.Cell("x", "round1", "vanilla", specs.server_config(
        demo_config, cell.server_config["target"]["name"], engine=specs.TRANSFORMERS),
        cell.workload, None, (1,), 1)
    facts = points.point_facts(hf, demo_config, "sha", None, env, None)
    newer = points.point_facts(hf, demo_config, "sha", None, {**env, "transformers": "5.1"},
                                None)
    assert points.point_key(hf, load, 0, facts) != points.point_key(hf, load, 0, newer)


def test_reporting_only_settings_change_no_id_and_no_key(demo_config_raw):
    def ids_and_key(raw):
        config = validate_config(raw)
        cells = grid.round_cells(config, "round1")
        cell = next(c for c in cells if c.engine == specs.SERVE and c.is_baseline)
        facts = {"prompts_sha256": "sha", "vllm": {}, "checkpoints": {}}
        return ({c.cell_id for c in cells},
                points.point_key(cell, cell.load_points()[0], 0, facts))

    before = ids_and_key(copy.deepcopy(demo_config_raw))
    raw = copy.deepcopy(demo_config_raw)
    raw["loadgen"].update(percentiles=[50, 95], ready_check_timeout_s=30)
    assert ids_and_key(raw) == before
    raw = copy.deepcopy(demo_config_raw)
    raw["loadgen"]["seed"] = 7  # what is measured changes: new ids
    assert ids_and_key(raw)[0].isdisjoint(before[0])
    # a workload renamed (same definition, same prompt file) is the same measurement
    raw = copy.deepcopy(demo_config_raw)
    old = raw["round1"]["workloads"][0]
    raw["workloads"]["renamed"] = raw["workloads"].pop(old)
    raw["round1"]["workloads"] = ["renamed" if w == old else w
                                  for w in raw["round1"]["workloads"]]
    for section in ("offline", "transformers"):
        if raw["round1"].get(section, {}).get("workloads"):
            raw["round1"][section]["workloads"] = [
                "renamed" if w == old else w for w in raw["round1"][section]["workloads"]]
    for entry in raw.get("dynamic_k") or []:
        if entry.get("workloads"):
            entry["workloads"] = ["renamed" if w == old else w for w in entry["workloads"]]
    for name in ("round2", "round3"):
        if raw.get(name) and old in raw[name]["workloads"]:
            raw[name]["workloads"] = ["renamed" if w == old else w
                                      for w in raw[name]["workloads"]]
    assert ids_and_key(raw)[0] == before[0]


@pytest.mark.parametrize("change, issue", [
    ({"device": "another CPU"}, "different device"),
    ({"vllm": "0.33.0"}, "different vLLM version"),
])
def test_no_speedup_between_different_devices_or_builds(change, issue):
    frame = add_speedups(records_frame([
        record("b", "vanilla", 1, 100.0),
        record("s", "ngram", 1, 150.0, baseline="b", k=2, **change)]))
    row = frame.set_index("cell_id").loc["s"]
    assert math.isnan(row["speedup"]) and not row["paired"]
    assert issue in row["pair_issue"]  # flagged, never silent
    points = aggregate_points(frame.assign(round="round1", setting="default",
                                           full_precision=None))
    assert issue in points.set_index("cell_id").loc["s", "pair_issues"]


# 4. the headline and output drift --------------------------------------------------------------

def test_headline_is_output_throughput_and_drift_is_flagged():
    """64 prompts x 8k tokens, 1.43x faster decoding: with the total-token ratio (nearly a
    ratio of durations), 10 % more output tokens read 1.30x; the output-token ratio reads the
    true 1.43x when decoding dominates the time (a model of it: prefill takes no time)."""
    prompt = 64 * 8000
    decode_s = 100.0  # baseline decode time for 64 x 256 output tokens

    def point(cell, output_tokens, speed, **kw):
        duration = decode_s * output_tokens / (64 * 256) / speed
        return record(cell, "vanilla" if speed == 1 else "draft", 1,
                      (prompt + output_tokens) / duration, output=output_tokens / duration,
                      output_tokens=output_tokens, **kw)

    frame = add_speedups(records_frame([
        point("b", 64 * 256, 1.0),
        point("s", int(64 * 256 * 1.1), 1.43, baseline="b", k=4)])).set_index("cell_id")
    spec = frame.loc["s"]
    assert spec["output_drift"] == pytest.approx(0.1, abs=1e-3) and spec["drift_flag"]
    assert spec["speedup"] == pytest.approx(1.43, abs=1e-3)
    assert spec["total_speedup"] == pytest.approx(1.43 / 1.1, abs=0.01)  # the old headline
    assert not frame.loc["b", "drift_flag"]


def test_ignore_eos_fixes_output_lengths():
    common = dict(host="h", port=1, served_name="m", tokenizer="t", dataset_path="p",
                  num_prompts=4, concurrency=1)
    settings = {"endpoint": "chat", "temperature": 0, "seed": 0, "num_warmups": 0,
                "ready_check_timeout_s": 0, "percentiles": [50]}
    assert not parse_loadgen(loadgen.loadgen_argv(**common, settings=settings)).ignore_eos
    argv = loadgen.loadgen_argv(**common, settings={**settings, "ignore_eos": True})
    assert parse_loadgen(argv).ignore_eos


# 5. prefix caching -------------------------------------------------------------------------

@pytest.mark.parametrize("config_file", ["demo.yaml", "config.yaml"])
def test_every_server_command_states_prefix_caching(config_file):
    import yaml

    config = validate_config(yaml.safe_load((REPO / "config" / config_file).read_text()))
    for cell in grid.all_cells(config):
        if cell.engine == specs.TRANSFORMERS:
            continue
        argv = format_server_args(cell.server_config["args"])
        assert ("--no-enable-prefix-caching" in argv) != ("--enable-prefix-caching" in argv), \
            cell.label


def test_prefix_caching_is_a_setting_and_pairs_share_the_cache_state(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["server"].setdefault("args", {})["enable_prefix_caching"] = True
    config = validate_config(raw)
    cell = serve_cell(config)
    assert "--enable-prefix-caching" in format_server_args(cell.server_config["args"])
    on = {"enable_prefix_caching": True}
    frame = add_speedups(records_frame([
        record("b", "vanilla", 1, 100.0, args=on, server={"points_before": 3}),  # warm
        record("s", "ngram", 1, 150.0, baseline="b", k=2, args=on,
               server={"points_before": 0})]))  # a rerun's cold point
    row = frame.set_index("cell_id").loc["s"]
    assert math.isnan(row["speedup"]) and "prefix-cache state (cold vs baseline warm)" in \
        row["pair_issue"]


# 6. what an interval covers -------------------------------------------------------------------

def test_repeats_have_their_own_seeds_and_may_spread_over_servers(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["loadgen"]["server_instances"] = 2
    raw["adaptive"] = {"enabled": False}  # (the rule takes one instance)
    config = validate_config(raw)
    cell = dataclasses.replace(serve_cell(config), instances=2)
    server = SimpleNamespace(connect_host="127.0.0.1", port=9)
    load = cell.load_points()[0]
    seeds = [parse_loadgen(measured_by.point_argv(cell, config, server, load, None, 4,
                                              measured_by.point_settings(cell, r))).seed
             for r in range(3)]
    assert len(set(seeds)) == 3
    # repeat r in server instance r mod 2: two sessions of the configuration
    two = sessions.standalone(cell)
    assert [[(p, r) for p, r in sessions.session_points(s, cell) if p == load]
            for s in two.values()] == [[(load, 0), (load, 2)], [(load, 1)]]
    # offline / Transformers cells: each repeat's prompts in its own seeded order too
    orders = [engines.choose_prompts(list(range(8)), 8, True, points.repeat_seed(cell, r))
              for r in range(3)]
    assert len({tuple(o) for o in orders}) == 3

    rows = [record("b", "vanilla", 1, 100.0 + r, repeat=r,
                   server={"instance": r % 2}, loadgen={"seed": r}) for r in range(3)]
    frame = add_speedups(records_frame(rows)).assign(round="round1", setting="default",
                                                     full_precision=None)
    covers = aggregate_points(frame)["interval_covers"].iloc[0]
    assert covers == "3 repeats, 2 server instances, per-repeat seeds"


def test_every_point_has_a_verdict_from_its_interval():
    rows = [record("b", "vanilla", c, 100.0, repeat=r) for c in (1, 4) for r in range(3)]
    rows += [record("s", "ngram", 1, 100.0 * g, baseline="b", k=2, repeat=r)
             for r, g in enumerate((1.3, 1.35, 1.4))]
    rows += [record("s", "ngram", 4, 100.0 * g, baseline="b", k=2, repeat=r)
             for r, g in enumerate((0.9, 1.2, 1.05))]  # mean 1.05: the interval spans 1
    frame = add_speedups(records_frame(rows)).assign(round="round1", setting="default",
                                                     full_precision=None)
    points = aggregate_points(frame).set_index(["cell_id", "concurrency"])
    assert points.loc[("s", 1), "verdict"] == "speculate"
    assert points.loc[("s", 4), "verdict"] == "no clear gain"
    assert pd.isna(points.loc[("b", 1), "verdict"])


# 9. acceptance length, one definition ----------------------------------------------------------

def test_acceptance_length_has_vllms_definition_in_every_engine():
    # 10 target steps, 6 of them with a draft of 3 tokens, 16 tokens out: 6 accepted
    metrics = engines.assisted_metrics(drafts=6, draft_tokens=18, output_tokens=16, steps=10)
    assert metrics["spec_decode_acceptance_length"] == pytest.approx(1 + 6 / 6)
    assert metrics["tokens_per_target_step"] == pytest.approx(1.6)


def test_acceptance_efficiency_uses_each_steps_k():
    """A dynamic-K cell drafts 1 token per step at high load, 4 at low: its efficiency is
    against what it drafted, not against its largest k."""
    rows = [record("d", "draft", 1, 100.0, k=4, metrics={
        "spec_decode_acceptance_length": 1.8, "spec_decode_num_drafts": 100,
        "spec_decode_draft_tokens": 100})]
    frame = add_speedups(records_frame(rows)).assign(round="round1", setting="default",
                                                     full_precision=None)
    points = aggregate_points(frame)
    assert points["acceptance_efficiency"].iloc[0] == pytest.approx(1.8 / 2)


# 10. small ---------------------------------------------------------------------------------

def test_a_zero_tpot_gives_no_infinite_speedup():
    frame = add_speedups(records_frame([
        record("b", "vanilla", 1, 100.0, tpot=10.0),
        record("s", "ngram", 1, 150.0, baseline="b", k=2, tpot=0.0)]))
    value = frame.set_index("cell_id").loc["s", "tpot_speedup"]
    assert math.isnan(value)
