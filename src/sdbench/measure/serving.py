"""vLLM server lifecycle: command line, start in its own process group, /health, stop.

The server is started with `python -m vllm.entrypoints.openai.api_server` (works with the CUDA
and the CPU builds; the CPU build's `vllm` console script does not). It runs in a new session,
so its process group holds the API server and every engine-core/worker child; stopping sends
SIGTERM to the whole group, waits, then SIGKILLs whatever is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from sdbench.logcause import error_cause

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
HEALTH_POLL_S = 1.0
BIND_RACE_MARKERS = ("Address already in use", "address already in use", "Errno 98")
# Snakemake sets these to the job's `threads` for every job. Inherited by vLLM they change how it
# threads (on CPU, OMP_NUM_THREADS=2 on a worker bound to one core made decoding 100x slower),
# so the server gets its own defaults unless the config's server.env sets them.
JOB_THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                        "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def job_thread_env() -> dict[str, str]:
    """The thread variables Snakemake set to this job's `threads` (`JOB_THREAD_VARIABLES`), for
    a child that does not thread on its own as vLLM does (the Transformers reference)."""
    return {k: os.environ[k] for k in JOB_THREAD_VARIABLES if k in os.environ}


class ServerError(RuntimeError):
    """The server did not start, did not become ready, or died."""


def format_server_args(args: dict) -> list[str]:
    """{flag_name: value} -> argv. True -> --flag, False -> --no-flag, None -> omitted,
    dict -> JSON, list -> the flag followed by each item."""
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, sort_keys=True)]
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def server_command(model_path: str, served_name: str, host: str, port: int, args: dict,
                   speculative_config: dict | None, python: str = sys.executable) -> list[str]:
    argv = [python, "-m", SERVER_MODULE, "--model", model_path,
            "--served-model-name", served_name, "--host", host, "--port", str(port)]
    argv += format_server_args(args)
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(speculative_config, sort_keys=True)]
    return argv


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the server may still lose a race for it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def log_tail(path: str | Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGTERM the server if the cell process dies without stopping it (SIGKILL, OOM
    killer), so that it does not keep holding the GPU. vLLM stops its engine on SIGTERM."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of a process group (zombies hold no memory and are left to their reaper)."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


class VllmServer:
    """One vLLM server for one cell. Use as a context manager: start + wait ready, then stop."""

    def __init__(self, build_command: Callable[[int], Sequence[str]], *, host: str,
                 log_path: str | Path, env: dict | None = None, startup_timeout_s: float = 900,
                 stop_timeout_s: float = 30, bind_attempts: int = 3,
                 pick_port: Callable[[str], int] = free_port):
        self.build_command = build_command
        self.host = host
        self.log_path = Path(log_path)
        inherited = {k: v for k, v in os.environ.items() if k not in JOB_THREAD_VARIABLES}
        self.env = {**inherited, **(env or {})}
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.bind_attempts = bind_attempts
        self.pick_port = pick_port
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.command: list[str] = []
        self.startup_s: float | None = None
        self.started_at: float | None = None  # Unix time of the (first) launch
        self._launched = 0.0  # monotonic time of `launch`

    @property
    def connect_host(self) -> str:
        """Address clients on this machine use (a wildcard listen address maps to loopback)."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)

    @property
    def url(self) -> str:
        host = self.connect_host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def __enter__(self) -> VllmServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def run_to_completion(self) -> int:
        """For a command that is not a server (offline and Transformers cells): launch it in
        its own process group and wait for it to exit; `stop` still clears its group."""
        self._launch()
        return self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _launch(self) -> None:
        self.port = self.pick_port(self.connect_host)
        self.command = list(self.build_command(self.port))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n### sdbench: starting {' '.join(self.command)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent if sys.platform == "linux"
                                         else None)

    def launch(self) -> None:
        """Launch the server without waiting for it, so that several start side by side (a
        group's servers: `sdbench.measure.cell.run_group`); `start` (or entering the context) then
        waits for it, and its start-up counts from here."""
        self._launched, self.started_at, self.startup_s = time.monotonic(), time.time(), None
        self._launch()

    def start(self) -> None:
        """Start (unless `launch`ed) and wait for /health; retry on a lost port race; raise
        ServerError otherwise. A no-op on a server that is up."""
        if self.alive() and self.startup_s is not None:
            return
        if self.proc is None:
            self.launch()
        for attempt in range(1, self.bind_attempts + 1):
            if attempt > 1:
                self._launch()
            try:
                self._wait_ready(self._launched)
                self.startup_s = time.monotonic() - self._launched
                return
            except ServerError:
                lost_race = (not self.alive() and attempt < self.bind_attempts
                             and any(m in log_tail(self.log_path, 60) for m in BIND_RACE_MARKERS))
                self.stop()
                if not lost_race:
                    raise

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                cause = error_cause(self.log_path) or "no error line in its log"
                raise ServerError(
                    f"vLLM server exited with code {code} during start-up: {cause} (log: "
                    f"{self.log_path})\nCommand: {' '.join(self.command)}\n"
                    f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerError(
                    f"vLLM server not ready after {self.startup_timeout_s:.0f} s (no 200 from "
                    f"{self.url}/health; log: {self.log_path})\nLast lines of "
                    f"{self.log_path}:\n{log_tail(self.log_path)}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=min(HEALTH_POLL_S, remaining))

    def stop(self) -> None:
        """SIGTERM the server's process group, wait, then SIGKILL what is left; reap."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        for sig, grace in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            members = group_members(pgid)
            if not members and self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.2)
                if self.proc.poll() is not None and not group_members(pgid):
                    break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        left = group_members(pgid)
        self.proc = None
        if left:
            raise ServerError(f"processes of the server's group survived SIGKILL: "
                              f"{[p.pid for p in left]}")
