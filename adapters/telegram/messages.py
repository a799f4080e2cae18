"""Telegram's objects read in our words, and ours written in Telegram's: who wrote, what a
message carries that the character cannot read, where it lives (`Place`), the Asker for the
gate; replies as HTML with a card's *actions* in italics, buttons as an inline keyboard, and Bot
API calls that wait out flood control."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import logging
import re
import warnings
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Message, Update
from telegram.constants import ChatType, MessageLimit, ParseMode
from telegram.error import BadRequest, ChatMigrated, RetryAfter

from bot.contract import (IMAGE_MAX_SIDE, Asker, Attachment, Button, ConversationKey, Identity, IncomingFile, Media,
                          Picture, VoiceNote, where_named)

log = logging.getLogger(__name__)

PLATFORM = "telegram"
LIMIT = MessageLimit.MAX_TEXT_LENGTH  # 4,096
MAX_FLOOD_RETRIES = 3
PRIVACY_MODE = ("Telegram: @%s is in privacy mode: in groups it hears only messages that mention it, reply to it "
                "or are commands, so a scene's \"%s, …\" never reaches it. To let it hear a group: BotFather → "
                "/setprivacy → @%s → Disable, then remove it from the group and add it again")
UNSEEN_KINDS = (  # what a message carries that the character cannot read, in the order checked
    ("sticker", "a sticker"), ("animation", "a GIF"), ("video", "a video"),
)
SPOKEN_KINDS = (  # what a person says aloud, heard through [voice] (SPEC 16): attribute, words, name, type
    ("voice", "a voice message", "voice.ogg", "audio/ogg"),
    ("audio", "an audio file", "audio.mp3", "audio/mpeg"),
    ("video_note", "a video message", "video_note.mp4", "video/mp4"),
)


def unseen_in(message: Message) -> str | None:
    """What the message carries besides text and files, in words ("a sticker"); None if nothing."""
    for attribute, words in UNSEEN_KINDS:
        if getattr(message, attribute, None):
            return words
    if message.effective_attachment and not (message.photo or message.document or spoken_in(message)):
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


def _seconds(read: Callable[[], Any]) -> float | None:
    """A PTB duration in seconds (an int in PTB 22, a timedelta from PTB 23 on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the int form warns that it will change
        value = read()
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def flood_wait(flood: RetryAfter) -> float:
    """RetryAfter's wait in seconds."""
    return _seconds(lambda: flood.retry_after) or 0.0


def files_in(message: Message, download: Callable[[str, int], Awaitable[bytes]]) -> tuple[IncomingFile, ...]:
    """A photo (its smallest size that is still big enough for the model) or a document, or
    what is spoken in it; their bytes come through `download` (file id, at most so many bytes)
    only when the core reads them."""
    if message.photo:
        big = [p for p in message.photo if max(p.width, p.height) >= IMAGE_MAX_SIDE]
        photo = min(big, key=lambda p: p.width * p.height) if big else message.photo[-1]
        return (IncomingFile("photo.jpg", "image/jpeg", photo.file_size, "a photo",
                             lambda limit: download(photo.file_id, limit)),)
    if message.document:
        document = message.document
        image = (document.mime_type or "").startswith("image/")
        return (IncomingFile(document.file_name or "file", document.mime_type, document.file_size,
                             "an image" if image else "a file", lambda limit: download(document.file_id, limit)),)
    if spoken := spoken_in(message):
        words, name, content_type, file, seconds = spoken
        return (IncomingFile(name, content_type, file.file_size, words,
                             lambda limit: download(file.file_id, limit), spoken=True, seconds=seconds),)
    return ()


def spoken_in(message: Message) -> tuple[str, str, str, Any, float | None] | None:
    """A voice note, audio file or video message: (words, file name, type, the PTB file, its
    length in seconds), or None."""
    for attribute, words, name, content_type in SPOKEN_KINDS:
        file = getattr(message, attribute, None)
        if file is not None:
            return (words, getattr(file, "file_name", None) or name, getattr(file, "mime_type", None) or content_type,
                    file, _seconds(lambda: file.duration))
    return None


async def edit_text(bot: Any, chat_id: int, message_id: int, chunk: str, markup: Any, html_mode: bool = True) -> None:
    """Edit a message's text (as HTML, else plain); "message is not modified" is no error."""
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


async def where_it_is(send: Callable[[int | str], Awaitable[Any]], chat_id: int | str) -> Any:
    """`send(chat_id)`; when Telegram says the group became a supergroup (400 with
    `migrate_to_chat_id`), once more to the supergroup (SPEC 19: a reminder follows it)."""
    try:
        return await send(chat_id)
    except ChatMigrated as moved:
        log.info("Telegram: chat %s became supergroup %s; sending there", chat_id, moved.new_chat_id)
        return await send(moved.new_chat_id)


def asker_of(update: Update, allow_nsfw: bool = False) -> Asker:
    """Who writes, runs a command or presses a button, and where, for the core's gate: the
    person (None for nobody in particular), the chat, and the chat a message is sent as (a
    channel posting into a group is judged by its own rules too). Telegram has no age-restricted
    chats: every chat counts as one only with `[telegram] allow_nsfw` (SPEC 17)."""
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
    return Asker(PLATFORM, user_id, places, age_restricted=allow_nsfw)


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


def media_sender(bot: Any, place: Place, media: Media) -> Callable[[], Awaitable[Message]] | None:
    """How a part goes to Telegram, in the place's topic: a picture by sendPhoto (SPEC 20), a voice
    note by sendVoice (SPEC 16), a file by sendDocument; None for a kind Telegram has no way for."""
    topic = place.thread_id
    if isinstance(media, Picture):
        return lambda: bot.send_photo(place.chat_id, media.data, filename=media.filename, message_thread_id=topic)
    if isinstance(media, VoiceNote):
        return lambda: bot.send_voice(place.chat_id, media.audio, duration=max(1, round(media.seconds)),
                                      filename="reply.ogg", message_thread_id=topic)
    if isinstance(media, Attachment):
        return lambda: bot.send_document(place.chat_id, media.data, filename=media.filename, message_thread_id=topic)
    return None


def place_of(message: Message) -> Place:
    """Where a message lives: its chat, and its forum topic if it is in one."""
    thread = message.message_thread_id if message.is_topic_message else None
    return Place(message.chat_id, thread, message.chat.type != ChatType.PRIVATE)


def addressed(message: Message, bot_id: int, username: str, character_name: str) -> bool:
    """DMs always; in groups a mention of the bot (in the text or a caption), a reply to it, or
    the character's name (SPEC 15; a bot reads a group's other messages only with its privacy
    mode off)."""
    if message.chat.type == ChatType.PRIVATE:
        return True
    if where_named(message.text or message.caption or "", character_name) is not None:
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


def strip_mention(text: str, username: str) -> str:
    return re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE).strip()
