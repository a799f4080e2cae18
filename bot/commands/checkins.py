"""`/checkins on|off` and the "🔕 Don't write first" button (SPEC 14): whether a character may
write first to this person after an absence."""

from __future__ import annotations

from typing import Callable

from bot.writing_first.checkins import MIN_MESSAGES
from bot.commands.base import Person, Press, UsageError, parse_bool
from bot.contract import CommandContext, CommandResult
from storage.ports import Checkins

OFF = "{name} won't write first any more. Send /checkins on if you'd like that again."
ON = "{name} may write first when you've been away a while. /checkins off stops it."
NOT_SET_UP = " (This bot's owner has not turned check-ins on for {name} yet; your choice is kept.)"


class CheckinCommands:
    def __init__(self, checkins: Checkins, writes_first: Callable[[str], bool]):
        self.absences = checkins  # the port
        self.writes_first = writes_first  # whether a character has [characters.checkins]
        self.commands = {"checkins": self.checkins}
        self.presses = {"nocheckin": Press(self._press_off)}

    async def checkins(self, ctx: CommandContext, person: Person, state: str | bool | None = None) -> CommandResult:
        if state is None:
            raise UsageError("Send /checkins off to stop me writing first after you've been away, "
                             "or /checkins on to let me.")
        wanted = parse_bool(state, "state", "on or off")
        await self.absences.set_wanted(person.id, person.character_id, wanted, MIN_MESSAGES)
        text = (ON if wanted else OFF).format(name=person.character_name)
        if wanted and not self.writes_first(person.character_name):
            text += NOT_SET_UP.format(name=person.character_name)
        return CommandResult(text)

    async def _press_off(self, ctx, person: Person, verb: str) -> CommandResult:
        """The button under a check-in: its own short line; the check-in's text stays (SPEC 14)."""
        result = await self.checkins(ctx, person, "off")
        return CommandResult(result.text, apart=True)
