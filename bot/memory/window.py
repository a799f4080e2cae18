"""Layer 1 — the live window (SPEC section 3).

The last messages of the conversation, verbatim: at most 50 messages and at most
min(10,000 tokens, 25 % of the model's context window). The oldest leave first; the current
message is always in. A 1M-token model gets no more raw messages than that.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

WINDOW_MAX_MESSAGES = 50
WINDOW_MAX_TOKENS = 10_000
WINDOW_CONTEXT_SHARE = 0.25


def window_token_budget(context_window: int) -> int:
    return min(WINDOW_MAX_TOKENS, int(context_window * WINDOW_CONTEXT_SHARE))


class Counted(Protocol):
    """A message, or only its size (`storage.ports.MessageSize`): its stored token count."""

    @property
    def tokens(self) -> int: ...


Row = TypeVar("Row", bound=Counted)


def take_within(rows: list[Row], max_messages: int, max_tokens: int) -> list[Row]:
    """The leading rows that fit in both budgets; the first row is always taken."""
    kept: list[Row] = []
    used = 0
    for row in rows[:max_messages]:
        if kept and used + row.tokens > max_tokens:
            break
        kept.append(row)
        used += row.tokens
    return kept


def live_window(newest_first: list[Row], context_window: int) -> list[Row]:
    """Cut the newest-first rows (current message first) to the window, oldest first.

    Token counts were stored with each message when it was written: nothing is re-tokenized.
    """
    kept = take_within(newest_first, WINDOW_MAX_MESSAGES, window_token_budget(context_window))
    kept.reverse()
    return kept
