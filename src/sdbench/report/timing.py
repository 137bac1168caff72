"""Where a run's time went: data, models, cells (server start-up, measuring, the rest) and the
summary and reports, from Snakemake's per-job benchmark files (benchmarks/<rule>/...) and the
cells' own records. `make demo` prints it at the end:

    python -m sdbench.report.timing [--wall-s SECONDS]
"""

from __future__ import annotations

import argparse
import csv
from datetime import datetime
from pathlib import Path

from sdbench.files import read_jsonl
from sdbench.layout import BENCHMARKS_DIR, CELLS_DIR, DERIVED_DIR

# rule -> the part of the run it belongs to
PARTS = {"fetch_source": "data", "prompts": "data", "model": "models", "cell": "cells",
         "cell_group": "cells", "dynamic_k_cell": "cells",
         "dynamic_k_schedule": "summary and reports", "summary": "summary and reports",
         "report": "summary and reports", "index": "summary and reports"}


def _seconds(path: Path) -> float:
    with path.open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return sum(float(row["s"]) for row in rows)


def _instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def cell_split(root: str | Path = ".") -> dict[str, float]:
    """Seconds of the finished cells: server start-up (each server instance once; servers that
    started side by side, a group's, count once for the time they overlap), measuring (each
    point from the load generator's start to its end, warm-up requests included) and of that
    the timed requests alone."""
    root = Path(root)
    files = [*sorted((root / CELLS_DIR).glob("*.jsonl")),
             *sorted((root / DERIVED_DIR).rglob("*.jsonl"))]
    startup: dict[tuple, tuple[float | None, float]] = {}
    measuring = timed = 0.0
    for path in files:
        for record in read_jsonl(path):
            server = record.get("server") or {}
            if server.get("startup_s") is not None:
                began = server.get("started_at")  # records before it was written: summed
                startup[(record["cell_id"], server.get("instance"))] = (
                    None if began is None else _instant(began), float(server["startup_s"]))
            prov = record["provenance"]
            if record["status"] != "unsupported" and prov.get("finished_at"):
                measuring += _instant(prov["finished_at"]) - _instant(prov["started_at"])
                timed += float((record.get("metrics") or {}).get("duration") or 0.0)
    return {"server start-up": covered(startup.values()), "measuring": measuring,
            "timed requests": timed, "servers": len(startup)}


def covered(spans) -> float:
    """Seconds covered by (start, length) spans, overlaps once; a span without a start counts
    in full."""
    spans = list(spans)
    total = sum(length for start, length in spans if start is None)
    end = float("-inf")
    for start, length in sorted(s for s in spans if s[0] is not None):
        total += max(0.0, start + length - max(start, end))
        end = max(end, start + length)
    return total


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
    if cells["servers"]:
        other = parts.get("cells", 0.0) - cells["server start-up"] - cells["measuring"]
        lines += [f"    server start-up    {_m(cells['server start-up']):>9}  "
                  f"({cells['servers']} servers)",
                  f"    measuring          {_m(cells['measuring']):>9}  (of which timed "
                  f"requests {_m(cells['timed requests'])}; the rest warm-ups and the load "
                  "generator's own start)",
                  f"    the rest           {_m(max(other, 0.0)):>9}  (stopping servers, "
                  "host checks, job start)"]
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
