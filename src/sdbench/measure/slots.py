"""GPU slots: which devices a cell's server may use when several cells run at once.

`snakemake --resources gpu=N` lets cells whose `gpu` resources add up to at most N run at the
same time, but Snakemake does not say *which* GPUs a job got. The workflow owns that: every GPU
of the host is a slot, a lock file under `<lock_dir>/<hostname>/gpu<i>.lock` held with
`fcntl.flock` for as long as a server uses it. A cell takes as many free slots as it needs GPUs
(its target's tensor-parallel size) and its server sees only those (`CUDA_VISIBLE_DEVICES`, in
PCI bus order, the order NVML numbers devices in). The kernel drops a lock when its process
dies, so a killed cell never leaves a slot taken.

No pinning happens when the host has no NVIDIA GPU (CPU serving) or when a batch scheduler
already gave the job its own devices (SLURM: `SLURM_JOB_ID` is set).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sdbench.host import nvml_session

LOCK_DIR = ".sdbench/gpu-slots"
SCHEDULER_VARIABLES = ("SLURM_JOB_ID",)


class SlotError(RuntimeError):
    """The cell could not get the GPUs it needs."""


def visible_gpu_ids(environ: dict | None = None,
                    count: Callable[[], int] | None = None) -> list[int]:
    """The GPU ids this process may hand out: those listed in CUDA_VISIBLE_DEVICES (integers), or
    every device NVML sees, or none (no NVIDIA driver: CPU serving)."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [part.strip() for part in listed.split(",") if part.strip()]
        try:
            return [int(i) for i in ids]
        except ValueError:
            raise SlotError(
                f"CUDA_VISIBLE_DEVICES={listed!r}: the workflow pins cells by integer GPU index; "
                "list indices (e.g. 0,1,2,3), not UUIDs") from None
    return list(range((count or nvml_device_count)()))


def nvml_device_count() -> int:
    with nvml_session() as nvml:
        return 0 if nvml is None else nvml.nvmlDeviceGetCount()


@dataclass
class Slots:
    """GPUs held by one cell (empty: no pinning). `env` is what the server's environment gets."""

    gpu_ids: list[int]
    reason: str
    _handles: list = field(default_factory=list, repr=False)
    # GPUs whose power and utilisation are sampled: the pinned ones, or under a scheduler
    # every GPU the job sees
    scheduler_ids: list[int] = field(default_factory=list)

    @property
    def monitor_ids(self) -> list[int]:
        return self.gpu_ids or self.scheduler_ids

    @property
    def env(self) -> dict[str, str]:
        if not self.gpu_ids:
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.gpu_ids)),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def release(self) -> None:
        _unlock(self._handles)
        self._handles.clear()


def _unlock(handles: list) -> None:
    for handle in handles:
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _try_lock(path: Path):
    handle = open(path, "a+")  # noqa: SIM115 - held open while the slot is taken
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def acquire(n: int, *, lock_dir: str | Path = LOCK_DIR, environ: dict | None = None,
            gpu_ids: list[int] | None = None, timeout_s: float = 600, poll_s: float = 1.0,
            label: str = "cell") -> Slots:
    """Take `n` free GPU slots of this host (waiting up to `timeout_s` for them).

    Snakemake's `gpu` resource already keeps the sum of running cells' GPUs within
    `--resources gpu=N`, so waiting only happens when something outside this run holds slots
    (another snakemake in the same directory) or N exceeds the host's GPUs."""
    environ = os.environ if environ is None else environ
    scheduler = [v for v in SCHEDULER_VARIABLES if environ.get(v)]
    if scheduler:
        try:
            seen = visible_gpu_ids(environ)
        except SlotError:
            seen = []
        return Slots([], f"no pinning: the batch scheduler assigned this job's GPUs "
                         f"({scheduler[0]})", scheduler_ids=seen)
    ids = visible_gpu_ids(environ) if gpu_ids is None else list(gpu_ids)
    if not ids:
        return Slots([], "no pinning: no NVIDIA GPU visible (CPU serving)")
    if n > len(ids):
        raise SlotError(f"{label} needs {n} GPUs (tensor x pipeline x data parallel size) "
                        f"but this host exposes {len(ids)}: {ids}")
    folder = Path(lock_dir) / socket.gethostname()
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        handles, taken = [], []
        for gpu in ids:
            handle = _try_lock(folder / f"gpu{gpu}.lock")
            if handle is not None:
                handles.append(handle)
                taken.append(gpu)
                if len(taken) == n:
                    return Slots(taken, f"pinned to GPU {','.join(map(str, taken))} of {ids}",
                                 handles)
        _unlock(handles)  # not enough free: take none, try again
        if time.monotonic() >= deadline:
            raise SlotError(
                f"{label}: {n} of the GPUs {ids} were not free for {timeout_s:.0f} s (lock files "
                f"under {folder}: another run in this directory holds them). Lower "
                "--resources gpu=N to the number of GPUs, or wait for the other run.")
        time.sleep(poll_s)


def split(slots: Slots, counts: list[int]) -> list[Slots]:
    """The GPUs of `slots` shared out among servers that run side by side, `counts[i]` for the
    i-th, in order: those pinned here, or under a batch scheduler the GPUs it let the job see.
    Without GPUs (CPU serving) every part is unpinned. The parts hold no locks: `slots` does."""
    ids = slots.gpu_ids or (slots.scheduler_ids if len(counts) > 1 else [])
    if not ids:
        return [Slots([], slots.reason, scheduler_ids=slots.scheduler_ids) for _ in counts]
    if sum(counts) > len(ids):
        raise SlotError(f"{len(counts)} servers side by side need {sum(counts)} GPUs "
                        f"({' + '.join(map(str, counts))}); this job has {len(ids)}: {ids}")
    parts, start = [], 0
    for n in counts:
        part = ids[start:start + n]
        parts.append(Slots(part, f"pinned to GPU {','.join(map(str, part))} of {ids} "
                                 "(servers side by side)"))
        start += n
    return parts


@contextlib.contextmanager
def held(n: int, **kwargs) -> Iterator[Slots]:
    slots = acquire(n, **kwargs)
    try:
        yield slots
    finally:
        slots.release()
