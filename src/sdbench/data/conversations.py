"""Conversations as a record carries them: its messages (the system prompt and earlier turns, as
the service sends them), ShareGPT's turns as messages, and one text of them where a builder
needs a prompt."""

from __future__ import annotations

from sdbench.data.raw import ASSISTANT_ROLES, HUMAN_ROLES

SEPARATOR = "\n\n"  # between the texts of one prompt


def flatten(messages: list[dict]) -> str:
    """A conversation as one text (what the completions endpoint is sent, and what a set's
    prompt tokens count): a lone user message as it is, else each message under its role."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return SEPARATOR.join(f"{m['role']}: {m['content']}" for m in messages)


def messages_of(record: dict) -> list[dict]:
    """The chat messages a prompt-set record is sent as on the chat endpoint: its own
    conversation (`chat` sets), else its prompt as one user message."""
    return record.get("messages") or [{"role": "user", "content": record["prompt"]}]


def sharegpt_messages(row: dict) -> tuple[list[dict], str | None] | None:
    """A ShareGPT conversation as the request a service would get: every turn up to its last
    human turn (a system turn kept), and the reply after it as the reference; None without a
    human turn."""
    roles = {**dict.fromkeys(HUMAN_ROLES, "user"), **dict.fromkeys(ASSISTANT_ROLES, "assistant"),
             "system": "system"}
    turns = [{"role": roles.get(t["from"]), "content": t["value"]}
             for t in row["conversations"]]
    last = max((i for i, t in enumerate(turns) if t["role"] == "user"), default=None)
    if last is None or any(t["role"] is None for t in turns[:last + 1]):
        return None
    reply = turns[last + 1]["content"] if last + 1 < len(turns) and \
        turns[last + 1]["role"] == "assistant" else None
    return turns[:last + 1], reply
