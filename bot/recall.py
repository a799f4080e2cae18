"""Recall (SPEC section 11): the exact old words the summary let go, brought back for the turn
that needs them.

Each turn searches this conversation's messages older than the live window for the words of the
person's new message (common words left out, and words that fill much of the conversation:
they point at nothing in particular); with semantic recall on (bot/semantic.py), that ranking
and the one by meaning are fused by reciprocal rank. The best hits come with a neighbour on each
side; hits next to each other merge into one passage. The passages are taken best first while
they fit the recall budget — `[recall] budget_tokens`, never more than 10 % of the context
window — and shown oldest first, with date and speaker, in a labelled block after the summary:
data the conversation held, never instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence
from datetime import datetime, timezone

from storage.ports import MessageRow, Store

HITS = 8  # best-matching messages looked at
COMMON_ABOVE = 200  # a word in more messages of the conversation than this points at nothing
MAX_TERMS = 12
CONTEXT_SHARE = 0.10  # recall never takes more than this share of the context window
TOKENS_PER_LINE = 6  # the date and speaker a recalled line carries, roughly
RRF_K = 60  # reciprocal-rank fusion: a message scores the sum of 1 / (RRF_K + its rank) in each ranking

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just let me more
most my myself no nor not now of off on once only or other our ours ourselves out over own same
she should so some such than that the their theirs them themselves then there these they this
those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves im ive id youre dont didnt cant wont isnt
also really maybe yes yeah ok okay oh hi hello hey please thanks thank tell know think remember
""".split())
WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Passage:
    messages: list[MessageRow]  # oldest first
    tokens: int


def recall_budget(budget_tokens: int, context_window: int) -> int:
    return min(budget_tokens, int(context_window * CONTEXT_SHARE))


def query_terms(text: str) -> list[str]:
    """The words of a message worth searching for: lower-cased, common words out, each once."""
    terms: list[str] = []
    for word in WORD.findall(text.lower()):
        if len(word) > 1 and word not in STOP_WORDS and word not in terms:
            terms.append(word)
    return terms[:MAX_TERMS]


def fuse(*rankings: Sequence[int]) -> list[int]:
    """Reciprocal-rank fusion of rankings of places, best first (ties: the first ranking's order)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, pos in enumerate(ranking, start=1):
            scores[pos] = scores.get(pos, 0.0) + 1 / (RRF_K + rank)
    return sorted(scores, key=lambda pos: -scores[pos])


async def recall(store: Store, conversation_id: int, text: str, before_pos: int, budget: int,
                 nearest: Sequence[int] = ()) -> list[Passage]:
    """Passages of this conversation before `before_pos` (the live window's first message) that
    the message `text` calls back — by its words, fused with `nearest` (places ranked by meaning)
    when given — within `budget` tokens, oldest first."""
    terms = query_terms(text)
    if budget <= 0 or not (terms or nearest):
        return []
    hits = await store.recall.search(conversation_id, terms, before_pos, HITS, COMMON_ABOVE) if terms else []
    ranked = fuse([hit.pos for hit in hits], nearest)[:HITS]
    if not ranked:
        return []
    around = {p for pos in ranked for p in (pos - 1, pos, pos + 1) if p < before_pos}
    by_pos = {m.pos: m for m in await store.recall.messages_at(conversation_id, sorted(around))}
    passages = _merge(by_pos)
    rank = {pos: i for i, pos in enumerate(ranked)}
    best_first = sorted(passages, key=lambda p: min(rank.get(m.pos, len(rank)) for m in p.messages))
    chosen, used = [], 0
    for passage in best_first:
        if used + passage.tokens <= budget:
            chosen.append(passage)
            used += passage.tokens
    return sorted(chosen, key=lambda p: p.messages[0].pos)


def _merge(by_pos: dict[int, MessageRow]) -> list[Passage]:
    """Messages at neighbouring places become one passage."""
    passages: list[list[MessageRow]] = []
    for pos in sorted(by_pos):
        if passages and pos - passages[-1][-1].pos <= 1:
            passages[-1].append(by_pos[pos])
        else:
            passages.append([by_pos[pos]])
    return [Passage(group, sum(m.tokens + TOKENS_PER_LINE for m in group)) for group in passages]


def day_of(message: MessageRow) -> str:
    return datetime.fromtimestamp(message.created_at, timezone.utc).strftime("%Y-%m-%d")


def recalled_line(message: MessageRow, character_name: str) -> str:
    speaker = message.speaker_name if message.role == "user" else character_name
    return f"[{day_of(message)}] {speaker}: {message.content}"
