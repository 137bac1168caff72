"""Reading raw source files in their real schemas, tolerating bad rows.

Malformed JSON lines, rows without a required field, empty texts and bytes that are not UTF-8
are skipped and counted by reason; callers put the counts in manifests, logs and data cards.

Schemas:
  spec_bench     JSONL: question_id (int), category (str), turns (list of str), [reference]
  cnn_dailymail  JSONL: article, highlights, id (str)
  sharegpt       JSON list: {id, conversations: [{from, value}, ...]}
  thucnews       the official THUCNews.zip (<category>/<n>.txt: title line, then the body)
                 or JSONL from a hub mirror: text, [title], [label]
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

JSONL_FIELDS = {
    "spec_bench": {"question_id": int, "category": str, "turns": list},
    "cnn_dailymail": {"article": str, "highlights": str, "id": str},
    "thucnews": {"text": str},
}
TEXT_FIELDS = {"spec_bench": (), "cnn_dailymail": ("article",), "thucnews": ("text",)}


class RawError(ValueError):
    """A raw file that cannot be read at all (as opposed to single bad rows)."""


def _jsonl_rows(source: str, path: Path, skipped: Counter) -> Iterator[dict]:
    fields = JSONL_FIELDS[source]
    with open(path, "rb") as fh:
        for raw_line in fh:
            if not raw_line.strip():
                continue
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError:
                skipped["not UTF-8"] += 1
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                skipped["malformed JSON"] += 1
                continue
            if not isinstance(row, dict):
                skipped["not a JSON object"] += 1
                continue
            missing = [k for k, typ in fields.items() if not isinstance(row.get(k), typ)]
            if missing:
                skipped[f"missing or mistyped field {missing[0]!r}"] += 1
                continue
            if any(not row[k].strip() for k in TEXT_FIELDS[source]):
                skipped["empty text"] += 1
                continue
            yield row


def _sharegpt_rows(path: Path, skipped: Counter) -> Iterator[dict]:
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RawError(f"{path}: not a UTF-8 JSON file ({exc})") from exc
    if not isinstance(data, list):
        raise RawError(f"{path}: expected a JSON list of conversations, got "
                       f"{type(data).__name__}")
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or not all(
                isinstance(t, dict) and isinstance(t.get("from"), str)
                and isinstance(t.get("value"), str) for t in turns):
            skipped["missing or malformed conversations"] += 1
            continue
        yield {"id": str(item.get("id", "")), "conversations": turns}


def _thucnews_zip_rows(path: Path, skipped: Counter) -> Iterator[dict]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise RawError(f"{path}: not a zip file ({exc})") from exc
    with archive:
        for name in sorted(archive.namelist()):
            if not name.endswith(".txt"):
                continue
            try:
                text = archive.read(name).decode("utf-8")
            except UnicodeDecodeError:
                skipped["not UTF-8"] += 1
                continue
            lines = [line.strip() for line in text.strip().splitlines()]
            title, body = (lines[0], "\n".join(x for x in lines[1:] if x)) if lines else ("", "")
            if not body:
                skipped["empty text"] += 1
                continue
            parts = Path(name).parts
            yield {"id": name, "title": title, "text": body,
                   "label": parts[-2] if len(parts) >= 2 else None}


def read_rows(source: str, path: str | Path) -> tuple[list[dict], Counter]:
    """All usable rows of a raw file and the count of skipped ones by reason."""
    path = Path(path)
    skipped: Counter = Counter()
    if source == "sharegpt":
        rows = list(_sharegpt_rows(path, skipped))
    elif source == "thucnews" and path.suffix == ".zip":
        rows = list(_thucnews_zip_rows(path, skipped))
    elif source in JSONL_FIELDS:
        rows = list(_jsonl_rows(source, path, skipped))
    else:
        raise RawError(f"unknown source {source!r}")
    return rows, skipped
