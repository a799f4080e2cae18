"""The outbox (SPEC 14, and reminders next): one way a character's own message goes out, whatever
wrote it — claim, gate, compose, store unshown, pace, send, mark shown, take back on failure.

- A `Source` (check-ins, bot/writing_first/checkins.py) says what to write and how it is kept: it composes the
  text (a model failure raises LLMError: nothing is kept, a later scan tries again), stores it
  unshown with its own marks in one transaction, takes it back, and notes it was sent.
- `Outbox.address` finds where a letter goes (the conversation, the person on the writer's
  platform); the outbox keeps one `Pace` a writer, which spaces its sends (`PER_SECOND`) whatever
  source wrote them (a bot account's limit is one for check-ins and reminders together).
- `Outbox.post` runs a `Letter` of a source through the steps, in every process at most once (the
  claim is the database's), through the writer (the adapter running that character on that
  platform). Someone the gate does not let in is passed over; a platform that refuses the person
  (a blocked bot, a chat that is gone) takes the letter back for good; any other failure takes it
  back to be tried again — the source says when, and what it logs (one line, never a traceback
  a scan). What was not shown was not said (SPEC 15).
- `Delivered` is what follows a message shown — its mark, and the background work (summaries) —
  shared by a reply (bot/core.py, `Chat.delivered`) and a letter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, Protocol, TypeVar

from bot.access.gate import LETTER, Gate
from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.contract import Button, ConversationKey, FirstWriter, Reply, Unreachable
from bot.model.llm import Completion, LLMClient, LLMError
from bot.turn.context import Context
from bot.turn.own_voice import OwnVoice
from bot.turn.prompt import build_prompt
from storage.ports import ConversationRow, MessageRow, ShownReply, Store

log = logging.getLogger(__name__)
CLAIM_LEASE_S = 120.0  # one process writes a letter at a time
PER_SECOND = 10  # letters sent a second at most, per writer (a bot account; Telegram takes about 30)
About = TypeVar("About")  # what a source writes a letter about (an absence; a reminder)


class Delivered:
    """What follows a message of the character's once the platform shows it."""

    def __init__(self, store: Store, after_delivery: Callable[[int], None]):
        self.store = store
        self.after_delivery = after_delivery  # background work (summaries)

    async def __call__(self, conversation_id: int, message_id: int, platform_message_ids: list[str]) -> None:
        await self.store.turns.shown(message_id, platform_message_ids)
        self.after_delivery(conversation_id)

    async def reply(self, turn_id: int, platform_message_ids: list[str]) -> ShownReply | None:
        """A turn's reply shown: the turn, and where the reply before it showed (None: no reply)."""
        shown = await self.store.turns.reply_shown(turn_id, platform_message_ids)
        if shown is not None:
            self.after_delivery(shown.turn.conversation_id)
        return shown


async def in_voice(llm: LLMClient, context: Context, speaker: str, now: float, zone: str, instruction: str,
                   marks: dict) -> tuple[str, dict, Completion]:
    """A letter in the character's voice, from what a turn reads (no recall, no tools) and the
    source's instruction; its receipt, with the source's `marks`; the model's completion (what it
    cost). LLMError when the model failed or wrote nothing."""
    prompt = build_prompt(context, speaker_name=speaker, now=now, zone=zone)
    completion = await llm.complete([*prompt.messages, {"role": "system", "content": instruction}], background=True)
    text = OwnVoice.answering(context.character.character.name, speaker, context.window).kept(completion.text)
    if not text:
        raise LLMError("the model wrote nothing")
    return text, prompt.receipt | {"at": now, **marks, "llm_tokens": {
        "prompt": completion.prompt_tokens, "completion": completion.completion_tokens}}, completion


class Pace:
    """At most `per_second` calls a second return, in the order they came (a bot's sends). Each
    waits a gap after the call before it actually returned, not after its planned time: a wake-up
    the event loop delays must not bunch the sends after it."""

    def __init__(self, per_second: float = PER_SECOND):
        self.gap = 1 / per_second
        self.last = -float("inf")
        self.lock = asyncio.Lock()

    async def __call__(self) -> None:
        async with self.lock:
            wait = self.last + self.gap - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.last = time.monotonic()


@dataclass(frozen=True)
class Letter(Generic[About]):
    """One message a character writes first: who to, where, through which writer, and what its
    source writes it about."""

    claim: str  # what is claimed in the database while it is written (one process sends it)
    conversation: ConversationRow
    person_id: int
    character: StoredCharacter
    key: ConversationKey
    user_id: str  # the person on the writer's platform
    writer: FirstWriter
    about: About

    @property
    def conversation_id(self) -> int:
        return self.conversation.id


class Source(Protocol[About]):
    """What a letter is and how it is kept: each method is given the letter (`letter.about`)."""

    async def still_due(self, letter: Letter[About]) -> bool:
        """Whether it is still to be written, as its claim is taken: another process may have
        sent it (and let its claim go) since this scan found it — then no model call is made."""

    async def compose(self, letter: Letter[About]) -> tuple[str, dict]:
        """The text and its receipt; raises LLMError when the model failed (nothing is kept)."""

    async def keep(self, letter: Letter[About], text: str, receipt: dict) -> MessageRow | None:
        """Store it unshown, with the source's marks, in one transaction; None: not any more."""

    async def take_back(self, letter: Letter[About], row: MessageRow, for_good: bool, why: str, text: str,
                        receipt: dict) -> None:
        """It never reached the chat: unstored; `for_good` when the platform refused the person
        (`why`, in a few words); `text` and `receipt` are what was written, should the source
        keep it to send again."""

    async def passed_over(self, letter: Letter[About]) -> None:
        """The gate does not let the person in: they get none."""

    async def may_wait(self, letter: Letter[About]) -> bool:
        """True: not now (past [limits] right now), a later scan tries again."""

    def buttons(self, letter: Letter[About]) -> list[list[Button]]: ...

    async def sent(self, letter: Letter[About]) -> None:
        """It was shown: the source's bookkeeping (counts, the log)."""


class Outbox:
    def __init__(self, store: Store, cast: Cast, gate: Gate, delivered: Delivered):
        self.store = store
        self.cast = cast
        self.gate = gate
        self.delivered = delivered
        self._paces: dict[int, Pace] = {}  # by writer (id): each bot account's sends spaced

    def _pace(self, writer: FirstWriter) -> Pace:
        return self._paces.setdefault(id(writer), Pace())

    async def address(self, writer: FirstWriter, character: StoredCharacter, conversation_id: int, person_id: int,
                      claim: str, about: About) -> Letter[About] | None:
        """A letter to this person in this conversation through `writer`; None when it has nowhere
        to go (the conversation is gone, or the person is not on the writer's platform)."""
        conversation = await self.store.conversations.conversation_by_id(conversation_id)
        key = self.cast.key_of(conversation) if conversation is not None else None
        user_id = next((user for platform, user in await self.store.people.identities_of(person_id)
                        if platform == writer.platform), None)
        if conversation is None or key is None or user_id is None:
            return None
        return Letter(claim, conversation, person_id, character, key, user_id, writer, about)

    async def post(self, source: Source[About], letter: Letter[About],
                   stale: Callable[[], Awaitable[list[str]]]) -> bool:
        """Write and send one letter; whether it went out. `stale`: the messages whose buttons
        go once it is sent (read before it is stored)."""
        async with self.store.coordination.claim(letter.claim, CLAIM_LEASE_S) as mine:
            if not mine or not await source.still_due(letter):
                return False  # another process is writing it, or has sent it
            asker = await letter.writer.asker_for(letter.key, letter.user_id)
            if not (await self.gate.admit(LETTER, letter.character.character.name, asker)).admitted:
                await source.passed_over(letter)
                return False
            if await source.may_wait(letter):
                return False
            try:
                text, receipt = await source.compose(letter)
            except LLMError as failure:
                log.warning("a message to write first in conversation %d could not be written (%s); the next scan "
                            "tries again", letter.conversation_id, failure)
                return False
            old_buttons = await stale()
            row = await source.keep(letter, text, receipt)
            if row is None:
                return False  # the person wrote meanwhile, or another process sent it
            await self._pace(letter.writer)()
            try:
                shown = await letter.writer.write_first(letter.key, Reply.answer(text, buttons=source.buttons(letter)),
                                                         old_buttons)
            except Unreachable as refused:  # the source logs these, once: never a traceback a scan
                await source.take_back(letter, row, True, str(refused), text, receipt)
                return False
            except Exception as failure:
                await source.take_back(letter, row, False, f"{type(failure).__name__}: {failure}"[:300], text,
                                       receipt)
                return False
            await self.delivered(letter.conversation_id, row.id, shown)
            await source.sent(letter)
            return True
