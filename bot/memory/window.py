"""Layer 1 — the live window (SPEC section 3).

The last messages of the conversation, verbatim: at most 50 messages and at most
min(10,000 tokens, 25 % of the model's context window). The oldest leave first; the current
message is always in. A 1M-token model gets no more raw messages than that.

Once messages have left it, the window's first message moves on WINDOW_STEP places at a time
(two exchanges of a one-to-one chat), not one by one: between two moves every reply's prompt
begins as the one before it did, up to the newest messages, so a model server's prompt cache
serves that part again instead of reading it anew (a hosted API bills it at its cached price).
A one-to-one chat's window then holds 47 to 50 messages. Measured on LoCoMo's conversations
(bench.dialogues, with the recalled passages after the window too): the share of a reply's
prompt that repeats the one before went from 46 % to 54 %, with as much of the answers'
evidence in the prompt (docs/benchmarks.md, section 9).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

WINDOW_MAX_MESSAGES = 50
WINDOW_READ = WINDOW_MAX_MESSAGES + 1  # the newest messages a turn reads: one more tells whether any came before
WINDOW_STEP = 4  # places (a message and its reply take two): how far the window's start moves at a time
WINDOW_MAX_TOKENS = 10_000
WINDOW_CONTEXT_SHARE = 0.25


def window_token_budget(context_window: int) -> int:
    return min(WINDOW_MAX_TOKENS, int(context_window * WINDOW_CONTEXT_SHARE))


class Counted(Protocol):
    """A message, or only its size (`storage.ports.MessageSize`): its place and stored token count."""

    @property
    def pos(self) -> int: ...

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


def whole_chat(newest_first: list[Row]) -> bool:
    """Whether the newest messages a turn read (WINDOW_READ at most) are the whole chat."""
    return len(newest_first) < WINDOW_READ


def live_window(newest_first: list[Row], context_window: int) -> list[Row]:
    """Cut the newest-first rows (current message first) to the window, oldest first. Rows past
    the window's reach (WINDOW_READ of them) tell that messages have left it: it then starts at
    the first place at or after its oldest message that is a multiple of WINDOW_STEP.

    Token counts were stored with each message when it was written: nothing is re-tokenized.
    """
    kept = take_within(newest_first, WINDOW_MAX_MESSAGES, window_token_budget(context_window))
    if len(kept) < len(newest_first):
        start = -(-kept[-1].pos // WINDOW_STEP) * WINDOW_STEP
        kept = kept[:max(1, sum(1 for row in kept if row.pos >= start))]  # the current message stays
    kept.reverse()
    return kept
