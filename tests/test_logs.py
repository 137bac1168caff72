"""Cell logs: one line per point; debug lines only at SDBENCH_LOG_LEVEL=debug."""

import argparse
import io
import sys
import types

import pytest

from sdbench import script_log
from sdbench.measure import loadgen
from sdbench.measure.run import point_line


def test_a_point_is_one_line_with_what_a_user_needs():
    metrics = {"output_throughput": 366.04, "total_token_throughput": 1270.3, "completed": 64,
               "failed": 0, "spec_decode_acceptance_length": 4.871,
               "spec_decode_acceptance_rate": 96.83}
    line = point_line("concurrency 16, repeat 2", 1, "ok", "", metrics)
    assert "\n" not in line
    assert line == ("concurrency 16, repeat 2, instance 1: ok, 366.0 output tok/s (1270.3 total), "
                    "acceptance length 4.87 (96.8 %), 64 completed, 0 failed")
    vanilla = point_line("rate 2/s, repeat 0", 0, "invalid", "3 of 4 requests failed",
                         {"completed": 1, "failed": 3, "output_throughput": None})
    assert vanilla == ("rate 2/s, repeat 0, instance 0: invalid (3 of 4 requests failed), n/a "
                       "output tok/s (n/a total), 1 completed, 3 failed")


def test_log_level_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(script_log.LOG_LEVEL_ENV, raising=False)
    assert not script_log.debug_enabled()
    monkeypatch.setenv(script_log.LOG_LEVEL_ENV, "DEBUG")
    assert script_log.debug_enabled()
    monkeypatch.setenv(script_log.LOG_LEVEL_ENV, "verbose")
    with pytest.raises(ValueError, match="SDBENCH_LOG_LEVEL = 'verbose' is not one of info, debug"):
        script_log.debug_enabled()


def _stand_in_load_generator(monkeypatch) -> None:
    """vLLM's `vllm.benchmarks.serve` and its argument parser, as modules of their own: the
    test is about what reaches the log, and importing vLLM takes most of a minute here."""
    def add_cli_args(parser):
        parser.add_argument("--num-prompts", type=int)

    def main(args):
        print(f"Namespace(num_prompts={args.num_prompts})")
        print("============ Serving Benchmark Result ============")
        if args.num_prompts == 13:
            raise ConnectionError("endpoint gone")
        return {"completed": args.num_prompts}

    serve = types.ModuleType("vllm.benchmarks.serve")
    serve.add_cli_args, serve.main = add_cli_args, main
    parsers = types.ModuleType("vllm.utils.argparse_utils")
    parsers.FlexibleArgumentParser = argparse.ArgumentParser
    # the request functions the workflow wraps (none here: run alone, the test does not
    # depend on an earlier test having imported the real ones)
    functions = types.ModuleType("vllm.benchmarks.lib.endpoint_request_func")
    functions.ASYNC_REQUEST_FUNCS = {}
    lib = types.ModuleType("vllm.benchmarks.lib")
    lib.endpoint_request_func = functions
    modules = {"vllm": types.ModuleType("vllm"), "vllm.benchmarks": types.ModuleType("b"),
               "vllm.benchmarks.serve": serve, "vllm.benchmarks.lib": lib,
               "vllm.benchmarks.lib.endpoint_request_func": functions,
               "vllm.utils": types.ModuleType("u"), "vllm.utils.argparse_utils": parsers}
    modules["vllm.benchmarks"].serve = serve
    modules["vllm.benchmarks"].lib = lib
    modules["vllm.utils"].argparse_utils = parsers
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_the_load_generator_console_stays_out_of_the_log_unless_it_fails(monkeypatch):
    """Its ~60 lines a point (argument namespace, result tables) go nowhere; when it raises,
    its last lines go to the log; at debug level all of it does."""
    _stand_in_load_generator(monkeypatch)
    log = io.StringIO()
    assert loadgen.run_point(["--num-prompts", "4"], log=log) == {"completed": 4}
    assert log.getvalue() == ""
    with pytest.raises(ConnectionError):
        loadgen.run_point(["--num-prompts", "13"], log=log)
    assert log.getvalue().splitlines() == [
        "load generator output (last lines):", "Namespace(num_prompts=13)",
        "============ Serving Benchmark Result ============"]
    debug_log = io.StringIO()
    loadgen.run_point(["--num-prompts", "5"], log=debug_log, debug=True)
    assert "Namespace(num_prompts=5)" in debug_log.getvalue()
