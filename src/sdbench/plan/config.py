"""Loading and checking the workflow configuration.

The JSON-Schema (workflow/schemas/config.schema.yaml) is applied with
`snakemake.utils.validate`, which also fills in defaults; `check_config` then does the
cross-field checks a schema cannot express. Every error names the key, the value and what is
allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sdbench.data.builders import BUILDER_SOURCE, CHAT, subsets_of
from sdbench.data.raw import CHAT_FORMATS
from sdbench.data.sources import AUTO, SOURCES, source_format
from sdbench.plan import settings
from sdbench.plan.settings import ROUNDS

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"

# Methods of vLLM's speculative_config that load a second set of weights (config key `draft`)
# and those that take none. Anything else is passed through and left to vLLM to judge.
METHODS_WITH_DRAFT = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator"})
METHODS_WITHOUT_DRAFT = frozenset({"ngram", "ngram_gpu", "suffix", "mtp"})
VANILLA = "vanilla"
# Round 1 methods with a Transformers counterpart (assisted generation) for the reference cells
TRANSFORMERS_METHODS = {"ngram": "prompt_lookup_num_tokens", "draft_model": "assistant_model"}
ROUND1_ONLY = ("request_rates", "offline", "transformers")
# the quantization a checkpoint written by `kind: quantize` declares, by format
QUANTIZE_FORMATS = {"gptq": "gptq", "awq": "awq", "w8a8": "compressed-tensors"}

# Dataset keys each builder reads (beyond builder, source, tokenizer, seed, allow_partial);
# a key another builder reads is an error, not silently ignored.
PACKED = {"instruction", "instruction_joined", "text_label", "packing", "buckets", "tolerance",
          "records_per_bucket"}
BUILDER_KEYS = {
    CHAT: {"samples", "output_tokens", "max_output_tokens", "max_prompt_tokens", "stop_at_eos"},
    "spec_bench": {"max_output_tokens", "max_records", "task_prefixes", "max_prompt_tokens",
                   "per_task"},
    "sharegpt": {"samples", "filters"},
    "cnn_dm_news_summary": PACKED,
    "cnn_dm_mixed": PACKED | {"order"},
    "cnn_dm_highlights_news": {"instruction", "buckets", "prompt_tokens_range",
                               "records_per_bucket"},
    "thucnews_polish": PACKED | {"output_ratio"},
}
COMMON_DATASET_KEYS = {"builder", "source", "tokenizer", "seed", "allow_partial"}
# Bucket fields each bucketed builder needs, and those it may have.
BUCKET_FIELDS = {
    "cnn_dm_news_summary": ("prompt_tokens", "output_tokens"),
    "cnn_dm_mixed": ("prompt_tokens", "output_tokens"),
    "cnn_dm_highlights_news": ("output_tokens",),
    "thucnews_polish": ("prompt_tokens",),
}
WHOLE_PACKING_FIELDS = ("min_prompt_tokens", "texts_per_prompt")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key, value and remedy."""


# proposers that keep state across requests: (the option that turns it off, its "off" value).
# vLLM's suffix decoding caches past responses in a global tree (10,000 requests by default):
# every point sends the same prompts, so from the second point on it would have seen every
# answer. It is off unless the method's options set it; a cell that turns it on measures each
# point in a fresh server (`specs.isolation`).
CROSS_REQUEST_STATE = {"suffix": ("suffix_decoding_max_cached_requests", 0)}


def load_config(path: str | Path) -> dict:
    """Read a YAML config file, validate it (defaults filled in) and return it."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: expected a mapping at the top level, got {type(config).__name__}")
    return validate_config(config, source=str(path))


def validate_config(config: dict, source: str = "config") -> dict:
    """Schema validation (with defaults) plus cross-field checks; mutates and returns `config`."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, str(SCHEMA_PATH), set_default=True)
    except WorkflowError as exc:
        raise ConfigError(f"{source}: {_schema_error(config)}") from exc
    expand_temperatures(config, source)
    settings.build(config)  # the schema filled in every default the typed settings read
    check_config(config, source=source)
    return config


def temperature_name(name: str, temperature: float, default: float) -> str:
    """The name of a workload's variant at `temperature` (its own name at the default)."""
    return name if temperature == default else f"{name}-t{temperature:g}"


def expand_temperatures(config: dict, source: str = "config") -> None:
    """Each workload's `temperatures:` as one workload per temperature, in place: the study's
    temperature (`loadgen.temperature`) keeps the name and the definition it had without the
    sweep (its cells keep their ids, nothing is measured again); another temperature is a
    workload `<name>-t<T>` with `temperature: T`. A round's list of workloads that names the
    swept one names its variants instead, in the sweep's order; the sections that pick among
    round 1's workloads (offline, transformers, dynamic_k: each temperature there costs a
    cell of its own) keep `<name>` as the study's temperature, and name another as
    `<name>-t<T>` (all variants where the sweep leaves out the study's). Idempotent."""
    default = config["loadgen"]["temperature"]
    variants: dict[str, list[str]] = {}
    for name, workload in list(config["workloads"].items()):
        temperatures = workload.pop("temperatures", None)
        if temperatures is None:
            continue
        base = {k: v for k, v in workload.items() if k != "temperature"}
        variants[name] = []
        for temperature in temperatures:
            variant = temperature_name(name, temperature, default)
            if variant != name and variant in config["workloads"]:
                _fail(source, f"workloads.{name}.temperatures", temperature,
                      f"a temperature whose workload name ({variant}) is not taken")
            config["workloads"][variant] = (
                base if temperature == default else {**base, "temperature": temperature})
            variants[name].append(variant)
        if name not in variants[name]:  # the sweep leaves out the study's temperature
            del config["workloads"][name]

    def expanded(names):
        return [v for n in names for v in variants.get(n, [n])]

    def picked(names):  # `<name>` stays the study's temperature where it still exists
        return [v for n in names for v in ([n] if n in config["workloads"]
                                           else variants.get(n, [n]))]

    if not variants:
        return
    for round_name in ("round1", "round2", "round3"):
        spec = config.get(round_name)
        if not spec:
            continue
        spec["workloads"] = expanded(spec["workloads"])
        for extra in ("offline", "transformers"):
            if isinstance(spec.get(extra), dict) and spec[extra].get("workloads"):
                spec[extra]["workloads"] = picked(spec[extra]["workloads"])
    for entry in config.get("dynamic_k") or []:
        if entry.get("workloads"):
            entry["workloads"] = picked(entry["workloads"])


def _schema_error(config: dict) -> str:
    """The most relevant schema violation as `key = value: problem` (snakemake's own message
    prints the whole schema)."""
    import jsonschema
    from jsonschema.exceptions import best_match

    schema = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))
    error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is None:  # pragma: no cover - snakemake and jsonschema disagree
        return "does not match the schema"
    while error.validator == "oneOf" and error.context:
        # report on the branch the value meant (its `kind` matched), not "none matched"
        branches: dict = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        meant = [errs for errs in branches.values() if not any(
            e.validator == "const" or list(e.relative_path) == ["kind"] for e in errs)]
        error = best_match(meant[0] if len(meant) == 1 else error.context)
    key = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path)
    key = key.replace(".[", "[") or "(top level)"
    return (f"{key} = {error.instance!r} is not allowed: {error.message} "
            f"(schema: {SCHEMA_PATH.relative_to(REPO_ROOT)})")


def _fail(source: str, key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{source}: {key} = {value!r} is not allowed: {allowed}")


def _check_source(source: str, name: str, spec: dict) -> None:
    """A source of one's own (a name not in SOURCES) is a file of requests."""
    if name in SOURCES:
        if spec.get("format", AUTO) not in (AUTO, name):
            _fail(source, f"sources.{name}.format", spec["format"],
                  f"sources.{name} is read in its own schema; give a file of another format a "
                  "name of your own (and the chat builder)")
        return
    if spec["kind"] in ("fixture", "hf"):
        _fail(source, f"sources.{name}.kind", spec["kind"],
              f"a source of one's own requests is a file (kind path, url or hf_file; "
              f"fixture and hf serve only {list(SOURCES)})")


def _check_dataset(source: str, name: str, dataset: dict, sources: dict) -> None:
    builder = dataset["builder"]
    key = f"datasets.{name}"
    if dataset["source"] not in sources:
        _fail(source, f"{key}.source", dataset["source"],
              f"no such entry under sources (defined: {sorted(sources)}); a file of your own "
              "requests goes under sources.<a name of yours>: {kind: path, path: <file>}, "
              "built with builder: chat")
    schema = source_format(dataset["source"], sources[dataset["source"]])
    if builder == CHAT:
        if schema not in (AUTO, *CHAT_FORMATS):
            _fail(source, f"{key}.source", dataset["source"],
                  f"builder 'chat' reads requests in the formats {list(CHAT_FORMATS)}; "
                  f"sources.{dataset['source']} is read as {schema!r}")
        if not dataset.get("stop_at_eos", True) and not isinstance(dataset["output_tokens"],
                                                                   int):
            _fail(source, f"{key}.stop_at_eos", False,
                  "a forced output length needs a fixed output_tokens (a number)")
    elif schema != BUILDER_SOURCE[builder]:
        wanted = BUILDER_SOURCE[builder]
        _fail(source, f"{key}.source", dataset["source"],
              f"builder {builder!r} reads the raw source {wanted!r} (for your own requests: "
              "builder: chat)")
    if builder == "sharegpt" and dataset.get("samples") is None:
        _fail(source, f"{key}.samples", None, "builder 'sharegpt' takes a number of samples")
    unused = set(dataset) - COMMON_DATASET_KEYS - BUILDER_KEYS[builder]
    if unused:
        _fail(source, f"{key}.{sorted(unused)[0]}", dataset[sorted(unused)[0]],
              f"builder {builder!r} does not use it (its keys: "
              f"{sorted(BUILDER_KEYS[builder] | COMMON_DATASET_KEYS)})")
    buckets = dataset.get("buckets", [])
    names = [b["name"] for b in buckets]
    if len(set(names)) != len(names):
        _fail(source, f"{key}.buckets", names, "bucket names must be unique")
    for i, bucket in enumerate(buckets):
        for field in BUCKET_FIELDS[builder]:
            if field not in bucket:
                _fail(source, f"{key}.buckets[{i}].{field}", None,
                      f"builder {builder!r} needs {list(BUCKET_FIELDS[builder])} per bucket")
        for field in WHOLE_PACKING_FIELDS:
            if field in bucket and dataset.get("packing") != "whole":
                _fail(source, f"{key}.buckets[{i}].{field}", bucket[field],
                      "only buckets of packing: whole have it")
        low = bucket.get("min_prompt_tokens")
        if low is not None and low >= bucket["prompt_tokens"]:
            _fail(source, f"{key}.buckets[{i}].min_prompt_tokens", low,
                  f"must be below the bucket's prompt_tokens ({bucket['prompt_tokens']})")
    for field, placeholder in (("instruction", "{text}"), ("instruction_joined", "{text}"),
                               ("text_label", "{n}")):
        if field in dataset and placeholder not in dataset[field]:
            _fail(source, f"{key}.{field}", dataset[field],
                  f"it needs a {placeholder} placeholder")
    if "prompt_tokens_range" in dataset:
        low, high = dataset["prompt_tokens_range"]
        if low > high:
            _fail(source, f"{key}.prompt_tokens_range", [low, high], "needs low <= high")


RESERVED_OPTIONS = {"method", "num_speculative_tokens", "model"}


def _check_round(source: str, round_name: str, spec: dict, config: dict) -> None:
    models = config["models"]
    typed = settings.settings(config).rounds[round_name]
    for i, target in enumerate(spec["targets"]):
        if target not in models:
            _fail(source, f"{round_name}.targets[{i}]", target,
                  f"must be one of the models defined: {sorted(models)}")
    for i, workload in enumerate(spec["workloads"]):
        if workload not in config["workloads"]:
            _fail(source, f"{round_name}.workloads[{i}]", workload,
                  f"must be one of the workloads defined: {sorted(config['workloads'])}")
    for name in spec["workloads"]:
        own = config["workloads"][name].get("concurrency")
        levels = [c for c in spec["concurrency"] if own is None or c in own]
        if not levels:
            _fail(source, f"workloads.{name}.concurrency", own,
                  f"shares no level with {round_name}.concurrency {spec['concurrency']}: "
                  "the workload would measure nothing there")
        top = max(levels)
        prompts = config["workloads"][name]["num_prompts"]
        if prompts < top:
            # a closed loop of n requests never has more than n in flight: the point would be
            # labelled with a concurrency it never reached
            _fail(source, f"{round_name}.concurrency", spec["concurrency"],
                  f"concurrency {top} needs at least {top} requests, and workloads.{name}."
                  f"num_prompts is {prompts}: raise num_prompts or lower the concurrency")
    for key in ROUND1_ONLY:
        if round_name != "round1" and spec.get(key):
            _fail(source, f"{round_name}.{key}", spec[key], "only round 1 has this (remove it)")
    for i, method_spec in enumerate(spec["methods"]):
        key = f"{round_name}.methods[{i}]"
        method = method_spec["method"]
        for j, target in enumerate(method_spec.get("targets") or []):
            if target not in models:
                _fail(source, f"{key}.targets[{j}]", target,
                      f"must be one of the models defined: {sorted(models)}")
        if method_spec.get("interleave") and config["loadgen"].get("duration_s") is not None:
            # a duration-bounded speculative point sends as many prompts as its baseline's,
            # read from the baseline's finished records: a pair measured in turn has none yet
            _fail(source, f"{key}.interleave", True,
                  "loadgen.duration_s fixes each speculative point's prompts from its "
                  "baseline's finished cell; measured in turn, the pair has none yet (remove "
                  "one of the two)")
        stateful = CROSS_REQUEST_STATE.get(method)
        if method_spec.get("interleave") and stateful and method_spec["options"].get(
                stateful[0], stateful[1]) != stateful[1]:
            # each of its points needs a server of its own: nothing to take turns with
            _fail(source, f"{key}.interleave", True,
                  f"{method} with options.{stateful[0]} keeps state across requests, so each "
                  "of its points runs in a fresh server of its own; it cannot take turns "
                  "with a baseline server (remove one of the two)")
        sampled = sorted({config["workloads"][w].get("temperature", config["loadgen"][
            "temperature"]) for w in spec["workloads"]})
        for j, temperature in enumerate(method_spec.get("temperatures") or []):
            if temperature not in sampled:
                _fail(source, f"{key}.temperatures[{j}]", temperature,
                      f"must be a temperature of the round's workloads: {sampled}")
        draft_tp = method_spec["options"].get("draft_tensor_parallel_size")
        for target in typed.method_targets(typed.methods[i]) if draft_tp is not None else []:
            tp = models[target].get("tensor_parallel_size", 1)
            if draft_tp not in (1, tp):
                _fail(source, f"{key}.options.draft_tensor_parallel_size", draft_tp,
                      f"vLLM runs a draft with tensor parallelism 1 or the target's; target "
                      f"{target!r} has tensor_parallel_size {tp}")
            if method == "draft_model" and draft_tp != tp:
                # vllm/v1/spec_decode/draft_model.py (_raise_if_draft_tp_mismatch): TP ranks
                # would share one compile cache for a TP-1 draft
                _fail(source, f"{key}.options.draft_tensor_parallel_size", draft_tp,
                      f"vLLM's draft_model method runs the draft with the target's tensor "
                      f"parallelism only; target {target!r} has tensor_parallel_size {tp} "
                      "(remove the option: the draft then follows the target)")
        if method == VANILLA:
            _fail(source, f"{key}.method", method,
                  "no speculation is always measured for every target; "
                  "list only speculative methods")
        draft = method_spec.get("draft")
        if method in METHODS_WITH_DRAFT and draft is None:
            _fail(source, f"{key}.draft", None,
                  f"method {method!r} needs a draft model / head: set `draft` to a model key")
        if method in METHODS_WITHOUT_DRAFT and draft is not None:
            _fail(source, f"{key}.draft", draft,
                  f"method {method!r} takes no draft model; remove `draft`")
        if draft is not None and draft not in models:
            _fail(source, f"{key}.draft", draft,
                  f"must be one of the models defined: {sorted(models)}")
        if method_spec.get("acceptance_source") is not None and \
                settings.synthetic_setting(method_spec["options"]) is None:
            _fail(source, f"{key}.acceptance_source", method_spec["acceptance_source"],
                  "names where a set acceptance comes from: give `options` "
                  "rejection_sample_method: synthetic with synthetic_acceptance_length (or "
                  "rates), or remove it")
        for option, what in (("sweep_repeats", "the repeats"),
                             ("sweep_concurrency", "the concurrency levels")):
            if method_spec.get(option) is not None and not method_spec.get("acceptance_sweep"):
                _fail(source, f"{key}.{option}", method_spec[option],
                      f"sets {what} of an acceptance sweep's cells: give `acceptance_sweep`, "
                      "or remove it")
        levels = spec.get("concurrency") or []
        unknown = sorted(set(method_spec.get("sweep_concurrency") or ()) - set(levels))
        if unknown:
            _fail(source, f"{key}.sweep_concurrency", method_spec["sweep_concurrency"],
                  f"names levels the round does not measure ({unknown}; its concurrency: "
                  f"{levels})")
        reserved = (RESERVED_OPTIONS | {"num_speculative_tokens_per_batch_size"}) \
            & set(method_spec["options"])
        if reserved:
            _fail(source, f"{key}.options", sorted(reserved),
                  "set these through `method`, `k`, `draft`, `dynamic_k` or a round's "
                  "`settings`, not `options`")
    names = []
    for i, setting in enumerate(spec["settings"]):
        setting.setdefault("server", {})
        setting.setdefault("speculative", {})
        key = f"{round_name}.settings[{i}]"
        if setting["name"] in names:
            _fail(source, f"{key}.name", setting["name"], "setting names must be unique")
        names.append(setting["name"])
        reserved = RESERVED_OPTIONS & set(setting["speculative"])
        if reserved:
            _fail(source, f"{key}.speculative", sorted(reserved),
                  "set these through the round's `methods`")
        if "speculative_config" in setting["server"] or "model" in setting["server"]:
            _fail(source, f"{key}.server", sorted(setting["server"]),
                  "the model and speculative_config come from the round's targets and methods")


# built from another model of the config (random_init takes only its tokenizer)
DERIVED_KINDS = ("truncate", "quantize", "eagle_head", "deepen", "random_init", "random_head")


def _check_adaptive_instances(source: str, config: dict) -> None:
    """Under the adaptive rule a round's cells have one server instance: the rule decides a
    point before each look from the looks measured before it, and looks spread over server
    instances are measured in sessions of their own that do not see each other's, so each
    would decide on its own share (with the wrong number of looks) and its stops would not
    recheck. (Derived dynamic-K cells are measured without the rule.)"""
    if not settings.adaptive_on(config.get("adaptive")):
        return
    why = ("must be 1 under `adaptive:`: the rule decides each point from the repeats measured "
           "before each look, and repeats on other server instances run in sessions of their "
           "own that cannot see them; set 1 (a dynamic_k entry may set its own), or "
           "adaptive: {enabled: false}")
    if (count := config["loadgen"].get("server_instances", 1)) > 1:
        _fail(source, "loadgen.server_instances", count, why)
    for round_name in ROUNDS:
        for i, method in enumerate((config.get(round_name) or {}).get("methods") or []):
            if (count := method.get("server_instances") or 1) > 1:
                _fail(source, f"{round_name}.methods[{i}].server_instances", count, why)


def _check_round1_extras(source: str, round1: dict, typed: settings.Round) -> None:
    """offline / transformers sections: they name round 1 workloads and methods."""
    names = {m.name: m for m in typed.methods}
    for section in ("offline", "transformers"):
        spec = round1.get(section)
        if not spec:
            continue
        for j, workload in enumerate(spec.get("workloads") or []):
            if workload not in round1["workloads"]:
                _fail(source, f"round1.{section}.workloads[{j}]", workload,
                      f"must be a round 1 workload: {round1['workloads']}")
        for j, name in enumerate(spec.get("speculators") or []):
            if name not in names:
                _fail(source, f"round1.{section}.speculators[{j}]", name,
                      f"must name a round 1 method: {sorted(names)}")
            if section == "transformers" and names[name].method not in TRANSFORMERS_METHODS:
                _fail(source, f"round1.transformers.speculators[{j}]", name,
                      f"method {names[name].method!r} has no Transformers counterpart; "
                      f"these do: {sorted(TRANSFORMERS_METHODS)}")


def check_config(config: dict, source: str = "config") -> None:
    """Cross-field checks: every reference resolves and every method gets what it needs."""
    models = config["models"]
    for name, model in models.items():
        src = model["source"]
        if src["kind"] in DERIVED_KINDS:
            if src["model"] not in models:
                _fail(source, f"models.{name}.source.model", src["model"],
                      f"must be one of the models defined: {sorted(models)}")
            base = models[src["model"]]
            derived = base["source"]["kind"] in DERIVED_KINDS
            if src["kind"] != "random_init" and base["source"]["kind"] == "random_init":
                derived = False  # a model with random weights is a base like a download
            if src["kind"] == "random_head":  # reads only its target's shape (config.json)
                derived = False
            # a calibration target may pad a truncated model (its first layers, as they are):
            # a cheaper exact pair than the whole model and its padded copy
            if src["kind"] == "deepen" and base["source"]["kind"] == "truncate":
                derived = False
            if derived or base.get("quantization"):
                _fail(source, f"models.{name}.source.model", src["model"],
                      "a derived model needs a full-precision model that is not itself derived")
        if model.get("full_precision") is not None and model["full_precision"] not in models:
            _fail(source, f"models.{name}.full_precision", model["full_precision"],
                  f"must be one of the models defined: {sorted(models)}")
        declares = QUANTIZE_FORMATS.get(src.get("format"))
        if src["kind"] == "quantize" and model.get("quantization") != declares:
            _fail(source, f"models.{name}.quantization", model.get("quantization"),
                  f"its source writes a {src['format']} checkpoint: declare "
                  f"`quantization: {declares}`")

    for where, spec in [("tokenizer", config["tokenizer"])] + [
            (f"datasets.{n}.tokenizer", d["tokenizer"]) for n, d in config["datasets"].items()
            if "tokenizer" in d]:
        if "model" in spec and spec["model"] not in models:
            _fail(source, f"{where}.model", spec["model"],
                  f"must be one of the models defined: {sorted(models)}")

    sources = config["sources"]
    for name, spec in sources.items():
        _check_source(source, name, spec)
    for name, dataset in config["datasets"].items():
        _check_dataset(source, name, dataset, sources)

    datasets = config["datasets"]
    for name, workload in config["workloads"].items():
        if workload["dataset"] not in datasets:
            _fail(source, f"workloads.{name}.dataset", workload["dataset"],
                  f"must be one of the datasets defined: {sorted(datasets)}")
        subsets = subsets_of(datasets[workload["dataset"]])
        if workload["subset"] not in subsets:
            _fail(source, f"workloads.{name}.subset", workload["subset"],
                  f"dataset {workload['dataset']!r} has the subsets {subsets}")

    for round_name in ROUNDS:
        if config.get(round_name):
            _check_round(source, round_name, config[round_name], config)
    _check_adaptive_instances(source, config)
    round1 = config["round1"]
    typed = settings.settings(config).rounds["round1"]
    _check_round1_extras(source, round1, typed)
    names = [method.name for method in typed.methods]
    for i, entry in enumerate(config["dynamic_k"]):
        if entry["speculator"] not in names:
            _fail(source, f"dynamic_k[{i}].speculator", entry["speculator"],
                  f"must name a round 1 method: {names}")
        for j, workload in enumerate(entry.get("workloads") or []):
            if workload not in round1["workloads"]:
                _fail(source, f"dynamic_k[{i}].workloads[{j}]", workload,
                      f"must be a round 1 workload: {round1['workloads']}")
