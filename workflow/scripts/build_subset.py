"""Build one processed prompt subset (a task group or a length bucket) and its data card."""

import json
from pathlib import Path

from sdbench.data.builders import build_subset
from sdbench.data.cards import card_summary
from sdbench.data.tokens import load_tokenizer
from sdbench.script_log import to_log

sm = snakemake  # noqa: F821 - injected by Snakemake
with to_log(sm.log[0]) as say:
    definition = sm.params.definition
    manifest = json.loads(Path(sm.input.manifest).read_text(encoding="utf-8"))
    tokenizer_spec = definition["tokenizer"]
    model_dirs = ({tokenizer_spec["model"]: sm.input.tokenizer_model}
                  if "model" in tokenizer_spec else {})
    card = build_subset(definition, sm.input.raw, manifest,
                        load_tokenizer(tokenizer_spec, model_dirs), sm.output.records,
                        sm.output.card)
    say(card_summary(card))
