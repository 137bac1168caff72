"""Pairs whose servers ran differently: a speculative server's effective settings (what vLLM
resolved, `sdbench.measure.engine_report`) against its baseline's, on the settings
`records.ENGINE_COMPARED` names (speculation itself aside), in one sentence ("speculation
switched CUDA graphs from FULL_AND_PIECEWISE to PIECEWISE on this server"). The pair keeps its
speedup: the sentence says what that speedup also measures."""

from __future__ import annotations

import json

from sdbench.records import ENGINE_COMPARED as COMPARED

# a KV cache sized from the memory left differs a little between any two servers
KV_TOLERANCE = 0.05


def _text(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _phrase(key: str, mine, base) -> str | None:
    if key == "async_scheduling_off":  # stated only where vLLM turned it off
        if bool(mine) == bool(base):
            return None
        return ("turned asynchronous scheduling off" if mine else
                "kept asynchronous scheduling on (vLLM turned it off without speculation)")
    if mine is None or base is None or mine == base:
        return None
    if key == "kv_cache_tokens":
        if base and abs(mine / base - 1) <= KV_TOLERANCE:
            return None
        # a share, not token counts: a pair's two sides run several server instances each,
        # whose caches differ by a few blocks, and the point's sentence is one sentence
        verb = "shrank" if mine < base else "grew"
        return f"{verb} the KV cache by {abs(mine / base - 1) * 100:.0f} % (in tokens)"
    return f"switched {COMPARED[key]} from {_text(base)} to {_text(mine)}"


def differences(mine: dict | None, base: dict | None, who: str = "speculation") -> str | None:
    """One sentence naming every compared setting the speculative server (`mine`) resolved
    otherwise than its baseline (`base`), `who` made the change; None where none differs or
    either is unknown."""
    if not mine or not base:
        return None
    phrases = [p for key in COMPARED if (p := _phrase(key, mine.get(key), base.get(key)))]
    if not phrases:
        return None
    listed = phrases[0] if len(phrases) == 1 else (
        ", ".join(phrases[:-1]) + " and " + phrases[-1])
    return f"{who} {listed} on this server"


def settings_of(record: dict) -> str | None:
    """A record's effective settings as JSON (a summary column), None where not recorded."""
    found = ((record.get("server") or {}).get("engine") or {}).get("settings")
    return json.dumps(found, sort_keys=True) if found else None


def pair_sentence(mine: str | None, base: str | None, who: str = "speculation") -> str | None:
    """`differences` of two `settings_of` columns."""
    if not isinstance(mine, str) or not isinstance(base, str):
        return None
    return differences(json.loads(mine), json.loads(base), who)


def first_settings(rows) -> str | None:
    """The first recorded `engine_settings` of some summary rows (one cell's server)."""
    found = rows["engine_settings"].dropna() if "engine_settings" in rows else []
    return found.iloc[0] if len(found) else None
