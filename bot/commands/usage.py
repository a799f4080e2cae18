"""`/usage` and `/stats` (SPEC 17): a person's own tokens against their allowance; for the bot's
owners (`[owner] ids`, and the console), today and the last 7 days — turns, tokens in and out,
people active, check-ins sent, per character, and the five people who spent most."""

from __future__ import annotations

from dataclasses import dataclass

from bot.access.budgets import Budgets
from bot.commands.base import Person
from bot.contract import CommandContext, CommandResult, traits_of
from storage import ports

NOT_OWNER = "Only the bot's owner can see /stats."
TOP_SPENDERS = 5


@dataclass(frozen=True)
class Usage:
    """A person's tokens (SPEC 17), as every page shows them (the chat here; the memory page too)."""

    today: int
    month: int
    allowance: int | None  # a day's, None: no allowance
    pictures: int = 0  # drawn for them today (SPEC 20)
    pictures_a_day: int | None = None  # [pictures] per_day; None: no pictures here

    def as_text(self) -> str:
        first = f"Your tokens today: {self.today:,}" + (f" of {self.allowance:,} a day." if self.allowance else
                                                        " (no daily allowance).")
        pictures = (f"\nPictures today: {self.pictures} of {self.pictures_a_day} a day."
                    if self.pictures_a_day is not None else "")
        return f"{first}\nThis month: {self.month:,}.{pictures}"


@dataclass(frozen=True)
class Period:
    """The totals of some days, in all and by character."""

    first: str
    last: str
    everyone: ports.DayTotals
    characters: dict[str, ports.DayTotals]


@dataclass(frozen=True)
class Stats:
    """What `/stats` shows the owner: today, the last 7 days, who spent most in them."""

    today: Period
    week: Period
    spenders: list[tuple[str, int]]  # (display name, tokens), most first

    def as_text(self) -> str:
        lines = []
        for label, period in (("Today", self.today), ("The last 7 days", self.week)):
            days = period.first if period.first == period.last else f"{period.first} – {period.last}"
            lines.append(_totals(f"{label} ({days})", period.everyone))
            lines += [_totals(f"  {name}", character) for name, character in period.characters.items()]
        if self.spenders:
            lines.append("Who spent most in the last 7 days: " + "; ".join(
                f"{n}. {name} — {tokens:,} tokens" for n, (name, tokens) in enumerate(self.spenders, 1)))
        return "\n".join(lines)


def _totals(label: str, totals: ports.DayTotals) -> str:
    return (f"{label}: {totals.turns:,} turn{'' if totals.turns == 1 else 's'}, {totals.tokens_in:,} tokens in, "
            f"{totals.tokens_out:,} out, "
            f"{totals.people:,} {'person' if totals.people == 1 else 'people'}, "
            f"{totals.checkins:,} check-in{'' if totals.checkins == 1 else 's'}")


class UsageCommands:
    """The typed results (`usage_of`, `stats`), and the chat commands that render them."""

    def __init__(self, usage: ports.Usage, budgets: Budgets, owners: frozenset[str], pictures_a_day: int | None = None):
        self.ledger = usage  # the port
        self.budgets = budgets
        self.pictures_a_day = pictures_a_day  # [pictures] per_day; None without [pictures]
        self.owners = owners  # "platform:user id"
        self.commands = {"usage": self.usage, "stats": self.stats_command}
        self.presses = {}

    async def usage_of(self, person_id: int) -> Usage:
        today = self.budgets.today()
        return Usage(await self.ledger.spent(person_id, today, today),
                     await self.ledger.spent(person_id, *self.budgets.this_month()), self.budgets.per_day,
                     await self.ledger.pictures(person_id, today) if self.pictures_a_day is not None else 0,
                     self.pictures_a_day)

    async def stats(self) -> Stats:
        async def period(first: str, last: str) -> Period:
            totals = await self.ledger.totals(first, last)
            return Period(first, last, totals.pop(None), totals)
        return Stats(await period(*self.budgets.days(1)), await period(*self.budgets.days(7)),
                     await self.ledger.top_spenders(*self.budgets.days(7), TOP_SPENDERS))

    def is_owner(self, ctx: CommandContext) -> bool:
        identity = ctx.identity
        return identity is not None and (traits_of(identity.platform).owned
                                         or self.owns([(identity.platform, identity.user_id)]))

    def owns(self, identities: list[tuple[str, str]]) -> bool:
        """Whether one of these (platform, user id) is in `[owner] ids` (linked accounts: any)."""
        return any(f"{platform}:{user_id}" in self.owners for platform, user_id in identities)

    async def usage(self, ctx: CommandContext, person: Person) -> CommandResult:
        return CommandResult((await self.usage_of(person.id)).as_text())

    async def stats_command(self, ctx: CommandContext, person: Person) -> CommandResult:
        if not self.is_owner(ctx):
            return CommandResult(NOT_OWNER, ok=False)
        return CommandResult((await self.stats()).as_text())
