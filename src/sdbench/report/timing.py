"""Where a run's time went: data, models, cells (server start-up, measuring, the rest) and the
summary and reports, from Snakemake's per-job benchmark files (benchmarks/<rule>/...), the
sessions' manifests (their own time split) and the cells' records. `make demo` prints it at
the end:

    python -m sdbench.report.timing [--wall-s SECONDS]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from sdbench.files import read_jsonl
from sdbench.layout import BENCHMARKS_DIR, CELLS_DIR, DERIVED_DIR, SESSIONS_DIR, benchmark_file

# rule -> the part of the run it belongs to
PARTS = {"fetch_source": "data", "prompts": "data", "model": "models", "session": "cells",
         "cell": "cells", "dynamic_k_cell": "cells",
         "dynamic_k_schedule": "summary and reports", "summary": "summary and reports",
         "report": "summary and reports", "index": "summary and reports"}


def _seconds(path: Path) -> float:
    with path.open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return sum(float(row["s"]) for row in rows)


def _sessions(root: Path) -> dict[str, dict]:
    """session manifest path (relative) -> its time split, for every session of the run."""
    found = {}
    for path in sorted((root / SESSIONS_DIR).rglob("*.json")):
        try:
            timing = json.loads(path.read_text()).get("timing")
        except (OSError, ValueError):
            continue
        if timing:
            found[str(path.relative_to(root))] = timing
    return found


def cell_split(root: str | Path = ".") -> dict:
    """Seconds of the cells' jobs: server start-up (each start once; servers started side by
    side count once for the time they overlap), measuring (each point from the load
    generator's start to its end, warm-ups included), of that the timed requests alone, and
    per session the rest of its job (job start, imports, checks, stopping: its wall time from
    its benchmark file, else its own clock, less start-up and measuring)."""
    root = Path(root)
    sessions = _sessions(root)
    timed = 0.0
    for path in [*sorted((root / CELLS_DIR).glob("*.jsonl")),
                 *sorted((root / DERIVED_DIR).rglob("*.jsonl"))]:
        for record in read_jsonl(path):
            if record["status"] != "unsupported":
                timed += float((record.get("metrics") or {}).get("duration") or 0.0)
    rests = {}
    for name, timing in sessions.items():
        bench = root / benchmark_file("session", Path(name).stem)
        wall = _seconds(bench) if bench.is_file() else timing["wall_s"]
        rests[name] = wall - timing["startup_s"] - timing["measuring_s"]
    return {"server start-up": sum(t["startup_s"] for t in sessions.values()),
            "measuring": sum(t["measuring_s"] for t in sessions.values()),
            "timed requests": timed,
            "servers": sum(t["servers"] for t in sessions.values()),
            "sessions": len(sessions), "session rest": rests}


def time_split(root: str | Path = ".") -> dict:
    """Seconds per part of the run (jobs that ran: their benchmark files), the cells split."""
    root = Path(root)
    parts: dict[str, float] = {}
    jobs: dict[str, int] = {}
    for rule, part in PARTS.items():
        for path in sorted((root / BENCHMARKS_DIR / rule).rglob("*.tsv")):
            parts[part] = parts.get(part, 0.0) + _seconds(path)
            jobs[part] = jobs.get(part, 0) + 1
    return {"parts": parts, "jobs": jobs, "cells": cell_split(root)}


def _m(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def format_split(split: dict, wall_s: float | None = None) -> str:
    parts, jobs, cells = split["parts"], split["jobs"], split["cells"]
    lines = ["Where the time went (job wall times from benchmarks/, summed over jobs: jobs that "
             "ran side by side overlap):"]
    if wall_s is not None:
        lines.insert(0, f"Wall time: {_m(wall_s)}")
    for part in ("data", "models", "cells", "summary and reports"):
        if part in parts:
            lines.append(f"  {part:<20} {_m(parts[part]):>9}  ({jobs[part]} jobs)")
    if cells["sessions"]:
        other = parts.get("cells", 0.0) - cells["server start-up"] - cells["measuring"]
        rests = sorted(cells["session rest"].values())
        share = cells["measuring"] / parts["cells"] if parts.get("cells") else float("nan")
        lines += [f"    server start-up    {_m(cells['server start-up']):>9}  "
                  f"({cells['servers']} servers in {cells['sessions']} sessions)",
                  f"    measuring          {_m(cells['measuring']):>9}  ({100 * share:.0f} % "
                  f"of the cells' jobs; of which timed requests {_m(cells['timed requests'])}, the "
                  "rest warm-ups and the load generator's own start)",
                  f"    the rest           {_m(max(other, 0.0)):>9}  (per session "
                  f"{rests[len(rests) // 2]:.1f} s median, {rests[-1]:.1f} s at most: job "
                  "start, imports, checks, stopping; and the cells' records)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--wall-s", type=float, default=None)
    args = parser.parse_args(argv)
    print(format_split(time_split(args.root), args.wall_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
