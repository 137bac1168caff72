"""The cause of a failure, read from a log: the exception (or error line) that stopped a vLLM
server, an engine child or a workflow job, not the log's last lines.

vLLM prints the root cause first: a worker's exception, then the engine's and the API
server's consequences ("Engine core initialization failed. See root cause above", an
EngineDeadError), then, at shutdown, lines that say nothing about it (e.g. nanobind leak
warnings). So for a server log the cause is the first exception of the run (the section after
sdbench's last "### sdbench: starting" line, or after a given byte offset) that is not such a
consequence; for a job log, whose runs are appended, it is the last one.
"""

from __future__ import annotations

import re
from pathlib import Path

START_MARKER = "### sdbench: starting"
MAX_BYTES = 4 * 1024 * 1024
MAX_CHARS = 400
# "(EngineCore pid=2654) " / "(APIServer pid=1) " before a process's lines, then vLLM's logger
# prefix "ERROR 11-23 03:23:11 [multiproc_executor.py:1063] " (tracebacks are logged with it)
_PREFIX = re.compile(r"^\((?:[\w.-]+ )?pid=\d+\)\s?")
_LOGGER = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:.]+ \[[^\]]+\] ")
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b(?::.*)?$")
_ARGPARSE = re.compile(r"^[\w./-]+: error: .+")
# consequences of an earlier error, not causes
_CONSEQUENCES = ("See root cause above", "root cause above", "check the stack trace above",
                 "EngineDeadError", "EngineCore encountered an issue",
                 "Engine core initialization failed", "BrokenPipeError", "KeyboardInterrupt",
                 "CancelledError", "SystemExit")


def _strip(line: str) -> tuple[str, str | None]:
    """(the line without process and logger prefixes, its logger level if any)."""
    line = _PREFIX.sub("", line.rstrip())
    match = _LOGGER.match(line)
    return (line[match.end():], match.group(1)) if match else (line, None)


def first_line(message: str) -> str:
    """The first non-empty line of a message."""
    return next((line.strip() for line in message.splitlines() if line.strip()), "")


def causes(text: str) -> list[str]:
    """Every exception line of the tracebacks in `text` (with up to two continuation lines of
    its message), and argparse error lines, in order."""
    lines = [_strip(line)[0] for line in text.splitlines()]
    found: list[str] = []
    in_traceback = False
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if _ARGPARSE.match(line):
            found.append(line)
            continue
        if not in_traceback or not line or line[0].isspace():
            continue
        if _EXCEPTION.match(line):
            parts = [line]
            for follow in lines[i + 1:i + 3]:  # e.g. pydantic's indented "Value error, ..."
                if not follow.startswith("  ") or follow.strip().startswith(("File ", "^")):
                    break
                parts.append(follow.strip())
            found.append(" ".join(parts))
            in_traceback = False
    return found


def cause_of(text: str, last: bool = False) -> str | None:
    """The cause in a log text (see module doc), at most MAX_CHARS long; None if none."""
    found = causes(text)
    relevant = [c for c in found if not any(m in c for m in _CONSEQUENCES)] or found
    if not relevant:  # no traceback: an error the logger printed
        relevant = [line for line, level in map(_strip, text.splitlines())
                    if level in ("ERROR", "CRITICAL") and line.strip()]
    if not relevant:
        return None
    cause = relevant[-1] if last else relevant[0]
    return cause if len(cause) <= MAX_CHARS else cause[:MAX_CHARS - 1] + "…"


def read_log(path: str | Path, since: int | None = None) -> str:
    """A log's text from byte `since` (default: its last sdbench run section); '' if absent."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            start = since if since is not None else max(0, size - MAX_BYTES)
            fh.seek(min(start, size))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    if since is None and START_MARKER in text:
        text = text[text.rindex(START_MARKER):]
    return text


def error_cause(path: str | Path, since: int | None = None) -> str | None:
    """The cause of a server's or engine child's failure, from its log."""
    return cause_of(read_log(path, since))


def job_cause(path: str | Path) -> str | None:
    """The cause of a workflow job's failure, from its log (the last error in it)."""
    return cause_of(read_log(path), last=True)
