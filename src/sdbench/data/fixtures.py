"""Demo/CI fixtures in the real schemas of the study's sources, made from text on the machine.

No hub is reachable on the demo and CI machines, so the project writes its own raw files with
the exact layout of Spec-Bench's `question.jsonl`, CNN-DailyMail's rows, ShareGPT's JSON list
and the official THUCNews.zip. English text comes from the docstrings of Python's standard
library (present wherever Python is), Chinese text from the docstrings of `connection_pool`
(installed with Snakemake). The same processing code then turns them into prompt sets, exactly
as it does with the real files. Output depends only on `rows`, `seed` and the installed versions
(recorded in the manifest).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import json
import random
import re
import sys
import zipfile
from pathlib import Path

# Modules whose documentation is the fixture text (stable, present in every CPython).
MODULES = (
    "json", "textwrap", "difflib", "heapq", "bisect", "statistics", "fractions", "decimal",
    "csv", "argparse", "collections", "functools", "itertools", "pathlib", "shutil", "string",
    "random", "datetime", "calendar", "zipfile", "tarfile", "gzip", "sqlite3", "logging",
    "unittest", "dataclasses", "enum", "contextlib", "threading", "queue",
    "subprocess", "socket", "struct", "weakref", "copy", "pprint", "re", "glob", "fnmatch",
    "tempfile", "inspect", "operator", "math", "hashlib", "hmac", "secrets", "base64",
    "uuid", "ipaddress", "html", "configparser", "shlex", "locale", "gettext", "codecs",
    "urllib.parse", "http.client", "email.message", "xml.dom.minidom",
)

MT_BENCH_CATEGORIES = (
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
)
TASK_CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _clean(text: str) -> str:
    return " ".join(text.split())


def _first_sentence(text: str) -> str:
    return _SENTENCE_END.split(_clean(text), maxsplit=1)[0]


def module_docs() -> list[dict]:
    """[{module, summary, paragraphs, functions: [(name, doc)]}] for every usable module."""
    docs = []
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # pragma: no cover - a CPython without e.g. sqlite3
            continue
        summary = _clean(inspect.getdoc(module) or "")
        functions = []
        for attr in sorted(dir(module)):
            if attr.startswith("_"):
                continue
            obj = getattr(module, attr)
            if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
                continue
            if getattr(obj, "__module__", name) not in (name, None) and not inspect.isbuiltin(obj):
                continue
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 40:
                functions.append((attr, doc))
        paragraphs = [_clean(p) for p in (inspect.getdoc(module) or "").split("\n\n")]
        paragraphs += [_clean(doc) for _, doc in functions]
        paragraphs = [p for p in paragraphs
                      if len(p.split()) >= 8 and ">>>" not in p and not p.startswith("$")]
        if summary and len(functions) >= 3 and len(paragraphs) >= 4:
            docs.append({"module": name, "summary": _first_sentence(summary),
                         "paragraphs": paragraphs, "functions": functions})
    return docs


def _conversation_turns(category: str, doc: dict, rng: random.Random) -> list[str]:
    mod, summary = doc["module"], doc["summary"]
    fn, fn_doc = rng.choice(doc["functions"])
    para = rng.choice(doc["paragraphs"])
    if category == "writing":
        return [f"Write a short blog post that introduces Python's `{mod}` module to beginners. "
                f"Its documentation says: {summary}",
                "Rewrite your previous response in the form of a limerick."]
    if category == "roleplay":
        return [f"Pretend you are the maintainer of Python's `{mod}` module. Explain to a new "
                f"contributor what `{fn}` is for. Its documentation says: "
                f"{_first_sentence(fn_doc)}",
                "Now reply, still in character, to a user who says the module is useless."]
    if category == "reasoning":
        names = [f for f, _ in rng.sample(doc["functions"], 3)]
        return [f"A list holds the names {names[0]}, {names[1]} and {names[2]} in this order. "
                "You move the last name to the front, then swap the last two. What is the order "
                "now? Explain each step.",
                "How many moves would sort the original list alphabetically?"]
    if category == "math":
        x, y, z = rng.randint(12, 99), rng.randint(3, 19), rng.randint(100, 999)
        return [f"Compute {x} * {y} + {z}. Show your steps.",
                f"Now divide the result by {rng.randint(2, 9)} and round to two decimals."]
    if category == "coding":
        return [f"Write a Python function that uses `{mod}.{fn}`. The documentation of `{fn}` "
                f"says: {_first_sentence(fn_doc)}",
                "Add a unit test for your function using unittest."]
    if category == "extraction":
        return ["Extract every Python name that appears in the following text and return them as "
                f"a JSON list: {para}",
                "Now sort the list alphabetically and remove duplicates."]
    if category == "stem":
        return [f"Explain in simple terms what this means: {_first_sentence(fn_doc)}",
                "Give an everyday analogy for it."]
    return [f"Discuss how documentation such as the following helps people learn to program: "
            f"{summary}",
            "Summarize your answer in one sentence."]


def spec_bench_rows(rows_per_group: int = 12, seed: int = 0) -> list[dict]:
    """Spec-Bench `question.jsonl` rows: question_id, category, turns (+ reference where known).

    `rows_per_group` rows for each of the 6 task groups; the conversation group (MT-bench) cycles
    through its 8 categories and has 2 turns per row, like the real file.
    """
    rng = random.Random(seed)
    docs = module_docs()
    out: list[dict] = []
    qid = 1

    def add(category: str, turns: list[str], reference: list[str] | None = None) -> None:
        nonlocal qid
        row = {"question_id": qid, "category": category, "turns": turns}
        if reference is not None:
            row["reference"] = reference
        out.append(row)
        qid += 1

    for i in range(rows_per_group):
        category = MT_BENCH_CATEGORIES[i % len(MT_BENCH_CATEGORIES)]
        add(category, _conversation_turns(category, docs[i % len(docs)], rng))
    for i in range(rows_per_group):
        sentence = _first_sentence(rng.choice(docs[(i * 7) % len(docs)]["paragraphs"]))
        add("translation", [f"Translate English to German: {sentence}"])
    for i in range(rows_per_group):
        doc = docs[(i * 3) % len(docs)]
        text = " ".join(doc["paragraphs"][:6])
        add("summarization", [f"Summarize: {text}"], [doc["summary"]])
    for i in range(rows_per_group):
        doc = docs[(i * 5 + 1) % len(docs)]
        fn, fn_doc = rng.choice(doc["functions"])
        add("qa", [f"What does `{doc['module']}.{fn}` do in Python?"], [_first_sentence(fn_doc)])
    for _ in range(rows_per_group):
        a, b, c, d = (rng.randint(50, 500), rng.randint(2, 9), rng.randint(6, 24),
                      rng.randint(5, 40))
        answer = a + b * c - d
        add("math_reasoning",
            [f"A library has {a} books. It buys {b} boxes with {c} books in each box and then "
             f"gives away {d} books. How many books does the library have now?"],
            [f"It buys {b}*{c}={b * c} books, so it has {a}+{b * c}-{d}={answer}.\n#### {answer}"])
    for i in range(rows_per_group):
        doc = docs[(i * 11 + 2) % len(docs)]
        fn, fn_doc = rng.choice(doc["functions"])
        context = " ".join(doc["paragraphs"][:3] + [_clean(fn_doc)])
        add("rag", [f"{context}\n\nBased on the text above, what does `{fn}` do?"],
            [_first_sentence(fn_doc)])
    return out


def _length_ladder(rows: int, low: float, high: float, rng: random.Random) -> list[int]:
    """`rows` lengths spread evenly on a log scale from `low` to `high`, in a seeded order:
    every length bucket between them gets texts, whatever `rows` is."""
    if rows == 1:
        return [int(low)]
    lengths = [int(low * (high / low) ** (i / (rows - 1))) for i in range(rows)]
    rng.shuffle(lengths)
    return lengths


def cnn_dailymail_rows(rows: int = 12, seed: int = 0) -> list[dict]:
    """CNN-DailyMail rows (`article`, `highlights`, `id`) whose articles are module docs, from
    ~60 to ~2,400 words, whole paragraphs each."""
    rng = random.Random(seed)
    docs = module_docs()
    pool = [p for doc in docs for p in doc["paragraphs"]]
    out = []
    for i, words in enumerate(_length_ladder(rows, 60, 2400, rng)):
        doc = docs[i % len(docs)]
        paragraphs, count, j = [], 0, rng.randrange(len(pool))
        while count < words:
            paragraphs.append(pool[j % len(pool)])
            count += len(paragraphs[-1].split())
            j += 1
        article = f"({doc['module'].upper()}) -- " + "\n\n".join(paragraphs)
        highlights = "\n".join(_first_sentence(p) for p in paragraphs[:3])
        ident = hashlib.sha1(f"sdbench-fixture:{doc['module']}:{i}".encode()).hexdigest()
        out.append({"article": article, "highlights": highlights, "id": ident})
    return out


def sharegpt_items(rows: int = 12, seed: int = 0) -> list[dict]:
    """ShareGPT conversations ({id, conversations: [{from, value}]}) about stdlib functions."""
    rng = random.Random(seed)
    docs = module_docs()
    out = []
    for i in range(rows):
        doc = docs[(i * 13 + 5) % len(docs)]
        fn, fn_doc = rng.choice(doc["functions"])
        question = rng.choice([
            f"What does `{doc['module']}.{fn}` do?",
            f"Explain `{doc['module']}.{fn}` with an example.",
            f"I am new to Python. When would I use `{fn}` from the `{doc['module']}` module?",
        ])
        answer = _clean(fn_doc) + " " + " ".join(doc["paragraphs"][: 1 + i % 4])
        turns = [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]
        if i % 3 == 0:
            turns += [{"from": "human", "value": "Thanks! Can you shorten that?"},
                      {"from": "gpt", "value": _first_sentence(fn_doc)}]
        out.append({"id": hashlib.sha1(f"sdbench-sharegpt:{i}".encode()).hexdigest()[:8],
                    "conversations": turns})
    return out


THUCNEWS_CATEGORIES = ("体育", "财经", "科技", "教育", "时政", "娱乐")


def chinese_clauses() -> list[str]:
    """Chinese clauses from the docstrings of `connection_pool` (a Snakemake dependency)."""
    module = importlib.import_module("connection_pool")
    texts = []
    for obj in vars(module).values():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            texts.append(inspect.getdoc(obj) or "")
            if inspect.isclass(obj):
                texts += [inspect.getdoc(m) or "" for m in vars(obj).values() if callable(m)]
    clauses = []
    for text in texts:
        for part in re.split(r"[，。；！？,\n]", text):
            part = re.sub(r"^\w+:\s+", "", part.strip()).rstrip("：:，,")
            if len(re.findall(r"[\u4e00-\u9fff]", part)) >= 4 and part not in clauses:
                clauses.append(part)
    return clauses


def thucnews_items(rows: int = 12, seed: int = 0) -> list[dict]:
    """News items (category, title, body) in Chinese, for the THUCNews.zip layout: bodies of
    ~15 to ~3,000 characters."""
    rng = random.Random(seed)
    clauses = chinese_clauses()
    items = []
    for i, chars in enumerate(_length_ladder(rows, 15, 3000, rng)):
        title = rng.choice(clauses)
        sentences, count = [], 0
        while count < chars:
            sentences.append("，".join(rng.sample(clauses, rng.randint(2, 4))) + "。")
            count += len(sentences[-1])
        paragraphs = ["".join(sentences[j:j + 3]) for j in range(0, len(sentences), 3)]
        items.append({"category": THUCNEWS_CATEGORIES[i % len(THUCNEWS_CATEGORIES)],
                      "title": title, "body": "\n".join(paragraphs), "n": i})
    return items


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")


def write_fixture(source: str, path: str | Path, rows: int, seed: int) -> None:
    """Write the fixture of `source` to `path` in the source's real file format."""
    path = Path(path)
    if source == "spec_bench":
        _write_jsonl(path, spec_bench_rows(rows, seed))
    elif source == "cnn_dailymail":
        _write_jsonl(path, cnn_dailymail_rows(rows, seed))
    elif source == "sharegpt":
        path.write_text(json.dumps(sharegpt_items(rows, seed), ensure_ascii=False, indent=1),
                        encoding="utf-8")
    elif source == "thucnews":
        # fixed timestamps: the same rows give the same bytes
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for item in thucnews_items(rows, seed):
                info = zipfile.ZipInfo(f"THUCNews/{item['category']}/{item['n']}.txt",
                                       date_time=(2020, 1, 1, 0, 0, 0))
                archive.writestr(info, f"{item['title']}\n{item['body']}\n")
    else:
        raise ValueError(f"no fixture for source {source!r}")


def origin() -> dict:
    return {"generator": "sdbench.data.fixtures",
            "text": "docstrings of CPython's standard library and of connection_pool",
            "python": sys.version.split()[0],
            "connection_pool": importlib.metadata.version("connection_pool")}
