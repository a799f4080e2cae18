"""`/usage` and `/stats` (SPEC 17): a person's own tokens against their allowance; for the bot's
owners (`[owner] ids`, and the console), today and the last 7 days — turns, tokens in and out,
people active, check-ins sent, per character, and the five people who spent most."""

from __future__ import annotations

from bot.access.budgets import Budgets
from bot.commands.base import Person
from bot.contract import CommandContext, CommandResult
from storage.ports import DayTotals, Store

NOT_OWNER = "Only the bot's owner can see /stats."
TOP_SPENDERS = 5


def _totals(label: str, totals: DayTotals) -> str:
    return (f"{label}: {totals.turns:,} turn{'' if totals.turns == 1 else 's'}, {totals.tokens_in:,} tokens in, "
            f"{totals.tokens_out:,} out, "
            f"{totals.people:,} {'person' if totals.people == 1 else 'people'}, "
            f"{totals.checkins:,} check-in{'' if totals.checkins == 1 else 's'}")


class UsageCommands:
    def __init__(self, store: Store, budgets: Budgets, owners: frozenset[str]):
        self.store = store
        self.budgets = budgets
        self.owners = owners  # "platform:user id"
        self.commands = {"usage": self.usage, "stats": self.stats}
        self.presses = {}

    async def usage(self, ctx: CommandContext, person: Person) -> CommandResult:
        today = self.budgets.today()
        spent_today = await self.store.usage.spent(person.id, today, today)
        spent_month = await self.store.usage.spent(person.id, *self.budgets.this_month())
        allowance = self.budgets.per_day
        first = f"Your tokens today: {spent_today:,}" + (f" of {allowance:,} a day." if allowance else
                                                         " (no daily allowance).")
        return CommandResult(f"{first}\nThis month: {spent_month:,}.")

    def is_owner(self, ctx: CommandContext) -> bool:
        identity = ctx.identity
        return identity is not None and (identity.platform == "console"
                                         or f"{identity.platform}:{identity.user_id}" in self.owners)

    async def stats(self, ctx: CommandContext, person: Person) -> CommandResult:
        if not self.is_owner(ctx):
            return CommandResult(NOT_OWNER, ok=False)
        lines = []
        for label, (first, last) in (("Today", self.budgets.days(1)), ("The last 7 days", self.budgets.days(7))):
            totals = await self.store.usage.totals(first, last)
            lines.append(_totals(f"{label} ({first}{'' if first == last else ' – ' + last})", totals.pop(None)))
            lines += [_totals(f"  {name}", character) for name, character in totals.items()]
        spenders = await self.store.usage.top_spenders(*self.budgets.days(7), TOP_SPENDERS)
        if spenders:
            lines.append("Who spent most in the last 7 days: " + "; ".join(
                f"{n}. {name} — {tokens:,} tokens" for n, (name, tokens) in enumerate(spenders, 1)))
        return CommandResult("\n".join(lines))
