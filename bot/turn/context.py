"""What a reply reads (SPEC 3-5, 11, 13), in one place for a turn and a check-in alike: the
character's card, the person's persona and saved memories in play (none for nobody in particular, or with
Learn from chat off), the summary, the live window, the older passages recall brings back, and
the lorebook entries the recent messages call up. `bot/turn/prompt.py` builds the prompt from it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from bot.characters.cards import StoredCharacter
from bot.characters.lorebook import ChatSoFar, LoreEntry
from bot.memory.recall import Passage
from bot.memory.saved_memories import SelectedMemories, memories_for_prompt
from bot.memory.window import WINDOW_MAX_MESSAGES, live_window
from bot.memory.witnesses import seen_by
from storage.ports import ConversationRow, MessageRow, Persona, Profile, Store, SummaryRow

# Given the newest messages (newest first), the live window and the sight they were read through
# (SPEC 22: None, every message; else the character whose witnessed messages they are), the
# passages to recall.
Recalling = Callable[[list[MessageRow], list[MessageRow], int | None], Awaitable[list[Passage]]]


@dataclass(frozen=True)
class Context:
    character: StoredCharacter
    shared: bool  # a shared chat: people's lines are named, and so are other characters'
    memories: SelectedMemories | None  # None: no saved memories are read (nor written) this time
    summary: list[SummaryRow]
    window: list[MessageRow]  # oldest first
    recalled: list[Passage]
    lore: list[LoreEntry]
    persona: Persona | None = None  # who the person speaking is in the story (SPEC 17)
    time_zone: str | None = None  # the person's own (/timezone, SPEC 19); None: the deployment's
    seen_by: int | None = None  # SPEC 22: read only what this character witnessed (None: every message)

    @property
    def learning(self) -> bool:
        """Whether saved memories are read, so the model may write them too."""
        return self.memories is not None


async def read_context(store: Store, character: StoredCharacter, conversation: ConversationRow,
                       person_id: int | None, context_window: int, up_to_pos: int | None = None,
                       recalling: Recalling | None = None, speaker: str | None = None) -> Context:
    """Read what a reply sees of `conversation` (up to the message at `up_to_pos`), for the
    person `person_id` (None: nobody in particular), who goes by `speaker` (None: the name on their
    latest message in the window). Only what it needs: never the whole history.
    In a scene, only what the character witnessed (SPEC 22): every layer through one sight.

    What the person brings and what the conversation holds do not depend on each other: they are
    read side by side, each part's reads asked at once (on SQLite they queue on the reading
    connection and run back to back; on PostgreSQL each takes a connection of the pool)."""

    async def persons() -> tuple[Profile, SelectedMemories | None]:
        if person_id is None:
            return Profile(None, None), None
        profile = await store.people.profile(person_id, character.id)
        return profile, (await memories_for_prompt(store.memories, person_id, character.id) if profile.learns else None)

    async def held() -> tuple[int | None, list[SummaryRow], list[MessageRow], list[Passage], list[LoreEntry]]:
        sight = await seen_by(store, conversation, character)
        summary, newest_first = await asyncio.gather(
            store.summaries.summaries(conversation.id, seen_by=sight),
            store.conversations.recent_messages(conversation.id, WINDOW_MAX_MESSAGES, up_to_pos=up_to_pos,
                                                seen_by=sight))
        window = live_window(newest_first, context_window)
        recalled = await recalling(newest_first, window, sight) if recalling is not None else []
        book = character.character.lorebook
        lore: list[LoreEntry] = []
        if book.entries:
            user = speaker if speaker is not None else addressee(window, person_id)
            chat = await chat_so_far(store, conversation.id, character.id, newest_first, up_to_pos, sight,
                                     book.waits_for())
            lore = await asyncio.to_thread(  # matching keys may take a while: never on the event loop
                book.entries_for, [m.content for m in reversed(window)], context_window, user, chat)
        return sight, list(summary), window, recalled, lore

    (profile, memories), (sight, summary, window, recalled, lore) = await asyncio.gather(persons(), held())
    return Context(character, conversation.is_shared, memories, summary, window, recalled, lore,
                   profile.persona, profile.time_zone, sight)


async def chat_so_far(store: Store, conversation_id: int, character_id: int, newest_first: list[MessageRow],
                      up_to_pos: int | None, sight: int | None, waits_for: ChatSoFar) -> ChatSoFar | None:
    """How long the chat is (up to the message at `up_to_pos`, through `sight`), as far back as the
    lorebook's entries wait for (None: none waits): read off the newest messages when they are
    the whole chat, else counted back in the store no further than that."""
    if not (waits_for.messages or waits_for.replies):
        return None
    messages = len(newest_first)
    replies = sum(m.role == "assistant" and m.character_id == character_id for m in newest_first)
    if messages == WINDOW_MAX_MESSAGES:  # the newest messages read: more may lie before them
        if messages < waits_for.messages:
            messages = await store.conversations.count_back(conversation_id, up_to_pos, waits_for.messages,
                                                            seen_by=sight)
        if replies < waits_for.replies:
            replies = await store.conversations.count_back(conversation_id, up_to_pos, waits_for.replies,
                                                           replies_of=character_id, seen_by=sight)
    return ChatSoFar(messages, replies)


def addressee(window: list[MessageRow], person_id: int | None) -> str:
    """What the person goes by in the conversation: the name on their latest message in the
    window (oldest first; "" if it holds none)."""
    return next((m.speaker_name for m in reversed(window) if m.person_id == person_id), "")
