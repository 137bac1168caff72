"""Optional Nsight Systems profiles of a cell's server (`profile: nsys` on a method).

The server is started under `nsys launch` (an interactive session: the application runs, nothing
is collected yet); around each point the session runs `nsys start` / `nsys stop` on it, so
every point gets its own report, named after it, under results/profiles/<cell id>/ (CUDA, NVTX
and OS-runtime traces). The load generator runs in the cell's own process, outside the
profiled server, so a point's capture window (not an NVTX range pushed by the client) is what
marks it in the profile.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from sdbench.host import ProfileError, nsys_executable
from sdbench.layout import profile_dir
from sdbench.plan.specs import config_id
from sdbench.records import LoadPoint

NSYS_TRACE = "cuda,nvtx,osrt"


def session_name(server_config: dict) -> str:
    """The nsys session of a server of this configuration (in this process)."""
    return f"sdbench-{config_id(server_config)}-{os.getpid()}"


def wrap_command(argv: list[str], session: str) -> list[str]:
    """The server command under `nsys launch` (collection starts per point)."""
    return [nsys_executable(), "launch", f"--session-new={session}", f"--trace={NSYS_TRACE}",
            "--wait=all", *argv]


class NsysSession:
    """Per-point captures on a server started by `wrap_command`."""

    def __init__(self, session: str, out_dir: str | Path):
        self.session = session
        self.out_dir = Path(out_dir)

    def report(self, load: dict, repeat: int) -> Path:
        return self.out_dir / f"{LoadPoint.of_load(load, repeat).name}-r{repeat}.nsys-rep"

    def _run(self, *args: str) -> None:
        result = subprocess.run([nsys_executable(), *args, f"--session={self.session}"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise ProfileError(f"nsys {args[0]} --session={self.session} failed "
                               f"({result.returncode}): {(result.stderr or result.stdout)[-500:]}")

    @contextlib.contextmanager
    def capture(self, load: dict, repeat: int) -> Iterator[None]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        report = self.report(load, repeat)
        self._run("start", f"--output={report.with_suffix('')}", "--force-overwrite=true")
        try:
            yield
        finally:
            self._run("stop")


def nsys_session(cell) -> NsysSession:
    """The per-point captures of a cell whose server was wrapped with `wrap_command`: reports
    under the cell's own folder."""
    return NsysSession(session_name(cell.server_config), profile_dir(cell.cell_id))
