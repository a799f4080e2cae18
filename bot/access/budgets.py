"""`[limits] tokens_per_day` (SPEC 17): the tokens spent on one person's behalf in a day — prompt
and reply, as the model server's `usage` reports them, else as counted — across chats,
characters and processes, kept in the database by day (the day in `[limits] timezone`). Past
the allowance the person is told once a day and their messages are still kept. What is spent is
recorded whether or not there is an allowance: /usage and /stats read it."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Callable
from zoneinfo import ZoneInfo

from bot import metrics
from storage.ports import Spend, Usage

PAST_BUDGET = ("You've used today's allowance of {limit:,} tokens with me. I've kept your message; "
               "I can answer again tomorrow.")


class Budgets:
    def __init__(self, usage: Usage, per_day: int | None, zone: ZoneInfo,
                 clock: Callable[[], float] = time.time):
        self.usage = usage
        self.per_day = per_day  # None: no allowance
        self.zone = zone
        self.clock = clock

    def today(self) -> str:
        return datetime.fromtimestamp(self.clock(), self.zone).date().isoformat()

    def days(self, count: int) -> tuple[str, str]:
        """The first and last day of the last `count` days, today included."""
        today = datetime.fromtimestamp(self.clock(), self.zone).date()
        return (today - timedelta(days=count - 1)).isoformat(), today.isoformat()

    def starts(self, day: str) -> float:
        """The moment `day` (as `days` names it) begins in `[limits] timezone`."""
        return datetime.fromisoformat(day).replace(tzinfo=self.zone).timestamp()

    def this_month(self) -> tuple[str, str]:
        today = datetime.fromtimestamp(self.clock(), self.zone).date()
        return today.replace(day=1).isoformat(), today.isoformat()

    async def past(self, person_id: int | None) -> bool:
        """Whether the person has spent today's allowance (nobody in particular has none)."""
        if self.per_day is None or person_id is None:
            return False
        today = self.today()
        return await self.usage.spent(person_id, today, today) >= self.per_day

    async def hold(self, person_id: int | None, turn_id: int, tokens: int) -> bool:
        """A turn starting now may spend up to `tokens`: whether it may start, judged against
        what the person spent today plus what their running turns may still spend (SPEC 17, a
        budget holds under a burst), and held in the database while it runs."""
        if self.per_day is None or person_id is None:
            return True
        return await self.usage.hold(turn_id, person_id, self.today(), tokens, self.per_day)

    def refusal(self) -> str:
        return PAST_BUDGET.format(limit=self.per_day or 0)

    async def first_notice_today(self, person_id: int) -> bool:
        """True once a day (in every process together): the person is told they are past it."""
        return await self.usage.notice_once(person_id, self.today())

    def cost(self, person_id: int | None, character_id: int, tokens_in: int, tokens_out: int,
             turns: int = 1) -> Spend | None:
        """What a model call cost, counted in the metrics, as it is added to the person's day
        (None for nobody in particular, who has no day)."""
        metrics.TOKENS.labels("in").inc(tokens_in)
        metrics.TOKENS.labels("out").inc(tokens_out)
        return Spend(person_id, character_id, self.today(), tokens_in, tokens_out, turns) \
            if person_id is not None else None

    async def charge(self, spend: Spend | None) -> None:
        if spend is not None:
            await self.usage.add_turn(*spend)

    async def checked_in(self, person_id: int, character_id: int) -> None:
        await self.usage.add_checkin(person_id, character_id, self.today())
