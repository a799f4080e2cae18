"""`/memory page` (SPEC 21): a private one-time link to the person's memory page, valid 10
minutes. The page shows the characters `[access]` lets the person reach as this command's event
describes them (the door keeps their ids with the link)."""

from __future__ import annotations

from bot.access.door import LINK_TTL_S, SESSION_TTL_S, Door
from bot.access.gate import PAGE, Gate
from bot.characters.cast import Cast
from bot.commands.base import Person
from bot.contract import CommandContext, CommandResult

NO_PAGE = "This bot has no memory page: its owner has not set one up ([web] in the config)."
NOT_SERVED = ("The memory page is not available right now: this bot could not open its web port. Its owner "
              "has been told.")


class PageCommands:
    def __init__(self, door: Door, cast: Cast, gate: Gate, address: str | None):
        self.door = door
        self.cast = cast
        self.gate = gate
        self.address = address  # where links point (`[web] public_url`); None: no page served
        self.served = True  # False: this process could not bind `[web] port` (no link to whatever holds it)
        self.commands = {"page": self.page}
        self.presses = {}

    async def page(self, ctx: CommandContext, person: Person) -> CommandResult:
        if self.address is None:
            return CommandResult(NO_PAGE, ok=False)
        if not self.served:
            return CommandResult(NOT_SERVED, ok=False)
        characters = tuple([self.cast.character(name).id for name in self.cast.names()
                            if (await self.gate.admit(PAGE, name, ctx.asker)).admitted])
        code = await self.door.make_link(person.id, characters)
        return CommandResult(f"Your memory page: {self.address}/open/{code}\n"
                             f"The link works once, within {LINK_TTL_S // 60} minutes, and only for you: do not "
                             f"share it. Your session then lasts {SESSION_TTL_S // 3600} hours.")
