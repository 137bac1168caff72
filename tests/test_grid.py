import copy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sdbench import layout
from sdbench.plan import dynamic_k, grid, specs
from sdbench.plan.config import ROUNDS, ConfigError, validate_config
from sdbench.plan.dynamic_k import turn_order

REPO = Path(__file__).resolve().parents[1]


def cells_of(raw):
    return grid.all_cells(validate_config(copy.deepcopy(raw)))


def test_demo_grid_shape():
    from sdbench.plan import sessions

    demo_config = validate_config(yaml.safe_load((REPO / "config" / "demo.yaml").read_text()))
    cells = grid.all_cells(demo_config)
    # the instance probe: n-gram and its baseline again, on 3 starts, at concurrency 1
    probes = [c for c in cells if grid.is_probe(c)]
    assert sorted(c.speculator for c in probes) == ["ngram", "vanilla"]
    assert {(c.round, c.instances, c.repeats, c.concurrency) for c in probes} == {
        (grid.PROBE_ROUND, 3, 3, (1,))}
    assert {c.server_config["target"]["name"] for c in probes} == {"smollm2-135m"}
    cells = [c for c in cells if not grid.is_probe(c)]
    rounds = {r: [c for c in cells if c.round == r] for r in ROUNDS}
    # round 1 (server only): vanilla, ngram and the EAGLE head (k=3) on the target; vanilla and
    # the calibration draft (k=5) on the deeper target, and vanilla on that draft (its step
    # times); round 2: vanilla + draft k=3 on one bucket, on the target and its W8A8, GPTQ
    # and AWQ copies; round 3: one vanilla, the draft
    # at the default setting and with the short draft context. Round 1 again sampled at 1.0
    # (spec_bench-t1, concurrency 1 only): the three vanillas, n-gram and the calibration pair
    # (its draft samples: greedy at 0, probabilistic at 1.0; not the untrained head); and the
    # calibration pair's acceptance sweep at 2, at temperature 0 only
    assert [len(rounds[r]) for r in ROUNDS] == [12, 8, 3]
    assert len({c.cell_id for c in cells}) == 23
    assert {c.speculator for c in cells} == {
        "vanilla", "ngram", "calibration", "eagle-untrained-plumbing", "draft-6l-plumbing",
        "calibration at acceptance 2"}
    assert {c.workload["name"] for c in cells if grid.swept_method(c.speculator)} == {
        "spec_bench"}
    # at both levels, the pair's real cell beside it anchoring its line (greedy only)
    assert {c.concurrency for c in cells if grid.swept_method(c.speculator)} == {(1, 24)}
    assert {c.workload["name"] for c in cells if c.sweep_anchor} == {"spec_bench"}
    assert {c.speculator for c in cells if c.sweep_anchor} == {"calibration"}
    assert {c.engine for c in cells} == {"serve"}
    sampled = [c for c in rounds["round1"] if c.workload["name"] == "spec_bench-t1"]
    assert len(sampled) == 5 and all(c.concurrency == (1,) for c in sampled)
    assert all(c.concurrency == (1, 24) for c in rounds["round1"] if c not in sampled)
    assert all(c.concurrency == (4,) for c in rounds["round2"] + rounds["round3"])
    assert {c.server_config["target"]["quantization"] for c in rounds["round2"]} == {
        None, "compressed-tensors", "gptq", "awq"}
    # every speculative cell is measured in turn with its baseline; the target's vanilla
    # configuration serves rounds 1-3 in one session, with the n-gram, EAGLE and both draft
    # configurations taking turns: one session per (configuration group, instance), one
    # start per configuration
    groups = grid.interleave_groups(cells)
    assert sorted(len(g) for g in groups.values()) == [2, 2, 2, 2, 2, 2, 3, 3, 3]
    assert {i for g in groups.values() for i in g} == {
        c.cell_id for c in cells if c.server_config["target"]["name"] != "smollm2-135m-10l"}
    planned = sessions.plan_sessions({c.cell_id: c for c in cells})
    # (round 3's default setting is round 2's draft configuration: the same k; the calibration
    # draft's vanilla cells, interleaved with nothing, a session of their own)
    assert sorted(len(s.configs) for s in planned.values()) == [1, 2, 2, 2, 3, 5]
    assert sum(sessions.starts(s, {c.cell_id: c for c in cells}) for s in planned.values()) \
        == len({c.config_id for c in cells}) == 15
    # the calibration draft runs on the deeper target only, paired with its vanilla cell
    by_id = {c.cell_id: c for c in cells}
    pair = next(c for c in cells if c.speculator == "calibration")
    assert pair.server_config["target"]["name"] == "smollm2-135m-deep"
    assert pair.server_config["draft"]["name"] == "smollm2-135m-10l"
    base = by_id[pair.baseline_cell_id]
    assert base.is_baseline and base.server_config["target"]["name"] == "smollm2-135m-deep"
    # and the draft is measured as a target of its own (its step time predicts the speedup)
    assert any(c.is_baseline and c.server_config["target"]["name"] == "smollm2-135m-10l"
               for c in rounds["round1"])
    for cell in rounds["round1"]:
        if not cell.is_baseline:
            assert by_id[cell.baseline_cell_id].is_baseline
    assert {c.request_rates for c in cells} == {()}
    spec3 = [c for c in rounds["round3"] if not c.is_baseline]
    assert [c.setting for c in spec3] == ["default", "draft-len-512"]
    assert "max_model_len" not in spec3[0].server_config["method_options"]
    assert spec3[1].server_config["method_options"]["max_model_len"] == 512
    assert "[draft-len-512]" in spec3[1].label
    # the demo's dynamic-K cell: the calibration pair's schedule on the deeper target
    assert [(s["target"], s["speculator"]) for s in dynamic_k.dynamic_k_specs(demo_config)] == [
        ("smollm2-135m-deep", "calibration")]
    # the pair, and so its baseline, is measured 5 times (its gain at concurrency 1 is ~1.3x
    # against a host noise of ~10 % per point); the plumbing (untrained head, 6-layer draft)
    # and its round 2 and 3 baselines twice; everything else, the dynamic-K cell included, 3
    assert pair.repeats == base.repeats == 5
    plumbing = {c.cell_id for c in cells if "plumbing" in c.speculator}
    assert {c.repeats for c in cells if c.cell_id in plumbing} == {2}
    deep = {c.cell_id for c in cells if c.server_config["target"]["name"] == "smollm2-135m-deep"
            and not grid.swept_method(c.speculator)}
    assert {c.repeats for c in cells if c.cell_id in deep} == {5}
    # its acceptance sweep: 2 a point (`sweep_repeats`)
    assert {c.repeats for c in cells if grid.swept_method(c.speculator)} == {2}
    swept = {c.cell_id for c in cells if grid.swept_method(c.speculator)}
    assert {c.repeats for c in cells if c.cell_id not in plumbing | deep | swept
            and c.round == "round1"} == {3}
    assert {c.repeats for c in rounds["round2"] + rounds["round3"]} == {2}
    # the derived dynamic-K cell: its entry's own 2
    assert dynamic_k.dynamic_k_placeholder(demo_config, dynamic_k.dynamic_k_specs(demo_config)[0]
                                      ).repeats == 2


def test_a_derived_schedule_is_measured_with_its_static_k_and_that_k_as_constant(demo_config):
    """The three cells of the dynamic-K split: the static k (the server round 1 measured, under
    an id of its own: it is measured again, beside the others), that k as a constant schedule
    and the derived schedule, all paired with round 1's baseline; a derived schedule that is
    the constant one is measured once; they take turns by server instance."""
    spec = dynamic_k.dynamic_k_specs(demo_config)[0]
    # the demo measures its schedule alone (`split: false`): one cell
    alone = dynamic_k.dynamic_k_arms(demo_config, spec, [[1, 1, 5], [2, 24, 0]], 5)
    assert [c.speculator for c in alone] == ["calibration+dynamic-k"]
    assert len(dynamic_k.dynamic_k_placeholders(demo_config, spec)) == 1
    spec = {**spec, "split": True}
    assert len(dynamic_k.dynamic_k_placeholders(demo_config, spec)) == 3
    cells = grid.cells_by_id(demo_config)
    arms = dynamic_k.dynamic_k_arms(demo_config, spec, [[1, 1, 5], [2, 24, 0]], 5)
    static, constant, derived = arms
    assert [c.speculator for c in arms] == ["calibration+static-k", "calibration+constant-k",
                                            "calibration+dynamic-k"]
    round1 = next(c for c in cells.values() if c.speculator == "calibration"
                  and c.round == "round1" and c.engine == specs.SERVE
                  and c.server_config["target"]["name"] == spec["target"]
                  and c.workload["name"] == spec["workload"])
    # the static k's server is round 1's but for the mark in its environment
    unmarked = {**static.server_config, "env": {
        k: v for k, v in static.server_config["env"].items() if k not in dynamic_k.ARM_MARK}}
    assert unmarked == round1.server_config and static.cell_id != round1.cell_id
    assert len({c.cell_id for c in arms} | set(cells)) == len(cells) + 3
    assert {c.baseline_cell_id for c in arms} == {round1.baseline_cell_id}
    assert static.server_config["num_speculative_tokens"] == 5
    assert "num_speculative_tokens_per_batch_size" not in static.server_config["method_options"]
    assert constant.server_config["method_options"][
        "num_speculative_tokens_per_batch_size"] == [[1, 24, 5]]
    assert derived.server_config["method_options"][
        "num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 24, 0]]
    # at concurrency 1 the schedule runs k = 5 at every batch size: the constant schedule is
    # measured where they differ only, the others at every level
    assert static.concurrency == derived.concurrency == (1, 24) and constant.concurrency == (24,)
    other = dynamic_k.dynamic_k_arms(demo_config, spec, [[1, 1, 3], [2, 24, 5]], 5)
    assert [c.concurrency for c in other] == [(1, 24)] * 3
    # a schedule that is the constant one: two cells, the derived one measuring it
    once = dynamic_k.dynamic_k_arms(demo_config, spec, [[1, 24, 5]], 5)
    assert [c.speculator for c in once] == ["calibration+static-k", "calibration+dynamic-k"]
    assert once[1].server_config == constant.server_config
    assert derived.cell_id == alone[0].cell_id  # the same cell, split or not
    # turns: instance 0 of each, then instance 1, the order rotating
    two = [replace(c, instances=2, repeats=4) for c in arms]
    assert [(c.speculator.split("+")[1], i) for c, i in turn_order(two)] == [
        ("static-k", 0), ("constant-k", 0), ("dynamic-k", 0),
        ("constant-k", 1), ("dynamic-k", 1), ("static-k", 1)]


def test_a_dynamic_k_split_under_each_named_model_runner(demo_config):
    """`model_runners`: the split's cells again under each runner (vLLM's variable in their
    environment, the runner in their names before the arm), one runner's after the other's;
    none named: the variable left to vLLM."""
    spec = {**dynamic_k.dynamic_k_specs(demo_config)[0], "split": True}
    assert spec["model_runners"] == []
    plain = dynamic_k.dynamic_k_arms(demo_config, spec, [[1, 1, 5], [2, 24, 0]], 5)
    assert not any(dynamic_k.RUNNER_ENV in c.server_config["env"] for c in plain)
    both = dynamic_k.dynamic_k_arms(demo_config, {**spec, "model_runners": ["v1", "v2"]},
                               [[1, 1, 5], [2, 24, 0]], 5)
    assert [c.speculator for c in both] == [
        f"calibration@{runner}{arm}" for runner in ("v1", "v2") for arm in dynamic_k.ARMS]
    assert [c.server_config["env"][dynamic_k.RUNNER_ENV] for c in both] == ["0"] * 3 + ["1"] * 3
    assert len({c.cell_id for c in both + plain}) == 9
    # but for the variable, each runner's cells are the plain ones
    for cell in both:
        env = {k: v for k, v in cell.server_config["env"].items() if k != dynamic_k.RUNNER_ENV}
        twin = plain[both.index(cell) % 3]
        assert {**cell.server_config, "env": env} == twin.server_config
    assert [dynamic_k.runner_method(c.speculator.removesuffix(dynamic_k.DERIVED_ARM)) for c in both
            if c.speculator.endswith(dynamic_k.DERIVED_ARM)] == [("calibration", "v1"),
                                                            ("calibration", "v2")]
    assert dynamic_k.runner_method("calibration") == ("calibration", None)
    assert dynamic_k.runner_method("a@b") == ("a@b", None)  # not a runner: part of the name
    placeholders = dynamic_k.dynamic_k_placeholders(demo_config, {**spec, "model_runners": ["v2"]})
    assert [c.speculator for c in placeholders] == [f"calibration@v2{a}" for a in dynamic_k.ARMS]
    assert {c.server_config["env"][dynamic_k.RUNNER_ENV] for c in placeholders} == {"1"}


def test_a_method_s_repeats_and_its_baseline(demo_config_raw):
    """A method's `repeats` applies to its cells only; their baseline is measured as often as
    the most repeated cell paired with it (dynamic-K cells included), so that every speculative
    repeat has its baseline repeat; the cell ids do not change."""
    raw = copy.deepcopy(demo_config_raw)
    before = {c.cell_id: c for c in cells_of(raw)}
    methods = {m.get("name", m["method"]): m for m in raw["round1"]["methods"]}
    methods["ngram"]["repeats"] = 1
    methods["calibration"]["repeats"] = 4
    raw["dynamic_k"] = [{"speculator": "calibration", "repeats": 6}]
    config = validate_config(raw)
    after = grid.cells_by_id(config)
    assert set(after) == set(before)
    r1 = {c.speculator: c for c in after.values() if c.round == "round1" and not c.is_baseline
          and c.engine == specs.SERVE}
    assert r1["ngram"].repeats == 1 and r1["calibration"].repeats == 4
    assert r1["eagle-untrained-plumbing"].repeats == 2  # its own
    # the small target's baseline: its most repeated pair (EAGLE, 2), not the n-gram's 1
    assert after[r1["ngram"].baseline_cell_id].repeats == 2
    # the deeper target's: the dynamic-K cell's 6, more than the pair's 4
    spec = dynamic_k.dynamic_k_specs(config)[0]
    assert dynamic_k.dynamic_k_placeholder(config, spec).repeats == 6
    assert dynamic_k.dynamic_k_cell(config, spec, [[1, 1, 4], [2, 64, 0]]).repeats == 6
    assert after[r1["calibration"].baseline_cell_id].repeats == 6
    # a baseline whose every pair repeats once is measured once
    for method in raw["round2"]["methods"]:
        method["repeats"] = 1
    r2 = [c for c in grid.all_cells(validate_config(raw)) if c.round == "round2"]
    assert {c.repeats for c in r2 if c.engine == specs.SERVE} == {1}
    with pytest.raises(ConfigError, match="repeats"):
        methods["ngram"]["repeats"] = 0
        validate_config(raw)


def test_a_server_setting_gets_its_own_baseline(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round3"]["settings"].append({"name": "no-chunked-prefill",
                                      "server": {"enable_chunked_prefill": False}})
    cells = {c.cell_id: c for c in cells_of(raw) if c.round == "round3"}
    spec = next(c for c in cells.values() if c.setting == "no-chunked-prefill"
                and not c.is_baseline)
    base = cells[spec.baseline_cell_id]
    assert base.server_config["args"]["enable_chunked_prefill"] is False
    assert base.is_baseline and len(cells) == 5


def test_a_cell_two_rounds_share_is_measured_once(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round3"]["workloads"] = ["news_0.25k"]  # round 2's bucket, same target
    config = validate_config(raw)
    cells = grid.all_cells(config)
    rounds = grid.cell_rounds(config)
    shared = [c for c in cells if rounds[c.cell_id] == ["round2", "round3"]]
    # round 3's default setting is round 2's draft cell too (the same k); its other setting
    # is its own
    assert [c.speculator for c in shared] == ["vanilla", "draft-6l-plumbing"]
    assert len(cells) == len(set(rounds))
    index = grid.summary_index(config)
    assert index["cells"][shared[0].cell_id]["rounds"] == ["round2", "round3"]
    assert index["targets"]["smollm2-135m-gptq"]["full_precision"] == "smollm2-135m"


def test_every_speculative_cell_points_to_its_own_vanilla(demo_config):
    cells = grid.cells_by_id(demo_config)
    for cell in cells.values():
        if cell.is_baseline:
            assert cell.baseline_cell_id is None
            continue
        base = cells[cell.baseline_cell_id]
        assert base.is_baseline
        assert base.workload == cell.workload
        assert base.server_config["target"] == cell.server_config["target"]
        assert base.server_config["args"] == cell.server_config["args"]


def test_ids_are_stable_and_changing_k_only_changes_those_cells(demo_config_raw):
    before = {c.cell_id: c for c in cells_of(demo_config_raw)}
    assert set(before) == {c.cell_id for c in cells_of(demo_config_raw)}
    changed = copy.deepcopy(demo_config_raw)
    changed["round1"]["methods"][0]["k"] = [4]  # ngram: 3 -> 4 (the other engines keep theirs)
    after = {c.cell_id: c for c in cells_of(changed)}
    new = set(after) - set(before)
    gone = set(before) - set(after)
    assert {after[i].server_config["num_speculative_tokens"] for i in new} == {4}
    assert {before[i].server_config["num_speculative_tokens"] for i in gone} == {3}
    assert len(new) == len(gone) == 1


def test_server_args_and_model_source_are_part_of_the_identity(demo_config_raw):
    before = {c.cell_id for c in cells_of(demo_config_raw)}
    changed = copy.deepcopy(demo_config_raw)
    changed["server"]["args"]["max_model_len"] = 2048
    # (Transformers cells take no vLLM server arguments, and the deeper target has its own
    # max_model_len: they keep their ids)
    hf = {c.cell_id for c in cells_of(demo_config_raw) if c.engine == "transformers"
          or c.server_config["target"]["name"] == "smollm2-135m-deep"}
    assert (before - hf).isdisjoint({c.cell_id for c in cells_of(changed)})
    assert hf <= {c.cell_id for c in cells_of(changed)}
    # the draft is cut from the target: changing the target's source changes draft cells too
    changed = copy.deepcopy(demo_config_raw)
    changed["models"]["smollm2-135m"]["source"]["file"] = "other.gguf"
    assert before.isdisjoint({c.cell_id for c in cells_of(changed)})


def test_a_bucket_change_only_touches_that_bucket(demo_config_raw):
    from sdbench.plan.config import validate_config

    raw = copy.deepcopy(demo_config_raw)
    raw["workloads"]["news_0.25k"] = {"dataset": "cnn_dm_news_summary", "subset": "0.25k",
                                      "num_prompts": 4}
    raw["workloads"]["news_0.5k"] = {"dataset": "cnn_dm_news_summary", "subset": "0.5k",
                                     "num_prompts": 4}
    raw["round1"].update(targets=["smollm2-135m"], workloads=["news_0.25k", "news_0.5k"],
                         concurrency=[1, 4])
    raw["dynamic_k"] = []
    del raw["round2"], raw["round3"]
    before = validate_config(copy.deepcopy(raw))
    raw["datasets"]["cnn_dm_news_summary"]["buckets"][1]["prompt_tokens"] = 600  # the 0.5k one
    after = validate_config(raw)
    for name in ("0.25k", "1k"):
        assert specs.subset_definition(before, "cnn_dm_news_summary", name) == \
            specs.subset_definition(after, "cnn_dm_news_summary", name)
    assert specs.subset_definition(before, "cnn_dm_news_summary", "0.5k") != \
        specs.subset_definition(after, "cnn_dm_news_summary", "0.5k")
    ids = {c.cell_id: c.workload["name"] for c in grid.all_cells(before)}
    kept = {c.cell_id for c in grid.all_cells(after)} & set(ids)
    # per workload: 5 server, 2 offline and 4 Transformers cells (the fixture's demo has no
    # acceptance sweep)
    assert {ids[i] for i in kept} == {"news_0.25k"} and len(kept) == 11


def test_duplicate_cells_are_refused(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"].append(copy.deepcopy(raw["round1"]["methods"][0]))
    with pytest.raises(ConfigError, match="defines the same cell"):
        cells_of(raw)


def test_cell_roundtrip_and_model_paths(demo_config):
    cell = next(c for c in grid.all_cells(demo_config) if c.speculator == "draft-6l-plumbing")
    assert specs.Cell.from_dict(cell.to_dict()) == cell
    assert specs.cell_models(cell) == ["smollm2-135m", "smollm2-135m-6l"]
    assert specs.model_dir(demo_config, "smollm2-135m") == "resources/models/smollm2-135m"
    assert cell.workload["path"] == layout.processed_path(cell.workload["dataset"],
                                                        cell.workload["subset"])
