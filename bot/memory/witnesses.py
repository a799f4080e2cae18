"""Who knows what (SPEC 22): in a scene, each character knows only what it witnessed.

- **Presence** is stored (storage's `Presence` port), so every process agrees. A character is
  brought in when it speaks in the scene (storage does that as it stores its message), when a
  message names it or is addressed to it (`bring_in_named`, before the message is stored, so it
  witnesses the message that called it), or by `/scene invite`; it leaves by `/scene dismiss`
  (and on Telegram when its bot leaves the group).
- **Witnesses**: every message of a scene records the characters present when it was stored.
- **What a character reads** (`seen_by`): the live window, every tier of the summary, recall by
  words and by meaning, and the receipts of `/memory why` are all read through one sight. A
  character that witnessed every message reads the scene whole and shares the scene's summary
  with every other such character (a scene where everyone saw everything costs what it cost
  before); one that missed any reads only what it witnessed, with a summary of its own. A
  narrator (`omniscient = true`) reads everything.
"""

from __future__ import annotations

from typing import Iterable

from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.contract import where_named
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


async def bring_in_named(store: Store, cast: Cast, conversation: ConversationRow, text: str,
                         addressed: Iterable[StoredCharacter] = ()) -> None:
    """Before a scene's message is stored: the characters it is addressed to and those it names
    are present from now on, so they witness it."""
    if conversation.is_shared:
        characters = [*addressed, *named_in(cast, text)]
        if characters:
            await store.presence.bring_in(conversation.id, [stored.id for stored in characters])
