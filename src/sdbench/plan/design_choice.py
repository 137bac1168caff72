"""`adaptive.chain: auto`: the adaptive design the plan projects cheaper for this study (chained
or unchained baselines), chosen once per config (kept under .sdbench/design/) and the same for
every parse, `make plan` and the jobs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from sdbench.files import atomic_write_json
from sdbench.ids import short_hash
from sdbench.plan import (
    hostcaps,
    rates,
)
from sdbench.plan.estimate import (
    adaptive_needs,
    plan_cost,
)

AUTO = "auto"


DESIGN_CACHE = Path(".sdbench") / "design"


def config_device(config: dict) -> str:
    """The config's `plan.device`, `auto` read off this host."""
    device = config["plan"]["device"]
    if device != "auto":
        return device
    try:
        caps = hostcaps.host_caps()
    except hostcaps.ProbeError:
        caps = None
    return rates.device_of_host(caps)


def compare_designs(config: dict, root: str | Path = ".", device: str | None = None,
                    here: bool = False, known: dict | None = None) -> dict:
    """{False: totals, True: totals} of the study unchained and chained, each {starts,
    startup_h, measuring_h (adaptive), total_h}; without a `device`, the config's on this
    host (`config_device`, the cells this host cannot run left out where it is `auto`).
    `known`: {chain: (its plan_cost result, its adaptive_needs)} already projected."""
    if device is None:
        device, here = config_device(config), config["plan"]["device"] == "auto"
    out = {}
    for chain in (False, True):
        if known and chain in known:
            result, needs = known[chain]
        else:
            variant = copy.deepcopy(config)
            variant["adaptive"] = {**(variant.get("adaptive") or {}), "chain": chain}
            result = plan_cost(variant, device, root, here=here)
            needs = adaptive_needs(variant, device, root, result)
        total = result["total"]
        whole = sum(needs.values())
        out[chain] = {"starts": total.starts, "startup_h": total.startup_h,
                      "measuring_h": whole - total.startup_h - total.rest_h,
                      "total_h": whole}
    return out


def resolve_design(config: dict, root: str | Path = ".") -> dict | None:
    """Where the config's `adaptive.chain` is AUTO: set it to the cheaper design
    (`compare_designs`, made once per config and kept: DESIGN_CACHE) and return the
    comparison; else None."""
    section = config.get("adaptive") or {}
    if section.get("chain") != AUTO or not section.get("enabled", True):
        return None
    key = short_hash({"config": {**config, "adaptive": {**section, "chain": None}}})
    path = Path(root) / DESIGN_CACHE / f"{key}.json"
    try:
        found = json.loads(path.read_text())
        totals = {False: found["unchained"], True: found["chained"]}
    except (OSError, ValueError, KeyError):
        totals = compare_designs({**config, "adaptive": {**section, "chain": False}}, root)
        atomic_write_json(path, {"unchained": totals[False], "chained": totals[True]})
    section["chain"] = totals[True]["total_h"] < totals[False]["total_h"]
    return totals


def describe_design(totals: dict, chosen: bool, forced: bool, unit: str = "GPU-hours") -> str:
    """One line: both designs' totals (in `unit`) and which one runs."""
    def one(chain: bool) -> str:
        t = totals[chain]
        return (f"{'chained' if chain else 'unchained'} {t['total_h']:.1f} {unit} "
                f"({t['starts']} starts, start-up {t['startup_h']:.2f} + adaptive measuring "
                f"{t['measuring_h']:.2f} + the rest)")

    why = "forced by the config" if forced else "the cheaper (adaptive.chain: auto)"
    return (f"design: {'chained' if chosen else 'unchained'} baselines, {why}; "
            f"{one(chosen)} against {one(not chosen)}")
