"""Build one processed prompt set (all its subsets) and its data card."""

import json
from pathlib import Path

from sdbench.data.builders import build_dataset
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]):
    manifest = json.loads(Path(sm.input.manifest).read_text(encoding="utf-8"))
    card = build_dataset(sm.wildcards.dataset, sm.params.dataset, sm.input.raw, manifest,
                         sm.params.out_dir)
    for subset, info in card["subsets"].items():
        print(f"{sm.wildcards.dataset}/{subset}: {info['records']} records")
