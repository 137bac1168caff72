"""A prompt set's data card: its length quantiles and histograms, what it is composed of, and the
summary the workflow prints when it is built."""

from __future__ import annotations

import numpy as np


def quantiles(values: list[int]) -> dict:
    if not values:
        return {}
    arr = np.asarray(values)
    out = {f"p{q}": float(np.percentile(arr, q)) for q in (10, 25, 50, 75, 90)}
    return {"min": int(arr.min()), **out, "max": int(arr.max()), "mean": float(arr.mean())}


def histogram(values: list[int], bins: int = 12) -> dict:
    counts, edges = np.histogram(np.asarray(values), bins=bins)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def composition(records: list[dict]) -> dict:
    """How the prompts were made: share of records cut, share joined from several texts, mean
    texts per record, and the share of prompt tokens that is source text (the rest is
    instruction, labels and task prefixes)."""
    if not records:
        return {}
    n = len(records)
    prompt_tokens = sum(r["prompt_tokens"] for r in records)
    return {"share_cut": sum(1 for r in records if r.get("truncated")) / n,
            "share_joined": sum(1 for r in records if r.get("n_sources", 1) > 1) / n,
            "mean_texts_per_record": sum(r.get("n_sources", 1) for r in records) / n,
            "source_text_share": (sum(r["text_tokens"] for r in records) / prompt_tokens
                                  if prompt_tokens else 0.0)}


def card_summary(card: dict) -> str:
    """One line for the console: records, prompt lengths and how they were made."""
    tokens, made = card["prompt_tokens"], card["composition"]
    line = (f"{card['dataset']}/{card['subset']}: {card['records']} records, prompt tokens "
            f"p50 {tokens.get('p50', 0):.0f} [{tokens.get('min')}, {tokens.get('max')}]")
    if made:
        line += (f", {made['share_cut']:.0%} cut, {made['share_joined']:.0%} joined, "
                 f"{made['mean_texts_per_record']:.2f} texts per record, "
                 f"{made['source_text_share']:.0%} of prompt tokens source text")
    if card["skipped"]:
        line += f"; passed over: {card['skipped']}"
    return line
