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
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import logging
import re
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from telegram import (
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ChatType, MessageLimit, ParseMode
from telegram.error import BadRequest, Forbidden, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from adapters.splitting import split_message
from adapters.streaming import ThrottledStream, typing
from bot.actions import decode_action
from bot.app import Runtime
from bot.command_base import CommandContext
from bot.commands import HELP
from bot.config import CharacterConfig
from bot.models import Button, CommandResult, ConversationKey, Identity, IncomingMessage, Reply
from storage.base import ConversationRow

log = logging.getLogger(__name__)
PLATFORM = "telegram"
LIMIT = MessageLimit.MAX_TEXT_LENGTH  # 4,096
POLL_TIMEOUT_S = 10
MAX_FLOOD_RETRIES = 3
ANSWER_ORIGINS_KEPT = 10_000
COMMANDS = [
    BotCommand("start", "Say hello"),
    BotCommand("memory", "What I remember about you: /memory view, add, pin, clear, …"),
    BotCommand("remember", "Reply to a message with this to keep it as a memory"),
    BotCommand("link", "Link your Telegram and Discord accounts"),
    BotCommand("forgetme", "Delete everything stored about you"),
    BotCommand("help", "How I work"),
]
OPEN_DM_FIRST = ("{name}, I answer /memory privately, but I can't write to you yet: open a chat with "
                 "me (tap my name, then Start) and send the command again.")


def to_html(chunk: str) -> str:
    """Escape everything; then render ``` fences as <pre>, `code` as <code>, **bold** as <b>."""
    out = []
    for i, part in enumerate(re.split(r"(```[^\n]*\n.*?```)", chunk, flags=re.DOTALL)):
        if i % 2:
            body = part.split("\n", 1)[1].removesuffix("```").rstrip("\n")
            out.append(f"<pre>{html.escape(body, quote=False)}</pre>")
            continue
        text = html.escape(part, quote=False)
        text = re.sub(r"`([^`\n]+)`", r"<code>\1</code>", text)
        text = re.sub(r"\*\*([^*\n]+)\*\*", r"<b>\1</b>", text)
        out.append(text)
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


@dataclass(frozen=True)
class Place:
    """Where a conversation lives on Telegram."""

    chat_id: int
    thread_id: int | None
    shared: bool


class TelegramAdapter:
    def __init__(self, runtime: Runtime, character: CharacterConfig, token: str, base_url: str):
        self.runtime = runtime
        self.character = runtime.turns.character(character.name).character
        self.token = token
        self.base_url = base_url
        self.application: Application | None = None
        # The latest reply's messages per chat/topic: its Regenerate button is removed when a
        # newer reply arrives, and a regenerate replaces all of them.
        self.latest_reply: dict[tuple[int, int | None], list[int]] = {}
        # A /memory answer sent to a DM from a group: its buttons act in the group's conversation.
        self.answer_origin: OrderedDict[tuple[int, int], CommandContext] = OrderedDict()

    # -- lifecycle -------------------------------------------------------------------------
    def build(self) -> Application:
        application = (
            Application.builder()
            .token(self.token)
            .base_url(self.base_url)
            .base_file_url(file_url(self.base_url))
            .concurrent_updates(True)
            .get_updates_read_timeout(POLL_TIMEOUT_S + 5)
            .build()
        )
        application.add_handler(CommandHandler("start", self.on_start))
        application.add_handler(CommandHandler("help", self.on_help))
        application.add_handler(CommandHandler(["memory", "link", "forgetme"], self.on_memory_command))
        application.add_handler(CommandHandler("remember", self.on_remember))
        application.add_handler(CallbackQueryHandler(self.on_button))
        application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE & filters.TEXT, self.on_edited))
        application.add_handler(MessageHandler(filters.UpdateType.MESSAGE & filters.TEXT & ~filters.COMMAND,
                                               self.on_message))
        application.add_error_handler(self.on_error)
        self.application = application
        return application

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set: the manual lifecycle, sharing the event loop."""
        application = self.application or self.build()
        with self.runtime.listening(self.notified):
            await self._serve(application, stop)

    async def _serve(self, application: Application, stop: asyncio.Event) -> None:
        async with application:
            await application.bot.set_my_commands(COMMANDS)
            await application.start()
            await application.updater.start_polling(timeout=POLL_TIMEOUT_S, allowed_updates=Update.ALL_TYPES)
            log.info("Telegram: %s is online as @%s", self.character.name, application.bot.username)
            await stop.wait()
            await application.updater.stop()
            await application.stop()

    # -- normalizing updates -------------------------------------------------------------------
    @staticmethod
    def place(message: Message) -> Place:
        thread = message.message_thread_id if message.is_topic_message else None
        return Place(message.chat_id, thread, message.chat.type != ChatType.PRIVATE)

    def key(self, place: Place) -> ConversationKey:
        thread = str(place.thread_id) if place.thread_id is not None else None
        return ConversationKey(PLATFORM, str(place.chat_id), thread, self.character.name)

    def addressed(self, message: Message, bot_id: int, username: str) -> bool:
        """DMs always; in groups a mention of the bot or a reply to it."""
        if message.chat.type == ChatType.PRIVATE:
            return True
        reply = message.reply_to_message
        if reply is not None and reply.from_user is not None and reply.from_user.id == bot_id:
            return True
        mentions = message.parse_entities(["mention"]).values()
        return any(m.lower() == f"@{username.lower()}" for m in mentions) or any(
            e.user is not None and e.user.id == bot_id for e in (message.entities or []) if e.type == "text_mention"
        )

    def strip_mention(self, text: str, username: str) -> str:
        return re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE).strip()

    def context(self, update: Update) -> CommandContext:
        message = update.effective_message
        place = self.place(message)
        user = update.effective_user
        return CommandContext(self.key(place), Identity(PLATFORM, str(user.id)), user.full_name, place.shared)

    # -- conversation ----------------------------------------------------------------------
    async def on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        bot = context.bot
        if message is None or message.from_user is None or not self.addressed(message, bot.id, bot.username):
            return
        place = self.place(message)
        incoming = IncomingMessage(
            conversation=self.key(place),
            speaker=Identity(PLATFORM, str(message.from_user.id)),
            speaker_name=message.from_user.full_name,
            text=self.strip_mention(message.text or "", bot.username),
            is_shared=place.shared,
            platform_message_id=str(message.message_id),
        )
        await self.answer(bot, place, message.message_id, incoming)

    async def answer(self, bot, place: Place, reply_to: int, incoming: IncomingMessage) -> None:
        live: list[Message] = []

        async def show(text: str) -> None:
            preview = text[:LIMIT]
            if not live:
                live.append(await with_flood_retry(lambda: bot.send_message(
                    place.chat_id, preview, message_thread_id=place.thread_id,
                    reply_parameters=ReplyParameters(reply_to, allow_sending_without_reply=True)
                    if place.shared else None)))
            else:
                await self.edit(bot, place.chat_id, live[0].message_id, preview, None, html_mode=False)

        stream = ThrottledStream(show)
        async with typing(lambda: bot.send_chat_action(place.chat_id, ChatAction.TYPING,
                                                       message_thread_id=place.thread_id)):
            reply = await self.runtime.turns.handle(incoming, on_text=stream)
        await self.deliver(bot, place, reply_to, reply, [m.message_id for m in live])

    async def deliver(self, bot, place: Place, reply_to: int | None, reply: Reply, existing: list[int]) -> None:
        """Send the final reply: split, formatted, the Regenerate button on its last message."""
        chunks = split_message(reply.text, LIMIT)
        ids: list[int] = []
        for i, chunk in enumerate(chunks):
            markup = keyboard(reply.buttons) if i == len(chunks) - 1 else None
            if i < len(existing):
                await self.edit(bot, place.chat_id, existing[i], chunk, markup)
                ids.append(existing[i])
            else:
                sent = await self.send(bot, place, chunk, markup, reply_to if place.shared and not ids else None)
                ids.append(sent.message_id)
        for extra in existing[len(chunks):]:
            await self.quietly(bot.delete_message(place.chat_id, extra))
        if reply.turn_id is None:
            return
        where = (place.chat_id, place.thread_id)
        previous = self.latest_reply.get(where)
        if previous and previous[-1] not in ids:
            await self.quietly(bot.edit_message_reply_markup(place.chat_id, previous[-1], reply_markup=None))
        self.latest_reply[where] = ids
        await self.runtime.turns.delivered(reply, [str(i) for i in ids])

    async def send(self, bot, place: Place, chunk: str, markup, reply_to: int | None) -> Message:
        reply_parameters = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None

        async def attempt(html_mode: bool) -> Message:
            return await with_flood_retry(lambda: bot.send_message(
                place.chat_id, to_html(chunk) if html_mode else chunk,
                parse_mode=ParseMode.HTML if html_mode else None, reply_markup=markup,
                message_thread_id=place.thread_id, reply_parameters=reply_parameters))

        try:
            return await attempt(html_mode=True)
        except BadRequest as rejected:
            log.warning("Telegram rejected the formatted reply (%s); sending plain text", rejected.message)
            return await attempt(html_mode=False)

    async def edit(self, bot, chat_id: int, message_id: int, chunk: str, markup, html_mode: bool = True) -> None:
        async def attempt(as_html: bool) -> None:
            await with_flood_retry(lambda: bot.edit_message_text(
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

    @staticmethod
    async def quietly(call: Awaitable[Any]) -> None:
        try:
            await call
        except TelegramError as failure:
            log.debug("ignored Telegram error: %s", failure)

    async def on_edited(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.edited_message
        if message is None or not message.text:
            return
        text = self.strip_mention(message.text, context.bot.username)
        await self.runtime.turns.message_edited(self.key(self.place(message)), str(message.message_id), text)

    # -- commands --------------------------------------------------------------------------
    async def on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        user = update.effective_user
        place = self.place(update.effective_message)
        greeting = await self.runtime.turns.greet(self.key(place), user.full_name if user else "there", place.shared)
        await update.effective_message.reply_text(greeting)

    async def on_help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        intro = (f"I'm {self.character.name}. Talk to me here; in a group, mention me or reply to me. "
                 "I remember what matters to you — see and change it with /memory:\n\n")
        await update.effective_message.reply_text(intro + HELP + "\n/remember — reply to a message with this to save it")

    async def on_memory_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        ctx = self.context(update)
        text = update.effective_message.text or ""
        result = await self.runtime.commands.run_text(ctx, text)
        await self.answer_privately(update, context, ctx, result)

    async def on_remember(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        ctx = self.context(update)
        original = update.effective_message.reply_to_message
        if original is None:
            result = CommandResult("Reply to the message you want me to remember with /remember.", ok=False)
        else:
            result = await self.runtime.commands.remember(ctx, str(original.message_id))
        await self.answer_privately(update, context, ctx, result)

    async def answer_privately(self, update: Update, context: ContextTypes.DEFAULT_TYPE,
                               ctx: CommandContext, result: CommandResult) -> None:
        """Show a /memory answer to the person only: here in a DM; from a group, in their DM."""
        message = update.effective_message
        user = update.effective_user
        bot = context.bot
        if not ctx.is_shared:
            await self.show_result(bot, Place(message.chat_id, None, False), result)
            return
        try:
            sent = await self.show_result(bot, Place(user.id, None, False), result)
        except Forbidden:
            note = OPEN_DM_FIRST.format(name=user.first_name)
            await with_flood_retry(lambda: message.reply_text(note))
            return
        self.remember_origin(user.id, sent, ctx)

    def remember_origin(self, chat_id: int, sent: list[Message], ctx: CommandContext) -> None:
        """Buttons on these DM messages act in `ctx`'s conversation; the oldest origins are
        forgotten past ANSWER_ORIGINS_KEPT (their buttons then act in the DM's conversation)."""
        for message in sent:
            self.answer_origin[(chat_id, message.message_id)] = ctx
        while len(self.answer_origin) > ANSWER_ORIGINS_KEPT:
            self.answer_origin.popitem(last=False)

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
        query = update.callback_query
        action = decode_action(query.data or "")
        if action is not None and action.verb == "regen":
            await self.regenerate(update, context, action.args[0] if action.args else "")
            return
        message = query.message
        ctx = self.context(update)  # who presses: always the person behind this callback
        origin = self.answer_origin.get((message.chat_id, message.message_id))
        if origin is not None:  # an answer sent to the DM acts in the group it was asked in
            ctx = CommandContext(origin.conversation, ctx.identity, ctx.display_name, origin.is_shared)
        result = await self.runtime.commands.press(ctx, query.data or "")
        if result.refused:
            await query.answer(result.text, show_alert=True)
            return
        await query.answer()
        chunks = split_message(result.text, LIMIT)
        markup = keyboard(result.buttons) if len(chunks) == 1 else None
        await self.edit(context.bot, message.chat_id, message.message_id, chunks[0], markup, html_mode=False)
        if len(chunks) > 1 or result.attachment is not None:  # the rest, below the edited message
            rest = CommandResult("\n".join(chunks[1:]), result.buttons if len(chunks) > 1 else [], result.attachment)
            sent = await self.show_result(context.bot, Place(message.chat_id, None, False), rest)
            self.remember_origin(message.chat_id, sent, ctx)

    async def regenerate(self, update: Update, context: ContextTypes.DEFAULT_TYPE, turn: str) -> None:
        query = update.callback_query
        message = query.message
        place = self.place(message)
        presser = Identity(PLATFORM, str(query.from_user.id))
        refusal = await self.runtime.turns.regenerate_refusal(self.key(place), presser, turn)
        if refusal:
            await query.answer(refusal, show_alert=True)
            return
        await query.answer()
        bot = context.bot
        existing = self.latest_reply.get((place.chat_id, place.thread_id)) or [message.message_id]
        # No live edits here: if the model fails, the old reply must still be there, intact.
        async with typing(lambda: bot.send_chat_action(place.chat_id, ChatAction.TYPING,
                                                       message_thread_id=place.thread_id)):
            reply = await self.runtime.turns.regenerate(self.key(place), presser, int(turn))
        if reply.is_error:
            await self.send(bot, place, reply.text, None, message.message_id)
            return
        await self.deliver(bot, place, None, reply, existing)

    # -- errors and notifications ---------------------------------------------------------------
    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("Telegram update failed: %s", type(context.error).__name__, exc_info=context.error)
        if isinstance(update, Update) and update.effective_chat is not None:
            await self.quietly(context.bot.send_message(
                update.effective_chat.id,
                "Sorry, something went wrong on my side handling that. Your message is kept; try again.",
            ))

    async def notified(self, conversation: ConversationRow, person_id: int | None, text: str) -> None:
        if conversation.platform != PLATFORM or self.application is None:
            return
        if conversation.character_id != self.runtime.turns.character(self.character.name).id:
            return
        thread = int(conversation.thread_id) if conversation.thread_id else None
        await self.quietly(self.application.bot.send_message(int(conversation.chat_id), text,
                                                             message_thread_id=thread))
