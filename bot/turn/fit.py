"""The whole prompt within the context (SPEC 8): every layer counted — the card, instructions and
tool definitions, the persona, saved memories, the summary, recalled passages, lorebook entries
and the live window — against what the server holds less the reply's room. What a reply can best
do without goes first, one piece at a time, until it fits: recalled passages, lorebook entries,
the oldest messages of the window (the last KEPT_MESSAGES stay), the summary's oldest layers,
unpinned memories (the oldest first), the persona, pinned memories. The card always stays."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from bot.memory.saved_memories import SelectedMemories
from bot.turn.context import Context
from bot.turn.prompt import Prompt

KEPT_MESSAGES = 4  # the window's newest messages, always in the prompt


def without_one(context: Context) -> Context | None:
    """`context` with the piece a reply can best do without taken out; None: nothing left to take."""
    if context.recalled:
        return replace(context, recalled=[])
    if context.lore:
        return replace(context, lore=context.lore[:-1])
    if len(context.window) > KEPT_MESSAGES:
        return replace(context, window=context.window[1:])
    if context.summary:
        oldest = min(context.summary, key=lambda row: row.first_pos)
        return replace(context, summary=[row for row in context.summary if row is not oldest])
    memories = context.memories
    if memories is not None and memories.unpinned:
        return replace(context, memories=SelectedMemories(memories.pinned, memories.unpinned[:-1]))
    if context.persona is not None:
        return replace(context, persona=None)
    if memories is not None and memories.pinned:
        return replace(context, memories=SelectedMemories(memories.pinned[:-1], memories.unpinned))
    return None


def fitted(context: Context, budget: int, build: Callable[[Context], Prompt]) -> Prompt:
    """The prompt of `context` in at most `budget` tokens (as counted), or the smallest it can be."""
    prompt = build(context)
    while prompt.receipt["tokens"]["total"] > budget and (smaller := without_one(context)) is not None:
        context = smaller
        prompt = build(context)
    return prompt
