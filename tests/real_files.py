"""Raw source files in the formats real users have (JSON Lines, JSON arrays, Parquet, the
THUCNews zip), written from the project's fixture rows, and ways to damage them."""

import json
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sdbench.data import fixtures
from sdbench.files import write_jsonl

REPO = Path(__file__).resolve().parents[1]
SPEC_BENCH = REPO / "data" / "spec_bench" / "question.jsonl"
SPEC_BENCH_SHA256 = "4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04"


def write_rows(path: Path, rows: list[dict], fmt: str) -> Path:
    """`rows` as JSON Lines, a JSON array or Parquet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        write_jsonl(path, rows)
    elif fmt == "json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise ValueError(fmt)
    return path


def cnn_dailymail(path: Path, rows: int, fmt: str = "jsonl", seed: int = 0) -> Path:
    """abisee/cnn_dailymail's schema: article, highlights, id."""
    return write_rows(path, fixtures.cnn_dailymail_rows(rows, seed), fmt)


def thucnews_rows(rows: int, seed: int = 0, text_field: str = "content") -> list[dict]:
    """The hub mirrors' schema: title + content (or text) + label."""
    return [{"title": item["title"], text_field: item["body"], "label": item["category"]}
            for item in fixtures.thucnews_items(rows, seed)]


def thucnews(path: Path, rows: int, fmt: str = "jsonl", seed: int = 0,
             text_field: str = "content") -> Path:
    if fmt == "zip":
        fixtures.write_fixture("thucnews", path, rows, seed)
        return path
    return write_rows(path, thucnews_rows(rows, seed, text_field), fmt)


def sharegpt(path: Path, rows: int, fmt: str = "json", seed: int = 0) -> Path:
    return write_rows(path, fixtures.sharegpt_items(rows, seed), fmt)


def cut(path: Path, share: float) -> Path:
    """The file cut after `share` of its bytes (a broken download or copy)."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * share)])
    return path


def copy_lines(source: Path, path: Path, lines: int) -> Path:
    """The first `lines` lines of `source` (a file cut at a line boundary)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as fh:
        path.write_bytes(b"".join(line for _, line in zip(range(lines), fh, strict=False)))
    return path


def thucnews_zip_members(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()
