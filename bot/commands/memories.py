"""`/memory view, add, edit, delete, pin, unpin, clear, learning, why, export` (SPEC sections 5
and 6): the person's saved memories, addressed by number. Every memory is looked up with the
person taken from the platform event, so another person's id answers exactly like an unknown one.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Collection

from bot.characters.cast import Cast
from bot.commands.base import (
    Missing,
    Person,
    Press,
    UsageError,
    button,
    memories_word,
    no_memory,
    number_arg,
    parse_bool,
    parse_memory_id,
    plural,
    save_memory,
    scope_arg,
    scope_or_all_arg,
)
from bot.commands.portability import Imported, as_markdown, import_export
from bot.contract import Attachment, CommandContext, CommandResult
from bot.memory.saved_memories import EVERY_MEMORY, cap_text, change_shown, memory_marks, memory_text_error, scope_error
from bot.memory.story import RECEIPTS_READ, story, times_used
from bot.model.tokens import TokenCounter
from bot.text import opening, parse_number
from storage.ports import CHARACTER, GLOBAL, AlreadySaved, CapReached, MemoryRow, Store

PAGE_SIZE = 10
PINNED_QUESTION = (
    "Your {memories} {were} kept. These are the moments you marked yourself and "
    "protected from the AI. Delete them too?"
)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


class SavedMemoryCommands:
    def __init__(self, store: Store, cast: Cast, counter: TokenCounter, clock: Callable[[], float]):
        self.store = store
        self.cast = cast
        self.counter = counter
        self.clock = clock
        self.commands = {
            "view": self.view, "add": self.add, "edit": self.edit, "delete": self.delete, "pin": self.pin,
            "unpin": self.unpin, "clear": self.clear, "learning": self.learning, "why": self.why,
            "export": self.export,
        }
        self.presses = {
            "view": Press(self._press_view, scope_or_all_arg, number_arg),
            "pin": Press(self._press_pin, number_arg, scope_or_all_arg, number_arg),
            "unpin": Press(self._press_pin, number_arg, scope_or_all_arg, number_arg),
            "del": Press(self._press_delete, number_arg, scope_or_all_arg, number_arg),
            "clear1": Press(self._press_clear_unpinned, scope_arg, number_arg),
            "clear2": Press(self._press_clear_pinned, scope_arg, number_arg),
        }

    # -- view ------------------------------------------------------------------------------
    async def view(self, ctx: CommandContext, person: Person, scope: str | None = None,
                   page: int | str = 1, id: Any = None) -> CommandResult:
        if id is not None:
            return await self._story(person, parse_memory_id(id))
        if error := scope_error(scope):
            raise UsageError(error)
        number = parse_number(page)
        if number is None:
            raise UsageError(f"The page must be a number from 1, not “{str(page)[:40]}”.")
        return await self._page(person, scope, number)

    async def _story(self, person: Person, memory_id: int) -> CommandResult:
        """One memory with its story (SPEC 21): who wrote it and when, the person's message a
        character wrote it from, how often and when last it reached a reply's prompt."""
        rows, _ = await self.store.memories.list_memories(person.id, person.character_id, None, 0,
                                                          2 * EVERY_MEMORY)  # both scopes, whole
        row = next((r for r in rows if r.id == memory_id), None)
        if row is None:
            raise no_memory(memory_id)
        used = times_used(await self.store.turns.receipts(person.id, RECEIPTS_READ))
        written = (await self.store.memories.written_from(person.id)).get(row.id)
        chat = (await self.store.memories.written_in(person.id)).get(row.id)
        writer = person.character_name if row.scope == CHARACTER else "a character"
        return CommandResult(f"{self._memory_line(row, self.clock())}\n"
                             f"{story(row, writer, written, used.get(row.id), chat)}.")

    async def _page(self, person: Person, scope: str | None, page: int, note: str = "") -> CommandResult:
        page = max(1, page)
        rows, total = await self.store.memories.list_memories(
            person.id, person.character_id, scope, (page - 1) * PAGE_SIZE, PAGE_SIZE
        )
        pages = max(1, math.ceil(total / PAGE_SIZE))
        if page > pages and total:
            note += f"There is no page {page}: your memories fill {plural(pages, 'page', 'pages')}. "
            return await self._page(person, scope, pages, note + "This is the last.\n\n")
        which = {None: "", CHARACTER: " (character scope)", GLOBAL: " (global scope)"}[scope]
        if not total:
            text = f"{note}You have no saved memories with {person.character_name}{which} yet. " \
                   "Add one with /memory add."
            return CommandResult(text.strip())
        now = self.clock()
        lines = [f"{note}Your memories with {person.character_name}{which}: {total} — page {page} of {pages}"]
        lines += [self._memory_line(m, now) for m in rows]
        scope_arg = scope or "all"
        toggles = [button(person, f"{'Unpin' if m.pinned else 'Pin'} #{m.id}",
                                "unpin" if m.pinned else "pin", m.id, scope_arg, page) for m in rows]
        deletes = [button(person, f"Delete #{m.id}", "del", m.id, scope_arg, page, danger=True)
                   for m in rows]
        buttons = [toggles[i:i + 5] for i in range(0, len(toggles), 5)]
        buttons += [deletes[i:i + 5] for i in range(0, len(deletes), 5)]
        nav = []
        if page > 1:
            nav.append(button(person, "◀ Previous", "view", scope_arg, page - 1))
        if page < pages:
            nav.append(button(person, "Next ▶", "view", scope_arg, page + 1))
        if nav:
            buttons.append(nav)
        return CommandResult("\n".join(lines), buttons=buttons)

    @staticmethod
    def _memory_line(memory: MemoryRow, now: float) -> str:
        marks = [m for m in memory_marks(memory, now) if m != "pinned"]  # pinned shows as 📌
        pin = "📌 " if memory.pinned else ""
        return f"{pin}#{memory.id} · {' · '.join(marks)} — {memory.content}"

    async def _press_view(self, ctx, person: Person, verb: str, scope: str | None, page: int) -> CommandResult:
        return await self._page(person, scope, page)

    # -- add, edit, delete, pin -------------------------------------------------------------
    async def add(self, ctx: CommandContext, person: Person, text: str = "", scope: str | None = None,
                  pin: Any = False) -> CommandResult:
        scope = (scope or CHARACTER).lower()
        if error := scope_error(scope) or memory_text_error(text):
            raise UsageError(error)
        pinned = parse_bool(pin, "pin", "yes or no")
        content = text.strip()
        chat = (await self.cast.conversation_for(ctx.conversation)).id if ctx is not None else None  # None: the page
        row = await save_memory(self.store.memories, self.counter, person, scope, content, pinned=pinned,
                                source="person" if ctx is not None else "page", written_in=chat)
        where = "every character" if scope == GLOBAL else person.character_name
        return CommandResult(f"Saved #{row.id}{' (pinned)' if pinned else ''} for {where}: {content}")

    async def edit(self, ctx: CommandContext, person: Person, id: Any = None, text: str = "") -> CommandResult:
        memory_id = parse_memory_id(id)
        if error := memory_text_error(text):
            raise UsageError(error)
        content = text.strip()
        try:
            row = await self.store.memories.update_memory(
                person.id, person.character_id, memory_id, content, self.counter.count(content)
            )
        except AlreadySaved as same:
            raise UsageError(f"#{same.memory.id} already says that: #{memory_id} was not changed.") from None
        if row is None:
            raise no_memory(memory_id)
        return CommandResult(f"Updated #{memory_id}: {content}")

    async def delete(self, ctx: CommandContext, person: Person, id: Any = None) -> CommandResult:
        memory_id = parse_memory_id(id)
        if await self.store.memories.delete_memory(person.id, person.character_id, memory_id) is None:
            raise no_memory(memory_id)
        return CommandResult(f"Deleted #{memory_id}.")

    async def pin(self, ctx: CommandContext, person: Person, id: Any = None) -> CommandResult:
        return await self._set_pinned(person, parse_memory_id(id), True)

    async def unpin(self, ctx: CommandContext, person: Person, id: Any = None) -> CommandResult:
        return await self._set_pinned(person, parse_memory_id(id), False)

    async def _set_pinned(self, person: Person, memory_id: int, pinned: bool) -> CommandResult:
        try:
            before = await self.store.memories.set_pinned(person.id, person.character_id, memory_id, pinned)
        except CapReached as full:
            raise UsageError(cap_text(full)) from None
        if before is None:
            raise no_memory(memory_id)
        if before.pinned == pinned:
            return CommandResult(f"#{memory_id} is already {'pinned' if pinned else 'unpinned'}.")
        if pinned:
            return CommandResult(f"Pinned #{memory_id}. It is always remembered and only you can change it.")
        return CommandResult(f"Unpinned #{memory_id}.")

    async def _press_pin(self, ctx, person: Person, verb: str, memory_id: int, scope: str | None,
                         page: int) -> CommandResult:
        try:
            done = await self._set_pinned(person, memory_id, verb == "pin")
            note = done.text
        except UsageError as problem:
            note = str(problem)
        return await self._page(person, scope, page, note + "\n\n")

    async def _press_delete(self, ctx, person: Person, verb: str, memory_id: int, scope: str | None,
                            page: int) -> CommandResult:
        row = await self.store.memories.delete_memory(person.id, person.character_id, memory_id)
        note = f"Deleted #{memory_id}." if row else f"There is no memory #{memory_id}."
        return await self._page(person, scope, page, note + "\n\n")

    # -- clear all -------------------------------------------------------------------------
    async def clear(self, ctx: CommandContext, person: Person, scope: str | None = None) -> CommandResult:
        scope = (scope or CHARACTER).lower()
        if error := scope_error(scope):
            raise UsageError(error)
        unpinned = await self.store.memories.count_memories(person.id, person.character_id, scope, pinned=False)
        pinned = await self.store.memories.count_memories(person.id, person.character_id, scope, pinned=True)
        if not unpinned and not pinned:
            return CommandResult(f"You have no {scope} memories to clear.")
        if not unpinned:
            return self._pinned_question(person, scope, pinned, "")
        return CommandResult(
            f"Delete {'your' if unpinned == 1 else 'all'} {memories_word(unpinned, 'unpinned ' + scope)}? "
            "This cannot be undone. Pinned memories are kept.",
            buttons=[[button(person, f"Delete {unpinned}", "clear1", scope, unpinned, danger=True),
                      button(person, "Cancel", "cancel")]],
        )

    def _pinned_question(self, person: Person, scope: str, pinned: int, before: str) -> CommandResult:
        text = before + PINNED_QUESTION.format(memories=memories_word(pinned, "pinned"),
                                               were="was" if pinned == 1 else "were")
        return CommandResult(text, buttons=[[
            button(person, "Delete pinned too", "clear2", scope, pinned, danger=True),
            button(person, "Keep them", "cancel"),
        ]])

    async def _press_clear_unpinned(self, ctx, person: Person, verb: str, scope: str, asked: int) -> CommandResult:
        if changed := await self._changed_since_asked(ctx, person, scope, False, asked):
            return changed
        deleted = await self.store.memories.clear_memories(person.id, person.character_id, scope, pinned=False)
        pinned = await self.store.memories.count_memories(person.id, person.character_id, scope, pinned=True)
        done = f"Deleted {memories_word(deleted, scope)}."
        if pinned:
            return self._pinned_question(person, scope, pinned, done + " ")
        return CommandResult(done)

    async def _press_clear_pinned(self, ctx, person: Person, verb: str, scope: str, asked: int) -> CommandResult:
        if changed := await self._changed_since_asked(ctx, person, scope, True, asked):
            return changed
        deleted = await self.store.memories.clear_memories(person.id, person.character_id, scope, pinned=True)
        return CommandResult(f"Deleted {memories_word(deleted, 'pinned ' + scope)}.")

    async def _changed_since_asked(self, ctx, person: Person, scope: str, pinned: bool,
                                   asked: int) -> CommandResult | None:
        """A Clear all confirmation deletes the memories the person was asked about: when their
        count changed since (the character saved more, or they are gone), nothing, and the
        question is asked again."""
        if await self.store.memories.count_memories(person.id, person.character_id, scope, pinned) == asked:
            return None
        again = await self.clear(ctx, person, scope)
        return replace(again, text=f"Your {scope} memories changed since you were asked: nothing was deleted.\n\n"
                                   f"{again.text}")

    # -- learning, why, export ---------------------------------------------------------------
    async def learning(self, ctx: CommandContext, person: Person, state: Any = None) -> CommandResult:
        if state is None:
            on = await self.store.memories.learning_enabled(person.id, person.character_id)
            return CommandResult(f"Learn from chat is {'on' if on else 'off'} for {person.character_name}. "
                                 "Change it with /memory learning on or /memory learning off.")
        on = parse_bool(state, "state")
        await self.store.memories.set_learning(person.id, person.character_id, on)
        if on:
            return CommandResult(f"Learn from chat is on: {person.character_name} saves and reads your memories.")
        return CommandResult(f"Learn from chat is off: {person.character_name} neither saves nor reads your "
                             "saved memories. The conversation summary goes on.")

    async def _witnessed(self, conversation_id: int, person: Person) -> str:
        """What the character knows of this scene (SPEC 22): which of its messages it witnessed."""
        name = person.character_name
        if self.cast.character(name).character.omniscient:
            return f"• Witnessed: everything said here — {name} is a narrator (omniscient)."
        seen, held = await self.store.presence.witnessed(conversation_id, person.character_id)
        if seen == held:
            return f"• Witnessed: all {plural(held, 'message', 'messages')} of this scene."
        return (f"• Witnessed: {seen:,} of this scene's {plural(held, 'message', 'messages')} — {name} reads only "
                "those (it was not here for the rest; /scene shows who is).")

    async def why(self, ctx: CommandContext, person: Person) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        turn = await self.store.turns.last_receipt(conversation.id, person.id, person.character_id)
        if turn is None or not turn.receipt:
            return CommandResult(f"There is no reply of {person.character_name} to you in this conversation yet.")
        r = turn.receipt
        tokens = r["tokens"]
        what = "check-in (it wrote first)" if r.get("checkin") else "last reply to you"
        lines = [f"The prompt of {person.character_name}'s {what} held:"]
        if tokens.get("persona"):
            lines.append(f"• Your persona (/persona view) — {tokens['persona']:,} tokens")
        if not r.get("learning", True):
            lines.append("• Saved memories: none — Learn from chat was off.")
        else:
            ids = r["memories"]
            listed = ", ".join([f"#{i}📌" for i in ids["pinned"]] + [f"#{i}" for i in ids["unpinned"]]) or "none"
            count = len(ids["pinned"]) + len(ids["unpinned"])
            lines.append(f"• Saved memories: {count} ({listed}) — {tokens['memories']:,} tokens")
        tiers = r["summary"]
        lines.append(f"• Summary: long-term {tiers['long_term']}, merged {tiers['merged']}, "
                     f"recent {tiers['recent']} — {tokens['summary']:,} tokens")
        recalled = r.get("recall", [])
        lines.append(f"• Recalled passages: {len(recalled)} — {tokens.get('recall', 0):,} tokens")
        for passage in recalled:
            ids = passage.get("message_ids", [])
            first = await self.store.conversations.messages_by_id(conversation.id, ids[:1])
            start = f": “{opening(first[0].content)}”" if first else " (no longer stored)"
            lines.append(f"  – {passage['date']}, {plural(len(ids), 'message', 'messages')}, "
                         f"{passage['tokens']:,} tokens{start}")
        lore = r.get("lore", [])
        if lore:
            listed = ", ".join(f"{entry['name']} ({entry['tokens']:,})" for entry in lore)
            lines.append(f"• Lorebook entries: {len(lore)} ({listed}) — {tokens.get('lore', 0):,} tokens")
        if r.get("images"):
            lines.append(f"• Images looked at: {r['images']}")
        lines.append(f"• Live window: {plural(r['window_messages'], 'message', 'messages')} — "
                     f"{tokens['window']:,} tokens")
        if conversation.is_shared:
            lines.append(await self._witnessed(conversation.id, person))
        if tokens.get("tools"):
            lines.append(f"• Tool definitions: {tokens['tools']:,} tokens")
        lines.append(f"• Character and instructions: {tokens['system']:,} tokens")
        lines.append(f"Total ≈ {tokens['total']:,} tokens.")
        calls = r.get("tools", [])
        if calls:  # SPEC 18: each tool call, its arguments and what it cost
            lines.append(f"Tools used: {len(calls)}, each answer read back by the model:")
            for call in calls:
                arguments = opening(json.dumps(call["arguments"], ensure_ascii=False), 119)
                lines.append(f"  – {call['name']} {arguments} — {call['tokens']:,} tokens")
            spent = r.get("llm_tokens") or {}
            if spent.get("prompt"):
                lines.append(f"  Every round together, as the model server counted: {spent['prompt']:,} prompt + "
                             f"{spent.get('completion', 0):,} reply tokens.")
        return CommandResult("\n".join(lines))

    async def undo(self, person: Person, change_id: Any, since: float, characters: Collection[int]) -> CommandResult:
        """Undo a change to one of the person's memories (the memory page's history, SPEC 21): one
        of a memory of these characters, or a global one."""
        number = parse_number(change_id)
        found = next((c for c in await self.store.memories.history(person.id, since) if c.id == number), None)
        if found is None or not change_shown(found, characters):
            number = None
        try:
            done = await self.store.memories.undo_change(person.id, number, since) if number is not None else None
        except CapReached as full:
            raise UsageError(cap_text(full)) from None
        if done is None:
            raise Missing("That change can no longer be undone: the memory changed since (or another one holds "
                          "its words), or it is too old.")
        memory = done.after or done.before
        assert memory is not None  # a change has the memory before or after it
        back = {"add": "is back", "delete": "is deleted again", "update": "has its earlier text again",
                "pin": "is pinned again", "unpin": "is unpinned again"}[done.action]
        pinned = " (pinned)" if done.action == "add" and memory.pinned else ""
        return CommandResult(f"Undone: #{memory.id} {back}{pinned}.")

    async def import_export(self, person_id: int, text: str, characters: dict[str, int]) -> Imported:
        """A JSON export merged into the person's own memories (the memory page's import)."""
        return await import_export(self.store, self.counter, person_id, text, characters)

    async def export(self, ctx: CommandContext, person: Person, format: str | None = None) -> CommandResult:
        """All the person's memories and persona: JSON (what the memory page imports) or Markdown."""
        format = (format or "json").lower()
        if format not in ("json", "markdown"):
            raise UsageError("/memory export takes json (the default) or markdown.")
        data = await self.store.memories.export_person(person.id)
        for memory in data["memories"]:  # times as ISO 8601 with their offset, not epoch seconds
            memory["created_at"], memory["updated_at"] = _iso(memory["created_at"]), _iso(memory["updated_at"])
        data["exported_at"] = _iso(self.clock())
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%Y%m%d-%H%M%S")
        count = len(data["memories"])
        if format == "markdown":
            return CommandResult(f"Your {memories_word(count)}, as Markdown.", attachment=Attachment(
                f"keepsake-export-{stamp}.md", as_markdown(data).encode("utf-8")))
        body = json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8")
        return CommandResult(f"Your {memories_word(count)}, as JSON.",
                             attachment=Attachment(f"keepsake-export-{stamp}.json", body))
