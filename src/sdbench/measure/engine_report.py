"""What the engine really ran: the settings vLLM resolved, read from its own reports.

A server is asked for some settings (the config's server arguments) and resolves the rest, and
it may override what it was asked: dynamic speculative decoding switches vLLM's CUDA-graph mode
from FULL_AND_PIECEWISE to PIECEWISE ("Overriding cudagraph_mode ... for reliability"),
n-gram speculation turns asynchronous scheduling off, a missing kernel falls back to another.
Two servers that differ only in speculation in the config may then differ in more than that.

After a server is ready, `read_log` reads the part of its log written since it was launched:

- the engine's configuration line (`Initializing a V1 LLM engine (v…) with config: …`, vLLM's
  `VllmConfig.__str__`): vLLM version, dtype, quantization, KV-cache dtype, `enforce_eager`,
  chunked prefill, prefix caching, the speculative config as resolved, and from its
  `compilation_config` the compilation mode, CUDA-graph mode and capture sizes;
- `Chunked prefill is enabled with max_num_batched_tokens=N` (the scheduler's token budget);
- the KV cache (`GPU KV cache size: N tokens`, `Available KV cache memory: X GiB`, on CPU
  `Explicitly set (X/…) GiB for KV cache`);
- the attention backend where vLLM names it (`Using FLASH_ATTN attention backend out of …`,
  `Using … backend.`; vLLM's CPU build names none for dense models);
- the model runner (`Using V2 Model Runner`, or a fallback to the V1 runner);
- `async_scheduling_off` where vLLM says it turned asynchronous scheduling off (it says nothing
  when it is on);
- `engine_fixes`: the fixes sdbench's vLLM plugin applied to this engine's known faults
  (`sdbench engine fix: <name> …`, `sdbench.measure.vllm_fixes`), their names comma-joined;
- every warning that can change performance (overrides, downgrades, fallbacks, "not
  supported", "disabling", "suboptimal", "performance"), as short normalized lines: no process
  id, time or source line, whitespace collapsed, at most `WARNING_CHARS` characters, each once.

Settings the log does not state are absent (never guessed); `sources` says what was read.
"""

from __future__ import annotations

import re
from pathlib import Path

from sdbench.measure.vllm_fixes import LOG_MARK

WARNING_CHARS = 240
_PERFORMANCE = re.compile(
    r"overrid|downgrad|fall(?:ing)?[ -]?back|not supported|unsupported|disabl|suboptimal|"
    r"performance|instead|slower", re.I)
_PREFIX = re.compile(r"^\(\w+ pid=\d+\)\s+")
_LEVEL = re.compile(r"^(?:\(\w+ pid=\d+\)\s+)?(INFO|WARNING|ERROR|DEBUG)\s+\d\d-\d\d "
                    r"\d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s+(.*)$")
_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\) with config: (.*)$")
_URL = re.compile(r"https?://\S+")


def _flag(text: str) -> bool:
    return text == "True"


def _value(text: str):
    """A value of a repr: a quoted string, None, an integer or the text as it is."""
    text = text.strip()
    if text == "None":
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text.strip("'")


def parse_config(text: str) -> dict:
    """The settings in vLLM's configuration line (`VllmConfig.__str__`)."""
    out: dict = {}
    patterns = {
        "dtype": (r"\bdtype=(?:torch\.)?(\w+)", str),
        "max_model_len": (r"\bmax_seq_len=(\d+)", int),
        "quantization": (r"\bquantization=(\w+)", str),
        "kv_cache_dtype": (r"\bkv_cache_dtype=(\w+)", str),
        "enforce_eager": (r"\benforce_eager=(True|False)", _flag),
        "prefix_caching": (r"\benable_prefix_caching=(True|False)", _flag),
        "chunked_prefill": (r"\benable_chunked_prefill=(True|False)", _flag),
        "tensor_parallel_size": (r"\btensor_parallel_size=(\d+)", int),
        "compilation_mode": (r"'mode': <CompilationMode\.(\w+)", str),
        "cudagraph_mode": (r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", str),
    }
    for key, (pattern, cast) in patterns.items():
        match = re.search(pattern, text)
        if match:
            out[key] = cast(match.group(1))
    if out.get("quantization") == "None":
        out["quantization"] = None
    sizes = re.search(r"'cudagraph_capture_sizes': \[([\d, ]*)\]", text)
    if sizes:
        values = [int(v) for v in sizes.group(1).replace(" ", "").split(",") if v]
        out["cudagraph_capture_sizes"] = {"count": len(values),
                                          "max": max(values) if values else None}
    spec = re.search(r"speculative_config=(SpeculativeConfig\((.*?)\)|None)", text)
    if spec and spec.group(2) is not None:
        fields = dict(re.findall(r"(\w+)=('[^']*'|[^,]+)", spec.group(2)))
        out["speculative"] = {k: _value(v) for k, v in fields.items()}
    elif spec:
        out["speculative"] = None
    return out


def normalize_warning(message: str) -> str:
    """One warning as a short line: no URL, whitespace collapsed, cut at WARNING_CHARS."""
    text = " ".join(_URL.sub("<url>", message).split())
    return text if len(text) <= WARNING_CHARS else text[:WARNING_CHARS - 1] + "…"


def parse_log(text: str) -> dict:
    """The effective settings and the performance warnings in a server log's text (the part
    written by one start of the server)."""
    settings: dict = {}
    warnings: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        level = _LEVEL.match(line)
        message = level.group(2) if level else _PREFIX.sub("", line)
        config = _CONFIG.search(message)
        if config:
            settings["vllm_version"] = config.group(1)
            settings.update(parse_config(config.group(2)))
            continue
        if level and level.group(1) == "WARNING" and _PERFORMANCE.search(message):
            short = normalize_warning(message)
            if short not in warnings:
                warnings.append(short)
        for pattern, apply in _FACTS:
            match = re.search(pattern, message)
            if match:
                apply(settings, match)
    return {"settings": settings, "warnings": warnings, "sources": ["server log"]}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


_FACTS = [
    (r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)",
     lambda s, m: s.update(max_num_batched_tokens=int(m.group(1)))),
    (r"(?:GPU|CPU|XPU|TPU) KV cache size: ([\d,]+) tokens",
     lambda s, m: s.update(kv_cache_tokens=int(_number(m.group(1))))),
    (r"Available KV cache memory: ([\d.]+) GiB",
     lambda s, m: s.update(kv_cache_gib=_number(m.group(1)))),
    (r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache",
     lambda s, m: s.update(kv_cache_gib=_number(m.group(1)))),
    (r"Using (\w+) attention backend", lambda s, m: s.update(attention_backend=m.group(1))),
    (r"^Using (\w+) backend\.$", lambda s, m: s.setdefault("attention_backend", m.group(1))),
    (r"Using V2 Model Runner", lambda s, m: s.update(model_runner="V2")),
    (r"using the V1 model runner|Using V1 Model Runner",
     lambda s, m: s.update(model_runner="V1")),
    # vLLM says so only when it turns asynchronous scheduling off (not when it is on, nor when
    # the server's arguments turned it off)
    (r"Async scheduling (?:is )?not (?:supported|compatible)|"
     r"Async scheduling (?:will be |is )?disabled",
     lambda s, m: s.update(async_scheduling_off=True)),
    (r"Overriding cudagraph_mode (?:from )?(?:\w+ )?to (\w+)",
     lambda s, m: s.update(cudagraph_mode=m.group(1))),
    # each process of the engine loads the plugin and says it once: names kept once, sorted
    (re.escape(LOG_MARK) + r" (\w+)",
     lambda s, m: s.update(engine_fixes=",".join(sorted(
         {*filter(None, s.get("engine_fixes", "").split(",")), m.group(1)})))),
]


def read_log(path: str | Path, since: int = 0) -> dict:
    """`parse_log` of the log from byte `since` (where this start of the server began)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(since)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return {"settings": {}, "warnings": [], "sources": [],
                "error": f"the server log could not be read: {exc}"}
    return parse_log(text)
