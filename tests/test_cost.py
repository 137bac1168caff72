"""What a study will cost (`make plan`: sdbench.plan.cost): starts counted one per server
configuration instance plus the named exceptions, GPU time projected by one request model at
calibrated rates, with sessions and without."""

import dataclasses
import json
import math
import re
import socket

import pytest

from sdbench import layout
from sdbench.plan import (
    adaptive,
    cost,
    dynamic_k,
    estimate,
    grid,
    projection,
    rates,
    specs,
    sweeps,
    work,
)
from sdbench.plan.config import load_config, validate_config

from workflow_helpers import REPO


@pytest.fixture(scope="module")
def real():
    return load_config(REPO / "config" / "config.yaml")


def test_the_real_study_starts_each_configuration_instance_once(real, tmp_path):
    result = estimate.plan_cost(real, "h100", tmp_path)
    cells = grid.cells_by_id(real)
    instances = {(c.config_id, i, bool(c.chain))
                 for c in cells.values() for i in c.used_instances}
    # a derived dynamic-K schedule: three cells (static k, constant and derived schedule)
    derived = 3 * sum(spec["instances"] for spec in dynamic_k.dynamic_k_specs(real))
    total = result["total"]
    # one instance per round configuration under the adaptive rule, its chained cells in
    # stages (adaptive.chain: depth by depth of the level tree, repeat by repeat: 4 x 3 at
    # round 1's and 3's six levels, 3 x 3 at round 2's four); the derived dynamic-K cells
    # take turns on their own 3
    assert {len(c.used_instances) for c in cells.values() if c.chain} == {12, 9}
    # the instance probe: the offline and Transformers cells run on one start of their
    # configuration, so n-gram and the draft there (and their baselines) are started twice
    # more each; the chained cells' own stages measure the spread between starts
    probes = {(c.config_id, i) for c in cells.values()
              if grid.is_probe(c) for i in c.used_instances if i}
    assert len(probes) == 12
    assert result["probe"]["starts"] == len(probes)
    assert total.starts == len(instances) + derived == 956
    # what the README quotes is what `make plan` prints
    text = cost.format_plan(result, "config/config.yaml")
    readme = (REPO / "README.md").read_text()
    for line in ("server starts:", "projected GPU-hours:"):
        printed = next(x for x in text.splitlines() if x.startswith(line))
        assert f"    {printed}\n" in readme, printed
    assert {spec["instances"] for spec in dynamic_k.dynamic_k_specs(real)} == {3}
    assert total.starts_without == sum(len(c.used_instances) for c in cells.values()) + derived
    assert total.exceptions == []
    # sessions cut start-ups (and the rest), not measuring
    assert total.startup_h < total.startup_without_h / 4  # (956 starts, not 7,636)
    assert total.rest_h < total.rest_without_h
    assert 0 < total.startup_h < total.measuring_h
    text = cost.format_plan(result, "config/config.yaml")
    assert f"server starts: {total.starts} (one per cell and instance: " \
           f"{total.starts_without})" in text
    assert f"projected GPU-hours: start-up {total.startup_h:.2f}, measuring " \
           f"{total.measuring_h:.2f}" in text
    for part in ("round1", "round2", "round3", "dynamic-K"):
        assert any(line.startswith(part) for line in text.splitlines())


def test_a_fresh_server_per_point_is_named_and_counted_per_point(demo_config_raw, tmp_path):
    demo_config_raw["round1"]["methods"].append(
        {"method": "suffix", "k": [4], "targets": ["smollm2-135m"],
         "options": {"suffix_decoding_max_cached_requests": 10}})
    config = validate_config(demo_config_raw)
    suffix = next(c for c in grid.all_cells(config) if c.speculator == "suffix")
    result = estimate.plan_cost(config, "h100", tmp_path)
    (named,) = result["total"].exceptions
    points = suffix.repeats * len(suffix.load_points())
    assert f"a fresh server for each of its {points} points" in named and "suffix" in named
    plain = estimate.plan_cost(validate_config(
        {**demo_config_raw, "round1": {**demo_config_raw["round1"],
                                       "methods": demo_config_raw["round1"]["methods"][:-1]}}),
        "h100", tmp_path)
    assert result["total"].starts == plain["total"].starts + points


def test_model_sizes_come_from_configs_sources_and_names(real, tmp_path):
    calibration = load_config(REPO / "config" / "gpu-calibration.yaml")
    draft = rates.model_params(calibration, "qwen7b-shape-2l", tmp_path)
    target = rates.model_params(calibration, "qwen7b-shape-calib", tmp_path)
    assert draft == pytest.approx(0.818, abs=0.01)  # 2 layers, embeddings and head
    assert target == pytest.approx(6.88, abs=0.02)  # 28 layers (26 no-ops compute too)
    assert rates.model_params(real, "qwen2.5-7b-instruct", tmp_path) == pytest.approx(7.0)
    assert rates.model_params(real, "qwen2.5-0.5b-instruct", tmp_path) == pytest.approx(0.5)
    # a checkpoint on disk is read from its config.json
    folder = tmp_path / specs.model_dir(real, "qwen2.5-0.5b-instruct")
    folder.mkdir(parents=True)
    folder.joinpath("config.json").write_text(json.dumps(
        {"hidden_size": 896, "num_hidden_layers": 24, "intermediate_size": 4864,
         "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
         "tie_word_embeddings": True}))
    assert rates.model_params(real, "qwen2.5-0.5b-instruct", tmp_path) == pytest.approx(
        0.494, abs=0.01)


def test_the_h100_rates_reproduce_the_exact_pairs_measured_speedups(tmp_path):
    """The decode model against what it was fitted to
    (docs/runs/calibration-pair-7b-h100.md): the exact draft's
    TPOT speedups 2.62/2.45/2.10/1.54 at concurrency 1/4/16/64, within 10 %."""
    config = load_config(REPO / "config" / "gpu-calibration.yaml")
    cells = grid.all_cells(config)
    spec = next(c for c in cells if c.speculator == "calibration")
    base = next(c for c in cells if c.cell_id == spec.baseline_cell_id)
    model = rates.CalibratedRates(config, rates.DEVICES["h100"], tmp_path)
    assert rates.acceptance(config, spec, gpu=True) == rates.EXACT_ACCEPTANCE[True]
    for level, measured in ((1, 2.62), (4, 2.45), (16, 2.10), (64, 1.54)):
        projected = model.tpot_ms(base, level) / model.tpot_ms(spec, level)
        assert projected == pytest.approx(measured, rel=0.10), level
    assert model.tpot_ms(base, 1) == pytest.approx(6.0, rel=0.05)


def test_a_synthetic_cell_is_projected_at_its_set_acceptance_length(tmp_path):
    """A cell whose drafts vLLM accepts at a set mean length makes that many tokens a step in
    the projection (not the method's assumed acceptance): the same server at 2.0 takes twice
    the time per token it takes at 4.0; a setting above k + 1 counts as k + 1."""
    config = load_config(REPO / "config" / "gpu-calibration.yaml")
    spec = next(c for c in grid.all_cells(config) if c.speculator == "calibration")
    model = rates.CalibratedRates(config, rates.DEVICES["h100"], tmp_path)

    def at(length):
        options = {**spec.server_config["method_options"], **grid.synthetic_options(length)}
        return model.tpot_ms(dataclasses.replace(spec, server_config={
            **spec.server_config, "method_options": options}), 1)

    assert at(2.0) == pytest.approx(2 * at(4.0))
    assert at(9.0) == pytest.approx(at(5.0))  # k = 4: at most 5 tokens a step


def test_start_ups_measured_on_this_host_replace_the_rates(tmp_path):
    config = load_config(REPO / "config" / "gpu-calibration.yaml")
    cells = grid.cells_by_id(config)
    spec = next(c for c in cells.values() if c.speculator == "calibration")
    cid = spec.config_id
    manifest = tmp_path / layout.session_output(f"{cid}-i0")
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"timing": {"host": socket.gethostname(), "starts": [
        {"config": cid, "startup_s": s} for s in (100.0, 120.0, 300.0)]}}))
    other = tmp_path / layout.session_output("0123456789ab-i0")
    other.write_text(json.dumps({"timing": {"host": "elsewhere", "starts": [
        {"config": cid, "startup_s": 5.0}]}}))
    measured = estimate.MeasuredStarts(tmp_path)
    assert measured.by_config == {cid: [100.0, 120.0, 300.0]}
    model = estimate.PlanRates(config, rates.DEVICES["h100"], measured, tmp_path)
    assert model.startup_s(spec, first=True) == 120.0  # the median, cold or not
    base = cells[spec.baseline_cell_id]
    assert model.startup_s(base, first=False) == rates.CalibratedRates(
        config, rates.DEVICES["h100"], tmp_path).startup_s(base, first=False)


def test_the_adaptive_projection_and_a_short_budget_name_what_is_left_out(demo_config_raw,
                                                                           tmp_path):
    """`make plan` under the adaptive rule: each part's measuring full and adaptive (a share
    below the full cost), and a budget below the adaptive total trims the study (k values,
    levels, methods: `test_own_requests`) and then leaves out parts in the configured order,
    never the first round."""
    demo_config_raw["plan"] = {"budget_gpu_hours": 0.05, "leave_out_first": ["round1", "round3"]}
    config = validate_config(demo_config_raw)
    result = estimate.plan_cost(config, "h100", tmp_path)
    lines = projection.adaptive_projection(config, result["parts"])
    assert lines[1].startswith("adaptive measuring (on in this config")
    round1 = next(line for line in lines if line.strip().startswith("round1"))
    share, fixed, alone, rated, stopped, batches, batches_stopped = re.search(
        r"adaptive [\d.]+ h \((\d+)%; ([\d.]+) h measured in full, ([\d.]+) h of it "
        r"baselines measured first; open-loop rates "
        r"([\d.]+) h -> ([\d.]+) h; offline and Transformers batches ([\d.]+) h -> "
        r"([\d.]+) h\)", round1).groups()
    assert 0 < int(share) < 100
    # the open-loop rates stop on their TPOT speedup (simulated apart, bisected), the
    # speculative offline and Transformers cells' batches stop (each cell on its own), their
    # baselines' batches are measured in full
    tally = result["parts"]["round1"]
    at_rates = sum(h for (level, _), h in tally.levels.items() if level == work.RATE)
    at_batches = sum(h for (level, _), h in tally.levels.items() if level == work.BATCH)
    # the baselines measured before their cells (not interleaved: the offline and Transformers
    # ones here) are measured in full
    first = sum(h for (level, _), h in tally.levels.items() if level == work.BASELINE)
    assert first > 0 and float(alone) == pytest.approx(first, abs=0.05)
    assert at_rates > 0 and float(rated) == pytest.approx(at_rates, abs=0.05)
    assert float(stopped) <= float(rated)  # (0.0 h where the demo's rates are short)
    assert len(projection.rate_shape(tally)) == len(config["round1"]["request_rates"])
    assert at_batches > 0 and float(batches) == pytest.approx(at_batches, abs=0.05)
    assert float(batches_stopped) <= float(batches)
    sizes = {c for c in config["round1"]["offline"]["batch_sizes"]} | {1}  # (Transformers: 1)
    assert set(projection.batch_shape(tally)[0]) == sizes
    assert float(fixed) == pytest.approx(first, abs=0.05)
    assert sum(tally.levels.values()) == pytest.approx(tally.measuring_h)
    budget = cost.budget_lines(config, "h100", tmp_path, result)
    assert budget[0].startswith("budget 0.05 GPU-hours: the study needs ")
    assert "still over the budget" in budget[0]
    assert "  - the whole round3 (leave_out_first)" in budget
    assert not any("round1 (leave_out_first)" in line for line in budget)
    demo_config_raw["plan"] = {"budget_gpu_hours": 1000}
    config = validate_config(demo_config_raw)
    budget = cost.budget_lines(config, "h100", tmp_path,
                               estimate.plan_cost(config, "h100", tmp_path))
    assert budget == [budget[0]] and budget[0].endswith("it fits")


def test_the_plan_says_which_prompt_sets_it_read_at_their_longest(demo_config, tmp_path):
    """Before a prompt set is built the plan counts its requests at their longest: it says for
    how many sets, and a built set's data card (its mean lengths) lowers the projection. A set
    on disk built from another definition (the path is every config's: the demo's fixture sets
    lie where the real study's will) is not read, and the plan says so."""
    before = estimate.plan_cost(demo_config, "h100", tmp_path)
    found, sets, other, estimated = before["cards"]
    assert found == 0 and sets >= 2 and other == 0 and estimated == {}
    text = cost.format_plan(before, "demo")
    assert f"the data cards' means for 0 of {sets} prompt sets" in text
    assert "an upper bound" in text and "another definition" not in text
    cell = next(c for c in grid.cells_by_id(demo_config).values() if c.engine == specs.SERVE)
    card = tmp_path / layout.card_path(cell.workload["dataset"], cell.workload["subset"])
    card.parent.mkdir(parents=True, exist_ok=True)
    means = {"prompt_tokens": {"mean": 8.0}, "output_tokens": {"mean": 4.0}}
    definition = cell.workload["definition"]
    card.write_text(json.dumps({**means, "definition": {**definition, "seed": 7}}))
    other = estimate.plan_cost(demo_config, "h100", tmp_path)
    assert other["cards"] == (0, sets, 1, {})
    assert other["total"].measuring_h == pytest.approx(before["total"].measuring_h)
    assert "1 of them on disk built from another definition" in cost.format_plan(other, "demo")
    card.write_text(json.dumps({**means, "definition": definition}))
    after = estimate.plan_cost(demo_config, "h100", tmp_path)
    assert after["cards"] == (1, sets, 0, {})
    assert after["total"].measuring_h < before["total"].measuring_h


def test_a_built_head_is_costed_by_its_decoder_layers(tmp_path):
    """A head the workflow builds (`kind: random_head`) before it is built: its decoder layers
    of its target's (DFlash's five, the others' one: the builder's defaults) and the target's
    embeddings and head."""
    from sdbench.models.heads import HEAD_DEFAULTS

    for method, defaults in HEAD_DEFAULTS.items():
        assert rates.head_layers({"method": method}) == defaults.get("num_hidden_layers", 1)
    dflash = load_config(REPO / "config" / "gpu-dflash.yaml")
    draft = next(n for n, m in dflash["models"].items() if m["source"]["kind"] == "random_head")
    target = dflash["models"][draft]["source"]["model"]
    (head_layers, head_rest) = rates.model_shape(dflash, draft, tmp_path)
    (target_layers, target_rest) = rates.model_shape(dflash, target, tmp_path)
    assert head_layers == pytest.approx(target_layers * 5 / 36)
    assert head_rest == target_rest
    assert rates.head_layers({"method": "dflash", "config": {"num_hidden_layers": 2}}) == 2


def test_the_plan_projects_the_adaptive_design_at_the_speedups_it_predicts(real, tmp_path):
    """Besides the simulation's family of surfaces, `make plan` simulates each race of the
    real study (a speculator's k values at one chained baseline) with the speedups its own
    rates predict as the truth: a sweep per race with every level of the round, its hours
    within the round's measuring, and a share that follows the surface (one far from 1
    settles sooner than one on it)."""
    result = estimate.plan_cost(real, "h100", tmp_path)
    found = result["predicted"]
    cells = grid.cells_by_id(real)
    ngram = [c for c in cells.values() if c.round == "round1" and c.speculator == "ngram"
             and c.engine == specs.SERVE and c.workload["name"] == "sharegpt"]
    race = [s for s in found["round1"] if len(s.surface) == len(ngram)
            and s.concurrency == tuple(real["round1"]["concurrency"])]
    assert race and all(len(row) == len(s.concurrency) for s in race for row in s.surface)
    for name in ("round1", "round2"):
        assert 0 < sum(s.hours for s in found[name]) < result["parts"][name].measuring_h
    assert {len(s.surface) for s in found["round2"]} == {1}  # (one k: no race)
    # the open-loop rates race apart from the closed-loop levels; an offline or Transformers
    # cell decides alone over its batch sizes
    assert {s.kind for s in found["round1"]} == {projection.CLOSED, projection.RATES,
                                                  projection.BATCHES}
    assert {len(s.surface) for s in found["round1"] if s.kind == projection.BATCHES} == {1}
    rated = [s for s in found["round1"]
             if s.kind == projection.RATES and len(s.surface) == len(ngram)]
    assert rated and {s.concurrency for s in rated} == {tuple(real["round1"]["request_rates"])}
    rule = adaptive.Rule.from_config(real["adaptive"])
    shape = dict(blocks=(4, 4, 2, 1), weights=(8.0, 4.0, 2.0, 1.0), concurrency=(1, 4, 8, 12),
                 chained=True)
    far = sweeps.expected_share(rule, 1, 4, 3, True, surface=((0.4,) * 4,), **shape)
    on = sweeps.expected_share(rule, 1, 4, 3, True, surface=((0.0,) * 4,), **shape)
    assert far < 0.6 * on
    text = cost.format_plan(result, "config/config.yaml", real)
    total = re.search(r"at the speedups this plan predicts \(.*\): adaptive ([\d.]+) h "
                      r"\((\d+)%;", text)
    full = re.search(r"total measuring: full ([\d.]+) h", text)
    assert total and full and 0 < float(total[1]) < float(full[1])


def test_a_predicted_sweep_weighs_whole_repeats_of_its_blocks(real, tmp_path):
    """A point split into blocks of prompts costs a block's prompts per look and all its
    blocks per repeat: round 2's predicted sweeps (blocks 4/4/2/1) hold their cells' whole
    repeats, each level weighted by them (they held one block's, a quarter of what concurrency
    1 and 4 cost, so the projection weighed the highest level 4 times too much), in GPU-hours
    (a tensor-parallel target's sweep weighs its every GPU, as the round's tally does)."""
    result = estimate.plan_cost(real, "h100", tmp_path)
    model = estimate.PlanRates(real, rates.DEVICES["h100"], estimate.MeasuredStarts(tmp_path),
                               tmp_path)
    spec = [c for c in result["cells"].values() if c.round == "round2" and not c.is_baseline]
    whole = sum(work.point_seconds(c, load, model, None) * specs.point_blocks(c, load)
                * c.repeats * specs.cell_gpus(c.server_config)
                for c in spec for load in c.load_points()) / 3600
    found = result["predicted"]["round2"]
    assert {s.blocks for s in found} == {(4, 4, 2, 1)}
    # (GPU-hours, as the round's tally counts them: the 32B target takes 2, the 72B 4)
    assert {specs.cell_gpus(c.server_config) for c in spec} == {1, 2, 4}
    assert sum(s.hours for s in found) == pytest.approx(whole, rel=1e-9)


def test_a_round_of_one_level_is_projected_within_its_full_measuring(tmp_path):
    """A round measured at one concurrency level is simulated as two alike, each with half
    its hours: its adaptive share stays within the full design's (it read 105 % of it when
    both copies carried all the hours)."""
    demo = load_config(REPO / "config" / "demo.yaml")
    assert len(demo["round2"]["concurrency"]) == 1
    result = estimate.plan_cost(demo, "h100", tmp_path)
    round2 = next(line for line in projection.adaptive_projection(demo, result["parts"])
                  if line.strip().startswith("round2"))
    full, adapted = map(float, re.search(r"full ([\d.]+) h, adaptive ([\d.]+) h", round2).groups())
    share = int(re.search(r"adaptive [\d.]+ h \((\d+)%", round2)[1])
    assert 0 < share <= 100 and adapted <= full


@pytest.mark.parametrize("split", [True, False])
def test_a_chained_baseline_keeps_only_the_levels_a_derived_schedule_reads(demo_config_raw,
                                                                           tmp_path, split):
    """A chained baseline measures in full only the levels a cell outside its chain reads: a
    derived dynamic-K schedule measured alone (`split: false`, its net over this baseline's
    repeats) reads its concurrency levels, never its open-loop rates (a rate of 2 per second
    is not concurrency 2); measured in turn with the static k (split) it reads none. The plan
    counts the baseline's kept levels as measured first and its rates as rates."""
    round1 = demo_config_raw["round1"]
    round1.update(targets=["smollm2-135m"], workloads=["spec_bench"], concurrency=[1, 2, 4],
                  request_rates=[1.0, 2.0], methods=[{"method": "ngram", "k": [2, 3],
                                                      "options": {"prompt_lookup_min": 2}}])
    for extra in ("offline", "transformers"):
        round1.pop(extra, None)
    demo_config_raw["dynamic_k"] = [{"speculator": "ngram", "workloads": ["spec_bench"],
                                     "split": split}]
    demo_config_raw["adaptive"] = {"noise": 0.05, "coarse": 2, "chain": True}
    config = validate_config(demo_config_raw)
    cells = grid.cells_by_id(config)
    base = next(c for c in cells.values() if c.chain and c.is_baseline)
    kept = grid.chain_kept(config, cells)
    assert kept == ({} if split else {base.cell_id: {(False, 1), (False, 2), (False, 4)}})
    levels = estimate.plan_cost(config, "h100", tmp_path)["parts"]["round1"].levels
    first = sorted(level for kind, level in levels if kind == work.BASELINE)
    assert first == ([] if split else [1, 2, 4])
    assert sorted(level for kind, level in levels if kind == work.RATE) == [1.0, 2.0]


@pytest.mark.parametrize("slow_at_24", [True, False])
def test_the_plan_measures_a_constant_schedule_only_where_the_predicted_schedule_differs(
        demo_config_raw, tmp_path, monkeypatch, slow_at_24):
    """Known answer through the request model's point times: the calibration pair (k = 5)
    takes half its baseline's time at concurrency 1 and, where `slow_at_24`, twice it at 24.
    Its predicted schedule is then k = 5 at 1 and off at 24, so the constant schedule of the
    static k 5 is planned at 24 only (what `dynamic_k.dynamic_k_arms` measures), and the dynamic-K
    part costs less; where the pair gains at both levels the schedule is the constant one
    (the workflow then measures two cells; the plan keeps the third at every level)."""
    demo_config_raw["dynamic_k"][0]["split"] = True
    config = validate_config(demo_config_raw)
    cells = grid.cells_by_id(config)
    real = estimate.point_seconds

    def timed(cell, load, model, card):
        if cell.speculator != "calibration" or cell.round != "round1":
            return real(cell, load, model, card)
        ratio = 0.5 if grid.level_value(load) == 1 else (2.0 if slow_at_24 else 0.8)
        return real(cells[cell.baseline_cell_id], load, model, card) * ratio

    monkeypatch.setattr(estimate, "point_seconds", timed)
    model = estimate.PlanRates(config, rates.DEVICES["h100"], estimate.MeasuredStarts(tmp_path),
                               tmp_path)
    differs = {n: s.differs for n, s in estimate.predicted_schedules(config, cells, model,
                                                                 tmp_path).items()}
    assert differs == {0: (24,) if slow_at_24 else ()}
    arms = estimate.derived_cells(config, differs)
    assert [c.concurrency for c in arms] == [(1, 24), (24,) if slow_at_24 else (1, 24), (1, 24)]
    plan = estimate.plan_cost(config, "h100", tmp_path)
    hours = plan["parts"]["dynamic-K"].measuring_h
    # the projection's ratios to the static k: the constant schedule the mechanism's cost; the
    # derived one that times its schedule's value (k = 5 at 1 as the static k; off at 24,
    # where k = 5 takes twice the baseline's time: 2x the static k's throughput)
    mechanism = rates.DYNAMIC_K_MECHANISM[True]
    ratios = {a.arm: [round(math.exp(r), 6) for r in a.ratios] for a in plan["arms"]}
    assert ratios[dynamic_k.STATIC_ARM] == []
    assert ratios[dynamic_k.CONSTANT_ARM] == [mechanism] * (1 if slow_at_24 else 2)
    assert ratios[dynamic_k.DERIVED_ARM] == ([mechanism, round(2 * mechanism, 6)] if slow_at_24
                                        else [mechanism] * 2)
    assert sum(a.hours for a in plan["arms"]) == pytest.approx(hours)
    monkeypatch.setattr(estimate, "predicted_schedules", lambda *args: {})
    every = estimate.plan_cost(config, "h100", tmp_path)["parts"]["dynamic-K"].measuring_h
    assert hours < every if slow_at_24 else hours == every


def test_the_plan_projects_a_dynamic_k_split_stopping_against_its_static_k(demo_config_raw,
                                                                          tmp_path):
    """Under the rule a derived schedule's cells stop against their static k: a cell whose
    ratio is far from 1 measures about one repeat of its entry's repeats, the static k as long
    as the longest of its others, and a ratio of 1 (the CPU's mechanism, the schedule no
    better) far more; a schedule measured alone (`split: false`) has nothing to stop against
    and counts in full."""
    demo_config_raw["dynamic_k"][0].update(split=True, repeats=3)
    config = validate_config(demo_config_raw)
    rule = adaptive.Rule.from_config(config["adaptive"])
    arm = projection.ArmSweep(0, dynamic_k.CONSTANT_ARM, (1, 24), (1.0, 1.0), 3,
                              (math.log(0.65),) * 2, rule)
    assert arm.share(True) == pytest.approx(1 / 3, abs=0.05)
    even = dataclasses.replace(arm, arm=dynamic_k.DERIVED_ARM, ratios=(0.0, 0.0))
    assert even.share(True) > arm.share(True) + 0.05
    static = dataclasses.replace(arm, arm=dynamic_k.STATIC_ARM, ratios=())
    spent = projection.arms_adaptive([static, arm, even], True)
    alone = dataclasses.replace(even, entry=1)
    assert projection.arms_adaptive([alone], True) == alone.hours
    # on 3 instances the static k stops with its others; on one its turn comes first (in
    # full); on 2 the turns give no sequence of repeats to stop on
    many = [dataclasses.replace(a, instances=3) for a in (static, arm, even)]
    assert projection.arms_adaptive(many, True) == pytest.approx(
        2 * (arm.share(True) + 2 * even.share(True)))
    assert spent == pytest.approx(2 + 2 * (arm.share(True) + even.share(True)))
    two = [dataclasses.replace(a, instances=2) for a in (static, arm, even)]
    assert projection.arms_adaptive(two, True) == 6
    lines = cost.format_plan(estimate.plan_cost(config, "h100", tmp_path), "demo", config)
    line = next(x for x in lines.splitlines() if "against their static k" in x)
    assert line.split()[:2] == ["dynamic-K", "3"]
    assert f"({rates.DYNAMIC_K_MECHANISM[True]:g}" in line
    # on a CPU, AVX-512 or not, the mechanism costs nothing (no CUDA graphs): the constant
    # schedule's predicted ratio is 1, and a ratio of 1 stops later than the GPU's
    for device in ("cpu-avx2", "cpu-avx512"):
        on_cpu = estimate.plan_cost(config, device, tmp_path)["arms"]
        constant = next(a for a in on_cpu if a.arm == dynamic_k.CONSTANT_ARM)
        assert constant.ratios and set(constant.ratios) == {0.0}
        assert constant.share(True) > arm.share(True)
    demo_config_raw["dynamic_k"][0]["split"] = False
    config = validate_config(demo_config_raw)
    lines = cost.format_plan(estimate.plan_cost(config, "h100", tmp_path), "demo", config)
    assert "measured in full (no schedule's cells stop against a static k" in lines
