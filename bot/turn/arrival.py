"""A message's arrival (steps 1-3 of bot/turn/handler.py): checked, stored first — whatever happens
next, it is kept — and queued in its conversation's line, in the order messages arrived.

- What is stored as said (`said`, for an edited message too): its text files are read into it
  (bot/turn/attachments.py); its images and anything else the character cannot read are named
  in a placeholder ("[a photo] caption"); with nothing to read at all, or longer than the live
  window can ever hold, a clear answer. Text that cannot be stored as UTF-8 (a lone surrogate)
  is cleaned first.
- Stored, a model call taken under `[limits]` and its turn queued in one transaction; when storing
  fails, the person is told plainly it was not saved; past `turns_per_minute`, when to write again;
  past today's tokens, kept and not answered (told once a day).
- A voice note (SPEC 16) is stored as its placeholder and heard out of the line — a slow audio
  server holds nobody else — then filled in and queued (`hear_and_queue`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Hashable

from bot.access.gate import HEARING, Gate
from bot.access.limits import TOO_FAST
from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.contract import ConversationKey, IncomingFile, IncomingMessage, Reply
from bot.in_flight import Abandoned
from bot.memory.window import window_token_budget
from bot.memory.witnesses import Witnesses
from bot.model.llm import LLMClient
from bot.model.tokens import TokenCounter
from bot.text import clean_text
from bot.turn.attachments import in_words, kind_of, read_text_files
from bot.voice.listening import NOT_TRANSCRIBED, TEXT_ONLY, Listening, spoken
from storage.ports import SPOKEN, ConversationRow, Conversations, MessageRow, NewAlbum, Turns

log = logging.getLogger(__name__)

EMPTY_MESSAGE = "I can only read text, and your message had none. Try writing it out."
CANNOT_SEE = "I can't see {what} — I can only read text. Tell me in words what you'd like me to know."
TOO_LONG_MESSAGE = (
    "Your message is about {tokens:,} tokens long; I can read at most {budget:,} tokens at once. "
    "Please send it in shorter parts."
)
NOT_SAVED = ("Sorry, I couldn't save your message just now, so it was not kept and I can't answer it. "
             "Please send it again later.")
FILE_HEADING_TOKENS = 32  # room kept for each text file's heading when files are cut to fit


def new_album(message: IncomingMessage) -> NewAlbum | None:
    """The album items a message is stored with (`IncomingMessage.album`), gathered while more
    may come (`rest`)."""
    if not message.album:
        return None
    return NewAlbum(message.album[0].album, [(item.platform_message_id, item.item) for item in message.album],
                    gathering=message.rest is not None)


class ArrivalOrder:
    """One line per key: `join` takes a place at once (no await, so places follow the order in
    which messages arrived), and `async with place` waits until every earlier place has left."""

    def __init__(self) -> None:
        self._lines: dict[Hashable, deque[asyncio.Future]] = {}

    def join(self, key: Hashable) -> "_Spot":
        line = self._lines.setdefault(key, deque())
        ready = asyncio.get_running_loop().create_future()
        if not line:
            ready.set_result(None)
        line.append(ready)
        return _Spot(self, key, ready)

    def _leave(self, key: Hashable, ready: asyncio.Future) -> None:
        line = self._lines[key]
        was_first = line[0] is ready
        line.remove(ready)
        if not line:
            del self._lines[key]
        elif was_first:
            line[0].set_result(None)


class _Spot:
    def __init__(self, order: ArrivalOrder, key: Hashable, ready: asyncio.Future):
        self.order, self.key, self.ready = order, key, ready

    async def __aenter__(self) -> None:
        try:
            await self.ready
        except BaseException:
            self.order._leave(self.key, self.ready)
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.order._leave(self.key, self.ready)


@dataclass(frozen=True)
class Queued:
    """A stored message whose turn waits in its conversation's line (`ticket`), or started at
    once (`turn_id`: nothing held its conversation)."""

    character: StoredCharacter
    conversation: ConversationRow
    person_id: int | None
    user_row: MessageRow
    ticket: int | None
    unseen: list[str]  # words for what came with it that the character cannot read
    images: list[IncomingFile]  # to look at, when the model can
    turn_id: int | None = None


@dataclass(frozen=True)
class CameWith:
    """What came with a message's text, sorted: its voice notes, the one heard (None: none, or
    no [voice]), the images the model may look at, the text files read into it, and words for
    everything else, which the character cannot read."""

    voices: list[IncomingFile]
    note: IncomingFile | None
    images: list[IncomingFile]
    text_files: list[IncomingFile]
    unseen: list[str]


@dataclass(frozen=True)
class Said:
    """A message as it is stored: `text` (`tokens` long) is its words with what came with them —
    or, with a voice `note` to hear, the note's placeholder and `words`, the rest."""

    text: str
    tokens: int
    words: str
    note: IncomingFile | None
    unseen: list[str]  # words for what came with it that the character cannot read
    images: list[IncomingFile]  # to look at, when the model can


@dataclass(frozen=True)
class ToHear:
    """A voice note stored as its placeholder, to be heard before its turn is queued."""

    key: ConversationKey
    character: StoredCharacter
    conversation: ConversationRow
    person_id: int | None
    user_row: MessageRow
    note: IncomingFile
    words: str  # what came with it besides the note
    unseen: list[str]
    images: list[IncomingFile]


def arrival_key(key: ConversationKey) -> tuple:
    """A conversation's line in this process: a shared chat's is its scene's, whoever answers."""
    return key.platform, key.chat_id, key.thread_id, "" if key.is_shared else key.character.casefold()


class Arrival:
    """Checks, stores and queues each message; or the answer when it cannot be kept or answered."""

    def __init__(self, conversations: Conversations, turns: Turns, llm: LLMClient, counter: TokenCounter, cast: Cast,
                 gate: Gate, context_window: Callable[[], int],
                 checkin_from: Callable[[ConversationKey, int | None], int | None], witnesses: Witnesses,
                 listening: Listening | None = None):
        self.conversations = conversations
        self.turns = turns
        self.llm = llm
        self.counter = counter
        self.cast = cast
        self.gate = gate  # [access] and [limits] (bot/access/gate.py)
        self.context_window = context_window  # what the server holds now (it shrinks once it shows less)
        # messages that start an absence's check-in there (bot/writing_first/checkins.py)
        self.checkin_from = checkin_from
        self.witnesses = witnesses  # who comes into a scene with a message (SPEC 22)
        self.listening = listening  # voice notes heard ([voice], SPEC 16); None: the character reads text only
        self.order = ArrivalOrder()  # storing and queueing, per conversation key

    async def said(self, message: IncomingMessage) -> Said | Reply:
        """The message as it is stored: its text files read into it, its images and anything else
        the character cannot read named in a placeholder; or the answer when it cannot be."""
        text = clean_text(message.text).strip()
        came = self._came_with(message)
        note, images, text_files, unseen = came.note, came.images, came.text_files, came.unseen
        if came.voices and self.listening is None and not text:
            return Reply.refusal(TEXT_ONLY.format(name=message.conversation.character))
        if note is not None and (refusal := self.listening.refusal(note)):  # from the metadata, nothing fetched
            return Reply.refusal(refusal)
        if not (text or text_files or images or note):
            return Reply.refusal(CANNOT_SEE.format(what=in_words(unseen)) if unseen else EMPTY_MESSAGE)
        if images or unseen:
            text = f"[{in_words([file.what for file in images] + unseen)}] {text}".strip()
        budget = window_token_budget(self.context_window())
        if text_files:
            room = budget - self.counter.count(text) - FILE_HEADING_TOKENS * len(text_files)
            text = f"{text}\n\n{await read_text_files(text_files, self.counter, room)}".strip()
        words = text  # what came with a voice note besides the note
        if note is not None:
            text = "\n".join(filter(None, (NOT_TRANSCRIBED, words)))  # its placeholder until it is heard
        tokens = self.counter.count(text)
        if tokens > budget:
            return Reply.refusal(TOO_LONG_MESSAGE.format(tokens=tokens, budget=budget))
        return Said(text, tokens, words, note, unseen, images)

    def _came_with(self, message: IncomingMessage) -> CameWith:
        kinds = [(kind_of(file), file) for file in message.files]
        voices = [file for kind, file in kinds if kind == "voice"]
        note = voices[0] if voices and self.listening is not None else None
        kinds = [("other", file) if kind == "voice" and file is not note else (kind, file) for kind, file in kinds]
        images = [file for kind, file in kinds if kind == "image"]
        unseen = list(message.unseen) + [file.what for kind, file in kinds if kind == "other"]
        if self.llm.vision_supported is False:
            unseen, images = unseen + [file.what for file in images], []
        return CameWith(voices, note, images, [file for kind, file in kinds if kind == "text"], unseen)

    async def completed(self, queued: Queued, message: IncomingMessage) -> Queued:
        """A queued message once the rest of what was sent with it came (`IncomingMessage.rest`):
        as it is stored now (each later part was stored into it as an edit is) and with every
        image of it to look at. Deleted meanwhile, its turn finds that out as any turn does."""
        row = await self.conversations.message(queued.user_row.id)
        came = self._came_with(message)
        return replace(queued, user_row=row or queued.user_row, unseen=came.unseen, images=came.images)

    async def store_and_queue(self, message: IncomingMessage) -> Reply | Queued | ToHear:
        """Store the message as it is said (`said`) and queue its turn; or the answer when it
        cannot be kept. A voice note is stored as its placeholder, to be heard (`ToHear`)."""
        said = await self.said(message)
        if isinstance(said, Reply):
            return said
        text, tokens, note, unseen, images = said.text, said.tokens, said.note, said.unseen, said.images
        stored = self.cast.character(message.conversation.character)
        try:
            person_id = await self.cast.person_for(message.speaker)
            conversation = await self.cast.conversation_for(message.conversation)
            # in a scene, the character it is addressed to and those it names witness it (SPEC 22)
            await self.witnesses.bring_in(conversation, text, addressed=[stored])
            if await self.gate.past_allowance(person_id):  # past today's tokens (SPEC 17): kept, not answered
                await self._keep_unanswered(message, person_id, text)
                return await self.past_allowance(person_id)
            if note is not None:
                return await self._keep_to_hear(message, note, stored, conversation, person_id, text, said.words,
                                                unseen, images)
            # One transaction: stored (once per platform id), a model call taken under [limits],
            # and queued in the conversation's line in the database (every process), in arrival order.
            arrival = await self.turns.store_and_queue(
                conversation.id, person_id, self.cast.as_a_person(message.speaker_name), text, tokens,
                message.platform_message_id, self.gate.limit_for(person_id, message.conversation),
                checkin_from=self.checkin_from(message.conversation, person_id),
                character_id=stored.id, album=new_album(message))
        except Exception:
            log.exception("a message to %s could not be stored", message.conversation)
            return Reply.error(NOT_SAVED)
        if arrival.message is None:
            log.info("a message delivered again to %s was already stored; it is answered once", message.conversation)
            return Reply.silence()
        if arrival.wait_s is not None:
            return Reply.refusal(TOO_FAST.format(limit=self.gate.per_minute, seconds=arrival.wait_s))
        return Queued(stored, conversation, person_id, arrival.message, arrival.ticket, unseen, images, arrival.turn_id)

    async def _keep_to_hear(self, message: IncomingMessage, note: IncomingFile, stored: StoredCharacter,
                            conversation: ConversationRow, person_id: int | None, placeholder: str, words: str,
                            unseen: list[str], images: list[IncomingFile]) -> Reply | ToHear:
        """A voice note is stored at once as its placeholder (kept, whatever happens next); hearing
        it is a model call on the person's behalf (the gate: `[limits]`, past which it stays kept
        as its placeholder and the person hears the line a typed message gets)."""
        refusal = (await self.gate.admit(HEARING, stored.character.name, message.asker, person_id,
                                         message.conversation)).refusal
        row = await self._keep_unanswered(message, person_id, placeholder)
        if row is None:
            log.info("a voice note delivered again to %s was already stored", message.conversation)
            return Reply.silence()
        if refusal:
            return Reply.refusal(refusal)
        return ToHear(message.conversation, stored, conversation, person_id, row, note, words, unseen, images)

    async def hear_and_queue(self, heard: ToHear) -> Reply | Queued:
        """Hear a stored voice note while other messages of its chat go on (SPEC 16: a slow
        transcription holds nobody else), fill its text in, and queue its turn; or the one line
        the person gets instead (the placeholder stays)."""
        assert self.listening is not None
        try:
            transcript, line = await self.listening.hear(heard.note)
        except Abandoned:  # stopping: the note stays kept as its placeholder
            return Reply.silence()
        if transcript is None:
            return Reply.error(line)
        transcript = clean_text(transcript)
        await self.gate.spend(heard.person_id, heard.character.id, 0, self.counter.count(transcript))
        text = spoken(transcript, heard.words)
        tokens, budget = self.counter.count(f"{SPOKEN} {text}"), window_token_budget(self.context_window())
        if tokens > budget:
            return Reply.refusal(TOO_LONG_MESSAGE.format(tokens=tokens, budget=budget))
        row = await self.conversations.fill_in(heard.user_row.id, text, tokens, spoken=True)
        if row is None:  # deleted meanwhile
            return Reply.silence()
        if (wait := await self.gate.take(heard.person_id, heard.key)) is not None:  # answering is a call too
            return Reply.refusal(TOO_FAST.format(limit=self.gate.per_minute, seconds=wait))
        ticket = await self.turns.queue_turn(heard.conversation.id, heard.person_id, row.id,
                                             character_id=heard.character.id)
        return Queued(heard.character, heard.conversation, heard.person_id, row, ticket, heard.unseen, heard.images)

    async def past_allowance(self, person_id: int | None) -> Reply:
        """A person past today's tokens is told once a day; after that, silence."""
        line = await self.gate.allowance_notice(person_id)
        return Reply.refusal(line) if line else Reply.silence()

    async def _keep_unanswered(self, message: IncomingMessage, person_id: int | None, text: str) -> MessageRow | None:
        """Store the person's message without queueing a turn: it is kept, and not answered
        (None: it was stored before, the platform delivered it again)."""
        conversation = await self.cast.conversation_for(message.conversation)
        return await self.conversations.add_user_message(conversation.id, person_id,
                                                         self.cast.as_a_person(message.speaker_name), text,
                                                         self.counter.count(text), message.platform_message_id,
                                                         new_album(message))
