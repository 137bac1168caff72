"""A study trimmed to a GPU-hour budget the way a person would trim it (`plan.budget_gpu_hours`):
fewer k values, fewer load levels, fewer methods, and only then the later rounds, never a
workload or a temperature and never the study's only (or first) round.

The steps, each taken only while what the study needs (`estimate.adaptive_needs`: the adaptive
projection where the config has the rule on, else the full design; start-up and the rest
included) is above the budget:

1. each method keeps at most two k values, the middle ones of its list (the ends of a k sweep
   are where the best k lies least often);
2. each round keeps its lowest and highest concurrency and at most two levels between them
   (evenly spaced in its list): the crossover between them is still bracketed;
3. each method keeps one k, the middle of its list;
4. methods leave a round one at a time, the one with the lowest acceptance the plan assumes
   first (`rates.ACCEPTANCE`), while the round keeps one;
5. the later parts leave (`plan.leave_out_first`, default dynamic-K, round 3, round 2), never
   the first round the config has.

Each step is a config edit the plan prints, so the user can make it (the workflow measures the
config as written).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from sdbench.plan import rates

ROUNDS = ("round1", "round2", "round3")


@dataclass
class Trimmed:
    budget: float
    needed: float  # GPU-hours the config as written needs
    total: float  # after the steps taken
    dropped: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # whole parts left out
    config: dict | None = None

    @property
    def fits(self) -> bool:
        return self.total <= self.budget


def _middle(values: list, keep: int) -> list:
    """`keep` values from the middle of `values`."""
    if len(values) <= keep:
        return list(values)
    start = (len(values) - keep) // 2
    return list(values[start:start + keep])


def _levels(values: list, between: int = 2) -> list:
    """The lowest and highest of `values` and at most `between` evenly spaced between."""
    if len(values) <= between + 2:
        return list(values)
    inner = values[1:-1]
    picks = [inner[round((i + 1) * (len(inner) + 1) / (between + 1)) - 1]
             for i in range(between)]
    return [values[0], *dict.fromkeys(picks), values[-1]]


def _methods(config: dict):
    for name in ROUNDS:
        for i, method in enumerate((config.get(name) or {}).get("methods") or []):
            yield name, i, method


def _label(method: dict) -> str:
    return method.get("name") or method["method"]


def _narrow(holder: dict, key: str, kept: list, where: str) -> list[str]:
    """`holder[key]` cut to `kept`: one line naming what left it (none where nothing did)."""
    values = holder.get(key) or []
    if kept == values:
        return []
    holder[key] = kept
    gone = ",".join(str(v) for v in values if v not in kept)
    return [f"{where} {key}={gone} (keeps {kept})"]


def _keep_ks(config: dict, keep: int) -> list[str]:
    return [line for round_name, _, method in _methods(config)
            for line in _narrow(method, "k", _middle(method.get("k") or [], keep),
                                f"{round_name} {_label(method)}")]


def _keep_levels(config: dict) -> list[str]:
    return [line for round_name in ROUNDS if config.get(round_name)
            for line in _narrow(config[round_name], "concurrency",
                                _levels(config[round_name].get("concurrency") or []),
                                round_name)]


def _droppable(config: dict) -> list[tuple[str, str]]:
    """(round, method label) of the methods of rounds that have several, the lowest
    acceptance the plan assumes (`rates.ACCEPTANCE`) first."""
    found = [(rates.ACCEPTANCE.get(method["method"], 0.5), round_name, -i, _label(method))
             for round_name, i, method in _methods(config)
             if len(config[round_name]["methods"]) > 1]
    return [(round_name, label) for _, round_name, _, label in sorted(found)]


def _drop_method(config: dict, round_name: str, label: str) -> list[str]:
    methods = config[round_name]["methods"]
    method = next(m for m in methods if _label(m) == label)
    methods.remove(method)
    return [f"{round_name} method {label} (assumed acceptance "
            f"{rates.ACCEPTANCE.get(method['method'], 0.5):g})"]


def trim(config: dict, needs: Callable[[dict], dict[str, float]], budget: float) -> Trimmed:
    """`config` trimmed to `budget` GPU-hours; `needs(config)`: each part's GPU-hours
    (`estimate.adaptive_needs`: adaptive where the config has the rule on, else in full)."""
    parts = needs(config)
    out = Trimmed(budget, sum(parts.values()), sum(parts.values()))
    if out.fits:
        return out
    trimmed = copy.deepcopy(config)

    def take(step) -> bool:
        """Apply `step` to a copy; keep it where the plan still reads it (a method another
        section names, e.g. a dynamic-K entry's, cannot leave alone)."""
        nonlocal trimmed, parts
        candidate = copy.deepcopy(trimmed)
        changed = step(candidate)
        if not changed:
            return False
        try:
            found = needs(candidate)
        except (ValueError, LookupError):
            return False
        trimmed, parts = candidate, found
        out.dropped.extend(changed)
        out.total = sum(parts.values())
        return True

    for step in (lambda c: _keep_ks(c, 2), _keep_levels, lambda c: _keep_ks(c, 1)):
        if take(step) and out.fits:
            out.config = trimmed
            return out
    while not out.fits and any(take(lambda c, r=r, m=m: _drop_method(c, r, m))
                               for r, m in _droppable(trimmed)):
        pass
    first = next((name for name in ROUNDS if config.get(name)), None)
    order = (config.get("plan") or {}).get("leave_out_first") or [
        "dynamic-K", "round3", "round2", "round1"]
    for name in order:
        if out.fits:
            break
        if name != first and parts.get(name):
            out.total -= parts[name]
            out.left_out.append(name)
    out.config = trimmed
    return out


def describe(result: Trimmed) -> list[str]:
    """The plan's lines on the budget."""
    if not result.dropped and not result.left_out:
        return [f"budget {result.budget:g} GPU-hours: the study needs {result.needed:.1f} "
                "(with the adaptive rule where the config has it on): it fits"]
    head = (f"budget {result.budget:g} GPU-hours: the study needs {result.needed:.1f} (with the "
            "adaptive rule where the config has it on); "
            + (f"trimmed to {result.total:.1f}, it fits" if result.fits else
               f"trimmed as far as it goes, {result.total:.1f}: still over the budget")
            + "; every workload and temperature still measured. Drop from the config:")
    return [head, *(f"  - {item}" for item in result.dropped),
            *(f"  - the whole {name} (leave_out_first)" for name in result.left_out)]
