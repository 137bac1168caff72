"""Typed settings: built when a config is validated, read-only, defaults from the schema, and
each derived fact in one function."""

import dataclasses

import pytest
import yaml

from sdbench.plan import settings
from sdbench.plan.config import validate_config

from workflow_helpers import REPO


def _demo() -> dict:
    return yaml.safe_load((REPO / "config" / "demo.yaml").read_text())


def test_settings_are_built_at_validation_with_the_schema_defaults():
    raw = _demo()
    raw["loadgen"].pop("max_failure_share", None)
    config = validate_config(raw)
    typed = settings.settings(config)
    assert typed is settings.settings(config)  # built once, kept
    assert typed.loadgen.max_failure_share == 0.01  # the schema's default
    assert typed.loadgen.repeats == config["loadgen"]["repeats"]
    assert typed.cells.gpu_sample_interval_s == config["cells"]["gpu_sample_interval_ms"] / 1000
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.loadgen.repeats = 9
    with pytest.raises(TypeError):
        typed.server.args["dtype"] = "float16"


def test_a_changed_section_builds_them_again():
    config = validate_config(_demo())
    before = settings.settings(config)
    config["loadgen"]["repeats"] = 11
    assert settings.settings(config).loadgen.repeats == 11 and before.loadgen.repeats != 11


def test_repeats_and_instances_of_a_method():
    raw = _demo()
    method = raw["round1"]["methods"][0]
    method.pop("repeats", None)
    method.pop("server_instances", None)
    raw["round1"]["methods"][1]["repeats"] = 7
    raw["round1"]["methods"][1]["server_instances"] = 3
    raw["adaptive"] = {"enabled": False}  # (the rule takes one instance)
    config = validate_config(raw)
    first, second = settings.settings(config).rounds["round1"].methods[:2]
    assert (first.repeats, first.server_instances) == (
        config["loadgen"]["repeats"], config["loadgen"]["server_instances"])
    assert (second.repeats, second.server_instances) == (7, 3)


def test_rounds_are_typed_with_their_methods_settings_and_engines():
    config = validate_config(_demo())
    typed = settings.settings(config)
    assert list(typed.rounds) == [r for r in settings.ROUNDS if config.get(r)]
    round1 = typed.rounds["round1"]
    raw = config["round1"]
    assert round1.concurrency == tuple(sorted(raw["concurrency"]))
    assert [m.name for m in round1.methods] == [settings.speculator_name(m)
                                                for m in raw["methods"]]
    assert [s.name for s in round1.settings] == [s["name"] for s in raw["settings"]]
    assert set(round1.all_targets) >= set(raw["targets"])
    for method, spec in zip(round1.methods, raw["methods"], strict=True):
        assert round1.method_targets(method) == tuple(spec.get("targets") or raw["targets"])
        assert settings.thawed(method.options) == spec["options"]
        assert round1.method(method.name) is method
    with pytest.raises(KeyError):
        round1.method("no-such-method")
    with pytest.raises(TypeError):
        round1.methods[0].options["x"] = 1
    config["round1"]["concurrency"] = [64, 2]
    assert settings.settings(config).rounds["round1"].concurrency == (2, 64)


def test_an_unvalidated_section_names_the_missing_key():
    with pytest.raises(KeyError, match="temperature"):
        settings.Settings.of({"loadgen": {"endpoint": "chat"}, "cells": {}, "server": {}})
