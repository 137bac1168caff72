import json
import os
import sys
import time
from pathlib import Path

import pytest

from sdbench.measure.serving import (
    ServerError,
    VllmServer,
    format_server_args,
    free_port,
    group_members,
    server_command,
)

STANDIN = str(Path(__file__).with_name("standin_server.py"))


def standin(mode, **kw):
    def build(port):
        return [sys.executable, STANDIN, "--port", str(port), "--mode", mode,
                *[f"--{k}={v}" for k, v in kw.items()]]
    return build


def test_format_server_args():
    argv = format_server_args({"max_model_len": 2048, "enforce_eager": True,
                               "enable_chunked_prefill": False, "quantization": None,
                               "override_generation_config": {"b": 1, "a": 2}})
    assert argv == ["--max-model-len", "2048", "--enforce-eager", "--no-enable-chunked-prefill",
                    "--override-generation-config", '{"a": 2, "b": 1}']


def test_server_command_carries_the_speculative_config():
    argv = server_command("m/dir", "target", "127.0.0.1", 8123, {"seed": 0},
                          {"method": "ngram", "num_speculative_tokens": 2}, python="py")
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--port") + 1] == "8123"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "ngram", "num_speculative_tokens": 2}
    assert "--speculative-config" not in server_command("m", "t", "h", 1, {}, None)


def test_ready_server_and_its_children_are_stopped(tmp_path):
    server = VllmServer(standin("ready"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        startup_timeout_s=30, stop_timeout_s=2)
    with server:
        pgid = server.proc.pid
        assert server.alive() and server.startup_s is not None
        assert len(group_members(pgid)) >= 2  # the server and its SIGTERM-proof child
    assert group_members(pgid) == []
    assert "mode ready" in (tmp_path / "s.log").read_text()


def test_servers_launched_together_start_side_by_side(tmp_path):
    # a group's servers (sdbench.measure.cell.run_group): launched at once, then waited for; each
    # start-up counts from its launch, and entering the context of a started one starts nothing
    servers = [VllmServer(standin("solo", delay=2), host="127.0.0.1",
                          log_path=tmp_path / f"s{i}.log", startup_timeout_s=30, stop_timeout_s=2)
               for i in range(2)]
    began = time.monotonic()
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.start()
        assert time.monotonic() - began < 2 * 2  # the two 2 s delays overlapped
        assert all(s.startup_s >= 2 and s.started_at is not None for s in servers)
        pid = servers[0].proc.pid
        with servers[0] as same:
            assert same.proc.pid == pid and same.alive()
        assert servers[0].proc is None  # leaving the context stopped it
    finally:
        for server in servers:
            server.stop()
    for i in range(2):
        assert (tmp_path / f"s{i}.log").read_text().count("### sdbench: starting") == 1


def test_a_launched_server_that_dies_fails_its_start(tmp_path):
    server = VllmServer(standin("crash"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        startup_timeout_s=30)
    server.launch()
    with pytest.raises(ServerError, match="exited with code 1 during start-up"):
        server.start()
    assert server.proc is None


def test_sigterm_proof_server_is_killed(tmp_path):
    server = VllmServer(standin("ignore-term"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        startup_timeout_s=30, stop_timeout_s=1)
    with server:
        pgid = server.proc.pid
    assert group_members(pgid) == []


def test_early_exit_fails_with_the_log_tail(tmp_path):
    server = VllmServer(standin("crash"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        startup_timeout_s=30)
    with pytest.raises(ServerError) as info, server:
        pass
    assert "exited with code 1 during start-up" in str(info.value)
    assert "unrecognized argument --bogus" in str(info.value)


def test_deadline_fails_and_leaves_no_process(tmp_path):
    server = VllmServer(standin("hang"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        startup_timeout_s=2, stop_timeout_s=1)
    with pytest.raises(ServerError, match="not ready after 2 s") as info:
        server.start()
    assert "mode hang" in str(info.value)
    assert server.proc is None
    assert not [p for p in _python_children() if STANDIN in " ".join(p.cmdline())]


def test_lost_port_race_is_retried_then_reported(tmp_path):
    server = VllmServer(standin("busy-port"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        startup_timeout_s=30, bind_attempts=3)
    with pytest.raises(ServerError, match="Address already in use"):
        server.start()
    assert (tmp_path / "s.log").read_text().count("### sdbench: starting") == 3


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _python_children():
    import psutil

    return psutil.Process(os.getpid()).children(recursive=True)


def test_snakemake_job_thread_variables_do_not_reach_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    server = VllmServer(standin("ready"), host="127.0.0.1", log_path=tmp_path / "s.log")
    assert "OMP_NUM_THREADS" not in server.env and "MKL_NUM_THREADS" not in server.env
    assert server.env["PATH"] == os.environ["PATH"]
    server = VllmServer(standin("ready"), host="127.0.0.1", log_path=tmp_path / "s.log",
                        env={"OMP_NUM_THREADS": "1"})
    assert server.env["OMP_NUM_THREADS"] == "1"  # set explicitly in server.env: kept


def test_server_stops_when_the_cell_process_is_killed(tmp_path):
    """SIGKILL (or the OOM killer) gives the cell no chance to stop its server: the server must
    not outlive it (it would keep holding the GPU)."""
    import signal
    import subprocess
    import time

    import psutil

    holder = tmp_path / "holder.py"
    holder.write_text(f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from sdbench.measure.serving import VllmServer
from test_serving import standin
server = VllmServer(standin("solo"), host="127.0.0.1", log_path={str(tmp_path / "s.log")!r})
server.start()
open({str(tmp_path / "pid")!r}, "w").write(str(server.proc.pid))
time.sleep(600)
""")
    cell = subprocess.Popen([sys.executable, str(holder)], env={**os.environ,
                            "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists():
        assert time.monotonic() < deadline and cell.poll() is None
        time.sleep(0.2)
    server_pid = int((tmp_path / "pid").read_text())
    assert psutil.pid_exists(server_pid)
    cell.send_signal(signal.SIGKILL)
    cell.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(server_pid) and psutil.Process(server_pid).status() != "zombie":
        assert time.monotonic() < deadline, "the server outlived the killed cell process"
        time.sleep(0.2)


def test_the_transformers_reference_keeps_the_job_s_threads_and_vllm_s_engine_does_not(
        monkeypatch):
    """Snakemake sets OMP_NUM_THREADS to a job's `threads`; vLLM threads for itself, but the
    Transformers reference's torch would take every core (beside another cell on shared cores
    it measured 10x slower): its child keeps the job's value, the offline engine's does not."""
    from types import SimpleNamespace

    from sdbench.measure.engine_cells import child_env
    from sdbench.measure.slots import Slots
    from sdbench.plan import specs

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    held = Slots(gpu_ids=[3], reason="test")

    def env_of(engine: str, env: dict) -> dict:
        return child_env(SimpleNamespace(engine=engine, server_config={"env": env}), held)

    reference = env_of(specs.TRANSFORMERS, {})
    assert reference["OMP_NUM_THREADS"] == "1" and reference["MKL_NUM_THREADS"] == "1"
    assert reference["CUDA_VISIBLE_DEVICES"] == "3"
    offline = env_of(specs.OFFLINE, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert "OMP_NUM_THREADS" not in offline and "MKL_NUM_THREADS" not in offline
    assert offline["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    # a server.env that sets the variable itself keeps it
    assert env_of(specs.OFFLINE, {"OMP_NUM_THREADS": "2"})["OMP_NUM_THREADS"] == "2"
