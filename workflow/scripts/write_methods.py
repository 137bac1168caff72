"""Write reports/methods.html: how each report section is computed, and the glossary."""

from pathlib import Path

from sdbench.report.pages import write_methods
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    write_methods([(title, Path(path)) for title, path in
                   zip(sm.params.titles, sm.input.notebooks, strict=True)],
                  sm.output[0], sm.config["study"], sm.input.text)
