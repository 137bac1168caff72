"""Reading raw source files in the schemas real sources ship in, row by row.

A raw file is recognised by its content, not its name: JSON Lines (one object per line), a JSON
array of objects, Parquet, or (THUCNews) the official zip. Rows that cannot be used (malformed
JSON, not UTF-8, a required field missing or of the wrong type, an empty text) are skipped and
counted by reason with their first row numbers (`Skipped`); the caller decides how many skipped
rows a source may have. A file that cannot be read at all (truncated, not JSON, a broken zip or
Parquet file) raises `RawError` naming the file as the user gave it (`display`), never a
temporary copy.

Accepted schemas (extra fields are ignored):
  spec_bench     question_id (int), category (str), turns (list of str), [reference]
  cnn_dailymail  article, highlights, id (str) -- as abisee/cnn_dailymail ships them
  sharegpt       {id, conversations: [{from, value}, ...]}, as a JSON array or JSON Lines
  thucnews       the official THUCNews.zip (<category>/<n>.txt: title line, then the body), or
                 rows with `content` (or `text`) and optional `title` and `label` -- the hub
                 mirrors' JSONL / Parquet

A user's own requests (a source of any name, `format:` named or detected, `detect_format`):
  openai_chat    OpenAI chat requests: `messages` [{role, content}, ...], optional
                 `max_tokens` (or `max_completion_tokens`); a last `assistant` message, or a
                 `reference` field, is the reference reply, not sent
  sharegpt       as above: `conversations` [{from, value}, ...]
  prompts        `prompt` (str) per row, optional `output_tokens` (vLLM's custom dataset form)
                 or `max_tokens`; or a plain text file, one prompt per line
The first two and `prompts` rows are normalised to {id, messages, max_tokens, reference}
(`chat_row`), which the `chat` builder reads.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# required fields and their types per tabular source (thucnews: one of TEXT_ALTERNATIVES)
REQUIRED_FIELDS = {
    "spec_bench": {"question_id": int, "category": str, "turns": list},
    "cnn_dailymail": {"article": str, "highlights": str, "id": str},
    "sharegpt": {"conversations": list},
    "thucnews": {},
    "openai_chat": {"messages": list},
    "prompts": {"prompt": str},
}
# the formats of a user's own requests (any source name), and how each is told from its fields
CHAT_FORMATS = ("openai_chat", "sharegpt", "prompts")
FORMAT_FIELDS = {"openai_chat": "messages", "sharegpt": "conversations", "prompts": "prompt"}
THUCNEWS_TEXT_FIELDS = ("content", "text")
TEXT_FIELDS = {"spec_bench": (), "cnn_dailymail": ("article",), "sharegpt": (),
               "thucnews": ("text",), "openai_chat": (), "prompts": ()}
SCHEMA_HELP = {
    "spec_bench": "question_id (int), category (str), turns (list of str)",
    "cnn_dailymail": "article, highlights, id (strings), as abisee/cnn_dailymail",
    "sharegpt": "id and conversations: [{from, value}, ...]",
    "thucnews": "content (or text), optional title and label; or the official THUCNews.zip",
    "openai_chat": "messages: [{role, content}, ...] (OpenAI chat), optional max_tokens",
    "prompts": "prompt (a string), optional output_tokens or max_tokens; or one prompt a line",
}
CHAT_ROLES = ("system", "developer", "user", "assistant")
# ShareGPT's speaker names
HUMAN_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "chatgpt", "assistant", "bard", "model")
FIRST_ROWS = 5  # row numbers kept per skip reason


class RawError(ValueError):
    """A raw file that cannot be read at all (as opposed to single bad rows)."""


@dataclass
class Skipped:
    """Rows skipped, by reason, with the first few row labels ("line 7", "item 3", ...)."""

    counts: Counter = field(default_factory=Counter)
    rows: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, row: str) -> None:
        self.counts[reason] += 1
        first = self.rows.setdefault(reason, [])
        if len(first) < FIRST_ROWS:
            first.append(row)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        """{reason: {"rows": count, "first": [row labels]}} (manifests and cards)."""
        return {reason: {"rows": n, "first": self.rows[reason]}
                for reason, n in sorted(self.counts.items())}

    def describe(self) -> str:
        return describe_skipped(self.as_dict())


def describe_skipped(skipped: dict) -> str:
    """'malformed JSON: 2 (line 7, line 12); ...' from `Skipped.as_dict()`: counts, reasons
    and the first rows, the commonest reason first."""
    return "; ".join(
        f"{reason}: {info['rows']} ({', '.join(info['first'])}"
        f"{', ...' if info['rows'] > len(info['first']) else ''})"
        for reason, info in sorted(skipped.items(), key=lambda kv: -kv[1]["rows"]))


def file_format(path: str | Path) -> str:
    """'zip', 'parquet', 'json' (an array) or 'jsonl', from the file's first bytes."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head.startswith(b"PAR1"):
        return "parquet"
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"["):
        return "json"
    if text.startswith(b"{") or not text:
        return "jsonl"
    raise RawError(f"neither JSON Lines, a JSON array, Parquet nor a zip archive (it starts "
                   f"with {head[:24]!r})")


# ----------------------------------------------------------------------------- row checks

def _valid(source: str, row, label: str, skipped: Skipped) -> dict | None:
    """The row in its normalised form, or None (counted in `skipped`)."""
    if not isinstance(row, dict):
        skipped.add("not a JSON object", label)
        return None
    missing = [k for k, typ in REQUIRED_FIELDS[source].items()
               if not isinstance(row.get(k), typ) or isinstance(row.get(k), bool)]
    if missing:
        skipped.add(f"missing or mistyped field {missing[0]!r}", label)
        return None
    if source == "thucnews":
        row = _thucnews_row(row, label, skipped)
    elif source == "sharegpt":
        row = _sharegpt_row(row, label, skipped)
    elif source == "spec_bench" and not all(isinstance(t, str) for t in row["turns"]):
        skipped.add("turns that are not strings", label)
        return None
    elif source in ("openai_chat", "prompts"):
        row = chat_row(source, row, label, skipped)
    if row is None:
        return None
    if any(not row[k].strip() for k in TEXT_FIELDS[source]):
        skipped.add("empty text", label)
        return None
    return row


def _thucnews_row(row: dict, label: str, skipped: Skipped) -> dict | None:
    text = next((row[k] for k in THUCNEWS_TEXT_FIELDS if isinstance(row.get(k), str)), None)
    if text is None:
        skipped.add("missing or mistyped field 'content' (or 'text')", label)
        return None
    title = row.get("title")
    return {"id": str(row.get("id") or label), "title": title if isinstance(title, str) else "",
            "text": text.strip(), "label": row.get("label")}


def _sharegpt_row(row: dict, label: str, skipped: Skipped) -> dict | None:
    turns = row["conversations"]
    if not all(isinstance(t, dict) and isinstance(t.get("from"), str)
               and isinstance(t.get("value"), str) for t in turns):
        skipped.add("malformed conversations (a turn without string from/value)", label)
        return None
    return {"id": str(row.get("id", "")), "conversations": turns}


def _length(row: dict, keys: tuple[str, ...], label: str,
            skipped: Skipped) -> tuple[bool, int | None]:
    """(usable, the row's own output length under the first of `keys` it has; None: none)."""
    for key in keys:
        if key in row and row[key] is not None:
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                skipped.add(f"{key} not a positive integer", label)
                return False, None
            return True, value
    return True, None


def chat_row(source: str, row: dict, label: str, skipped: Skipped) -> dict | None:
    """An `openai_chat` or `prompts` row as {id, messages, max_tokens, reference}: the messages
    sent (system prompt and earlier turns kept), the row's own output length, its reference
    reply (a last assistant message, or `reference`)."""
    ident = str(row.get("id", label))
    if source == "prompts":
        if not row["prompt"].strip():
            skipped.add("empty prompt", label)
            return None
        ok, length = _length(row, ("output_tokens", "max_tokens"), label, skipped)
        return {"id": ident, "messages": [{"role": "user", "content": row["prompt"]}],
                "max_tokens": length, "reference": None} if ok else None
    messages = row["messages"]
    if not messages or not all(isinstance(m, dict) and m.get("role") in CHAT_ROLES
                               and isinstance(m.get("content"), str) for m in messages):
        skipped.add("malformed messages (each needs a role of "
                    f"{'/'.join(CHAT_ROLES)} and a string content)", label)
        return None
    messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    reference = row.get("reference") if isinstance(row.get("reference"), str) else None
    if messages[-1]["role"] == "assistant":
        reference = messages.pop()["content"] if reference is None else reference
        if messages and messages[-1]["role"] == "assistant":
            messages.pop()
    if not messages or messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        skipped.add("no user message to answer last", label)
        return None
    ok, length = _length(row, ("max_tokens", "max_completion_tokens"), label, skipped)
    return {"id": ident, "messages": messages, "max_tokens": length,
            "reference": reference} if ok else None


def detect_format(path: str | Path, display: str | None = None) -> str:
    """The format of a user's own request file from its first row's fields (`FORMAT_FIELDS`),
    or `prompts` for plain text; RawError naming the fields it has where none fits."""
    display = display or str(path)
    try:
        kind = file_format(path)
    except RawError:
        kind = "text"
    if kind == "text":
        return "prompts"
    fields = first_fields(path)
    if kind == "json":
        try:
            items = json.loads(Path(path).read_bytes().decode("utf-8-sig"))
            first = next((i for i in items if isinstance(i, dict)), None)
            fields = sorted(first) if first is not None else None
        except (ValueError, TypeError) as exc:
            raise RawError(f"{display}: not valid JSON ({exc})") from exc
    found = [name for name, key in FORMAT_FIELDS.items() if key in (fields or ())]
    if not found:
        raise RawError(
            f"{display}: its format is not recognised: its first row has fields "
            f"{fields or 'none'}; known formats: "
            + "; ".join(f"{name} ({SCHEMA_HELP.get(name, 'id and conversations')})"
                        for name in CHAT_FORMATS)
            + ". Convert the file, or name the format (sources.<name>.format)")
    return found[0]


# ---------------------------------------------------------------------------- file formats

def _why(exc: Exception, path: Path, display: str) -> str:
    """A library's error message with the file named as the user named it."""
    return str(exc).replace(str(path), display)


def _jsonl_rows(source: str, path: Path, display: str, skipped: Skipped) -> Iterator[dict]:
    with open(path, "rb") as fh:
        for lineno, raw_line in enumerate(fh, start=1):
            if not raw_line.strip():
                continue
            label = f"line {lineno}"
            try:  # a byte-order mark before the first line, as some editors write
                line = raw_line.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                skipped.add("not UTF-8", label)
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                if not raw_line.endswith(b"\n"):
                    raise RawError(
                        f"{display}: its last line ({lineno}) ends in the middle of a row "
                        f"({exc.msg}): the file looks truncated (a cut download or copy); "
                        "get the whole file again") from exc
                skipped.add("malformed JSON", label)
                continue
            valid = _valid(source, row, label, skipped)
            if valid is not None:
                yield valid


def _json_rows(source: str, path: Path, display: str, skipped: Skipped) -> Iterator[dict]:
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RawError(f"{display}: not UTF-8 text (first bad byte at offset {exc.start}); "
                       "re-save it as UTF-8") from exc
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        if not text.rstrip().endswith("]"):
            raise RawError(f"{display}: its JSON array is cut off ({exc.msg} at {where}, no "
                           "closing ']'): the file looks truncated (a cut download or copy); "
                           "get the whole file again") from exc
        if exc.msg == "Extra data":
            raise RawError(f"{display}: more JSON after the end of its array ({where}): two "
                           "files joined?") from exc
        raise RawError(f"{display}: not valid JSON ({exc.msg} at {where})") from exc
    if not isinstance(items, list):
        raise RawError(f"{display}: expected a JSON array of rows, got "
                       f"{type(items).__name__}")
    for i, item in enumerate(items, start=1):
        valid = _valid(source, item, f"item {i}", skipped)
        if valid is not None:
            yield valid


def _parquet_rows(source: str, path: Path, display: str, skipped: Skipped) -> Iterator[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise RawError(f"{display}: not a readable Parquet file "
                       f"({_why(exc, path, display)}); a truncated download?") from exc
    for i, row in enumerate(table.to_pylist(), start=1):
        valid = _valid(source, row, f"row {i}", skipped)
        if valid is not None:
            yield valid


def _thucnews_zip_rows(path: Path, display: str, skipped: Skipped) -> Iterator[dict]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise RawError(f"{display}: not a readable zip archive "
                       f"({_why(exc, path, display)}); a truncated download?") from exc
    with archive:
        for name in sorted(archive.namelist()):
            if not name.endswith(".txt"):
                continue
            try:
                text = archive.read(name).decode("utf-8")
            except UnicodeDecodeError:
                skipped.add("not UTF-8", name)
                continue
            except (zipfile.BadZipFile, EOFError, OSError) as exc:
                raise RawError(f"{display}: member {name} cannot be read "
                               f"({_why(exc, path, display)}); a truncated download?") from exc
            lines = [line.strip() for line in text.strip().splitlines()]
            title, body = (lines[0], "\n".join(x for x in lines[1:] if x)) if lines else ("", "")
            if not body:
                skipped.add("empty text", name)
                continue
            parts = Path(name).parts
            yield {"id": name, "title": title, "text": body,
                   "label": parts[-2] if len(parts) >= 2 else None}


def _text_rows(path: Path, display: str, skipped: Skipped) -> Iterator[dict]:
    """One prompt per non-empty line of a plain text file."""
    with open(path, "rb") as fh:
        for lineno, raw_line in enumerate(fh, start=1):
            if not raw_line.strip():
                continue
            try:
                line = raw_line.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                skipped.add("not UTF-8", f"line {lineno}")
                continue
            yield {"id": f"line {lineno}", "messages": [{"role": "user",
                                                         "content": line.strip()}],
                   "max_tokens": None, "reference": None}


def read_rows(source: str, path: str | Path, display: str | None = None
              ) -> tuple[list[dict], Skipped]:
    """All usable rows of a raw file and the rows skipped (by reason, with row numbers).
    `source` is the file's format (a known source's name, or one of CHAT_FORMATS); `display`
    names the file in messages (default: `path`)."""
    path = Path(path)
    display = display or str(path)
    if source not in REQUIRED_FIELDS:
        raise RawError(f"unknown format {source!r}")
    skipped = Skipped()
    try:
        kind = file_format(path)
    except RawError as exc:
        if source == "prompts":
            return list(_text_rows(path, display, skipped)), skipped
        raise RawError(f"{display}: {exc}") from exc
    if kind == "zip":
        if source != "thucnews":
            raise RawError(f"{display}: a zip archive; {source} is read from JSON Lines, a "
                           "JSON array or Parquet")
        rows = list(_thucnews_zip_rows(path, display, skipped))
    else:
        reader = {"jsonl": _jsonl_rows, "json": _json_rows, "parquet": _parquet_rows}[kind]
        rows = list(reader(source, path, display, skipped))
    return rows, skipped


def first_fields(path: str | Path) -> list[str] | None:
    """The field names of a tabular file's first row (to say what a wrong file holds)."""
    try:
        kind = file_format(path)
        if kind == "jsonl":
            with open(path, "rb") as fh:
                for line in fh:
                    try:  # the first row that is JSON (a malformed one is skipped)
                        row = json.loads(line) if line.strip() else None
                    except ValueError:
                        continue
                    if isinstance(row, dict):
                        return sorted(row)
        if kind == "parquet":
            import pyarrow.parquet as pq

            return sorted(pq.read_schema(path).names)
    except (ValueError, OSError, ImportError):
        return None
    return None
