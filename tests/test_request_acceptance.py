"""Per-request acceptance: kept from vLLM's responses by the load generator's own request
function, binned by output position, summed back to the engine's counters."""

import asyncio
import json

import aiohttp
import numpy as np
import pandas as pd
import pytest
from aiohttp import web

from sdbench.analyze import request_acceptance as ra
from sdbench.measure import loadgen
from sdbench.measure.server import PER_REQUEST_ACCEPTANCE, reporting_args
from sdbench.plan.checks import VllmFeatures
from sdbench.report import request_plots


def _metrics(accepted: list[int], k: int) -> dict:
    """vLLM's `metrics.speculative_decoding` for steps that accepted these counts (`detailed`)."""
    histogram = [accepted.count(j) for j in range(k + 1)]
    return {"mean_acceptance_length": 1 + sum(accepted) / len(accepted),
            "draft_acceptance_rate": sum(accepted) / (k * len(accepted)),
            "acceptance_histogram": histogram, "num_spec_steps": len(accepted),
            "num_accepted_draft_tokens": sum(accepted), "num_draft_tokens": k * len(accepted),
            "num_spec_tokens": k, "per_step_accepted": accepted,
            "per_step_drafted": [k] * len(accepted)}


def _stream(text_chunks: list[str], metrics: dict | None, split: int) -> list[bytes]:
    """A completions stream as vLLM sends it (a chunk per token, then the usage chunk that
    carries the request's metrics, then [DONE]), cut into pieces of `split` bytes."""
    events = [{"choices": [{"index": 0, "text": t}]} for t in text_chunks]
    last = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": len(text_chunks)}}
    if metrics is not None:
        last["metrics"] = {"speculative_decoding": metrics}
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in [*events, last])
    body += b"data: [DONE]\n\n"
    return [body[i:i + split] for i in range(0, len(body), split)]


@pytest.mark.parametrize("split", [7, 64, 100_000])
def test_vllm_s_own_request_function_keeps_each_response_s_acceptance(split):
    """The real load-generator request function (vLLM's `openai` backend), its stream teed:
    every request's metrics come back under its start time, wherever the bytes were cut; a
    response without them gives none, and the function's own result is unchanged."""
    from vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS, RequestFuncInput

    answers = {"a": _metrics([3, 3, 0, 2], 3), "b": None}

    async def completions(request):
        prompt = (await request.json())["prompt"]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in _stream(["x", "y", "z"], answers[prompt], split):
            await response.write(piece)
        await response.write_eof()
        return response

    async def scenario():
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        original = ASYNC_REQUEST_FUNCS["openai"]
        try:
            with loadgen.capturing_acceptance() as reported:
                assert ASYNC_REQUEST_FUNCS["openai"] is not original
                async with aiohttp.ClientSession() as session:
                    outputs = [await ASYNC_REQUEST_FUNCS["openai"](
                        request_func_input=RequestFuncInput(
                            prompt=p, api_url=f"http://127.0.0.1:{port}/v1/completions",
                            prompt_len=1, output_len=3, model="m"), session=session)
                        for p in answers]
            assert ASYNC_REQUEST_FUNCS["openai"] is original  # put back
        finally:
            await runner.cleanup()
        return outputs, reported

    outputs, reported = asyncio.run(scenario())
    assert [o.success for o in outputs] == [True, True]
    assert [o.generated_text for o in outputs] == ["xyz", "xyz"]
    assert outputs[0].output_tokens == 3
    assert reported == {outputs[0].start_time: answers["a"]}
    result = loadgen.with_acceptance({"start_times": [o.start_time for o in outputs]}, reported)
    assert result["spec_decode"] == [answers["a"], None]
    assert "spec_decode" not in loadgen.with_acceptance({"start_times": [1.0]}, {})
    metrics, detail = loadgen.split_result({**result, "duration": 1.0})
    assert detail["spec_decode"] == result["spec_decode"] and "spec_decode" not in metrics


def test_a_speculative_server_reports_per_request_acceptance_where_vllm_can():
    has = VllmFeatures("0.32.0", frozenset(), frozenset(), frozenset({PER_REQUEST_ACCEPTANCE}))
    lacks = VllmFeatures("0.26.0", frozenset(), frozenset(), frozenset({"dtype"}))
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    assert reporting_args({"dtype": "bfloat16"}, spec, has) == {
        "dtype": "bfloat16", PER_REQUEST_ACCEPTANCE: "detailed"}
    assert reporting_args({}, spec, lacks) == {}
    assert reporting_args({}, None, has) == {}  # vLLM refuses it without speculation
    assert reporting_args({PER_REQUEST_ACCEPTANCE: "none"}, spec, has) == {
        PER_REQUEST_ACCEPTANCE: "none"}


def test_steps_fall_in_the_bin_of_their_first_output_token():
    # the prefill gives token 0; steps accepting 3 of 3 start at 1, 5, 9, 13 (bin 0–15),
    # then 17 (bin 16–31)
    bins = ra.position_bins([3, 3, 3, 3, 3, 0], [3] * 6)
    assert bins == [(0, 16, 4, 12, 12), (16, 32, 2, 6, 3)]
    # summary level: one row over the whole output
    summary = {k: v for k, v in _metrics([1, 2], 3).items() if not k.startswith("per_step")}
    assert ra.request_bins(summary) == [(0, None, 2, 6, 3)]


def _frame_and_table(rng) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two runs of a setting over prompts of two task groups, group "a" accepting more, and
    the summary rows with the engine's counters as the run's sums."""
    rows, frame = [], []
    for repeat in (0, 1):
        entries, buckets = [], []
        for i in range(40):
            group = "a" if i < 20 else "b"
            p = 0.8 if group == "a" else 0.3
            steps = [int(x) for x in rng.binomial(3, p, size=int(rng.integers(5, 60)))]
            entries.append(_metrics(steps, 3))
            buckets.append(group)
        row = {"round": "round1", "cell_id": "c1", "engine": "serve", "load": "concurrency",
               "setting": "s", "speculator": "draft", "method": "draft_model", "k": 3,
               "target": "t", "workload": "w", "concurrency": 4, "request_rate": np.nan,
               "repeat": repeat, "temperature": 0.0, "role": "deployable",
               "spec_options": "{}"}
        detail = {"spec_decode": entries, "input_lens": list(range(10, 50)),
                  "output_lens": [1 + sum(e["per_step_accepted"]) + len(e["per_step_accepted"])
                                  for e in entries], "errors": [""] * 40}
        rows += ra.acceptance_rows(row, detail, buckets)
        frame.append({**row, "spec_decode_draft_tokens": sum(e["num_draft_tokens"]
                                                             for e in entries),
                      "spec_decode_accepted_tokens": sum(e["num_accepted_draft_tokens"]
                                                         for e in entries)})
    return pd.DataFrame(frame), ra.as_frame(rows)


def test_per_request_rows_add_up_to_each_request_and_to_the_engine_s_counters():
    frame, table = _frame_and_table(np.random.default_rng(1))
    requests = ra.per_request(table)
    assert len(requests) == 80
    # each request's bins sum back to what its response said
    assert (requests["steps"] * 3 == requests["drafted"]).all()
    groups = ra.group_table(table).set_index("bucket")
    assert list(groups["requests"]) == [40, 40] and list(groups["runs"]) == [2, 2]
    assert groups.loc["a", "acceptance_length"] > groups.loc["b", "acceptance_length"] + 1
    assert (groups["p10"] <= groups["median"]).all() and (groups["median"] <= groups["p90"]).all()
    check = ra.counter_check(table, frame)
    assert len(check) == 2 and check["agrees"].all()
    # a run whose requests miss accepted tokens the counters saw is flagged
    frame.loc[0, "spec_decode_accepted_tokens"] += 100
    assert list(ra.counter_check(table, frame)["agrees"]) == [False, True]
    assert "Off in 1" in request_plots.counter_note(table, frame)
    # a run that drafted nothing (a dynamic-K schedule at k = 0): no counters, nothing to add up
    none = table.assign(drafted=0, accepted=0)
    empty = frame.assign(spec_decode_draft_tokens=np.nan, spec_decode_accepted_tokens=np.nan)
    assert ra.counter_check(none, empty)["agrees"].all()
    positions = ra.position_table(table)
    assert positions["steps"].sum() == requests["steps"].sum()
    assert positions["position_from"].is_monotonic_increasing


def test_the_section_says_when_vllm_reports_nothing():
    summary = pd.DataFrame({"method": ["ngram"], "engine": ["serve"], "vllm_version": ["0.26.0"]})
    assert "not reported by vLLM 0.26.0" in request_plots.not_reported(summary)
    frame, table = _frame_and_table(np.random.default_rng(2))
    shown = request_plots.group_table(table)
    assert list(shown["task group / bucket"]) == ["a", "b"]
    assert shown["setting"].iloc[0] == "draft k=3"
    fig = request_plots.acceptance_plot(table)
    assert len(fig.axes) == 2 and "prompt length" in fig.axes[0].get_title()
