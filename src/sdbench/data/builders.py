"""Processed prompt sets: raw rows -> data/processed/<dataset>/<subset>.jsonl + <subset>.card.json.

One subset (a task group or a length bucket) is built at a time, from its own definition only,
so changing one bucket rebuilds that bucket alone. Each output line is what vLLM's load
generator reads as a `custom` dataset (`prompt`, `output_tokens`) plus `prompt_tokens` and
metadata (ids, bucket, how many source texts were joined). `min_tokens`, when present, forces
the output length. Building is deterministic: the same raw file, definition and seed give the
same bytes.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from pathlib import Path

import numpy as np

from sdbench.data.cards import composition, histogram, quantiles
from sdbench.data.conversations import SEPARATOR, flatten, sharegpt_messages
from sdbench.data.raw import ASSISTANT_ROLES, HUMAN_ROLES, read_rows
from sdbench.data.sources import SPEC_BENCH_GROUPS, SPEC_BENCH_SUBSETS
from sdbench.data.tokens import Tokenizer
from sdbench.files import atomic_write_json, sha256_file, write_jsonl

# builders whose subsets are the configured buckets (one file per bucket)
BUCKETED = ("cnn_dm_news_summary", "cnn_dm_highlights_news", "thucnews_polish")
BUILDER_SOURCE = {"spec_bench": "spec_bench", "sharegpt": "sharegpt",
                  "cnn_dm_news_summary": "cnn_dailymail", "cnn_dm_highlights_news": "cnn_dailymail",
                  "cnn_dm_mixed": "cnn_dailymail", "thucnews_polish": "thucnews"}
# the builder of a user's own requests, and the source formats it reads (`raw.CHAT_FORMATS`)
CHAT = "chat"
# builders whose records are sent in file order (the load generator shuffles others): the
# mixed set's file is itself a seeded shuffle of its buckets (`order`), so that a point's first
# n prompts mix the lengths, and round 3 maps each request to its bucket by position
ORDERED = ("cnn_dm_mixed",)


def sent_in_order(definition: dict) -> bool:
    """Whether a subset's records are sent in file order (the mixed set; Spec-Bench with
    `per_task`, whose file takes the task groups in turn) rather than shuffled by the load
    generator; the reports then map each request to its bucket or task group by position."""
    return definition["builder"] in ORDERED or bool(definition.get("per_task"))


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


def _need(definition: dict, got: int, wanted: int, what: str, skipped: Counter,
          remedy=lambda: "Use a larger source or allow_partial: true.") -> None:
    """Too few records is an error (unless allow_partial) ending with `remedy()`, which is only
    worked out then."""
    if got < wanted and not definition.get("allow_partial", False):
        raise BuildError(
            f"dataset {definition['dataset']!r}, subset {definition['subset']!r}: needed "
            f"{wanted} {what}, found {got}"
            + (f" (skipped: {dict(skipped)})" if skipped else "") + f". {remedy()}")


def _seeded_order(items: list, definition: dict, *key: str) -> list:
    """`items` in an order fixed by the dataset's seed, its name and `key` (e.g. the bucket):
    each subset draws its own sample, independent of the other subsets."""
    order = list(items)
    random.Random(":".join([str(definition["seed"]), definition["dataset"], *key])).shuffle(order)
    return order


# ---------------------------------------------------------------- filling prompt-length buckets
#
# Two packings (dataset key `packing`):
#   whole (default, as the original study): whole texts, each prompt's length in
#         [min_prompt_tokens, prompt_tokens) of its bucket (min_prompt_tokens: half the bucket
#         unless set). A bucket no single text reaches joins `texts_per_prompt` whole texts,
#         each labelled (`text_label`), under an instruction that says there are several
#         (`instruction_joined`); `auto` joins only where single texts cannot fill the bucket.
#   cut:  prompt_tokens ± tolerance; short texts joined unlabelled, the last one cut at a
#         sentence (else at a token) to land near the nominal length.

MAX_TEXTS_PER_PROMPT = 16  # the most texts `texts_per_prompt: auto` joins into one prompt


def bucket_bounds(definition: dict, bucket: dict) -> tuple[int, int]:
    """[low, high) prompt tokens of a bucket under the dataset's packing."""
    target = bucket["prompt_tokens"]
    if definition.get("packing", "whole") == "cut":
        tolerance = definition["tolerance"]
        return int(target * (1 - tolerance)), int(target * (1 + tolerance)) + 1
    return bucket.get("min_prompt_tokens", target // 2), target


class _Texts:
    """The source texts of one dataset (`order` gives a subset's seeded order) and those a
    record already uses: a text is never in two records of one file."""

    def __init__(self, texts: list[tuple[str, str]], tok: Tokenizer) -> None:
        self.texts, self.tok = texts, tok
        self.used: set[str] = set()

    def order(self, definition: dict, *key: str) -> list[tuple[str, str]]:
        return [t for t in _seeded_order(self.texts, definition, *key) if t[0] not in self.used]


def _render(definition: dict, parts: list[str], labelled: bool) -> str:
    if not labelled:
        return definition["instruction"].replace("{text}", SEPARATOR.join(parts))
    label = definition["text_label"]
    body = SEPARATOR.join(f"{label.replace('{n}', str(i))}\n{text}"
                          for i, text in enumerate(parts, start=1))
    return definition["instruction_joined"].replace("{text}", body)


def _whole_records(texts: _Texts, definition: dict, bucket: dict, n: int,
                   skipped: Counter) -> list[dict]:
    """Records of `n` whole texts each (labelled when n > 1) whose prompt lies in the bucket:
    each text's own length in the bucket's range less the instruction, divided by n."""
    tok, (low, high) = texts.tok, bucket_bounds(definition, bucket)
    overhead = tok.count(_render(definition, [""] * n, n > 1))
    text_low, text_high = (low - overhead) / n, (high - overhead) / n
    records, group = [], []
    for ident, text in texts.order(definition, bucket["name"]):
        if len(records) == definition["records_per_bucket"]:
            break
        if not text_low <= tok.count(text) < text_high:
            continue
        group.append((ident, text))
        if len(group) < n:
            continue
        prompt = _render(definition, [t for _, t in group], n > 1)
        tokens = tok.count(prompt)
        if low <= tokens < high:
            records.append({"prompt": prompt, "prompt_tokens": tokens,
                            "text_tokens": sum(tok.count(t) for _, t in group),
                            "bucket": bucket["name"], "source_ids": [i for i, _ in group],
                            "n_sources": n, "truncated": False})
            texts.used.update(i for i, _ in group)
        else:
            skipped["prompt of whole texts just outside the bucket"] += 1
        group = []
    return records


def _whole_bucket(texts: _Texts, definition: dict, bucket: dict, skipped: Counter) -> list:
    """The bucket filled with whole texts, `texts_per_prompt` at a time (`auto`: one, else the
    fewest that fill it)."""
    wanted = definition["records_per_bucket"]
    setting = bucket.get("texts_per_prompt", "auto")
    counts = [setting] if setting != "auto" else range(1, MAX_TEXTS_PER_PROMPT + 1)
    best: list[dict] = []
    for n in counts:
        records = _whole_records(texts, definition, bucket, n, skipped)
        if len(records) == wanted:
            return records
        texts.used.difference_update(i for r in records for i in r["source_ids"])
        best = max(best, records, key=len)
    texts.used.update(i for r in best for i in r["source_ids"])
    return best


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


def _cut_bucket(texts: _Texts, definition: dict, bucket: dict, skipped: Counter) -> list:
    """Prompts of prompt_tokens ± tolerance: texts joined unlabelled, the last one cut."""
    tok, target = texts.tok, bucket["prompt_tokens"]
    lo, hi = bucket_bounds(definition, bucket)
    hi -= 1  # inclusive here

    def render(parts: list[str]) -> str:
        return _render(definition, parts, labelled=False)

    records, parts, ids = [], [], []
    for ident, text in texts.order(definition, bucket["name"]):
        if len(records) == definition["records_per_bucket"]:
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
                        "text_tokens": tok.count(SEPARATOR.join(parts)),
                        "bucket": bucket["name"], "source_ids": ids, "n_sources": len(parts),
                        "truncated": truncated})
        texts.used.update(ids)
        parts, ids = [], []
    return records


def fill_bucket(texts: _Texts, definition: dict, bucket: dict, skipped: Counter) -> list[dict]:
    """One prompt-length bucket under the dataset's packing; too few records is an error
    (unless allow_partial) that says what the source offered."""
    pack = _cut_bucket if definition.get("packing", "whole") == "cut" else _whole_bucket
    records = pack(texts, definition, bucket, skipped)
    low, high = bucket_bounds(definition, bucket)
    _need(definition, len(records), definition["records_per_bucket"],
          f"prompts of [{low}, {high}) tokens", skipped,
          remedy=lambda: _length_remedy(texts, definition))
    return records


def _length_remedy(texts: _Texts, definition: dict) -> str:
    lengths = [texts.tok.count(t) for _, t in texts.texts[:2000]]
    seen = (f"The source's texts have p10/p50/p90 {_p(lengths, 10)}/{_p(lengths, 50)}/"
            f"{_p(lengths, 90)} tokens (of {len(lengths)} counted); the instruction "
            f"{texts.tok.count(_render(definition, [''], False))}. ")
    return seen + ("Use a larger source, fewer records_per_bucket, texts_per_prompt: auto "
                   "(join whole texts), another packing, or allow_partial: true.")


def _p(values: list[int], q: int) -> int:
    return int(np.percentile(values, q)) if values else 0


# ------------------------------------------------------------------------------------- builders

def _spec_bench(rows: list[dict], definition: dict, tok: Tokenizer, skipped: Counter) -> list:
    subset = definition["subset"]
    prefixes = definition.get("task_prefixes") or {}
    cap = definition.get("max_prompt_tokens")
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
        prefix = prefixes.get(group, "")
        added = bool(prefix) and not first.startswith(prefix.strip())
        prompt = prefix + first if added else first
        keep = prefix if added else prefix.strip()  # what a cut keeps (the task prefix)
        truncated = cap is not None and tok.count(prompt) > cap
        if truncated:  # the longest cut of the text after the prefix that fits the cap
            body = _fit_last(tok, lambda parts, keep=keep: keep + "".join(parts), [],
                             prompt[len(keep):], 0, cap, cap)
            prompt = keep + body if body is not None else tok.truncate(prompt, cap)
        tokens = tok.count(prompt)
        records.append({"prompt": prompt, "output_tokens": definition["max_output_tokens"],
                        "prompt_tokens": tokens, "text_tokens": tokens - tok.count(keep),
                        "question_id": row["question_id"], "category": row["category"],
                        "task": group, "prefix_added": added, "truncated": truncated})
    if definition.get("per_task"):
        records = _in_turn(records, definition["per_task"])
    if definition["max_records"] is not None:
        records = records[: definition["max_records"]]
    _need(definition, len(records), 1, "records", skipped)
    return records


def _in_turn(records: list[dict], per_task: int) -> list[dict]:
    """The first `per_task` records of each task group (file order), taken in turn: the first
    of each group, then the second of each, ... (any first n prompts mix the groups)."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(record["task"], []).append(record)
    firsts = [group[:per_task] for group in groups.values()]
    return [group[i] for i in range(per_task) for group in firsts if i < len(group)]


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
                        "prompt_tokens": prompt_tokens, "text_tokens": prompt_tokens,
                        "reference_tokens": reply_tokens, "id": row["id"]})
    _need(definition, len(records), definition["samples"], "conversations", skipped)
    return records


def _news_texts(rows: list[dict], tok: Tokenizer) -> _Texts:
    return _Texts([(row["id"], row["article"].strip()) for row in rows], tok)


def _news_summary(rows, definition, tok, skipped) -> list:
    bucket = definition["bucket"]
    records = fill_bucket(_news_texts(rows, tok), definition, bucket, skipped)
    return [{**r, "output_tokens": bucket["output_tokens"]} for r in records]


def _mixed(rows, definition, tok, skipped) -> list:
    """Every bucket from one pool of articles (none is used twice), sent in file order: a
    seeded shuffle (`order: shuffled`, the default) or bucket by bucket (`order: buckets`)."""
    texts = _news_texts(rows, tok)
    records = []
    for bucket in definition["buckets"]:
        filled = fill_bucket(texts, definition, bucket, skipped)
        records += [{**r, "output_tokens": bucket["output_tokens"]} for r in filled]
    if definition.get("order", "shuffled") == "shuffled":
        records = _seeded_order(records, definition, "order")
    return records


def _highlights_news(rows, definition, tok, skipped) -> list:
    bucket = definition["bucket"]
    low, high = definition["prompt_tokens_range"]
    records, lengths = [], []
    for row in _seeded_order(rows, definition, bucket["name"]):
        if len(records) == definition["records_per_bucket"]:
            break
        highlights = row["highlights"].strip()
        if not highlights:
            skipped["empty highlights"] += 1
            continue
        prompt = definition["instruction"].replace("{text}", highlights)
        tokens = tok.count(prompt)
        lengths.append(tokens)
        if not low <= tokens <= high:
            skipped[f"prompt outside {low}-{high} tokens"] += 1
            continue
        records.append({"prompt": prompt, "output_tokens": bucket["output_tokens"],
                        "min_tokens": bucket["output_tokens"], "prompt_tokens": tokens,
                        "text_tokens": tok.count(highlights), "bucket": bucket["name"],
                        "id": row["id"]})
    instruction = tok.count(definition["instruction"].replace("{text}", ""))
    _need(definition, len(records), definition["records_per_bucket"],
          f"highlights prompts of {low}-{high} tokens", skipped,
          remedy=lambda: (
              f"Prompts (instruction of {instruction} tokens + highlights) had p10/p50/p90 "
              f"{_p(lengths, 10)}/{_p(lengths, 50)}/{_p(lengths, 90)} tokens: set "
              "prompt_tokens_range around them or change the instruction's length, or use "
              "fewer records_per_bucket."))
    return records


def _thucnews_polish(rows, definition, tok, skipped) -> list:
    """Whole news items (title line, then the body), the instruction counted in the bucket;
    the output about as long as the items (`output_ratio`)."""
    bucket = definition["bucket"]
    items = _Texts([(row["id"], f"{row['title']}\n{row['text']}" if row["title"] else row["text"])
                    for row in rows], tok)
    records = fill_bucket(items, definition, bucket, skipped)
    ratio = definition["output_ratio"]
    return [{**r, "output_tokens": max(1, round(ratio * r["text_tokens"]))} for r in records]


def _chat(rows: list[dict], definition: dict, tok: Tokenizer, skipped: Counter) -> list:
    """A user's own requests as their service sends them (system prompt and earlier turns
    kept), each with its output length by the set's policy (`output_tokens`): the request's
    own `max_tokens` (`request`; rows without one get `max_output_tokens`), its reference
    reply's length (`reference`) or a fixed number; every length capped at
    `max_output_tokens`. `samples`: a seeded sample of that many (null: every row, in file
    order)."""
    policy, cap = definition["output_tokens"], definition["max_output_tokens"]
    longest = definition.get("max_prompt_tokens")
    forced = not definition.get("stop_at_eos", True)
    wanted = definition.get("samples")
    records = []
    for row in rows if wanted is None else _seeded_order(rows, definition):
        if wanted is not None and len(records) == wanted:
            break
        if "conversations" in row:
            found = sharegpt_messages(row)
            if found is None:
                skipped["no human turn"] += 1
                continue
            messages, reference, own = *found, None
        else:
            messages, reference, own = row["messages"], row["reference"], row["max_tokens"]
        prompt = flatten(messages)
        tokens = tok.count(prompt)
        if longest is not None and tokens > longest:
            skipped["prompt longer than max_prompt_tokens"] += 1
            continue
        if policy == "reference":
            if not reference or not reference.strip():
                skipped["no reference reply"] += 1
                continue
            length, source = tok.count(reference), "reference"
        elif policy == "request":
            length, source = (own, "request") if own else (cap, "max_output_tokens")
        else:
            length, source = int(policy), "fixed"
        output = max(1, min(length, cap))
        records.append({
            "prompt": prompt, "messages": messages, "output_tokens": output,
            **({"min_tokens": output} if forced else {}),
            "prompt_tokens": tokens, "text_tokens": tokens, "id": row.get("id"),
            "output_from": source if output == length else f"{source}, capped",
            "turns": sum(1 for m in messages if m["role"] == "user"),
            "system": any(m["role"] in ("system", "developer") for m in messages)})
    _need(definition, len(records), wanted or 1, "requests", skipped)
    return records


BUILDERS = {
    CHAT: _chat,
    "spec_bench": _spec_bench, "sharegpt": _sharegpt, "cnn_dm_news_summary": _news_summary,
    "cnn_dm_highlights_news": _highlights_news, "thucnews_polish": _thucnews_polish,
    "cnn_dm_mixed": _mixed,
}


def _longest(definition: dict) -> list[tuple[int | None, int]]:
    """(prompt, output) token bounds of a subset's longest requests, per bucket, from its
    definition alone (prompt None: Spec-Bench without max_prompt_tokens; ShareGPT: its prompt
    + reply cap, counted as output, since its replies set the output)."""
    builder = definition["builder"]
    if builder == CHAT:
        return [(definition.get("max_prompt_tokens"), definition["max_output_tokens"])]
    if builder == "spec_bench":
        return [(definition.get("max_prompt_tokens"), definition["max_output_tokens"])]
    if builder == "sharegpt":
        return [(0, definition["filters"]["max_total_tokens"])]
    if builder == "cnn_dm_highlights_news":
        return [(definition["prompt_tokens_range"][1], definition["bucket"]["output_tokens"])]
    buckets = definition["buckets"] if builder == "cnn_dm_mixed" else [definition["bucket"]]
    longest = []
    for bucket in buckets:
        prompt = bucket_bounds(definition, bucket)[1] - 1
        output = (math.ceil(definition["output_ratio"] * prompt)
                  if builder == "thucnews_polish" else bucket["output_tokens"])
        longest.append((prompt, output))
    return longest


def request_bound(definition: dict) -> int | None:
    """The most tokens (prompt + output, in the dataset's tokenizer) a request of this subset
    can need, from its definition alone; None where only the built file can tell (Spec-Bench
    without max_prompt_tokens)."""
    longest = _longest(definition)
    if any(prompt is None for prompt, _ in longest):
        return None
    return max(prompt + output for prompt, output in longest)


def output_bound(definition: dict) -> int:
    """The most output tokens a request of this subset can ask for."""
    return max(output for _, output in _longest(definition))


# ---------------------------------------------------------------------------------- data cards


def _output_rule(definition: dict) -> str:
    builder = definition["builder"]
    if builder == CHAT:
        policy, cap = definition["output_tokens"], definition["max_output_tokens"]
        rule = {"request": f"max_tokens = the request's own (without one: {cap})",
                "reference": "max_tokens = token length of the reference reply"}.get(
                    policy, f"max_tokens = {policy}")
        eos = ("min_tokens = max_tokens (forced: the model may not stop at its end-of-sequence "
               "token)" if not definition.get("stop_at_eos", True)
               else "the model may stop at its end-of-sequence token")
        return f"{rule}, at most {cap}; {eos}"
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


def _selection(definition: dict, records: list[dict]) -> dict:
    """The rule that chose the records, as built (bounds, packing, order, prefixes)."""
    builder = definition["builder"]
    if builder in BUCKETED and builder != "cnn_dm_highlights_news":
        low, high = bucket_bounds(definition, definition["bucket"])
        return {"packing": definition.get("packing", "whole"), "prompt_tokens": [low, high],
                "texts_per_prompt": sorted({r["n_sources"] for r in records})}
    if builder == "cnn_dm_mixed":
        return {"packing": definition.get("packing", "whole"),
                "order": definition.get("order", "shuffled"),
                "prompt_tokens": {b["name"]: list(bucket_bounds(definition, b))
                                  for b in definition["buckets"]},
                "texts_reused": sum(len(r["source_ids"]) for r in records)
                - len({i for r in records for i in r["source_ids"]})}
    if builder == CHAT:
        return {"samples": definition.get("samples"),
                "output_tokens": definition["output_tokens"],
                "output_from": dict(Counter(r["output_from"] for r in records)),
                "stop_at_eos": definition.get("stop_at_eos", True),
                "with_system_prompt": sum(1 for r in records if r["system"]),
                "multi_turn": sum(1 for r in records if r["turns"] > 1),
                "max_prompt_tokens": definition.get("max_prompt_tokens")}
    if builder == "spec_bench":
        return {"task_prefixes": definition.get("task_prefixes") or {},
                "prefix_added": sum(1 for r in records if r["prefix_added"]),
                "max_prompt_tokens": definition.get("max_prompt_tokens"),
                "per_task": definition.get("per_task")}
    return {}


def build_subset(definition: dict, raw_path: str | Path, raw_manifest: dict, tok: Tokenizer,
                 out_path: str | Path, card_path: str | Path) -> dict:
    """Build one subset and its card (the definition comes from config.subset_definition)."""
    schema = raw_manifest.get("format", raw_manifest["source"])
    rows, raw_skipped = read_rows(schema, raw_path)
    skipped: Counter = Counter()
    records = BUILDERS[definition["builder"]](rows, definition, tok, skipped)
    write_jsonl(out_path, records)
    prompt_tokens = [r["prompt_tokens"] for r in records]
    card = {
        "dataset": definition["dataset"],
        "subset": definition["subset"],
        "builder": definition["builder"],
        "records": len(records),
        "ordered": sent_in_order(definition),
        "output_rule": _output_rule(definition),
        "selection": {**_selection(definition, records),
                      **({"format": schema} if definition["builder"] == CHAT else {})},
        "composition": composition(records),
        "prompt_tokens": quantiles(prompt_tokens),
        "prompt_token_histogram": histogram(prompt_tokens) if prompt_tokens else {},
        "output_tokens": quantiles([r["output_tokens"] for r in records]),
        "joined_sources": quantiles([r["n_sources"] for r in records if "n_sources" in r]),
        "truncated_records": sum(1 for r in records if r.get("truncated")),
        "skipped": dict(sorted(skipped.items())),
        "raw_rows_usable": len(rows),
        "raw_rows_skipped": raw_skipped.as_dict(),
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


