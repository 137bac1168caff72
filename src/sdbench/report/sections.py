"""A round page's shape: the decision first, details on demand.

The round notebooks are written as sections (a `## ` heading cell, its explanation, the code
cells that show its tables and figures). An executed notebook becomes a page in which

- the cells before the first section (title, header, bottom line) and the sections whose
  heading cell is tagged `lead` (what to run, the throughput-latency front) come first, open;
- a contents list follows, linking every section and the methods page;
- every other section is collapsed (`<details>`), its heading the summary;
- a section's explanation (its heading cell's text and the Markdown cells between its code
  cells, unless tagged `keep`) is not on the round page: it is on the methods page
  (`methods.html`, one page for every round, each explanation once), and the section's
  heading links there ("how this is computed").

`sectioned` marks the cells; the offline template (workflow/notebooks/templates) opens and
closes the sections from those marks. `methods_notebook` is the methods page: the notebooks'
own explanations, after the method of speedups and intervals and the glossary
(workflow/notebooks/methods.md).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from sdbench.plan.config import REPO_ROOT

LEAD_TAG = "lead"
KEEP_TAG = "keep"
METHODS_PAGE = "methods.html"
SECTION_KEY = "sdbench_section"  # a heading cell's mark for the template
CLOSE_KEY = "sdbench_close"  # the notebook's mark: what closes its last section
CONTENTS_ID = "contents"


def slug(title: str) -> str:
    """An HTML id from a section title: "Throughput against latency" ->
    "throughput-against-latency"."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _section_title(cell) -> str | None:
    """The title of a `## ` heading cell, else None."""
    if cell.cell_type != "markdown":
        return None
    first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
    return first[3:].strip() if first.startswith("## ") else None


@dataclass(frozen=True)
class Explanation:
    """A section's explanation, as written in a round notebook."""

    title: str
    text: str

    @property
    def id(self) -> str:
        return slug(self.title)


def _split(cells) -> tuple[list, list[list]]:
    """(the cells before the first section, the sections: lists of cells, heading first)."""
    head, sections = [], []
    for cell in cells:
        if _section_title(cell) is not None:
            sections.append([cell])
        elif sections:
            sections[-1].append(cell)
        else:
            head.append(cell)
    return head, sections


def _below_title(heading) -> str:
    """A heading cell's text below its title."""
    return "\n".join(heading.source.strip().splitlines()[1:]).strip()


def _explanation(section: list) -> tuple[str, list]:
    """(a section's explanation text, its cells without it): the heading cell's text below the
    title and the section's other Markdown cells, except cells tagged `keep` (which stay)."""
    heading, rest = section[0], section[1:]
    parts = [] if KEEP_TAG in _tags(heading) else [_below_title(heading)]
    kept = []
    for cell in rest:
        if cell.cell_type == "markdown" and KEEP_TAG not in _tags(cell):
            parts.append(cell.source.strip())
        else:
            kept.append(cell)
    return "\n\n".join(p for p in parts if p), kept


def explanations(notebook) -> list[Explanation]:
    """Each section's explanation in a notebook (the methods page's text), in order."""
    _, sections = _split(notebook.cells)
    out = []
    for section in sections:
        text, _ = _explanation(section)
        if text:
            out.append(Explanation(_section_title(section[0]), text))
    return out


def _markdown_cell(source: str, metadata: dict | None = None):
    import nbformat

    cell = nbformat.v4.new_markdown_cell(source)
    cell.metadata.update(metadata or {})
    return cell


def contents_cell(titles: list[str]):
    """The contents list: a link to each section and to the methods page."""
    links = " · ".join(f'<a href="#{slug(t)}">{html.escape(t)}</a>' for t in titles)
    return _markdown_cell(
        f'<nav id="{CONTENTS_ID}"><strong>Details</strong> (each opens on a click): {links}. '
        f'How each is computed, and the terms used: <a href="{METHODS_PAGE}">methods</a>.'
        "</nav>")


def sectioned(notebook):
    """The executed notebook marked for the page (see the module): lead sections open, the
    contents list after them, every other section collapsed, explanations replaced by a link
    to the methods page. A notebook without sections is returned as it is."""
    head, sections = _split(notebook.cells)
    if not sections:
        return notebook
    lead = [s for s in sections if LEAD_TAG in _tags(s[0])]
    rest = [s for s in sections if LEAD_TAG not in _tags(s[0])]
    cells, closing = list(head), ""
    for index, section in enumerate(lead + rest):
        title = _section_title(section[0])
        text, kept = _explanation(section)
        body = _below_title(section[0]) if KEEP_TAG in _tags(section[0]) else ""
        opened = index < len(lead)
        if index == len(lead):
            cells.append(contents_cell([_section_title(s[0]) for s in rest]))
        cells.append(_markdown_cell(body, {SECTION_KEY: {
            "id": slug(title), "title": title, "open": opened, "after": closing,
            "how": f"{METHODS_PAGE}#{slug(title)}" if text and not body else ""}}))
        cells += kept
        closing = "</section>" if opened else "</details>"
    notebook.cells = cells
    notebook.metadata[CLOSE_KEY] = closing
    return notebook


METHODS_TEXT = REPO_ROOT / "workflow" / "notebooks" / "methods.md"


def methods_notebook(notebooks: list[tuple[str, Path]], text: Path = METHODS_TEXT):
    """The methods page as a notebook: `text` (speedups, intervals, the glossary), then each
    section's explanation once
    (`notebooks`: (round title, notebook file)); where rounds explain a section differently,
    each round's text under its name."""
    import nbformat

    by_id: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for round_title, path in notebooks:
        for item in explanations(nbformat.read(str(path), as_version=4)):
            title, texts = by_id.setdefault(item.id, (item.title, []))
            if all(text != item.text for _, text in texts):
                texts.append((round_title, item.text))
    page = nbformat.v4.new_notebook()
    page.cells = [_markdown_cell(
        "# Methods: how each section is computed\n\nEach round report links its sections "
        "here. Terms are defined once, in the glossary below."),
        _markdown_cell(text.read_text(encoding="utf-8"))]
    for section_id, (title, texts) in by_id.items():
        parts = [f'<h2 id="{section_id}">{html.escape(title)}</h2>']
        if len(texts) == 1:
            parts.append(texts[0][1])
        else:
            parts += [f"**{round_title}.** {text}" for round_title, text in texts]
        page.cells.append(_markdown_cell("\n\n".join(parts)))
    return page
