"""What the memory page shows and changes (SPEC 21). Every change goes through the same service
as its `/memory` command (bot/commands/): the same checks, limits and words, and the next reply
sees it. The person is the session's, taken from the database; a memory, reminder or character
named in a form is looked up for that person only, so another person's id is simply not there.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Awaitable, Callable

from bot.access.budgets import Budgets
from bot.access.door import Door
from bot.access.gate import Gate
from bot.characters.cast import Cast
from bot.commands.account import AccountCommands
from bot.commands.base import Missing, Person, UsageError
from bot.commands.memories import SavedMemoryCommands
from bot.commands.persona import PersonaCommands
from bot.commands.reminders import REPEATING, ReminderCommands
from bot.commands.usage import UsageCommands
from bot.contract import (
    Attachment,
    CommandResult,
    OwnerPage,
    PageCharacter,
    PageEntry,
    PageMemory,
    PageReply,
    PageNotice,
    PageReminder,
    PageSummary,
    PageVisit,
    PersonPage,
    TotalsRow,
)
from bot.memory.saved_memories import EVERY_MEMORY, change_shown, memory_marks
from bot.memory.story import RECEIPTS_READ, REPLIES_SHOWN, page_change, page_reply, story, times_used
from bot.text import local_words, parse_number
from storage.ports import CHARACTER, GLOBAL, HISTORY_KEPT_S, DayTotals, MemoryRow, Store

CHART_DAYS = 30
NOT_ON_PAGE = "That character is not on your page."
DENIED = ("The bot's owner no longer lets you reach {names}, so nothing about {them} can be changed here. "
          "You can still export or delete what is stored about you.")


def _memory(row: MemoryRow, now: float, story: str = "", used_in: tuple[int, ...] = ()) -> PageMemory:
    return PageMemory(row.id, row.content, row.pinned, tuple(m for m in memory_marks(row, now) if m != "pinned"),
                      story, used_in)


def _denied(names: list[str]) -> str:
    return DENIED.format(names=" and ".join(names), them="them" if len(names) > 1 else "that character")


def _totals(label: str, totals: DayTotals) -> TotalsRow:
    return TotalsRow(label, totals.turns, totals.tokens_in, totals.tokens_out, totals.people, totals.checkins)


# A form of the page: (the person as one character of the page, the form's fields, the characters
# the page shows) → what the command it runs answered.
Action = Callable[[Person, dict[str, str], frozenset[int]], Awaitable[CommandResult]]


class PageDesk:
    """The core's MemoryPage (bot/contract.py)."""

    def __init__(self, store: Store, cast: Cast, door: Door, budgets: Budgets, memories: SavedMemoryCommands,
                 persona: PersonaCommands, reminders: ReminderCommands, usage: UsageCommands,
                 account: AccountCommands, platforms: dict[str, str], clock: Callable[[], float], gate: Gate):
        self.store = store
        self.gate = gate  # [access], asked again on every request
        self.cast = cast
        self.door = door
        self.budgets = budgets
        self.memories = memories
        self.persona = persona
        self.reminders = reminders
        self.usage = usage
        self.account = account
        self.platforms = platforms  # character name -> "Discord, Telegram"
        self.clock = clock
        # What each form runs: the command it is, with the form's fields as its options. The page
        # has no chat, and these commands read none (their context argument is None).
        self.actions: dict[str, Action] = {
            "add": lambda p, f, _: memories.add(None, p, f.get("text", ""), f.get("scope") or CHARACTER,
                                                "yes" if f.get("pin") else "no"),
            "edit": lambda p, f, _: memories.edit(None, p, f.get("id"), f.get("text", "")),
            "delete": lambda p, f, _: memories.delete(None, p, f.get("id")),
            "pin": lambda p, f, _: memories.pin(None, p, f.get("id")),
            "unpin": lambda p, f, _: memories.unpin(None, p, f.get("id")),
            "learning": lambda p, f, _: memories.learning(None, p, f.get("state", "")),
            "persona": lambda p, f, _: persona.set(None, p, f.get("text", "")),
            "persona_clear": lambda p, f, _: persona.clear(None, p),
            "cancel_reminder": lambda p, f, _: self._cancel_reminder(p, f),
            # a change of a memory of a character on the page, or a global one (SPEC 21)
            "undo": lambda p, f, shown: memories.undo(p, f.get("id"), self.clock() - HISTORY_KEPT_S, shown),
        }

    # -- the door ------------------------------------------------------------------------------
    async def enter(self, code: str, address: str, via: str | None = None) -> PageEntry:
        return await self.door.enter(code, address, via)

    async def visit(self, token: str) -> PageVisit | None:
        return await self.door.visit(token)

    async def leave(self, token: str) -> None:
        await self.door.leave(token)

    # -- the person's page ---------------------------------------------------------------------
    async def _on_page(self, visit: PageVisit) -> tuple[dict[int, str], list[str]]:
        """The characters of the page that this process still has, in the link's order; and
        those `[access]` now denies the person (asked again on every request, SPEC 21)."""
        found = [(cid, self.cast.stored_by_id(cid)) for cid in visit.characters]
        names = [(cid, stored.character.name) for cid, stored in found if stored is not None]
        identities = await self.store.people.identities_of(visit.person_id)
        denied = [name for _, name in names if self.gate.denies(name, identities)]
        return {cid: name for cid, name in names if name not in denied}, denied

    async def person_page(self, visit: PageVisit) -> PersonPage:
        now, person_id = self.clock(), visit.person_id
        names, denied = await self._on_page(visit)
        # every memory with its story (SPEC 21): read from what is kept, nothing counted on a turn's path
        receipts = await self.store.turns.receipts(person_id, RECEIPTS_READ)
        used, written = times_used(receipts), await self.store.memories.written_from(person_id)
        chats = await self.store.memories.written_in(person_id)
        latest = {character_id: [r for r in receipts if r.character_id == character_id][:REPLIES_SHOWN]
                  for character_id in names}
        replies = {character_id: [page_reply(r) for r in shown] for character_id, shown in latest.items()}

        def with_story(row: MemoryRow, character: str, shown: list[PageReply]) -> PageMemory:
            told = story(row, character, written.get(row.id), used.get(row.id), chats.get(row.id))
            return _memory(row, now, told,
                           tuple(reply.turn_id for reply in shown if row.id in reply.memories))

        characters, shared = [], ()
        for character_id, name in names.items():
            rows, _ = await self.store.memories.list_memories(person_id, character_id, CHARACTER, 0, EVERY_MEMORY)
            learning = await self.store.memories.learning_enabled(person_id, character_id)
            characters.append(PageCharacter(character_id, name, tuple(with_story(r, name, replies[character_id])
                                                                      for r in rows), learning,
                                            tuple(replies[character_id])))
        if characters:
            rows, _ = await self.store.memories.list_memories(person_id, characters[0].id, GLOBAL, 0, EVERY_MEMORY)
            every_reply = [reply for shown in replies.values() for reply in shown]
            shared = tuple(with_story(r, names.get(r.character_id or 0, "a character"), every_reply) for r in rows)
        summaries = []
        for conversation in await self.store.conversations.private_of(person_id):
            if conversation.character_id in names:
                entries = await self.store.summaries.summaries(conversation.id)
                summaries.append(PageSummary(names[conversation.character_id], conversation.platform.capitalize(),
                                             tuple((e.tier.replace("_", "-"), e.content) for e in entries)))
        every_name = {stored.id: stored.character.name for stored in self.cast.characters.values()}
        changes = [change for change in await self.store.memories.history(person_id, now - HISTORY_KEPT_S)
                   if change_shown(change, names)]
        pending = await self.store.reminders.pending(person_id)
        persona = await self.store.people.persona(person_id)
        return PersonPage(
            tuple(characters), shared, persona.text if persona else None, tuple(summaries),
            tuple(PageReminder(r.id, local_words(r.due_at, r.zone) + REPEATING.get(r.repeat, ""), r.words)
                  for r in pending),
            (await self.usage.usage_of(person_id)).as_text(), await self._owner(visit), tuple(denied),
            tuple(page_change(c, every_name) for c in changes))

    async def act(self, visit: PageVisit, action: str, fields: dict[str, str]) -> PageNotice:
        run = self.actions.get(action)
        if run is None:
            return PageNotice(f"The page has no action “{action[:40]}”.", ok=False)
        on_page, denied = await self._on_page(visit)
        character_id = parse_number(fields.get("character", "")) if "character" in fields else next(iter(on_page), None)
        if character_id not in on_page:
            if denied:
                return PageNotice(_denied(denied), ok=False)
            return PageNotice(NOT_ON_PAGE, ok=False, missing=True)
        try:
            done = await run(Person(visit.person_id, character_id, on_page[character_id]), fields, frozenset(on_page))
        except Missing as problem:
            return PageNotice(str(problem), ok=False, missing=True)
        except UsageError as problem:
            return PageNotice(str(problem), ok=False)
        return PageNotice(done.text, ok=done.ok)

    async def _cancel_reminder(self, person: Person, fields: dict[str, str]) -> CommandResult:
        reminder_id = parse_number(fields.get("id", ""))
        if reminder_id is None:
            raise Missing("There is no such reminder.")
        return await self.reminders.cancel_reminder(person, reminder_id)

    def _whole_person(self, visit: PageVisit) -> Person:
        """The person, for what concerns them whichever character (export, /forgetme)."""
        first = self.cast.character(self.cast.names()[0])
        return Person(visit.person_id, first.id, first.character.name)

    async def export(self, visit: PageVisit, format: str = "json") -> Attachment:
        result = await self.memories.export(None, self._whole_person(visit), format)
        assert result.attachment is not None, "export always answers with its file"
        return result.attachment

    async def import_export(self, visit: PageVisit, text: str) -> PageNotice:
        """A JSON export, merged into the visitor's own memories (SPEC 21): only the characters
        this page shows take memories, whoever's the file is."""
        on_page, denied = await self._on_page(visit)
        if not on_page:
            return PageNotice(_denied(denied) if denied else NOT_ON_PAGE, ok=False)
        try:
            done = await self.memories.import_export(
                visit.person_id, text, {name.casefold(): character_id for character_id, name in on_page.items()})
        except UsageError as problem:
            return PageNotice(str(problem), ok=False)
        return PageNotice(done.text, ok=True)

    async def forget(self, visit: PageVisit) -> bool:
        """/forgetme from the page; False: nothing was deleted (AccountCommands.forget)."""
        return await self.account.forget(self._whole_person(visit))

    # -- the owner's page ------------------------------------------------------------------------
    async def _owner(self, visit: PageVisit) -> bool:
        return self.usage.owns(await self.store.people.identities_of(visit.person_id))

    async def owner_page(self, visit: PageVisit) -> OwnerPage | None:
        if not await self._owner(visit):
            return None
        stats = await self.usage.stats()
        first, last = self.budgets.days(CHART_DAYS)
        spent = await self.store.usage.daily(first, last)
        start = date.fromisoformat(first)
        days = [(start + timedelta(days=n)).isoformat() for n in range(CHART_DAYS)]

        def rows(period) -> tuple[TotalsRow, ...]:
            return (_totals("Everyone", period.everyone),
                    *(_totals(name, totals) for name, totals in period.characters.items()))

        return OwnerPage(
            rows(stats.today), rows(stats.week), tuple(stats.spenders),
            tuple((day, *spent.get(day, (0, 0))) for day in days),
            tuple((name, self.platforms.get(name, "—"), self.cast.character(name).character.nsfw)
                  for name in self.cast.names()),
            (await self.store.reminders.sent_since(self.budgets.starts(stats.today.first)),
             await self.store.reminders.sent_since(self.budgets.starts(stats.week.first))))
