"""`/scene`, `/scene invite <character>`, `/scene dismiss <character>` (SPEC 22): who is present in
this chat's scene, and bringing a character in or sending it out. A character present witnesses
what is said from then on; one dismissed witnesses nothing until it is brought in again (invited,
named, or speaking there). Inviting or dismissing a character is acting on it: the gate asks
that character's `[access]` (the router, as for every command naming a character)."""

from __future__ import annotations

from dataclasses import replace
from typing import Awaitable, Callable

from bot.characters.cast import Cast
from bot.commands.base import Person, UsageError
from bot.contract import CommandContext, CommandResult, ConversationKey
from storage.ports import Presence

NOT_A_SCENE = ("A scene is a group chat where characters talk; here it is just you and {name}, and "
               "{name} sees everything you write.")
WHICH = "Which character? /scene {action} <character>; the characters: {names}."
CAME = "{name} is in the scene now: {name} witnesses what is said here from now on, not what came before."
ALREADY = "{name} is in the scene already."
LEFT = ("{name} has left the scene: {name} witnesses nothing said here until invited again "
        "(/scene invite {name}), named, or speaking here.")
NOT_HERE = "{name} is not in the scene."
CANNOT_BE_HERE = "{name} cannot be in this scene: {name}'s bot is not a member of this chat (add it first)."


class SceneCommands:
    def __init__(self, presence: Presence, cast: Cast, may_witness: Callable[[ConversationKey, str], Awaitable[bool]]):
        self.presence = presence
        self.cast = cast
        self.may_witness = may_witness  # whether a character can be in a chat (Telegram: its bot is a member)
        self.commands = {"scene": self.scene}
        self.presses: dict = {}

    async def scene(self, ctx: CommandContext, person: Person, action: str | None = None) -> CommandResult:
        if not ctx.conversation.is_shared:
            raise UsageError(NOT_A_SCENE.format(name=person.character_name))
        action = (action or "list").lower()
        conversation = await self.cast.conversation_for(ctx.conversation)
        if action == "list":
            return CommandResult(await self.listed(conversation.id))
        if not person.named:
            raise UsageError(WHICH.format(action=action, names=", ".join(self.cast.names())))
        name = person.character_name
        if action == "invite":
            if not await self.may_witness(replace(ctx.conversation, character=name), name):
                raise UsageError(CANNOT_BE_HERE.format(name=name))
            came = await self.presence.bring_in(conversation.id, [person.character_id])
            return CommandResult((CAME if came else ALREADY).format(name=name))
        if await self.presence.dismiss(conversation.id, person.character_id):
            return CommandResult(LEFT.format(name=name))
        return CommandResult(NOT_HERE.format(name=name), ok=False)

    async def listed(self, conversation_id: int) -> str:
        present = [stored.character.name for character_id in await self.presence.present(conversation_id)
                   if (stored := self.cast.stored_by_id(character_id)) is not None]
        narrators = [name for name in self.cast.names() if self.cast.character(name).character.omniscient]
        lines = [f"In this scene: {', '.join(present)}." if present else "Nobody is in this scene yet: a character "
                 "comes in when it is named, answers here, or is invited (/scene invite <character>)."]
        if narrators:
            lines.append(f"Witnessing everything (narrators): {', '.join(narrators)}.")
        lines.append("A character witnesses only what is said while it is here.")
        return "\n".join(lines)
