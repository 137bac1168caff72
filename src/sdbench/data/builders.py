"""Processed prompt sets: raw source rows -> data/processed/<dataset>/<subset>.jsonl + card.json.

Each output line is what vLLM's load generator reads as a `custom` dataset (`prompt`,
`output_tokens`) plus metadata columns the reports use (ids, category, task). Building is
deterministic: the same raw file and options give byte-identical outputs.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from pathlib import Path

from ..config import BUILDER_SUBSETS
from ..files import atomic_write_json, read_jsonl, sha256_file, write_jsonl

# Spec-Bench's 6 task groups; the MT-bench categories form "conversation".
SPEC_BENCH_GROUPS = {
    "writing": "conversation", "roleplay": "conversation", "reasoning": "conversation",
    "math": "conversation", "coding": "conversation", "extraction": "conversation",
    "stem": "conversation", "humanities": "conversation",
    "translation": "translation", "summarization": "summarization", "qa": "qa",
    "math_reasoning": "math_reasoning", "rag": "rag",
}
DEFAULT_SUMMARY_INSTRUCTION = (
    "Summarize the following news article in three sentences.\n\n{text}"
)


class BuildError(ValueError):
    """Raw rows that cannot be turned into prompts (names file, line and value)."""


def _spec_bench_records(raw_path: str | Path, options: dict) -> tuple[dict[str, list], dict]:
    subsets: dict[str, list] = {name: [] for name in BUILDER_SUBSETS["spec_bench"]}
    dropped = Counter()
    for lineno, row in enumerate(read_jsonl(raw_path), start=1):
        group = SPEC_BENCH_GROUPS.get(row["category"])
        if group is None:
            raise BuildError(f"{raw_path}:{lineno}: unknown Spec-Bench category "
                             f"{row['category']!r} (known: {sorted(SPEC_BENCH_GROUPS)})")
        turns = row["turns"]
        if not turns or not isinstance(turns[0], str) or not turns[0].strip():
            dropped["empty first turn"] += 1
            continue
        record = {
            "prompt": turns[0],  # first turn only
            "output_tokens": options["max_output_tokens"],
            "question_id": row["question_id"],
            "category": row["category"],
            "task": group,
        }
        subsets[group].append(record)
        subsets["all"].append(record)
    return subsets, {"dropped": dict(dropped)}


def _cnn_dm_summary_records(raw_path: str | Path, options: dict) -> tuple[dict[str, list], dict]:
    instruction = options.get("instruction") or DEFAULT_SUMMARY_INSTRUCTION
    if "{text}" not in instruction:
        raise BuildError(f"instruction {instruction!r} has no {{text}} placeholder")
    records, dropped = [], Counter()
    for row in read_jsonl(raw_path):
        article = row["article"].strip()
        if not article:
            dropped["empty article"] += 1
            continue
        records.append({
            "prompt": instruction.replace("{text}", article),
            "output_tokens": options["max_output_tokens"],
            "id": row["id"],
            "article_words": len(article.split()),
        })
    return {"all": records}, {"dropped": dict(dropped)}


BUILDERS = {"spec_bench": _spec_bench_records, "cnn_dm_summary": _cnn_dm_summary_records}


def _prompt_stats(records: list[dict]) -> dict:
    chars = [len(r["prompt"]) for r in records]
    if not chars:
        return {"records": 0}
    return {"records": len(records), "prompt_chars_min": min(chars),
            "prompt_chars_median": statistics.median(chars), "prompt_chars_max": max(chars)}


def build_dataset(name: str, dataset: dict, raw_path: str | Path, raw_manifest: dict,
                  out_dir: str | Path) -> dict:
    """Write every subset of processed dataset `name` and its card; return the card."""
    out_dir = Path(out_dir)
    subsets, notes = BUILDERS[dataset["builder"]](raw_path, dataset)
    card_subsets = {}
    for subset, records in subsets.items():
        if dataset["max_records"] is not None:
            records = records[: dataset["max_records"]]
        if not records:
            raise BuildError(f"dataset {name!r}: subset {subset!r} is empty after filtering "
                             f"{raw_path} ({notes})")
        path = out_dir / f"{subset}.jsonl"
        write_jsonl(path, records)
        card_subsets[subset] = {"file": str(path), "sha256": sha256_file(path),
                                **_prompt_stats(records)}
    card = {
        "dataset": name,
        "builder": dataset["builder"],
        "options": dataset,
        "raw": {"file": str(raw_path), "sha256": raw_manifest["sha256"],
                "origin": raw_manifest["origin"], "kind": raw_manifest["kind"]},
        "filters": notes,
        "subsets": card_subsets,
    }
    # the card carries no timestamp: rebuilding the same input gives the same card
    card["card_id"] = hashlib.sha256(json.dumps(card, sort_keys=True).encode()).hexdigest()[:12]
    atomic_write_json(out_dir / "card.json", card)
    return card
