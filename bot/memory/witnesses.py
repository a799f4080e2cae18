"""Who knows what (SPEC 22): in a scene, each character knows only what it witnessed.

- **Presence** is stored (storage's `Presence` port), so every process agrees. A character is
  brought in when it speaks in the scene (storage does that as it stores its message), when a
  message names it or is addressed to it (`Witnesses.bring_in`, before the message is stored, so
  it witnesses the message that called it), or by `/scene invite`; it leaves by `/scene dismiss`
  (and on Telegram when its bot leaves the group).
- **Witnesses**: every message of a scene records the characters present when it was posted:
  when it was stored, or, for a reply that streamed, when its first part showed (with its
  speaker and the characters it names).
- **What a character reads** (`seen_by`): the live window, every tier of the summary, recall by
  words and by meaning, and the receipts of `/memory why` are all read through one sight. A
  character that witnessed every message reads the scene whole and shares the scene's summary
  with every other such character (a scene where everyone saw everything costs what it cost
  before); one that missed any reads only what it witnessed, with a summary of its own. A
  narrator (`omniscient = true`) reads everything.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable

from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.contract import ConversationKey, where_named
from storage.ports import ConversationRow, Store


async def seen_by(store: Store, conversation: ConversationRow, character: StoredCharacter) -> int | None:
    """The sight `character` reads `conversation` through: None, every message (a one-to-one
    conversation, a narrator, or a character that witnessed all of the scene); else its own id,
    only the messages it witnessed, and its own summary."""
    if not conversation.is_shared or character.character.omniscient:
        return None
    return character.id if await store.presence.missed_any(conversation.id, character.id) else None


def named_in(cast: Cast, text: str) -> list[StoredCharacter]:
    """The characters a text names, as whole words (any case), in the order they are named."""
    found = sorted((at, name) for name in cast.names() if (at := where_named(text, name)) is not None)
    return [cast.character(name) for _, name in found]


class Witnesses:
    """Who comes into a scene as a message is stored there. `may_witness(key, character)`: whether
    the character can be in that chat at all (SPEC 22: on Telegram, only while its bot is a member;
    `Scenes.may_witness` asks the character's voice)."""

    def __init__(self, store: Store, cast: Cast,
                 may_witness: Callable[[ConversationKey, str], Awaitable[bool]] | None = None):
        self.store = store
        self.cast = cast
        self.may_witness = may_witness

    async def bring_in(self, conversation: ConversationRow, text: str, addressed: Iterable[StoredCharacter] = ()
                       ) -> list[int]:
        """Before a scene's message is stored: the characters it is addressed to and those it
        names are present from now on (those that can be there), so they witness it. Their ids
        (none outside a scene)."""
        if not conversation.is_shared:
            return []
        present = set(await self.store.presence.present(conversation.id))
        called = {stored.id: stored for stored in [*addressed, *named_in(self.cast, text)]}
        coming = [stored for stored in called.values() if stored.id not in present]
        if self.may_witness is not None:
            coming = [stored for stored in coming if await self.may_witness(ConversationKey(
                conversation.platform, conversation.chat_id, conversation.thread_id or None, stored.character.name,
                True), stored.character.name)]
        if coming:
            await self.store.presence.bring_in(conversation.id, [stored.id for stored in coming])
        return [id_ for id_ in called if id_ in present] + [stored.id for stored in coming]
