"""The README stays a front page: short, the commands first, every moved topic linked; the
docs quote generated tables as generated."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _links(path: Path) -> list[str]:
    return [target for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
            if not target.startswith(("http://", "https://"))]


def test_the_readme_is_a_short_front_page():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    headings = re.findall(r"^## (.+)$", text, re.M)
    # the two commands, the GPU commands and the report guide come before anything else
    assert headings[:5] == ["Two commands", "Your own service", "The real study (GPU)",
                            "Where the outputs go", "Reading the reports"]
    for command in ("make demo", "make test", "snakemake --cores all --resources gpu=",
                    "snakemake --profile profiles/slurm", "make plan"):
        assert command in text.split("## Where the outputs go")[0], command


def test_every_topic_moved_out_of_the_readme_is_linked_and_exists():
    linked = {target for target in _links(REPO / "README.md")}
    topics = {"docs/demo.md", "docs/real-study.md", "docs/sessions.md", "docs/outputs.md",
              "docs/methodology.md", "docs/configuration.md", "docs/data.md", "docs/hosts.md",
              "docs/development.md", "docs/validation.md"}
    assert topics <= linked
    assert {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")} <= linked
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for target in _links(doc):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is missing"


def _rows(text: str, columns: int) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and line.count("|") == columns + 1
            and not line.startswith(("| design", "| noise"))]


def test_the_methodologys_simulated_ranges_are_the_generated_tables():
    """The coverage ranges docs/methodology.md quotes for the real config's design are those
    of docs/precision-simulation.md (`python -m sdbench.analyze.simulate` writes it)."""
    table = (REPO / "docs" / "precision-simulation.md").read_text()
    head, derived = table.split("## The crossover and the switch gain")
    rows = _rows(head, 9)
    text = " ".join((REPO / "docs" / "methodology.md").read_text().split())

    def span(values) -> str:
        values = sorted(float(v.rstrip("%")) for v in values)
        return f"{values[0]:.1f}-{values[-1]:.1f} %"

    chained = [r for r in rows if r[0] == "chained (every repeat on a start of its own), 3 repeats"]
    probe = [r for r in rows if "instance probe of 3 starts" in r[0]]
    tails = [r for r in rows if "heavy tails" in r[0]]
    assert len(chained) == 6 and len(probe) == 6 and len(tails) == 6
    for quoted in (span(r[3] for r in chained), span(r[5] for r in chained),
                   span(r[7] for r in chained), span(r[3] for r in probe),
                   span(r[3] for r in tails), span(r[5] for r in tails)):
        assert quoted in text, quoted
    crossing = [r for r in _rows(derived, 8) if r[0].startswith("chained")]
    assert span(r[4] for r in crossing) in text and span(r[5] for r in crossing) in text
    halves = [float(x.rstrip("%")) for r in rows if "3x noisier" in r[0]
              for x in r[4].split(" / ")]
    assert f"at least {min(halves):.1f} %" in text


def test_the_methodology_quotes_the_adaptive_design_through_the_summarys_intervals():
    """The rows docs/methodology.md quotes of docs/adaptive-simulation.md's second table
    (`python -m sdbench.analyze.sweep_check` writes it): the priors at config/config.yaml's
    noise, at half and twice the truth."""
    table = (REPO / "docs" / "adaptive-simulation.md").read_text()
    rows = _rows(table.split("## Through the summary's intervals")[1], 6)
    text = " ".join((REPO / "docs" / "methodology.md").read_text().split())
    quoted = [r for r in rows if r[0].startswith("instance noise 2%, run noise 4%")]
    assert len(quoted) == 3
    half, same, twice = ([c.replace("%", " %") for c in row] for row in quoted)
    assert (f"coverage {same[1]} and the full design's verdict at {same[2]} of the points, for "
            f"{same[4]} of its point-repeats") in text
    for row in (half, twice):
        assert f"{row[1]}, {row[2]}, {row[4]}" in text, row
    agree = sorted(float(r[2].rstrip("%")) for r in rows)
    assert f"{agree[0]:.1f}-{agree[-1]:.1f} % of the verdicts kept" in text


def test_every_make_plan_figure_in_the_docs_is_what_the_command_prints(tmp_path):
    """README.md and docs/ quote `make plan` only in blocks that `python -m
    sdbench.plan.excerpts` writes from the command's output, and each quoted line is one the
    command prints today; a plan line quoted anywhere else (outside the dated records under
    docs/runs/) is an error."""
    from sdbench.plan import excerpts

    assert excerpts.stale(str(tmp_path)) == []
    quoted = 0
    for path in excerpts.documents():
        text = path.read_text()
        lines = text.split("\n")
        marked = {j for _, block in excerpts.blocks(text) for j in block}
        quoted += len(marked)
        if "runs" in path.relative_to(REPO).parts:
            continue
        for j, line in enumerate(lines):
            if re.match(r"\s*(server starts: \d|projected GPU-hours: start-up \d)", line):
                assert j in marked, f"{path.relative_to(REPO)}:{j + 1} quotes make plan " \
                    "outside a block python -m sdbench.plan.excerpts writes"
    assert quoted >= 6


def test_the_guides_and_configs_state_no_dates():
    """README.md, docs/*.md, the run records' index and the configs say what is true now: a
    date belongs to a run record in docs/runs/, which states it in its first lines and which
    the guides reach through docs/runs/README.md by topic."""
    date = re.compile(r"20\d\d-\d\d-\d\d")
    runs = REPO / "docs" / "runs"
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md"), runs / "README.md",
             *(REPO / "config").rglob("*.yaml")]
    dated = [f"{page.relative_to(REPO)}:{n}: {line.strip()[:80]}"
             for page in pages for n, line in enumerate(page.read_text().splitlines(), 1)
             if date.search(line)]
    assert not dated, "\n".join(dated)
    # every record is dated in its first lines and listed in the index the guides link to
    index = (runs / "README.md").read_text()
    records = sorted(r for r in runs.glob("*.md") if r.name != "README.md")
    assert records and all(f"]({r.name})" in index for r in records)
    undated = [r.name for r in records
               if not date.search("\n".join(r.read_text().splitlines()[:8]))]
    assert not undated, undated
