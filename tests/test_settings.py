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
    config = validate_config(_demo())
    default = config["loadgen"]["repeats"]
    assert settings.method_repeats(config, {}) == default
    assert settings.method_repeats(config, {"repeats": default + 2}) == default + 2
    assert settings.method_instances(config) == config["loadgen"]["server_instances"]
    assert settings.method_instances(config, {"server_instances": 3}) == 3


def test_an_unvalidated_section_names_the_missing_key():
    with pytest.raises(KeyError, match="temperature"):
        settings.Settings.of({"loadgen": {"endpoint": "chat"}, "cells": {}, "server": {}})
