"""`/memory generate`, `/memory save` and "Remember this" (SPEC 5.3, 5.4), for the /memory service.

Drafts are stored until the person keeps or discards them (button data carries only their id).
Save from conversation: the person picks up to 20 messages — Remember this on Discord, a reply
with /remember on Telegram, or `/memory save N` for the last N — then Draft with AI (up to 5
drafts, keep one) or Use as-is. What is saved this way is pinned.
"""

from __future__ import annotations

from typing import Any

from bot.access.gate import MODEL_CALL, Gate
from bot.characters.cast import Cast
from bot.commands.base import (
    Person,
    Press,
    UsageError,
    button,
    number_arg,
    number_or_all_arg,
    parse_count,
    save_memory,
)
from bot.contract import CommandContext, CommandResult, traits_of
from bot.memory.drafting import (
    MAX_SELECTED_MESSAGES,
    Drafted,
    as_is,
    description_error,
    draft_from_description,
    draft_from_messages,
)
from bot.memory.saved_memories import MAX_MEMORY_CHARS, cap_text
from bot.model.llm import LLMClient, LLMError
from bot.model.tokens import TokenCounter
from bot.text import opening
from storage.ports import CHARACTER, AlreadySaved, CapReached, MessageRow, Store


def no_selection(ctx: CommandContext) -> str:
    return f"Pick the messages to remember first: {traits_of(ctx.conversation.platform).picking}."


class DraftCommands:
    def __init__(self, store: Store, cast: Cast, counter: TokenCounter, llm: LLMClient, gate: Gate):
        self.store = store
        self.cast = cast
        self.counter = counter
        self.llm = llm
        self.gate = gate
        self.commands = {"generate": self.generate, "save": self.save}
        self.presses = {
            "gkeep": Press(self._press_keep_generated, number_arg, number_or_all_arg),
            "gdrop": Press(self._press_discard, number_arg),
            "sdraft": Press(self._press_draft),
            "sasis": Press(self._press_as_is),
            "skeep": Press(self._press_keep_saved, number_arg, number_arg),
            "sclear": Press(self._press_clear_selection),
        }

    async def _take_call(self, ctx: CommandContext, person: Person) -> None:
        """[limits]: a draft is a model call on the person's behalf (bot/access/limits.py)."""
        if refusal := (await self.gate.admit(MODEL_CALL, person.character_name, ctx.asker, person.id,
                                             ctx.conversation)).refusal:
            raise UsageError(refusal)

    async def _spent(self, person: Person, drafted: Drafted) -> list[str]:
        """The call's tokens go to the person's usage (SPEC 17: spent on their behalf); its drafts."""
        await self.gate.spend(person.id, person.character_id, drafted.tokens_in, drafted.tokens_out)
        return drafted.drafts

    # -- /memory generate ------------------------------------------------------------------
    async def generate(self, ctx: CommandContext, person: Person, description: str | None = None) -> CommandResult:
        if error := description_error(description):
            raise UsageError(error)
        await self._take_call(ctx, person)
        try:
            drafted = await draft_from_description(self.llm, self.counter, person.character_name, ctx.display_name,
                                                   description)
        except LLMError as failure:
            raise UsageError(f"I couldn't draft memories just now ({failure}). Try again in a moment.") from None
        drafts = await self._spent(person, drafted)
        if not drafts:
            return CommandResult("I found nothing lasting to remember in that description.")
        draft_id = await self.store.drafts.save_drafts(person.id, "generate", drafts)
        return self._review(person, draft_id, drafts, "gkeep", keep_all=True,
                            intro="Drafts — keep the ones that are right (nothing is saved yet):")

    def _review(self, person: Person, draft_id: int, drafts: list[str], keep_verb: str, keep_all: bool,
                intro: str) -> CommandResult:
        lines = [intro] + [f"{i}. {d}" for i, d in enumerate(drafts, 1)]
        keeps = [button(person, f"Keep {i}", keep_verb, draft_id, i) for i in range(1, len(drafts) + 1)]
        last = [button(person, "Discard", "gdrop", draft_id)]
        if keep_all and len(drafts) > 1:
            last.insert(0, button(person, "Keep all", keep_verb, draft_id, "all"))
        return CommandResult("\n".join(lines), buttons=[keeps, last])

    async def _drafts(self, person: Person, draft_id: int, kind: str) -> list[str]:
        found = await self.store.drafts.drafts(person.id, draft_id)
        if found is None or found[0] != kind:
            raise UsageError("Those drafts are gone: they were kept, discarded or replaced by newer ones.")
        return found[1]

    async def _press_keep_generated(self, ctx, person: Person, verb: str, draft_id: int,
                                    which: int | None) -> CommandResult:
        drafts = await self._drafts(person, draft_id, "generate")
        chosen = list(range(len(drafts))) if which is None else [which - 1]
        saved, already, notes = [], [], []
        for index in chosen:
            if not 0 <= index < len(drafts):
                raise UsageError("That draft is gone.")
            try:
                row = await self.store.memories.add_memory(
                    person.id, person.character_id, CHARACTER, drafts[index],
                    self.counter.count(drafts[index]), pinned=False, source="generate",
                    written_in=(await self.cast.conversation_for(ctx.conversation)).id,
                )
            except AlreadySaved as same:
                already.append(f"#{same.memory.id}: {drafts[index]}")
                continue
            except CapReached as full:
                notes.append(cap_text(full))
                break
            saved.append(f"#{row.id}: {drafts[index]}")
        remaining = [d for i, d in enumerate(drafts) if i not in chosen]
        await self.store.drafts.delete_drafts(person.id, draft_id)
        text = "\n".join((["Saved " + ", ".join(saved)] if saved else [])
                         + (["Already saved " + ", ".join(already)] if already else []) + notes)
        if remaining and not notes:
            new_id = await self.store.drafts.save_drafts(person.id, "generate", remaining)
            review = self._review(person, new_id, remaining, "gkeep", keep_all=True, intro="Still to review:")
            return CommandResult(f"{text}\n\n{review.text}", buttons=review.buttons)
        return CommandResult(text or "Nothing was saved.", ok=not notes)

    async def _press_discard(self, ctx, person: Person, verb: str, draft_id: int) -> CommandResult:
        await self.store.drafts.delete_drafts(person.id, draft_id)
        return CommandResult("Discarded; nothing was saved.")

    # -- save from conversation ------------------------------------------------------------
    async def save(self, ctx: CommandContext, person: Person, n: Any = None) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        if n is not None:
            count = parse_count(n, "n", 1, MAX_SELECTED_MESSAGES)
            latest = await self.store.conversations.recent_messages(conversation.id, count)
            if not latest:
                raise UsageError("There are no messages in this conversation yet.")
            await self.store.drafts.set_selection(person.id, conversation.id, [m.id for m in reversed(latest)])
        return await self._selection_view(ctx, person, conversation.id)

    async def remember(self, ctx: CommandContext, person: Person, platform_message_id: str) -> CommandResult:
        """Add one message (by its platform id) to the person's selection."""
        conversation = await self.cast.conversation_for(ctx.conversation)
        message = await self.store.conversations.message_by_platform_id(conversation.id, str(platform_message_id))
        if message is None:
            return CommandResult("I can only remember messages of our conversation that I have seen.", ok=False)
        chosen = await self.store.drafts.selection(person.id, conversation.id)
        if message.id not in chosen:
            if len(chosen) >= MAX_SELECTED_MESSAGES:
                return CommandResult(f"You have already picked {MAX_SELECTED_MESSAGES} messages, the most at once. "
                                     "Save them first, or clear the selection.", ok=False)
            await self.store.drafts.set_selection(person.id, conversation.id, chosen + [message.id])
        return await self._selection_view(ctx, person, conversation.id)

    async def _selected(self, person: Person, conversation_id: int) -> list[MessageRow]:
        chosen = await self.store.drafts.selection(person.id, conversation_id)
        return await self.store.conversations.messages_by_id(conversation_id, chosen)

    async def _selection_view(self, ctx: CommandContext, person: Person, conversation_id: int) -> CommandResult:
        messages = await self._selected(person, conversation_id)
        if not messages:
            return CommandResult(no_selection(ctx))
        lines = [f"Chosen messages ({len(messages)} of at most {MAX_SELECTED_MESSAGES}):"]
        for m in messages:
            lines.append(f"> {m.speaker_name}: {opening(m.said, 199)}")
        lines.append("What is saved from them is pinned.")
        return CommandResult("\n".join(lines), buttons=[[
            button(person, "Draft with AI", "sdraft"),
            button(person, "Use as-is", "sasis"),
            button(person, "Clear selection", "sclear"),
        ]])

    async def _press_draft(self, ctx, person: Person, verb: str) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        messages = await self._selected(person, conversation.id)
        if not messages:
            return CommandResult(no_selection(ctx), ok=False)
        await self._take_call(ctx, person)
        try:
            drafted = await draft_from_messages(self.llm, self.counter, person.character_name, messages)
        except LLMError as failure:
            raise UsageError(f"I couldn't draft a memory just now ({failure}). Try again, or use them as-is.") from None
        drafts = await self._spent(person, drafted)
        if not drafts:
            raise UsageError("I couldn't draft a memory from those messages. Try Use as-is.")
        draft_id = await self.store.drafts.save_drafts(person.id, "save", drafts)
        return self._review(person, draft_id, drafts, "skeep", keep_all=False,
                            intro="Keep one of these (it will be pinned):")

    async def _press_keep_saved(self, ctx, person: Person, verb: str, draft_id: int, which: int) -> CommandResult:
        drafts = await self._drafts(person, draft_id, "save")
        index = which - 1
        if not 0 <= index < len(drafts):
            raise UsageError("That draft is gone.")
        result = await self._save_pinned(ctx, person, drafts[index])
        if result.ok:
            await self.store.drafts.delete_drafts(person.id, draft_id)
        return result

    async def _press_as_is(self, ctx, person: Person, verb: str) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        messages = await self._selected(person, conversation.id)
        if not messages:
            return CommandResult(no_selection(ctx), ok=False)
        content = as_is(messages)
        if len(content) > MAX_MEMORY_CHARS:
            raise UsageError(f"Those messages come to {len(content):,} characters; a memory holds at most "
                             f"{MAX_MEMORY_CHARS}. Use Draft with AI, or pick fewer messages.")
        return await self._save_pinned(ctx, person, content)

    async def _save_pinned(self, ctx, person: Person, content: str) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        row = await save_memory(self.store.memories, self.counter, person, CHARACTER, content, pinned=True,
                                source="conversation", written_in=conversation.id)
        await self.store.drafts.set_selection(person.id, conversation.id, [])
        return CommandResult(f"Saved #{row.id} (pinned): {content}")

    async def _press_clear_selection(self, ctx, person: Person, verb: str) -> CommandResult:
        conversation = await self.cast.conversation_for(ctx.conversation)
        await self.store.drafts.set_selection(person.id, conversation.id, [])
        return CommandResult("Selection cleared.")
