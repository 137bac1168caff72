"""What a study will cost, before it runs: cells, server starts and projected GPU time per
round, with server sessions and without them (one start per cell and instance).

    make plan                                   # config/config.yaml
    make plan CONFIG=config/demo.yaml
    python -m sdbench.plan.cost --config config/config.yaml [--device h100]

The projection is the request model of `sdbench.plan.work` at the rates of one device class
(`sdbench.plan.rates`, calibrated from measured runs; `plan.device` in the config, else this
host's), the start-ups measured on this host by earlier runs where there are some (the session
manifests under results/sessions/), and the acceptance each speculative method is assumed to
reach (printed with the numbers).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sdbench.plan import (
    adaptive,
    budget,
    checks,
    hostcaps,
    inputs,
    rates,
    wallclock,
)
from sdbench.plan.config import ConfigError, load_config
from sdbench.plan.design_choice import (
    compare_designs,
    describe_design,
    resolve_design,
)
from sdbench.plan.estimate import (
    adaptive_needs,
    plan_cost,
)
from sdbench.plan.projection import (
    Tally,
    adaptive_projection,
)
from sdbench.plan.settings import settings


def answer_lines(result: dict, config: dict, needs: dict[str, float],
                 gpus: int | None = None) -> list[str]:
    """The plan's first lines: what the study costs in full and under the adaptive rule
    (`needs`: `adaptive_projection`'s, on or off in the config), its server starts and, on
    `gpus` GPUs, its wall clock."""
    total, device = result["total"], result["device"]
    unit = "GPU-hours" if device.gpu else "hours"
    full = total.startup_h + total.measuring_h + total.rest_h
    on = adaptive.Rule.from_config(config.get("adaptive")) is not None
    lines = [f"Plan on device class {device.name}: {total.cells} cells, {total.starts} server "
             f"starts; {full:.1f} {unit} measured in full (start-up {total.startup_h:.2f} + "
             f"measuring {total.measuring_h:.2f} + the rest {total.rest_h:.2f}), "
             + (f"{sum(needs.values()):.1f} with the adaptive rule (on in this config)" if on
                else f"the adaptive rule (off in this config) would need "
                f"{sum(needs.values()):.1f}")]
    if gpus:
        lines.append(wall_clock_line(result, gpus, needs if on else None))
    return lines


def design_lines(config: dict, device: str, root: str | Path, result: dict,
                 needs: dict[str, float], here: bool = False,
                 totals: dict | None = None) -> list[str]:
    """Under the adaptive rule: the design that runs (chained or not) and both designs' totals:
    `totals` where `resolve_design` chose it, else (forced by the config) projected here
    (`result`, `needs`: this config's own projection)."""
    section = config.get("adaptive") or {}
    if adaptive.Rule.from_config(section) is None:
        return []
    forced = totals is None
    if forced:
        totals = compare_designs(config, root, device, here,
                                 {bool(section.get("chain")): (result, needs)})
    unit = "GPU-hours" if result["device"].gpu else "hours"
    return [describe_design(totals, bool(section.get("chain")), forced, unit)]


def budget_lines(config: dict, device: str, root: str | Path, result: dict,
                 first: dict[str, float] | None = None, here: bool = False) -> list[str]:
    """Where `plan.budget_gpu_hours` is set: what the study needs against it and, above it,
    the config trimmed to fit (`budget.trim`). `first`: the config's own `adaptive_needs`."""
    limit = (config.get("plan") or {}).get("budget_gpu_hours")
    if limit is None:
        return []
    first = first or adaptive_needs(config, device, root, result)
    trimmed = budget.trim(config, lambda c: first if c is config else adaptive_needs(
        c, device, root, here=here), float(limit))
    return budget.describe(trimmed)


def wall_clock_line(result: dict, gpus: int, needs: dict[str, float] | None = None) -> str:
    """The study's wall-clock time on `gpus` GPUs (`wallclock.makespan`): with the adaptive
    rule where `needs` (its projection, part by part) is given, and every cell in full; beside
    GPU-hours ÷ GPUs and its longest chain of sessions."""
    jobs = result["jobs"]
    full = wallclock.makespan(jobs, gpus) / 3600
    longest = max(wallclock.critical_path(jobs).values(), default=0.0) / 3600
    total = result["total"]
    spent = total.startup_h + total.measuring_h + total.rest_h
    unit = "GPUs" if result["device"].gpu else "cells at once (gpu=N)"
    hours = "GPU-hours" if result["device"].gpu else "hours"
    head = f"wall clock on {gpus} {unit}: "
    if needs:
        shares = {name: min(1.0, max(0.0, (needs[name] - t.startup_h - t.rest_h)
                                     / t.measuring_h))
                  for name, t in result["parts"].items() if name in needs and t.measuring_h}
        adaptive_h = wallclock.makespan(wallclock.shortened(jobs, shares), gpus) / 3600
        head += (f"{adaptive_h:.1f} h with the adaptive rule (each session's measuring at its "
                 f"round's projected share), {full:.1f} h every cell in full")
    else:
        head += f"{full:.1f} h, every cell measured in full"
    return (head + f" ({len(jobs)} sessions, each when those it reads are done; the longest "
            f"chain of them in full {longest:.1f} h; {hours} ÷ {gpus}: {spent / gpus:.1f} h; "
            "downloads, builds and reports not counted)")


def request_lengths(found: int, sets: int, other: int, estimated: dict) -> str:
    """The plan's line on where its request lengths come from (`prompt_cards`)."""
    line = f"request lengths: the data cards' means for {found} of {sets} prompt sets"
    guessed = sum(estimated.values())
    if guessed:
        line += (f"; estimated from the source file for {guessed} (counted with "
                 + ", ".join(f"{how}: {n}" if len(estimated) > 1 else how
                             for how, n in sorted(estimated.items())) + ")")
    rest = sets - found - guessed
    if rest:
        line += (f"; {rest} (not built here yet"
                 + (f"; {other} of them on disk built from another definition, e.g. "
                    "another config's or the demo's fixtures, not read" if other else "")
                 + ") at their longest request, so the measuring projected is an upper bound")
    return line


def format_sessions(result: dict) -> str:
    """Each session's projected start-ups, measuring and rest (seconds), in run order."""
    lines = [f"{'session':<18} {'starts':>6} {'start-up s':>10} {'measuring s':>11} "
             f"{'rest s':>7}  cells"]
    for sid, session in result["sessions"].items():
        work = result["work"][sid]
        first = result["cells"][session.cells[0]]
        lines.append(f"{sid:<18} {work.starts:>6} {work.startup_s:>10.0f} "
                     f"{work.measuring_s:>11.0f} {work.rest_s:>7.0f}  {len(session.cells)}: "
                     f"{first.label.split(' | ')[0]} | {first.server_config['target']['name']}")
    return "\n".join(lines)


def _assumptions(config: dict, device: rates.DeviceRates) -> list[str]:
    methods = sorted({m.method for spec in settings(config).rounds.values()
                      for m in spec.methods})
    assumed = ", ".join(f"{m} {rates.ACCEPTANCE.get(m, 0.5):.2f}" for m in methods)
    return [f"rates: {device.name}: {device.source}",
            f"acceptance assumed per drafted token: {assumed or 'none'}; an exact draft "
            f"{rates.EXACT_ACCEPTANCE[device.gpu]:.2f}, the workflow's plumbing drafts "
            f"{rates.PLUMBING_ACCEPTANCE:.2f}",
            "derived dynamic-K cells at their method's largest k"]


def format_plan(result: dict, source: str, config: dict | None = None,
                needs_out: dict | None = None, details: bool = True) -> str:
    device, parts, total = result["device"], result["parts"], result["total"]
    unit = "GPU-hours" if device.gpu else "hours"
    lines = [f"Plan of {source} on device class {device.name}",
             "",
             f"{'part':<10} {'cells':>6} {'sessions':>8} {'starts':>7} {'(per cell)':>10} "
             f"{'start-up':>9} {'measuring':>10} {'rest':>7}   {'without sessions':>16}",
             f"{'':<10} {'':>6} {'':>8} {'':>7} {'':>10} {unit:>9} {unit:>10} {unit:>7}   "
             f"{'start-up + rest':>16}"]

    def row(name: str, t: Tally) -> str:
        return (f"{name:<10} {t.cells:>6} {t.sessions:>8} {t.starts:>7} {t.starts_without:>10} "
                f"{t.startup_h:>9.2f} {t.measuring_h:>10.2f} {t.rest_h:>7.2f}   "
                f"{t.startup_without_h + t.rest_without_h:>16.2f}")

    lines += [row(name, t) for name, t in parts.items() if t.cells]
    lines.append(row("total", total))
    lines.append("(a session counts under the round of its first cell: one serving rounds 1-3 "
                 "counts under round 1)")
    lines += ["",
              f"server starts: {total.starts} (one per cell and instance: "
              f"{total.starts_without})",
              f"projected {unit}: start-up {total.startup_h:.2f}, measuring "
              f"{total.measuring_h:.2f} (the rest {total.rest_h:.2f})",
              f"  without sessions: start-up {total.startup_without_h:.2f}, measuring "
              f"{total.measuring_h:.2f} (the rest {total.rest_without_h:.2f})",
              "A start is one (server configuration, instance); fresh-server-per-point "
              "exceptions: " + ("; ".join(total.exceptions) if total.exceptions else "none")]
    lines += instance_lines(result, unit)
    if result["unsupported"]:
        lines.append(f"{len(result['unsupported'])} cells are unsupported here (this host "
                     "or its vLLM; no start, nothing measured): " + "; ".join(sorted(set(
                         result["unsupported"].values()))))
    if config is not None:
        lines += adaptive_projection(config, parts, result.get("predicted"),
                                     result.get("arms"), needs_out, details)
    lines.append(request_lengths(*result["cards"]))
    if result["measured_starts"]:
        lines.append(f"start-ups: the median of {result['measured_starts']} measured on this "
                     "host where a configuration has one")
    return "\n".join(lines)


def instance_lines(result: dict, unit: str) -> list[str]:
    """What measuring the spread between server starts costs: the chained cells' stages (every
    repeat a start of its own) and the instance probe for the cells on one start."""
    probe, chained = result.get("probe") or {}, result.get("chained") or {}
    lines = ["how much two starts of a server differ (every interval carries it):"]
    if chained.get("starts"):
        lines.append(f"  chained cells: every repeat on a start of its own, {chained['starts']} "
                     f"starts, start-up {chained['startup_h']:.2f} {unit}")
    if probe.get("cells"):
        probed = sorted(probe["probed"])
        lines.append(
            f"  instance probe: {probe['starts']} starts more, start-up "
            f"{probe['startup_h']:.2f} + measuring {probe['measuring_h']:.2f} {unit} "
            f"({len(probed)} speculator(s) on their target: "
            + ", ".join(f"{s} on {t}" for t, s in probed) + ")")
    elif not chained.get("starts"):
        lines.append("  nothing measures it (no chained cell, instance_probe off or no cell "
                     "on one start): intervals cover the noise within one start only")
    return lines


# ----------------------------------------------------------------------- the design, per study
#
# `adaptive.chain` measures a baseline and the cells paired with it in stages, one server start
# each, so that the baseline's repeats stop with its cells': a large study saves far more
# measuring than the starts cost, a small one can pay more in start-up than it saves. With
# `chain: auto` the plan projects both designs (start-up, adaptive measuring and the rest, in
# GPU-hours) and the study runs the cheaper one; `true` or `false` forces one. The choice is made
# once per config (whatever is built later) and kept under `.sdbench/design/` in the working
# directory, so that every parse of a run (a dry run, each SLURM job) plans the same cells and
# sessions (`resolve_design`, called wherever a config becomes a grid: the workflow's parse,
# `make plan`, a cell run by hand); `make plan` prints both totals either way.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdbench.plan.cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--device", choices=sorted(rates.DEVICES),
                        help="device class (default: the config's plan.device, else this "
                             "host's)")
    parser.add_argument("--root", default=".", help="working directory of the runs")
    parser.add_argument("--sessions", action="store_true",
                        help="also list each session's projected split")
    parser.add_argument("--assumptions", action="store_true",
                        help="also print every assumption of the adaptive projection")
    parser.add_argument("--gpus", type=int, default=None,
                        help="the GPUs the study runs on (snakemake --resources gpu=N): "
                             "print its wall-clock time there")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        # what a dry run would refuse, refused here too: a method the installed vLLM does
        # not offer, a missing or malformed request file
        checks.check_installed(config, args.root, source=args.config)
        inputs.check_sources(config, source=args.config, root=args.root)
        chosen = resolve_design(config, args.root)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = args.device or config["plan"]["device"]
    here = device == "auto"
    if here:
        try:
            caps = hostcaps.host_caps()
        except hostcaps.ProbeError:
            caps = None
        device = rates.device_of_host(caps)
    result = plan_cost(config, device, args.root, here=here)
    projected: dict[str, float] = {}
    detail = format_plan(result, args.config, config, projected, args.assumptions)
    needs = (projected if adaptive.Rule.from_config(config.get("adaptive"))
             else adaptive_needs(config, device, args.root, result))
    print("\n".join(answer_lines(result, config, projected, args.gpus)
                    + design_lines(config, device, args.root, result, needs, here, chosen)
                    + budget_lines(config, device, args.root, result, needs, here)))
    print("\n" + detail)
    if args.sessions:
        print("\n" + format_sessions(result))
    print("\n".join(["", "Assumptions:", *(f"  {a}" for a in
                                           _assumptions(config, result["device"]))]
                    + ([] if args.assumptions else [
                        "  (the adaptive projection's own: --assumptions)"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
