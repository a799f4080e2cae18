"""How recall ranks the hits of a search, the same on every backend: BM25 with each word
counted once (a chat message seldom repeats one), the word's rarity taken in the conversation,
and the message's length in tokens against the hits' average. Each backend finds the hits its
own way (storage/sqlite/recall.py, storage/postgres/recall.py) and ranks them here, in the
query, so only the best `limit` messages are read out of it, not every hit."""

from __future__ import annotations

import math

K1 = 1.2  # BM25's usual constant: how soon a word's weight saturates
B = 0.5  # how much a long message is discounted: less than BM25's usual 0.75, which cost evidence
# on real chats (LoCoMo in bench.dialogues, #39)

# A hit's BM25 score: the sum of its words' rarities (`weight`), discounted for a message longer
# than the hits' average (`average`; 1 if every hit is empty).
BM25 = f"weight * {K1 + 1!r} / (1 + {K1!r} * ({1 - B!r} + {B!r} * tokens / average))"


def rarity(hits: int, searched: int) -> float:
    """BM25's inverse document frequency (the form that never goes below zero) of a word found
    in `hits` of `searched` messages."""
    return math.log(1 + (searched - hits + 0.5) / (hits + 0.5))


def searched(before_pos: int, hits: list[int]) -> int:
    """How many messages a search before place `before_pos` looked at: every place before it
    holds at most one message, so that many, near enough (at least as many as a word's hits)."""
    return max(before_pos, *hits)


def ranked(hit: str, columns: str, limit: str) -> str:
    """The best `limit` messages of `hit` (a query of each message hit: its `id`, `pos`, `tokens`
    and `weight`, its words' rarities summed), read as `columns` of `messages m`, best first.
    Among equal matches the older goes first: the summary kept less of it than of a newer one.
    Only the best are read again from `messages`."""
    return (f"WITH hit AS ({hit}), "
            f"best AS (SELECT id, pos, {BM25} AS score FROM hit, "
            f"(SELECT COALESCE(NULLIF(AVG(tokens), 0), 1) AS average FROM hit) AS hits ORDER BY score DESC, pos LIMIT {limit}) "
            f"SELECT {columns} FROM best b JOIN messages m ON m.id = b.id ORDER BY b.score DESC, b.pos")
