"""How long the reports are in a real browser: each page opened in headless Chromium at a
given window (1400 × 900 px unless told), collapsed sections closed, its full height and where
its lead elements (bottom line, recommendation table, throughput-latency front) end, in
screens of the window's height.

    python -m sdbench.report.browser reports/*.html [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

WIDTH, HEIGHT = 1400, 900
# the elements a round page must show within its first screens (ids the report gives them:
# the bottom line, the "What to run" and "Throughput against latency" sections), as named
LEAD = {"bottom-line": "bottom line", "what-to-run": "recommendations",
        "throughput-against-latency": "front"}
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# run in the page once loaded: every <details> closed, then the page's height and the bottom
# of each lead element, as JSON in the title (what `--dump-dom` returns)
_PROBE = """<script>
window.addEventListener("load", () => {
  document.querySelectorAll("details").forEach(d => d.open = false);
  const out = {height: document.documentElement.scrollHeight, lead: {}};
  for (const id of %s) {
    const el = document.getElementById(id);
    if (el) { const r = el.getBoundingClientRect(); out.lead[id] = r.bottom + window.scrollY; }
  }
  document.title = "SDBENCH-PROBE" + JSON.stringify(out);
});
</script>"""


def browser() -> str | None:
    """The path of a Chromium-like browser on this machine (SDBENCH_BROWSER first), or None."""
    named = os.environ.get("SDBENCH_BROWSER")
    if named:
        return shutil.which(named) or (named if Path(named).exists() else None)
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@dataclass(frozen=True)
class PageSize:
    page: str
    height_px: int
    lead_px: dict[str, float]  # lead element id -> its bottom edge, px from the top
    window: tuple[int, int] = (WIDTH, HEIGHT)

    @property
    def screens(self) -> float:
        return self.height_px / self.window[1]

    def lead_screens(self, element: str) -> float | None:
        px = self.lead_px.get(element)
        return None if px is None else px / self.window[1]


def measure(page: str | Path, width: int = WIDTH, height: int = HEIGHT,
            executable: str | None = None) -> PageSize:
    """`page` opened in headless Chromium at width × height, its collapsed sections closed."""
    executable = executable or browser()
    if executable is None:
        raise RuntimeError("no Chromium-like browser found (set SDBENCH_BROWSER)")
    page = Path(page)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / page.name
        probe.write_text(page.read_text(encoding="utf-8")
                         + _PROBE % json.dumps(list(LEAD)), encoding="utf-8")
        done = subprocess.run(
            [executable, "--headless", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", f"--window-size={width},{height}",
             "--virtual-time-budget=5000", f"--user-data-dir={tmp}/profile",
             "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=120)
    found = re.search(r"SDBENCH-PROBE(\{.*?\})</title>", done.stdout)
    if found is None:
        raise RuntimeError(f"{executable} did not measure {page} (exit {done.returncode}): "
                           f"{done.stderr.strip()[-500:]}")
    data = json.loads(found.group(1).replace("&quot;", '"'))
    return PageSize(page.name, int(data["height"]), data["lead"], (width, height))


def markdown(sizes: list[PageSize]) -> str:
    """A Markdown table of the pages' lengths and where their lead elements end, in screens."""
    width, height = sizes[0].window if sizes else (WIDTH, HEIGHT)
    lines = [f"Screens of {width} × {height} px, collapsed sections closed.", "",
             "| page | screens | " + " | ".join(f"{n} ends at" for n in LEAD.values()) + " |",
             "| --- | ---: |" + " ---: |" * len(LEAD)]
    for size in sizes:
        ends = [size.lead_screens(e) for e in LEAD]
        lines.append(f"| {size.page} | {size.screens:.1f} | "
                     + " | ".join("–" if e is None else f"{e:.1f}" for e in ends) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--height", type=int, default=HEIGHT)
    args = parser.parse_args(argv)
    sizes = [measure(page, args.width, args.height) for page in args.pages]
    print(markdown(sizes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
