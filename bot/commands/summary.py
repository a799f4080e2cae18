"""`/memory summary` and `/memory rebuild` (SPEC sections 4 and 6), for the /memory service.

The summary view shows the three tiers of this conversation and how many messages are not yet
summarized; a person may edit an entry (kept as they wrote it) and rebuild the whole summary.
"""

from __future__ import annotations

from typing import Any

from bot.characters.cast import Cast
from bot.commands.base import Person, Press, UsageError, button, number_arg, plural
from bot.buttons import encode_action
from bot.contract import CommandContext, CommandResult, Form
from bot.access.gate import MODEL_CALL, Gate
from bot.memory.rebuild import Rebuilds
from bot.memory.witnesses import seen_by
from bot.model.tokens import TokenCounter
from bot.text import parse_number
from bot.turn.prompt import TIER_TITLES
from storage.ports import Store

SUMMARY_ENTRY_MAX_CHARS = 4_000  # what a person may write into one entry


def parse_entry_id(value: Any) -> int:
    if not str(value).strip():
        raise UsageError("Which entry? Give its number as /memory summary shows it: /memory summary edit S12 "
                         "<new text>.")
    number = parse_number(value if isinstance(value, int) else str(value or "").strip().upper().lstrip("S#"))
    if number is None:
        raise UsageError(f"“{str(value)[:40]}” is not a summary entry number. Use the number shown as S12 "
                         "in /memory summary.")
    return number


class SummaryCommands:
    def __init__(self, store: Store, cast: Cast, counter: TokenCounter, rebuilds: Rebuilds, gate: Gate):
        self.store = store
        self.gate = gate  # a rebuild is model calls on the person's behalf (SPEC 17)
        self.cast = cast
        self.counter = counter
        self.rebuilds = rebuilds
        self.commands = {"summary": self.summary, "rebuild": self.rebuild}
        self.presses = {
            "sedit": Press(self._press_edit, number_arg),
            "rebuild": Press(self._press_rebuild),
            "rbresume": Press(self._press_rebuild_choice),
            "rbrestart": Press(self._press_rebuild_choice),
            "rbcancel": Press(self._press_rebuild_choice),
        }
        self.forms = {"sedit": self._submit_edit}

    async def _sight(self, ctx: CommandContext, person: Person) -> tuple[int, int | None]:
        """The conversation, and the sight its character reads it through (SPEC 22: in a scene,
        a character that missed messages has a summary of its own)."""
        conversation = await self.cast.conversation_for(ctx.conversation)
        stored = self.cast.stored_by_id(person.character_id)
        assert stored is not None  # the router found the character it acts on
        return conversation.id, await seen_by(self.store, conversation, stored)

    async def summary(self, ctx: CommandContext, person: Person, edit: Any = None,
                      text: str | None = None) -> CommandResult:
        if edit is not None:
            return await self._submit_edit(ctx, person, parse_entry_id(edit), text)
        if text:
            raise UsageError("To change an entry: /memory summary edit <S-number> <new text>.")
        conversation_id, sight = await self._sight(ctx, person)
        entries = await self.store.summaries.summaries(conversation_id, seen_by=sight)
        state = await self.store.summaries.summary_state(conversation_id, sight)
        waiting = await self.store.conversations.count_messages(conversation_id, state.summarized_pos, seen_by=sight)
        lines = [f"Summary of this conversation with {person.character_name}:" if sight is None else
                 f"{person.character_name}'s summary of this scene (only what {person.character_name} witnessed):"]
        if not entries:
            lines.append("(nothing summarized yet: the conversation still fits in the live window)")
        numbers = await self.store.conversations.message_numbers(
            conversation_id, sorted({pos for entry in entries for pos in (entry.first_pos, entry.last_pos)}))
        for entry in entries:
            span = f"messages {numbers[entry.first_pos]}–{numbers[entry.last_pos]}"
            edited = ", edited by a person" if entry.edited else ""
            lines.append(f"\n[{TIER_TITLES[entry.tier]}] S{entry.id} · {span} · {entry.tokens:,} tokens{edited}")
            lines.append(entry.content)
        lines.append(f"\nNot yet summarized: {plural(waiting, 'message', 'messages')}.")
        rebuild = await self.store.summaries.rebuild(conversation_id)
        if rebuild is not None:
            lines.append("A rebuild is running; this summary is used until it is done."
                         if rebuild.status == "running" else f"The last rebuild stopped: {rebuild.error}.")
        edits = [button(person, f"Edit S{e.id}", "sedit", e.id) for e in entries]
        buttons = [edits[i:i + 5] for i in range(0, min(len(edits), 20), 5)]
        buttons.append([button(person, "Rebuild", "rebuild")])
        return CommandResult("\n".join(lines), buttons=buttons)

    async def _press_edit(self, ctx, person: Person, verb: str, entry_id: int) -> CommandResult:
        conversation_id, sight = await self._sight(ctx, person)
        entry = next((e for e in await self.store.summaries.summaries(conversation_id, seen_by=sight)
                      if e.id == entry_id), None)
        if entry is None:
            return CommandResult(f"There is no summary entry S{entry_id} any more.", ok=False)
        instructions = f"Send /memory summary edit {entry.id} <new text> to replace it."
        return CommandResult(
            f"S{entry.id} now reads:\n{entry.content}\n\n{instructions}",
            form=Form(title=f"Edit summary entry S{entry.id}", label="Summary text", prefill=entry.content,
                      action=encode_action(person.id, "sedit", entry.id, character_id=person.character_id),
                      max_length=SUMMARY_ENTRY_MAX_CHARS, instructions=instructions),
        )

    async def _submit_edit(self, ctx, person: Person, entry_id: int, text: str | None) -> CommandResult:
        content = (text or "").strip()
        if not content:
            raise UsageError("The new text of the entry is missing: /memory summary edit <S-number> <new text>.")
        if len(content) > SUMMARY_ENTRY_MAX_CHARS:
            raise UsageError(f"That text is {len(content):,} characters long; a summary entry can be at most "
                             f"{SUMMARY_ENTRY_MAX_CHARS:,} characters.")
        conversation_id, sight = await self._sight(ctx, person)
        if not await self.store.summaries.edit_summary(conversation_id, entry_id, content,
                                                       self.counter.count(content), sight):
            raise UsageError(f"There is no summary entry S{entry_id} in this conversation.")
        return CommandResult(f"S{entry_id} now reads as you wrote it. It is kept as written when the summary grows.")

    async def _take_call(self, ctx: CommandContext, person: Person) -> None:
        """A rebuild (started, resumed or started over) is under the person's `[limits]`, their
        allowance and the character's age rule, like a message; its calls are spent on them."""
        if refusal := (await self.gate.admit(MODEL_CALL, person.character_name, ctx.asker, person.id,
                                             ctx.conversation)).refusal:
            raise UsageError(refusal)

    async def rebuild(self, ctx: CommandContext, person: Person) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        existing = await self.store.summaries.rebuild(conversation.id)
        if existing is not None and existing.status == "failed":
            return CommandResult(
                f"The last rebuild of this summary stopped: {existing.error}. What now?",
                buttons=[[button(person, "Resume", "rbresume"),
                          button(person, "Start over", "rbrestart"),
                          button(person, "Cancel the rebuild", "rbcancel", danger=True)]],
            )
        if existing is None:
            await self._take_call(ctx, person)
        if existing is not None or await self.rebuilds.start(conversation.id, person.id) is None:
            return CommandResult("A rebuild of this conversation's summary is already running. "
                                 "I'll tell you when it is done.")
        return CommandResult(
            "Rebuilding this conversation's summary from its whole history, in the background. "
            "The current summary is used until the new one is complete; I'll tell you when it is."
        )

    async def _press_rebuild(self, ctx, person: Person, verb: str) -> CommandResult:
        return await self.rebuild(ctx, person)

    async def _press_rebuild_choice(self, ctx, person: Person, verb: str) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        existing = await self.store.summaries.rebuild(conversation.id)
        if existing is None or existing.status != "failed":
            return CommandResult("There is no stopped rebuild here any more.", ok=False)
        if verb == "rbcancel":
            await self.rebuilds.cancel(conversation.id)
            return CommandResult("The rebuild is cancelled; the current summary stays.")
        await self._take_call(ctx, person)
        if verb == "rbrestart":
            await self.rebuilds.restart(conversation.id)
            return CommandResult("Starting the rebuild over from the first message. I'll tell you when it is done.")
        await self.rebuilds.resume(conversation.id)
        return CommandResult("Resuming the rebuild where it stopped. I'll tell you when it is done.")
