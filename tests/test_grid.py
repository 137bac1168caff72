import copy

import pytest

from sdbench import grid
from sdbench.config import ConfigError, validate_config


def cells_of(raw):
    return grid.all_cells(validate_config(copy.deepcopy(raw)))


def test_demo_grid_shape(demo_config):
    cells = grid.all_cells(demo_config)
    rounds = {r: [c for c in cells if c.round == r] for r in grid.ROUNDS}
    # round 1: server cells vanilla, ngram k=2,4, the draft and the EAGLE head (k=3); offline
    # vanilla + ngram k=4; Transformers vanilla + ngram and the draft (k=3); round 2: (vanilla
    # + draft k=3) x 4 targets (bf16, GPTQ, AWQ, W8A8) x 2 buckets; round 3: one vanilla shared
    # by the two speculative-only settings
    assert [len(rounds[r]) for r in grid.ROUNDS] == [5 + 2 + 3, 16, 3]
    assert len({c.cell_id for c in cells}) == 29
    assert {c.speculator for c in cells} == {"vanilla", "ngram", "draft-6l", "eagle-untrained"}
    engines = {e: [c for c in rounds["round1"] if c.engine == e]
               for e in ("serve", "offline", "transformers")}
    assert [len(engines[e]) for e in engines] == [5, 2, 3]
    assert all(c.concurrency == (1, 4) for c in cells if c.engine != "transformers")
    assert all(c.concurrency == (1,) for c in engines["transformers"])
    # every round 1 cell is paired with vanilla of its own engine (and target)
    by_id = {c.cell_id: c for c in cells}
    for cell in rounds["round1"]:
        if not cell.is_baseline:
            base = by_id[cell.baseline_cell_id]
            assert base.is_baseline and base.engine == cell.engine
    # open-loop points are in the server cells only
    assert {c.request_rates for c in engines["serve"]} == {(2,)}
    assert {c.request_rates for c in engines["offline"] + engines["transformers"]} == {()}
    assert [p["mode"] for p in engines["serve"][0].load_points()] == ["concurrency"] * 2 + ["rate"]
    assert {c.server_config["target"]["quantization"] for c in rounds["round2"]} == {
        None, "gptq", "awq", "compressed-tensors"}
    spec3 = [c for c in rounds["round3"] if not c.is_baseline]
    assert sorted(c.setting for c in spec3) == ["default", "draft-len-512"]
    assert spec3[0].baseline_cell_id == spec3[1].baseline_cell_id
    short = next(c for c in spec3 if c.setting == "draft-len-512")
    assert short.server_config["method_options"]["max_model_len"] == 512
    assert "[draft-len-512]" in short.label


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
    assert [c.speculator for c in shared] == ["vanilla"]  # round 3's k=2 is its own cell
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
    changed["round1"]["methods"][0]["k"] = [2, 3]
    after = {c.cell_id: c for c in cells_of(changed)}
    new = set(after) - set(before)
    gone = set(before) - set(after)
    assert {after[i].server_config["num_speculative_tokens"] for i in new} == {3}
    assert {before[i].server_config["num_speculative_tokens"] for i in gone} == {4}
    assert len(new) == len(gone) == 1


def test_server_args_and_model_source_are_part_of_the_identity(demo_config_raw):
    before = {c.cell_id for c in cells_of(demo_config_raw)}
    changed = copy.deepcopy(demo_config_raw)
    changed["server"]["args"]["max_model_len"] = 2048
    # (Transformers cells take no vLLM server arguments: they keep their ids)
    hf = {c.cell_id for c in cells_of(demo_config_raw) if c.engine == "transformers"}
    assert (before - hf).isdisjoint({c.cell_id for c in cells_of(changed)})
    assert hf <= {c.cell_id for c in cells_of(changed)}
    # the draft is cut from the target: changing the target's source changes draft cells too
    changed = copy.deepcopy(demo_config_raw)
    changed["models"]["smollm2-135m"]["source"]["file"] = "other.gguf"
    assert before.isdisjoint({c.cell_id for c in cells_of(changed)})


def test_a_bucket_change_only_touches_that_bucket(demo_config_raw):
    from sdbench.config import validate_config

    raw = copy.deepcopy(demo_config_raw)
    raw["workloads"]["news_0.25k"] = {"dataset": "cnn_dm_news_summary", "subset": "0.25k",
                                      "num_prompts": 4}
    raw["workloads"]["news_0.5k"] = {"dataset": "cnn_dm_news_summary", "subset": "0.5k",
                                     "num_prompts": 4}
    raw["round1"]["workloads"] = ["news_0.25k", "news_0.5k"]
    raw["dynamic_k"] = []
    del raw["round2"], raw["round3"]
    before = validate_config(copy.deepcopy(raw))
    raw["datasets"]["cnn_dm_news_summary"]["buckets"][1]["prompt_tokens"] = 600  # the 0.5k one
    after = validate_config(raw)
    for name in ("0.25k", "1k"):
        assert grid.subset_definition(before, "cnn_dm_news_summary", name) == \
            grid.subset_definition(after, "cnn_dm_news_summary", name)
    assert grid.subset_definition(before, "cnn_dm_news_summary", "0.5k") != \
        grid.subset_definition(after, "cnn_dm_news_summary", "0.5k")
    ids = {c.cell_id: c.workload["name"] for c in grid.all_cells(before)}
    kept = {c.cell_id for c in grid.all_cells(after)} & set(ids)
    assert {ids[i] for i in kept} == {"news_0.25k"} and len(kept) == 10


def test_duplicate_cells_are_refused(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"].append(copy.deepcopy(raw["round1"]["methods"][0]))
    with pytest.raises(ConfigError, match="defines the same cell"):
        cells_of(raw)


def test_cell_roundtrip_and_model_paths(demo_config):
    cell = next(c for c in grid.all_cells(demo_config) if c.speculator == "draft-6l")
    assert grid.Cell.from_dict(cell.to_dict()) == cell
    assert grid.cell_models(cell) == ["smollm2-135m", "smollm2-135m-6l"]
    assert grid.model_dir(demo_config, "smollm2-135m") == "resources/models/smollm2-135m"
    assert cell.workload["path"] == grid.processed_path(cell.workload["dataset"],
                                                        cell.workload["subset"])
