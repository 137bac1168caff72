"""The README stays a front page: short, the commands first, every moved topic linked."""

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
    assert headings[:4] == ["Two commands", "The real study (GPU)", "Where the outputs go",
                            "Reading the reports"]
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
