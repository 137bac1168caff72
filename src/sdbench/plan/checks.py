"""Checks that need the installed vLLM, the model checkpoints or the GPU.

`check_installed(config)` runs at workflow start (before any job): every speculative method
and option must be known to the installed vLLM (but for a method a vLLM release removed, or
one whose draft architecture its registry leaves out: those cells are planned as unsupported,
`cell_method_reason`), and a draft whose vocabulary differs from its target's is refused
unless the pair opts into vLLM's heterogeneous-vocabulary mode. A cell runs the checks that
need its own models again (they may have been built since) and, on a GPU, refuses to start
beside leftover vLLM processes that hold the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import importlib.util
import json
import typing
from functools import cache
from pathlib import Path

import psutil

from sdbench import layout
from sdbench.data.builders import request_bound
from sdbench.data.conversations import messages_of
from sdbench.files import atomic_write_json, read_jsonl
from sdbench.host import cache_dir, nsys_executable, nvml_session, vllm_distribution
from sdbench.models.checkpoints import with_text_config
from sdbench.plan import grid, specs
from sdbench.plan.config import ConfigError
from sdbench.plan.settings import Setting, Speculator, settings
from sdbench.plan.work import workload_card


@dataclasses.dataclass(frozen=True)
class VllmFeatures:
    version: str
    methods: frozenset[str]
    options: frozenset[str]  # the fields of vLLM's SpeculativeConfig
    server_args: frozenset[str] = frozenset()  # the fields of vLLM's EngineArgs
    # the speculative methods vLLM's V2 model runner accepts (None: this vLLM does not say)
    v2_methods: frozenset[str] | None = None
    # the model architectures vLLM's registry loads (None: not asked)
    architectures: frozenset[str] | None = None


class _Unset:
    """A stand-in for the parts of a VllmConfig that `_v2_runner_methods` leaves at their
    defaults: any attribute is another one; false, equal to nothing, not greater than
    anything (no parallelism, no optional feature on)."""

    def __init__(self, **given) -> None:
        self.__dict__.update(given)

    def __getattr__(self, name: str) -> _Unset:
        return _Unset()

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other) -> bool:
        return False

    def __gt__(self, other) -> bool:
        return False

    __hash__ = object.__hash__
    __lt__ = __ge__ = __le__ = __gt__


def _v2_runner_methods(methods: frozenset[str]) -> frozenset[str] | None:
    """The methods whose speculation vLLM's V2 model runner accepts, asked of vLLM's own list
    of what that runner does not support (`VllmConfig._get_v2_model_runner_unsupported_
    features`, vLLM 0.26+) for an otherwise default configuration; None where this vLLM has
    no such list or it cannot be asked this way."""
    try:
        from vllm.config import VllmConfig

        def ask(speculative: _Unset | None) -> set[str]:
            return set(VllmConfig._get_v2_model_runner_unsupported_features(_Unset(
                model_config=None, speculative_config=speculative)))

        # what the stand-in itself trips (an `is not None` test of an optional part) is not
        # the method's
        unset = ask(None)
        return frozenset(m for m in methods if not ask(_Unset(method=m)) - unset)
    except Exception:  # noqa: BLE001 - another vLLM's internals: then it is not checked
        return None


def _registered_architectures() -> frozenset[str]:
    from vllm import ModelRegistry

    return frozenset(ModelRegistry.get_supported_archs())


def _literal_values(tp) -> list[str]:
    values = []
    for arg in typing.get_args(tp):
        values += _literal_values(arg) if typing.get_args(arg) else [arg]
    return [v for v in values if isinstance(v, str)]


def _features_cache() -> Path | None:
    """A per-installation cache file: importing vLLM takes seconds, and every Snakemake
    invocation (dry runs, cluster jobs) checks the config."""
    dist = vllm_distribution()
    if dist["version"] is None:
        return None
    root = cache_dir()
    location = hashlib.sha256(str(Path(importlib.util.find_spec("vllm").origin)).encode())
    return root / (f"vllm-features-{dist['distribution']}-{dist['version']}-"
                   f"{location.hexdigest()[:8]}.json")


@cache
def vllm_features() -> VllmFeatures | None:
    """What the installed vLLM offers for speculation; None where vLLM is not installed."""
    if importlib.util.find_spec("vllm") is None:
        return None
    cached = _features_cache()
    if cached is not None and cached.is_file():
        data = json.loads(cached.read_text())
        if "architectures" in data:  # older cache files lack it: read vLLM again
            v2 = data["v2_methods"]
            return VllmFeatures(data["version"], frozenset(data["methods"]),
                                frozenset(data["options"]), frozenset(data["server_args"]),
                                None if v2 is None else frozenset(v2),
                                frozenset(data["architectures"]))
    import vllm
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    from vllm.engine.arg_utils import EngineArgs

    methods = frozenset(_literal_values(SpeculativeMethod))
    features = VllmFeatures(vllm.__version__, methods,
                            frozenset(f.name for f in dataclasses.fields(SpeculativeConfig)),
                            frozenset(f.name for f in dataclasses.fields(EngineArgs)),
                            _v2_runner_methods(methods), _registered_architectures())
    if cached is not None:
        with contextlib.suppress(OSError):  # a read-only home only costs the import next time
            cached.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(cached, {"version": features.version,
                                       "methods": sorted(features.methods),
                                       "options": sorted(features.options),
                                       "server_args": sorted(features.server_args),
                                   "v2_methods": (None if features.v2_methods is None
                                                  else sorted(features.v2_methods)),
                                   "architectures": sorted(features.architectures)})
    return features


def checkpoint_config(model_dir: str | Path) -> dict | None:
    """A checkpoint's config.json (None if the checkpoint is not there yet)."""
    path = Path(model_dir) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def vocab_size(model_dir: str | Path) -> int | None:
    """vocab_size from a checkpoint's config.json (None if the checkpoint is not there yet)."""
    config = checkpoint_config(model_dir)
    if config is None:
        return None
    return config.get("vocab_size") or with_text_config(config).get("vocab_size")


def check_quantization(config: dict, name: str, root: str | Path = ".",
                       source: str = "config") -> None:
    """The quantization a model declares must be the one its checkpoint carries."""
    declared = config["models"][name].get("quantization")
    folder = Path(root) / specs.model_dir(config, name)
    checkpoint = checkpoint_config(folder)
    if checkpoint is None:
        return  # not built or downloaded yet: the cell checks again before its server starts
    method = (checkpoint.get("quantization_config") or {}).get("quant_method")
    method = None if method is None else str(method).lower()
    if method != declared:
        raise ConfigError(
            f"{source}: models.{name}.quantization = {declared!r}, but {folder}/config.json "
            + (f"says quantization_config.quant_method = {method!r}" if method else
               "has no quantization_config (a full-precision checkpoint)")
            + f"; declare `quantization: {method if method else 'null'}` or point the model "
            "at the checkpoint you meant")


# speculative methods a vLLM release removed: the last release that has each, and the first
# without it (vllm/config/speculative.py's SpeculativeMethod: 0.32.0 lists both, 0.33.0
# neither). A cell of such a method is *unsupported* by a vLLM without it (planned and recorded
# like a cell this host cannot run: the rest of the study runs); any other method the installed
# vLLM does not know is a configuration error.
REMOVED_METHODS = {"medusa": ("0.32.0", "0.33.0"), "mlp_speculator": ("0.32.0", "0.33.0")}


# the architecture vLLM loads a method's draft checkpoint as, where the method fixes it (its
# config class's): a vLLM whose model registry lacks it cannot run the method although the
# method's name is valid. vLLM 0.26 and 0.32 list mlp_speculator as a method but leave
# MLPSpeculatorPreTrainedModel out of their registry ("Temporarily disabled ... once the MLP
# Speculator is supported in V1", vllm/model_executor/models/registry.py).
METHOD_ARCHITECTURES = {"mlp_speculator": "MLPSpeculatorPreTrainedModel",
                        "medusa": "MedusaModel"}


def method_reason(method: str, features: VllmFeatures | None) -> str | None:
    """Why the installed vLLM cannot run a (known) speculative method; None when it can, when
    the method is no speculation, or when no vLLM is installed here."""
    if features is None or method == grid.VANILLA:
        return None
    architecture = METHOD_ARCHITECTURES.get(method)
    if method in features.methods:
        if architecture is None or features.architectures is None or \
                architecture in features.architectures:
            return None
        return (f"unsupported by vLLM {features.version}: it names the method {method!r} but "
                f"its model registry has no {architecture}, the architecture such a draft "
                "loads as (vLLM leaves it out until its V1 engine supports it)")
    last, first = REMOVED_METHODS.get(method, (None, None))
    if last is None:
        return f"vLLM {features.version} has no speculative method {method!r}"
    return (f"unsupported by vLLM {features.version} (removed): its speculative methods no "
            f"longer include {method!r} (vLLM {first} removed it; {last} still names it)")


def cell_method_reason(cell: specs.Cell, features: VllmFeatures | None) -> str | None:
    """`method_reason` of a cell that vLLM serves (a Transformers cell does not need vLLM)."""
    if cell.engine == specs.TRANSFORMERS:
        return None
    return method_reason(cell.server_config["method"], features)


def check_speculator(spec: Speculator, where: str, features: VllmFeatures | None,
                     source: str = "config") -> None:
    """A round's method entry against the installed vLLM (a method it removed is planned as
    unsupported per cell instead: `cell_method_reason`)."""
    if features is None or spec.method in REMOVED_METHODS and spec.method not in \
            features.methods:
        return
    if spec.method not in features.methods:
        close = difflib.get_close_matches(spec.method, sorted(features.methods), n=1)
        raise ConfigError(
            f"{source}: {where}.method = {spec.method!r} is not a speculative method of the "
            f"installed vLLM {features.version}"
            + (f": did you mean {close[0]!r}?" if close else "")
            + f" (it has: {sorted(features.methods)})")
    if spec.acceptance_sweep and "synthetic_acceptance_length" not in features.options:
        raise ConfigError(
            f"{source}: {where}.acceptance_sweep needs vLLM's synthetic rejection sampling "
            "(speculative_config synthetic_acceptance_length, vLLM 0.26+); the installed vLLM "
            f"{features.version} does not have it: remove the sweep or install a newer vLLM")
    unknown = sorted(set(spec.options) - features.options)
    if unknown:
        raise ConfigError(
            f"{source}: {where}.options.{unknown[0]} is not a speculative_config setting of the "
            f"installed vLLM {features.version}; it would not take effect. Known settings: "
            f"{sorted(features.options - {'method', 'model', 'num_speculative_tokens'})}")


def check_setting(setting: Setting, where: str, features: VllmFeatures | None,
                  source: str = "config") -> None:
    """A round's server-parameter setting against the installed vLLM: a key it does not know
    would be refused by the server, or worse ignored; it is refused here, by name."""
    if features is None:
        return
    for part, known, what in (("server", features.server_args, "server argument (EngineArgs)"),
                              ("speculative", features.options, "speculative_config setting")):
        unknown = sorted(set(getattr(setting, part)) - known)
        if unknown:
            raise ConfigError(
                f"{source}: {where} ({setting.name!r}).{part}.{unknown[0]} is not a {what} "
                f"of the installed vLLM {features.version}; the setting cannot be measured "
                "with this vLLM. Remove it, fix its name, or install a vLLM that has it.")


# speculative methods that need a package besides vLLM (checked when a cell runs: the machine
# that plans the workflow need not be the one that measures)
METHOD_PACKAGES = {"suffix": ("arctic_inference", "arctic-inference")}


def check_model_runners(config: dict, features: VllmFeatures | None,
                        source: str = "config") -> None:
    """A dynamic-K entry measured under the V2 model runner: its method must be one that
    runner accepts in the installed vLLM (else the server refuses to start, after the round 1
    cells it derives from have used the GPU)."""
    if features is None or features.v2_methods is None:
        return
    round1 = settings(config).rounds.get("round1")
    for i, entry in enumerate(settings(config).dynamic_k):
        if "v2" not in entry.model_runners or round1 is None:
            continue
        method = round1.method(entry.speculator).method
        if method not in features.v2_methods:
            raise ConfigError(
                f"{source}: dynamic_k[{i}].model_runners has v2, but the V2 model runner of "
                f"the installed vLLM {features.version} does not run {method!r} speculation "
                f"(it runs: {sorted(features.v2_methods)}); remove v2 for {entry.speculator!r}")


def check_cell_tools(cell: specs.Cell, source: str = "cell") -> None:
    """What a cell needs beyond vLLM, before it takes a GPU: the method's extra package, and
    nsys when the method is profiled."""
    needed = METHOD_PACKAGES.get(cell.server_config["method"])
    if needed and importlib.util.find_spec(needed[0]) is None:
        raise ConfigError(
            f"{source} ({cell.label}): method {cell.server_config['method']!r} needs the Python "
            f"package {needed[1]!r}, which is not installed here (pip install {needed[1]}); "
            "vLLM would refuse the server at start-up")
    if cell.profile == "nsys":
        nsys_executable()


def check_vocab(config: dict, cell: specs.Cell, root: str | Path = ".",
                features: VllmFeatures | None = None, source: str = "config") -> None:
    """A draft whose vocabulary size differs from its target's is refused (vLLM would refuse
    it at start-up, after the models were loaded), unless the cell opts into
    use_heterogeneous_vocab."""
    server = cell.server_config
    if server["draft"] is None or server["method"] != "draft_model":
        return
    target, draft = server["target"]["name"], server["draft"]["name"]
    sizes = [vocab_size(Path(root) / specs.model_dir(config, name)) for name in (target, draft)]
    if None in sizes or sizes[0] == sizes[1]:
        return
    if server["method_options"].get("use_heterogeneous_vocab"):
        if features is not None and "use_heterogeneous_vocab" not in features.options:
            raise ConfigError(
                f"{source}: cell {cell.cell_id} ({cell.label}) sets use_heterogeneous_vocab, "
                f"which the installed vLLM {features.version} does not have")
        return
    raise ConfigError(
        f"{source}: draft {draft!r} (vocab_size {sizes[1]}) and target {target!r} (vocab_size "
        f"{sizes[0]}) have different vocabularies; vLLM refuses the pair. Use a draft with the "
        "target's tokenizer, or set `options: {use_heterogeneous_vocab: true}` for this method "
        "(vLLM >= 0.32, greedy drafting only).")


# config.json keys a model's trained context length is read from (vLLM takes the smallest)
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "max_sequence_length", "max_seq_length", "seq_len")
# RoPE scalings whose max_position_embeddings is already the scaled length (vLLM applies no
# factor for these; for other types with a factor it multiplies)
PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def checkpoint_context(model_dir: str | Path) -> tuple[int, str] | None:
    """(context length, the config.json key it comes from) of a checkpoint, as vLLM derives it;
    None when the checkpoint or the keys are not there."""
    config = checkpoint_config(model_dir)
    if config is None:
        return None
    config = with_text_config(config)
    found = [(config[k], k) for k in CONTEXT_KEYS
             if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)]
    if not found:
        return None
    length, key = min(found)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) not in \
            PRESCALED_ROPE and isinstance(rope.get("factor"), int | float) and rope["factor"]:
        length, key = int(length * rope["factor"]), f"{key} x rope factor {rope['factor']}"
    return length, key


def workload_need(workload: dict, root: str | Path = ".") -> tuple[int, str] | None:
    """(the most tokens one request of the workload needs: prompt + output, and what says so):
    its built prompt set's card when there is one of the current definition, else the
    definition's bound."""
    facts = workload_card(workload, root)
    if facts is not None:
        prompt, output = facts.get("prompt_tokens") or {}, facts.get("output_tokens") or {}
        if "max" in prompt and "max" in output:
            card = Path(root) / layout.card_path(workload["dataset"], workload["subset"])
            return prompt["max"] + output["max"], f"its prompt set ({card})"
    bound = request_bound(workload["definition"])
    return None if bound is None else (bound, "its dataset definition")


def _context_key(config: dict, target: str) -> str:
    return (f"models.{target}.max_model_len" if config["models"][target].get("max_model_len")
            else "server.args.max_model_len")


def check_context(config: dict, root: str | Path = ".", source: str = "config",
                  cells: list[specs.Cell] | None = None) -> None:
    """Every vLLM cell's context length against its target checkpoint's own (where its
    config.json is there) and against the longest prompt + output its workload can send: a
    request that cannot fit is refused before any job, not failed at run time."""
    seen = set()
    for cell in grid.all_cells(config) if cells is None else cells:
        if cell.engine == specs.TRANSFORMERS:
            continue
        target = cell.server_config["target"]["name"]
        limit = specs.server_arg(cell.server_config["args"], "max_model_len")
        if (target, cell.workload["name"], limit) in seen:
            continue
        seen.add((target, cell.workload["name"], limit))
        where = _context_key(config, target)
        own = checkpoint_context(Path(root) / specs.model_dir(config, target))
        if limit is not None and own is not None and limit > own[0]:
            raise ConfigError(
                f"{source}: {where} = {limit} is more than target {target!r} takes ({own[1]} = "
                f"{own[0]} in its config.json): vLLM refuses to start it. Set "
                f"models.{target}.max_model_len: {own[0]} (or less) for this target.")
        context = limit if limit is not None else (own[0] if own else None)
        need = workload_need(cell.workload, root)
        if context is not None and need is not None and need[0] > context:
            raise ConfigError(
                f"{source}: workload {cell.workload['name']!r} sends requests of up to "
                f"{need[0]} tokens (prompt + output, by {need[1]}), more than target "
                f"{target!r} serves ({where} = {context}): they would fail. Raise {where} "
                "(as far as the checkpoint allows) or make the workload's requests shorter "
                "(spec_bench max_prompt_tokens, sharegpt filters.max_total_tokens, the buckets).")


def check_cell_context(config: dict, cell: specs.Cell, root: str | Path = ".") -> None:
    """Before a cell's server starts: every prompt of its workload, as the target's own
    tokenizer and chat template see it, plus its output, fits the server's context length."""
    if cell.engine == specs.TRANSFORMERS:
        return
    from transformers import AutoTokenizer

    target = cell.server_config["target"]["name"]
    folder = Path(root) / specs.model_dir(config, target)
    own = checkpoint_context(folder)
    limit = specs.server_arg(cell.server_config["args"], "max_model_len") or \
        (own[0] if own else None)
    if limit is None or not folder.is_dir():  # no checkpoint: the server start says so
        return
    tokenizer = AutoTokenizer.from_pretrained(folder)
    chat = settings(config).loadgen.endpoint == "chat" and tokenizer.chat_template is not None
    too_long = []
    # a processed prompt file has no blank lines: record i is line i
    for lineno, record in enumerate(read_jsonl(Path(root) / cell.workload["path"]), start=1):
        if chat:
            prompt = tokenizer.apply_chat_template(
                messages_of(record), add_generation_prompt=True, tokenize=True,
                return_dict=False)
        else:
            prompt = tokenizer.encode(record["prompt"])
        need = len(prompt) + record["output_tokens"]
        if need > limit:
            too_long.append((need, lineno))
    if too_long:
        need, lineno = max(too_long)
        raise ConfigError(
            f"cell {cell.cell_id} ({cell.label}): {len(too_long)} prompts of "
            f"{cell.workload['path']} need more than the {limit} tokens target {target!r} "
            f"serves ({_context_key(config, target)}), as its own tokenizer"
            f"{' and chat template' if chat else ''} counts them with their output (the "
            f"longest: line {lineno}, {need} tokens); they would fail. Raise the context "
            "length or make the workload's prompts shorter (its dataset's max_prompt_tokens, "
            "filters or buckets).")


def check_installed(config: dict, root: str | Path = ".", source: str = "config") -> None:
    """All checks that need the installed vLLM and whichever checkpoints already exist."""
    features = vllm_features()
    for round_name, spec in settings(config).rounds.items():
        for i, method in enumerate(spec.methods):
            check_speculator(method, f"{round_name}.methods[{i}]", features, source)
        for i, setting in enumerate(spec.settings):
            check_setting(setting, f"{round_name}.settings[{i}]", features, source)
    check_model_runners(config, features, source)
    cells = grid.all_cells(config)
    for name in sorted({name for cell in cells for name in specs.cell_models(cell)}):
        check_quantization(config, name, root, source)
    for cell in cells:
        check_vocab(config, cell, root, features, source)
    check_context(config, root, source, cells)


def gpu_processes(indices: list[int]) -> list[dict]:
    """Processes holding memory on NVIDIA GPUs `indices` (NVML numbering); [] without NVML."""
    found = []
    with nvml_session() as nvml:
        for index in indices if nvml is not None else []:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                found.append({"gpu": index, "pid": proc.pid,
                              "used_memory": getattr(proc, "usedGpuMemory", None)})
    return found


def leftover_vllm_processes(holders: list[dict]) -> list[dict]:
    """The holders whose command line is a vLLM server or engine (leftovers of earlier runs)."""
    leftovers = []
    for holder in holders:
        try:
            cmdline = " ".join(psutil.Process(holder["pid"]).cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "vllm" in cmdline.lower():
            leftovers.append({**holder, "cmdline": cmdline})
    return leftovers
