"""The core as adapters see it: the `Core` of bot/contract.py, made by `build_core` of one service
per protocol, on top of the turn handler, the command router and the store — `Chat`
(Conversation), `Regenerations`, `CrashRecovery` (Recovery), `CommandDesk` (Commands),
`PrivateAnswerBook` (PrivateAnswers), `Gatekeeper`, `Coordinator` and `Presences` (Presence).
Besides passing a turn on, they keep what is about platform messages rather than about answering:
which platform messages a reply shows as, where a private answer's buttons act, edits and
deletions of stored messages, greetings, the replies a crash cut off and update deduplication.
`[access]` and `[limits]` are the gate's (bot/access/gate.py), asked for the character that
answers on every path."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from datetime import datetime
from typing import Any, Awaitable, Callable
from zoneinfo import ZoneInfo

from bot.access.gate import MESSAGE, Gate
from bot.characters.cast import Cast
from bot.commands.router import CommandRouter
from bot.commands.table import TABLE, help_text
from bot.contract import (
    AlbumItem,
    AlbumSoFar,
    Asker,
    CommandContext,
    CommandResult,
    CommandSpec,
    ConversationKey,
    Core,
    CutOff,
    FirstWriter,
    Identity,
    IncomingMessage,
    MemoryPage,
    Notifier,
    QueuedTurn,
    Reply,
    ReplySink,
    TurnRef,
    Voice,
)
from bot.model.tokens import TokenCounter
from bot.present import Present
from bot.scenes import Scenes
from bot.text import parse_number
from bot.turn.handler import TurnHandler
from bot.writing_first.checkins import CheckIns
from bot.writing_first.outbox import Delivered
from storage.ports import RECOVER_WITHIN_S, Store, StoredAlbum

log = logging.getLogger(__name__)


class Notifications:
    """Tells people about background results (a rebuild finished) through the adapters that are
    running; each adapter ignores conversations of other platforms and characters."""

    def __init__(self, store: Store, cast: Cast):
        self.store = store
        self.cast = cast
        self.notifiers: Present[Notifier] = Present()

    async def notify(self, conversation_id: int, person_id: int | None, text: str) -> None:
        conversation = await self.store.conversations.conversation_by_id(conversation_id)
        key = self.cast.key_of(conversation) if conversation is not None else None
        if key is None:
            return
        for notifier in self.notifiers:
            await notifier(key, text)

    def __len__(self) -> int:
        """How many adapters listen now."""
        return len(self.notifiers)

    def listening(self, notifier: Notifier) -> contextlib.AbstractContextManager[None]:
        return self.notifiers.joined(notifier)


class AnsweredAgain:
    """Turns answered again after a crash: no scene chain follows them (a chain resumes at most
    once). Shared by the recovery that answers them and the chat that marks them shown."""

    def __init__(self) -> None:
        self.turns: set[int] = set()

    def add(self, turn_id: int) -> None:
        self.turns.add(turn_id)

    def taken(self, turn_id: int) -> bool:
        """Whether this turn was answered again (asked once, as its reply is shown)."""
        if turn_id in self.turns:
            self.turns.discard(turn_id)
            return True
        return False


class Chat:
    """Conversation (bot/contract.py): messages in, replies out, edits, deletions, greetings."""

    def __init__(self, store: Store, cast: Cast, counter: TokenCounter, turns: TurnHandler, gate: Gate,
                 scenes: Scenes, delivered: Delivered, answered_again: AnsweredAgain):
        self.store = store
        self.cast = cast
        self.counter = counter
        self.turns = turns
        self.gate = gate
        self.scenes = scenes
        self.shown = delivered  # what follows a reply shown: its mark, summaries (shared with the outbox)
        self.answered_again = answered_again

    def character_name(self, name: str) -> str:
        return self.cast.character(name).character.name

    async def handle(self, message: IncomingMessage, on_text: ReplySink | None = None) -> Reply:
        key = message.conversation
        if key.is_shared:  # a scene: perhaps another character answers (SPEC 15)
            answerer = await self.scenes.answerer(message)
            if answerer.casefold() != key.character.casefold():
                await self.scenes.answer_elsewhere(message, answerer)
                return Reply.silence()
        admission = await self.gate.admit(MESSAGE, key.character, message.asker)  # the character that answers decides
        if not admission.admitted:  # one line, no model call; silence where [access] keeps them out of a shared chat
            if message.kept is not None:
                message.kept()
            return Reply.silence() if admission.kept_out and key.is_shared else Reply.refusal(admission.refusal)
        return await self.turns.handle(message, on_text)

    async def heard(self, key: ConversationKey) -> None:
        await self.scenes.heard(key)

    async def delivered(self, reply: Reply, platform_message_ids: list[str]) -> list[str]:
        shown = await self.shown.reply(reply.turn.id, list(platform_message_ids)) if reply.turn is not None else None
        if shown is None:
            return []
        if not self.answered_again.taken(shown.turn.id):
            await self.scenes.after_reply(shown.turn, reply.on_behalf)
        return shown.shown_before

    async def undelivered(self, reply: Reply) -> None:
        turn = await self.store.turns.turn(reply.turn.id) if reply.turn is not None else None
        if turn is not None and turn.reply_message_id is not None:
            log.warning("a reply in conversation %d never reached the chat; it is taken back", turn.conversation_id)
            await self.store.turns.withdraw_reply(turn.reply_message_id)

    async def edited(self, message: IncomingMessage) -> bool:
        """Stored as a new message is (`Arrival.said`), so what came with it stays named and its
        text files read. A voice note's text is what was heard: an edit of its caption leaves it;
        so does an edit that could not be stored new (nothing left to read, too long). A message
        never stored (to no character) costs nothing: no file of it is fetched."""
        conversation = await self.cast.conversation_for(message.conversation)
        stored = await self.store.conversations.message_by_platform_id(conversation.id, message.platform_message_id)
        if stored is None or stored.role != "user":
            return False
        said = await self.turns.arrival.said(message)
        if isinstance(said, Reply) or said.note is not None:
            return False
        return await self.store.conversations.edit_platform_message(
            conversation.id, message.platform_message_id, said.text, said.tokens)

    async def deleted(self, key: ConversationKey, platform_message_id: str) -> bool:
        conversation = await self.cast.conversation_for(key)
        return await self.store.conversations.delete_platform_message(conversation.id, platform_message_id)

    async def join_album(self, key: ConversationKey, item: AlbumItem) -> AlbumSoFar | None:
        conversation = await self.cast.conversation_for(key)
        return _as_told(await self.store.conversations.join_album(conversation.id, item.album,
                                                                  item.platform_message_id, item.item))

    async def album_size(self, key: ConversationKey, album: str) -> int:
        return await self.store.conversations.album_size((await self.cast.conversation_for(key)).id, album)

    async def end_album(self, key: ConversationKey, album: str) -> list[str]:
        return await self.store.conversations.end_album((await self.cast.conversation_for(key)).id, album)

    async def edit_album_item(self, key: ConversationKey, item: AlbumItem) -> AlbumSoFar | None:
        conversation = await self.cast.conversation_for(key)
        return _as_told(await self.store.conversations.edit_album_item(conversation.id, item.album,
                                                                       item.platform_message_id, item.item))

    async def left_chat(self, platform: str, chat_id: str, character: str) -> None:
        left = await self.store.presence.leave_chat(platform, chat_id, self.cast.character(character).id)
        if left:
            log.info("%s left %s chat %s: it witnesses nothing said there until it is brought in again (SPEC 22)",
                     character, platform, chat_id)

    async def greet(self, key: ConversationKey, speaker_name: str, choice: str = "",
                    asker: Identity | None = None) -> Reply:
        """The character's greeting: a card's first_mes, or with `choice` ("2", "3", …) one of its
        alternate greetings (`other_greetings` says how to see them), its time words where
        `asker` is (their /timezone, else the deployment's). In a one-to-one
        conversation with no messages yet the greeting is stored as the character's first
        message, so the model knows what it said. (Not in a shared one: it names the person, and
        would outlive their /forgetme.)"""
        character = self.cast.character(key.character).character
        number = parse_number(choice) if choice.strip() else 1
        if number is None or not 1 <= number <= character.greetings:
            if character.greetings == 1:
                return Reply.refusal(f"{character.name} has one greeting: /start.")
            return Reply.refusal(f"{character.name} has greetings 1 to {character.greetings}: "
                                 f"/start 1 … /start {character.greetings}.")
        person_id = await self.cast.person_for(asker)
        zone = (await self.store.people.profile(person_id)).time_zone if person_id is not None else None
        when = datetime.fromtimestamp(self.turns.clock(), ZoneInfo(zone or self.turns.toolbox.zone))  # for a {{time}}
        text = character.greeting(speaker_name, number, when)
        if not key.is_shared:
            conversation = await self.cast.conversation_for(key)
            await self.store.conversations.add_greeting(conversation.id, character.name, text,
                                                        self.counter.count(text))
        return Reply.answer(text)

    async def left_off(self, key: ConversationKey, count: int = 2) -> list[tuple[str, str]]:
        """The last `count` messages of a conversation going on, oldest first, as (speaker,
        text); none for a new one (which gets the greeting)."""
        conversation = await self.cast.conversation_for(key)
        newest_first = await self.store.conversations.recent_messages(conversation.id, count)
        return [(row.speaker_name, row.said) for row in reversed(newest_first)]

    def other_greetings(self, key: ConversationKey, choice: str = "") -> str | None:
        character = self.cast.character(key.character).character
        shown = parse_number(choice) if choice.strip() else 1
        if character.greetings == 1 or shown is None or not 1 <= shown <= character.greetings:
            return None
        others = ", ".join(f"/start {n}" for n in range(1, character.greetings + 1) if n != shown)
        return f"{character.name} has other greetings too: {others}."


def _as_told(album: StoredAlbum | None) -> AlbumSoFar | None:
    """An album as the store holds it, in the contract's words."""
    return AlbumSoFar(album.stored_as, album.items) if album is not None else None


class Regenerations:
    """Regenerating (bot/contract.py): the Regenerate button, as the turn handler decides it."""

    def __init__(self, store: Store, turns: TurnHandler):
        self.store = store
        self.turns = turns

    async def regenerate_refusal(self, key: ConversationKey, presser: Identity, turn: TurnRef,
                                 asker: Asker | None) -> str | None:
        return await self.turns.regenerate_refusal(key, presser, turn, asker)

    async def shown_as(self, turn: TurnRef) -> list[str]:
        """The platform ids of a turn's reply (what the Regenerate button was on)."""
        row = await self.store.turns.turn(turn.id)
        if row is None or row.reply_message_id is None:
            return []
        return await self.store.conversations.platform_message_ids(row.reply_message_id)

    async def regenerate(self, key: ConversationKey, presser: Identity, turn: TurnRef, asker: Asker | None,
                         on_text: ReplySink | None = None) -> Reply:
        return await self.turns.regenerate(key, presser, turn, asker, on_text)


class CrashRecovery:
    """Recovery (bot/contract.py): the replies a crash cut off, and lines a gone process held."""

    def __init__(self, store: Store, cast: Cast, turns: TurnHandler, answered_again: AnsweredAgain,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.cast = cast
        self.turns = turns
        self.answered_again = answered_again
        self.clock = clock

    async def cut_off(self, platform: str, character: str) -> list[CutOff]:
        """Claim the turns a crash cut off on this platform for this character (each once, by
        whichever adapter asks first, in message order), after interrupting those of processes
        sharing the database that are gone since. A fresh one is queued again at once, at its
        message's place in line."""
        stored = self.cast.character(character)
        await self.store.turns.recover_interrupted_turns()
        claimed = []
        for row in await self.store.turns.interrupted_turns(platform, stored.id):
            if self.clock() - row.turn.created_at < RECOVER_WITHIN_S:  # fresh: answered again
                if (ticket := await self.store.turns.requeue_interrupted_turn(row.turn.id)) is None:
                    continue
                queued: QueuedTurn | None = QueuedTurn(row.user_message.id, ticket)
            elif await self.store.turns.claim_interrupted_turn(row.turn.id):
                queued = None
            else:
                continue
            key = self.cast.key_of(row.conversation)
            assert key is not None  # the character asked for is configured
            key = replace(key, character=stored.character.name)  # in a scene, the turn's character
            claimed.append(CutOff(queued, key, row.user_message.platform_message_id, row.user_message.content,
                                  row.turn.partial_message_id))
        return claimed

    async def answer_again(self, cut_off: CutOff, on_text: ReplySink | None = None) -> Reply:
        assert cut_off.queued is not None, "only a fresh cut-off reply is answered again"
        reply = await self.turns.answer_again(cut_off.conversation, cut_off.queued, on_text)
        if reply.turn is not None:
            self.answered_again.add(reply.turn.id)
        return reply

    async def stray_found(self, timeout_s: float) -> None:
        await self.store.turns.stray_found(timeout_s)


class CommandDesk:
    """Commands (bot/contract.py): commands, buttons and forms, through the router."""

    def __init__(self, router: CommandRouter):
        self.router = router

    async def command(self, ctx: CommandContext, text: str) -> CommandResult:
        return await self.router.run_text(ctx, text)

    async def run(self, ctx: CommandContext, name: str, options: dict[str, Any]) -> CommandResult:
        return await self.router.run(ctx, name, options)

    async def press(self, ctx: CommandContext, action: str) -> CommandResult:
        return await self.router.press(ctx, action)

    async def submit(self, ctx: CommandContext, action: str, text: str) -> CommandResult:
        return await self.router.submit(ctx, action, text)

    async def remember(self, ctx: CommandContext, platform_message_id: str) -> CommandResult:
        return await self.router.remember(ctx, platform_message_id)

    def help_text(self, platform: str) -> str:
        return help_text(platform)

    def command_table(self) -> tuple[CommandSpec, ...]:
        return TABLE


class PrivateAnswerBook:
    """PrivateAnswers (bot/contract.py): where a command's private answer acts (Telegram)."""

    def __init__(self, store: Store, cast: Cast):
        self.store = store
        self.cast = cast

    async def answered_in(self, platform: str, chat_id: str, platform_message_ids: list[str],
                          key: ConversationKey) -> None:
        conversation = await self.cast.conversation_for(key)
        await self.store.conversations.set_answer_origin(platform, chat_id, platform_message_ids, conversation.id)

    async def asked_in(self, platform: str, chat_id: str, platform_message_id: str,
                       character: str) -> ConversationKey | None:
        conversation = await self.store.conversations.answer_origin(platform, chat_id, platform_message_id)
        return self.cast.key_of(conversation) if conversation is not None else None


class Gatekeeper:
    """Gatekeeping (bot/contract.py): the gate's word on who may reach a character."""

    def __init__(self, gate: Gate):
        self.gate = gate

    def lets_in(self, character: str, asker: Asker) -> bool:
        return self.gate.lets_in(character, asker)

    def rules_name_roles(self, character: str | None = None) -> bool:
        return self.gate.names_roles(character)


class Coordinator:
    """Coordination (bot/contract.py): what one process of several does once (SPEC 9)."""

    def __init__(self, store: Store):
        self.store = store

    async def first_delivery(self, update_key: str) -> bool:
        return await self.store.coordination.first_delivery(update_key)

    async def once_per_change(self, key: str, fingerprint: str, action: Callable[[], Awaitable[None]]) -> None:
        coordination = self.store.coordination
        async with coordination.claim(key, 60) as mine:
            if mine and await coordination.get_meta(key) != fingerprint:
                await action()
                await coordination.set_meta(key, fingerprint)


class Presences:
    """Presence (bot/contract.py): what an adapter joins while it runs — notifications,
    check-ins, a scene's voices — and a scene's queued turns."""

    def __init__(self, cast: Cast, turns: TurnHandler, notifications: Notifications, checkins: CheckIns,
                 scenes: Scenes):
        self.cast = cast
        self.turns = turns
        self.notifications = notifications
        self.checkins = checkins
        self.scenes = scenes

    def listening(self, notifier: Notifier) -> contextlib.AbstractContextManager[None]:
        return self.notifications.listening(notifier)

    def writing_first(self, writer: FirstWriter) -> contextlib.AbstractContextManager[None]:
        return self.checkins.writing_first(writer)

    def voicing(self, voice: Voice) -> contextlib.AbstractContextManager[None]:
        return self.scenes.voices.joined(voice)

    async def answer_queued(self, key: ConversationKey, turn: QueuedTurn, on_behalf: Asker | None,
                            on_text: ReplySink | None = None) -> Reply:
        return await self.turns.answer_again(key, turn, on_text, asker=on_behalf)  # the chain goes on for its starter

    def portrait(self, character: str) -> bytes | None:
        return self.cast.character(character).character.portrait


def build_core(store: Store, cast: Cast, counter: TokenCounter, turns: TurnHandler, gate: Gate,
               router: CommandRouter, notifications: Notifications, checkins: CheckIns, scenes: Scenes,
               delivered: Delivered, page: MemoryPage, clock: Callable[[], float] = time.time) -> Core:
    """The core every adapter of this process gets: one service per protocol."""
    answered_again = AnsweredAgain()
    return Core(
        conversation=Chat(store, cast, counter, turns, gate, scenes, delivered, answered_again),
        regenerating=Regenerations(store, turns),
        recovery=CrashRecovery(store, cast, turns, answered_again, clock),
        commands=CommandDesk(router),
        private_answers=PrivateAnswerBook(store, cast),
        gatekeeping=Gatekeeper(gate),
        coordination=Coordinator(store),
        presence=Presences(cast, turns, notifications, checkins, scenes),
        page=page,
    )
