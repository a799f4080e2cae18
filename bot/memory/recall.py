"""Recall (SPEC section 11): the exact old words the summary let go, brought back for the turn
that needs them.

Each turn searches this conversation's messages older than the live window for the words of the
person's new message (common words left out, the speakers' names, and words that fill much of the
conversation: they point at nothing in particular); with semantic recall on
(bot/memory/semantic.py), the ranking by meaning is fused with the words' (`fused`); a message
that only asks is not ranked by meaning (`only_asks`). Hits
with nothing in them, or that mostly repeat the new message or a hit already taken (echoes: a
person asks about the same things again), are left out. The hits come with a neighbour on each
side; hits next to each other merge into one passage. The passages are taken best first until
the recall budget is spent — `[recall] budget_tokens`, never more than 10 % of the context
window — and shown oldest first, each line with its speaker and each passage with its day (said
once, not on every line: a date costs tokens), in a labelled block after the summary:
data the conversation held, never instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from storage.ports import MessageRow, Recall

CANDIDATES = 32  # best word matches looked at; the budget, not this count, decides how many are taken
NEAREST = 200  # places ranked by meaning: enough that nearly every word hit has its rank by meaning too
MEANING_ONLY = 24  # the best places only meaning found that may join, after the word hits
FUSION_K = 10  # reciprocal-rank fusion: a ranking gives a place 1 / (FUSION_K + its rank)
ECHO_SHARE = 0.7  # a question this much of whose content words were said already asks it again
REPEAT_SHARE = 0.9  # a message this much of whose words were said already repeats it
COMMON_ABOVE = 200  # a word in more messages of the conversation than this points at nothing
MAX_TERMS = 12
CONTEXT_SHARE = 0.10  # recall never takes more than this share of the context window
# What the block adds to its messages' own tokens (counted with cl100k and o200k; a long name costs more):
TOKENS_PER_LINE = 11  # the day and speaker heading the first recalled line of a day, and its line break
TOKENS_PER_FOLLOWING_LINE = 4  # the speaker of a line after the first of its day in a passage, and its line break
TOKENS_PER_PASSAGE = 2  # the "…" that parts it from the passage before
BLOCK_TOKENS = 35  # the block's heading (bot/turn/prompt.py: RECALL_INTRO) and its chat message's overhead

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
SENTENCE = re.compile(r"[^.!?]+[.!?]*")


@dataclass(frozen=True)
class Passage:
    messages: list[MessageRow]  # oldest first
    tokens: int


def recall_budget(budget_tokens: int, context_window: int) -> int:
    return min(budget_tokens, int(context_window * CONTEXT_SHARE))


def _carrying(text: str) -> list[str]:
    """The words of a text that carry something, in order: lower-cased, common words out."""
    return [word for word in WORD.findall(text.lower()) if len(word) > 1 and word not in STOP_WORDS]


@dataclass(frozen=True)
class Words:
    """A message's words, read once: all of them, those that carry something, and whether it asks."""

    every: frozenset[str]
    content: frozenset[str]
    asks: bool


def words_of(text: str) -> Words:
    found = WORD.findall(text.lower())
    return Words(frozenset(found), frozenset(w for w in found if len(w) > 1 and w not in STOP_WORDS),
                 text.rstrip().endswith("?"))


def echoes(hit: Words, said: Words) -> bool:
    """Whether `hit` mostly repeats `said`: nearly all its words are there (REPEAT_SHARE), or it
    is a question whose content words mostly are (ECHO_SHARE) — asked again, it adds nothing.
    "the key is under the blue flowerpot" answers "where is the key to the blue flowerpot?"
    (its "under" is news); "how are Ingrid's goats?" echoes "how are Ingrid's goats these days?"."""
    if hit.every and len(hit.every & said.every) >= REPEAT_SHARE * len(hit.every):
        return True
    return hit.asks and len(hit.content & said.every) >= ECHO_SHARE * len(hit.content)


def only_asks(text: str) -> bool:
    """Whether every sentence of a message is a question. Meaning does not rank such a message:
    an embedding model puts a question near other questions by their form ("What did Ann do
    in May?" near "What does Ann like?"), whatever they ask about, and a question holds no
    answer. Measured on LoCoMo (#39), ranking them held recall by meaning to +1.3 points of
    evidence instead of +2.0."""
    sentences = [s.strip() for s in SENTENCE.findall(text) if s.strip()]
    return bool(sentences) and all(s.endswith("?") for s in sentences)


def query_terms(text: str, speakers: Sequence[str] = ()) -> list[str]:
    """The words of a message worth searching for: its content words in order, each once, not
    the words of the speakers' names (nearly every line is one of theirs: "Ann" finds the lines
    that greet Ann, not what the message asks about)."""
    names = {word for name in speakers for word in WORD.findall(name.lower())}
    return [word for word in dict.fromkeys(_carrying(text)) if word not in names][:MAX_TERMS]


def fused(by_words: Sequence[int], by_meaning: Sequence[int]) -> list[int]:
    """Places to recall, best first, from the ranking by words and the ranking by meaning: the
    word hits in the order of reciprocal-rank fusion (each ranking gives a place
    1 / (FUSION_K + its rank), so a word hit that meaning ranks high passes one it does not), then
    the best MEANING_ONLY places only meaning found, in its order. Measured on LoCoMo (#39), a
    place only meaning found was worth less than any word hit: fusing them too, so that one could
    pass a weak word hit, cost evidence; and past its first two dozen they cost more room than
    they brought."""
    by_meaning_rank = {pos: rank for rank, pos in enumerate(by_meaning, 1)}
    score = {pos: 1 / (FUSION_K + rank) + (1 / (FUSION_K + by_meaning_rank[pos]) if pos in by_meaning_rank else 0.0)
             for rank, pos in enumerate(by_words, 1)}
    return sorted(by_words, key=lambda pos: -score[pos]) + [pos for pos in by_meaning if pos not in score][:MEANING_ONLY]


async def recall(archive: Recall, conversation_id: int, text: str, before_pos: int, budget: int,
                 nearest: Sequence[int] = (), speakers: Sequence[str] = (), seen_by: int | None = None
                 ) -> list[Passage]:
    """Passages of this conversation before `before_pos` (the live window's first message) that
    the message `text` calls back, within `budget` tokens, oldest first. `speakers`: the names
    of the person and the character, left out of the search.

    The candidates are the best matches of its words (up to CANDIDATES) and the places
    `nearest` ranks by meaning (but those that `only_asks`), in the order `fused` gives them. A
    candidate with no content words ("I see.", "haha ok") or one that mostly repeats the new
    message or a hit already taken (an echo: ECHO_SHARE of its content words) is left out. Each
    hit comes with a neighbour on each side; neighbouring ones merge into one passage; the word
    hits' passages are taken best first until the budget is spent, then those of the places only
    meaning found with what is left. `seen_by`: only messages that character witnessed (SPEC 22)."""
    terms = query_terms(text, speakers)
    room = budget - BLOCK_TOKENS  # for the passages
    if room <= 0 or not (terms or nearest):
        return []
    hits = await archive.search(conversation_id, terms, before_pos, CANDIDATES, COMMON_ABOVE,
                                     seen_by) if terms else []
    near = {m.pos: m for m in await archive.messages_at(conversation_id, sorted(nearest), seen_by)
            } if nearest else {}
    words_found = {hit.pos for hit in hits}
    by_meaning = [pos for pos in nearest if pos in near and not only_asks(near[pos].content)]
    ranked = fused([hit.pos for hit in hits], by_meaning)
    if not ranked:
        return []
    candidates = near | {m.pos: m for m in hits}
    said = [words_of(text)]  # the new message and the hits taken so far, each read once
    chosen: list[int] = []
    for pos in ranked:
        if (message := candidates.get(pos)) is None:
            continue
        words = words_of(message.content)
        if not words.content or any(echoes(words, s) for s in said):
            continue
        chosen.append(pos)
        said.append(words)
    neighbours = {p for pos in chosen for p in (pos - 1, pos + 1) if p < before_pos}
    by_pos = {p: candidates[p] for p in set(chosen) | neighbours if p in candidates} | {
        m.pos: m for m in await archive.messages_at(conversation_id, sorted(neighbours - set(candidates)), seen_by)}
    rank = {pos: i for i, pos in enumerate(chosen)}
    taken: dict[int, MessageRow] = {}
    used = 0
    # The word hits' passages first, then those only meaning found, with what budget is left.
    for group in ([p for p in chosen if p in words_found], [p for p in chosen if p not in words_found]):
        pool = {p: by_pos[p] for pos in group for p in (pos - 1, pos, pos + 1) if p in by_pos and p not in taken}
        for passage in sorted(passages_of(pool), key=lambda p: min(rank.get(m.pos, len(rank)) for m in p.messages)):
            if used + passage.tokens <= room:
                taken.update((m.pos, m) for m in passage.messages)
                used += passage.tokens
    return passages_of(taken)


def passages_of(by_pos: dict[int, MessageRow]) -> list[Passage]:
    """Messages at neighbouring places become one passage."""
    passages: list[list[MessageRow]] = []
    for pos in sorted(by_pos):
        if passages and pos - passages[-1][-1].pos <= 1:
            passages[-1].append(by_pos[pos])
        else:
            passages.append([by_pos[pos]])
    return [Passage(group, TOKENS_PER_PASSAGE + sum(m.tokens for m in group) + sum(
        TOKENS_PER_LINE if dated else TOKENS_PER_FOLLOWING_LINE for dated in _dated(group))) for group in passages]


def _dated(passage: list[MessageRow]) -> list[bool]:
    """Which lines of a passage carry their day: the first, and one whose day differs from the line before."""
    days = [_day_number(m) for m in passage]
    return [i == 0 or days[i] != days[i - 1] for i in range(len(days))]


def _day_number(message: MessageRow) -> int:
    """The message's day in UTC as a number (a Unix day is 86,400 s long), as `day_of` names it."""
    return int(message.created_at // 86_400)


def day_of(message: MessageRow) -> str:
    return datetime.fromtimestamp(message.created_at, timezone.utc).strftime("%Y-%m-%d")


def recalled_lines(passage: Passage) -> list[str]:
    """A passage's messages with their speaker (a person, or in a scene any character), the day
    said once where it starts (and again where it changes): a line's date costs tokens."""
    return [f"[{day_of(m)}] {m.speaker_name}: {m.said}" if dated else f"{m.speaker_name}: {m.said}"
            for m, dated in zip(passage.messages, _dated(passage.messages))]
