"""The check of rendered pages and result tables (`report.audit`) finds what a reader must never
see, and the pieces it reads (marked verdicts, sections) are what the pages render."""

from __future__ import annotations

import pandas as pd

from sdbench.report import audit
from sdbench.report.show import marked_verdict, point_key

POINT = point_key("t", "w", 1, "ngram", 3)


def _page(tmp_path, name: str, body: str):
    page = tmp_path / name
    page.write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
    return page


def test_a_page_with_meaningless_numbers_long_paragraphs_or_raw_ids_is_caught(tmp_path):
    long = " ".join(["word"] * 81)
    page = _page(tmp_path, "round1.html", (
        "<p>ngram: 1.20× [-0.44, 2.10] over repeats.</p>"
        "<li>gain 0.35× [≤−1.40, >1.09]</li>"
        f"<p>{long}</p>"
        "<p>cell 22fa08119e7c ran it; set <code>loadgen.request_seed</code>.</p>"
        # the same in a table is no prose; an interval inside its range is fine
        "<table><tr><td>22fa08119e7c</td><td>loadgen.request_seed</td></tr></table>"
        "<p>ngram: 0.66× [0.53, 0.84].</p>"))
    found = [p.what for p in audit.page_problems(page)]
    assert any("[-0.44, 2.10]" in f for f in found)
    assert any("[≤−1.40, >1.09]" in f for f in found)
    assert any(f.startswith("a paragraph of 81 words") for f in found)
    assert "a raw cell id in prose: 22fa08119e7c" in found
    assert "a config key in prose: loadgen.request_seed" in found
    assert len(found) == 5, found
    # the methods page explains config keys, in paragraphs as short as a round page's
    methods = _page(tmp_path, "methods.html", f"<p>{long}</p><p>set loadgen.request_seed</p>")
    assert [p.what for p in audit.page_problems(methods)] == [
        "a paragraph of 81 words: " + " ".join(["word"] * 12) + " …"]


def test_a_point_given_two_verdicts_or_a_choice_a_point_contradicts_is_caught(tmp_path):
    points = pd.DataFrame({"target": ["t"], "workload": ["w"], "concurrency": [1],
                           "speculator": ["ngram"], "k": [3], "setting": ["default"],
                           "verdict": ["no clear gain"]})
    from sdbench.analyze.decisions import RECOMMENDATION, combine

    decided = combine([pd.DataFrame({"target": ["t"], "workload": ["w"], "concurrency": [1],
                                     "verdict": ["speculate"], "decision": [RECOMMENDATION],
                                     "round": ["round1"]})])
    first = _page(tmp_path, "round1.html", str(marked_verdict(
        "speculation pays", point=POINT, verdict="speculate",
        decision="t | w | c=1", choice="speculate")))
    second = _page(tmp_path, "index.html", str(marked_verdict("no clear gain", point=POINT,
                                                              verdict="no clear gain")))
    found = [str(p) for p in audit.verdict_problems([first, second], points, decided)]
    assert any(f"{POINT} has two verdicts" in f for f in found), found
    assert any("speculate, but no point there is clearly above 1" in f for f in found), found
    # one verdict, the tables' own: nothing to say
    agreed = points.assign(verdict="speculate")
    assert audit.verdict_problems([first], agreed, decided) == []


def test_tables_with_a_ratio_bound_at_or_below_0_or_an_interval_on_1_df_are_caught():
    points = pd.DataFrame({"cell_id": ["a", "b"], "concurrency": [1, 4],
                           "speedup_ci_low": [0.8, 0.9], "speedup_ci_high": [1.2, 1.1],
                           "speedup_unpooled_ci_low": [-0.44, 0.9], "speedup_df": [5.0, 1.0]})
    decided = pd.DataFrame({"decision": []})
    found = [str(p) for p in audit.table_problems(points, decided)]
    assert found == ["summary_points: speedup_unpooled_ci_low reaches -0.44 (≤ 0)",
                     "summary_points: b c=4: an interval on 1.0 degrees of freedom"]
