"""`/timezone [name]` and `/reminders [cancel <n>]`, with a cancel button per reminder (SPEC 19):
the person's time zone (what "tomorrow at nine" means for them), and their pending reminders with
their local times. A person sees and cancels only their own (linked accounts together)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from bot.commands.base import (
    Missing,
    Person,
    Press,
    UsageError,
    button,
    number_arg,
    parse_count,
)
from bot.contract import CommandContext, CommandResult
from bot.text import local_words
from storage.ports import People, Reminders

REPEATING = {"once": "", "daily": ", every day", "weekly": ", every week"}
NONE_YET = "You have no reminders waiting. Ask {name} to remind you of something — \"remind me tomorrow at nine\"."
TIMEZONE_HELP = ("Your time zone is {zone}{whose} (it is {now} there now). Set yours with /timezone and its name, "
                 "like /timezone Europe/Paris or /timezone America/New_York.")
DEFAULT_ZONE = ", the bot's default: you have not set your own"
# The areas of the IANA database's canonical names (Area/Location), besides UTC and Etc/GMT±N:
# never `localtime`, `Factory`, `posixrules` or the old country-wide aliases (`US/Eastern`, `GB`).
AREAS = ("Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Europe", "Indian",
         "Pacific", "Etc")
OFFSET = re.compile(r"(?:utc|gmt)?\s*([+-])\s*(\d{1,2})(?::?00)?", re.IGNORECASE)


def canonical_zones() -> dict[str, str]:
    """Every canonical IANA zone name the system knows, by its casefolded name."""
    return {name.casefold(): name for name in available_timezones()
            if name == "UTC" or name.split("/", 1)[0] in AREAS}


def suggestion(wanted: str, zones: dict[str, str]) -> str | None:
    """A zone for a city (`paris` → Europe/Paris) or an offset (`UTC+2` → Etc/GMT-2), or None."""
    city = "_".join(wanted.split()).casefold()
    by_city = sorted(name for key, name in zones.items() if key.rsplit("/", 1)[-1] == city and "/" in key
                     and not key.startswith("etc/"))
    if by_city:
        return by_city[0]
    if found := OFFSET.fullmatch(wanted.strip()):
        hours = int(found[2])
        if hours == 0:
            return "UTC"
        if hours <= 14:  # Etc/GMT's sign is POSIX's: Etc/GMT-2 is two hours ahead of UTC
            return f"Etc/GMT{'-' if found[1] == '+' else '+'}{hours}"
    return None


def zone_named(text: str) -> str:
    """A canonical IANA time zone as the person wrote it (any case), or a UsageError suggesting
    one for a city or an offset, else with an example."""
    wanted = text.strip()
    zones = canonical_zones()
    name = zones.get(wanted.casefold())
    if name is None:
        if (suggested := suggestion(wanted, zones)) is not None:
            fixed = " (a fixed offset all year: for your clock changes, use your city's)" if "GMT" in suggested else ""
            raise UsageError(f"“{wanted[:60]}” is not a time zone name. Did you mean {suggested}{fixed}? "
                             f"Send /timezone {suggested}.")
        raise UsageError(f"“{wanted[:60]}” is not a time zone I know. Use its IANA name, like Europe/Paris, "
                         "America/New_York or Asia/Tokyo.")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"“{wanted[:60]}” is not a time zone I can read.") from None
    return name


class ReminderCommands:
    def __init__(self, people: People, reminders: Reminders, default_zone: str, clock):
        self.people = people
        self.reminders = reminders
        self.default_zone = default_zone  # [limits] timezone: for a person who set none
        self.clock = clock
        self.commands = {"timezone": self.timezone, "reminders": self.reminders_command}
        self.presses = {"rcancel": Press(self._press_cancel, number_arg)}

    async def timezone(self, ctx: CommandContext, person: Person, zone: str | None = None) -> CommandResult:
        if zone is None:
            own = (await self.people.profile(person.id)).time_zone
            mine = own or self.default_zone
            now = datetime.fromtimestamp(self.clock(), ZoneInfo(mine))
            return CommandResult(TIMEZONE_HELP.format(zone=mine, whose="" if own else DEFAULT_ZONE,
                                                      now=f"{now:%H:%M} on {now:%A}"))
        name = zone_named(zone)
        await self.people.set_time_zone(person.id, name)
        now = datetime.fromtimestamp(self.clock(), ZoneInfo(name))
        return CommandResult(f"Your time zone is now {name} (it is {now:%H:%M} on {now:%A} there). Reminders you "
                             "set from now on, and the time the characters know, follow it.")

    async def reminders_command(self, ctx: CommandContext, person: Person, action: str | None = None,
                                n: Any = None) -> CommandResult:
        if action == "cancel" or (action is None and n is not None):
            if n is None:
                raise UsageError("Which reminder? /reminders cancel and its number, as /reminders shows it.")
            return await self.cancel(person, parse_count(n, "The reminder's number", 1, 2**62))
        if action not in (None, "list"):
            raise UsageError("Send /reminders to see yours, or /reminders cancel and a number to cancel one.")
        pending = await self.reminders.pending(person.id)
        if not pending:
            return CommandResult(NONE_YET.format(name=person.character_name))
        lines = [f"Your reminders ({len(pending)}):"]
        for number, reminder in enumerate(pending, 1):  # each person's own numbers, soonest first
            lines.append(f"⏰ {number} · {local_words(reminder.due_at, reminder.zone)}"
                         f"{REPEATING.get(reminder.repeat, '')} — {reminder.words}")
        lines.append("/reminders cancel <number> cancels one.")
        buttons = [[button(person, f"Cancel ⏰ {number}", "rcancel", reminder.id)]  # the button names the reminder
                   for number, reminder in enumerate(pending, 1)]
        return CommandResult("\n".join(lines), buttons=buttons)

    async def cancel(self, person: Person, number: int) -> CommandResult:
        """Cancel the person's reminder `number`, as /reminders numbers theirs (1 is the soonest)."""
        pending = await self.reminders.pending(person.id)
        if not 1 <= number <= len(pending) or not await self.reminders.cancel(person.id, pending[number - 1].id):
            raise Missing(f"You have no reminder {number}. /reminders lists yours with their numbers.")
        return CommandResult(f"Reminder {number} is cancelled.")

    async def _press_cancel(self, ctx, person: Person, verb: str, reminder_id: int) -> CommandResult:
        return await self.cancel_reminder(person, reminder_id)

    async def cancel_reminder(self, person: Person, reminder_id: int) -> CommandResult:
        """Cancel the reminder a button or the memory page names (its id, never its place in the
        list, which moves as reminders come and go); the answer names its number as /reminders does."""
        numbers = {reminder.id: n for n, reminder in enumerate(await self.reminders.pending(person.id), 1)}
        if reminder_id not in numbers or not await self.reminders.cancel(person.id, reminder_id):
            raise Missing("That reminder is gone already. /reminders lists yours.")
        return CommandResult(f"Reminder {numbers[reminder_id]} is cancelled.")
