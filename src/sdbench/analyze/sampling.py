"""A lossless check that works when sampling (issue 39): do the speculative server's outputs come
from the same distribution as the baseline's, on the same prompts?

At temperature 0 speculation must reproduce the baseline's greedy text (`analyze.lossless`). At
temperature > 0 two correct servers give different texts, so equality says nothing; what must
hold is that, given the prompt, both sample the same distribution. vLLM tests its rejection
sampler on distributions too (`tests/v1/sample/test_rejection_sampler.py`:
`test_rejection_sampling_approximates_target_distribution` estimates the sampler's output
distribution, `estimate_rejection_sampling_pdf`, and requires its distance to the target's to
shrink as samples grow; `test_deterministic_when_seeded` requires seeded requests to repeat) —
on synthetic probabilities, where the target's are known. Here they are not (the servers return
texts), so the check compares the two sides' texts with each other. Each pair is one prompt,
measured once by each side (the baseline's request i and the speculative server's request i of
the same repeat: the same prompts in the same order). Three statistics:

- **sharpness**: every token is scored by the log of its frequency among both sides' outputs
  pooled; a sampler whose temperature is too low picks frequent tokens more often, so its
  outputs score higher. The statistic is the mean over pairs of the difference of the two
  outputs' mean scores;
- **shape**: the total variation distance between the two sides' token frequencies (the
  `TOP_TOKENS` most frequent tokens and the rest as one), which sees a wrong distribution that
  is not merely sharper or flatter;
- **greedy agreement**, where the study measured the same prompts at temperature 0: the share
  of positions where each side's output has the greedy output's token; a colder sampler agrees
  more often. This is what sees a wrong temperature when tokens are nearly certain (a low
  entropy per token), where the frequencies barely move.

Each is tested by **permutation within pairs**: under the hypothesis that both sides sample one
distribution given the prompt, swapping which output of a pair is whose changes nothing, so a
statistic's rank among its swapped copies gives an exact p-value however dependent the tokens
of one output are (the pooled frequencies do not change under swaps). The check fails when the
smallest p-value times the number of statistics (Bonferroni) is below `ALPHA` = 1 %: a false
alarm rate of at most 1 % by construction, confirmed by simulation (`simulate`).

A pass needs evidence: without the greedy outputs, or with fewer than `MIN_TOKENS` tokens a side,
the check says "inconclusive" instead of "pass", and it says "fail" only when it found a
difference. `MIN_TOKENS` is the size at which the simulation (`simulate`; `python -m
sdbench.analyze.sampling` writes docs/sampling-check.md) flags a temperature of 0.8 against 1.0 in
at least 90 % of runs down to ~1.4 nats of entropy per token.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

ALPHA = 0.01
PERMUTATIONS = 999
TOP_TOKENS = 200
# tokens per side at which the simulation's power against 1.0 vs 0.8 reaches 90 %
# (docs/sampling-check.md; `simulate`)
MIN_TOKENS = 1500
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


@dataclass(frozen=True)
class SamplingCheck:
    """The outcome of `check`: the verdict, its p-value, each statistic's p-value and the
    evidence it rests on."""

    verdict: str
    p_value: float
    p_sharpness: float
    p_shape: float
    p_greedy: float  # NaN without greedy references
    pairs: int
    tokens: int  # the smaller side's
    sharpness: float  # mean over pairs of (speculative - baseline) mean log pooled frequency

    def text(self) -> str:
        """One line for a report cell."""
        evidence = f"{self.pairs} prompt pairs, {self.tokens} tokens a side"
        if self.verdict == FAIL:
            return (f"fail: the outputs' distributions differ (p = {self.p_value:.2g} < "
                    f"{ALPHA:g}; {evidence})")
        if self.verdict == INCONCLUSIVE:
            short = (f"{evidence} is below the {MIN_TOKENS} tokens a side" if self.tokens
                     < MIN_TOKENS else f"{evidence}, but no greedy output of these prompts: "
                     "not the evidence")
            return (f"inconclusive: no difference seen (p = {self.p_value:.2g}), but {short} "
                    "this check needs to see a temperature error of 0.8 vs 1.0")
        return f"pass: no difference (p = {self.p_value:.2g}; {evidence})"


def _coded(pairs: list[tuple[list, list]]) -> tuple[list, list, int]:
    """Both sides' outputs as indices into their common vocabulary, most frequent first (tokens:
    any hashable ids)."""
    counts = Counter(t for pair in pairs for seq in pair for t in seq)
    index = {t: i for i, (t, _) in enumerate(counts.most_common())}
    code = [(np.array([index[t] for t in a], dtype=np.int64),
             np.array([index[t] for t in b], dtype=np.int64)) for a, b in pairs]
    return [a for a, _ in code], [b for _, b in code], len(index)


def _permutation_p(observed: float, null: np.ndarray) -> float:
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + len(null)))


def _agreement(seq, greedy) -> float:
    """The share of `seq`'s positions where it has the greedy output's token (over the longer
    of the two, as `lossless.compare` counts)."""
    longest = max(len(seq), len(greedy))
    return sum(x == y for x, y in zip(seq, greedy, strict=False)) / longest if longest else 1.0


def check(pairs: list[tuple[list[int], list[int]]], greedy: list[list[int]] | None = None,
          alpha: float = ALPHA, permutations: int = PERMUTATIONS, seed: int = 0,
          min_tokens: int = MIN_TOKENS) -> SamplingCheck:
    """The check on (baseline tokens, speculative tokens) of each prompt pair; `greedy`: the
    greedy (temperature 0) output of each prompt, where the study measured one, for the third
    statistic (a colder sampler agrees with the greedy text at more positions)."""
    if 3 / (permutations + 1) >= alpha:  # the smallest p-value, Bonferroni'd, must reach α
        raise ValueError(f"{permutations} permutations cannot reach p < {alpha:g} over three "
                         "statistics")
    keep = [i for i, (a, b) in enumerate(pairs) if len(a) and len(b)]
    pairs = [pairs[i] for i in keep]
    greedy = [greedy[i] for i in keep] if greedy is not None else None
    base, spec, vocab = _coded(pairs)
    n = len(pairs)
    tokens = min(sum(map(len, base)), sum(map(len, spec))) if n else 0
    if n < 2:
        return SamplingCheck(INCONCLUSIVE, 1.0, 1.0, 1.0, float("nan"), n, tokens,
                             float("nan"))
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=(n, permutations))
    # sharpness: the paired difference of mean log pooled frequency, sign-flipped
    pooled = np.bincount(np.concatenate(base + spec), minlength=vocab).astype(float)
    score = np.log(pooled / pooled.sum())
    d = np.array([score[b].mean() - score[a].mean() for a, b in zip(base, spec, strict=True)])
    p_sharp = _permutation_p(abs(d.mean()), np.abs(d @ signs) / n)
    # shape: total variation between the sides' frequencies of the top tokens (the rest one)
    width = min(TOP_TOKENS, vocab) + 1

    def counts(seq):
        return np.bincount(np.minimum(seq, width - 1), minlength=width).astype(float)

    ca = np.stack([counts(a) for a in base])  # n x width
    cb = np.stack([counts(b) for b in spec])
    half_sum, half_diff = (ca + cb).sum(axis=0) / 2, (ca - cb).T / 2  # width, width x n

    def tv(side_a, side_b):
        return 0.5 * np.abs(side_a / side_a.sum(axis=0) - side_b / side_b.sum(axis=0)).sum(
            axis=0)

    observed = float(tv(ca.sum(axis=0)[:, None], cb.sum(axis=0)[:, None])[0])
    swapped_a = half_sum[:, None] + half_diff @ signs
    swapped_b = 2 * half_sum[:, None] - swapped_a
    p_shape = _permutation_p(observed, tv(swapped_a, swapped_b))
    tests = [p_sharp, p_shape]
    p_greedy = float("nan")
    if greedy is not None:  # how far each side follows the greedy text, paired
        g = np.array([_agreement(b, ref) - _agreement(a, ref)
                      for (a, b), ref in zip(pairs, greedy, strict=True)], dtype=float)
        p_greedy = _permutation_p(abs(g.mean()), np.abs(g @ signs) / n)
        tests.append(p_greedy)
    p = min(1.0, len(tests) * min(tests))
    # a pass needs the evidence the simulation found enough: the greedy references (without
    # them a low-entropy model's colder sampler goes unseen) and min_tokens a side
    enough = greedy is not None and tokens >= min_tokens
    verdict = FAIL if p < alpha else PASS if enough else INCONCLUSIVE
    return SamplingCheck(verdict, p, p_sharp, p_shape, p_greedy, n, tokens, float(d.mean()))


# --- simulation: a language model whose distributions are known ---------------------------

def _sample(logits: np.ndarray, temperature: float, rng) -> np.ndarray:
    """One token per row of `logits` (rows: positions), at `temperature` (Gumbel-max)."""
    gumbel = rng.gumbel(size=logits.shape)
    return np.argmax(logits / temperature + gumbel, axis=-1)


def simulated_pairs(prompts: int, tokens: int, t_base: float, t_spec: float, rng,
                    vocab: int = 2000, zipf: float = 1.1, context: float = 2.5) -> list:
    """Prompt pairs from a model with a Zipf-shaped vocabulary whose every prompt and position
    shifts each token's logit by N(0, `context`²) (`entropy_nats` says how uncertain that makes
    a token), each side sampling every prompt once at its own temperature, and each prompt's
    greedy output."""
    base = -zipf * np.log(np.arange(1, vocab + 1))
    pairs, greedy = [], []
    for _ in range(prompts):
        logits = base + context * rng.standard_normal((tokens, vocab))
        pairs.append((_sample(logits, t_base, rng).tolist(),
                      _sample(logits, t_spec, rng).tolist()))
        greedy.append(np.argmax(logits, axis=-1).tolist())
    return pairs, greedy


def entropy_nats(vocab: int = 2000, zipf: float = 1.1, context: float = 2.5,
                 samples: int = 200, seed: int = 0) -> float:
    """The simulated model's mean entropy per token at temperature 1."""
    rng = np.random.default_rng(seed)
    logits = -zipf * np.log(np.arange(1, vocab + 1)) + context * rng.standard_normal(
        (samples, vocab))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return float(-(p * np.log(p)).sum(axis=1).mean())


def simulate(runs: int, prompts: int, tokens: int, t_spec: float, seed: int = 0,
             permutations: int = PERMUTATIONS, with_greedy: bool = True, **model) -> dict:
    """How often the check fails (flags a difference) over `runs` simulated runs of `prompts`
    pairs of `tokens` tokens, the baseline at temperature 1.0 and the speculative side at
    `t_spec` (1.0: the false-alarm rate; 0.8: the power against that error)."""
    rng = np.random.default_rng(seed)
    verdicts = []
    for _ in range(runs):
        pairs, greedy = simulated_pairs(prompts, tokens, 1.0, t_spec, rng, **model)
        verdicts.append(check(pairs, greedy if with_greedy else None,
                              permutations=permutations,
                              seed=int(rng.integers(2**31))).verdict)
    return {"runs": runs, "prompts": prompts, "tokens": tokens, "t_spec": t_spec,
            "fail_share": verdicts.count(FAIL) / runs}


def main(argv: list[str] | None = None) -> int:
    """Write docs/sampling-check.md: power and false alarms by entropy and sample size."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--null-runs", type=int, default=2000)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[3] / "docs"
                                             / "sampling-check.md"))
    args = parser.parse_args(argv)
    lines = ["# The lossless check under sampling: power and false alarms by simulation", "",
             f"Generated by `python -m sdbench.analyze.sampling` ({args.runs} simulated runs "
             "per cell; `sdbench.analyze.sampling` says what the check computes and how a run "
             "is simulated). A run: prompt pairs of 24 tokens, the baseline sampling at "
             "temperature 1.0, the speculative side at 0.8 (power: the share of runs the check "
             "fails) or at 1.0 (false alarm: the share it fails wrongly), each prompt's greedy "
             "output known. The model's entropy per token at temperature 1 is set by how much "
             f"each prompt shifts the logits; the check fails at p < {ALPHA:g}.", "",
             "| entropy per token (nats) | tokens a side | power (0.8 vs 1.0) | "
             "power without greedy outputs | false alarm |", "| --- | --- | --- | --- | --- |"]
    for context in (2.5, 4.0, 6.0, 9.0):
        entropy = entropy_nats(context=context)
        for prompts in (20, 40, 60, 100):
            power = simulate(args.runs, prompts, 24, 0.8, seed=1, context=context)
            blind = simulate(args.runs, prompts, 24, 0.8, seed=1, context=context,
                             with_greedy=False)
            null = simulate(args.runs, prompts, 24, 1.0, seed=2, context=context)
            lines.append(f"| {entropy:.2f} | {prompts * 24} | {power['fail_share']:.1%} | "
                         f"{blind['fail_share']:.1%} | {null['fail_share']:.1%} |")
    null = simulate(args.null_runs, 60, 24, 1.0, seed=3, context=6.0)
    lines += ["", f"False alarms over {args.null_runs} runs at 1,440 tokens a side and "
              f"{entropy_nats(context=6.0):.2f} nats: {null['fail_share']:.2%} (at most "
              f"{ALPHA:.0%} by construction: a permutation test within pairs, Bonferroni over "
              "its three statistics)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
