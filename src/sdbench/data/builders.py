"""Processed prompt sets: raw rows -> data/processed/<dataset>/<subset>.jsonl + <subset>.card.json.

One subset (a task group or a length bucket) is built at a time, from its own definition only,
so changing one bucket rebuilds that bucket alone. Each output line is what vLLM's load
generator reads as a `custom` dataset (`prompt`, `output_tokens`) plus `prompt_tokens` and
metadata (ids, bucket, how many source texts were joined). `min_tokens`, when present, forces
the output length. Building is deterministic: the same raw file, definition and seed give the
same bytes.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import numpy as np

from ..files import atomic_write_json, sha256_file, write_jsonl
from .raw import read_rows
from .tokens import Tokenizer

SPEC_BENCH_GROUPS = {
    "writing": "conversation", "roleplay": "conversation", "reasoning": "conversation",
    "math": "conversation", "coding": "conversation", "extraction": "conversation",
    "stem": "conversation", "humanities": "conversation",
    "translation": "translation", "summarization": "summarization", "qa": "qa",
    "math_reasoning": "math_reasoning", "rag": "rag",
}
SPEC_BENCH_SUBSETS = ("conversation", "translation", "summarization", "qa", "math_reasoning",
                      "rag", "all")
# builders whose subsets are the configured buckets (one file per bucket)
BUCKETED = ("cnn_dm_news_summary", "cnn_dm_highlights_news", "thucnews_polish")
BUILDER_SOURCE = {"spec_bench": "spec_bench", "sharegpt": "sharegpt",
                  "cnn_dm_news_summary": "cnn_dailymail", "cnn_dm_highlights_news": "cnn_dailymail",
                  "cnn_dm_mixed": "cnn_dailymail", "thucnews_polish": "thucnews"}
# builders whose records must be sent in file order (the load generator shuffles otherwise)
ORDERED = ("cnn_dm_mixed",)
HUMAN_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "chatgpt", "assistant", "bard", "model")
_SENTENCE_END = re.compile(r"[.!?。！？]+[\"'”’)）]*\s*")


class BuildError(ValueError):
    """A subset that cannot be built (names the dataset, bucket, needed and found counts)."""


def subsets_of(dataset: dict) -> list[str]:
    builder = dataset["builder"]
    if builder == "spec_bench":
        return list(SPEC_BENCH_SUBSETS)
    if builder in BUCKETED:
        return [bucket["name"] for bucket in dataset["buckets"]]
    return ["all"]


def _need(definition: dict, got: int, wanted: int, what: str, skipped: Counter) -> None:
    if got < wanted and not definition.get("allow_partial", False):
        raise BuildError(
            f"dataset {definition['dataset']!r}, subset {definition['subset']!r}: needed "
            f"{wanted} {what}, found {got} (skipped: {dict(skipped)}). Use a larger source, "
            "fewer records per bucket, a wider tolerance, or allow_partial: true.")


def _seeded_order(items: list, definition: dict, *key: str) -> list:
    """`items` in an order fixed by the dataset's seed, its name and `key` (e.g. the bucket):
    each subset draws its own sample, independent of the other subsets."""
    order = list(items)
    random.Random(":".join([str(definition["seed"]), definition["dataset"], *key])).shuffle(order)
    return order


# ---------------------------------------------------------------- filling prompt-length buckets

def _fit_last(tok: Tokenizer, render, parts: list[str], last: str, lo: int, hi: int,
              target: int) -> str | None:
    """A prefix of `last` such that the prompt with parts + [prefix] has between lo and hi
    tokens, as close to `target` as possible: cut after a sentence if one fits, else at a token
    boundary. None if nothing fits."""
    best, best_gap = None, None
    for match in _SENTENCE_END.finditer(last):
        prefix = last[: match.end()].rstrip()
        tokens = tok.count(render(parts + [prefix]))
        if tokens > hi:
            break
        if tokens >= lo and (best_gap is None or abs(tokens - target) < best_gap):
            best, best_gap = prefix, abs(tokens - target)
    if best is not None:
        return best
    budget = target - tok.count(render(parts + [""]))
    if budget <= 0:
        return None
    prefix = tok.truncate(last, budget)
    return prefix if prefix and lo <= tok.count(render(parts + [prefix])) <= hi else None


def fill_bucket(texts: list[tuple[str, str]], definition: dict, bucket: dict, tok: Tokenizer,
                separator: str, skipped: Counter) -> list[dict]:
    """Prompts of `bucket['prompt_tokens']` (± tolerance) tokens, each one text or several joined
    (whole texts first; the last one cut at a sentence, else a token boundary)."""
    target = bucket["prompt_tokens"]
    tolerance = definition["tolerance"]
    lo, hi = int(target * (1 - tolerance)), int(target * (1 + tolerance))
    wanted = definition["records_per_bucket"]
    instruction = definition["instruction"]

    def render(parts: list[str]) -> str:
        return instruction.replace("{text}", separator.join(parts))

    records, parts, ids = [], [], []
    for ident, text in _seeded_order(texts, definition, bucket["name"]):
        if len(records) == wanted:
            break
        tokens = tok.count(render(parts + [text]))
        if tokens < lo:
            parts, ids = parts + [text], ids + [ident]
            continue
        truncated = tokens > hi
        if truncated:
            text = _fit_last(tok, render, parts, text, lo, hi, target)
            if text is None:
                skipped["could not be cut to the bucket"] += 1
                parts, ids = [], []
                continue
        parts, ids = parts + [text], ids + [ident]
        prompt = render(parts)
        records.append({"prompt": prompt, "prompt_tokens": tok.count(prompt),
                        "text_tokens": tok.count(separator.join(parts)), "bucket": bucket["name"],
                        "source_ids": ids, "n_sources": len(parts), "truncated": truncated})
        parts, ids = [], []
    _need(definition, len(records), wanted, f"prompts of {lo}-{hi} tokens", skipped)
    return records


# ------------------------------------------------------------------------------------- builders

def _spec_bench(rows: list[dict], definition: dict, tok: Tokenizer, skipped: Counter) -> list:
    subset = definition["subset"]
    records = []
    for row in rows:
        group = SPEC_BENCH_GROUPS.get(row["category"])
        if group is None:
            skipped[f"unknown category {row['category']!r}"] += 1
            continue
        first = row["turns"][0] if row["turns"] else None
        if not isinstance(first, str) or not first.strip():
            skipped["empty first turn"] += 1
            continue
        if subset not in (group, "all"):
            continue
        records.append({"prompt": first, "output_tokens": definition["max_output_tokens"],
                        "prompt_tokens": tok.count(first), "question_id": row["question_id"],
                        "category": row["category"], "task": group})
    if definition["max_records"] is not None:
        records = records[: definition["max_records"]]
    _need(definition, len(records), 1, "records", skipped)
    return records


def _sharegpt(rows: list[dict], definition: dict, tok: Tokenizer, skipped: Counter) -> list:
    limits = definition["filters"]
    records = []
    for row in _seeded_order(rows, definition):
        if len(records) == definition["samples"]:
            break
        turns = row["conversations"]
        human = next((i for i, t in enumerate(turns) if t["from"] in HUMAN_ROLES), None)
        if human is None or human + 1 >= len(turns) \
                or turns[human + 1]["from"] not in ASSISTANT_ROLES:
            skipped["no human turn answered by the assistant"] += 1
            continue
        prompt, reply = turns[human]["value"], turns[human + 1]["value"]
        if not prompt.strip() or not reply.strip():
            skipped["empty turn"] += 1
            continue
        prompt_tokens, reply_tokens = tok.count(prompt), tok.count(reply)
        if prompt_tokens < limits["min_tokens"] or reply_tokens < limits["min_tokens"]:
            skipped["turn shorter than min_tokens"] += 1
            continue
        if prompt_tokens > limits["max_prompt_tokens"]:
            skipped["prompt longer than max_prompt_tokens"] += 1
            continue
        if prompt_tokens + reply_tokens > limits["max_total_tokens"]:
            skipped["prompt + reply longer than max_total_tokens"] += 1
            continue
        records.append({"prompt": prompt, "output_tokens": reply_tokens,
                        "prompt_tokens": prompt_tokens, "reference_tokens": reply_tokens,
                        "id": row["id"]})
    _need(definition, len(records), definition["samples"], "conversations", skipped)
    return records


def _news_texts(rows: list[dict]) -> list[tuple[str, str]]:
    return [(row["id"], row["article"].strip()) for row in rows]


def _news_summary(rows, definition, tok, skipped) -> list:
    bucket = definition["bucket"]
    records = fill_bucket(_news_texts(rows), definition, bucket, tok, "\n\n", skipped)
    return [{**r, "output_tokens": bucket["output_tokens"]} for r in records]


def _mixed(rows, definition, tok, skipped) -> list:
    records = []
    for bucket in definition["buckets"]:
        filled = fill_bucket(_news_texts(rows), definition, bucket, tok, "\n\n", skipped)
        records += [{**r, "output_tokens": bucket["output_tokens"]} for r in filled]
    return records


def _highlights_news(rows, definition, tok, skipped) -> list:
    bucket = definition["bucket"]
    low, high = definition["prompt_tokens_range"]
    records = []
    for row in _seeded_order(rows, definition, bucket["name"]):
        if len(records) == definition["records_per_bucket"]:
            break
        highlights = row["highlights"].strip()
        if not highlights:
            skipped["empty highlights"] += 1
            continue
        prompt = definition["instruction"].replace("{text}", highlights)
        tokens = tok.count(prompt)
        if not low <= tokens <= high:
            skipped[f"prompt outside {low}-{high} tokens"] += 1
            continue
        records.append({"prompt": prompt, "output_tokens": bucket["output_tokens"],
                        "min_tokens": bucket["output_tokens"], "prompt_tokens": tokens,
                        "bucket": bucket["name"], "id": row["id"]})
    _need(definition, len(records), definition["records_per_bucket"],
          f"highlights prompts of {low}-{high} tokens", skipped)
    return records


def _thucnews_polish(rows, definition, tok, skipped) -> list:
    bucket = definition["bucket"]
    texts = [(row.get("id") or str(i), row["text"].strip()) for i, row in enumerate(rows)]
    records = fill_bucket(texts, definition, bucket, tok, "\n", skipped)
    ratio = definition["output_ratio"]
    return [{**r, "output_tokens": max(1, round(ratio * r["text_tokens"]))} for r in records]


BUILDERS = {
    "spec_bench": _spec_bench, "sharegpt": _sharegpt, "cnn_dm_news_summary": _news_summary,
    "cnn_dm_highlights_news": _highlights_news, "thucnews_polish": _thucnews_polish,
    "cnn_dm_mixed": _mixed,
}


# ---------------------------------------------------------------------------------- data cards

def _quantiles(values: list[int]) -> dict:
    if not values:
        return {}
    arr = np.asarray(values)
    out = {f"p{q}": float(np.percentile(arr, q)) for q in (10, 25, 50, 75, 90)}
    return {"min": int(arr.min()), **out, "max": int(arr.max()), "mean": float(arr.mean())}


def _histogram(values: list[int], bins: int = 12) -> dict:
    counts, edges = np.histogram(np.asarray(values), bins=bins)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def _output_rule(definition: dict) -> str:
    builder = definition["builder"]
    if builder == "spec_bench":
        return f"max_tokens = {definition['max_output_tokens']}"
    if builder == "sharegpt":
        return "max_tokens = token length of the reference (first assistant) turn"
    if builder == "cnn_dm_highlights_news":
        return f"min_tokens = max_tokens = {definition['bucket']['output_tokens']} (forced)"
    if builder == "thucnews_polish":
        return f"max_tokens = {definition['output_ratio']} x tokens of the text to polish"
    if builder == "cnn_dm_mixed":
        return "max_tokens per bucket: " + ", ".join(
            f"{b['name']}: {b['output_tokens']}" for b in definition["buckets"])
    return f"max_tokens = {definition['bucket']['output_tokens']}"


def build_subset(definition: dict, raw_path: str | Path, raw_manifest: dict, tok: Tokenizer,
                 out_path: str | Path, card_path: str | Path) -> dict:
    """Build one subset and its card (the definition comes from config.subset_definition)."""
    rows, skipped = read_rows(raw_manifest["source"], raw_path)
    records = BUILDERS[definition["builder"]](rows, definition, tok, skipped)
    write_jsonl(out_path, records)
    prompt_tokens = [r["prompt_tokens"] for r in records]
    card = {
        "dataset": definition["dataset"],
        "subset": definition["subset"],
        "builder": definition["builder"],
        "records": len(records),
        "ordered": definition["builder"] in ORDERED,
        "output_rule": _output_rule(definition),
        "prompt_tokens": _quantiles(prompt_tokens),
        "prompt_token_histogram": _histogram(prompt_tokens) if prompt_tokens else {},
        "output_tokens": _quantiles([r["output_tokens"] for r in records]),
        "joined_sources": _quantiles([r["n_sources"] for r in records if "n_sources" in r]),
        "truncated_records": sum(1 for r in records if r.get("truncated")),
        "skipped": dict(sorted(skipped.items())),
        "raw_rows_usable": len(rows),
        "source": {"file": str(raw_path), "sha256": raw_manifest["sha256"],
                   "kind": raw_manifest["kind"], "origin": raw_manifest["origin"]},
        "tokenizer": tok.describe,
        "seed": definition.get("seed"),
        "definition": definition,
        "file": str(out_path),
        "file_sha256": sha256_file(out_path),
    }
    atomic_write_json(card_path, card)
    return card
