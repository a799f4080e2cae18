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
- An image, sticker or file is never silently ignored: an image attachment reaches a vision
  model, a text file is read as text; for anything else, or without vision, the text with it is
  answered and the character says it cannot see the rest.
- [access]: someone not let in gets one line in a DM (privately, for a command) and silence in
  a server channel; nothing of theirs is stored.
- A token Discord refuses (HTTP 401 at login) stops this adapter with one clear error.
- A host bot (`[discord] host_token_env`, SPEC 15) voices every character without a bot of its
  own, each through a channel webhook under its name and picture (adapters/discord_webhooks.py):
  a message naming a character, or replying to its message, is that character's; a mention of
  the host bot, or an always-on channel, leaves the choice to the scene. Its own account speaks
  in DMs (as the first character it voices) and takes the slash commands and buttons of all.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import io
import json
import logging
import re
from dataclasses import replace
from functools import partial
from typing import Literal, Optional

import discord
from discord import app_commands

from adapters.base import ChatAdapter
from adapters.discord_webhooks import Webhooks, WebhookVoice
from adapters.downloads import read_capped
from adapters.settings import DiscordSettings
from adapters.splitting import split_message
from bot.contract import (
    NOT_ALLOWED,
    Asker,
    Button,
    CommandContext,
    CommandResult,
    CommandSpec,
    ConversationKey,
    Core,
    Form,
    Identity,
    IncomingFile,
    IncomingMessage,
    OptionSpec,
    PlatformRefused,
    TurnRef,
    where_named,
)

log = logging.getLogger(__name__)
# Characters never speak in voice channels: no warning that voice's libraries (PyNaCl, davey) are missing.
discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
PLATFORM = "discord"
LIMIT = 2_000
SOMETHING_WENT_WRONG = "Sorry, something went wrong on my side. Try again."
CANNOT_SPEAK = "{character} can't speak in this channel: the bot needs the Manage Webhooks permission here."
Messageable = discord.abc.Messageable  # where a conversation lives: a channel, a thread, a DM


def slash_option_type(option: OptionSpec) -> object:
    """The annotation discord.py turns into the option's type: choices, a number range, yes/no."""
    if option.choices:
        return Literal[option.choices]
    if option.kind == "number":
        return app_commands.Range[int, option.low, option.high]
    return bool if option.kind == "yes_no" else str


def unseen_in(message: discord.Message) -> str | None:
    """What the message carries besides text and attachments, in words; None if nothing."""
    return "a sticker" if message.stickers else None


def files_of(message: discord.Message) -> tuple[IncomingFile, ...]:
    """The message's attachments; their bytes are fetched only when the core reads them."""
    return tuple(
        IncomingFile(a.filename, a.content_type, a.size,
                     "an image" if (a.content_type or "").startswith("image/") else "a file",
                     partial(read_capped, a.url))
        for a in message.attachments
    )


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


def asker_of(user: discord.abc.User, channel) -> Asker:
    """Who writes and where, for [access]: the user, their roles in the guild, the channel (and a
    thread's parent channel)."""
    places: tuple[str, ...] = ()
    if channel is not None:  # an interaction may come without its channel
        chat_id, thread_id, _ = place_of(channel)
        places = (chat_id,) if thread_id is None else (thread_id, chat_id)
    roles = tuple(str(role.id) for role in getattr(user, "roles", ()))  # a Member's; a DM has none
    return Asker(PLATFORM, str(user.id), places, roles)


class SummaryModal(discord.ui.Modal):
    def __init__(self, adapter: "DiscordAdapter", form: Form):
        super().__init__(title=form.title[:45], timeout=600)
        self.adapter, self.form = adapter, form
        self.text = discord.ui.TextInput(label=form.label[:45], style=discord.TextStyle.paragraph,
                                         default=form.prefill[:form.max_length], max_length=form.max_length)
        self.add_item(self.text)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        result = await self.adapter.core.submit(self.adapter.context(interaction), self.form.action,
                                                            self.text.value)
        await self.adapter.followup(interaction, result)


class DiscordAdapter(ChatAdapter[Messageable]):
    platform = PLATFORM
    limit = LIMIT
    failures = (discord.HTTPException,)

    view_of = staticmethod(view_of)

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
        self.webhooks = Webhooks(self.client, core.portrait)
        self.speakers: dict[str, ChatAdapter] = (
            {name.casefold(): WebhookVoice(self, core.character_name(name)) for name in names}
            if settings.hosted else {self.character_name.casefold(): self})
        self.tree = app_commands.CommandTree(self.client)
        self.tree.on_error = self.on_command_error
        self.tree.interaction_check = self.interaction_check
        self._register_commands()
        self.client.setup_hook = self.setup_hook
        self.client.event(self.on_ready)
        self.client.event(self.on_message)
        self.client.event(self.on_raw_message_edit)
        self.client.event(self.on_raw_message_delete)
        self.client.event(self.on_interaction)

    # -- lifecycle -------------------------------------------------------------------------
    async def setup_hook(self) -> None:
        """Sync the slash commands, from one process only: the one that claims the sync, and
        only when the commands changed since the last sync (their fingerprint is kept in the
        database), so shards and processes starting together do not each sync them."""
        guild = discord.Object(self.settings.dev_guild) if self.settings.dev_guild else None
        if guild is not None:
            self.tree.copy_global_to(guild=guild)
        commands = [command.to_dict(self.tree) for command in self.tree.get_commands(guild=guild)]
        fingerprint = hashlib.sha256(json.dumps(commands, sort_keys=True).encode()).hexdigest()
        key = f"discord_commands:{self.character_name}:{guild.id if guild else 'global'}"

        async def sync() -> None:
            await self.tree.sync(guild=guild)
        await self.core.once_per_change(key, fingerprint, sync)

    async def on_ready(self) -> None:
        log.info("Discord: %s is online as %s", self.character_name, self.client.user)

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
            async with self.recovering(self.recover_when_ready):
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

    async def recover_when_ready(self, stop: asyncio.Event) -> None:
        await self.client.wait_until_ready()
        await asyncio.gather(*(speaker.keep_recovering(stop) for speaker in self.speakers.values()))

    # -- the platform's primitives for the shared reply flow (adapters/base.py) ---------------
    def place_of(self, conversation: ConversationKey) -> Messageable:
        return self.client.get_partial_messageable(int(conversation.thread_id or conversation.chat_id))

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

    async def delete(self, place: Messageable, message_id: str) -> None:
        await place.get_partial_message(int(message_id)).delete()

    async def drop_buttons(self, place: Messageable, message_id: str) -> None:
        await place.get_partial_message(int(message_id)).edit(view=None)

    # -- normalizing -----------------------------------------------------------------------
    def key(self, channel) -> ConversationKey:
        chat_id, thread_id, shared = place_of(channel)
        return ConversationKey(PLATFORM, chat_id, thread_id, self.character_name, shared)

    def context(self, interaction: discord.Interaction) -> CommandContext:
        """Who asks and where; their `Asker` as `interaction_check` found it (roles and all)."""
        user = interaction.user
        asker = interaction.extras.get("asker") or asker_of(user, interaction.channel)
        return CommandContext(self.key(interaction.channel), Identity(PLATFORM, str(user.id)), user.display_name,
                              asker)

    def always_on_here(self, message: discord.Message) -> bool:
        chat_id, _, _ = place_of(message.channel)
        return message.guild is not None and (chat_id in self.always_on or str(message.channel.id) in self.always_on)

    def addressed(self, message: discord.Message) -> tuple[ChatAdapter, bool] | None:
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
        return (own, False) if self.always_on_here(message) else None

    def text_of(self, message: discord.Message) -> str:
        me = self.client.user.id
        return re.sub(rf"<@!?{me}>", "", message.content).strip()

    # -- conversation ----------------------------------------------------------------------
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or message.webhook_id is not None:
            return
        answering = self.addressed(message)
        if answering is None:
            if message.guild is not None:  # a person wrote, to no character: a scene's chain ends
                await self.core.heard(self.key(message.channel))
            return
        speaker, addressed = answering
        asker = await self.asker(message.author, message.channel)
        if asker is None or not self.core.lets_in(speaker.character_name, asker):  # the gate, for who answers
            if message.guild is None:  # a DM gets one line; a server channel, silence
                await self.quietly(message.channel.send(NOT_ALLOWED))
            return
        key = replace(self.key(message.channel), character=speaker.character_name)
        if not await speaker.can_speak(key):  # no model is called for a reply that cannot be posted
            await self.cannot_speak_here(message, speaker.character_name)
            return
        incoming = IncomingMessage(key, Identity(PLATFORM, str(message.author.id)),
                                   message.author.display_name, self.text_of(message), str(message.id),
                                   unseen=unseen_in(message), files=files_of(message), addressed=addressed,
                                   asker=asker)
        try:
            await speaker.answer(message.channel if speaker is self else speaker.place_of(key), incoming)
        except Exception:
            log.exception("Discord: answering message %s failed", message.id)
            await self.quietly(message.channel.send(SOMETHING_WENT_WRONG))

    async def cannot_speak_here(self, message: discord.Message, character: str) -> None:
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

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        content = payload.data.get("content")
        author = payload.data.get("author") or {}
        if content is None or author.get("bot"):
            return
        key = self.key(self.channel(payload.channel_id, payload.guild_id))
        await self.core.edited(key, str(payload.message_id), re.sub(rf"<@!?{self.client.user.id}>", "", content))

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        key = self.key(self.channel(payload.channel_id, payload.guild_id))
        await self.core.deleted(key, str(payload.message_id))

    def channel(self, channel_id: int, guild_id: int | None):
        """The cached channel (threads included), or a partial one: uncached and guildless is a DM."""
        return self.client.get_channel(channel_id) or self.client.get_partial_messageable(
            channel_id, guild_id=guild_id)

    # -- /memory, /link, /forgetme, Remember this -------------------------------------------------
    def _register_commands(self) -> None:
        """The slash-command tree, made from the core's command table: a group becomes a slash
        group, a command acting on a message becomes an item of a message's Apps menu."""
        for spec in self.core.command_table():
            if PLATFORM not in spec.platforms:
                continue
            if spec.message_menu:
                self.tree.add_command(app_commands.ContextMenu(name=spec.message_menu, callback=self.remember_this))
            elif spec.subcommands:
                description = f"What {' and '.join(s.character_name for s in self.speakers.values())} remember" \
                    if len(self.speakers) > 1 else f"What {self.character_name} remembers about you"
                group = app_commands.Group(name=spec.name, description=description)
                for sub in spec.subcommands:
                    group.add_command(self.slash_command(sub))
                self.tree.add_command(group)
            else:
                self.tree.add_command(self.slash_command(spec))

    def slash_command(self, spec: CommandSpec) -> app_commands.Command:
        """One slash command whose typed options are the spec's (discord.py reads them from the
        callback's signature, which is made here)."""

        async def callback(interaction: discord.Interaction, **options) -> None:
            await interaction.response.defer(ephemeral=True, thinking=True)
            result = await self.core.run(self.context(interaction), spec.name, options)
            await self.followup(interaction, result)

        parameters = [inspect.Parameter("interaction", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        annotation=discord.Interaction)]
        for option in spec.options:
            kind = slash_option_type(option)
            parameters.append(inspect.Parameter(
                option.name, inspect.Parameter.KEYWORD_ONLY, annotation=kind if option.required else Optional[kind],
                default=inspect.Parameter.empty if option.required else None))
        callback.__signature__ = inspect.Signature(parameters)
        described = app_commands.describe(**{option.name: option.description for option in spec.options})
        return app_commands.Command(name=spec.name, description=spec.description, callback=described(callback))

    async def remember_this(self, interaction: discord.Interaction, message: discord.Message) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        result = await self.core.remember(self.context(interaction), str(message.id))
        await self.followup(interaction, result)

    async def followup(self, interaction: discord.Interaction, result: CommandResult) -> None:
        """Send a command's answer privately, split at 2,000 characters, buttons on the last."""
        chunks = split_message(result.text, LIMIT)
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            kwargs = {}
            if last and result.buttons:
                kwargs["view"] = view_of(result.buttons)
            if last and result.attachment is not None:
                kwargs["file"] = discord.File(io.BytesIO(result.attachment.data), filename=result.attachment.filename)
            await interaction.followup.send(chunk, ephemeral=True, **kwargs)

    async def asker(self, user: discord.abc.User, channel) -> Asker | None:
        """Who writes, runs a command or presses a button, for the core's gate. A DM's author
        carries no roles: when a rule names a role, their roles in every server the bot shares
        with them are asked of Discord; if that fails, None: not let in (a deny must not be
        skipped)."""
        asker = asker_of(user, channel)
        if not isinstance(user, discord.Member) and self.core.rules_name_roles():
            try:
                asker = replace(asker, roles=await self.roles_everywhere(user))
            except discord.HTTPException as failure:
                log.warning("Discord: the roles of %s could not be looked up (%s); not let in for now", user.id, failure)
                return None
        return asker

    async def roles_everywhere(self, user: discord.abc.User) -> tuple[str, ...]:
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

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        """[access] for commands and buttons: someone no character of this bot lets in is told
        so, privately. The core's gate decides again for the character a command or button acts
        on (a host bot's `character:Aki`), with the asker kept here."""
        asker = await self.asker(interaction.user, interaction.channel)
        interaction.extras["asker"] = asker
        if asker is not None and any(self.core.lets_in(speaker.character_name, asker)
                                     for speaker in self.speakers.values()):
            return True
        await self.quietly(interaction.response.send_message(NOT_ALLOWED, ephemeral=True))
        return False

    async def on_command_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        log.error("Discord command failed: %s", error, exc_info=error)
        text = "Sorry, something went wrong on my side. Nothing was changed; try again."
        if interaction.response.is_done():
            await self.quietly(interaction.followup.send(text, ephemeral=True))
        else:
            await self.quietly(interaction.response.send_message(text, ephemeral=True))

    # -- buttons ---------------------------------------------------------------------------
    async def on_interaction(self, interaction: discord.Interaction) -> None:
        if interaction.type != discord.InteractionType.component or not interaction.data:
            return
        custom_id = interaction.data.get("custom_id", "")
        if not await self.interaction_check(interaction):
            return
        try:
            await self.press(interaction, custom_id)
        except Exception:
            log.exception("Discord: a button press failed")
            text = SOMETHING_WENT_WRONG
            if interaction.response.is_done():
                await self.quietly(interaction.followup.send(text, ephemeral=True))
            else:
                await self.quietly(interaction.response.send_message(text, ephemeral=True))

    async def press(self, interaction: discord.Interaction, custom_id: str) -> None:
        result = await self.core.press(self.context(interaction), custom_id)
        if result.regenerate is not None:
            await self.on_regenerate(interaction, result.regenerate)
            return
        if result.form is not None:
            await interaction.response.send_modal(SummaryModal(self, result.form))
            return
        if result.refused:
            await interaction.response.send_message(result.text, ephemeral=True)
            return
        if result.apart:  # the pressed message keeps its text; the answer is a message of its own
            await interaction.response.edit_message(view=None)
            await self.followup(interaction, result)
            return
        chunks = split_message(result.text, LIMIT)
        attachments = [discord.File(io.BytesIO(result.attachment.data), filename=result.attachment.filename)] \
            if result.attachment is not None and len(chunks) == 1 else []
        await interaction.response.edit_message(
            content=chunks[0], view=view_of(result.buttons) if len(chunks) == 1 else None, attachments=attachments)
        if len(chunks) > 1:
            rest = CommandResult("\n".join(chunks[1:]), result.buttons, result.attachment)
            await self.followup(interaction, rest)

    async def on_regenerate(self, interaction: discord.Interaction, turn: TurnRef) -> None:
        async def acknowledge(refusal: str | None) -> None:
            if refusal:
                await interaction.response.send_message(refusal, ephemeral=True)
            else:
                await interaction.response.defer()

        presser = Identity(PLATFORM, str(interaction.user.id))
        pressed = interaction.message
        speaker = self.speakers.get(pressed.author.name.casefold(), self) if pressed.webhook_id else self
        key = replace(self.key(interaction.channel), character=speaker.character_name)
        place = interaction.channel if speaker is self else speaker.place_of(key)
        failed = await speaker.regenerate(place, key, presser, turn, str(pressed.id), acknowledge)
        if failed:
            await interaction.followup.send(failed, ephemeral=True)
