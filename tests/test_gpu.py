"""GPU-only features tested on a CPU machine: GPU slots, the NVML sampler (with a stand-in NVML),
tensor parallelism -> GPUs, and the helpers of the validation measurements."""

import multiprocessing
import time
from types import SimpleNamespace

import pytest

from sdbench.measure import gpumon, loadgen, slots, validation
from sdbench.plan import grid, specs
from sdbench.plan.config import load_config
from sdbench.records import with_latencies

from workflow_helpers import REPO

# --- slots -------------------------------------------------------------------------------------

def test_slots_hand_out_distinct_gpus_until_none_is_free(tmp_path):
    held = [slots.acquire(1, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={})
            for _ in range(4)]
    assert sorted(g for s in held for g in s.gpu_ids) == [0, 1, 2, 3]
    assert held[0].env == {"CUDA_VISIBLE_DEVICES": str(held[0].gpu_ids[0]),
                           "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with pytest.raises(slots.SlotError, match="were not free for 0 s"):
        slots.acquire(1, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={}, timeout_s=0)
    held[2].release()
    again = slots.acquire(1, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={})
    assert again.gpu_ids == held[2].gpu_ids
    for s in [*held, again]:
        s.release()


def test_a_tensor_parallel_cell_gets_as_many_gpus_and_waits_for_them(tmp_path):
    one = slots.acquire(1, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={})
    two = slots.acquire(2, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={})
    assert len(two.gpu_ids) == 2 and not set(two.gpu_ids) & set(one.gpu_ids)
    assert two.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, two.gpu_ids))
    # 3 GPUs with only 1 free: it must wait, and it gets them once the others are released
    started = time.monotonic()
    with pytest.raises(slots.SlotError):
        slots.acquire(3, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={}, timeout_s=0.3,
                      poll_s=0.1)
    assert time.monotonic() - started >= 0.3
    two.release()
    three = slots.acquire(3, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={})
    assert sorted(three.gpu_ids + one.gpu_ids) == [0, 1, 2, 3]
    with pytest.raises(slots.SlotError, match="needs 5 GPUs .* exposes 4"):
        slots.acquire(5, lock_dir=tmp_path, gpu_ids=[0, 1, 2, 3], environ={})
    one.release()
    three.release()


def _hold_one_slot(lock_dir, ready, stop):
    held = slots.acquire(1, lock_dir=lock_dir, gpu_ids=[0, 1], environ={})
    ready.put(held.gpu_ids)
    stop.wait(30)


def test_a_killed_cell_frees_its_gpu(tmp_path):
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_hold_one_slot, args=(tmp_path, ready, stop))
    proc.start()
    taken = ready.get(timeout=10)
    mine = slots.acquire(1, lock_dir=tmp_path, gpu_ids=[0, 1], environ={})
    assert mine.gpu_ids != taken  # the other process holds its GPU
    proc.kill()
    proc.join()
    other = slots.acquire(1, lock_dir=tmp_path, gpu_ids=[0, 1], environ={}, timeout_s=5)
    assert other.gpu_ids == taken  # the kernel dropped the dead process's lock
    mine.release()
    other.release()


def test_the_visible_gpus_and_when_nothing_is_pinned(tmp_path):
    assert slots.visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert slots.visible_gpu_ids({}, count=lambda: 2) == [0, 1]
    with pytest.raises(slots.SlotError, match="not UUIDs"):
        slots.visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "GPU-5b2aa168"})
    cpu = slots.acquire(1, lock_dir=tmp_path, gpu_ids=[], environ={})
    assert cpu.gpu_ids == [] and cpu.env == {} and "CPU" in cpu.reason
    slurm = slots.acquire(2, lock_dir=tmp_path,
                          environ={"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert slurm.env == {} and slurm.monitor_ids == [0, 1] and "SLURM_JOB_ID" in slurm.reason
    # pinning follows the job's own CUDA_VISIBLE_DEVICES
    pinned = slots.acquire(1, lock_dir=tmp_path, environ={"CUDA_VISIBLE_DEVICES": "5,6"})
    assert pinned.gpu_ids == [5]
    pinned.release()


# --- NVML sampler with a stand-in NVML ----------------------------------------------------------

class FakeNvml:
    """Two GPUs drawing a constant power; GPU 1 has no energy counter. Time is the test's."""

    def __init__(self, clock, watts=(100.0, 50.0)):
        self.clock, self.watts, self.calls = clock, watts, []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.watts[0] * self.clock() * 1000.0  # mJ since t = 0

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.watts[handle] * 1000.0  # mW

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=80 if handle == 0 else 40, memory=10)


def test_sampler_energy_over_the_window_from_counter_and_power():
    now = [0.0]
    nvml = FakeNvml(lambda: now[0])
    sampler = gpumon.GpuSampler([0, 1], nvml=nvml, clock=lambda: now[0])
    assert sampler.has_counter == [True, False]
    for t in range(0, 11):  # samples every second from 0 to 10 s
        now[0] = float(t)
        sampler.sample()
    m = sampler.window_metrics(2.5, 6.5, output_tokens=300)
    # 4 s: GPU 0 by its counter (100 W), GPU 1 by integrating its power (50 W)
    assert m["gpu_energy_j"] == pytest.approx(400 + 200)
    assert m["gpu_avg_power_w"] == pytest.approx(150)
    assert m["energy_per_output_token_j"] == pytest.approx(2.0)
    assert m["gpu_util_pct"] == pytest.approx(60)
    assert m["gpu_energy_source"] == "counter+power_integral"
    assert m["gpu_samples"] == 4  # t = 3, 4, 5, 6
    outside = sampler.window_metrics(9.0, 12.0, output_tokens=300)
    assert outside["gpu_energy_j"] is None and "not covered" in outside["gpu_monitor"]


def test_sampler_thread_samples_while_a_point_runs():
    nvml = FakeNvml(time.perf_counter)
    with gpumon.GpuSampler([0], interval_s=0.01, nvml=nvml) as sampler:
        start = time.perf_counter()
        time.sleep(0.3)
        end = time.perf_counter()
    assert len(sampler.samples) >= 10
    m = sampler.window_metrics(start, end, output_tokens=None)
    assert m["gpu_avg_power_w"] == pytest.approx(100, rel=0.01)
    assert m["energy_per_output_token_j"] is None
    assert nvml.calls == ["init", "shutdown"]


def test_without_nvml_every_energy_field_is_null_not_zero():
    # this CPU machine has no NVIDIA driver: the real pynvml fails to initialise
    with gpumon.GpuSampler([0]) as sampler:
        pass
    m = sampler.window_metrics(0.0, 1.0, output_tokens=10)
    assert not sampler.available
    assert all(m[field] is None for field in gpumon.FIELDS)
    assert m["gpu_monitor"]


def test_the_measured_window_is_the_load_generators_own():
    detail = {"start_times": [10.0, 10.5, None], "latencies": [2.0, 3.0, 1.0]}
    assert gpumon.request_window(detail, 99.0, 5.0) == (10.0, 13.5)
    assert gpumon.request_window({}, 99.0, 5.0) == (94.0, 99.0)


def test_latencies_are_derived_where_vllm_does_not_save_them():
    # vLLM 0.26's detail has ttfts and itls but no latencies
    detail = {"ttfts": [0.1, 0.0], "itls": [[0.01, 0.02], []]}
    assert with_latencies(detail)["latencies"] == pytest.approx([0.13, 0.0])
    kept = {"ttfts": [0.1], "itls": [[0.5]], "latencies": [9.0]}
    assert with_latencies(kept)["latencies"] == [9.0]
    _, split = loadgen.split_result({"ttfts": [0.2], "itls": [[0.1]], "duration": 1.0})
    assert split["latencies"] == pytest.approx([0.3])


# --- tensor parallelism -> GPUs ----------------------------------------------------------------

def test_tensor_parallel_targets_take_that_many_gpus():
    config = load_config(REPO / "config" / "config.yaml")
    by_target = {}
    for cell in grid.all_cells(config):
        by_target.setdefault(cell.server_config["target"]["name"], set()).add(
            specs.cell_gpus(cell.server_config))
    assert by_target["qwen2.5-72b-instruct"] == {4}
    assert by_target["qwen2.5-32b-instruct"] == {2}
    assert by_target["qwen2.5-72b-instruct-awq"] == {1}
    assert by_target["qwen2.5-7b-instruct"] == {1}
    assert specs.cell_gpus({"args": {"tensor_parallel_size": 2,
                                    "pipeline_parallel_size": 2}}) == 4


# --- validation helpers ------------------------------------------------------------------------

def test_overhead_split_and_extrapolation():
    records = [{"concurrency": c, "server": {"startup_s": 30.0},
                "provenance": {"started_at": f"2026-01-01T00:00:{s:02d}+00:00",
                               "finished_at": f"2026-01-01T00:00:{s + d:02d}+00:00"}}
               for c, s, d in ((1, 0, 20), (4, 20, 10))]
    split = validation.overhead_split(records, wall_s=60.0)
    assert split["measuring_s"] == 30 and split["other_s"] == 30
    assert split["measuring_share"] == pytest.approx(0.5)
    assert split["measuring_s_by_concurrency"] == {1: 20.0, 4: 10.0}
    # ten times the prompts: 300 s measuring against the same 30 s of the rest
    assert validation.extrapolate_share(split, 48, 480) == pytest.approx(300 / 330)
