"""What every chat adapter does the same way, whatever its platform: the reply flow.

- `deliver`: the one way out of everything the bot says (a `Reply`: a turn's, a Regenerate's, a
  recovery's, a letter, a notification, a greeting). Its words split at the platform's limit
  (reusing a streamed preview's messages), the tool line small under them, buttons on the last
  message, then each part (a voice note, a picture, a file) through the platform's one
  `send_media`; then it is reported shown (the Regenerate button stays on the latest reply only)
  or, when its words could not be sent, undelivered.
- `answer`: run a turn, streaming it into one platform message (at most about one edit a
  second), then `deliver` the final reply.
- `regenerate`: replace the latest reply (only the person it answered may), never half-way.
- `recover`: replies a crash cut off — answered again under 5 minutes, else marked; at start
  and every RECOVER_EVERY_S after (`keep_recovering`), since another process sharing the
  database may die mid-reply at any time.
- `notified`: a background result (a rebuild finished) delivered to its conversation.
- `answer_here`, `continue_scene`: the character's voice in a scene (SPEC 15): a message the
  core gives it to answer, or another character's reply it answers.
- `present`: while its block runs, the adapter hears notifications, writes check-ins and speaks
  in scenes (it calls this around its own serving).
- `write_first`: a letter (a check-in, SPEC 14; a reminder, SPEC 19) delivered like a reply; a
  platform's refusal to reach the person (`refuses_person`) is `Unreachable`.

A platform adapter subclasses `ChatAdapter` and supplies the primitives: where a conversation
lives (`Place`), how to send, edit and delete a message there, and how to send each kind of
media a part makes (`send_media`). Messages are named by their platform id as text.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, Sequence, TypeVar

from adapters.splitting import split_message
from adapters.streaming import ThrottledStream
from bot.contract import (
    INTERRUPTED,
    Asker,
    Button,
    ConversationKey,
    Core,
    Identity,
    IncomingMessage,
    Kind,
    Media,
    Part,
    QueuedTurn,
    Reply,
    ReplySink,
    TurnRef,
    Unreachable,
)

log = logging.getLogger(__name__)
RECOVER_EVERY_S = 15.0
RECOVERY_GRACE_S = 5.0  # a stopping adapter lets a recovery under way finish this long
CANNOT_REPLACE = ("This reply can't be changed any more (it was posted through a webhook that is gone). "
                  "Send your message again instead.")
Place = TypeVar("Place")  # where a conversation lives on the platform (a chat and topic; a channel)


class CannotSend(Exception):
    """A kind of media this platform has no way to send (named in one WARNING; the words stand)."""


class ChatAdapter(abc.ABC, Generic[Place]):
    platform: str
    limit: int  # characters a message may hold
    failures: tuple[type[BaseException], ...] = ()  # the platform library's errors (logged and ignored)
    shows_waveforms = False  # a voice note is sent with its waveform (Discord's voice messages)

    def __init__(self, core: Core, character_name: str):
        self.core = core
        self.character_name = core.conversation.character_name(character_name)

    # -- what a platform supplies -------------------------------------------------------------
    @abc.abstractmethod
    def place_of(self, conversation: ConversationKey) -> Place: ...

    @abc.abstractmethod
    async def send(self, place: Place, text: str, buttons: list[list[Button]], reply_to: str | None,
                   formatted: bool = True) -> str:
        """Send a message (formatted where the platform can, unless not `formatted`); its id."""

    @abc.abstractmethod
    async def edit(self, place: Place, message_id: str, text: str, buttons: list[list[Button]],
                   formatted: bool = True) -> None: ...

    @abc.abstractmethod
    async def delete(self, place: Place, message_id: str) -> None: ...

    @abc.abstractmethod
    async def send_media(self, place: Place, media: Media) -> str:
        """Send what a part made (a voice note, SPEC 16; a picture, SPEC 20; a file); its id. Each
        kind is named here, once per platform; one the platform cannot send raises CannotSend."""

    @abc.abstractmethod
    async def drop_buttons(self, place: Place, message_id: str) -> None: ...

    @abc.abstractmethod
    def typing(self, place: Place) -> Any:
        """An async context manager keeping the typing indicator on."""

    @abc.abstractmethod
    async def can_speak(self, conversation: ConversationKey) -> bool:
        """Whether the character can post in that chat now (a scene asks before it chooses it)."""

    @abc.abstractmethod
    def refuses_person(self, failure: BaseException) -> bool:
        """Whether this platform error means the person cannot be written to (a blocked bot)."""

    # -- the shared flow ----------------------------------------------------------------------
    def present(self) -> contextlib.ExitStack:
        """Hear notifications, write check-ins and speak in scenes while the block runs."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.core.presence.listening(self._notified))
        stack.enter_context(self.core.presence.writing_first(self))
        stack.enter_context(self.core.presence.voicing(self))
        return stack

    async def answer(self, place: Place, incoming: IncomingMessage) -> None:
        """Answer a message: the reply streams into one message, then is delivered whole."""
        reply_to = incoming.platform_message_id if incoming.conversation.is_shared else None
        await self._stream(place, reply_to, lambda sink: self.core.conversation.handle(incoming, on_text=sink))

    async def answer_here(self, incoming: IncomingMessage) -> None:
        await self.answer(self.place_of(incoming.conversation), incoming)

    async def continue_scene(self, conversation: ConversationKey, turn: QueuedTurn, on_behalf: Asker | None) -> None:
        await self._stream(self.place_of(conversation), None,
                           lambda sink: self.core.presence.answer_queued(conversation, turn, on_behalf, on_text=sink))

    async def _stream(self, place: Place, reply_to: str | None, run: Callable[[ReplySink], Awaitable[Reply]]
                      ) -> None:
        """Run a turn, streaming its reply into one message; the typing indicator shows from the
        moment the turn begins (the core's first word to the sink), never while it waits in line."""
        live: list[str] = []

        async def show(text: str) -> str | None:
            preview = split_message(text, self.limit)[0]
            if live:
                await self.edit(place, live[0], preview, [])
                return None
            live.append(await self.send(place, preview, [], reply_to))
            return live[0]

        stream = ThrottledStream(show)
        typing = contextlib.AsyncExitStack()
        begun = False

        async def sink(text: str) -> str | None:
            nonlocal begun
            if not begun:
                begun = True
                await typing.enter_async_context(self.typing(place))
            return await stream(text)

        async with typing:
            reply = await run(sink)
        await self.deliver(place, reply_to, reply, live)

    def _small(self, line: str) -> str:
        """A line shown small under a reply (the platform's own way, where it has one)."""
        return line

    async def deliver(self, place: Place, reply_to: str | None, reply: Reply, existing: Sequence[str] = ()
                      ) -> list[str]:
        """The one way out: send all of `reply`, then report it. Its words, split, in place of
        `existing` messages (a streamed preview, or the reply it regenerates), the tool line
        (SPEC 18) small under them, its buttons on the last message; then each part, made now.
        A turn's reply is then reported shown (the Regenerate of the reply before goes) — or, when
        its words could not be sent, undelivered: taken back, as never said (SPEC 15), and the
        failure raised. A part that cannot be made or sent leaves the words standing (one WARNING).
        Silence sends nothing. The ids its words show as."""
        if reply.kind is Kind.SILENCE:
            return []
        text = f"{reply.text}\n\n{self._small(reply.note)}" if reply.note else reply.text
        chunks = split_message(text, self.limit)
        formatted = reply.kind is Kind.ANSWER  # the character's words; the bot's own are plain
        ids: list[str] = []
        try:
            for i, chunk in enumerate(chunks):
                buttons = reply.buttons if i == len(chunks) - 1 else []
                if i < len(existing):
                    await self.edit(place, existing[i], chunk, buttons, formatted)
                    ids.append(existing[i])
                else:
                    ids.append(await self.send(place, chunk, buttons, reply_to if not ids else None, formatted))
        except Exception:  # the platform refused or failed (a cancelled send's fate is unknown)
            if reply.turn is not None:  # what was not shown was not said (SPEC 15)
                await self.core.conversation.undelivered(reply)
            raise
        for extra in existing[len(chunks):]:
            await self.quietly(self.delete(place, extra))
        for part in reply.parts:
            await self._send_part(place, part)
        if reply.turn is not None:
            previous = await self.core.conversation.delivered(reply, ids)
            if previous and previous[-1] not in ids:
                await self.quietly(self.drop_buttons(place, previous[-1]))
        return ids

    async def _send_part(self, place: Place, part: Part) -> None:
        """A part after the words, made now. One that fails leaves the words alone: one WARNING
        (the core's when it could not be made, this one when the platform would not take it)."""
        try:  # never a failure before the reply is reported shown: the conversation's line waits for that
            made = await part.made(self.shows_waveforms)
            if made is not None:
                await self.send_media(place, made)
        except Exception as failure:
            log.warning("%s: %s with a reply could not be sent (%s: %s); the words stand", self.platform, part.what,
                        type(failure).__name__, failure)

    async def regenerate(self, place: Place, conversation: ConversationKey, presser: Identity, asker: Asker | None,
                         turn: TurnRef, pressed: str, acknowledge: Callable[[str | None], Awaitable[None]]
                         ) -> str | None:
        """Regenerate the reply whose button was pressed (message `pressed`) by `presser`, who
        presses as `asker` (for the gate). The press is acknowledged at once, with the reason
        when it is refused. Returns what went wrong after that (the model failed: the old reply
        stays, intact), for the presser; else None."""
        refusal = await self.core.regenerating.regenerate_refusal(conversation, presser, turn, asker)
        existing = await self.core.regenerating.shown_as(turn) or [pressed]
        if refusal is None and not await self.replaceable(place, existing):
            refusal = CANNOT_REPLACE  # no model call for a reply that could not be shown
        await acknowledge(refusal)
        if refusal:
            return None
        async with self.typing(place):  # no live edits: a failure must leave the old reply whole
            reply = await self.core.regenerating.regenerate(conversation, presser, turn, asker)
        if reply.is_error:
            return reply.text
        await self.deliver(place, None, reply, existing)  # a regenerated answer to a voice note is spoken too
        return None

    async def replaceable(self, place: Place, message_ids: list[str]) -> bool:
        """Whether these messages of the character can still be edited (a reply regenerated
        into them would show); a platform that cannot tell says yes and hears a refusal later."""
        return True

    async def recover(self) -> None:
        """Replies a crash cut off: answered again when under 5 minutes old (replacing the
        partial message), otherwise the partial message says it was interrupted (so does a
        scene's reply to a character when a person wrote since)."""
        for item in await self.core.recovery.cut_off(self.platform, self.character_name):
            place = self.place_of(item.conversation)
            partial = [item.partial_message_id] if item.partial_message_id else []
            try:
                reply = await self.core.recovery.answer_again(item) if item.fresh else None
                if reply is not None and not reply.silent:  # every segment, as any reply
                    await self.deliver(place, item.asked if item.conversation.is_shared else None, reply, partial)
                elif partial:  # too old, or a scene's chain a person ended meanwhile
                    await self.edit(place, partial[0], INTERRUPTED, [], formatted=False)
            except self.failures as failure:
                log.warning("%s: could not recover an interrupted reply: %s", self.platform, failure)

    @contextlib.asynccontextmanager
    async def _recovering(self, recover: Callable[[asyncio.Event], Awaitable[None]]) -> AsyncIterator[None]:
        """Run `recover(done)` while the block runs; when it ends, a recovery under way finishes
        (its reply delivered and marked shown, not cut off in between) for RECOVERY_GRACE_S at
        most, and is then stopped."""
        done = asyncio.Event()
        task = asyncio.create_task(recover(done))
        try:
            yield
        finally:
            done.set()
            await asyncio.wait({task}, timeout=RECOVERY_GRACE_S)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def keep_recovering(self, stop: asyncio.Event) -> None:
        """Recover until `stop` is set; a recovery under way finishes first, so a reply it
        delivered is also marked shown (cut off between the two, it would be taken back)."""
        while not stop.is_set():
            try:
                await self.recover()
            except Exception:
                log.exception("%s: recovering interrupted replies failed; trying again later", self.platform)
            # at once when a waiter found one
            found = asyncio.ensure_future(self.core.recovery.stray_found(RECOVER_EVERY_S))
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({found, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (found, stopping):
                task.cancel()

    async def write_first(self, conversation: ConversationKey, letter: Reply, stale: Sequence[str] = ()) -> list[str]:
        """A letter in a one-to-one conversation (a check-in, SPEC 14; a reminder, SPEC 19); the
        ids of its words' messages. The outbox reports it shown or takes it back."""
        place = self.place_of(conversation)
        try:
            ids = await self.deliver(place, None, letter)
        except self.failures as failure:
            if self.refuses_person(failure):
                raise Unreachable(str(failure)) from failure
            raise
        for message_id in stale:
            await self.quietly(self.drop_buttons(place, message_id))
        return ids

    async def _notified(self, conversation: ConversationKey, text: str) -> None:
        if conversation.platform != self.platform or conversation.character != self.character_name:
            return
        await self.quietly(self.deliver(self.place_of(conversation), None, Reply.notice(text)))

    async def quietly(self, call: Awaitable[Any]) -> None:
        try:
            await call
        except self.failures as failure:
            log.debug("ignored %s error: %s", self.platform, failure)
