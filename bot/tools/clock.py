"""`time` (SPEC 18): the date and time now, in the person's time zone (their own, else `[limits]
timezone`, else UTC) — read from the clock, never guessed by the model."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from bot.tools.toolbox import Outcome, TurnScope, result

SPEC = {
    "type": "function",
    "function": {
        "name": "time",
        "description": "The current date and time where the person is (their time zone).",
        "parameters": {"type": "object", "properties": {}},
    },
}


def local_now(now: float, zone: str) -> datetime:
    return datetime.fromtimestamp(now, ZoneInfo(zone))


class Clock:
    name, spec, guidance = "time", SPEC, ""
    local = True  # read from our clock

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        now = local_now(scope.now, scope.zone)
        return Outcome(result(now=now.strftime("%A %d %B %Y, %H:%M"), time_zone=scope.zone,
                              utc_offset=now.strftime("%z")),
                       shown=f"🕰️ {now:%H:%M} {scope.zone}")
