"""The cause of a failure is read from the log: the exception that stopped the server (not its
consequences, not the shutdown noise after it), an argparse error, or a job's last error.
The log excerpts keep the shape of real vLLM 0.32 CPU logs (process and logger prefixes)."""

from sdbench.logcause import cause_of, error_cause, first_line, job_cause

W = "(Worker pid=4615) ERROR 11-23 03:23:11 [multiproc_executor.py:1063] "
E = "(EngineCore pid=4592) ERROR 11-23 03:23:11 [core.py:1512] "
A = "(APIServer pid=4567) ERROR 11-23 03:23:11 [async_llm.py:906] "
# a GPTQ server on an AVX2 CPU: the worker's AttributeError, then what follows from it, then
# shutdown noise
INT4_ON_AVX2 = "\n".join([
    "### sdbench: starting python -m vllm.entrypoints.openai.api_server --model m",
    "(APIServer pid=4567) WARNING 11-23 03:22:25 [system_utils.py:255] Found ulimit of 20000 "
    "... `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
    "(APIServer pid=4567) INFO:     127.0.0.1:40000 - \"POST /v1/chat/completions HTTP/1.1\"",
    W + "WorkerProc hit an exception.",
    W + "Traceback (most recent call last):",
    W + '  File "vllm/v1/executor/multiproc_executor.py", line 1055, in _execute_worker_rpc',
    W + "    output = func(*args, **kwargs)",
    W + "             ^^^^^^^^^^^^^^^^^^^^^",
    W + '  File "torch/_ops.py", line 1365, in __getattr__',
    W + "    raise AttributeError(",
    W + "AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'",
    E + "Traceback (most recent call last):",
    E + '  File "vllm/v1/engine/core.py", line 1500, in run_engine_core',
    E + "    raise RuntimeError(",
    E + "RuntimeError: Worker failed with error ''_OpNamespace' '_C' object has no attribute "
    "'cpu_gemm_wna16'', please check the stack trace above for the root cause",
    A + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
    "trace (above) for the root cause.",
    "nanobind: leaked 12 instances!",
    "nanobind: leaked 3 types!",
])
STARTUP = "\n".join([
    "### sdbench: starting python -m vllm.entrypoints.openai.api_server --dtype float32",
    "Traceback (most recent call last):",
    '  File "pydantic/_internal/_dataclasses.py", line 121, in __init__',
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
    "  Value error, torch.float32 is not supported for quantization method auto_gptq. "
    "Supported dtypes: [torch.float16, torch.bfloat16] [type=value_error]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
])


def test_the_root_cause_not_its_consequences(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(INT4_ON_AVX2 + "\n")
    assert error_cause(log) == ("AttributeError: '_OpNamespace' '_C' object has no attribute "
                                "'cpu_gemm_wna16'")


def test_continuation_lines_of_the_message_are_kept():
    cause = cause_of(STARTUP)
    assert cause.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error")
    assert "torch.float32 is not supported for quantization method auto_gptq" in cause


def test_only_the_last_server_run_or_the_point_counts(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(STARTUP + "\n" + INT4_ON_AVX2 + "\n")
    assert "cpu_gemm_wna16" in error_cause(log)  # the section of the last start
    offset = log.stat().st_size
    with open(log, "a") as fh:
        fh.write("(APIServer pid=1) INFO 11-23 03:25:00 [api.py:1] all good\n")
    assert error_cause(log, since=offset) is None  # nothing went wrong during that point


def test_argparse_errors_and_logged_errors():
    assert cause_of("usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: "
                    "--no-such-vllm-flag 1\n") == (
        "api_server.py: error: unrecognized arguments: --no-such-vllm-flag 1")
    assert cause_of("(EngineCore pid=9) INFO 11-23 03:23:11 [core.py:1] ready\n"
                    "(EngineCore pid=9) ERROR 11-23 03:23:12 [core.py:2] EngineCore failed to "
                    "start.\n") == "EngineCore failed to start."
    assert cause_of("INFO 11-23 03:23:11 [core.py:1] ready\nnanobind: leaked 2 types!\n") is None


def test_a_jobs_last_error_and_missing_logs(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "ValueError: first run\n"
                   "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "sdbench.data.sources.SourceError: data/raw/x.jsonl: line 3 is not JSON\n")
    assert job_cause(log) == (
        "sdbench.data.sources.SourceError: data/raw/x.jsonl: line 3 is not JSON")
    assert job_cause(tmp_path / "absent.log") is None
    assert first_line("\n  one\ntwo") == "one"
