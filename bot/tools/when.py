"""When a reminder is due (SPEC 19): the server does the time arithmetic, never the model.

A reminder is asked for either after a duration ("2 hours", "90 minutes", "3 days") or on a day
("today", "tomorrow", a weekday, or a date like 2027-01-16) at a local time ("09:00", "9am"),
read in the person's time zone. A local time that a clock change skips or repeats resolves to the
later valid instant (PEP 495: of the two readings, fold 0 and fold 1, the later one in UTC): a
skipped 02:30 is 03:30 after the change, a repeated 01:30 is the second one. Daily and weekly
reminders keep the local time the person asked for across clock changes (`asked_clock`): a daily
02:30 that fell on 03:30 the day the clocks went forward is 02:30 again the next day. A date the
calendar cannot hold (the year 1, the year 9999 in a far zone) is "not a date", never a traceback.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bot.text import local_words

REPEATS = ("once", "daily", "weekly")
MIN_AHEAD_S = 60  # under a minute away is refused
MAX_AHEAD_S = 365 * 86_400  # over a year away is refused
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
         "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600,
         "hour": 3600, "hours": 3600, "d": 86_400, "day": 86_400, "days": 86_400, "w": 604_800, "week": 604_800,
         "weeks": 604_800}
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
CLOCK = re.compile(r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?")


class NotAWhen(ValueError):
    """The time asked for cannot be used; the message says why, for the model to pass on."""


def later_instant(local: datetime, zone: ZoneInfo) -> float:
    """A local wall time in `zone` as UTC seconds: of its two readings, the later one."""
    readings = [local.replace(tzinfo=zone, fold=fold).timestamp() for fold in (0, 1)]
    return max(readings)


def seconds_of(duration: str) -> float:
    """A duration as people write it: "2 hours", "90 minutes", "an hour", "half an hour", "1h30",
    "1 hour and a half", "2 days 3 hours"."""
    text = f" {duration.strip().lower().replace(',', ' ')} "
    text = re.sub(r"\bhalf an? hour\b", "30 minutes", text)
    text = re.sub(r"(\d+)\s*h\s*(\d+)(?=\s*$)", r"\1 h \2 m", text)  # 1h30: hours, then minutes
    text = re.sub(r"\b(an?|one) (?=[a-z])", "1 ", text)  # an hour, a day, one week
    text = re.sub(r"(\d+) (hours?|days?|weeks?|minutes?) and 1 half\b",
                  lambda m: f"{int(m[1]) + 0.5} {m[2]}", text)  # an hour and a half
    text = text.replace(" and ", " ").strip()
    parts = DURATION_PART.findall(text)
    if not parts or DURATION_PART.sub("", text).strip():
        raise NotAWhen(f"{duration!r} is not a duration like \"2 hours\" or \"90 minutes\"")
    total = 0.0
    for amount, unit in parts:
        if unit not in UNITS:
            raise NotAWhen(f"{unit!r} is not a unit of time (seconds, minutes, hours, days, weeks)")
        total += float(amount) * UNITS[unit]
    return total


def clock_of(text: str) -> time:
    found = CLOCK.fullmatch(text.strip().lower())
    if found is None:
        raise NotAWhen(f"{text!r} is not a time of day like \"09:00\" or \"9am\"")
    hour, minute = int(found[1]), int(found[2] or 0)
    if found[3]:
        if not 1 <= hour <= 12:
            raise NotAWhen(f"{text!r} is not a time of day")
        hour = hour % 12 + (12 if found[3] == "pm" else 0)
    if hour > 23 or minute > 59:
        raise NotAWhen(f"{text!r} is not a time of day")
    return time(hour, minute)


def day_of(text: str, today: date, at: time, now_local: datetime) -> date:
    word = text.strip().lower()
    if word == "today":
        return today
    if word == "tomorrow":
        return today + timedelta(days=1)
    coming = word.removeprefix("next ").removeprefix("this ").strip()
    if coming in WEEKDAYS:  # the next one; today only when the time is still ahead (never for "next friday")
        ahead = (WEEKDAYS.index(coming) - today.weekday()) % 7
        if ahead == 0 and (word.startswith("next ") or datetime.combine(today, at) <= now_local.replace(tzinfo=None)):
            ahead = 7
        return today + timedelta(days=ahead)
    try:
        return date.fromisoformat(word)
    except ValueError:
        raise NotAWhen(f"{text!r} is not a day like \"tomorrow\", \"friday\" or \"2027-01-16\"") from None


def resolve(now: float, zone: str, after: str | None = None, day: str | None = None, at: str | None = None) -> float:
    """When a reminder asked for now is due, in UTC seconds; NotAWhen says why it cannot be."""
    try:
        return _resolve(now, zone, after, day, at)
    except NotAWhen:
        raise
    except (OverflowError, OSError, ValueError) as impossible:  # a date the calendar cannot hold here
        raise NotAWhen(f"{day or after!r} is not a date a reminder can be set for") from impossible


def asked_clock(now: float, zone: str, due: float, at: str | None) -> str:
    """The local time of day the person asked for ("HH:MM"): `at` as they wrote it, else the
    time the reminder falls at (a repeating one keeps it across clock changes)."""
    clock = clock_of(at) if at else datetime.fromtimestamp(due, ZoneInfo(zone)).time()
    return f"{clock.hour:02d}:{clock.minute:02d}"


def _resolve(now: float, zone: str, after: str | None, day: str | None, at: str | None) -> float:
    where = ZoneInfo(zone)
    if after:
        due = now + seconds_of(after)
    elif at or day:
        local_now = datetime.fromtimestamp(now, where)
        clock = clock_of(at) if at else time(9, 0)
        chosen = day_of(day, local_now.date(), clock, local_now) if day else local_now.date()
        due = later_instant(datetime.combine(chosen, clock), where)
        if not day and due <= now:  # "at 9" said after nine: tomorrow at nine
            due = later_instant(datetime.combine(chosen + timedelta(days=1), clock), where)
    else:
        raise NotAWhen("say when: after a duration (\"after\": \"2 hours\") or a day and a time (\"day\", \"time\")")
    if due <= now:
        raise NotAWhen(f"{local_words(due, zone)} is in the past")
    if due - now < MIN_AHEAD_S:
        raise NotAWhen("a reminder must be at least a minute away")
    if due - now > MAX_AHEAD_S:
        raise NotAWhen("a reminder can be at most a year away")
    return due


def next_time(due_at: float, zone: str, repeat: str, at_clock: str | None = None) -> float | None:
    """Where a repeating reminder moves after `due_at`: a day or a week on, at the local time it
    was asked for (`at_clock`, "HH:MM"; else the local time it fell at) — None: a one-off one."""
    if repeat == "once":
        return None
    where = ZoneInfo(zone)
    local = datetime.fromtimestamp(due_at, where).replace(tzinfo=None, fold=0)
    if at_clock is not None:
        local = datetime.combine(local.date(), clock_of(at_clock))
    step = timedelta(days=1 if repeat == "daily" else 7)
    return later_instant(local + step, where)
