"""Cells measured without a server: vLLM's offline engine and the Transformers reference.

Both run in a child process (`python -m sdbench.measure.engines <job.json>`; the cell stops its
whole process group whatever happens) and write one JSON file per point into the job's folder, with
the same metric names as vLLM's load generator where the quantity is the same, so records,
pairing with the baseline, the lossless check and the reports are shared with server cells:

- offline (`LLM.chat` / `LLM.generate`): the prompts in batches of `batch_size`, each batch
  finished before the next (static batching, as in an offline experiment); spec-decode
  acceptance from the engine's own counters (`LLM.get_metrics`) over the point.
- transformers (batch size 1): `generate` one prompt at a time, plain or assisted
  (`assistant_model` = the draft with num_assistant_tokens = k and a constant schedule, or
  `prompt_lookup_num_tokens` = k). Acceptance counts the candidate tokens the assistant
  proposed and the target's forward passes. Acceptance length has vLLM's definition
  everywhere: 1 + accepted tokens / steps that had a draft; `tokens_per_target_step` (new
  tokens per target forward pass, steps without a draft included) is its own metric.

A job is one session: the engine is loaded once and measures the points of every cell in
`job["cells"]`, each cell's first point after its own warm-up requests. Every point reads the
prompts with its repeat's own seed (order, and sampling), as server cells do. Under the
adaptive rule a job is gated: before each point the child waits for its parent's word
(`wait_go`), which the rule decides from the points measured before it, so a point that has
its answer stops without a second engine start.

Each point's window is on `time.perf_counter`, the host's monotonic clock on Linux: the clock
of the cell's GPU sampler in the parent process.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from sdbench.data.conversations import messages_of
from sdbench.files import read_jsonl


def choose_prompts(records: list[dict], num_prompts: int, shuffle: bool,
                   seed: int) -> list[dict]:
    """The first n of `records` after a seeded shuffle (unless ordered); `records` is kept."""
    records = list(records)
    if shuffle:
        random.Random(seed).shuffle(records)
    return records[:num_prompts]


def _prompts_by_seed(part: dict):
    """seed -> the cell's prompts in that seed's order (the file is read once)."""
    records = read_jsonl(part["prompts"])
    return lambda seed: choose_prompts(records, part["num_prompts"], part["shuffle"], seed)


def throughput_metrics(duration: float, input_lens: list[int], output_lens: list[int],
                       latencies: list[float]) -> dict:
    """Load-generator-style totals and rates of one point."""
    total_in, total_out = sum(input_lens), sum(output_lens)
    return {"duration": duration, "completed": len(output_lens), "failed": 0,
            "total_input_tokens": total_in, "total_output_tokens": total_out,
            "request_throughput": len(output_lens) / duration,
            "output_throughput": total_out / duration,
            "total_token_throughput": (total_in + total_out) / duration,
            "mean_e2el_ms": 1000.0 * sum(latencies) / len(latencies)}


def spec_metrics(num_drafts: float, draft_tokens: float, accepted: float,
                 per_position: list[float] | None = None) -> dict:
    """The load generator's spec_decode_* fields from counter deltas (none without drafts)."""
    if draft_tokens <= 0:
        return {}
    return {"spec_decode_num_drafts": int(num_drafts),
            "spec_decode_draft_tokens": int(draft_tokens),
            "spec_decode_accepted_tokens": int(accepted),
            "spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens,
            "spec_decode_acceptance_length": 1 + accepted / num_drafts if num_drafts else 0.0,
            "spec_decode_per_position_acceptance_rates": [
                p / num_drafts for p in per_position or []] if num_drafts else []}


def assisted_metrics(drafts: int, draft_tokens: int, output_tokens: int, steps: int) -> dict:
    """Spec-decode metrics of Transformers' assisted generation, in vLLM's definitions: each
    target step keeps the accepted candidates plus one token of its own, so accepted = output
    tokens - target steps, and acceptance length = 1 + accepted / steps that had a draft.
    `tokens_per_target_step` (output tokens / all target steps) is reported beside it."""
    accepted = max(output_tokens - steps, 0)
    return {**spec_metrics(drafts, draft_tokens, accepted),
            "tokens_per_target_step": output_tokens / max(steps, 1)}


def _counters(llm) -> dict:
    """The engine's spec-decode counters now (totals since start)."""
    values: dict = {"per_position": []}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:spec_decode_")
        if name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            values[name] = values.get(name, 0) + metric.value
        elif name == "num_accepted_tokens_per_pos":
            values["per_position"] = list(metric.values)
    return values


def _delta(before: dict, after: dict) -> dict:
    per_pos = [a - (before["per_position"][i] if i < len(before["per_position"]) else 0)
               for i, a in enumerate(after["per_position"])]
    return spec_metrics(after.get("num_drafts", 0) - before.get("num_drafts", 0),
                        after.get("num_draft_tokens", 0) - before.get("num_draft_tokens", 0),
                        after.get("num_accepted_tokens", 0) - before.get("num_accepted_tokens",
                                                                         0),
                        per_pos)


def run_offline(job: dict) -> Iterator[tuple[int, int, dict, dict, dict]]:
    """Yield (cell index, point index, point, metrics, detail) for each (batch size, repeat) of
    each cell of the job, the engine loaded once; metrics carry the point's window on the
    host's monotonic clock (`window_perf_counter`)."""
    from vllm import LLM, SamplingParams

    args = {k.replace("-", "_"): v for k, v in job["args"].items()}
    llm = LLM(model=job["target_dir"], speculative_config=job["speculative_config"],
              disable_log_stats=False, **args)
    chat = job["endpoint"] == "chat"

    def generate(batch: list[dict], seed: int):
        params = [SamplingParams(temperature=job["temperature"], seed=seed,
                                 max_tokens=p["output_tokens"], min_tokens=p.get("min_tokens")
                                 or 0, ignore_eos=job.get("ignore_eos", False))
                  for p in batch]
        if chat:
            return llm.chat([messages_of(p) for p in batch], params, use_tqdm=False)
        return llm.generate([p["prompt"] for p in batch], params, use_tqdm=False)

    for cell_index, part, point_index, point in _points(job, generate):
        seed = point["seed"]
        prompts = part["prompts_for"](seed)
        size = point["concurrency"]
        before, outputs, latencies = _counters(llm), [], []
        started = time.perf_counter()
        for i in range(0, len(prompts), size):
            t0 = time.perf_counter()
            batch = generate(prompts[i:i + size], seed)
            latencies += [time.perf_counter() - t0] * len(batch)
            outputs += batch
        ended = time.perf_counter()
        input_lens = [len(o.prompt_token_ids) for o in outputs]
        output_lens = [len(o.outputs[0].token_ids) for o in outputs]
        metrics = {**throughput_metrics(ended - started, input_lens, output_lens, latencies),
                   **_delta(before, _counters(llm)), "window_perf_counter": [started, ended]}
        detail = {"input_lens": input_lens, "output_lens": output_lens,
                  "latencies": latencies, "generated_texts": [o.outputs[0].text for o in outputs],
                  "errors": [""] * len(outputs)}
        yield cell_index, point_index, point, metrics, detail


def go_file(folder: str | Path, cell_index: int, index: int) -> Path:
    """Where a gated job's parent says whether a point is measured (`wait_go`)."""
    return Path(folder) / f"go-{cell_index:03d}-{index:04d}.json"


def wait_go(folder: str | Path, cell_index: int, index: int, poll_s: float = 0.02) -> bool:
    """In a gated job (the adaptive rule stops points: `sdbench.measure.stopping`), whether the
    parent says to measure a point: it decides from the points before it, so it answers once
    their files are read. (The parent stops this process's group whatever happens.)"""
    path = go_file(folder, cell_index, index)
    while not path.exists():
        time.sleep(poll_s)
    return bool(json.loads(path.read_text())["measure"])


def _points(job: dict, warm_up=None) -> Iterator[tuple[int, dict, int, dict]]:
    """(cell index, its part of the job, point index, point) in order, in a gated job only the
    points its parent says to measure (`wait_go`); before each cell's first point measured,
    `warm_up(prompts)` with its first `num_warmups` prompts (the engine is warm for later
    points of the cell)."""
    for cell_index, part in enumerate(job["cells"]):
        part = {**part, "prompts_for": _prompts_by_seed(part)}
        warm = not job["num_warmups"] or warm_up is None
        for point_index, point in enumerate(part["plan"]):
            if job.get("gated") and not wait_go(job["out_dir"], cell_index, point_index):
                continue
            if not warm:
                warm_up(part["prompts_for"](part["seed"])[:job["num_warmups"]], part["seed"])
                warm = True
            yield cell_index, part, point_index, point


@contextlib.contextmanager
def _count_candidates(counts: dict) -> Iterator[None]:
    """Count the candidate tokens Transformers' assistants propose (and the proposals)."""
    from transformers.generation import candidate_generator as cg

    patched = {}
    for cls in (cg.AssistedCandidateGenerator, cg.PromptLookupCandidateGenerator):
        original = cls.__dict__["get_candidates"]

        def counting(self, input_ids, *args, _original=original, **kwargs):
            candidates, logits = _original(self, input_ids, *args, **kwargs)
            new = candidates.shape[-1] - input_ids.shape[-1]
            counts["drafts"] += int(new > 0)
            counts["draft_tokens"] += new
            return candidates, logits

        patched[cls] = original
        cls.get_candidates = counting
    try:
        yield
    finally:
        for cls, original in patched.items():
            cls.get_candidates = original


def run_transformers(job: dict) -> Iterator[tuple[int, int, dict, dict, dict]]:
    """Yield (cell index, point index, point, metrics, detail) for each repeat of each cell of
    the job (batch size 1), the models loaded once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, job["args"].get("dtype", "bfloat16"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # (the job's `threads`, where Snakemake set them: `engine_cells.child_env`)
    print(f"[sdbench] Transformers reference on {device}, {torch.get_num_threads()} CPU "
          f"thread(s)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(job["target_dir"])
    model = AutoModelForCausalLM.from_pretrained(job["target_dir"], dtype=dtype).to(device)
    extra: dict = {}
    method, k = job["method"], job["k"]
    if method == "draft_model":
        extra = {"assistant_model": AutoModelForCausalLM.from_pretrained(
                     job["draft_dir"], dtype=dtype).to(device),
                 "num_assistant_tokens": k, "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": 0.0}
    elif method == "ngram":
        extra = {"prompt_lookup_num_tokens": k}
        if job["options"].get("prompt_lookup_max"):
            extra["max_matching_ngram_size"] = job["options"]["prompt_lookup_max"]
    steps = {"n": 0}
    model.register_forward_hook(lambda *_: steps.__setitem__("n", steps["n"] + 1))
    def encode(record: dict):
        if job["endpoint"] == "chat":
            return tokenizer.apply_chat_template(messages_of(record),
                                                 add_generation_prompt=True,
                                                 return_tensors="pt", return_dict=True)
        return tokenizer(record["prompt"], return_tensors="pt")

    def generate(record: dict) -> tuple[list[int], list[int]]:
        enc = encode(record).to(device)
        fixed = record["output_tokens"] if job.get("ignore_eos") else 0
        out = model.generate(**enc, do_sample=False, max_new_tokens=record["output_tokens"],
                             min_new_tokens=max(record.get("min_tokens") or 0, fixed),
                             pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                             **extra)
        return enc["input_ids"][0].tolist(), out[0][enc["input_ids"].shape[1]:].tolist()

    def warm_up(records: list[dict], _seed: int) -> None:
        for record in records:
            generate(record)

    for cell_index, part, point_index, point in _points(job, warm_up):
        prompts = part["prompts_for"](point["seed"])
        counts = {"drafts": 0, "draft_tokens": 0}
        steps["n"] = 0
        input_lens, output_lens, latencies, texts = [], [], [], []
        started = time.perf_counter()
        with _count_candidates(counts):
            for record in prompts:
                t0 = time.perf_counter()
                prompt_ids, new_ids = generate(record)
                latencies.append(time.perf_counter() - t0)
                input_lens.append(len(prompt_ids))
                output_lens.append(len(new_ids))
                texts.append(tokenizer.decode(new_ids, skip_special_tokens=True))
        ended = time.perf_counter()
        metrics = throughput_metrics(ended - started, input_lens, output_lens, latencies)
        metrics.update(target_forward_passes=steps["n"], window_perf_counter=[started, ended])
        if method != "vanilla":
            metrics.update(assisted_metrics(counts["drafts"], counts["draft_tokens"],
                                            sum(output_lens), steps["n"]))
        detail = {"input_lens": input_lens, "output_lens": output_lens, "latencies": latencies,
                  "generated_texts": texts, "errors": [""] * len(texts)}
        yield cell_index, point_index, point, metrics, detail


RUNNERS = {"offline": run_offline, "transformers": run_transformers}


def point_file(folder: str | Path, cell_index: int, index: int) -> Path:
    return Path(folder) / f"point-{cell_index:03d}-{index:04d}.json"


def main(argv: list[str] | None = None) -> int:
    """Run the job in `argv[0]` (JSON), one result file per point into its `out_dir`."""
    job = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    for cell_index, index, point, metrics, detail in RUNNERS[job["engine"]](job):
        path = point_file(job["out_dir"], cell_index, index)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"point": point, "metrics": metrics, "detail": detail}))
        tmp.rename(path)
        print(f"[sdbench] cell {cell_index} point {index} {point}: "
              f"{metrics['total_token_throughput']:.1f} tok/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
