"""SLO goodput from per-request latencies (sdbench.analyze.slo), held to hand-made latencies
and to vLLM's own goodput (`vllm.benchmarks.serve.calculate_metrics`)."""

import numpy as np
import pytest

from sdbench.analyze.aggregate import add_speedups, records_frame
from sdbench.analyze.point_intervals import aggregate_points
from sdbench.analyze.slo import SLO, good_requests, goodput, slos_of, with_slo_columns
from tests.helpers import record

# four requests of 11 output tokens (TPOT = (E2EL - TTFT) / 10), one failed
DETAIL = {"output_lens": [11, 11, 11, 0, 1],
          "ttfts": [0.10, 0.30, 0.10, 0.0, 0.05],
          "latencies": [0.60, 0.80, 1.60, 0.0, 0.05],
          "errors": ["", "", "", "timeout", ""]}
# TTFT ≤ 200 ms and TPOT ≤ 60 ms: request 0 (100 ms, 50 ms) yes; 1 (300 ms) no; 2 (TPOT
# 150 ms) no; 3 failed; 4 one token (TPOT 0 as vLLM counts it, TTFT 50 ms) yes
CHAT = SLO("chat", {"ttft_ms": 200, "tpot_ms": 60}, 50)


def test_good_requests_by_hand():
    assert good_requests(DETAIL, CHAT).tolist() == [True, False, False, False, True]
    assert good_requests(DETAIL, SLO("e2e", {"e2el_ms": 1000})).tolist() == [
        True, True, False, False, True]


def test_goodput_by_hand():
    result = goodput(DETAIL, 2.0, CHAT)
    assert result["goodput"] == pytest.approx(2 / 2.0)
    assert result["goodput_tokens"] == pytest.approx((11 + 1) / 2.0)
    assert result["slo_attainment"] == pytest.approx(2 / 5)


def test_goodput_equals_vllms_own():
    """The same requests through vLLM's load generator's metrics give the same goodput."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
    from vllm.benchmarks.serve import calculate_metrics

    outputs = [RequestFuncOutput(success=not err, latency=lat, ttft=ttft, output_tokens=n,
                                 prompt_len=5, error=err, itl=[])
               for n, ttft, lat, err in zip(DETAIL["output_lens"], DETAIL["ttfts"],
                                            DETAIL["latencies"], DETAIL["errors"], strict=True)]
    for slo in (CHAT, SLO("e2e", {"e2el_ms": 1000}), SLO("ttft", {"ttft_ms": 100})):
        config = {key.removesuffix("_ms"): value for key, value in slo.limits.items()}
        metrics, _ = calculate_metrics([], outputs, 2.0, None, [50.0], config)
        assert goodput(DETAIL, 2.0, slo)["goodput"] == pytest.approx(metrics.request_goodput)


def test_an_slo_needs_a_limit():
    with pytest.raises(ValueError, match="slo.bad: names no limit"):
        slos_of({"bad": {"percentile": 90}})
    assert slos_of({"a": {"tpot_ms": 50}})[0].describe() == "TPOT ≤ 50 ms for 90 % of requests"


def _detail(tpot_s, n=4, outputs=11):
    return {"output_lens": [outputs] * n, "ttfts": [0.1] * n,
            "latencies": [0.1 + tpot_s * (outputs - 1)] * n, "errors": [""] * n}


def test_points_carry_goodput_gain_and_whether_they_meet_the_slo():
    """Speculation halves TPOT: every request meets a 60 ms TPOT target with it, none without:
    the gain is undefined (no baseline request within it) at c=1 where the baseline misses,
    and 2 where both meet it."""
    slo = SLO("chat", {"tpot_ms": 60}, 90)
    rows, details = [], {"base": {}, "ng": {}}
    for r in range(3):
        for concurrency, base_tpot in ((1, 0.05), (8, 0.08)):
            rows.append(record("base", "vanilla", concurrency, 100.0, repeat=r,
                               metrics={"duration": 2.0}))
            rows.append(record("ng", "ngram", concurrency, 150.0, baseline="base", k=2,
                               repeat=r, metrics={"duration": 1.0}))
            details["base"][(concurrency, None, r)] = _detail(base_tpot)
            details["ng"][(concurrency, None, r)] = _detail(base_tpot / 2)
    frame = with_slo_columns(add_speedups(records_frame(rows)), _keyed(details), [slo])
    points = aggregate_points(frame).set_index(["cell_id", "concurrency"])
    assert points.loc[("ng", 1), "goodput_gain_chat_mean"] == pytest.approx(2.0)
    assert points.loc[("ng", 1), "goodput_gain_chat_ci_low"] == pytest.approx(2.0)
    assert points.loc[("base", 1), "slo_meets_chat"]
    assert not points.loc[("base", 8), "slo_meets_chat"]
    assert points.loc[("ng", 8), "slo_meets_chat"]
    assert np.isnan(points.loc[("ng", 8), "goodput_gain_chat_mean"])
    assert points.loc[("ng", 8), "goodput_tokens_chat_mean"] == pytest.approx(44.0)
    # the goodput figure's finding: how far each setting carries the target
    from sdbench.report.front import goodput_finding

    assert goodput_finding(points.reset_index()) == (
        "SLO chat on w (t) is met by no speculation up to concurrency 1; ngram k=2 up to "
        "concurrency 8.")
    # an engine that times no first token (offline, Transformers): no goodput, not an error
    untimed = {cell: {key: {k: v for k, v in d.items() if k != "ttfts"}
                      for key, d in points_.items()} for cell, points_ in _keyed(details).items()}
    frame = with_slo_columns(add_speedups(records_frame(rows)), untimed, [slo])
    assert frame["goodput_chat"].isna().all()


def _keyed(details):
    from sdbench.records import LoadPoint

    return {cell: {LoadPoint.of(c, rate, r).key: d for (c, rate, r), d in points.items()}
            for cell, points in details.items()}
