"""Telegram adapter on python-telegram-bot v22 (SPEC section 7).

One PTB `Application` per character with a Telegram token, built with the configured Bot API
base URL and run with the manual lifecycle (so it shares the event loop with Discord), with
`concurrent_updates` on: turns of one conversation are serialized by the core, not by PTB.

- DMs are always answered; groups when the bot is mentioned, replied to, or commanded. Forum
  topics are conversations of their own.
- Replies stream by editing one message about once a second, with the typing action while
  waiting; the final text is split at 4,096 characters and sent as escaped HTML, retried as
  plain text if Telegram still rejects it. RetryAfter is honoured; "message is not modified"
  is ignored. The latest reply carries a Regenerate button (it edits the reply in place).
- `/memory …` answers are private: in a group they go to the person's DM, or the group gets a
  one-line note to open a DM first — never the memories themselves.
- A message sent on behalf of a chat (`sender_chat`: anonymous admins, "send as channel",
  channel posts) or by a bot is from nobody in particular (SPEC section 2): it may be answered,
  but no memories are read or written for it, and /memory tells it to write as the person.
- A photo, sticker or file is never silently ignored. A photo (or an image sent as a file)
  reaches a vision model through getFile; a text file is read as text; for anything else, or
  without vision, the caption is answered and the character says it cannot see the rest.
- An edited message changes the stored one; an edited command is never run again.
- Updates arrive by our own long-polling loop (into PTB's update queue) or, with `mode =
  "webhook"`, at our own webhook server (secret token checked), which hands each update to PTB
  itself so it can acknowledge it once its message is kept: every handler is shared.
  A token Telegram refuses (HTTP 401) stops this adapter with one clear error.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import html
import logging
import math
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web
from telegram import (
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ChatType, MessageLimit, ParseMode
from telegram.error import BadRequest, Forbidden, InvalidToken, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    ApplicationHandlerStop,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from adapters.base import ChatAdapter
from adapters.downloads import read_capped
from adapters.settings import TelegramSettings
from adapters.splitting import split_message
from adapters.streaming import typing
from bot.contract import (
    IMAGE_MAX_SIDE,
    NOT_ALLOWED,
    STALE_BUTTON,
    Asker,
    Button,
    CommandContext,
    CommandResult,
    ConversationKey,
    Core,
    Identity,
    IncomingFile,
    IncomingMessage,
    PlatformRefused,
    TurnRef,
    where_named,
)

log = logging.getLogger(__name__)
PLATFORM = "telegram"
LIMIT = MessageLimit.MAX_TEXT_LENGTH  # 4,096
POLL_TIMEOUT_S = 10
KEEP_WAIT_S = 10.0  # a webhook update is acknowledged by then at the latest
POLL_RETRY_MAX_S = 60.0
MAX_FLOOD_RETRIES = 3
ANSWERED_HERE = ("start", "help", "remember")  # commands of the table this adapter answers itself
OPEN_DM_FIRST = ("{name}, I answer /memory privately, but I can't write to you yet: open a chat with "
                 "me (tap my name, then Start) and send the command again.")
SOMETHING_WENT_WRONG = "Sorry, something went wrong on my side handling that. Try again."
UNSEEN_KINDS = (  # what a message carries that the character cannot read, in the order checked
    ("sticker", "a sticker"), ("animation", "a GIF"), ("video", "a video"),
    ("video_note", "a video message"), ("voice", "a voice message"), ("audio", "an audio file"),
)


def unseen_in(message: Message) -> str | None:
    """What the message carries besides text and files, in words ("a sticker"); None if nothing."""
    for attribute, words in UNSEEN_KINDS:
        if getattr(message, attribute, None):
            return words
    if message.effective_attachment and not (message.photo or message.document):
        return "an attachment"
    return None


def speaker_of(message: Message) -> Identity | None:
    """The person who wrote the message; None for nobody in particular: a message sent on
    behalf of a chat (anonymous admins, "send as channel", channel posts), or by a bot."""
    user = message.from_user
    if message.sender_chat is not None or user is None or user.is_bot or message.is_automatic_forward:
        return None
    return Identity(PLATFORM, str(user.id))


def speaker_name_of(message: Message) -> str:
    if message.sender_chat is not None:
        return message.sender_chat.effective_name or "someone"
    return message.from_user.full_name if message.from_user else "someone"


ITALIC = re.compile(r"(?<![*\w])\*(?![\s*])([^*\n]+?)(?<!\s)\*(?![*\w])|(?<!\w)_(?![\s_])([^_\n]+?)(?<!\s)_(?!\w)")


def to_html(chunk: str) -> str:
    """Escape everything; then render ``` fences as <pre>, `code` as <code>, **bold** as <b>, and
    a card's *actions* (or _actions_) as <i>. A marker left open (a reply still streaming) stays
    as it is."""
    out = []
    for i, part in enumerate(re.split(r"(```[^\n]*\n.*?```)", chunk, flags=re.DOTALL)):
        if i % 2:
            body = part.split("\n", 1)[1].removesuffix("```").rstrip("\n")
            out.append(f"<pre>{html.escape(body, quote=False)}</pre>")
            continue
        for j, piece in enumerate(re.split(r"(`[^`\n]+`)", part)):
            if j % 2:
                out.append(f"<code>{html.escape(piece[1:-1], quote=False)}</code>")
                continue
            text = html.escape(piece, quote=False)
            text = re.sub(r"\*\*([^*\n]+)\*\*", r"<b>\1</b>", text)
            out.append(ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text))
    return "".join(out)


def file_url(base_url: str) -> str:
    """The Bot API's file URL beside its base URL: …/bot → …/file/bot."""
    return base_url.rstrip("/").removesuffix("/bot") + "/file/bot"


def keyboard(rows: list[list[Button]]) -> InlineKeyboardMarkup | None:
    if not rows:
        return None
    return InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.action) for b in row]
                                 for row in rows])


def flood_wait(flood: RetryAfter) -> float:
    """RetryAfter's wait in seconds (an int in PTB 22, a timedelta from PTB 23 on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the int form warns that it will change
        wait = flood.retry_after
    return wait.total_seconds() if isinstance(wait, dt.timedelta) else float(wait)


async def with_flood_retry(call: Callable[[], Awaitable[Any]]) -> Any:
    """Run a Bot API call, waiting out Telegram's RetryAfter (flood control) a few times."""
    for attempt in range(MAX_FLOOD_RETRIES + 1):
        try:
            return await call()
        except RetryAfter as flood:
            if attempt == MAX_FLOOD_RETRIES:
                raise
            wait = flood_wait(flood)
            log.warning("Telegram flood control: waiting %.1f s", wait)
            await asyncio.sleep(wait)


def asker_of(update: Update) -> Asker:
    """Who writes, runs a command or presses a button, and where, for the core's gate: the
    person (None for nobody in particular), the chat, and the chat a message is sent as (a
    channel posting into a group is judged by its own rules too)."""
    query, message, chat = update.callback_query, update.effective_message, update.effective_chat
    if query is not None:
        user_id: str | None = str(query.from_user.id)
    else:
        speaker = speaker_of(message) if message is not None else None
        user_id = speaker.user_id if speaker is not None else None
    places = (str(chat.id),) if chat is not None else ()
    sent_as = message.sender_chat if message is not None and query is None else None
    if sent_as is not None and sent_as.id != (chat.id if chat is not None else None):
        places += (str(sent_as.id),)
    return Asker(PLATFORM, user_id, places)


def _update_from(data: Any, bot) -> Update:
    """A webhook body as an Update; raises for anything else ([], {}, null, {"message": 7})."""
    if not isinstance(data, dict) or isinstance(data.get("update_id"), bool) or not isinstance(data.get("update_id"), int):
        raise ValueError("no update_id")
    return Update.de_json(data, bot)


class OncePerMinute:
    """A WARNING at most once a minute (SPEC 9: a flood of bad requests is no flood of log
    lines); the next one says how many were held back."""

    def __init__(self) -> None:
        self.last, self.held = -math.inf, 0

    def warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < 60:
            self.held += 1
            return
        if self.held:
            message += f" ({self.held} more in the minute before)"
        log.warning(message, *args)
        self.last, self.held = now, 0


@dataclass(frozen=True)
class Place:
    """Where a conversation lives on Telegram."""

    chat_id: int
    thread_id: int | None
    shared: bool

    @staticmethod
    def of(conversation: ConversationKey) -> "Place":
        thread = int(conversation.thread_id) if conversation.thread_id else None
        return Place(int(conversation.chat_id), thread, conversation.is_shared)


class TelegramAdapter(ChatAdapter[Place]):
    platform = PLATFORM
    limit = LIMIT
    failures = (TelegramError,)

    def __init__(self, core: Core, character: str, settings: TelegramSettings):
        super().__init__(core, character)
        self.settings = settings
        self.token = settings.token
        self.base_url = settings.base_url
        self.application: Application | None = None
        self._keeping: dict[int, asyncio.Future] = {}  # webhook updates waiting for their message to be kept
        self._malformed = OncePerMinute()  # webhook bodies that are no update

    # -- lifecycle -------------------------------------------------------------------------
    def build(self) -> Application:
        application = (
            Application.builder()
            .token(self.token)
            .base_url(self.base_url)
            .base_file_url(file_url(self.base_url))
            .concurrent_updates(True)
            .get_updates_read_timeout(POLL_TIMEOUT_S + 5)
            .updater(None)  # we fetch updates ourselves: see poll()
            .build()
        )
        application.add_handler(TypeHandler(Update, self.gatekeeper), group=-1)  # before every handler
        new = filters.UpdateType.MESSAGE  # commands run from new messages only, never from edits
        application.add_handler(CommandHandler("start", self.on_start, filters=new))
        application.add_handler(CommandHandler("help", self.on_help, filters=new))
        routed = [spec.name for spec in self.core.command_table()
                  if "telegram" in spec.platforms and spec.name not in ANSWERED_HERE]
        application.add_handler(CommandHandler(routed, self.on_memory_command, filters=new))
        application.add_handler(CommandHandler("remember", self.on_remember, filters=new))
        application.add_handler(CallbackQueryHandler(self.on_button))
        application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE & filters.TEXT, self.on_edited))
        application.add_handler(MessageHandler(new & filters.TEXT & ~filters.COMMAND, self.on_message))
        application.add_handler(MessageHandler(new & filters.ATTACHMENT, self.on_message))
        application.add_error_handler(self.on_error)
        self.application = application
        return application

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set: the manual lifecycle, sharing the event loop."""
        application = self.application or self.build()
        with self.present():
            await self._serve(application, stop)

    async def _serve(self, application: Application, stop: asyncio.Event) -> None:
        await self._refusable(application.initialize())
        try:
            await application.bot.set_my_commands(
                [BotCommand(spec.name, spec.description) for spec in self.core.command_table()
                 if "telegram" in spec.platforms])
            await application.start()
            log.info("Telegram: %s is online as @%s", self.character_name, application.bot.username)
            try:
                async with self.recovering(self.keep_recovering):
                    if self.settings.mode == "webhook":
                        await self.serve_webhook(application, stop)
                    else:
                        await self.poll(application, stop)
            finally:
                await application.stop()
        finally:
            await application.shutdown()

    async def poll(self, application: Application, stop: asyncio.Event) -> None:
        """Long-poll getUpdates into the application's queue until `stop` is set. Network trouble
        is retried with backoff; a refused token (HTTP 401) stops the adapter for good."""
        bot = application.bot
        await self._refusable(bot.delete_webhook())  # polling and a webhook exclude each other
        offset: int | None = None
        delay = 1.0
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                fetch = asyncio.create_task(bot.get_updates(
                    offset=offset, timeout=POLL_TIMEOUT_S, allowed_updates=Update.ALL_TYPES))
                await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    fetch.cancel()
                    await asyncio.gather(fetch, return_exceptions=True)
                    break
                try:
                    updates = await self._refusable(fetch)
                except RetryAfter as flood:
                    await self._pause(stop, flood_wait(flood))
                    continue
                except TelegramError as failure:
                    log.warning("Telegram: fetching updates failed (%s); retrying in %.0f s", failure, delay)
                    await self._pause(stop, delay)
                    delay = min(delay * 2, POLL_RETRY_MAX_S)
                    continue
                delay = 1.0
                for update in updates:
                    await application.update_queue.put(update)
                    offset = update.update_id + 1
            if offset is not None:  # confirm what was fetched, so it is not fetched again
                await self.quietly(bot.get_updates(offset=offset, timeout=0))
        finally:
            stopping.cancel()

    async def serve_webhook(self, application: Application, stop: asyncio.Event) -> None:
        """Serve PTB's updates on [telegram] listen:port at webhook_url's path until `stop`:
        Telegram posts each update with the secret token; anything without it gets 403 and is
        dropped. An update is acknowledged once its message is stored and queued for its turn
        (or its handler is done, or KEEP_WAIT_S passed): a crash before that makes Telegram
        deliver it again, and updates posted one after another to several processes behind a
        load balancer keep their order. GET /healthz answers 200 while the adapter runs."""
        settings = self.settings
        secret = settings.secret_token

        async def receive(request: web.Request) -> web.Response:
            given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
            if not hmac.compare_digest(given.encode(), secret.encode()):  # constant time
                return web.Response(status=403, text="wrong secret token")
            try:
                update = _update_from(await request.json(), application.bot)
            except Exception as problem:  # anything a caller can post that is no update
                self._malformed.warn("Telegram webhook of %s: a body that is not an update was refused with 400 "
                                     "(%s); further ones are counted quietly for a minute",
                                     self.character_name, type(problem).__name__)
                return web.Response(status=400, text="not an update")
            kept = asyncio.get_running_loop().create_future()
            self._keeping[update.update_id] = kept
            try:
                handled = application.create_task(application.process_update(update), update=update)
                await asyncio.wait({handled, kept}, timeout=KEEP_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._keeping.pop(update.update_id, None)
            return web.Response(text="ok")

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"ok": True, "character": self.character_name})

        server = web.Application()
        server.router.add_post(urlsplit(settings.webhook_url).path or "/", receive)
        server.router.add_get("/healthz", healthz)
        runner = web.AppRunner(server, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, settings.listen, settings.port).start()
            await self._refusable(application.bot.set_webhook(
                settings.webhook_url, secret_token=secret, allowed_updates=Update.ALL_TYPES))
            log.info("Telegram: %s takes updates at %s (serving %s:%d)", self.character_name,
                     settings.webhook_url, settings.listen, settings.port)
            await stop.wait()
        finally:
            await runner.cleanup()

    def kept_signal(self, update: Update) -> Callable[[], None] | None:
        """What tells the webhook that an update's message is kept (None when polling)."""
        waiting = self._keeping.get(update.update_id)
        if waiting is None:
            return None
        return lambda: None if waiting.done() else waiting.set_result(None)

    async def _refusable(self, call: Awaitable[Any]) -> Any:
        """A Bot API call where a refused token stops the adapter for good."""
        try:
            return await call
        except InvalidToken as refused:
            raise PlatformRefused(f"Telegram refused the bot token of {self.character_name} "
                                  f"({self.settings.token_env}): {refused}") from None

    @staticmethod
    async def _pause(stop: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    # -- the platform's primitives for the shared reply flow (adapters/base.py) ---------------
    @property
    def bot(self):
        assert self.application is not None, "the adapter is not built"
        return self.application.bot

    def place_of(self, conversation: ConversationKey) -> Place:
        return Place.of(conversation)

    def refuses_person(self, failure: BaseException) -> bool:
        return isinstance(failure, Forbidden)  # "bot was blocked by the user", "user is deactivated"

    async def can_speak(self, conversation: ConversationKey) -> bool:
        """A DM, or a group this bot is a member of (Telegram tells no bot about another's groups)."""
        if not conversation.is_shared:
            return True
        try:
            member = await self.bot.get_chat_member(int(conversation.chat_id), self.bot.id)
        except TelegramError as failure:
            log.info("Telegram: %s cannot tell whether it is in chat %s (%s)", self.character_name,
                     conversation.chat_id, failure)
            return False
        return member.status in ("creator", "administrator", "member") or (
            member.status == "restricted" and bool(getattr(member, "can_send_messages", False)))

    async def asker_for(self, conversation: ConversationKey, user_id: str) -> Asker:
        """Who this person is in this chat, as a message of theirs would say (for the gate)."""
        return Asker(PLATFORM, user_id, (conversation.chat_id,))

    def typing(self, place: Place):
        return typing(lambda: self.bot.send_chat_action(place.chat_id, ChatAction.TYPING,
                                                        message_thread_id=place.thread_id))

    async def send(self, place: Place, text: str, buttons: list[list[Button]], reply_to: str | None,
                   formatted: bool = True) -> str:
        """As escaped HTML (retried as plain text if Telegram still rejects it), or plain."""
        reply_parameters = ReplyParameters(int(reply_to), allow_sending_without_reply=True) if reply_to else None

        async def attempt(html_mode: bool) -> Message:
            return await with_flood_retry(lambda: self.bot.send_message(
                place.chat_id, to_html(text) if html_mode else text,
                parse_mode=ParseMode.HTML if html_mode else None, reply_markup=keyboard(buttons),
                message_thread_id=place.thread_id, reply_parameters=reply_parameters))

        try:
            sent = await attempt(html_mode=formatted)
        except BadRequest as rejected:
            if not formatted:
                raise
            log.warning("Telegram rejected the formatted reply (%s); sending plain text", rejected.message)
            sent = await attempt(html_mode=False)
        return str(sent.message_id)

    async def edit(self, place: Place, message_id: str, text: str, buttons: list[list[Button]],
                   formatted: bool = True) -> None:
        await self.edit_message(place.chat_id, int(message_id), text, keyboard(buttons), formatted)

    async def delete(self, place: Place, message_id: str) -> None:
        await self.bot.delete_message(place.chat_id, int(message_id))

    async def drop_buttons(self, place: Place, message_id: str) -> None:
        await self.bot.edit_message_reply_markup(place.chat_id, int(message_id), reply_markup=None)

    # -- normalizing updates -------------------------------------------------------------------
    @staticmethod
    def place(message: Message) -> Place:
        thread = message.message_thread_id if message.is_topic_message else None
        return Place(message.chat_id, thread, message.chat.type != ChatType.PRIVATE)

    def key(self, place: Place) -> ConversationKey:
        thread = str(place.thread_id) if place.thread_id is not None else None
        return ConversationKey(PLATFORM, str(place.chat_id), thread, self.character_name, place.shared)

    def addressed(self, message: Message, bot_id: int, username: str) -> bool:
        """DMs always; in groups a mention of the bot (in the text or a caption), a reply to it, or
        the character's name (SPEC 15; a bot reads a group's other messages only with its privacy
        mode off)."""
        if message.chat.type == ChatType.PRIVATE:
            return True
        if where_named(message.text or message.caption or "", self.character_name) is not None:
            return True
        reply = message.reply_to_message
        if reply is not None and reply.from_user is not None and reply.from_user.id == bot_id:
            return True
        mentions = [*message.parse_entities(["mention"]).values(),
                    *message.parse_caption_entities(["mention"]).values()]
        entities = [*(message.entities or []), *(message.caption_entities or [])]
        return any(m.lower() == f"@{username.lower()}" for m in mentions) or any(
            e.user is not None and e.user.id == bot_id for e in entities if e.type == "text_mention"
        )

    def files_of(self, message: Message) -> tuple[IncomingFile, ...]:
        """A photo (its smallest size that is still big enough for the model) or a document;
        their bytes come through getFile only when the core reads them."""
        if message.photo:
            big = [p for p in message.photo if max(p.width, p.height) >= IMAGE_MAX_SIDE]
            photo = min(big, key=lambda p: p.width * p.height) if big else message.photo[-1]
            return (IncomingFile("photo.jpg", "image/jpeg", photo.file_size, "a photo",
                                 lambda limit: self.download(photo.file_id, limit)),)
        if message.document:
            document = message.document
            image = (document.mime_type or "").startswith("image/")
            return (IncomingFile(document.file_name or "file", document.mime_type, document.file_size,
                                 "an image" if image else "a file",
                                 lambda limit: self.download(document.file_id, limit)),)
        return ()

    async def download(self, file_id: str, limit: int) -> bytes:
        """The file's first `limit` bytes, streamed (never downloaded whole)."""
        file = await self.bot.get_file(file_id)
        return await read_capped(file.file_path or "", limit)

    def strip_mention(self, text: str, username: str) -> str:
        return re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE).strip()

    def context(self, update: Update) -> CommandContext:
        """Who sent a command, and where. A button press always comes from the person pressing."""
        message = update.effective_message
        place = self.place(message)
        if update.callback_query is not None:
            user = update.callback_query.from_user
            return CommandContext(self.key(place), Identity(PLATFORM, str(user.id)), user.full_name,
                                  asker_of(update))
        return CommandContext(self.key(place), speaker_of(message), speaker_name_of(message), asker_of(update))

    # -- conversation ----------------------------------------------------------------------
    async def gatekeeper(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """[access] at this bot's door, through the core's gate for its own character: an update
        from someone not let in goes no further — nothing of theirs is stored. A DM gets one short
        line, a pressed button a notice; a group, silence. (A command naming another character is
        decided again by the gate for that character.)"""
        query, chat = update.callback_query, update.effective_chat
        if self.core.lets_in(self.character_name, asker_of(update)):
            if not await self.first_delivery(update, context.bot.id):
                log.info("Telegram update %d reached %s again; it was taken the first time", update.update_id,
                         self.character_name)
                raise ApplicationHandlerStop
            return
        if query is not None:
            await self.quietly(query.answer(NOT_ALLOWED, show_alert=True))
        elif update.message is not None and chat is not None and chat.type == ChatType.PRIVATE:
            await self.quietly(update.message.reply_text(NOT_ALLOWED))
        raise ApplicationHandlerStop

    async def first_delivery(self, update: Update, bot_id: int) -> bool:
        """Whether no process took this update before (Telegram delivers again whenever an
        acknowledgement is lost). A new chat message is answered once by being stored once (its
        message id, in its conversation), which also survives a crash before it was stored;
        anything else — a command, a button, an edit — is taken once by its update id."""
        message = update.message
        if message is not None and not (message.text or message.caption or "").startswith("/"):
            return True
        return await self.core.first_delivery(f"{PLATFORM}:{bot_id}:{update.update_id}")

    async def on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        bot = context.bot
        if message is None:
            return
        place = self.place(message)
        if not self.addressed(message, bot.id, bot.username):
            if place.shared and speaker_of(message) is not None:  # a person, to no character: a chain ends
                await self.core.heard(self.key(place))
            return
        incoming = IncomingMessage(
            conversation=self.key(place),
            speaker=speaker_of(message),
            speaker_name=speaker_name_of(message),
            text=self.strip_mention(message.text or message.caption or "", bot.username),
            platform_message_id=str(message.message_id),
            unseen=unseen_in(message),
            files=self.files_of(message),
            kept=self.kept_signal(update),
            asker=asker_of(update),
        )
        await self.answer(place, incoming)

    async def edit_message(self, chat_id: int, message_id: int, chunk: str, markup, html_mode: bool = True) -> None:
        """Edit a message's text (as HTML, else plain); "message is not modified" is no error."""
        async def attempt(as_html: bool) -> None:
            await with_flood_retry(lambda: self.bot.edit_message_text(
                to_html(chunk) if as_html else chunk, chat_id=chat_id, message_id=message_id,
                parse_mode=ParseMode.HTML if as_html else None, reply_markup=markup))

        try:
            await attempt(html_mode)
        except BadRequest as rejected:
            if "not modified" in rejected.message.lower():
                return
            if not html_mode:
                raise
            log.warning("Telegram rejected the formatted edit (%s); using plain text", rejected.message)
            try:
                await attempt(False)
            except BadRequest as again:
                if "not modified" not in again.message.lower():
                    raise

    async def on_edited(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.edited_message
        if message is None or not message.text:
            return
        text = self.strip_mention(message.text, context.bot.username)
        await self.core.edited(self.key(self.place(message)), str(message.message_id), text)

    # -- commands --------------------------------------------------------------------------
    async def on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        place = self.place(message)
        choice = " ".join(context.args or [])
        greeting = await self.core.greet(self.key(place), speaker_name_of(message), choice)
        await message.reply_text(greeting.text)
        if hint := self.core.other_greetings(self.key(place), choice):
            await message.reply_text(hint)

    async def on_help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        intro = (f"I'm {self.character_name}. Talk to me here; in a group, mention me or reply to me. "
                 "I remember what matters to you — see and change it with /memory:\n\n")
        await update.effective_message.reply_text(intro + self.core.help_text("telegram"))

    async def on_memory_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        ctx = self.context(update)
        text = update.effective_message.text or ""
        result = await self.core.command(ctx, text)
        await self.answer_privately(update, context, ctx, result)

    async def on_remember(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        ctx = self.context(update)
        original = update.effective_message.reply_to_message
        if original is None:
            result = CommandResult("Reply to the message you want me to remember with /remember.", ok=False)
        else:
            result = await self.core.remember(ctx, str(original.message_id))
        await self.answer_privately(update, context, ctx, result)

    async def answer_privately(self, update: Update, context: ContextTypes.DEFAULT_TYPE,
                               ctx: CommandContext, result: CommandResult) -> None:
        """Show a /memory answer to the person only: here in a DM; from a group, in their DM.
        (Nobody in particular has no DM, and its answer says only to write as oneself.)"""
        message = update.effective_message
        user = update.effective_user
        bot = context.bot
        if not ctx.conversation.is_shared or ctx.identity is None:
            await self.show_result(bot, self.place(message), result)
            return
        try:
            sent = await self.show_result(bot, Place(user.id, None, False), result)
        except Forbidden:
            note = OPEN_DM_FIRST.format(name=user.first_name)
            await with_flood_retry(lambda: message.reply_text(note))
            return
        await self.core.answered_in(  # its buttons act in the group
            PLATFORM, str(user.id), [str(m.message_id) for m in sent], ctx.conversation)

    async def show_result(self, bot, place: Place, result: CommandResult) -> list[Message]:
        chunks = split_message(result.text, LIMIT) if result.text.strip() else []
        sent = []
        for i, chunk in enumerate(chunks):
            markup = keyboard(result.buttons) if i == len(chunks) - 1 else None
            sent.append(await with_flood_retry(lambda: bot.send_message(
                place.chat_id, chunk, reply_markup=markup, message_thread_id=place.thread_id)))
        if result.attachment is not None:
            attachment = result.attachment
            sent.append(await with_flood_retry(lambda: bot.send_document(
                place.chat_id, attachment.data, filename=attachment.filename, caption=attachment.filename)))
        return sent

    # -- buttons ---------------------------------------------------------------------------
    async def on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A press is always acknowledged, even when its data is forged or something fails."""
        query = update.callback_query
        try:
            await self.press(update, context)
        except Exception:
            log.exception("Telegram: a button press failed")
            await self.quietly(query.answer(SOMETHING_WENT_WRONG, show_alert=True))

    async def press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if not isinstance(query.message, Message):  # too old for Telegram to send it along
            await query.answer(STALE_BUTTON, show_alert=True)
            return
        message = query.message
        ctx = self.context(update)  # who presses: always the person behind this callback
        origin = await self.core.asked_in(PLATFORM, str(message.chat_id), str(message.message_id), self.character_name)
        if origin is not None:  # an answer sent to the DM acts in the group it was asked in (judged there)
            ctx = CommandContext(origin, ctx.identity, ctx.display_name,
                                 Asker(PLATFORM, str(query.from_user.id), (origin.chat_id,)))
        result = await self.core.press(ctx, query.data or "")
        if result.regenerate is not None:
            await self.on_regenerate(update, result.regenerate)
            return
        if result.refused:
            await query.answer(result.text, show_alert=True)
            return
        await query.answer()
        if result.apart:  # the pressed message keeps its text; the answer is a message of its own
            await self.quietly(self.drop_buttons(self.place(message), str(message.message_id)))
            await self.show_result(context.bot, self.place(message), result)
            return
        chunks = split_message(result.text, LIMIT)
        markup = keyboard(result.buttons) if len(chunks) == 1 else None
        await self.edit_message(message.chat_id, message.message_id, chunks[0], markup, html_mode=False)
        if len(chunks) > 1 or result.attachment is not None:  # the rest, below the edited message
            rest = CommandResult("\n".join(chunks[1:]), result.buttons if len(chunks) > 1 else [], result.attachment)
            sent = await self.show_result(context.bot, Place(message.chat_id, None, False), rest)
            await self.core.answered_in(
                PLATFORM, str(message.chat_id), [str(m.message_id) for m in sent], ctx.conversation)

    async def on_regenerate(self, update: Update, turn: TurnRef) -> None:
        query = update.callback_query
        message = query.message
        place = self.place(message)

        async def acknowledge(refusal: str | None) -> None:
            await (query.answer(refusal, show_alert=True) if refusal else query.answer())

        presser = Identity(PLATFORM, str(query.from_user.id))
        failed = await self.regenerate(place, self.key(place), presser, turn, str(message.message_id), acknowledge)
        if failed:
            await self.send(place, failed, [], str(message.message_id))

    # -- errors and notifications ---------------------------------------------------------------
    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("Telegram update failed: %s", type(context.error).__name__, exc_info=context.error)
        if isinstance(update, Update) and update.effective_chat is not None:
            await self.quietly(context.bot.send_message(update.effective_chat.id, SOMETHING_WENT_WRONG))
