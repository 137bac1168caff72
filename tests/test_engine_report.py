"""What the engine really ran: the settings vLLM resolved, read from its log, in every record,
and pairs whose servers resolved other settings than speculation flagged in one sentence."""

import pandas as pd

from sdbench.analyze import engine
from sdbench.analyze.aggregate import add_speedups, records_frame
from sdbench.analyze.point_intervals import aggregate_points
from sdbench.measure import engine_report
from sdbench.report.point_tables import effective_engine_table, points_table
from sdbench.report.show import ENGINE_MARK, speedup_text

from helpers import record

# lines as vLLM 0.26 (CUDA) writes them for a dynamic-K server (config line shortened)
GPU_LOG = """\
### sdbench: starting python -m vllm.entrypoints.openai.api_server --model m
(APIServer pid=11) WARNING 11-23 10:00:01 [vllm.py:1051] Dynamic speculative decoding changes \
the target verification length at runtime. Overriding cudagraph_mode from FULL_AND_PIECEWISE \
to PIECEWISE for reliability. Use VLLM_USE_V2_MODEL_RUNNER=1 for full CUDA graphs.
(APIServer pid=11) INFO 11-23 10:00:01 [scheduler.py:308] Chunked prefill is enabled with \
max_num_batched_tokens=8192.
(EngineCore pid=12) INFO 11-23 10:00:05 [core.py:133] Initializing a V1 LLM engine (v0.26.0) \
with config: model='m', speculative_config=SpeculativeConfig(method='draft_model', \
model='d', num_spec_tokens=4), tokenizer='m', dtype=torch.bfloat16, max_seq_len=4096, \
quantization=None, enforce_eager=False, kv_cache_dtype=auto, enable_prefix_caching=False, \
enable_chunked_prefill=True, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, \
'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>, 'cudagraph_capture_sizes': [1, 2, 4, 8, 512]}
(EngineCore pid=12) INFO 11-23 10:00:06 [cuda.py:507] Using FLASH_ATTN attention backend out \
of potential backends: ['FLASH_ATTN', 'FLASHINFER'].
(EngineCore pid=12) INFO 11-23 10:00:30 [gpu_worker.py:760] Available KV cache memory: \
55.12 GiB
(EngineCore pid=12) INFO 11-23 10:00:30 [kv_cache_utils.py:2328] GPU KV cache size: 1,003,776 \
tokens, Maximum concurrency for 4,096 tokens per request: 245.06x
(EngineCore pid=12) WARNING 11-23 10:00:31 [vllm.py:1051] Dynamic speculative decoding changes \
the target verification length at runtime. Overriding cudagraph_mode from FULL_AND_PIECEWISE \
to PIECEWISE for reliability. Use VLLM_USE_V2_MODEL_RUNNER=1 for full CUDA graphs.
(EngineCore pid=12) WARNING 11-23 10:00:31 [topk.py:9] min_p and logit_bias parameters won't \
work with speculative decoding.
(APIServer pid=11) INFO:     Application startup complete.
"""


def test_the_log_gives_what_vllm_resolved_and_its_performance_warnings(tmp_path):
    log = tmp_path / "server.log"
    earlier = "(EngineCore pid=1) INFO 11-23 09:00:00 [core.py:133] Initializing a V1 LLM " \
              "engine (v0.26.0) with config: model='m', dtype=torch.float16\n"
    log.write_text(earlier + GPU_LOG)
    found = engine_report.read_log(log, since=len(earlier))  # this start's part only
    settings = found["settings"]
    assert settings == {
        "max_num_batched_tokens": 8192, "vllm_version": "0.26.0", "dtype": "bfloat16",
        "max_model_len": 4096, "quantization": None, "enforce_eager": False,
        "kv_cache_dtype": "auto", "prefix_caching": False, "chunked_prefill": True,
        "compilation_mode": "VLLM_COMPILE", "cudagraph_mode": "PIECEWISE",
        "cudagraph_capture_sizes": {"count": 5, "max": 512},
        "speculative": {"method": "draft_model", "model": "d", "num_spec_tokens": 4},
        "attention_backend": "FLASH_ATTN", "kv_cache_gib": 55.12, "kv_cache_tokens": 1003776}
    # the override once (both processes say it), no pid, time or source; an unrelated
    # warning left out
    assert found["warnings"] == [
        "Dynamic speculative decoding changes the target verification length at runtime. "
        "Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability. Use "
        "VLLM_USE_V2_MODEL_RUNNER=1 for full CUDA graphs."]
    assert found["sources"] == ["server log"]
    # a long warning is cut; a log that cannot be read says so, and gives no settings
    long = engine_report.normalize_warning("falls back " + "x" * 500)
    assert len(long) == engine_report.WARNING_CHARS and long.endswith("…")
    missing = engine_report.read_log(tmp_path / "none.log")
    assert missing["settings"] == {} and "could not be read" in missing["error"]


def test_a_cpu_log_gives_the_kv_cache_and_the_turned_off_scheduling():
    text = "\n".join([
        "(APIServer pid=8979) WARNING 11-26 10:57:47 [vllm.py:1605] Async scheduling not "
        "supported with ngram-based speculative decoding and will be disabled.",
        "(APIServer pid=8979) WARNING 11-26 10:57:47 [vllm.py:725] Model Runner V2 requires "
        "Triton; using the V1 model runner instead.",
        "(EngineCore pid=9125) INFO 11-26 10:58:20 [cpu_worker.py:260] Explicitly set "
        "(1.0/23.54) GiB for KV cache on node 0.",
        "(EngineCore pid=9125) INFO 11-26 10:58:20 [kv_cache_utils.py:2327] CPU KV cache size: "
        "23,296 tokens, Maximum concurrency for 4,096 tokens per request: 5.69x"])
    found = engine_report.parse_log(text)
    assert found["settings"] == {"async_scheduling_off": True, "model_runner": "V1",
                                 "kv_cache_gib": 1.0, "kv_cache_tokens": 23296}
    assert len(found["warnings"]) == 2


BASE = {"cudagraph_mode": "FULL_AND_PIECEWISE", "attention_backend": "FLASH_ATTN",
        "kv_cache_tokens": 1_000_000, "dtype": "bfloat16", "vllm_version": "0.26.0"}


def test_differences_beyond_speculation_make_one_sentence():
    same = {**BASE, "kv_cache_tokens": 980_000, "speculative": {"method": "ngram"}}
    assert engine.differences(same, BASE) is None  # a KV cache within 5 %, the spec config
    assert engine.differences({**BASE, "cudagraph_mode": "PIECEWISE"}, BASE) == (
        "speculation switched CUDA graphs from FULL_AND_PIECEWISE to PIECEWISE on this server")
    several = engine.differences({**BASE, "cudagraph_mode": "PIECEWISE",
                                  "async_scheduling_off": True, "kv_cache_tokens": 600_000},
                                 BASE)
    assert several == ("speculation switched CUDA graphs from FULL_AND_PIECEWISE to PIECEWISE, "
                       "turned asynchronous scheduling off and shrank the KV cache by 40 % "
                       "(in tokens) on this server")
    # two instances of one baseline whose caches differ by a few blocks: the same sentence
    assert engine.differences({**BASE, "kv_cache_tokens": 884_144},
                              {**BASE, "kv_cache_tokens": 993_328}) == engine.differences(
        {**BASE, "kv_cache_tokens": 884_144}, {**BASE, "kv_cache_tokens": 994_256})
    # a setting only one side's log states is not compared (never guessed); unknown: None
    assert engine.differences({**BASE, "model_runner": "V2"}, BASE) is None
    assert engine.differences(BASE, None) is None


def _with_engine(settings, warnings=(), **kwargs):
    return record(**kwargs, server={"engine": {"settings": settings, "warnings":
                                               list(warnings), "sources": ["server log"]}})


def test_the_summary_and_the_report_flag_a_pair_that_ran_differently():
    records = [
        _with_engine(BASE, cell_id="v", method="vanilla", concurrency=1, throughput=100.0),
        _with_engine(BASE, cell_id="v", method="vanilla", concurrency=1, throughput=102.0,
                     repeat=1),
        *[_with_engine({**BASE, "cudagraph_mode": "PIECEWISE"}, ["Overriding cudagraph_mode"],
                       cell_id="s", method="draft_model", k=4, concurrency=1,
                       throughput=150.0 + r, baseline="v", repeat=r) for r in (0, 1)],
        *[_with_engine(BASE, cell_id="n", method="ngram", k=2, concurrency=1,
                       throughput=120.0 + r, baseline="v", repeat=r) for r in (0, 1)],
    ]
    frame = add_speedups(records_frame(records))
    flagged = frame.set_index(["cell_id", "repeat"])["engine_differs"]
    sentence = ("speculation switched CUDA graphs from FULL_AND_PIECEWISE to PIECEWISE on this "
                "server")
    assert flagged[("s", 0)] == flagged[("s", 1)] == sentence
    assert flagged[[("n", 0), ("v", 0)]].isna().all()
    assert frame["paired"][frame["cell_id"] != "v"].all()  # flagged, still paired
    assert frame.set_index(["cell_id", "repeat"])["engine_warnings"][("s", 0)] == \
        '["Overriding cudagraph_mode"]'
    points = aggregate_points(frame).set_index("cell_id")
    assert points.loc["s", "engine_differs"] == sentence
    assert points.loc[["v", "n"], "engine_differs"].isna().all()
    assert speedup_text(points.loc["s"]).endswith(ENGINE_MARK)
    assert not speedup_text(points.loc["n"]).endswith(ENGINE_MARK)
    table = points_table(points.reset_index()).set_index("cell")
    assert table.loc["s", "engine differs"] == sentence
    # what each configuration's engine ran: its settings, warnings and the difference, one
    # row a server configuration (the workloads it served listed, not its cells' ids)
    ran = effective_engine_table(frame).set_index("method")
    assert ran.loc["draft_model", "CUDA graphs"] == "PIECEWISE"
    assert ran.loc["vanilla", "CUDA graphs"] == "FULL_AND_PIECEWISE"
    assert ran.loc["draft_model", "attention"] == "FLASH_ATTN"
    assert ran.loc["draft_model", "KV tokens"] == "1,000,000"
    assert ran.loc["draft_model", "differs from its baseline"] == sentence
    assert ran.loc["ngram", "differs from its baseline"] == "–"
    assert ran.loc["draft_model", "performance warnings"] == "Overriding cudagraph_mode"
    assert "cell" not in ran and ran.loc["ngram", "workloads served"] == "w"
    # the same configuration on a second workload: still one row, both workloads listed
    again = frame[frame["cell_id"] == "n"].assign(cell_id="n2", workload="w2")
    twice = effective_engine_table(pd.concat([frame, again]))
    assert (twice["method"] == "ngram").sum() == 1
    assert twice.set_index("method").loc["ngram", "workloads served"] == "w, w2"
    assert "model runner" not in ran  # no log said: no column
    # records without the engine's report (written before it existed): nothing flagged
    plain = add_speedups(records_frame([
        record("v", "vanilla", 1, 100.0), record("s", "ngram", 1, 150.0, baseline="v", k=2)]))
    assert plain["engine_differs"].isna().all() and plain["paired"].all()
    assert plain["engine_settings"].isna().all() and plain["engine_warnings"].isna().all()
    assert effective_engine_table(plain).empty
