"""The cast: the deployment's characters with their stored ids, and the lookups every service
needs around them — a conversation by its key (and back), a person by a platform identity.
Turns, scenes, check-ins, notifications and commands take it directly (nothing reaches through
the turn handler for it)."""

from __future__ import annotations

from bot.characters.cards import StoredCharacter
from bot.contract import ConversationKey, Identity
from bot.text import clean_text
from storage.ports import ConversationRow, Conversations, People

A_PERSON = "(a person)"  # after the name of a person named like a character (SPEC 15)


class Cast:
    def __init__(self, conversations: Conversations, people: People, characters: dict[str, StoredCharacter]):
        self.conversations = conversations
        self.people = people
        self.characters = {name.casefold(): stored for name, stored in characters.items()}

    def character(self, name: str) -> StoredCharacter:
        """A configured character by name (any case)."""
        return self.characters[name.casefold()]

    def named(self, name: str) -> StoredCharacter | None:
        """The character of that name, or None (a name a person typed)."""
        return self.characters.get(name.strip().casefold())

    def names(self) -> list[str]:
        """The characters' names, in config order."""
        return [stored.character.name for stored in self.characters.values()]

    def stored_by_id(self, character_id: int | None) -> StoredCharacter | None:
        return next((s for s in self.characters.values() if s.id == character_id), None)

    async def conversation_for(self, key: ConversationKey) -> ConversationRow:
        return await self.conversations.conversation(
            key.platform, key.chat_id, key.thread_id, self.character(key.character).id, key.is_shared)

    def key_of(self, conversation: ConversationRow) -> ConversationKey | None:
        """The key of a stored conversation (to reach it again on its platform); None when its
        character is no longer in the config."""
        stored = self.stored_by_id(conversation.character_id)
        if stored is None:
            return None
        return ConversationKey(conversation.platform, conversation.chat_id, conversation.thread_id or None,
                               stored.character.name, conversation.is_shared)

    async def person_for(self, identity: Identity | None) -> int | None:
        """The person behind a platform identity; None for nobody in particular."""
        if identity is None:
            return None
        return await self.people.person_for_identity(identity.platform, identity.user_id)

    def as_a_person(self, display_name: str) -> str:
        """How a person's name is stored with their messages (SPEC 15 "People are not
        characters"): a person named like a character of the deployment is marked as a person, so
        no line of theirs ever takes the form of that character's line."""
        name = clean_text(display_name).strip()
        return f"{name} {A_PERSON}" if name.casefold() in self.characters else name
