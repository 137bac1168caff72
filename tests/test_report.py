import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sdbench import layout
from sdbench.analyze.aggregate import apply_index, summarize
from sdbench.analyze.point_intervals import aggregate_points
from sdbench.analyze.summary import write_frames
from sdbench.files import write_jsonl
from sdbench.layout import SummaryTables
from sdbench.report import plots, point_tables, show
from sdbench.report.pages import render_report, write_index

from helpers import record


def synthetic_summary(tmp_path):
    """vanilla + ngram k=2,4 at concurrency 1 and 4, two repeats each."""
    rows = []
    for c, base in ((1, 100.0), (4, 300.0)):
        for repeat, noise in ((0, 1.0), (1, 1.02)):
            rows.append(record("base", "vanilla", c, base * noise, repeat=repeat))
            for k, gain in ((2, 1.4), (4, 1.1)):
                r = record(f"ng{k}", "ngram", c, base * noise * gain / c, baseline="base", k=k,
                           repeat=repeat)
                r["metrics"].update(spec_decode_acceptance_rate=60.0,
                                    spec_decode_acceptance_length=2.2, mean_ttft_ms=30.0,
                                    spec_decode_num_drafts=100 // c ** 2,
                                    spec_decode_draft_tokens=100 // c ** 2 * k,
                                    spec_decode_accepted_tokens=60 // c ** 2 * k)
                rows.append(r)
    write_jsonl(tmp_path / "cells.jsonl", rows)
    frame = apply_index(summarize([tmp_path / "cells.jsonl"]), None)
    points = aggregate_points(frame)
    write_frames(tables_in(tmp_path), frame, points, root=tmp_path)
    return frame, points


def tables_in(root) -> SummaryTables:
    """The summary stage's tables under root."""
    return SummaryTables(**{name: str(root / Path(path).name)
                            for name, path in SummaryTables().as_dict().items()})


def render_round1(tmp_path, repo) -> str:
    """The round 1 report of the summary tables in tmp_path, as HTML."""
    html_out = tmp_path / "round1.html"
    render_report(repo / "workflow" / "notebooks" / "round1.ipynb", tmp_path / "executed.ipynb",
                  html_out, tables_in(tmp_path), "unit test", title="Round 1 — unit test")
    return html_out.read_text()


def test_max_speedup_table_names_k_concurrency_and_interval(tmp_path):
    _, points = synthetic_summary(tmp_path)
    cell = plots.max_speedup_table(points).loc["ngram", "w"]
    # (every repeat of the synthetic summary gives 1.40: an interval without width is none)
    assert cell.startswith("1.40× (") and cell.endswith("(k=2, c=1)")
    # a method that is no setting to deploy says so where its best number stands
    checked = plots.max_speedup_table(points.assign(role="pipeline check"))
    assert list(checked.index) == ["ngram (pipeline check)"]


def test_round1_report_is_offline_html_without_code(tmp_path, repo):
    synthetic_summary(tmp_path)
    page = render_round1(tmp_path, repo)
    assert "Best speedup per method and workload" in page and "1.40×" in page
    assert "Precision: what this design can resolve" in page and "detects ≥" in page
    assert "crossover" in page.lower()
    # the decision first: the bottom line, what to run and the front open, in that order;
    # then the contents list, then every other section collapsed, its method a link away
    lead = [page.index(f'id="{i}"') for i in ("bottom-line", "what-to-run",
                                               "throughput-against-latency", "contents")]
    assert lead == sorted(lead)
    assert re.search(r'<section[^>]* id="what-to-run"', page)
    assert re.search(r'<details[^>]* id="best-speedup-per-method-and-workload"', page)
    assert page.index('id="contents"') < page.index("<details ")
    assert 'href="methods.html#best-speedup-per-method-and-workload"' in page
    # the section's method is on the methods page, not here
    assert "the highest mean speedup over the k × concurrency sweep" not in page
    assert "unit test" in page
    assert "<title>Round 1 — unit test</title>" in page
    assert len(re.findall(r'<img[^>]+src="data:image/png;base64', page)) >= 3
    assert not re.search(r'<script[^>]+src="https?://', page)   # opens offline
    assert "import pandas" not in page and "plots.max_speedup_table" not in page  # no code
    # tables a team can read: no row numbers, "–" where nothing applies, no raw NaN or long
    # floats, and every table inside a box that scrolls instead of widening the page
    tables = re.findall(r"<table.*?</table>", page, re.S)
    assert len(tables) >= 5
    assert page.count('class="sdbench-table" style="overflow-x: auto') == len(tables)
    for table in tables:
        assert not re.search(r"<th>\s*\d+\s*</th>", table)  # no 0, 1, 2 row index
        assert not re.search(r">\s*(NaN|nan|&lt;NA&gt;|None)\s*<", table)
        assert not re.search(r">\s*-?\d+\.\d{4,}\s*<", table)


def test_report_cells_read_as_a_reader_wants_them():
    import numpy as np
    import pandas as pd

    assert [show.cell_text(v) for v in (None, np.nan, pd.NA, 5.357143, 0.454283, 12035.2,
                                         6.0, 24, 123456, True, "ngram k=3")] == [
        "–", "–", "–", "5.36", "0.454", "12,035", "6", "24", "123,456", "yes", "ngram k=3"]
    # a concurrency: a measured level whole, an interpolated one with one decimal
    from sdbench.analyze.stats import interval_number, level_text
    assert [level_text(v) for v in (24.0, 5.66, 1.0)] == ["24", "5.7", "1"]
    # an interval bound: two decimals, significant digits where those would read 0.00
    assert [interval_number(v) for v in (1.234, 0.00123, 6.2e30)] == ["1.23", "0.00123",
                                                                      "6.2e+30"]
    table = pd.DataFrame({"speedup": [1.5, None]}, index=pd.Index(["a", "b"], name="method"))
    html = show.table_html(table)
    # a meaningful index becomes a column; a row counter never shows
    assert "<th>method</th>" in html and "<td>a</td>" in html and "<td>–</td>" in html
    assert "<th>0</th>" not in show.table_html(table.reset_index())
    # a pivot's column name heads no empty column of its own
    pivot = pd.DataFrame({"0.25k": [1.5]}, index=pd.Index(["ngram"], name="method"))
    pivot.columns.name = "bucket"
    assert "<th>bucket</th>" not in show.table_html(pivot)
    assert "<th>method</th>" in show.table_html(pivot)


def test_the_points_table_shows_shares_as_percentages_and_leaves_out_what_never_applies(
        tmp_path):
    frame, points = synthetic_summary(tmp_path)
    table = point_tables.points_table(points)
    spec = table[table["method"] == "ngram"]
    # the acceptance rate pooled by draft count (60 % from 2 x 100 drafts; at concurrency 4
    # from 2 x 6 drafts: too few to show) and the efficiency (speedup ÷ acceptance length)
    assert spec.groupby("concurrency")["acceptance (pooled)"].agg(set).to_dict() == {
        1: {"60 %"}, 4: {"– (12 drafts)"}}
    assert set(spec["requests / output tokens / drafts"]) >= {"– / – / 200", "– / – / 12"}
    assert all(text.endswith(" %") for text in spec["speedup ÷ acceptance length"])
    assert set(table.loc[table["method"] == "vanilla", "speedup ÷ acceptance length"]) == {"–"}
    # nothing applies to any point (one round, no pair issue, no energy on a CPU): left out
    for absent in ("round", "pair issue", "mJ / output token", "repeats ok", "acceptance %",
                   "interval covers"):
        assert absent not in table, absent
    assert set(table["status (repeats ok)"]) == {"ok (2/2)"}
    two_rounds = point_tables.points_table(pd.concat([points, points.assign(round="round3")]))
    assert "round" in two_rounds


def test_latency_lines_are_one_per_target_and_setting(tmp_path):
    """Two targets' runs without speculation are two lines, not one averaged "vanilla"."""
    frame, _ = synthetic_summary(tmp_path)
    other = frame.assign(target="t2", mean_tpot_ms=frame["mean_tpot_ms"] * 3)
    fig = plots.latency_plot(pd.concat([frame, other]), "mean_tpot_ms")
    labels = {text.get_text() for text in fig.legends[0].get_texts()}
    assert {"t: vanilla", "t2: vanilla", "t: ngram k=2", "t2: ngram k=4"} <= labels
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_latency_lines_keep_a_simulated_settings_long_label_readable(tmp_path):
    """A simulated setting's label names its acceptance's source (a DFlash cell on an H200 had
    a 170-character one and its round 1 report failed to render: seaborn's legend was wider
    than the figure). Wrapped, the figure draws and every legend line fits."""
    import matplotlib.pyplot as plt

    frame, _ = synthetic_summary(tmp_path)
    source = ("Red Hat AI's Qwen3-8B DFlash speculator (via a summary): 3.74 accepted tokens "
              "per step on math reasoning, measured on a benchmark of many task groups")
    spec = frame["method"] != "vanilla"
    frame.loc[spec, "spec_options"] = json.dumps(
        {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.74})
    frame.loc[spec, "acceptance_source"] = source
    fig = plots.latency_plot(frame, "mean_tpot_ms")
    texts = [text.get_text() for text in fig.legends[0].get_texts()]
    assert any("simulated" in text and "Red Hat AI" in text for text in texts)
    assert max(len(line) for text in texts for line in text.splitlines()) <= show.LEGEND_WIDTH
    fig.savefig(tmp_path / "latency.png")
    plt.close(fig)


def test_load_axes_tick_the_levels_measured():
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2)
    show.level_axis(ax1, [1, 2, 4, 24])
    assert ax1.get_xscale() == "log"
    assert [t.get_text() for t in ax1.get_xticklabels()] == ["1", "2", "4", "24"]
    show.level_axis(ax2, [2.0], scale_log2=False)  # one request rate: not a 1.9-2.1 axis
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["2"]
    assert ax2.get_xlim() == (1.0, 3.0)
    plt.close(fig)


def test_index_lists_cells_with_status_and_problems(tmp_path, demo_config):
    from sdbench.plan import grid

    cells = grid.all_cells(demo_config)
    write_jsonl(tmp_path / f"{cells[0].cell_id}.jsonl", [record(cells[0].cell_id, "vanilla", 1,
                                                                  100.0)])
    (tmp_path / f"{cells[1].cell_id}.jsonl.partial").write_text("{}\n")
    (tmp_path / f"{cells[3].cell_id}.jsonl").write_text("{}\n")  # not a record: damaged
    (tmp_path / f"{cells[2].cell_id}.error.json").write_text(json.dumps(
        {"error": "ServerError: vLLM server exited with code 1 during start-up"}))
    out = tmp_path / "index.html"
    invalid = {"cell_id": cells[0].cell_id, "status": "invalid", "level": "concurrency 4",
               "label": cells[0].label, "error": "3 of 8 requests failed"}
    write_index("demo", {"Round 1": "round1.html"},
                [(c, tmp_path / f"{c.cell_id}.jsonl") for c in cells], out, [invalid])
    page = out.read_text()
    assert '<a href="round1.html">Round 1</a>' in page
    cells_table = page.split(">Cells (")[1]
    assert cells_table.count("<tr>") == len(cells) + 1
    assert f"1 done, 2 failed, 1 interrupted, {len(cells) - 4} not run" in page
    problems = page.split("<h2>Problems</h2>")[1].split("<h2>")[0]
    assert "its records cannot be read" in problems and "cell_id" in problems
    assert "exited with code 1 during start-up" in problems
    assert "3 of 8 requests failed" in problems and "concurrency 4" in problems
    assert cells[1].cell_id in problems  # the interrupted one


def test_points_the_rule_stopped_are_no_problem_in_the_index(tmp_path):
    from sdbench.report.pages import problem_points, stopped_points

    summary = pd.DataFrame({
        "cell_id": ["a", "a", "a", "b"], "status": ["ok", "stopped", "stopped", "invalid"],
        "concurrency": [1, 1, 1, 4], "request_rate": [None] * 4, "repeat": [0, 1, 2, 0],
        "engine": ["serve"] * 4, "error": [None, "stopped after 1 of 3 repeats: settled",
                                           "stopped after 1 of 3 repeats: settled", "2 failed"],
        "speculator": ["ngram"] * 4, "k": [3] * 4, "target": ["t"] * 4, "workload": ["w"] * 4})
    assert [p["cell_id"] for p in problem_points(summary)] == ["b"]
    assert stopped_points(summary) == 2
    out = tmp_path / "index.html"
    write_index("demo", {}, [], out, stopped=stopped_points(summary))
    assert "2 points (a load level's repeat) not measured because the adaptive rule" in (
        out.read_text())


def test_a_kernel_that_dies_at_start_is_started_again(tmp_path, monkeypatch):
    import papermill

    from sdbench.report import pages as report

    calls = []

    def flaky(notebook, output, **kwargs):
        calls.append(output)
        if len(calls) == 1:  # two kernels raced for a port
            raise RuntimeError("Kernel died before replying to kernel_info")
        Path(output).write_text("{}")

    monkeypatch.setattr(papermill, "execute_notebook", flaky)
    report.execute_notebook("nb.ipynb", tmp_path / "out.ipynb", {})
    assert len(calls) == 2 and (tmp_path / "out.ipynb").read_text() == "{}"

    def broken(notebook, output, **kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(papermill, "execute_notebook", broken)
    with pytest.raises(RuntimeError, match="Kernel died"):
        report.execute_notebook("nb.ipynb", tmp_path / "other.ipynb", {})
    assert not (tmp_path / "other.ipynb").exists()


def test_energy_per_token_is_paired_with_its_baseline_and_shown_next_to_speedup(tmp_path):
    rows = []
    for repeat, noise in ((0, 1.0), (1, 1.1)):
        base = record("base", "vanilla", 1, 100.0, repeat=repeat)
        spec = record("ng", "ngram", 1, 150.0, baseline="base", k=2, repeat=repeat)
        # GPU readings: speculation uses 0.2 J per token, no speculation 0.3 (x noise)
        base["metrics"].update(energy_per_output_token_j=0.3 * noise, gpu_avg_power_w=200.0,
                               gpu_util_pct=80.0)
        spec["metrics"].update(energy_per_output_token_j=0.2 * noise, gpu_avg_power_w=210.0,
                               gpu_util_pct=60.0)
        rows += [base, spec]
    write_jsonl(tmp_path / "cells.jsonl", rows)
    points = aggregate_points(apply_index(summarize([tmp_path / "cells.jsonl"]), None))
    spec_point = points[points["speculator"] == "ngram"].iloc[0]
    assert spec_point["energy_gain_mean"] == pytest.approx(1.5)
    table = point_tables.energy_table(points)
    row = table[table["method"] == "ngram"].iloc[0]
    assert row["speedup"].startswith("1.50×")
    assert row["energy / output token"].startswith("210.00 mJ [")
    assert row["energy gain"] == "1.50×"  # every repeat 1.50: an interval without width
    # CPU records carry no readings: no table, and no zero anywhere
    for r in rows:
        for key in ("energy_per_output_token_j", "gpu_avg_power_w", "gpu_util_pct"):
            r["metrics"][key] = None
    write_jsonl(tmp_path / "cpu.jsonl", rows)
    cpu = aggregate_points(apply_index(summarize([tmp_path / "cpu.jsonl"]), None))
    assert point_tables.energy_table(cpu).empty
    assert cpu["energy_gain_mean"].isna().all()


def unsupported_record(cell_id, method, concurrency, *, baseline=None, k=None, repeat=0):
    r = record(cell_id, method, concurrency, 0.0, baseline=baseline, k=k, repeat=repeat,
               status="unsupported")
    r["error"] = "vLLM 0.32.0 (CPU build) runs GPTQ int4 (t) only on CPUs with AVX-512"
    return r


def test_index_lists_unsupported_cells_and_failed_jobs_with_reason_and_log(tmp_path,
                                                                         demo_config):
    from sdbench.plan import grid
    from sdbench.report.pages import failed_jobs

    cells = grid.all_cells(demo_config)
    write_jsonl(tmp_path / f"{cells[0].cell_id}.jsonl",
                [unsupported_record(cells[0].cell_id, "vanilla", c) for c in (1, 4)])
    # a failed data job and a failed model job: output missing, log ending in an exception
    log = tmp_path / "logs" / "data" / "fetch_cnn_dailymail_articles.jsonl.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\n  File \"f.py\", line 1\n"
                   "sdbench.data.sources.SourceError: cnn.jsonl:41: not a valid JSON line\n")
    model_log = tmp_path / "logs" / "models" / "smollm2-135m-w8a8.log"
    model_log.parent.mkdir(parents=True)
    model_log.write_text("Traceback (most recent call last):\nOSError: disk full\n")
    (tmp_path / "logs" / "models" / "smollm2-135m.log").write_text("built\n")  # no error
    jobs = failed_jobs(demo_config, tmp_path)
    assert [j["job"] for j in jobs] == ["fetch source 'cnn_dailymail'",
                                         "model 'smollm2-135m-w8a8'"]
    assert jobs[0]["log"] == "logs/data/fetch_cnn_dailymail_articles.jsonl.log"
    out = tmp_path / "index.html"
    write_index("demo", {}, [(c, tmp_path / f"{c.cell_id}.jsonl") for c in cells], out, [],
                jobs=jobs)
    page = out.read_text()
    problems = page.split("<h2>Problems</h2>")[1].split("<h2>")[0]
    assert "unsupported here" in problems and "only on CPUs with AVX-512" in problems
    assert "cnn.jsonl:41: not a valid JSON line" in problems
    assert "logs/data/fetch_cnn_dailymail_articles.jsonl.log" in problems
    assert "OSError: disk full" in problems
    assert f"{len(cells) - 1} not run, 1 unsupported here" in page
    # nothing failed: the index says so
    write_index("demo", {}, [], out, [], jobs=[])
    assert "No failed jobs, cells or points" in out.read_text()


def test_a_round_with_nothing_valid_gets_a_page_that_says_why(tmp_path, repo):
    rows = [unsupported_record("q", "vanilla", c, repeat=r) for c in (1, 4) for r in (0, 1)]
    rows += [unsupported_record("qd", "draft_model", c, baseline="q", k=3, repeat=r)
             for c in (1, 4) for r in (0, 1)]
    write_jsonl(tmp_path / "cells.jsonl", rows)
    frame = apply_index(summarize([tmp_path / "cells.jsonl"]), None)
    write_frames(tables_in(tmp_path), frame, aggregate_points(frame), root=tmp_path)
    assert (frame["status"] == "unsupported").all() and frame["speedup"].isna().all()
    page = render_round1(tmp_path, repo)
    assert "No valid measurement in this round: 2 cells: unsupported here" in page
    assert "<title>Round 1 — unit test</title>" in page
    # the problem table of a round report names unsupported points as such
    table = point_tables.problem_table(frame)
    assert set(table["status"]) == {"unsupported here"} and table["error"].str.contains(
        "AVX-512").all()


def test_salvage_writes_every_page_and_the_index_whatever_fails(tmp_path, demo_config,
                                                                 monkeypatch):
    """A failed run with no measurement at all (a data job failed): every report says so in a
    sentence, and the index lists the failed job."""
    from sdbench.plan import grid
    from sdbench.report.pages import salvage

    monkeypatch.chdir(tmp_path)
    log = tmp_path / "logs" / "data" / "spec_bench" / "all.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\nValueError: bucket 0.25k: needed 4, "
                   "found 1\n")
    cells = [(c, layout.cell_output(c.cell_id)) for c in grid.all_cells(demo_config)]
    reports = {"Round 1": "round1.html", "Round 2": "round2.html"}
    salvage(demo_config, cells, reports, {})
    for page in reports.values():
        text = (tmp_path / "reports" / page).read_text()
        assert "No measurement of this run yet" in text and "incomplete run" in text
    index = (tmp_path / "reports" / "index.html").read_text()
    assert "prompt set spec_bench/all" in index and "needed 4, found 1" in index
    assert "logs/data/spec_bench/all.log" in index
    # dated back: older than any input, so a rerun renders the real pages (also when every cell
    # finished and only the summary failed: an existing page would count as done)
    for page in ["index.html", *reports.values()]:
        assert (tmp_path / "reports" / page).stat().st_mtime < log.stat().st_mtime
        assert (tmp_path / "reports" / page).stat().st_mtime < 86400


def test_a_cell_job_that_died_before_recording_why_is_failed_with_its_log(tmp_path,
                                                                         demo_config):
    from sdbench.layout import cell_log
    from sdbench.plan import grid
    from sdbench.report.pages import cell_status

    cell = grid.all_cells(demo_config)[0]
    output = tmp_path / layout.cell_output(cell.cell_id)
    assert cell_log(output) == tmp_path / layout.CELL_LOG.format(cell_id=cell.cell_id)
    assert cell_log(tmp_path / "results/derived/t/w/ngram.jsonl") == \
        tmp_path / "logs/derived/t/w/ngram.log"
    assert cell_status(output) == ("not run", "")
    log = cell_log(output)
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\nModuleNotFoundError: No module named "
                   "'sdbench'\n")
    status, detail = cell_status(output)
    assert status == "failed" and detail.startswith("ModuleNotFoundError: No module named")
    assert str(log) in detail


def test_provenance_lists_cpu_records_and_the_dtype_they_ran_in(tmp_path):
    """CPU records have no GPU driver (null): they are still counted, with the ISA and dtype."""
    rows = [record("base", "vanilla", 1, 100.0), record("q", "vanilla", 1, 90.0)]
    for r, dtype in zip(rows, ("float32", "bfloat16"), strict=True):
        r["provenance"].update(dtype={"requested": "host", "resolved": dtype, "why": "t"},
                               host={"isa": "AVX2, no AVX-512", "device": "cpu"})
    rows[1]["server_config"]["target"] = {"name": "t-gptq", "quantization": "gptq"}
    write_jsonl(tmp_path / "cells.jsonl", rows)
    frame = apply_index(summarize([tmp_path / "cells.jsonl"]), None)
    table = point_tables.provenance_table(frame)
    assert table["records"].sum() == 2 and set(table["dtype"]) == {"float32", "bfloat16"}
    assert set(table["GPU driver"]) == {"-"} and set(table["host ISA"]) == {"AVX2, no AVX-512"}
    assert not {"vllm_distribution", "git_dirty", "hostname"} & set(table.columns)  # readable
    from sdbench.report.round_plots import target_label

    points = aggregate_points(frame)
    assert sorted(target_label(points)) == ["t (float32)", "t-gptq (gptq)"]


def test_verdicts_say_how_small_a_gain_the_design_could_see():
    assert show.verdict_text("no clear gain", 1.25) == (
        "no clear gain (this design could not see gains below 1.25×)")
    # one degree of freedom: a minimum detectable speedup of thousands says nothing useful
    assert show.verdict_text("no clear gain", 2007.4) == (
        "no clear gain (this design could not see even a 10× gain)")
    assert show.verdict_text("speculate", 1.04) == "speculate (detects ≥ 1.04×)"
    assert show.mde_text(52.0) == "> 10×" and show.mde_text(float("nan")) == "–"
    assert show.verdict_text(None, 1.1) is None


def test_what_the_intervals_cover_is_a_list_one_line_per_kind_most_points_first():
    sequential = "2 repeats, one server instance; sequential (adaptive stopping)"
    points = pd.DataFrame({
        "method": ["ngram", "ngram", "ngram", "eagle", "vanilla"],
        "speedup_mean": [1.2, 0.9, 1.1, 0.8, 1.0],
        "interval_covers": [sequential, sequential, "3 server instances", sequential, None]})
    table = plots.interval_coverage(points)
    assert table.values.tolist() == [[sequential, 3], ["3 server instances", 1]]
    assert plots.interval_coverage(points.iloc[4:]).empty
    # what a speedup and its interval are is one link away; nothing said to lack the starts
    note = plots.speedup_note(points)
    assert "methods.html#speedups-and-intervals" in note and "do **not** cover" not in note
    measured = points.assign(speedup_instance_from="this class")
    assert "do **not** cover" not in plots.speedup_note(measured)
    alone = measured.assign(speedup_instance_from=[None, *measured["speedup_instance_from"][1:]])
    assert "do **not** cover the difference between two starts" in plots.speedup_note(alone)


def test_every_figure_has_alt_text_and_a_caption():
    """A report figure is an HTML figure: the PNG inline, alt text from its own titles and axis
    labels (never nbconvert's "No description has been provided"), and its caption."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    fig.suptitle("Speedup vs load")
    axes[0].set(title="spec_bench", xlabel="concurrency", ylabel="speedup")
    axes[1].set(title="sharegpt", xlabel="concurrency", ylabel="speedup")
    html = show.figure_html(fig, "Paired speedup & its interval")
    plt.close(fig)
    assert html.startswith("<figure") and "data:image/png;base64," in html
    assert ('alt="Speedup vs load. 2 panel(s): spec_bench; speedup against concurrency | '
            'sharegpt; speedup against concurrency"') in html
    assert "<figcaption" in html and "Paired speedup &amp; its interval</p></figcaption>" in html
    bare, _ = plt.subplots()
    assert 'alt="A figure of the report"' in show.figure_html(bare)
    plt.close(bare)


def test_tables_show_no_raw_column_names_and_stopped_points_are_no_problems():
    table = pd.DataFrame({"cell_id": ["abc"], "target_label": ["t"], "vllm_distribution": ["x"],
                          "git_dirty": [False]})
    html = show.table_html(table)
    for raw in ("cell_id", "target_label", "vllm_distribution", "git_dirty"):
        assert f"<th>{raw}</th>" not in html
    assert "<th>cell</th>" in html and "<th>vllm distribution</th>" in html
    frame = pd.DataFrame({"status": ["ok", "stopped", "invalid"], "cell_id": ["a", "a", "b"],
                          "error": [None, "stopped after 1 of 3 repeats: settled", "2 failed"]})
    assert list(point_tables.problem_table(frame)["status"]) == ["invalid"]


def test_empty_sections_are_left_out_and_listed_at_the_end():
    """A section whose cells show only "nothing to show" lines (show.show_empty) is left out of
    the page, its heading and line listed under "Not measured in this run"; a section with
    something to show stays, whole."""
    import nbformat

    from sdbench.report.pages import NOT_MEASURED, fold_empty_sections
    from sdbench.report.show import EMPTY_MARK

    def shown(text, empty=False):
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output(
            "display_data", data={"text/markdown": text},
            metadata={EMPTY_MARK: True} if empty else {})]
        return cell

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Round"),
        nbformat.v4.new_markdown_cell("## Offline\n\nWhat offline is."),
        shown("No offline cells.", empty=True),
        nbformat.v4.new_markdown_cell("## Lossless"),
        shown("a table"), shown("No second table.", empty=True),
        nbformat.v4.new_markdown_cell("## Energy"), nbformat.v4.new_code_cell("")])
    cells = fold_empty_sections(notebook).cells
    sources = [c.source for c in cells if c.cell_type == "markdown"]
    assert sources[:2] == ["# Round", "## Lossless"]
    assert sources[-1] == (NOT_MEASURED + "\n\n- **Offline**: No offline cells.\n"
                           "- **Energy**: nothing to show.")
    assert len([c for c in cells if c.cell_type == "code"]) == 2  # Lossless's, both kept


def test_a_filtered_tables_row_labels_are_no_column_and_tails_stand_beside_speedups(tmp_path):
    filtered = pd.DataFrame({"a": [1, 2, 3]}).iloc[[0, 2]]
    assert "<th>index</th>" not in show.table_html(filtered)
    named = pd.DataFrame({"a": [1]}, index=pd.Index(["x"], name="workload"))
    assert "<th>workload</th>" in show.table_html(named)
    frame, points = synthetic_summary(tmp_path)
    points = points.assign(median_tpot_ms_mean=6.14, p90_tpot_ms_mean=6.52,
                           p99_tpot_ms_mean=12.3, p90_ttft_ms_mean=41.0, p99_ttft_ms_mean=88.0)
    table = point_tables.points_table(points)
    assert set(table["TPOT p50 / p90 / p99 (ms)"]) == {"6.14 / 6.52 / 12"}
    assert set(table["TTFT p90 / p99 (ms)"]) == {"41 / 88"}
    columns = list(table.columns)
    assert columns.index("TPOT p50 / p90 / p99 (ms)") == columns.index("TPOT speedup") + 1


def test_round_pages_count_the_cells_they_show():
    """Round 1's page shows the dynamic-K cells derived from it (recorded under round 3); its
    header counts them, and round 3's page leaves them out. Every page and table names their
    round the same way ("round1 (dynamic K)"): the points table, what was spent, the index."""
    from sdbench.analyze.aggregate import DYNAMIC_K_SETTINGS
    from sdbench.analyze.decisions import shown_rounds

    derived = sorted(DYNAMIC_K_SETTINGS)[0]
    table = pd.DataFrame({"round": ["round1", "round3", "round3"],
                          "setting": ["default", derived, "short draft context"],
                          "cell_id": ["a", "b", "c"]})
    assert list(plots.in_round(table, "round1")["cell_id"]) == ["a", "b"]
    assert list(plots.in_round(table, "round3")["cell_id"]) == ["c"]
    assert shown_rounds(table) == ["round1", "round1 (dynamic K)", "round3"]
    # round 1's account of what was spent: its own row and the dynamic-K cells', which the
    # header's count of measurements includes (planned 3 + 2 = 5 rows of the table)
    runs = pd.DataFrame({"round": ["round1"] * 3 + ["round3"] * 2,
                         "setting": ["default"] * 3 + [derived] * 2,
                         "status": ["ok", "ok", "stopped", "ok", "ok"], "duration": 1.0,
                         "cell_id": ["a"] * 3 + ["b"] * 2, "concurrency": 1, "request_rate": None})
    spent = point_tables.adaptive_table(runs)
    assert list(spent["round"]) == ["round1", "round1 (dynamic K)"]
    assert list(spent["repeats planned"]) == [3, 2] and list(spent["stopped early"]) == [1, 0]


def test_the_index_lists_the_dynamic_k_cells_with_round_1_whose_report_reads_them(
        tmp_path, demo_config):
    from sdbench.plan import dynamic_k

    placeholder = dynamic_k.dynamic_k_placeholder(demo_config,
                                                  dynamic_k.dynamic_k_specs(demo_config)[0])
    out = tmp_path / "index.html"
    write_index("demo", {}, [(placeholder, tmp_path / "derived.jsonl")], out)
    row = out.read_text().split(">Cells (")[1].split("</tr>")[1]
    assert "<td>round1 (dynamic K)</td>" in row and "round3" not in row


def test_what_a_report_cell_prints_to_stderr_goes_to_the_log_not_the_page(capsys):
    import nbformat

    from sdbench.report.pages import without_stderr

    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr",
                                           text="RuntimeWarning: All-NaN slice encountered"),
                    nbformat.v4.new_output("stream", name="stdout", text="a table")]
    notebook = without_stderr(nbformat.v4.new_notebook(cells=[cell]))
    assert [o["name"] for o in notebook.cells[0].outputs] == ["stdout"]
    assert "All-NaN slice" in capsys.readouterr().err


def test_the_round_header_counts_each_measurement_once(tmp_path):
    """A cell two rounds share has a row per round in the summary; the header of a round's
    page counts its measurements once, the dynamic-K cells its points show included."""
    frame, points = synthetic_summary(tmp_path)
    shared = pd.concat([frame, frame.assign(round="round3")], ignore_index=True)
    data = plots.RoundData(summary=shared, all_frame=frame, all_points=points, frame=frame,
                           points=points, buckets=pd.DataFrame(), schedules={}, cards={})
    header = plots.round_header(data, "s")
    assert f"{frame['cell_id'].nunique()} cells, {len(points)} points, {len(frame)} measurements" \
        in header



def test_a_round_page_reads_its_own_rows_of_every_table(tmp_path):
    """load_round: round 3's measurements, points and per-bucket speedups without the dynamic-K
    cells (recorded under round 3, read in round 1), round 1's with them."""
    from sdbench.analyze.aggregate import DYNAMIC_K_SETTINGS

    derived = sorted(DYNAMIC_K_SETTINGS)[0]
    rows = pd.DataFrame({"round": ["round1", "round3", "round3"],
                         "setting": ["default", derived, "short draft context"],
                         "cell_id": ["a", "b", "c"], "workload": "w", "dataset": "d",
                         "subset": "all"})
    for name in ("summary", "points", "buckets"):
        rows.to_parquet(tmp_path / f"{name}.parquet")
    (tmp_path / "schedules.json").write_text("{}")
    (tmp_path / "cards.json").write_text("{}")
    files = {name: str(tmp_path / f"{name}.parquet") for name in ("summary", "points", "buckets")}

    def load(round_name):
        return plots.load_round(round_name, schedules=str(tmp_path / "schedules.json"),
                                cards=str(tmp_path / "cards.json"), **files)

    three, one = load("round3"), load("round1")
    for table in (three.all_frame, three.all_points, three.buckets):
        assert list(table["cell_id"]) == ["c"]
    assert list(one.all_frame["cell_id"]) == ["a", "b"]
    assert list(one.all_points["cell_id"]) == ["a", "b"]
    assert list(one.buckets["cell_id"]) == ["a", "b"]


def test_the_lossless_table_shows_a_sampled_cells_check_instead_of_text_equality():
    points = pd.DataFrame({"method": ["ngram", "ngram"], "workload": ["w", "w-t1"],
                           "speculator": "ngram", "k": 3, "concurrency": 1,
                           "lossless_exact_share_mean": [1.0, np.nan],
                           "lossless_token_agreement_mean": [1.0, np.nan],
                           "lossless_first_divergence": [np.nan, np.nan],
                           "lossless_flag": [False, False],
                           "lossless_sampling": [None, "pass: no difference (p = 0.5; …)"]})
    table = point_tables.lossless_table(points)
    assert list(table["identical outputs"]) == ["100%", "–"]
    assert table["sampled: same distribution as the baseline?"].iloc[1].startswith("pass")
    assert "sampled: same distribution as the baseline?" not in point_tables.lossless_table(
        points.iloc[:1])


def test_round1_report_sets_temperatures_side_by_side_with_the_known_answer(tmp_path, repo):
    """A workload sampled at 0 and 1.0: the calibration pair greedy at both, the same pair
    with a probabilistic draft at 1.0 (which keeps its greedy acceptance here), each paired
    with the baseline at its temperature; the report's sampling section shows both and
    checks the probabilistic one."""
    rows = []
    for temp, workload in ((0.0, "w"), (1.0, "w-t1")):
        cells = [("base" + workload, "vanilla", None, 1.0, None, None)]
        cells.append(("cal" + workload, "calibration", "greedy", 1.3 if temp == 0 else 0.8,
                      5.6 if temp == 0 else 2.0, None))
        if temp:
            cells.append(("prob" + workload, "calibration-p", "probabilistic", 1.25, 5.58,
                          "probabilistic"))
        for c, base in ((1, 100.0), (4, 300.0)):
            for repeat, noise in ((0, 1.0), (1, 1.03)):
                for cell_id, name, _, gain, length, sampling in cells:
                    r = record(cell_id, "vanilla" if name == "vanilla" else "draft_model", c,
                               base * noise * gain, repeat=repeat, k=None if name == "vanilla"
                               else 5, baseline=None if name == "vanilla" else "base" + workload)
                    r["speculator"] = name
                    r["workload"] = {**r["workload"], "name": workload,
                                     "loadgen": {"temperature": temp}}
                    if name != "vanilla":
                        r["server_config"]["draft"] = {"name": "small", "quantization": None}
                        r["server_config"]["method_options"] = (
                            {"draft_sample_method": sampling} if sampling else {})
                        drafts = 40
                        r["metrics"].update(
                            spec_decode_acceptance_length=length + 0.01 * repeat,
                            spec_decode_acceptance_rate=100 * (length - 1) / 5,
                            spec_decode_num_drafts=drafts,
                            spec_decode_draft_tokens=drafts * 5,
                            spec_decode_accepted_tokens=round(drafts * (length - 1)))
                    rows.append(r)
    write_jsonl(tmp_path / "cells.jsonl", rows)
    frame = apply_index(summarize([tmp_path / "cells.jsonl"]), None)
    write_frames(tables_in(tmp_path), frame, aggregate_points(frame), root=tmp_path)
    page = render_round1(tmp_path, repo)
    section = page.split("<h2>Speculation under sampling")[1].split("</details>")[0]
    for text in ("acceptance length at T=0", "acceptance length at T=1", "speedup at T=1",
                 "calibration-p k=5 (probabilistic draft)", "calibration k=5 (greedy draft)",
                 "unchanged: every token of an exact draft is accepted", ">holds<",
                 "lower, as expected", "carried no seed of their own"):
        assert text in section, text
    assert section.count("data:image/png;base64") == 1  # acceptance and speedup vs temperature


def test_no_report_recomputes_a_decision():
    """The decisions (recommendations with their held-out intervals, the best setting's
    bootstrap, crossovers, the switch gain, precision) are computed once by the summary stage
    (`analyze.decisions`): no round notebook and not the index script reaches one of those
    computations through the report functions it calls."""
    import ast
    import json
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    deciding = {"recommendations", "best_settings", "crossover", "switch_gain", "precision",
                "decisions", "round_recommendations", "held_out_interval"}
    calls: dict[str, set[str]] = {}  # report function -> the names it calls
    for path in (repo / "src" / "sdbench" / "report").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                calls.setdefault(node.name, set()).update(_called(node))

    def reached(names: set[str]) -> set[str]:
        seen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(calls.get(name, ()))
        return seen

    entry_points = {"write_index.py": _called(ast.parse(
        (repo / "workflow" / "scripts" / "write_index.py").read_text()))}
    for notebook in sorted((repo / "workflow" / "notebooks").glob("round*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        entry_points[notebook.name] = _called(ast.parse(code))
    for name, called in entry_points.items():
        assert "show_bottom_line" in called or name == "write_index.py"
        assert not reached(called) & deciding, (name, reached(called) & deciding)
    # (the check sees one: a report function that computed the recommendations)
    calls["recommendation_table"] = {"recommendations"}
    assert reached(entry_points["round1.ipynb"]) & deciding == {"recommendations"}


def _called(tree) -> set[str]:
    """The names a piece of code calls (`f(...)`, `module.f(...)`)."""
    import ast

    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))}


def test_the_methods_page_explains_each_section_once_and_the_rounds_link_there(repo, tmp_path):
    """Six methods paragraphs repeated word for word on three pages: each explanation is now
    written once on the methods page, with the glossary, and the round pages link to it."""
    import nbformat

    from sdbench.report.pages import write_methods
    from sdbench.report.sections import explanations, methods_notebook

    notebooks = [(f"Round {n}", repo / "workflow" / "notebooks" / f"round{n}.ipynb")
                 for n in (1, 2, 3)]
    page = methods_notebook(notebooks)
    text = "\n".join(cell.source for cell in page.cells)
    written = [e for _, path in notebooks
               for e in explanations(nbformat.read(str(path), as_version=4))]
    for item in written:  # every explanation there, each text once
        assert text.count(item.text) == 1, item.title
    assert text.count('id="lossless-check"') == 1  # explained in all three rounds, differently
    assert "**Round 2.**" in text.split('id="lossless-check"')[1].split("<h2")[0]
    for term in ("Bartlett", "Fieller", "Wilson", "Median-unbiased"):
        assert term in text.split('id="glossary"')[1], term
    out = tmp_path / "methods.html"
    write_methods(notebooks, out, "unit test")
    assert 'id="what-to-run"' in out.read_text()


def test_a_figures_finding_counts_the_points_verdicts_and_names_the_best_deployable():
    """The sentence a figure's caption and alt text lead with: verdicts as the points table
    gives them, deployable settings apart from pipeline checks, the latency at the top load."""
    from sdbench.report import findings

    points = pd.DataFrame({
        "method": ["vanilla", "ngram", "ngram", "draft_model", "vanilla"],
        "speculator": ["vanilla", "ngram", "ngram", "check", "vanilla"],
        "k": [None, 3, 3, 4, None], "concurrency": [1, 1, 8, 8, 8],
        "target": "t", "workload": "w", "setting": "default",
        "role": ["deployable", "deployable", "deployable", "pipeline check", "deployable"],
        "speedup_mean": [1.0, 1.25, 0.8, 2.0, 1.0],
        "verdict": [None, "speculate", "no speculation", "speculate", None],
        "mean_tpot_ms_mean": [10.0, 8.0, 30.0, 12.0, 20.0]})
    assert findings.speedup_finding(points) == (
        "Of 2 deployable speculative points, 1 clearly faster than no speculation, 1 clearly "
        "slower, 0 with no clear difference; the highest mean speedup ngram k=3 on w at "
        "concurrency 1, 1.25×. Also drawn: 1 point(s) of pipeline checks or what-ifs.")
    checks = points[points["role"] == "pipeline check"]
    assert findings.speedup_finding(checks).startswith(
        "Of 1 speculative points, all pipeline checks or what-ifs, 1 clearly faster")
    assert findings.latency_finding(points, "mean_tpot_ms") == (
        "At concurrency 8 on w (t): mean TPOT 20 ms without speculation, 30 ms at best with "
        "it (ngram k=3).")
    assert findings.speedup_finding(points[points["method"] == "vanilla"]) == ""


def test_a_heatmap_drawn_as_dots_says_so_in_its_caption():
    """One cell a panel draws dots with intervals: the caption describes the dots, not the
    heatmap the notebook asked for."""
    from sdbench.report import round_plots, show

    points = pd.DataFrame({
        "method": ["draft_model"], "speculator": ["d"], "k": [3], "concurrency": [4],
        "target": ["t"], "workload": ["news_1k"], "dataset": ["news"], "subset": ["1k"],
        "round": ["round2"], "quantization": [None], "speedup_mean": [0.5],
        "speedup_ci_low": [0.4], "speedup_ci_high": [0.6]})
    page = show.figure_html(round_plots.bucket_heatmaps(points), caption="Heatmaps per bucket",
                            finding="found.")
    caption = page.split("<figcaption")[1]
    assert ('>found.</p><p style="margin: 0.2em 0;">Speedup (output-token throughput ÷ '
            "vanilla) of each point") in caption
    assert "Heatmaps per bucket" not in caption
