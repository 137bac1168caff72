"""Reports: papermill runs a parameterised notebook, nbconvert turns it into one offline HTML
file (no code shown, images inline, no CDN scripts); index.html links the reports and lists
every cell of the grid with its status."""

from __future__ import annotations

import html
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from .config import REPO_ROOT
from .files import atomic_path, atomic_write_text
from .grid import Cell

OFFLINE_TEMPLATE = REPO_ROOT / "workflow" / "notebooks" / "templates" / "offline.html.j2"


KERNEL_START_ATTEMPTS = 3


def execute_notebook(notebook: str | Path, executed: str | Path, parameters: dict,
                     cwd: str | Path = ".") -> None:
    """Run the notebook with papermill. A kernel that dies before it answers is started again:
    jupyter_client picks the kernel's TCP ports by binding and releasing them, so kernels
    started at the same moment (several reports rendered in parallel) can lose a port race
    ("Address already in use", seen on a 32-core GPU host)."""
    import papermill

    for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
        try:
            with atomic_path(executed) as tmp:
                papermill.execute_notebook(str(notebook), str(tmp), parameters=parameters,
                                           cwd=str(cwd), progress_bar=False,
                                           kernel_name="python3", log_output=False)
            return
        except RuntimeError as exc:
            if "Kernel died before replying" not in str(exc) or attempt == KERNEL_START_ATTEMPTS:
                raise
            print(f"report: the notebook kernel died at start ({exc}); attempt {attempt + 1} "
                  f"of {KERNEL_START_ATTEMPTS}", file=sys.stderr)


def notebook_to_html(executed: str | Path, html_out: str | Path, title: str) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", template_file=str(OFFLINE_TEMPLATE),
                            exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True)
    body, _ = exporter.from_notebook_node(nbformat.read(str(executed), as_version=4),
                                          resources={"metadata": {"name": title}})
    atomic_write_text(html_out, body)


def render_report(notebook: str | Path, executed: str | Path, html_out: str | Path,
                  parameters: dict, title: str) -> None:
    execute_notebook(notebook, executed, parameters)
    notebook_to_html(executed, html_out, title)


def cell_status(cell_output: str | Path) -> tuple[str, str]:
    """(status, detail) of a cell from its files: done, failed (with the error), interrupted
    (points measured, no error recorded), or not run."""
    from .cell import error_output

    output = Path(cell_output)
    if output.exists():
        return "done", ""
    error = error_output(output)
    if error.exists():
        return "failed", json.loads(error.read_text())["error"]
    if output.with_name(output.name + ".partial").exists():
        return "interrupted", "some points measured, the cell did not finish"
    return "not run", ""


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.done { color: #1a7f37; } .failed, .interrupted, .invalid { color: #b42318; }
.missing { color: #888; } .detail { font-size: 0.85em; max-width: 60em; white-space: pre-wrap; }
code { font-size: 0.95em; }
"""


def _row(values, css: str = "") -> str:
    cells = "".join(f"<td>{html.escape(str(v))}</td>" for v in values[:-1])
    return f'<tr>{cells}<td class="{css}">{html.escape(str(values[-1]))}</td></tr>'


def write_index(study: str, reports: dict[str, str], cells: list[tuple[Cell, str]],
                out: str | Path, problem_points: list[dict] | None = None,
                note: str = "") -> None:
    """reports: {title: relative link}; cells: [(cell, path of its records file)];
    problem_points: failed or invalid points (from the summary) to list at the top."""
    links = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(title)}</a></li>'
                      for title, href in reports.items())
    rows, problems, counts = [], [], {}
    for cell, output in cells:
        status, detail = cell_status(output)
        counts[status] = counts.get(status, 0) + 1
        server = cell.server_config
        method = cell.speculator + ("" if cell.engine == "serve" else f" ({cell.engine})")
        fields = (cell.round, server["target"]["name"], cell.workload["name"], method,
                  server["num_speculative_tokens"] or "",
                  ", ".join([*map(str, cell.concurrency),
                             *(f"{r:g}/s" for r in cell.request_rates)]),
                  cell.cell_id)
        rows.append(_row((*fields, status), {"done": "done", "not run": "missing"}.get(
            status, status)))
        if status in ("failed", "interrupted"):
            problems.append(f'<tr><td><code>{cell.cell_id}</code></td>'
                            f"<td>{html.escape(cell.label)}</td>"
                            f'<td class="{status}">{status}</td>'
                            f'<td class="detail">{html.escape(detail[:2000])}</td></tr>')
    for point in problem_points or []:
        problems.append(
            f"<tr><td><code>{point['cell_id']}</code></td>"
            f"<td>{html.escape(point['label'])}, {point['level']}</td>"
            f'<td class="invalid">{point["status"]} point</td>'
            f'<td class="detail">{html.escape(str(point["error"]))}</td></tr>')
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    problem_table = (
        "<h2>Problems</h2><table><tr><th>cell</th><th>what</th><th>status</th><th>why</th></tr>"
        + "\n".join(problems) + "</table>") if problems else "<p>No failed cells or points.</p>"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(study)}: reports</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(study)}</h1>
<p>Generated {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}.{html.escape(note)}</p>
<h2>Reports</h2><ul>{links}</ul>
{problem_table}
<h2>Cells ({len(cells)}: {summary})</h2>
<p>One cell = one vLLM server configuration × one workload; records in
<code>results/cells/&lt;cell id&gt;.jsonl</code>, server logs in <code>logs/cells/</code>.</p>
<table><tr><th>round</th><th>target</th><th>workload</th><th>method</th><th>k</th>
<th>concurrency</th><th>cell id</th><th>status</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    atomic_write_text(out, page)


def problem_points(frame) -> list[dict]:
    """Failed or invalid points of a summary table, for the index."""
    bad = frame[frame["status"] != "ok"]
    return [{"cell_id": r.cell_id, "status": r.status, "error": r.error,
             "level": (f"request rate {r.request_rate:g}/s" if pd.isna(r.concurrency)
                       else f"{'batch size' if r.engine != 'serve' else 'concurrency'} "
                            f"{int(r.concurrency)}"),
             "label": f"{r.speculator}{'' if pd.isna(r.k) else f' k={int(r.k)}'} | "
                      f"{r.target} | {r.workload}"}
            for r in bad.itertuples()]


def salvage(config: dict, cells: list[tuple[Cell, str]], reports: dict[str, str],
            model_dirs: dict[str, str], index: dict | None = None,
            notebooks: Path = REPO_ROOT / "workflow" / "notebooks") -> None:
    """After a run with failed jobs: every round's report from the points measured (finished
    and unfinished cells) and an index that lists the failures; never raises.

    cells: (cell, records file); reports: title -> page; model_dirs: target -> checkpoint
    (lossless check); index: rounds and settings of the cells (aggregate.apply_index)."""
    from .aggregate import build_summary, write_summary

    try:
        complete = [o for _, o in cells if Path(o).exists()]
        partial = [f"{o}.partial" for _, o in cells if Path(f"{o}.partial").exists()]
        points: list[dict] = []
        if complete or partial:
            frame, per_point = build_summary(complete, partial,
                                             config["loadgen"]["max_failure_share"], model_dirs,
                                             index)
            write_summary(frame, "results/summary.incomplete.parquet",
                          "results/summary.incomplete.csv")
            write_summary(per_point, "results/summary_points.incomplete.parquet",
                          "results/summary_points.incomplete.csv")
            points = problem_points(frame)
            for title, page in reports.items():
                name = page.removesuffix(".html")
                render_report(notebooks / f"{name}.ipynb",
                              f"results/notebooks/{name}.incomplete.ipynb", f"reports/{page}",
                              {"summary_path": "results/summary.incomplete.parquet",
                               "points_path": "results/summary_points.incomplete.parquet",
                               "study": config["study"]},
                              title=f"{title} (incomplete run) — {config['study']}")
        write_index(config["study"], reports, cells, "reports/index.html", points,
                    note=" This run had failed jobs: the reports show what was measured.")
        print("sdbench: reports of the incomplete run: reports/index.html", file=sys.stderr)
    except Exception as exc:  # the run's own error is what matters; report this one briefly
        print(f"sdbench: could not write the reports of the failed run: {exc}", file=sys.stderr)
