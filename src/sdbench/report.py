"""Reports: papermill runs a parameterised notebook, nbconvert turns it into one offline HTML
file (no code shown, images inline, no CDN scripts); index.html links the reports and lists
every cell of the grid with its status."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path

from .config import REPO_ROOT
from .files import atomic_path, atomic_write_text
from .grid import Cell

OFFLINE_TEMPLATE = REPO_ROOT / "workflow" / "notebooks" / "templates" / "offline.html.j2"


def execute_notebook(notebook: str | Path, executed: str | Path, parameters: dict,
                     cwd: str | Path = ".") -> None:
    import papermill

    with atomic_path(executed) as tmp:
        papermill.execute_notebook(str(notebook), str(tmp), parameters=parameters,
                                   cwd=str(cwd), progress_bar=False, kernel_name="python3",
                                   log_output=False)


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


def cell_status(cell_output: str | Path) -> str:
    output = Path(cell_output)
    if output.exists():
        return "done"
    if output.with_name(output.name + ".partial").exists():
        return "failed or interrupted"
    return "not run"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f0f0f0; }
.done { color: #1a7f37; } .failed { color: #b42318; } .missing { color: #888; }
code { font-size: 0.95em; }
"""


def write_index(study: str, reports: dict[str, str], cells: list[tuple[Cell, str]],
                out: str | Path) -> None:
    """reports: {title: relative link}; cells: [(cell, path of its records file)]."""
    links = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(title)}</a></li>'
                      for title, href in reports.items())
    rows, counts = [], {}
    for cell, output in cells:
        status = cell_status(output)
        counts[status] = counts.get(status, 0) + 1
        css = {"done": "done", "not run": "missing"}.get(status, "failed")
        server = cell.server_config
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
                cell.round, server["target"]["name"], cell.workload["name"], cell.speculator,
                server["num_speculative_tokens"] or "", ", ".join(map(str, cell.concurrency))))
            + f'<td><code>{cell.cell_id}</code></td><td class="{css}">{status}</td></tr>')
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(study)}: reports</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(study)}</h1>
<p>Generated {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}.</p>
<h2>Reports</h2><ul>{links}</ul>
<h2>Cells ({len(cells)}: {summary})</h2>
<p>One cell = one vLLM server configuration × one workload; records in
<code>results/cells/&lt;cell id&gt;.jsonl</code>, server logs in <code>logs/cells/</code>.</p>
<table><tr><th>round</th><th>target</th><th>workload</th><th>method</th><th>k</th>
<th>concurrency</th><th>cell id</th><th>status</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    atomic_write_text(out, page)
