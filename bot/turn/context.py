"""What a reply reads (SPEC 3-5, 11, 13), in one place for a turn and a check-in alike: the
character's card, the person's persona and saved memories in play (none for nobody in particular, or with
Learn from chat off), the summary, the live window, the older passages recall brings back, and
the lorebook entries the recent messages call up (with what the chat's length and the character's
earlier replies say of those that wait or are timed: `chat_so_far`). `bot/turn/prompt.py` builds
the prompt from it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from bot.characters.cards import StoredCharacter
from bot.characters.lorebook import ChatSoFar, LoreEntry, Lorebook
from bot.memory.recall import Passage
from bot.memory.saved_memories import SelectedMemories, memories_for_prompt
from bot.memory.window import WINDOW_READ, live_window, whole_chat
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
    lore_held: frozenset[str] = frozenset()  # the timed entries of `lore` earlier replies held in (sticky), by uid

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

    async def held() -> tuple[int | None, list[SummaryRow], list[MessageRow], list[Passage], list[LoreEntry],
                              frozenset[str]]:
        sight = await seen_by(store, conversation, character)
        summary, newest_first = await asyncio.gather(
            store.summaries.summaries(conversation.id, seen_by=sight),
            store.conversations.recent_messages(conversation.id, WINDOW_READ, up_to_pos=up_to_pos,
                                                seen_by=sight))
        window = live_window(newest_first, context_window)
        recalled = await recalling(newest_first, window, sight) if recalling is not None else []
        book = character.character.lorebook
        lore: list[LoreEntry] = []
        chat: ChatSoFar | None = None
        if book.entries:
            user = speaker if speaker is not None else addressee(window, person_id)
            chat = await chat_so_far(store, conversation.id, character.id, newest_first, up_to_pos, sight, book)
            lore = await asyncio.to_thread(  # matching keys may take a while: never on the event loop
                book.entries_for, [m.content for m in reversed(window)], context_window, user, chat)
        return sight, list(summary), window, recalled, lore, chat.sticky if chat is not None else frozenset()

    (profile, memories), (sight, summary, window, recalled, lore, lore_held) = await asyncio.gather(persons(), held())
    return Context(character, conversation.is_shared, memories, summary, window, recalled, lore,
                   profile.persona, profile.time_zone, sight, lore_held)


async def chat_so_far(store: Store, conversation_id: int, character_id: int, newest_first: list[MessageRow],
                      up_to_pos: int | None, sight: int | None, book: Lorebook) -> ChatSoFar | None:
    """What the lorebook's entries ask of the chat up to the message at `up_to_pos` (through
    `sight`), no more (None: they ask nothing): how long it is, read off the newest messages
    when they are the whole chat, else counted back in the store no further than an entry waits
    for; and which timed entries the character's earlier replies hold in or out."""
    waits, remembers = book.waits_for(), book.remembers()
    if not (waits.messages or waits.replies or remembers):
        return None
    whole = whole_chat(newest_first)  # else more may lie before the newest messages read

    async def since(after_pos: int | None, at_most: int, replies_of: int | None = None) -> int:
        """The messages after `after_pos` (None: all) up to the one answered, as far as `at_most`."""
        read = [m for m in newest_first if (after_pos is None or m.pos > after_pos)
                and (replies_of is None or (m.role == "assistant" and m.character_id == replies_of))]
        if whole or len(read) >= at_most or (after_pos is not None and after_pos >= newest_first[-1].pos):
            return len(read)
        return await store.conversations.count_back(conversation_id, up_to_pos, at_most, replies_of=replies_of,
                                                    seen_by=sight, after_pos=after_pos)

    messages = await since(None, waits.messages) if waits.messages else len(newest_first)
    replies = await since(None, waits.replies, character_id) if waits.replies else 0
    sticky, cooling = set(), set()
    if remembers:
        fired: dict[str, int] = {}  # a timed entry's uid: the place of the message its newest calling up answered
        for pos, receipt in await store.turns.receipts_before(conversation_id, character_id, up_to_pos, remembers):
            for entry in receipt.get("lore", []):
                if entry.get("fired"):
                    fired.setdefault(entry["fired"], pos)
        for entry in book.entries:
            if entry.timed and entry.uid in fired:
                # as SillyTavern counts: the messages since, the one answered with them; the
                # cooldown begins when the entry is no longer sticky
                after = await since(fired[entry.uid], entry.sticky + entry.cooldown)
                if after < entry.sticky:
                    sticky.add(entry.uid)
                elif after < entry.sticky + entry.cooldown:
                    cooling.add(entry.uid)
    return ChatSoFar(messages, replies, frozenset(sticky), frozenset(cooling))


def addressee(window: list[MessageRow], person_id: int | None) -> str:
    """What the person goes by in the conversation: the name on their latest message in the
    window (oldest first; "" if it holds none)."""
    return next((m.speaker_name for m in reversed(window) if m.person_id == person_id), "")
