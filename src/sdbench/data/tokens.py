"""Token counting for prompt sets: a model's own tokenizer (default) or a tiktoken encoding.

Config forms (`tokenizer:` at the top level, or per dataset):
  {model: <model key>}                      the model's tokenizer (from its checkpoint folder)
  {tiktoken: cl100k_base}                   a named tiktoken encoding (downloaded by tiktoken)
  {tiktoken_file: <path>, pattern: <regex>} a local .tiktoken BPE file (offline)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sdbench.files import sha256_file

# GPT-4's split pattern (cl100k_base), used for local BPE files unless the spec gives another
DEFAULT_TIKTOKEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


class TokenizerError(RuntimeError):
    """A tokenizer that cannot be loaded."""


@dataclass
class Tokenizer:
    """Counts tokens and cuts text to a token budget; `describe` goes into data cards."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    describe: dict
    _counts: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def count(self, text: str) -> int:
        """Tokens in `text` (remembered: a builder counts each source text once)."""
        if text not in self._counts:
            self._counts[text] = len(self.encode(text))
        return self._counts[text]

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` (at a token boundary) with at most `max_tokens` tokens."""
        ids = self.encode(text)
        if len(ids) <= max_tokens:
            return text
        cut = max_tokens
        while cut > 0:
            prefix = self.decode(ids[:cut]).rstrip("\ufffd")
            if self.count(prefix) <= max_tokens:
                return prefix
            cut -= 1
        return ""


def load_tokenizer(spec: dict, model_dirs: dict[str, str] | None = None) -> Tokenizer:
    """`spec` as in the config; `model_dirs` maps model keys to checkpoint folders."""
    if "model" in spec:
        from transformers import AutoTokenizer

        folder = (model_dirs or {}).get(spec["model"])
        if folder is None or not Path(folder).is_dir():
            raise TokenizerError(f"tokenizer of model {spec['model']!r}: folder {folder} "
                                 "does not exist (the model is built/downloaded first)")
        hf = AutoTokenizer.from_pretrained(folder)
        return Tokenizer(lambda text: hf.encode(text, add_special_tokens=False),
                         lambda ids: hf.decode(ids), {"model": spec["model"], "path": folder,
                                                      "class": type(hf).__name__})
    import tiktoken

    if "tiktoken" in spec:
        try:
            encoding = tiktoken.get_encoding(spec["tiktoken"])
        except Exception as exc:  # tiktoken downloads its encodings on first use
            raise TokenizerError(
                f"tiktoken encoding {spec['tiktoken']!r} could not be loaded ({exc}); offline, "
                "point `tiktoken_file` at a local .tiktoken file instead") from exc
        describe = {"tiktoken": spec["tiktoken"]}
    else:
        from tiktoken.load import load_tiktoken_bpe

        path = Path(spec["tiktoken_file"])
        if not path.is_file():
            raise TokenizerError(f"tokenizer.tiktoken_file: {path} does not exist")
        ranks = load_tiktoken_bpe(str(path))
        encoding = tiktoken.Encoding(name=path.stem, pat_str=spec.get(
            "pattern", DEFAULT_TIKTOKEN_PATTERN), mergeable_ranks=ranks, special_tokens={})
        describe = {"tiktoken_file": str(path), "sha256": sha256_file(path)}
    return Tokenizer(lambda text: encoding.encode(text, disallowed_special=()),
                     lambda ids: encoding.decode(ids), describe)
