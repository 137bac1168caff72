"""`make plan` figures quoted in README.md and docs/, written from what the command prints.

A quoted excerpt is an indented block right after a marker line

    <!-- make plan CONFIG=<config> (python -m sdbench.plan.excerpts writes this block) -->

whose lines are lines of that plan's output (leading spaces kept). `python -m
sdbench.plan.excerpts` replaces each line with the output's line that begins the same way (its
text up to the first digit), so the numbers are always the command's; `stale` lists the quoted
lines the command no longer prints (the tests run it).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from functools import cache
from pathlib import Path

from sdbench.plan.config import load_config
from sdbench.plan.cost import format_plan
from sdbench.plan.estimate import plan_cost

REPO = Path(__file__).resolve().parents[3]
MARKER = re.compile(r"^<!-- make plan CONFIG=(\S+) \(python -m sdbench\.plan\.excerpts writes "
                    r"this block\) -->$")
INDENT = "    "


@cache
def plan_output(config_path: str, root: str) -> tuple[str, ...]:
    """The lines `make plan CONFIG=<config_path>` prints (for a checkout without built prompt
    sets or measured starts: `root`)."""
    config = load_config(REPO / config_path)
    device = config["plan"]["device"]
    result = plan_cost(config, device, root)
    return tuple(format_plan(result, config_path, config).splitlines())


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(text: str):
    """(config, index of each quoted line) of every marked excerpt in `text`'s lines."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if not match:
            continue
        j, quoted = i + 1, []
        while j < len(lines) and (lines[j].startswith(INDENT) or not lines[j].strip()):
            if lines[j].strip():
                quoted.append(j)
            elif quoted:
                break
            j += 1
        yield match.group(1), quoted


def _prefix(line: str) -> str:
    return re.split(r"\d", line, maxsplit=1)[0]


def rewrite(text: str, root: str) -> str:
    lines = text.split("\n")
    for config_path, quoted in blocks(text):
        output = plan_output(config_path, root)
        for j in quoted:
            line = lines[j][len(INDENT):]
            match = next((o for o in output if _prefix(o) == _prefix(line)), None)
            if match is None:
                raise SystemExit(f"no line of make plan CONFIG={config_path} begins like "
                                 f"{line!r}")
            lines[j] = INDENT + match
    return "\n".join(lines)


def stale(root: str) -> list[str]:
    """'<file>:<line>: <quoted line>' for each quoted line the plan no longer prints."""
    out = []
    for path in documents():
        text = path.read_text()
        lines = text.split("\n")
        for config_path, quoted in blocks(text):
            output = set(plan_output(config_path, root))
            out += [f"{path.relative_to(REPO)}:{j + 1}: {lines[j].strip()}" for j in quoted
                    if lines[j][len(INDENT):] not in output]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="an empty working directory (default: "
                        "a temporary one: no built prompt set or measured start is read)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as empty:
        root = args.root or empty
        for path in documents():
            text = path.read_text()
            new = rewrite(text, root)
            if new != text:
                path.write_text(new)
                print(f"wrote {path.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
