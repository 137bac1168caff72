"""Reports: papermill runs a parameterised notebook, nbconvert turns it into one offline HTML
file (no code shown, images inline, no CDN scripts); index.html links the reports and lists
every cell of the grid with its status."""

from __future__ import annotations

import html
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from sdbench import layout
from sdbench.analyze.aggregate import arm_setting
from sdbench.analyze.decisions import shown_round
from sdbench.analyze.summary import write_tables
from sdbench.data.builders import subsets_of
from sdbench.data.sources import raw_path
from sdbench.files import atomic_path, atomic_write_text
from sdbench.layout import SummaryTables, cell_log, error_output, partial_output
from sdbench.logcause import first_line, job_cause
from sdbench.plan import lock, specs
from sdbench.plan.config import REPO_ROOT
from sdbench.plan.hostcaps import UNSUPPORTED
from sdbench.plan.settings import settings
from sdbench.plan.specs import Cell
from sdbench.records import STOPPED, LoadPoint, RecordError, read_records
from sdbench.report.decision import bottom_lines
from sdbench.report.sections import (
    KEEP_TAG,
    LEAD_TAG,
    METHODS_PAGE,
    METHODS_TEXT,
    methods_notebook,
    sectioned,
)
from sdbench.report.show import EMPTY_MARK

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


NOT_MEASURED = "## Not measured in this run"


def _empty_text(cell) -> str | None:
    """The "nothing to show" line of a code cell whose every output is one (show.show_empty),
    "" for a cell without output, None for a cell that shows something."""
    outputs = cell.get("outputs") or []
    if not outputs:
        return ""
    if all(o.get("metadata", {}).get(EMPTY_MARK) for o in outputs):
        return " ".join(o["data"].get("text/markdown", "").strip() for o in outputs)
    return None


def fold_empty_sections(notebook):
    """An executed report without its empty sections: a section (a Markdown heading and the
    cells up to the next) whose code cells show nothing but "nothing to show" lines is left
    out, its heading and lines listed under one last heading, "Not measured in this run"; a
    lead section (`sections.LEAD_TAG`) stays and shows its line."""
    import nbformat

    cells, kept, left_out = notebook.cells, [], []
    i = 0
    while i < len(cells):
        cell = cells[i]
        source = cell.source if cell.cell_type == "markdown" else ""
        if source.startswith("#") and not source.startswith("# "):
            j = i + 1
            while j < len(cells) and not (cells[j].cell_type == "markdown"
                                          and cells[j].source.startswith("#")):
                j += 1
            body = cells[i + 1:j]
            codes = [c for c in body if c.cell_type == "code"]
            texts = [_empty_text(c) for c in codes]
            # a lead section stays, saying why it is empty (the decision first, even "none")
            if (codes and all(t is not None for t in texts)
                    and LEAD_TAG not in cell.get("metadata", {}).get("tags", [])):
                heading = source.splitlines()[0].lstrip("#").strip()
                left_out.append(f"- **{heading}**: "
                                + (" ".join(t for t in texts if t) or "nothing to show."))
                i = j
                continue
        kept.append(cell)
        i += 1
    if left_out:
        note = nbformat.v4.new_markdown_cell(NOT_MEASURED + "\n\n" + "\n".join(left_out))
        note.metadata["tags"] = [KEEP_TAG]  # its list is the page's, not a method's text
        kept.append(note)
    notebook.cells = kept
    return notebook


def without_stderr(notebook):
    """The notebook without what its code printed to stderr (library warnings): it goes to
    this process's stderr, the report job's log, never onto the page a team reads."""
    for cell in notebook.cells:
        outputs = cell.get("outputs", [])
        for output in outputs:
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                print(f"sdbench: report cell printed: {output.get('text', '').strip()}",
                      file=sys.stderr)
        if outputs:
            cell.outputs = [o for o in outputs if not (o.get("output_type") == "stream"
                                                       and o.get("name") == "stderr")]
    return notebook


def page_html(notebook, title: str) -> str:
    """A notebook as one offline HTML page (the report template: no code, images inline)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", template_file=str(OFFLINE_TEMPLATE),
                            exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True)
    body, _ = exporter.from_notebook_node(notebook, resources={"metadata": {"name": title}})
    return body


def notebook_to_html(executed: str | Path, html_out: str | Path, title: str) -> None:
    import nbformat

    notebook = sectioned(fold_empty_sections(without_stderr(
        nbformat.read(str(executed), as_version=4))))
    atomic_write_text(html_out, page_html(notebook, title))


def write_methods(notebooks: list[tuple[str, Path]], out: str | Path, study: str,
                  text: Path = METHODS_TEXT) -> None:
    """The methods page every round report links: each section's explanation once, after the
    speedups' and intervals' method and the glossary (`text`; `sections.methods_notebook`)."""
    atomic_write_text(out, page_html(methods_notebook(notebooks, Path(text)),
                                     f"Methods — {study}"))


def round_without_data(summary_path: str | Path, round_name: str) -> str | None:
    """A sentence saying why a round has nothing to show (no valid measurement), else None."""
    frame = pd.read_parquet(summary_path, columns=["round", "status", "cell_id"])
    part = frame[frame["round"] == round_name]
    if (part["status"] == "ok").any():
        return None
    if part.empty:
        return ("No measurement of this round yet: none of its cells finished a point (see "
                "the index for each cell's status and why).")
    by_cell = part.groupby("cell_id")["status"].agg(lambda s: ", ".join(sorted(set(s))))
    counts = by_cell.value_counts()
    listed = "; ".join(
        f"{n} cell{'s' if n > 1 else ''}: {status.replace(UNSUPPORTED, 'unsupported here')}"
        for status, n in counts.items())
    return (f"No valid measurement in this round: {listed}. The index lists each cell with "
            "its reason.")


def _note_notebook(title: str, sentence: str):
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(f"# {title}\n\n{sentence}")]
    return notebook


def write_note_report(executed: str | Path, html_out: str | Path, title: str,
                      sentence: str) -> None:
    """A report page that only says, in a sentence, why there is nothing to show."""
    import nbformat

    with atomic_path(executed) as tmp:
        nbformat.write(_note_notebook(title, sentence), str(tmp))
    notebook_to_html(executed, html_out, title)


def render_report(notebook: str | Path, executed: str | Path, html_out: str | Path,
                  tables: SummaryTables, study: str, title: str) -> None:
    """The round's report from the summary stage's tables (the only files it reads); a round
    without a valid measurement gets a page that says so."""
    empty = round_without_data(tables.summary, Path(notebook).stem)
    if empty is not None:
        write_note_report(executed, html_out, title, empty)
        return
    execute_notebook(notebook, executed, {**tables.notebook_parameters(), "study": study})
    notebook_to_html(executed, html_out, title)


def cell_status(cell_output: str | Path) -> tuple[str, str]:
    """(status, detail) of a cell from its files: done, unsupported here (with the reason),
    failed (with the error and its logs), interrupted (points measured, no error recorded), or
    not run."""
    output = Path(cell_output)
    if output.exists():
        try:
            records = read_records(output)
        except (OSError, RecordError) as exc:  # the index still lists the cell, with why
            return "failed", f"its records cannot be read: {first_line(str(exc))}"
        unsupported = [r for r in records if r.get("status") == UNSUPPORTED]
        if records and len(unsupported) == len(records):
            return "unsupported here", unsupported[0]["error"]
        if unsupported:
            return "done", (f"{len(unsupported)} of {len(records)} points unsupported here: "
                            f"{unsupported[0]['error']}")
        return "done", ""
    error = error_output(output)
    if error.exists():
        info = json.loads(error.read_text())
        logs = [info.get("log"), info.get("server_log")]
        if logs[0] is None and logs[1]:  # error files written before sessions
            logs[0] = f"{logs[1].removesuffix('.server.log')}.log"
        logs = [log for log in logs if log]
        return "failed", first_line(info["error"]) + (f" (logs: {', '.join(logs)})"
                                                      if logs else "")
    if partial_output(output).exists():
        return "interrupted", "some points measured, the cell did not finish"
    log = cell_log(output)
    cause = job_cause(log) if log.is_file() else None
    if cause is not None:  # the job failed before the cell could record why
        return "failed", f"{cause} (log: {log})"
    return "not run", ""


def failed_jobs(config: dict, root: str | Path = ".") -> list[dict]:
    """Data and model jobs whose output is missing and whose log holds an error: {job, output,
    log, error} (the error: the exception the job's log ends with)."""
    root = Path(root)
    candidates = []
    used = {d["source"] for d in config["datasets"].values()}
    for name in sorted(used):
        raw = raw_path(name, config["sources"][name])
        candidates.append((f"fetch source {name!r}", raw,
                           layout.FETCH_LOG.format(source=name, file=Path(raw).name)))
    for dataset, definition in config["datasets"].items():
        for subset in subsets_of(definition):
            candidates.append((f"prompt set {dataset}/{subset}",
                               layout.processed_path(dataset, subset),
                               layout.SUBSET_LOG.format(dataset=dataset, subset=subset)))
    for name, model in config["models"].items():
        if model["source"]["kind"] != "path":
            candidates.append((f"model {name!r}", specs.model_dir(config, name),
                               layout.MODEL_LOG.format(model=name)))
    failed = []
    for job, output, log in candidates:
        if not (root / output).exists() and (root / log).is_file():
            error = job_cause(root / log)
            if error is not None:
                failed.append({"job": job, "output": output, "log": log, "error": error})
    return failed


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.done { color: #1a7f37; } .failed, .interrupted, .invalid { color: #b42318; }
.unsupported, .warn { color: #9a6700; }
.missing { color: #888; } .detail { font-size: 0.85em; max-width: 60em; white-space: pre-wrap; }
code { font-size: 0.95em; }
"""


def _row(values, css: str = "") -> str:
    cells = "".join(f"<td>{html.escape(str(v))}</td>" for v in values[:-1])
    return f'<tr>{cells}<td class="{css}">{html.escape(str(values[-1]))}</td></tr>'


def write_index(study: str, reports: dict[str, str], cells: list[tuple[Cell, str]],
                out: str | Path, problem_points: list[dict] | None = None,
                note: str = "", jobs: list[dict] | None = None,
                unpinned: list[str] | None = None, bottom_line: str = "",
                stopped: int = 0) -> None:
    """reports: {title: relative link}; cells: [(cell, path of its records file)];
    problem_points: failed or invalid points (from the summary) to list at the top; jobs:
    failed data and model jobs (`failed_jobs`); unpinned: hub downloads on a moving revision
    (`lock.unpinned`); bottom_line: the rounds' bottom lines (HTML, `index_bottom_line`),
    first on the page; stopped: points the adaptive rule stopped (`stopped_points`)."""
    links = " · ".join(f'<a href="{html.escape(href)}">{html.escape(title)}</a>'
                       for title, href in reports.items())
    rows, problems, counts = [], [], {}
    for cell, output in cells:
        status, detail = cell_status(output)
        counts[status] = counts.get(status, 0) + 1
        server = cell.server_config
        method = cell.speculator + ("" if cell.engine == "serve" else f" ({cell.engine})")
        fields = (shown_round(cell.round, arm_setting(cell.speculator)),
                  server["target"]["name"], cell.workload["name"], method,
                  server["num_speculative_tokens"] or "",
                  ", ".join([*map(str, cell.concurrency),
                             *(f"{r:g}/s" for r in cell.request_rates)]),
                  cell.cell_id)
        css = {"done": "done", "not run": "missing",
               "unsupported here": "unsupported"}.get(status, status)
        rows.append(_row((*fields, status), css))
        if status in ("failed", "interrupted", "unsupported here"):
            problems.append(f'<tr><td><code>{cell.cell_id}</code></td>'
                            f"<td>{html.escape(cell.label)}</td>"
                            f'<td class="{css}">{status}</td>'
                            f'<td class="detail">{html.escape(detail[:2000])}</td></tr>')
    for job in jobs or []:
        problems.append(f"<tr><td>job</td><td>{html.escape(job['job'])}</td>"
                        f'<td class="failed">failed</td>'
                        f'<td class="detail">{html.escape(job["error"])} (log: '
                        f"{html.escape(job['log'])})</td></tr>")
    for point in problem_points or []:
        problems.append(
            f"<tr><td><code>{point['cell_id']}</code></td>"
            f"<td>{html.escape(point['label'])}, {point['level']}</td>"
            f'<td class="invalid">{point["status"]} point</td>'
            f'<td class="detail">{html.escape(str(point["error"]))}</td></tr>')
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    problem_table = (
        "<h2>Problems</h2><p>Failed jobs, cells that did not finish or that this host cannot "
        "run (<em>unsupported here</em>: nothing was measured, the reason says why), and "
        "points that failed or are invalid.</p><table><tr><th>cell</th><th>what</th>"
        "<th>status</th><th>why</th></tr>" + "\n".join(problems) + "</table>"
    ) if problems else "<p>No failed jobs, cells or points; every cell ran on this host.</p>"
    if stopped:
        problem_table += (
            f"<p>{stopped} point{'s' if stopped > 1 else ''} (a load level's repeat) not "
            "measured because the adaptive rule stopped them once their answer was known: no "
            "problem; each round's section \u201cMeasurement spent\u201d says why.</p>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(study)}: reports</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(study)}</h1>
<p>Generated {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}.{html.escape(note)}</p>
{_unpinned_note(unpinned)}
{bottom_line}
<h2>Reports</h2><p>{links} · <a href="{METHODS_PAGE}">methods and glossary</a></p>
{problem_table}
<details><summary><h2 style="display: inline">Cells ({len(cells)}: {summary})</h2></summary>
<p>One cell = one vLLM server configuration × one workload; records in
<code>results/cells/&lt;cell id&gt;.jsonl</code>, server logs in <code>logs/cells/</code>.</p>
<table><tr><th>round</th><th>target</th><th>workload</th><th>method</th><th>k</th>
<th>concurrency</th><th>cell id</th><th>status</th></tr>
{chr(10).join(rows)}
</table></details></body></html>
"""
    atomic_write_text(out, page)


def index_bottom_line(summary, points, reports: dict[str, str], decided) -> str:
    """Each round's bottom line (`decision.bottom_lines`) under its report's title, for the
    rounds with measurements (HTML)."""
    return "\n".join(line.html(heading) for heading, line in
                     bottom_lines(summary, points, decided, reports))


def _unpinned_note(unpinned: list[str] | None) -> str:
    if not unpinned:
        return ""
    items = "".join(f"<li><code>{html.escape(u)}</code></li>" for u in unpinned)
    return ('<p class="warn">Hub downloads on a moving revision (a branch or tag, not a '
            "commit): a later run may measure another checkpoint under the same name. The "
            "commit each download resolved to is in its model card or data manifest; pin them "
            "with <code>python -m sdbench.plan.lock --config &lt;config&gt;</code>.</p>"
            f"<ul>{items}</ul>")


def problem_points(frame) -> list[dict]:
    """Failed or invalid points of a summary table, for the index (unsupported points are
    listed with their cell; points the adaptive rule stopped are no problem: `stopped_points`)."""
    bad = frame[~frame["status"].isin(["ok", UNSUPPORTED, STOPPED])].drop_duplicates(
        ["cell_id", "concurrency", "request_rate", "repeat"])
    return [{"cell_id": r.cell_id, "status": r.status, "error": r.error,
             "level": LoadPoint.of(r.concurrency, r.request_rate, r.repeat, r.engine).level,
             "label": f"{r.speculator}{'' if pd.isna(r.k) else f' k={int(r.k)}'} | "
                      f"{r.target} | {r.workload}"}
            for r in bad.itertuples()]


def stopped_points(frame) -> int:
    """How many points (repeats of a load level) of a summary table the adaptive rule stopped."""
    stopped = frame[frame["status"] == STOPPED]
    return len(stopped.drop_duplicates(["cell_id", "concurrency", "request_rate", "repeat"]))


def salvage(config: dict, cells: list[tuple[Cell, str]], reports: dict[str, str],
            model_dirs: dict[str, str], index: dict | None = None,
            schedules: list[str] = (),
            notebooks: Path = REPO_ROOT / "workflow" / "notebooks") -> None:
    """After a run with failed jobs: every round's report from the points measured (finished
    and unfinished cells), a page saying so for a round without any, and an index that lists
    every failed job, cell and point with its reason; never raises. The same summary stage and
    reports as the rules', on tables named `*.incomplete.*`.

    cells: (cell, records file); reports: title -> page; model_dirs: target -> checkpoint
    (lossless check); index: rounds and settings of the cells (aggregate.apply_index);
    schedules: the dynamic-K schedule files (those that exist are read)."""
    points: list[dict] = []
    stopped = 0
    tables = SummaryTables.of_run(incomplete=True)
    try:
        complete = [o for _, o in cells if Path(o).exists()]
        partial = [partial_output(o) for _, o in cells if partial_output(o).exists()]
        summary = None
        if complete or partial:
            frame, _ = write_tables(tables, complete, partial,
                                    settings(config).loadgen.max_failure_share, model_dirs, index,
                                    [s for s in schedules if Path(s).exists()])
            summary = tables.summary
            points = problem_points(frame)
            stopped = stopped_points(frame)
    except Exception as exc:  # the reports below still say what happened
        summary = None
        print(f"sdbench: could not summarize the failed run's records: {exc}", file=sys.stderr)
    for title, page in reports.items():
        name = page.removesuffix(".html")
        heading = f"{title} (incomplete run) — {config['study']}"
        executed = layout.executed_notebook(f"{name}.incomplete")
        try:
            if summary is None:
                write_note_report(executed, layout.report_page(page), heading,
                                  "No measurement of this run yet: no cell finished a point "
                                  "(see the index for the failed jobs and why).")
            else:
                render_report(notebooks / f"{name}.ipynb", executed, layout.report_page(page),
                              tables, config["study"], title=heading)
        except Exception as exc:
            print(f"sdbench: the {name} report of the failed run could not be rendered: "
                  f"{first_line(str(exc))}", file=sys.stderr)
            try:
                write_note_report(executed, layout.report_page(page), heading,
                                  f"This report could not be rendered: {first_line(str(exc))} "
                                  f"(log: {layout.REPORT_LOG.format(round=name)})")
            except Exception as again:
                print(f"sdbench: not even a note page for {name}: {again}", file=sys.stderr)
    try:  # the page the reports link for each section's method (its rule's, when it ran)
        if not Path(layout.report_page(METHODS_PAGE)).exists():
            write_methods([(title, notebooks / page.replace(".html", ".ipynb"))
                           for title, page in reports.items()],
                          layout.report_page(METHODS_PAGE), config["study"])
    except Exception as exc:
        print(f"sdbench: could not write the methods page: {first_line(str(exc))}",
              file=sys.stderr)
    try:
        write_index(config["study"], reports, cells, layout.report_page("index.html"), points,
                    note=" This run had failed jobs: the reports show what was measured.",
                    jobs=failed_jobs(config), unpinned=lock.unpinned(config),
                    stopped=stopped)
        print("sdbench: reports of the incomplete run: reports/index.html", file=sys.stderr)
    except Exception as exc:  # the run's own error is what matters; report this one briefly
        print(f"sdbench: could not write the index of the failed run: {exc}", file=sys.stderr)
    date_back([layout.report_page(page) for page in ("index.html", *reports.values())])


SALVAGED_MTIME = 1  # 1970-01-01: older than any input


def date_back(pages: list[str]) -> None:
    """Date the salvaged pages back to 1970: Snakemake then finds them older than their inputs
    and a rerun renders the real ones, also when every cell finished and only the summary or a
    report failed (an existing page would otherwise count as done)."""
    for page in pages:
        try:
            os.utime(page, (SALVAGED_MTIME, SALVAGED_MTIME))
        except OSError as exc:  # not written: nothing to date back
            print(f"sdbench: {page}: {exc}", file=sys.stderr)
