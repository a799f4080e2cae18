"""Discord's objects read in our words, and ours written in Discord's: where a channel's
conversation lives, who asks (for the gate), what a message brings (files, a sticker), and
buttons as a view."""

from __future__ import annotations

import base64
import io
from functools import partial
from typing import Any

import discord

from adapters.downloads import read_capped
from bot.contract import Asker, Attachment, Button, IncomingFile, Media, Picture, VoiceNote

PLATFORM = "discord"
LIMIT = 2_000
Messageable = discord.abc.Messageable  # where a conversation lives: a channel, a thread, a DM


def unseen_in(message: discord.Message) -> tuple[str, ...]:
    """What the message carries besides text and attachments, each in words ("a sticker")."""
    return ("a sticker",) * len(message.stickers)


def needed_permissions(hosted: bool) -> discord.Permissions:
    """What the bot needs in a server (the README lists them): see channels and their history,
    send messages (in threads too), attach files (an export, a voice note as a file) and send
    voice messages; a host bot also manages webhooks, its characters' voices (SPEC 15)."""
    return discord.Permissions(view_channel=True, read_message_history=True, send_messages=True,
                               send_messages_in_threads=True, attach_files=True, send_voice_messages=True,
                               manage_webhooks=hosted)


def invite_url(application_id: int, hosted: bool) -> str:
    return discord.utils.oauth_url(application_id, permissions=needed_permissions(hosted),
                                   scopes=("bot", "applications.commands"))


def file_of(attachment: discord.Attachment) -> IncomingFile:
    """An attachment; its bytes are fetched only when the core reads them. A voice message (an
    audio/ogg attachment with its length and waveform) or another audio file is heard through
    [voice] (SPEC 16)."""
    content_type = (attachment.content_type or "").split(";")[0].strip().lower()
    fetch = partial(read_capped, attachment.url)
    if attachment.is_voice_message() or content_type.startswith("audio/"):
        what = "a voice message" if attachment.is_voice_message() else "an audio file"
        return IncomingFile(attachment.filename, attachment.content_type, attachment.size, what, fetch,
                            spoken=True, seconds=attachment.duration)
    what = "an image" if content_type.startswith("image/") else "a file"
    return IncomingFile(attachment.filename, attachment.content_type, attachment.size, what, fetch)


def files_of(message: discord.Message) -> tuple[IncomingFile, ...]:
    return tuple(file_of(attachment) for attachment in message.attachments)


class VoiceFile(discord.File):
    """A voice note as a Discord voice message's attachment: with its length and waveform
    (base64), which discord.py's File does not send."""

    def __init__(self, note: VoiceNote):
        super().__init__(io.BytesIO(note.audio), filename="voice-message.ogg")
        self.note = note

    def to_dict(self, index: int) -> dict[str, Any]:
        return super().to_dict(index) | {"duration_secs": round(self.note.seconds, 2),
                                         "waveform": base64.b64encode(self.note.waveform).decode()}


def attachment_of(media: Media) -> discord.File | None:
    """A picture or a file as an attachment (None for other kinds of media)."""
    if isinstance(media, Picture):
        return discord.File(io.BytesIO(media.data), media.filename)
    if isinstance(media, Attachment):
        return discord.File(io.BytesIO(media.data), media.filename)
    return None


def audio_file(note: VoiceNote) -> discord.File:
    """A voice note as a plain audio attachment (where a voice message is refused)."""
    return discord.File(io.BytesIO(note.audio), filename="reply.ogg")


def view_of(rows: list[list[Button]]) -> discord.ui.View | None:
    """Buttons as a view. It is stopped at once: clicks come through on_interaction instead of
    discord.py's view store, which would otherwise keep every view in memory forever."""
    if not rows:
        return None
    view = discord.ui.View(timeout=None)
    for r, row in enumerate(rows[:5]):
        for button in row[:5]:
            style = discord.ButtonStyle.danger if button.danger else discord.ButtonStyle.secondary
            view.add_item(discord.ui.Button(label=button.label[:80], custom_id=button.action[:100],
                                            style=style, row=r))
    view.stop()
    return view


def place_of(channel) -> tuple[str, str | None, bool]:
    """(chat id, thread id, shared) of a Discord channel: shared unless it is a DM. A channel
    discord.py has not cached (a partial one, from a raw event) is in a server when its event
    named a guild."""
    if isinstance(channel, discord.Thread):
        return str(channel.parent_id), str(channel.id), True
    if isinstance(channel, discord.DMChannel):
        return str(channel.id), None, False
    if isinstance(channel, discord.GroupChannel):
        return str(channel.id), None, True
    in_guild = getattr(channel, "guild", None) is not None or getattr(channel, "guild_id", None) is not None
    return str(channel.id), None, in_guild


def asker_of(user: discord.abc.User, channel, nsfw_in_dms: bool = False) -> Asker:
    """Who writes and where, for the gate: the user, their roles in the guild, the channel (and a
    thread's parent channel), and whether it is an age-restricted place (SPEC 17): a server
    channel marked so, or a thread of one; a DM with `[discord] nsfw_in_dms`."""
    places: tuple[str, ...] = ()
    age_restricted = False
    if channel is not None:  # an interaction may come without its channel
        chat_id, thread_id, shared = place_of(channel)
        places = (chat_id,) if thread_id is None else (thread_id, chat_id)
        marked = getattr(channel, "is_nsfw", None)  # a thread answers for its parent channel
        age_restricted = bool(marked()) if shared and callable(marked) else not shared and nsfw_in_dms
    roles = tuple(str(role.id) for role in getattr(user, "roles", ()))  # a Member's; a DM has none
    private = channel is not None and not place_of(channel)[2]
    return Asker(PLATFORM, str(user.id), places, roles, age_restricted, private)
