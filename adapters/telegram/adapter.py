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
- A button press is answered in time, however long its work takes (presses.py).
- `/memory …` answers are private: in a group they go to the person's DM, or the group gets a
  one-line note to open a DM first — never the memories themselves.
- A message sent on behalf of a chat (`sender_chat`: anonymous admins, "send as channel",
  channel posts) or by a bot is from nobody in particular (SPEC section 2): it may be answered,
  but no memories are read or written for it, and /memory tells it to write as the person.
- A voice message, audio file or video message is heard through [voice] (SPEC 16), and a
  spoken reply goes out with `sendVoice`.
- Photos sent together (an album) are answered once, as one message: gathered before any is
  kept where updates are fetched, kept item by item by a webhook (albums.py).
- A photo, sticker or file is never silently ignored. A photo (or an image sent as a file)
  reaches a vision model through getFile; a text file is read as text; for anything else, or
  without vision, the caption is answered and the character says it cannot see the rest.
- An edited message (its text or its caption) changes the stored one; an edited command is
  never run again.
- Updates arrive through a transport (transport.py: long polling, or the webhook server);
  every handler is shared. A token Telegram refuses (HTTP 401) stops this adapter with one
  clear error. Reading Telegram's objects and writing ours in its terms is in messages.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Awaitable

from telegram import BotCommand, ChatMember, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import BadRequest, Forbidden, InvalidToken, TelegramError
from telegram.ext import (Application, ApplicationHandlerStop, CallbackQueryHandler, ChatMemberHandler, CommandHandler,
                          ContextTypes, MessageHandler, TypeHandler, filters)

from adapters.base import CannotSend, ChatAdapter
from adapters.downloads import read_capped
from adapters.settings import TelegramSettings
from adapters.splitting import split_message
from adapters.streaming import typing
from adapters.telegram.albums import Albums, AlbumsInTheStore, Sent, in_sent_order
from adapters.telegram.messages import (
    LIMIT,
    PLATFORM,
    PRIVACY_MODE,
    Place,
    addressed,
    asker_of,
    edit_text,
    file_url,
    files_in,
    keyboard,
    media_sender,
    place_of,
    speaker_name_of,
    speaker_of,
    strip_mention,
    to_html,
    unseen_in,
    where_it_is,
    with_flood_retry,
)
from adapters.telegram.presses import in_time, say_it_failed
from adapters.telegram.transport import POLL_TIMEOUT_S, Polling, Transport, WebhookServer
from bot.contract import (
    NOT_ALLOWED,
    STALE_BUTTON,
    Asker,
    Button,
    CommandContext,
    CommandResult,
    ConversationKey,
    Core,
    Identity,
    IncomingMessage,
    Media,
    PlatformRefused,
    TurnRef,
)

log = logging.getLogger(__name__)

ANSWERED_HERE = ("start", "help", "remember", "image")  # commands of the table this adapter answers itself
OPEN_DM_FIRST = ("{name}, I answer /memory privately, but I can't write to you yet: open a chat with "
                 "me (tap my name, then Start) and send the command again.")
SOMETHING_WENT_WRONG = "Sorry, something went wrong on my side handling that. Try again."


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
        self.transport: Transport = (
            WebhookServer(settings, self.character_name, self._refusable) if settings.mode == "webhook"
            else Polling(self._refusable))
        self.album_book = AlbumsInTheStore(core.conversation, lambda message: self.key(place_of(message)),
                                           lambda: self.bot)
        self.albums = Albums(self.transport.kept_signal, book=None if self.transport.gathers_albums else self.album_book)

    # -- lifecycle -------------------------------------------------------------------------
    def build(self) -> Application:
        application = (
            Application.builder()
            .token(self.token)
            .base_url(self.base_url)
            .base_file_url(file_url(self.base_url))
            .concurrent_updates(True)
            .get_updates_read_timeout(POLL_TIMEOUT_S + 5)
            .updater(None)  # updates come through our own transport (transport.py)
            .build()
        )
        application.add_handler(TypeHandler(Update, self._gatekeeper), group=-1)  # before every handler
        # the bot's own membership, whoever changed it: no person's [access] is asked (SPEC 22)
        application.add_handler(ChatMemberHandler(self._on_membership, ChatMemberHandler.MY_CHAT_MEMBER), group=-2)
        new = filters.UpdateType.MESSAGE  # commands run from new messages only, never from edits
        application.add_handler(CommandHandler("start", self._on_start, filters=new))
        application.add_handler(CommandHandler("help", self._on_help, filters=new))
        routed = [spec.name for spec in self.core.commands.command_table()
                  if spec.offered_on(PLATFORM) and spec.name not in ANSWERED_HERE]
        application.add_handler(CommandHandler(routed, self._on_memory_command, filters=new))
        application.add_handler(CommandHandler("remember", self._on_remember, filters=new))
        application.add_handler(CommandHandler("image", self._on_message, filters=new))  # /image: a message, drawn
        application.add_handler(CallbackQueryHandler(self._on_button))
        application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE, self._on_edited))
        application.add_handler(MessageHandler(new & filters.TEXT & ~filters.COMMAND, self._on_message))
        application.add_handler(MessageHandler(new & filters.ATTACHMENT, self._on_message))
        application.add_error_handler(self._on_error)
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
                [BotCommand(spec.name, spec.description) for spec in self.core.commands.command_table()
                 if spec.offered_on(PLATFORM)])
            await application.start()
            log.info("Telegram: %s is online as @%s", self.character_name, application.bot.username)
            bot = application.bot  # getMe says: a bot in groups, in privacy mode, hears few of their messages
            if bot.can_join_groups and not bot.can_read_all_group_messages:
                log.warning(PRIVACY_MODE, bot.username, self.character_name, bot.username)
            try:
                async with self._recovering(self.keep_recovering):
                    await self.transport.run(application, stop)
            finally:
                await application.stop()
        finally:
            await application.shutdown()

    async def _refusable(self, call: Awaitable[Any]) -> Any:
        """A Bot API call where a refused token stops the adapter for good."""
        try:
            return await call
        except InvalidToken as refused:
            raise PlatformRefused(f"Telegram refused the bot token of {self.character_name} "
                                  f"({self.settings.token_env}): {refused}") from None


    # -- the platform's primitives for the shared reply flow (adapters/base.py) ---------------
    @property
    def bot(self):
        assert self.application is not None, "the adapter is not built"
        return self.application.bot

    def place_of(self, conversation: ConversationKey) -> Place:
        return Place.of(conversation)

    def refuses_person(self, failure: BaseException) -> bool:  # blocked, deactivated (403), or the chat is gone
        return isinstance(failure, Forbidden) or (isinstance(failure, BadRequest)
                                                  and "chat not found" in failure.message.lower())

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
        return Asker(PLATFORM, user_id, (conversation.chat_id,), age_restricted=self.settings.allow_nsfw)

    def typing(self, place: Place):
        return typing(lambda: self.bot.send_chat_action(place.chat_id, ChatAction.TYPING,
                                                        message_thread_id=place.thread_id))

    async def send(self, place: Place, text: str, buttons: list[list[Button]], reply_to: str | None,
                   formatted: bool = True) -> str:
        """As escaped HTML (retried as plain text if Telegram still rejects it), or plain."""
        reply_parameters = ReplyParameters(int(reply_to), allow_sending_without_reply=True) if reply_to else None

        async def attempt(html_mode: bool) -> Message:
            return await where_it_is(lambda chat_id: with_flood_retry(lambda: self.bot.send_message(
                chat_id, to_html(text) if html_mode else text,
                parse_mode=ParseMode.HTML if html_mode else None, reply_markup=keyboard(buttons),
                message_thread_id=place.thread_id, reply_parameters=reply_parameters)), place.chat_id)

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
        await edit_text(self.bot, place.chat_id, int(message_id), text, keyboard(buttons), formatted)

    async def delete(self, place: Place, message_id: str) -> None:
        await self.bot.delete_message(place.chat_id, int(message_id))

    async def send_media(self, place: Place, media: Media) -> str:
        if (sender := media_sender(self.bot, place, media)) is None:
            raise CannotSend(type(media).__name__)
        return str((await with_flood_retry(sender)).message_id)

    async def drop_buttons(self, place: Place, message_id: str) -> None:
        await self.bot.edit_message_reply_markup(place.chat_id, int(message_id), reply_markup=None)

    # -- normalizing updates -------------------------------------------------------------------
    def key(self, place: Place) -> ConversationKey:
        thread = str(place.thread_id) if place.thread_id is not None else None
        return ConversationKey(PLATFORM, str(place.chat_id), thread, self.character_name, place.shared)

    async def _download(self, file_id: str, limit: int) -> bytes:
        """The file's first `limit` bytes, streamed (never downloaded whole)."""
        file = await self.bot.get_file(file_id)
        return await read_capped(file.file_path or "", limit)

    def asker(self, update: Update) -> Asker:
        return asker_of(update, self.settings.allow_nsfw)

    def _context(self, update: Update) -> CommandContext:
        """Who sent a command, and where. A button press always comes from the person pressing."""
        message = update.effective_message
        place = place_of(message)
        if update.callback_query is not None:
            user = update.callback_query.from_user
            return CommandContext(self.key(place), Identity(PLATFORM, str(user.id)), user.full_name,
                                  self.asker(update))
        return CommandContext(self.key(place), speaker_of(message), speaker_name_of(message), self.asker(update))

    # -- conversation ----------------------------------------------------------------------
    async def _gatekeeper(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """[access] at this bot's door, through the core's gate for its own character: an update
        from someone not let in goes no further — nothing of theirs is stored. A DM gets one short
        line, a pressed button a notice; a group, silence. (A command naming another character is
        decided again by the gate for that character.)"""
        query, chat = update.callback_query, update.effective_chat
        if self.core.gatekeeping.lets_in(self.character_name, self.asker(update)):
            if not await self._first_delivery(update, context.bot.id):
                log.info("Telegram update %d reached %s again; it was taken the first time", update.update_id,
                         self.character_name)
                raise ApplicationHandlerStop
            return
        if query is not None:
            await self.quietly(query.answer(NOT_ALLOWED, show_alert=True))
        elif update.message is not None and chat is not None and chat.type == ChatType.PRIVATE:
            await self.quietly(update.message.reply_text(NOT_ALLOWED))
        raise ApplicationHandlerStop

    async def _on_membership(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The bot left a group, or was removed: its character leaves the group's scenes (SPEC 22)."""
        change = update.my_chat_member
        if change.new_chat_member.status in (ChatMember.LEFT, ChatMember.BANNED) and change.chat.type != ChatType.PRIVATE:
            await self.core.conversation.left_chat(PLATFORM, str(change.chat.id), self.character_name)

    async def _first_delivery(self, update: Update, bot_id: int) -> bool:
        """Whether no process took this update before (Telegram delivers again whenever an
        acknowledgement is lost). A new chat message is answered once by being stored once (its
        message id, in its conversation), which also survives a crash before it was stored;
        anything else — a command, a button, an edit — is taken once by its update id."""
        message = update.message
        if message is not None and not (message.text or message.caption or "").startswith("/"):
            return True
        return await self.core.coordination.first_delivery(f"{PLATFORM}:{bot_id}:{update.update_id}")

    async def _on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if update.message is None:
            return
        async with self.albums.gathered(update) as sent:
            if sent.joins is not None:  # a webhook's album item: stored with the album's first
                await self.core.conversation.edited(self._album(sent.messages, sent.joins, context.bot.username))
            elif sent.messages:
                await self._on_sent(sent, update, context)

    async def _on_sent(self, sent: Sent, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A message, or an album's items as one (albums.py), addressed if any item is."""
        bot = context.bot
        incoming = self._incoming(sent.messages, bot.username)
        place = self.place_of(incoming.conversation)
        if not any(addressed(m, bot.id, bot.username, self.character_name) for m in sent.messages):
            if place.shared and incoming.speaker is not None:  # a person, to no character: a chain ends
                await self.core.conversation.heard(incoming.conversation)
            return
        draw = " ".join(context.args) if context.args is not None else None  # /image <scene>: its one command
        rest = None
        if sent.rest is not None:  # a webhook's album: answered once its every item is stored with this one
            async def rest() -> IncomingMessage:
                items = await sent.rest()
                whole = self._album(items, incoming.platform_message_id, bot.username)
                if len(items) > 1:  # as it is stored now, whichever process each item reached last
                    await self.core.conversation.edited(whole)
                return whole
        await self.answer(place, replace(incoming, kept=sent.kept, rest=rest, asker=self.asker(update), draw=draw,
                                         album=self.album_book.items(sent.messages)))

    def _album(self, messages: list[Message], stored_as: str, username: str) -> IncomingMessage:
        """An album's items as one message, as it is stored: under its first item's id."""
        return replace(self._incoming(messages, username), platform_message_id=stored_as)

    def _incoming(self, messages: list[Message], username: str) -> IncomingMessage:
        """Telegram messages as one of ours, the same for one sent and one edited: their texts or
        captions in the order sent, every file, and the id of the one with the first caption (an
        album's first item without one), which a reply answers."""
        message = next((m for m in messages if m.text or m.caption), messages[0])
        return IncomingMessage(
            conversation=self.key(place_of(message)),
            speaker=speaker_of(message),
            speaker_name=speaker_name_of(message),
            text="\n".join(filter(None, (strip_mention(m.text or m.caption or "", username) for m in messages))),
            platform_message_id=str(message.message_id),
            unseen=tuple(filter(None, map(unseen_in, messages))),
            files=tuple(file for m in messages for file in files_in(m, self._download)),
        )

    async def _on_edited(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A text or a caption edited, with what came with the message; an album's item, with
        every other item of its album, which is stored as one message (albums.py)."""
        message = update.edited_message
        if message is None:
            return
        if not message.media_group_id:
            await self.core.conversation.edited(self._incoming([message], context.bot.username))
        elif (album := await self.album_book.edited(message)) is not None:  # None: no stored album holds it
            stored_as, items = album
            await self.core.conversation.edited(self._album(in_sent_order(items), stored_as, context.bot.username))

    # -- commands --------------------------------------------------------------------------
    async def _on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        place = place_of(message)
        choice = " ".join(context.args or [])
        greeting = await self.core.conversation.greet(self.key(place), speaker_name_of(message), choice,
                                                      speaker_of(message))
        # the card's *actions* in italics, as in replies (an error line is the bot's own words)
        await self.deliver(place, str(message.message_id) if place.shared else None, greeting)
        if hint := self.core.conversation.other_greetings(self.key(place), choice):
            await message.reply_text(hint)

    async def _on_help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        intro = (f"I'm {self.character_name}. Talk to me here; in a group, mention me or reply to me. "
                 "I remember what matters to you — see and change it with /memory:\n\n")
        await update.effective_message.reply_text(intro + self.core.commands.help_text("telegram"))

    async def _on_memory_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        ctx = self._context(update)
        text = update.effective_message.text or ""
        result = await self.core.commands.command(ctx, text)
        await self._answer_privately(update, context, ctx, result)

    async def _on_remember(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        ctx = self._context(update)
        original = update.effective_message.reply_to_message
        if original is None:
            result = CommandResult("Reply to the message you want me to remember with /remember.", ok=False)
        else:
            result = await self.core.commands.remember(ctx, str(original.message_id))
        await self._answer_privately(update, context, ctx, result)

    async def _answer_privately(self, update: Update, context: ContextTypes.DEFAULT_TYPE,
                               ctx: CommandContext, result: CommandResult) -> None:
        """Show a /memory answer to the person only: here in a DM; from a group, in their DM.
        (Nobody in particular has no DM, and its answer says only to write as oneself.)"""
        message = update.effective_message
        user = update.effective_user
        bot = context.bot
        if not ctx.conversation.is_shared or ctx.identity is None:
            await self._show_result(bot, place_of(message), result)
            return
        try:
            sent = await self._show_result(bot, Place(user.id, None, False), result)
        except Forbidden:
            note = OPEN_DM_FIRST.format(name=user.first_name)
            await with_flood_retry(lambda: message.reply_text(note))
            return
        await self.core.private_answers.answered_in(  # its buttons act in the group
            PLATFORM, str(user.id), [str(m.message_id) for m in sent], ctx.conversation)

    async def _show_result(self, bot, place: Place, result: CommandResult) -> list[Message]:
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
    async def _on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A press is always acknowledged, even when its data is forged or something fails."""
        query = update.callback_query
        try:
            await self._press(update, context)
        except Exception:
            log.exception("Telegram: a button press failed")
            await self.quietly(say_it_failed(query, SOMETHING_WENT_WRONG, self.failures))

    async def _press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if not isinstance(query.message, Message):  # too old for Telegram to send it along
            await query.answer(STALE_BUTTON, show_alert=True)
            return
        message = query.message
        ctx = self._context(update)  # who presses: always the person behind this callback
        origin = await self.core.private_answers.asked_in(PLATFORM, str(message.chat_id), str(message.message_id),
                                                          self.character_name)
        if origin is not None:  # an answer sent to the DM acts in the group it was asked in (judged there)
            ctx = CommandContext(origin, ctx.identity, ctx.display_name,
                                 Asker(PLATFORM, str(query.from_user.id), (origin.chat_id,),
                                       age_restricted=self.settings.allow_nsfw))
        result, answered = await in_time(self.core.commands.press(ctx, query.data or ""),
                                         lambda: self.quietly(query.answer()))
        if result.regenerate is not None:  # never slow: Regenerate's press only names the turn
            await self._on_regenerate(update, result.regenerate)
            return
        if not answered:  # a refusal as an alert (refused before any work: never slow)
            await query.answer(result.text if result.refused else None, show_alert=result.refused)
        if result.refused:
            return
        if result.apart:  # the pressed message keeps its text; the answer is a message of its own
            await self.quietly(self.drop_buttons(place_of(message), str(message.message_id)))
            await self._show_result(context.bot, place_of(message), result)
            return
        chunks = split_message(result.text, LIMIT)
        markup = keyboard(result.buttons) if len(chunks) == 1 else None
        await edit_text(self.bot, message.chat_id, message.message_id, chunks[0], markup, html_mode=False)
        if len(chunks) > 1 or result.attachment is not None:  # the rest, below the edited message
            rest = CommandResult("\n".join(chunks[1:]), result.buttons if len(chunks) > 1 else [], result.attachment)
            sent = await self._show_result(context.bot, Place(message.chat_id, None, False), rest)
            await self.core.private_answers.answered_in(
                PLATFORM, str(message.chat_id), [str(m.message_id) for m in sent], ctx.conversation)

    async def _on_regenerate(self, update: Update, turn: TurnRef) -> None:
        query = update.callback_query
        message = query.message
        place = place_of(message)

        async def acknowledge(refusal: str | None) -> None:
            await (query.answer(refusal, show_alert=True) if refusal else query.answer())

        presser = Identity(PLATFORM, str(query.from_user.id))
        failed = await self.regenerate(place, self.key(place), presser, self.asker(update), turn,
                                       str(message.message_id), acknowledge)
        if failed:
            await self.send(place, failed, [], str(message.message_id))

    # -- errors and notifications ---------------------------------------------------------------
    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("Telegram update failed: %s", type(context.error).__name__, exc_info=context.error)
        if isinstance(update, Update) and update.effective_chat is not None:
            await self.quietly(context.bot.send_message(update.effective_chat.id, SOMETHING_WENT_WRONG))

