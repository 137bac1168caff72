"""A check of the rendered reports and the tables in results/ for what a reader must never see:

- a point given two verdicts: every verdict a page renders is marked with the point (and for a
  recommendation, the decision) it is about (`show.marked_verdict`); each point and decision
  has one verdict across all pages, the same as the summary's tables, and no recommendation
  contradicts a point's own verdict;
- an interval bound outside its quantity's range: a ratio (speedup, gain) bound at or below 0
  in a page or in any ratio column of the tables;
- an interval from fewer than 2 degrees of freedom;
- a paragraph over 80 words, on any page;
- a raw cell id in prose, or a config key in a decision page's prose (tables may name cells;
  the methods page is where config keys are explained).

    python -m sdbench.report.audit [--reports reports] [--results results]

prints one line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sdbench.analyze.decisions import RECOMMENDATION, of_kind
from sdbench.analyze.stats import MIN_INTERVAL_DF
from sdbench.report.sections import METHODS_PAGE
from sdbench.report.show import decision_key, point_key, verdict_class

MAX_WORDS = 80
# a ratio's interval as pages print it: "1.23× [1.10, 1.35]"
RATIO_INTERVAL = re.compile(r"(-?[\d.,]+)× \[(≤?-?−?[\d.,]+), (>?-?−?[\d.,e+]+)\]")
CELL_ID = re.compile(r"\b[0-9a-f]{12}\b")
# a dotted config key (`loadgen.max_failure_share`, `round3.settings`) or one in code type
CONFIG_KEY = re.compile(r"\b(?:loadgen|cells|adaptive|round[123]|models|data|hosts|slo|"
                        r"instance_probe|dynamic_k)\.[a-z_]+")
# the ratio columns of the tables whose bounds must stay above 0
RATIO_BOUNDS = re.compile(r"(speedup|gain)[a-z_]*_ci_(low|high)$")


@dataclass(frozen=True)
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def _soup(page: Path):
    """The page parsed, once per version of it (the page and the verdict checks both read it)."""
    return _parsed(str(page), page.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _parsed(page: str, _version: int):
    from bs4 import BeautifulSoup

    return BeautifulSoup(Path(page).read_text(encoding="utf-8"), "html.parser")


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-").lstrip("≤>"))


def _prose(soup) -> list:
    """The page's paragraphs a person reads: p, li and figure captions outside tables."""
    return [el for el in soup.find_all(["p", "li", "figcaption"])
            if el.find_parent("table") is None]


def page_problems(page: Path) -> list[Problem]:
    """What a rendered page must not show (the module's list; config keys are allowed on the
    methods page only)."""
    soup = _soup(page)
    problems = []
    text = soup.get_text(" ")
    for mean, low, high in RATIO_INTERVAL.findall(text):
        if _number(low) <= 0 or low.startswith("≤") or high.startswith(">"):
            problems.append(Problem(page.name, f"a ratio interval outside its range: "
                                               f"{mean}× [{low}, {high}]"))
    for el in _prose(soup):
        words = el.get_text(" ").split()
        if el.find(["p", "li"]) is None and len(words) > MAX_WORDS:
            problems.append(Problem(page.name, f"a paragraph of {len(words)} words: "
                                               f"{' '.join(words[:12])} …"))
        for found in CELL_ID.findall(el.get_text(" ")):
            problems.append(Problem(page.name, f"a raw cell id in prose: {found}"))
        if page.name == METHODS_PAGE:
            continue
        for found in CONFIG_KEY.findall(el.get_text(" ")):
            problems.append(Problem(page.name, f"a config key in prose: {found}"))
    return problems


def rendered_verdicts(pages: list[Path]) -> tuple[dict, dict]:
    """(point -> {verdict class: pages}, decision -> {choice: pages}) of every marked verdict."""
    points: dict[str, dict[str, set]] = {}
    decisions: dict[str, dict[str, set]] = {}
    for page in pages:
        for el in _soup(page).find_all(class_="sdbench-verdict"):
            if el.get("data-point") and el.get("data-verdict"):
                points.setdefault(el["data-point"], {}).setdefault(
                    el["data-verdict"], set()).add(page.name)
            if el.get("data-decision") and el.get("data-choice"):
                decisions.setdefault(el["data-decision"], {}).setdefault(
                    el["data-choice"], set()).add(page.name)
    return points, decisions


def table_verdicts(points: pd.DataFrame, decided: pd.DataFrame) -> tuple[dict, dict]:
    """(point -> verdict class, decision -> choice) from the summary's tables: the points' own
    verdicts and the recommendations (the decisions table)."""
    by_point = {}
    for _, row in points[points["verdict"].notna()].iterrows():
        by_point[point_key(row["target"], row["workload"], row["concurrency"],
                           row["speculator"], row["k"], row.get("setting"))] = \
            verdict_class(row["verdict"])
    by_decision = {}
    for _, row in of_kind(decided, RECOMMENDATION).iterrows():
        by_decision[decision_key(row["target"], row["workload"], row["concurrency"])] = \
            verdict_class(row["verdict"])
    return by_point, by_decision


def verdict_problems(pages: list[Path], points: pd.DataFrame,
                     decided: pd.DataFrame) -> list[Problem]:
    """A point or decision given two verdicts across the pages, or one the tables do not give;
    a recommendation that contradicts a point's own verdict (speculate where no point at that
    load is clearly above 1; speculation off where one is)."""
    problems = []
    shown_points, shown_decisions = rendered_verdicts(pages)
    own, chosen = table_verdicts(points, decided)
    for kind, shown, table in (("point", shown_points, own),
                               ("decision", shown_decisions, chosen)):
        for key, verdicts in shown.items():
            if len(verdicts) > 1:
                said = "; ".join(f"{v} on {', '.join(sorted(p))}" for v, p in verdicts.items())
                problems.append(Problem(kind, f"{key} has two verdicts: {said}"))
            elif key in table and set(verdicts) != {table[key]}:
                problems.append(Problem(kind, f"{key}: pages say {next(iter(verdicts))}, the "
                                              f"tables {table[key]}"))
    for decision, choice in chosen.items():
        level = [v for key, v in own.items() if key.startswith(decision + " | ")]
        if choice == "gain" and "gain" not in level:
            problems.append(Problem("decision", f"{decision}: speculate, but no point there is "
                                                "clearly above 1"))
        if choice == "loss" and "gain" in level:
            problems.append(Problem("decision", f"{decision}: speculation off, but a point "
                                                "there is clearly above 1"))
    return problems


def table_problems(points: pd.DataFrame, decided: pd.DataFrame) -> list[Problem]:
    """Ratio bounds at or below 0 in any ratio column of the points and decisions tables, and
    a speedup interval on fewer than 2 degrees of freedom."""
    problems = []
    # (the switch gain's `gain_*` is a signed share, a recommendation's a ratio)
    for name, table in (("summary_points", points),
                        ("decisions", of_kind(decided, RECOMMENDATION))):
        for column in [c for c in table.columns if RATIO_BOUNDS.search(c)]:
            values = pd.to_numeric(table[column], errors="coerce")
            if (values <= 0).any():
                problems.append(Problem(name, f"{column} reaches {values.min():.3g} (≤ 0)"))
    if "speedup_df" in points:
        thin = points[(points["speedup_df"] < MIN_INTERVAL_DF) & points["speedup_ci_low"].notna()]
        for _, row in thin.iterrows():
            problems.append(Problem("summary_points", f"{row['cell_id']} c={row['concurrency']}: "
                                                      f"an interval on {row['speedup_df']:.1f} "
                                                      "degrees of freedom"))
    return problems


def audit(reports: Path, results: Path) -> list[Problem]:
    """Every problem of the rendered pages under `reports` and the tables under `results`."""
    pages = sorted(reports.glob("*.html"))
    points = pd.read_parquet(results / "summary_points.parquet")
    decided = pd.read_parquet(results / "decisions.parquet")
    problems = [p for page in pages for p in page_problems(page)]
    return problems + verdict_problems(pages, points, decided) + table_problems(points, decided)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, default=Path("reports"))
    parser.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    problems = audit(args.reports, args.results)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s) in {args.reports}/*.html and {args.results}/",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
