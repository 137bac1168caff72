"""What produced a number: software, device, host and workflow revision."""

from __future__ import annotations

import contextlib
import platform
import shutil
import socket
import subprocess
from functools import cache
from pathlib import Path

from sdbench import __version__
from sdbench.host import dist_version, nvml_session, vllm_distribution


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
        "torch": dist_version("torch"),
        "transformers": dist_version("transformers"),
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
