"""One measurement point through vLLM's own load generator (`vllm.benchmarks.serve`).

The CPU build's `vllm` console script does not work, so the load generator is called from
Python: `add_cli_args` builds its parser and `main` runs it and returns its result dict. The
result is split into scalar metrics (what the summary tables use) and per-request detail
(generated texts, latencies), kept separately.

Per-request acceptance: a vLLM server started with `--per-request-spec-decode-metrics` (0.32+)
puts each request's speculative-decoding counts in its response's last chunk, under
`metrics.speculative_decoding`, which the load generator's request functions read past.
`run_point` wraps them (`capturing_acceptance`): the stream they read is teed, the chunk that
carries those metrics kept, and the detail gets `spec_decode`, one entry per request (None
where the server reported none).

Conversations (a `chat` prompt set: a system prompt, earlier turns): the load generator's
custom dataset sends each record's `prompt` as one user message; `run_point` sends a record
that carries `messages` as those messages instead (`sending_conversations`: the chat request's
body rewritten on its way out), so that the server applies its chat template to the whole
conversation, as the user's service would. On the completions endpoint the record's `prompt`
(the conversation as role-labelled text) is sent.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import threading
from typing import Any

from sdbench.records import with_latencies

# Per-request lists in the load generator's result (kept as detail, not in the summary)
DETAIL_FIELDS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
                 "queue_times", "generated_texts", "errors", "spec_decode")
# the load generator's request functions whose responses may carry per-request acceptance
SPEC_DECODE_BACKENDS = ("openai", "openai-chat")
CHAT_BACKEND = "openai-chat"
SPEC_DECODE_FIELD = '"speculative_decoding"'
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
# lines of the load generator's console output logged when it raises
CONSOLE_TAIL = 20


def loadgen_argv(*, host: str, port: int, served_name: str, tokenizer: str, dataset_path: str,
                 num_prompts: int, concurrency: int | None, settings: dict,
                 shuffle: bool = True, min_tokens: int | None = None,
                 request_rate: float | None = None, burstiness: float = 1.0) -> list[str]:
    """Arguments for `vllm bench serve` for one point: closed loop at `concurrency` (all
    requests at once, at most that many in flight), or open loop at `request_rate` requests
    per second (gamma-distributed arrivals of shape `burstiness`, 1 = Poisson; no cap on
    requests in flight unless `concurrency` is given too).

    shuffle=False sends the prompts in file order; min_tokens forces every output to at least
    that many tokens (with max_tokens equal, a fixed output length)."""
    if concurrency is None and request_rate is None:
        raise ValueError("a point needs a concurrency or a request rate")
    if request_rate is None:
        load = ["--max-concurrency", str(concurrency), "--request-rate", "inf"]
    else:
        load = [*([] if concurrency is None else ["--max-concurrency", str(concurrency)]),
                "--request-rate", f"{request_rate:g}", "--burstiness", f"{burstiness:g}"]
    if settings["endpoint"] == "chat":
        # the server applies the chat template; the client sends the raw prompt as a message
        endpoint = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                    "--skip-chat-template"]
    else:
        endpoint = ["--backend", "openai", "--endpoint", "/v1/completions"]
    percentiles = ",".join(f"{p:g}" for p in settings["percentiles"])
    return [
        *endpoint,
        "--host", host, "--port", str(port),
        "--model", tokenizer, "--served-model-name", served_name, "--tokenizer", tokenizer,
        # -1: each prompt's own `output_tokens` (the load generator's default is 256 for all)
        "--dataset-name", "custom", "--dataset-path", dataset_path, "--custom-output-len", "-1",
        "--num-prompts", str(num_prompts), *load,
        "--temperature", f"{settings['temperature']:g}",
        "--seed", str(settings["seed"]),
        "--num-warmups", str(settings["num_warmups"]),
        "--ready-check-timeout-sec", str(settings["ready_check_timeout_s"]),
        "--percentile-metrics", PERCENTILE_METRICS, "--metric-percentiles", percentiles,
        "--save-detailed", "--disable-tqdm",
        *([] if shuffle else ["--disable-shuffle"]),
        # fixed output lengths: every request generates its prompt's `output_tokens`
        *(["--ignore-eos"] if settings.get("ignore_eos") else []),
        *(["--extra-body", json.dumps(body)] if (body := request_body(settings, min_tokens))
          else []),
    ]


def request_body(settings: dict, min_tokens: int | None) -> dict:
    """What every request of the point adds to its body: `min_tokens` (fixed output lengths
    without ignore_eos) and, with `loadgen.request_seed` above temperature 0, the repeat's
    seed as the request's sampling seed."""
    body: dict = {} if min_tokens is None else {"min_tokens": min_tokens}
    seed = request_seed(settings)
    return body if seed is None else {**body, "seed": seed}


def request_seed(settings: dict) -> int | None:
    """The sampling seed every request of the point carries (None: none)."""
    if settings.get("request_seed") and settings.get("temperature"):
        return int(settings["seed"])
    return None


def preload() -> threading.Thread:
    """Import the load generator in the background (call before starting the server): its
    imports take seconds (15 s on a 2-core 2017 EPYC), time the server's start-up can hide."""
    def load() -> None:
        with contextlib.suppress(Exception):  # run_point imports it again and raises there
            from vllm.benchmarks import serve  # noqa: F401

    thread = threading.Thread(target=load, name="sdbench-loadgen-import", daemon=True)
    thread.start()
    return thread


def run_point(argv: list[str], log: io.TextIOBase | None = None,
              debug: bool = False) -> dict[str, Any]:
    """Run vLLM's load generator with `argv` and return its result. Its console output (its
    whole argument namespace, progress and result tables: ~60 lines a point) is kept out of
    `log` unless `debug`, or unless it raises: then its last lines go to `log` before the
    error propagates."""
    from vllm.benchmarks import serve

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM releases keep it in vllm.utils
        from vllm.utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm bench serve")
    serve.add_cli_args(parser)
    args = parser.parse_args(argv)
    sink = log if debug and log is not None else io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), \
                sending_conversations(conversations(getattr(args, "dataset_path", None))), \
                capturing_acceptance() as reported:
            result = serve.main(args)
        return with_acceptance(result, reported)
    except BaseException:
        if log is not None and sink is not log:
            tail = sink.getvalue().splitlines()[-CONSOLE_TAIL:]
            print("\n".join(["load generator output (last lines):", *tail]), file=log,
                  flush=True)
        raise


class _SseTail:
    """Reads a response's server-sent events as they stream past (with the load generator's
    own `StreamedResponseHandler`) and keeps the payload of the last one that carries
    per-request acceptance."""

    def __init__(self) -> None:
        from vllm.benchmarks.lib.endpoint_request_func import StreamedResponseHandler

        self.handler, self.found = StreamedResponseHandler(), None

    def feed(self, chunk: bytes) -> None:
        for message in self.handler.add_chunk(chunk):
            self._read(message)

    def close(self) -> dict | None:
        self._read(self.handler.buffer)
        return self.found

    def _read(self, message: str) -> None:
        for line in message.splitlines():
            if line.startswith("data:") and SPEC_DECODE_FIELD in line:
                with contextlib.suppress(ValueError, AttributeError):
                    found = (json.loads(line[5:]).get("metrics") or {}).get(
                        "speculative_decoding")
                    if found is not None:
                        self.found = found


class _Teed:
    """A stand-in for what a request function touches (the session's `post`, the response,
    its `content.iter_any`) that feeds every chunk it reads to an `_SseTail`; everything
    else is the real object's."""

    def __init__(self, real, tail: _SseTail) -> None:
        self._real, self._tail = real, tail

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def post(self, *args, **kwargs) -> _Teed:
        return _Teed(self._real.post(*args, **kwargs), self._tail)

    async def __aenter__(self) -> _Teed:
        return _Teed(await self._real.__aenter__(), self._tail)

    async def __aexit__(self, *exc):
        return await self._real.__aexit__(*exc)

    @property
    def content(self) -> _Teed:
        return _Teed(self._real.content, self._tail)

    async def iter_any(self):
        async for chunk in self._real.iter_any():
            self._tail.feed(chunk)
            yield chunk


def conversations(path: str | None) -> dict[str, list[dict]]:
    """{prompt: its messages} of the records of a prompt file that carry a conversation."""
    if not path:
        return {}
    found = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if '"messages"' in line:
                record = json.loads(line)
                if record.get("messages"):
                    found[record["prompt"]] = record["messages"]
    return found


class _Rewriting:
    """A stand-in for the request function's session whose `post` sends `messages` as the
    chat request's messages; everything else is the real session's."""

    def __init__(self, real, messages: list[dict]) -> None:
        self._real, self._messages = real, messages

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def post(self, *args, json: dict | None = None, **kwargs):
        return self._real.post(*args, json={**(json or {}), "messages": self._messages},
                               **kwargs)


@contextlib.contextmanager
def sending_conversations(found: dict[str, list[dict]]):
    """While open, the load generator's chat request function sends a prompt that is in
    `found` as its messages (`conversations`)."""
    if not found:
        yield
        return
    from vllm.benchmarks.lib import endpoint_request_func as functions

    original = functions.ASYNC_REQUEST_FUNCS.get(CHAT_BACKEND)
    if original is None:
        yield
        return

    async def request(request_func_input, session, pbar=None):
        messages = found.get(request_func_input.prompt)
        return await original(request_func_input=request_func_input,
                              session=session if messages is None
                              else _Rewriting(session, messages), pbar=pbar)

    functions.ASYNC_REQUEST_FUNCS[CHAT_BACKEND] = request
    try:
        yield
    finally:
        functions.ASYNC_REQUEST_FUNCS[CHAT_BACKEND] = original


@contextlib.contextmanager
def capturing_acceptance():
    """While open, the load generator's OpenAI request functions also keep each response's
    per-request acceptance: yields {request start time: metrics} (the start time the load
    generator records for the request, `start_times` in its result)."""
    from vllm.benchmarks.lib import endpoint_request_func as functions

    reported: dict[float, dict] = {}
    originals = {name: functions.ASYNC_REQUEST_FUNCS[name] for name in SPEC_DECODE_BACKENDS
                 if name in functions.ASYNC_REQUEST_FUNCS}

    def wrap(inner):
        async def request(request_func_input, session, pbar=None):
            tail = _SseTail()
            output = await inner(request_func_input=request_func_input,
                                 session=_Teed(session, tail), pbar=pbar)
            if (found := tail.close()) is not None:
                reported[output.start_time] = found
            return output
        return request

    functions.ASYNC_REQUEST_FUNCS.update({name: wrap(f) for name, f in originals.items()})
    try:
        yield reported
    finally:
        functions.ASYNC_REQUEST_FUNCS.update(originals)


def with_acceptance(result: dict[str, Any], reported: dict[float, dict]) -> dict[str, Any]:
    """The load generator's result with `spec_decode` (each request's acceptance, in its
    order; None for a request the server reported none for) where the server reported any."""
    starts = result.get("start_times")
    if not reported or not starts:
        return result
    return {**result, "spec_decode": [reported.get(start) for start in starts]}


def split_result(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list]]:
    """(scalar metrics, per-request detail). Non-finite floats become None (valid JSON)."""
    detail = with_latencies({k: result[k] for k in DETAIL_FIELDS if k in result})
    metrics: dict[str, Any] = {}
    for key, value in result.items():
        if key in detail:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        metrics[key] = value
    return metrics, detail


def prompt_file_facts(path: str) -> tuple[int, set]:
    """(number of prompts, the set of their `min_tokens` values; {None} when unset).

    Raises ValueError naming the file and line of a record the load generator cannot read."""
    count, min_tokens = 0, set()
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a valid JSON line ({exc})") from exc
            if not isinstance(record, dict) or not isinstance(record.get("prompt"), str) \
                    or not isinstance(record.get("output_tokens"), int):
                raise ValueError(f"{path}:{lineno}: a prompt record needs a string `prompt` "
                                 "and an integer `output_tokens`")
            count += 1
            min_tokens.add(record.get("min_tokens"))
    return count, min_tokens
