"""Logging for workflow scripts: everything a job prints goes to its Snakemake log; the console
gets what the user must see (a summary line, or one line saying why the job failed)."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from sdbench.logcause import first_line

LOG_LEVEL_ENV = "SDBENCH_LOG_LEVEL"
LOG_LEVELS = ("info", "debug")


def debug_enabled() -> bool:
    """Whether logs get their debug lines (SDBENCH_LOG_LEVEL=debug: e.g. the load generator's
    whole argument list and console output); the default, info, keeps one line per point."""
    level = os.environ.get(LOG_LEVEL_ENV, "info").strip().lower() or "info"
    if level not in LOG_LEVELS:
        raise ValueError(f"{LOG_LEVEL_ENV} = {level!r} is not one of {', '.join(LOG_LEVELS)}")
    return level == "debug"


def failure_line(exc: BaseException) -> str:
    """The error as one line: the project's own errors by their message (it names the key, file
    or value), anything else with its type, as Python would print it."""
    message = str(exc).strip()
    if not type(exc).__module__.startswith("sdbench"):
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return first_line(message)


@contextlib.contextmanager
def to_log(path: str | Path) -> Iterator[Callable[[str], None]]:
    """Send this process's stdout and stderr (file descriptors too, so that child processes and
    C extensions land there as well) to `path`. Yields `say(line)`, which writes a line to the
    log and to the console. An exception is logged with its traceback; the console gets one
    line (the error, and where the traceback is) and the process exits with status 1."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)

    def say(line: str) -> None:
        print(line, flush=True)
        os.write(saved[1], f"sdbench: {line}\n".encode())

    failed = None
    with open(path, "a", buffering=1, encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield say
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            failed = exc
        except BaseException:
            traceback.print_exc(file=sys.stderr)
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
    if failed is not None:
        print(f"error: {failure_line(failed)} (traceback: {path})", file=sys.stderr, flush=True)
        raise SystemExit(1)
