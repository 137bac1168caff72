"""Logging for workflow scripts: everything a job prints goes to its Snakemake log."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def to_log(path: str | Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors too, so that child processes and
    C extensions land there as well) to `path`; an exception is logged before it propagates."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a", buffering=1, encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
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
