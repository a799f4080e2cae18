"""The turn handler: one IncomingMessage in, one Reply out.

1. Check the text (empty, or longer than the live window can ever hold: a clear answer).
2. Store the person's message first — whatever happens next, it is kept.
3. Wait for this conversation's previous turn (turns of one conversation are serialized;
   different conversations run concurrently).
4. Read only what the turn needs: the speaker's saved memories in play, the summary, the window.
5. Ask the model, running its memory tools (at most 3 rounds), streaming text to the adapter.
6. Store the reply and the turn's receipt in one transaction; or, when the model failed after its
   retries, undo the turn's memory writes and answer with a short plain error.
After the adapter delivered the reply it calls `delivered()`, which starts background work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Sequence

from bot.actions import STALE_BUTTON, encode_action
from bot.characters import CharacterRuntime
from bot.llm import Completion, LLMClient, LLMError, TextSink
from bot.memory_tools import MAX_TOOL_ROUNDS, TOOL_SPECS, MemoryTools
from bot.models import Button, ConversationKey, Identity, IncomingMessage, Reply
from bot.prompt import build_prompt
from bot.saved_memories import memories_for_prompt
from bot.tokens import TokenCounter
from bot.window import WINDOW_MAX_MESSAGES, live_window, window_token_budget
from storage.base import ConversationRow, MessageRow, Store, SummaryRow

log = logging.getLogger(__name__)

EMPTY_MESSAGE = "I can only read text, and your message had none. Try writing it out."
TOO_LONG_MESSAGE = (
    "Your message is about {tokens:,} tokens long; I can read at most {budget:,} tokens at once. "
    "Please send it in shorter parts."
)
LLM_FAILED = (
    "Sorry, I couldn't answer just now ({reason}). Your message is saved; "
    "send another or try again in a moment."
)
REGENERATE_LABEL = "🔄 Regenerate"


class ConversationLocks:
    """One FIFO lock per conversation, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}
        self._users: Counter[int] = Counter()

    @asynccontextmanager
    async def hold(self, conversation_id: int) -> AsyncIterator[None]:
        lock = self._locks.setdefault(conversation_id, asyncio.Lock())
        self._users[conversation_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[conversation_id] -= 1
            if not self._users[conversation_id]:
                del self._users[conversation_id]
                del self._locks[conversation_id]


SummaryReader = Callable[[int], Awaitable[list[SummaryRow]]]
AfterTurn = Callable[[int], None]


class TurnHandler:
    def __init__(
        self,
        store: Store,
        llm: LLMClient,
        counter: TokenCounter,
        characters: dict[str, CharacterRuntime],
        context_window: int,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.llm = llm
        self.counter = counter
        self.characters = {name.casefold(): rt for name, rt in characters.items()}
        self.context_window = context_window
        self.clock = clock
        self.locks = ConversationLocks()
        # Set by the summary layer: how a turn reads the summary, and what runs after delivery.
        self.read_summary: SummaryReader | None = None
        self.after_delivery: AfterTurn | None = None

    def character(self, name: str) -> CharacterRuntime:
        return self.characters[name.casefold()]

    async def conversation_for(self, key: ConversationKey, is_shared: bool) -> ConversationRow:
        return await self.store.conversation(
            key.platform, key.chat_id, key.thread_id, self.character(key.character).id, is_shared
        )

    async def greet(self, key: ConversationKey, speaker_name: str, is_shared: bool) -> str:
        """The character's greeting (a card's first_mes). In a one-to-one conversation with no
        messages yet it is stored as the character's first message, so the model knows what it
        said. (Not in a shared one: it names the person, and would outlive their /forgetme.)"""
        runtime = self.character(key.character)
        text = runtime.character.greeting(speaker_name)
        if not is_shared:
            conversation = await self.conversation_for(key, is_shared)
            await self.store.add_greeting(conversation.id, runtime.character.name, text, self.counter.count(text))
        return text

    # -- a turn ----------------------------------------------------------------------------
    async def handle(self, message: IncomingMessage, on_text: TextSink | None = None) -> Reply:
        text = message.text.strip()
        if not text:
            return Reply(EMPTY_MESSAGE, is_error=True)
        tokens = self.counter.count(text)
        budget = window_token_budget(self.context_window)
        if tokens > budget:
            return Reply(TOO_LONG_MESSAGE.format(tokens=tokens, budget=budget), is_error=True)

        runtime = self.character(message.conversation.character)
        person_id = await self.store.person_for_identity(message.speaker.platform, message.speaker.user_id)
        conversation = await self.conversation_for(message.conversation, message.is_shared)
        user_row = await self.store.add_user_message(
            conversation.id, person_id, message.speaker_name, text, tokens, message.platform_message_id
        )
        async with self.locks.hold(conversation.id):
            return await self._answer(runtime, conversation, person_id, user_row, None, on_text)

    async def regenerate(
        self, key: ConversationKey, presser: Identity, turn_id: int, on_text: TextSink | None = None
    ) -> Reply:
        """Replace the latest reply, undoing the memory writes its turn made (pinned entries
        are left alone). Only the person it answered may do this."""
        runtime = self.character(key.character)
        person_id = await self.store.person_for_identity(presser.platform, presser.user_id)
        conversation = await self.conversation_for(key, is_shared=False)
        async with self.locks.hold(conversation.id):
            if refusal := await self.regenerate_refusal(key, presser, turn_id):
                return Reply(refusal, is_error=True)
            latest = await self.store.latest_turn(conversation.id)
            user_row = await self.store.message(latest.user_message_id)
            assert user_row is not None  # a turn's message goes only with the turn
            new_turn = await self.store.begin_regenerate(turn_id)
            return await self._answer(runtime, conversation, person_id, user_row, new_turn, on_text)

    async def regenerate_refusal(self, key: ConversationKey, presser: Identity, turn_id: int | str) -> str | None:
        """Why this person may not regenerate this reply now, or None if they may. `turn_id`
        may come straight from a button."""
        if not str(turn_id).isdigit():
            return STALE_BUTTON
        turn_id = int(turn_id)
        person_id = await self.store.person_for_identity(presser.platform, presser.user_id)
        conversation = await self.conversation_for(key, is_shared=False)
        latest = await self.store.latest_turn(conversation.id)
        if latest is None or latest.id != turn_id:
            return "Only the latest reply can be regenerated."
        if latest.person_id != person_id:
            return "Only the person this reply answered can regenerate it."
        return None

    async def _answer(
        self,
        runtime: CharacterRuntime,
        conversation: ConversationRow,
        person_id: int,
        user_row: MessageRow,
        turn_id: int | None,
        on_text: TextSink | None,
    ) -> Reply:
        """Answer `user_row`. `turn_id` is None for a new turn: its row is created by the first
        memory write (the journal needs it) or else with the reply, sparing a round-trip."""
        turn: dict[str, int | None] = {"id": turn_id}

        async def turn_row() -> int:
            if turn["id"] is None:
                turn["id"] = await self.store.begin_turn(conversation.id, person_id, user_row.id)
            return turn["id"]

        async def fail() -> None:
            if turn["id"] is not None:
                await self.store.fail_turn(turn["id"])

        try:
            learning = await self.store.learning_enabled(person_id, runtime.id)
            memories = await memories_for_prompt(self.store, person_id, runtime.id) if learning else None
            summary = await self.read_summary(conversation.id) if self.read_summary else []
            newest_first = await self.store.recent_messages(conversation.id, user_row.pos, WINDOW_MAX_MESSAGES)
            tools_on = learning and self.llm.tools_supported is not False
            prompt = build_prompt(
                character=runtime.character,
                character_tokens=runtime.prompt_tokens,
                speaker_name=user_row.speaker_name,
                shared=conversation.is_shared,
                memories=memories,
                summary=summary,
                window=live_window(newest_first, self.context_window),
                tools=tools_on,
                now=self.clock(),
            )
            tools = MemoryTools(self.store, self.counter, person_id, runtime.id, turn_row)
            completion = await self._complete_with_tools(prompt.messages, tools_on, tools, on_text)
            text = completion.text.strip()
            if not text:
                raise LLMError("the model sent an empty answer")
        except LLMError as failure:
            log.warning("a turn in conversation %d failed: %s", conversation.id, failure)
            await asyncio.shield(fail())
            return Reply(LLM_FAILED.format(reason=failure), is_error=True, conversation_id=conversation.id)
        except BaseException:
            await asyncio.shield(fail())
            raise
        receipt = prompt.receipt | {
            "at": self.clock(),
            "llm_tokens": {"prompt": completion.prompt_tokens, "completion": completion.completion_tokens},
        }
        turn_id, stored = await self.store.finish_turn(turn["id"], user_row, person_id, runtime.character.name,
                                                       text, self.counter.count(text), receipt)
        regenerate = Button(REGENERATE_LABEL, encode_action(person_id, "regen", turn_id))
        return Reply(text, turn_id=turn_id, conversation_id=conversation.id, message_id=stored.id,
                     buttons=[[regenerate]])

    async def _complete_with_tools(
        self, messages: list[dict], tools_on: bool, tools: MemoryTools, on_text: TextSink | None
    ) -> Completion:
        messages = list(messages)
        for round_number in range(MAX_TOOL_ROUNDS + 1):
            offer_tools = tools_on and round_number < MAX_TOOL_ROUNDS
            completion = await self.llm.complete(
                messages, tools=TOOL_SPECS if offer_tools else None, on_text=on_text
            )
            if not (offer_tools and completion.tool_calls):
                return completion
            messages.append({
                "role": "assistant",
                "content": completion.text or None,
                "tool_calls": [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for c in completion.tool_calls
                ],
            })
            for call in completion.tool_calls:
                result = await tools.run(call.name, call.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return completion  # not reached: the last round offers no tools

    # -- after delivery, and platform edits ------------------------------------------------------
    async def delivered(self, reply: Reply, platform_message_ids: Sequence[str] = ()) -> None:
        """The adapter delivered `reply` (as these platform messages, when it was split): remember
        their ids and start background work."""
        if reply.turn_id is None or reply.conversation_id is None or reply.message_id is None:
            return
        if platform_message_ids:
            await self.store.set_platform_message_ids(reply.conversation_id, reply.message_id,
                                                      list(platform_message_ids))
        if self.after_delivery:
            self.after_delivery(reply.conversation_id)

    async def message_edited(self, key: ConversationKey, platform_message_id: str, text: str) -> bool:
        conversation = await self.conversation_for(key, is_shared=False)
        return await self.store.edit_platform_message(
            conversation.id, platform_message_id, text.strip(), self.counter.count(text.strip())
        )

    async def message_deleted(self, key: ConversationKey, platform_message_id: str) -> bool:
        conversation = await self.conversation_for(key, is_shared=False)
        return await self.store.delete_platform_message(conversation.id, platform_message_id)
