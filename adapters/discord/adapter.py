"""Discord adapter on discord.py 2.x (SPEC section 7).

One `discord.Client` per character with a Discord token (an `AutoShardedClient` running the shards
of `[discord] shard_count` / `shard_ids` when they are set); intents for guild messages, DMs and
message content; `allowed_mentions` none on the client, so no reply, edit or follow-up can ping
@everyone, @here, a role or a person.

- DMs are always answered; in servers when the bot is mentioned or replied to, or every message
  in the channels listed in `discord_always_on_channels`. Threads are conversations of their
  own and inherit their parent channel's always-on setting.
- Replies stream by editing one message about once a second, with the typing indicator while
  waiting; the final text is split at 2,000 characters with ``` fences balanced per chunk. The
  latest reply carries a Regenerate button (only the person it answered can press it; the
  button is removed from older replies).
- `/memory` is one app-command group; every answer is ephemeral and deferred first. "Remember
  this" is a message context-menu command. `/link` and `/forgetme` are top-level commands.
- Button clicks (their custom_id is the core's action) and modals are routed through
  `on_interaction`, so buttons keep working after a restart.
- Messages by bots and webhooks are not from a person (SPEC section 2); they are not answered,
  so two bots can never talk to each other in a loop, and nothing is stored for them.
- A voice message or audio attachment is heard through [voice] (SPEC 16); a spoken reply goes
  out as a real voice message (an audio file where Discord refuses one).
- An image, sticker or file is never silently ignored: an image attachment reaches a vision
  model, a text file is read as text; for anything else, or without vision, the text with it is
  answered and the character says it cannot see the rest.
- [access]: someone not let in gets one line in a DM (privately, for a command) and silence in
  a server channel; nothing of theirs is stored.
- A token Discord refuses (HTTP 401 at login) stops this adapter with one clear error.
- A host bot (`[discord] host_token_env`, SPEC 15) voices every character without a bot of its
  own, each through a channel webhook under its name and picture (webhooks.py):
  a message naming a character, or replying to its message, is that character's; a mention of
  the host bot, or an always-on channel, leaves the choice to the scene. Its own account speaks
  in DMs (as the first character it voices) and takes the slash commands and buttons of all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import replace

import discord

from adapters.base import CannotSend, ChatAdapter
from adapters.discord.commands import SOMETHING_WENT_WRONG, Interactions
from adapters.discord.messages import (
    LIMIT,
    PLATFORM,
    Messageable,
    VoiceFile,
    asker_of,
    attachment_of,
    audio_file,
    files_of,
    invite_url,
    place_of,
    unseen_in,
    view_of,
)
from adapters.discord.webhooks import Webhooks, WebhookVoice
from adapters.settings import DiscordSettings
from bot.contract import (
    NOT_ALLOWED,
    Asker,
    Button,
    ConversationKey,
    Core,
    Identity,
    IncomingMessage,
    Media,
    PlatformRefused,
    VoiceNote,
    where_named,
)

log = logging.getLogger(__name__)
# Characters never speak in voice channels: no warning that voice's libraries (PyNaCl, davey) are missing.
discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
CANNOT_SPEAK = "{character} can't speak in this channel: the bot needs the Manage Webhooks permission here."


class DiscordAdapter(ChatAdapter[Messageable]):
    platform = PLATFORM
    limit = LIMIT
    failures = (discord.HTTPException,)
    shows_waveforms = True

    def __init__(self, core: Core, characters: str | tuple[str, ...], settings: DiscordSettings):
        names = (characters,) if isinstance(characters, str) else characters
        super().__init__(core, names[0])
        self.settings = settings
        self.token = settings.token
        self.always_on = {str(c) for c in settings.always_on_channels}
        self._cannot_speak: set[int] = set()  # channels where a WARNING said a character cannot speak
        intents = discord.Intents.default()
        intents.message_content = True
        intents.guild_messages = True
        intents.dm_messages = True
        shards = settings
        if shards.shard_count is None:  # one process runs every shard discord.py decides on
            self.client = discord.Client(intents=intents, allowed_mentions=discord.AllowedMentions.none())
        else:  # this process runs its own shards ([discord] shard_count, shard_ids)
            self.client = discord.AutoShardedClient(
                intents=intents, allowed_mentions=discord.AllowedMentions.none(), shard_count=shards.shard_count,
                shard_ids=list(shards.shard_ids) if shards.shard_ids is not None else None)
        # who speaks: this bot's own character, or (a host bot) every character it voices by webhook
        self.webhooks = Webhooks(self.client, core.presence.portrait)
        self.speakers: dict[str, ChatAdapter] = (
            {name.casefold(): WebhookVoice(self, core.conversation.character_name(name)) for name in names}
            if settings.hosted else {self.character_name.casefold(): self})
        self.commands = Interactions(self)
        self.client.setup_hook = self.commands.sync
        for event, handler in (("on_ready", self._on_ready), ("on_message", self._on_message),
                               ("on_raw_message_edit", self._on_raw_message_edit),
                               ("on_raw_message_delete", self._on_raw_message_delete),
                               ("on_raw_bulk_message_delete", self._on_raw_bulk_message_delete),
                               ("on_interaction", self.commands.on_interaction)):
            setattr(self.client, event, handler)  # what client.event does, named by the event

    # -- lifecycle -------------------------------------------------------------------------
    async def _on_ready(self) -> None:
        log.info("Discord: %s is online as %s; invite it to a server with exactly the permissions it needs: %s",
                 self.character_name, self.client.user,
                 invite_url(self.client.application_id or self.client.user.id, self.settings.hosted))

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set, sharing the event loop with the other adapters."""
        with contextlib.ExitStack() as present:
            for speaker in self.speakers.values():
                present.enter_context(speaker.present())
            await self._serve(stop)

    async def _serve(self, stop: asyncio.Event) -> None:
        async with self.client:
            try:
                await self.client.login(self.token)
            except discord.LoginFailure as refused:
                raise PlatformRefused(f"Discord refused the bot token of {self.character_name} "
                                      f"({self.settings.token_env}): {refused}") from None
            connection = asyncio.create_task(self.client.connect(reconnect=True))
            stopping = asyncio.create_task(stop.wait())
            async with self._recovering(self._recover_when_ready):
                done, _ = await asyncio.wait({connection, stopping}, return_when=asyncio.FIRST_COMPLETED)
            await self.client.close()
            stopping.cancel()
            if connection in done:
                try:
                    connection.result()  # a failed connection is raised to the supervisor
                except discord.ConnectionClosed as closed:
                    if closed.code == 4004:  # "Authentication failed": the token was revoked
                        raise PlatformRefused(f"Discord refused the bot token of {self.character_name} "
                                              f"({self.settings.token_env}, gateway close 4004)") from None
                    raise
            else:
                await asyncio.gather(connection, return_exceptions=True)

    async def _recover_when_ready(self, stop: asyncio.Event) -> None:
        """Recover once discord.py is ready (2 s after the last server arrived), unless it stops first."""
        ready, stopping = asyncio.ensure_future(self.client.wait_until_ready()), asyncio.ensure_future(stop.wait())
        await asyncio.wait({ready, stopping}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        stopping.cancel()
        if not stop.is_set():
            await asyncio.gather(*(speaker.keep_recovering(stop) for speaker in self.speakers.values()))

    # -- the platform's primitives for the shared reply flow (adapters/base.py) ---------------
    def place_of(self, conversation: ConversationKey) -> Messageable:
        return self.client.get_partial_messageable(int(conversation.thread_id or conversation.chat_id))

    def _small(self, line: str) -> str:
        return f"-# {line}"  # Discord's subtext

    def typing(self, place: Messageable):
        return place.typing()

    def refuses_person(self, failure: BaseException) -> bool:
        # 50007: "Cannot send messages to this user" (they left every shared server, or closed DMs)
        return isinstance(failure, discord.Forbidden)

    def permissions_in(self, conversation: ConversationKey) -> discord.Permissions | None:
        """The bot's permissions in a server channel (a thread: its parent's); None where
        discord.py has not cached the channel (then it is tried, and a refusal is heard)."""
        channel = self.client.get_channel(int(conversation.chat_id))
        if channel is None or getattr(channel, "guild", None) is None:
            return None
        return channel.permissions_for(channel.guild.me)

    async def can_speak(self, conversation: ConversationKey) -> bool:
        permissions = self.permissions_in(conversation) if conversation.is_shared else None
        if permissions is None:
            return True
        return permissions.send_messages_in_threads if conversation.thread_id else permissions.send_messages

    async def asker_for(self, conversation: ConversationKey, user_id: str) -> Asker | None:
        """Who this person is in their DM, as a message of theirs would say (roles looked up)."""
        try:
            user = self.client.get_user(int(user_id)) or await self.client.fetch_user(int(user_id))
        except discord.HTTPException:
            return None  # not found, or Discord is unreachable: no check-in now
        return await self.asker(user, self.client.get_channel(int(conversation.chat_id)))

    async def send(self, place: Messageable, text: str, buttons: list[list[Button]], reply_to: str | None,
                   formatted: bool = True) -> str:
        view = view_of(buttons)
        if reply_to is not None:
            sent = await place.get_partial_message(int(reply_to)).reply(text, view=view, mention_author=False)
        else:
            sent = await place.send(text, view=view) if view is not None else await place.send(text)
        return str(sent.id)

    async def edit(self, place: Messageable, message_id: str, text: str, buttons: list[list[Button]],
                   formatted: bool = True) -> None:
        await place.get_partial_message(int(message_id)).edit(content=text, view=view_of(buttons))

    async def send_media(self, place: Messageable, media: Media) -> str:
        """A picture or a file as an attachment; a voice note as a real voice message (the
        voice-message flag, with its length and waveform), sent through discord.py's own request
        building; where Discord refuses that, an audio file."""
        if (file := attachment_of(media)) is not None:
            return str((await place.send(file=file)).id)
        if not isinstance(media, VoiceNote):
            raise CannotSend(type(media).__name__)
        note = media
        try:
            with discord.http.handle_message_parameters(file=VoiceFile(note),
                                                        flags=discord.MessageFlags(voice=True)) as params:
                sent = await self.client.http.send_message(place.id, params=params)
            return str(sent["id"])
        except discord.HTTPException as refused:
            if refused.status >= 500:
                raise
            log.info("Discord refused a voice message in %s (%s); sending it as an audio file", place.id, refused)
            return str((await place.send(file=audio_file(note))).id)

    async def delete(self, place: Messageable, message_id: str) -> None:
        await place.get_partial_message(int(message_id)).delete()

    async def drop_buttons(self, place: Messageable, message_id: str) -> None:
        await place.get_partial_message(int(message_id)).edit(view=None)

    # -- normalizing -----------------------------------------------------------------------
    def key(self, channel) -> ConversationKey:
        chat_id, thread_id, shared = place_of(channel)
        return ConversationKey(PLATFORM, chat_id, thread_id, self.character_name, shared)

    def _always_on_here(self, message: discord.Message) -> bool:
        chat_id, _, _ = place_of(message.channel)
        return message.guild is not None and (chat_id in self.always_on or str(message.channel.id) in self.always_on)

    def _addressed(self, message: discord.Message) -> tuple[ChatAdapter, bool] | None:
        """Who answers, and whether the message was addressed to them: a DM, a mention of the
        bot, a reply to it, or the character's name (SPEC 15); in an always-on channel, a message
        addressed to no one (the scene chooses who answers). None: not for us (nor is a message
        that mentions another bot, such as another character's)."""
        me = self.client.user
        own = self.speakers[self.character_name.casefold()]
        if message.guild is None:
            return own, True
        reference = message.reference
        resolved = reference.resolved if reference else None
        if isinstance(resolved, discord.Message):
            if resolved.webhook_id is not None and resolved.author.name.casefold() in self.speakers:
                return self.speakers[resolved.author.name.casefold()], True  # a reply to a character's webhook message
            if resolved.author.id == me.id:
                return own, True
        named = [(at, speaker) for speaker in self.speakers.values()
                 if (at := where_named(message.content, speaker.character_name)) is not None]
        if named:
            return min(named, key=lambda found: found[0])[1], True  # the one named first
        if me in message.mentions:
            return own, not self.settings.hosted  # the host bot is everyone's: the scene chooses
        if any(user.bot for user in message.mentions):
            return None  # addressed to another bot: a character on its own bot account answers it itself
        return (own, False) if self._always_on_here(message) else None

    def _text_of(self, message: discord.Message) -> str:
        me = self.client.user.id
        return re.sub(rf"<@!?{me}>", "", message.content).strip()

    def _incoming(self, message: discord.Message, key: ConversationKey) -> IncomingMessage:
        """A Discord message as one of ours in `key`'s conversation, the same for one sent and one
        edited: its author, its text without the bot's mention, what came with it."""
        return IncomingMessage(key, Identity(PLATFORM, str(message.author.id)), message.author.display_name,
                               self._text_of(message), str(message.id), unseen=unseen_in(message),
                               files=files_of(message))

    # -- conversation ----------------------------------------------------------------------
    async def _on_message(self, message: discord.Message) -> None:
        if message.author.bot or message.webhook_id is not None:
            return
        answering = self._addressed(message)
        if answering is None:
            if message.guild is not None:  # a person wrote, to no character: a scene's chain ends
                await self.core.conversation.heard(self.key(message.channel))
            return
        speaker, addressed = answering
        asker = await self.asker(message.author, message.channel)
        # the gate, for who answers
        if asker is None or not self.core.gatekeeping.lets_in(speaker.character_name, asker):
            if message.guild is None:  # a DM gets one line; a server channel, silence
                await self.quietly(message.channel.send(NOT_ALLOWED))
            return
        key = replace(self.key(message.channel), character=speaker.character_name)
        if not await speaker.can_speak(key):  # no model is called for a reply that cannot be posted
            await self._cannot_speak_here(message, speaker.character_name)
            return
        incoming = replace(self._incoming(message, key), addressed=addressed, asker=asker)
        try:
            await speaker.answer(message.channel if speaker is self else speaker.place_of(key), incoming)
        except Exception:
            log.exception("Discord: answering message %s failed", message.id)
            await self.quietly(message.channel.send(SOMETHING_WENT_WRONG))

    async def _cannot_speak_here(self, message: discord.Message, character: str) -> None:
        """A host bot without Manage Webhooks in the channel (SPEC 15 "Webhook trouble is named"):
        one line to the person, from the host's own account, and one WARNING a channel."""
        if not self.settings.hosted:
            return  # a bot of its own that may not post here: nothing can be said
        channel = message.channel
        if channel.id not in self._cannot_speak:
            self._cannot_speak.add(channel.id)
            log.warning("Discord: %s cannot speak in #%s (%s): the host bot needs the Manage Webhooks permission "
                        "there", character, getattr(channel, "name", channel.id), channel.id)
        await self.quietly(message.reply(CANNOT_SPEAK.format(character=character), mention_author=False))

    async def _on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """A person's edit, with what came with the message; not Discord's own updates of it (a
        link's preview), which leave `edited_at` unset."""
        message = payload.message
        if message.author.bot or message.webhook_id is not None or message.edited_at is None:
            return
        key = self.key(self._channel(payload.channel_id, payload.guild_id))
        await self.core.conversation.edited(self._incoming(message, key))

    async def _on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        key = self.key(self._channel(payload.channel_id, payload.guild_id))
        await self.core.conversation.deleted(key, str(payload.message_id))

    async def _on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        """Messages a moderator deleted at once (a purge, or a ban that deletes the banned one's
        recent messages): each goes from the store, as one deleted alone does."""
        key = self.key(self._channel(payload.channel_id, payload.guild_id))
        for message_id in sorted(payload.message_ids):
            await self.core.conversation.deleted(key, str(message_id))

    def _channel(self, channel_id: int, guild_id: int | None):
        """The cached channel (threads included), or a partial one: uncached and guildless is a DM."""
        return self.client.get_channel(channel_id) or self.client.get_partial_messageable(
            channel_id, guild_id=guild_id)

    async def asker(self, user: discord.abc.User, channel) -> Asker | None:
        """Who writes, runs a command or presses a button, for the core's gate. A DM's author
        carries no roles: when a rule names a role, their roles in every server the bot shares
        with them are asked of Discord; if that fails, None: not let in (a deny must not be
        skipped)."""
        asker = asker_of(user, channel, self.settings.nsfw_in_dms)
        if not isinstance(user, discord.Member) and self.core.gatekeeping.rules_name_roles():
            try:
                asker = replace(asker, roles=await self._roles_everywhere(user))
            except discord.HTTPException as failure:
                log.warning("Discord: the roles of %s could not be looked up (%s); not let in for now",
                            user.id, failure)
                return None
        return asker

    async def _roles_everywhere(self, user: discord.abc.User) -> tuple[str, ...]:
        """The user's roles in every server the bot shares with them."""
        roles: list[str] = []
        for guild in self.client.guilds:
            member = guild.get_member(user.id)
            if member is None:
                try:
                    member = await guild.fetch_member(user.id)
                except discord.NotFound:
                    continue  # not in this server
            roles.extend(str(role.id) for role in member.roles)
        return tuple(roles)
