"""GPU power, energy and utilisation during a measurement point, sampled through NVML.

A background thread reads, every `interval_s`, each pinned GPU's cumulative energy counter
(`nvmlDeviceGetTotalEnergyConsumption`, mJ, Volta and later), its power draw
(`nvmlDeviceGetPowerUsage`, mW) and its utilisation (`nvmlDeviceGetUtilizationRates`, %). After
the point, the numbers are taken over the load generator's own window (first request sent to
last response received, from its per-request start times and latencies, on the same
`time.perf_counter` clock): energy from the counter interpolated at the window's ends (or, where
a GPU has no counter, the trapezoid integral of its power samples), summed over the cell's GPUs.

Without NVML (no NVIDIA driver: CPU serving) every value is None, never zero.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np

from sdbench.host import load_nvml

FIELDS = ("gpu_energy_j", "gpu_avg_power_w", "gpu_max_power_w", "gpu_util_pct",
          "gpu_mem_util_pct", "energy_per_output_token_j", "gpu_energy_source", "gpu_samples",
          "gpu_window_s")


def empty(reason: str) -> dict[str, Any]:
    """The metrics of a point with no GPU readings: every value None, and why."""
    return {**dict.fromkeys(FIELDS), "gpu_monitor": reason}


class GpuSampler:
    """Sample GPUs `gpu_ids` (NVML indices) while running; `window_metrics` afterwards.

    `nvml` may be given (a stand-in in tests); by default pynvml is imported and initialised,
    and an absent library or driver makes the sampler inert (`available` False)."""

    def __init__(self, gpu_ids: list[int], interval_s: float = 0.05, nvml=None,
                 clock=time.perf_counter):
        self.gpu_ids = list(gpu_ids)
        self.interval_s = interval_s
        self.clock = clock
        self.reason = ""
        if nvml is None:
            nvml, self.reason = load_nvml()
        elif hasattr(nvml, "nvmlInit"):
            nvml.nvmlInit()
        self.nvml = nvml
        if nvml is not None and not self.gpu_ids:
            self.reason = "no GPU assigned to the cell"
        self.handles = ([nvml.nvmlDeviceGetHandleByIndex(i) for i in self.gpu_ids]
                        if self.available else [])
        self.has_counter = [self._energy_mj(h) is not None for h in self.handles]
        self.samples: list[tuple[float, list[float | None], list[float], list[float],
                                 list[float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.nvml is not None and bool(self.gpu_ids)

    def _energy_mj(self, handle) -> float | None:
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:  # not supported on this GPU
            return None

    def sample(self) -> None:
        t = self.clock()
        energy = [self._energy_mj(h) if c else None
                  for h, c in zip(self.handles, self.has_counter, strict=True)]
        power = [self.nvml.nvmlDeviceGetPowerUsage(h) / 1000.0 for h in self.handles]
        rates = [self.nvml.nvmlDeviceGetUtilizationRates(h) for h in self.handles]
        self.samples.append((t, energy, power, [float(r.gpu) for r in rates],
                             [float(r.memory) for r in rates]))

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # one failed read must not end the sampling
                self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> GpuSampler:
        if self.available:
            self.sample()
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.sample()
        if self.nvml is not None and hasattr(self.nvml, "nvmlShutdown"):
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()

    def window_metrics(self, start: float, end: float, output_tokens: int | None) -> dict:
        """Energy, power and utilisation over [start, end] (sampler clock), summed over GPUs
        (energy, power) or averaged (utilisation)."""
        if not self.available:
            return empty(self.reason)
        times = np.array([s[0] for s in self.samples])
        if len(times) < 2 or end <= start or start < times[0] or end > times[-1]:
            return empty(f"window [{start:.3f}, {end:.3f}] not covered by the "
                         f"{len(times)} samples")
        energy_j, sources = 0.0, set()
        for g, counted in enumerate(self.has_counter):
            if counted:
                counter = np.array([s[1][g] for s in self.samples]) / 1000.0
                energy_j += float(np.interp(end, times, counter) - np.interp(start, times, counter))
                sources.add("counter")
            else:
                power = np.array([s[2][g] for s in self.samples])
                grid = np.concatenate(([start], times[(times > start) & (times < end)], [end]))
                energy_j += float(np.trapezoid(np.interp(grid, times, power), grid))
                sources.add("power_integral")
        inside = (times >= start) & (times <= end)
        if not inside.any():  # a window shorter than the sampling interval: the nearest sample
            inside[np.argmin(np.abs(times - (start + end) / 2))] = True
        power_total = np.array([sum(s[2]) for s in self.samples])[inside]
        util = np.array([np.mean(s[3]) for s in self.samples])[inside]
        mem = np.array([np.mean(s[4]) for s in self.samples])[inside]
        duration = end - start
        return {
            "gpu_energy_j": energy_j,
            "gpu_avg_power_w": energy_j / duration,
            "gpu_max_power_w": float(power_total.max()),
            "gpu_util_pct": float(util.mean()),
            "gpu_mem_util_pct": float(mem.mean()),
            "energy_per_output_token_j": (energy_j / output_tokens if output_tokens else None),
            "gpu_energy_source": "+".join(sorted(sources)),
            "gpu_samples": int(inside.sum()),
            "gpu_window_s": duration,
            "gpu_monitor": f"NVML, GPUs {self.gpu_ids}, every {self.interval_s * 1000:.0f} ms",
        }


def request_window(detail: dict, fallback_end: float,
                   duration: float | None) -> tuple[float, float]:
    """The load generator's measured window on its perf_counter clock: first request start to
    last request end; without per-request times, `duration` seconds ending at `fallback_end`."""
    starts, latencies = detail.get("start_times") or [], detail.get("latencies") or []
    pairs = [(s, s + lat) for s, lat in zip(starts, latencies, strict=False)
             if s is not None and lat is not None and lat > 0]
    if pairs:
        return min(p[0] for p in pairs), max(p[1] for p in pairs)
    return fallback_end - (duration or 0.0), fallback_end
