import copy

import pytest

from sdbench.plan import dynamic_k, grid
from sdbench.plan.config import ConfigError, load_config, validate_config

from workflow_helpers import REPO


def test_demo_and_real_configs_validate_with_defaults(repo):
    demo = load_config(repo / "config" / "demo.yaml")
    assert demo["loadgen"]["endpoint"] == "chat"          # default filled in
    assert demo["loadgen"]["temperature"] == 0
    assert demo["server"]["host"] == "127.0.0.1"
    assert demo["models"]["smollm2-135m"]["quantization"] is None
    real = load_config(repo / "config" / "config.yaml")
    assert real["models"]["qwen2.5-7b-instruct"]["source"]["repo"] == "Qwen/Qwen2.5-7B-Instruct"
    assert real["round1"]["targets"] == ["qwen2.5-7b-instruct"]


def _broken(raw, mutate):
    config = copy.deepcopy(raw)
    mutate(config)
    with pytest.raises(ConfigError) as info:
        validate_config(config, source="test.yaml")
    return str(info.value)


def test_unknown_target_names_key_value_and_choices(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c["round1"]["targets"].append("gpt-9"))
    last = len(demo_config_raw["round1"]["targets"])
    assert f"round1.targets[{last}]" in msg and "'gpt-9'" in msg and "smollm2-135m" in msg
    assert msg.startswith("test.yaml")


def test_k_below_one_is_a_schema_error(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c["round1"]["methods"][0].update(k=[0, 2]))
    assert "0" in msg and "minimum" in msg


def test_draft_rules(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c["round2"]["methods"][0].pop("draft"))
    assert "round2.methods[0].draft" in msg and "draft_model" in msg
    msg = _broken(demo_config_raw,
                  lambda c: c["round1"]["methods"][0].update(draft="smollm2-135m-6l"))
    assert "round1.methods[0].draft" in msg and "takes no draft" in msg
    msg = _broken(demo_config_raw, lambda c: c["round3"]["methods"][0].update(draft="nope"))
    assert "'nope'" in msg


def test_a_calibration_target_may_pad_a_truncated_model_and_nothing_else_derived(
        demo_config_raw):
    """A deepened model may be built from a truncated one (the demo's calibration pair: the
    target's first layers as the draft, those padded as the target); other chains of derived
    models, and any from a quantized one, are refused with the key that names them."""
    config = validate_config(copy.deepcopy(demo_config_raw))
    assert config["models"]["smollm2-135m-deep"]["source"]["model"] == "smollm2-135m-10l"
    assert config["models"]["smollm2-135m-10l"]["source"]["kind"] == "truncate"
    msg = _broken(demo_config_raw, lambda c: c["models"]["smollm2-135m-10l"].update(
        source={"kind": "truncate", "model": "smollm2-135m-6l", "layers": 3}))
    assert "models.smollm2-135m-10l.source.model" in msg and "itself derived" in msg
    msg = _broken(demo_config_raw, lambda c: c["models"]["smollm2-135m-deep"].update(
        source={"kind": "deepen", "model": "smollm2-135m-w8a8", "noop_per_layer": 2}))
    assert "models.smollm2-135m-deep.source.model" in msg and "'smollm2-135m-w8a8'" in msg
    msg = _broken(demo_config_raw, lambda c: c["models"]["smollm2-135m-deep"].update(
        source={"kind": "deepen", "model": "smollm2-135m-eagle-untrained",
                "noop_per_layer": 2}))
    assert "models.smollm2-135m-deep.source.model" in msg and "itself derived" in msg


def test_vanilla_is_implicit(demo_config_raw):
    msg = _broken(demo_config_raw,
                  lambda c: c["round1"]["methods"].append({"method": "vanilla", "k": [1]}))
    assert "always measured" in msg


def test_reserved_options(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c["round1"]["methods"][0]["options"].update(
        num_speculative_tokens=3))
    assert "num_speculative_tokens" in msg and "round1.methods[0].options" in msg


def test_workload_references(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c["workloads"]["spec_bench"].update(subset="poetry"))
    assert "workloads.spec_bench.subset" in msg and "translation" in msg
    msg = _broken(demo_config_raw, lambda c: c["workloads"]["spec_bench"].update(dataset="x"))
    assert "workloads.spec_bench.dataset" in msg
    msg = _broken(demo_config_raw, lambda c: c["round1"]["workloads"].append("missing"))
    assert f"round1.workloads[{len(demo_config_raw['round1']['workloads'])}]" in msg


def test_a_concurrency_above_the_prompt_count_is_refused(demo_config_raw):
    # 24 prompts never put 32 requests in flight: the point would carry a concurrency it never
    # had
    msg = _broken(demo_config_raw, lambda c: c["round1"].update(concurrency=[1, 32]))
    assert "round1.concurrency" in msg and "workloads.spec_bench.num_prompts is 24" in msg
    msg = _broken(demo_config_raw, lambda c: c["workloads"]["mixed"].update(num_prompts=3))
    assert "round3.concurrency" in msg and "workloads.mixed.num_prompts is 3" in msg


def test_dataset_checks(demo_config_raw):
    msg = _broken(demo_config_raw,
                  lambda c: c["datasets"]["spec_bench"].update(records_per_bucket=3))
    assert "datasets.spec_bench.records_per_bucket" in msg and "does not use it" in msg
    msg = _broken(demo_config_raw, lambda c: c["datasets"]["cnn_dm_news_summary"]["buckets"][0]
                  .pop("output_tokens"))
    assert "datasets.cnn_dm_news_summary.buckets[0].output_tokens" in msg
    msg = _broken(demo_config_raw, lambda c: c["datasets"]["thucnews_polish"]["buckets"].append(
        {"name": "0.125k", "prompt_tokens": 100}))
    assert "bucket names must be unique" in msg
    msg = _broken(demo_config_raw, lambda c: c["datasets"]["sharegpt"].update(
        source="cnn_dailymail"))
    assert "reads the raw source 'sharegpt'" in msg
    msg = _broken(demo_config_raw, lambda c: c["datasets"]["cnn_dm_highlights_news"].update(
        prompt_tokens_range=[128, 64]))
    assert "low <= high" in msg
    msg = _broken(demo_config_raw, lambda c: c.update(tokenizer={"model": "gpt-9"}))
    assert "tokenizer.model = 'gpt-9'" in msg
    msg = _broken(demo_config_raw, lambda c: c["datasets"]["cnn_dm_news_summary"].pop("buckets"))
    assert "buckets" in msg and "required" in msg
    msg = _broken(demo_config_raw, lambda c: c["datasets"]["cnn_dm_news_summary"].update(
        instruction="Summarize."))
    assert "{text}" in msg


def test_schema_errors_name_the_branch_meant(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c["sources"].update(
        spec_bench={"kind": "url", "url": "https://x/q.jsonl", "sha256": 0}))
    assert "sources.spec_bench.sha256 = 0" in msg and "not of type 'string'" in msg


def test_unknown_top_level_key_is_rejected(demo_config_raw):
    msg = _broken(demo_config_raw, lambda c: c.update(round_one={}))
    assert "round_one" in msg


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(bad)


def test_quantized_sources_declare_their_format(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["models"]["smollm2-135m-awq"]["quantization"] = "gptq"
    with pytest.raises(ConfigError, match="models.smollm2-135m-awq.quantization = 'gptq'"):
        validate_config(raw)
    raw = copy.deepcopy(demo_config_raw)
    raw["models"]["smollm2-135m-awq"]["source"]["model"] = "smollm2-135m-gptq"
    with pytest.raises(ConfigError, match="needs a full-precision model"):
        validate_config(raw)


def test_round_settings(demo_config_raw):
    raw = copy.deepcopy(demo_config_raw)
    raw["round3"]["settings"].append({"name": "draft-len-512"})
    with pytest.raises(ConfigError, match=r"round3.settings\[2\].name .* unique"):
        validate_config(raw)
    raw = copy.deepcopy(demo_config_raw)
    raw["round3"]["settings"][1]["speculative"]["num_speculative_tokens"] = 3
    with pytest.raises(ConfigError, match="through the round's `methods`"):
        validate_config(raw)
    raw = copy.deepcopy(demo_config_raw)
    del raw["round3"]["settings"]
    config = validate_config(raw)  # the default: one setting that changes nothing
    assert config["round3"]["settings"] == [{"name": "default", "server": {}, "speculative": {}}]


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "config").glob("*.yaml")))
def test_every_shipped_config_is_valid_and_plans_its_cells(name):
    """The configs the docs run (the GPU ones are run on lent machines, not here): valid,
    with a grid, and every dynamic-K entry's cells (each model runner's) named apart."""
    config = load_config(REPO / "config" / name)
    assert grid.all_cells(config)
    for spec in dynamic_k.dynamic_k_specs(config):
        cells = dynamic_k.dynamic_k_placeholders(config, spec)
        assert len({c.speculator for c in cells}) == len(cells) == (
            (3 if spec["split"] else 1) * max(1, len(spec["model_runners"])))


def test_a_temperature_sweep_is_one_workload_per_temperature_and_keeps_the_greedy_ids(
        demo_config_raw):
    """`temperatures: [0, 1.0]` on a workload: the study's temperature (0) keeps the name and
    its cells their ids (nothing measured again); 1.0 is a workload of its own, named in every
    list that named the swept one, its cells paired with a baseline at 1.0."""
    import copy

    from sdbench.plan import grid
    from sdbench.plan.config import ConfigError, validate_config

    greedy = copy.deepcopy(demo_config_raw)
    greedy["workloads"].pop("spec_bench-t1", None)  # the demo's own sampled variant
    greedy["round1"]["workloads"] = [w for w in greedy["round1"]["workloads"]
                                     if w != "spec_bench-t1"]
    for method in greedy["round1"]["methods"]:
        method.pop("temperatures", None)
    demo_config_raw = greedy
    before = validate_config(copy.deepcopy(demo_config_raw))
    raw = copy.deepcopy(demo_config_raw)
    raw["workloads"]["spec_bench"]["temperatures"] = [0, 1.0]
    swept = validate_config(raw)
    assert swept["workloads"]["spec_bench-t1"]["temperature"] == 1.0
    assert "temperature" not in swept["workloads"]["spec_bench"]
    assert swept["round1"]["workloads"] == ["spec_bench", "spec_bench-t1"]
    # a section picking round 1 workloads keeps the study's temperature unless it names more
    assert swept["dynamic_k"][0]["workloads"] == ["spec_bench"]
    picked = copy.deepcopy(demo_config_raw)
    picked["workloads"]["spec_bench"]["temperatures"] = [0, 1.0]
    picked["dynamic_k"][0]["workloads"] = ["spec_bench-t1"]
    assert validate_config(picked)["dynamic_k"][0]["workloads"] == ["spec_bench-t1"]
    hot_only = copy.deepcopy(demo_config_raw)
    hot_only["workloads"]["spec_bench"]["temperatures"] = [0.7, 1.0]
    assert validate_config(hot_only)["dynamic_k"][0]["workloads"] == [
        "spec_bench-t0.7", "spec_bench-t1"]
    assert validate_config(copy.deepcopy(swept)) == swept  # idempotent

    old = {c.cell_id for c in grid.all_cells(before)}
    new = {c.cell_id: c for c in grid.all_cells(swept)}
    assert old <= set(new)  # temperature 0: the same cells
    hot = [c for c in new.values() if c.workload["name"] == "spec_bench-t1"]
    assert hot and {c.workload["loadgen"]["temperature"] for c in hot} == {1.0}
    assert all(new[c.baseline_cell_id].workload["name"] == "spec_bench-t1"
               for c in hot if c.baseline_cell_id)
    assert not {c.cell_id for c in hot} & old

    taken = copy.deepcopy(demo_config_raw)
    taken["workloads"]["spec_bench"]["temperatures"] = [0, 1.0]
    taken["workloads"]["spec_bench-t1"] = dict(taken["workloads"]["spec_bench"],
                                               temperatures=None)
    del taken["workloads"]["spec_bench-t1"]["temperatures"]
    with pytest.raises(ConfigError, match=r"workloads.spec_bench.temperatures = 1.0 .*"
                                          r"spec_bench-t1"):
        validate_config(taken)


def test_draft_sample_method_is_a_method_option_like_any_other(demo_sampled_raw):
    """vLLM's `draft_sample_method` (greedy | probabilistic) reaches the speculative config of
    the method's cells, and a field vLLM does not have is refused at start."""
    import copy
    from dataclasses import replace

    from sdbench.plan.checks import check_speculator, vllm_features
    from sdbench.plan.settings import settings

    config = validate_config(copy.deepcopy(demo_sampled_raw))
    cells = [c for c in grid.all_cells(config) if c.speculator == "calibration"]
    assert cells and all(c.server_config["method_options"]["draft_sample_method"]
                         == "probabilistic" for c in cells)
    # a draft without the option: vLLM's default (greedy), nothing sent
    plumbing = [c for c in grid.all_cells(config) if c.speculator == "draft-6l-plumbing"]
    assert plumbing and all("draft_sample_method" not in c.server_config["method_options"]
                            for c in plumbing)
    features = vllm_features()
    assert "draft_sample_method" in features.options
    spec = next(m for m in settings(config).rounds["round1"].methods
                if m.name == "calibration")
    check_speculator(spec, "round1.methods[1]", features)  # accepted
    wrong = dict(spec.options, draft_sampling="probabilistic")
    with pytest.raises(ConfigError, match="options.draft_sampling is not a speculative_config"):
        check_speculator(replace(spec, options=wrong), "round1.methods[1]", features)


def test_the_adaptive_rule_takes_one_server_instance_per_round_cell(demo_config_raw):
    """Under `adaptive:` a round's repeats on several server instances would be decided apart
    (each instance's session sees only its own): the config says which key to change; derived
    dynamic-K cells, measured without the rule, may take turns on several."""
    raw = copy.deepcopy(demo_config_raw)
    raw["adaptive"] = {"noise": 0.05}
    raw["loadgen"]["server_instances"] = 3
    with pytest.raises(ConfigError, match=r"loadgen\.server_instances = 3 .*must be 1 under "
                                          r"`adaptive:`"):
        validate_config(copy.deepcopy(raw))
    raw["adaptive"] = {"enabled": False}
    validate_config(copy.deepcopy(raw))  # without the rule, any number
    raw["adaptive"] = {"noise": 0.05}
    raw["loadgen"]["server_instances"] = 1
    raw["round1"]["methods"][0]["server_instances"] = 2
    with pytest.raises(ConfigError, match=r"round1\.methods\[0\]\.server_instances = 2"):
        validate_config(copy.deepcopy(raw))
    del raw["round1"]["methods"][0]["server_instances"]
    raw["dynamic_k"] = [{**raw["dynamic_k"][0], "server_instances": 3}]
    config = validate_config(raw)
    assert {spec["instances"] for spec in dynamic_k.dynamic_k_specs(config)} == {3}
    assert all(c.instances == 1 for c in grid.all_cells(config) if not c.is_baseline)
