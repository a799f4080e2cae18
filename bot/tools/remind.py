"""`remind` (SPEC 19): the model asks for a reminder; the server works out when, in the person's
time zone, stores it (in UTC, with the zone and the person's words), and tells the model the
resolved local time so the character confirms it ("Tuesday 16 January 2027, 09:00"). Refused,
with the reason, when it is in the past, under a minute or over a year away, or the person has
MAX_PENDING already. Offered on the chat platforms (where a character can write first), for a
person: the reminder is theirs, taken from the platform event. It is stored under the turn, so a
regenerated reply takes it back."""

from __future__ import annotations

from typing import Any

from bot.contract import traits_of
from bot.text import local_words
from bot.tools.toolbox import Outcome, TurnScope, result
from bot.tools.when import REPEATS, NotAWhen, asked_clock, resolve
from storage.ports import Reminders, TooManyReminders

MAX_PENDING = 25
MAX_WORDS = 500
SPEC = {
    "type": "function",
    "function": {
        "name": "remind",
        "description": "Set a reminder the person asks for; at that time you write to them. Give either "
                       "`after` (a duration from now) or `day` and `time` (the person's local time); the "
                       "answer says the exact time it was set for: tell them.",
        "parameters": {
            "type": "object",
            "properties": {
                "what": {"type": "string", "description": "what to remind them of, in their words"},
                "after": {"type": "string", "description": "e.g. \"2 hours\", \"90 minutes\", \"3 days\""},
                "day": {"type": "string", "description": "today, tomorrow, a weekday, or YYYY-MM-DD"},
                "time": {"type": "string", "description": "local time of day, e.g. 09:00"},
                "repeat": {"type": "string", "enum": list(REPEATS), "description": "default once"},
            },
            "required": ["what"],
        },
    },
}


class Remind:
    name, spec, guidance = "remind", SPEC, ""
    not_here = ("You cannot set reminders in this chat: they are delivered on Discord and Telegram only. If asked "
                "for one, say so plainly; never promise one.")
    local = True  # it answers with our own words
    stores = True  # what the model wrote is kept and sent later: refused once outside text entered

    def __init__(self, reminders: Reminders):
        self.reminders = reminders

    def offered(self, scope: TurnScope) -> bool:
        return scope.person_id is not None and scope.asker is not None and traits_of(scope.asker.platform).chat

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        what, repeat = arguments.get("what"), arguments.get("repeat") or "once"
        if not isinstance(what, str) or not what.strip():
            return result(error="what must say what to remind them of")
        if len(what) > MAX_WORDS:
            return result(error=f"what is over {MAX_WORDS} characters; say it shorter")
        if repeat not in REPEATS:
            return result(error="repeat must be once, daily or weekly")
        fields = {key: arguments.get(key) for key in ("after", "day", "time")}
        if any(value is not None and not isinstance(value, str) for value in fields.values()):
            return result(error="after, day and time must be text")
        try:
            due = resolve(scope.now, scope.zone, fields["after"], fields["day"], fields["time"])
        except NotAWhen as why:
            return result(error=f"not set: {why}")
        assert scope.person_id is not None  # offered to a person only
        try:
            row = await self.reminders.add(scope.person_id, scope.character_id, scope.conversation_id,
                                                 scope.turn_id, due, scope.zone, what.strip(), repeat, MAX_PENDING,
                                                 asked_by=scope.speaker_name,
                                                 at_clock=asked_clock(scope.now, scope.zone, due, fields["time"]))
        except TooManyReminders:
            return result(error=f"not set: they already have {MAX_PENDING} reminders waiting; they can cancel one "
                                "with /reminders")
        when = local_words(due, scope.zone)
        number = [reminder.id for reminder in await self.reminders.pending(scope.person_id)].index(row.id) + 1
        return Outcome(result(set=True, number=number, when=when, repeat=repeat, what=row.words),
                       shown=f"⏰ reminder: {when}")
