"""Slash commands, the message menu, buttons and forms of a Discord adapter: the command tree made
from the core's command table (synced from one process, when it changed), every answer private
and deferred first, and button clicks and modals routed through `on_interaction`, so buttons
keep working after a restart."""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import logging
from dataclasses import replace
from typing import Any, Awaitable, Literal, Optional, Protocol

import discord
from discord import app_commands

from adapters.base import ChatAdapter
from adapters.discord.messages import LIMIT, PLATFORM, asker_of, view_of
from adapters.settings import DiscordSettings
from adapters.splitting import split_message
from bot.contract import (
    NOT_ALLOWED,
    Asker,
    CommandContext,
    CommandResult,
    CommandSpec,
    ConversationKey,
    Core,
    Form,
    Identity,
    IncomingMessage,
    OptionSpec,
    TurnRef,
)

log = logging.getLogger(__name__)
SOMETHING_WENT_WRONG = "Sorry, something went wrong on my side. Try again."


def slash_option_type(option: OptionSpec) -> object:
    """The annotation discord.py turns into the option's type: choices, a number range, yes/no."""
    if option.choices:
        return Literal[option.choices]
    if option.kind == "number":
        return app_commands.Range[int, option.low, option.high]
    return bool if option.kind == "yes_no" else str


class SummaryModal(discord.ui.Modal):
    def __init__(self, interactions: "Interactions", form: Form):
        super().__init__(title=form.title[:45], timeout=600)
        self.interactions, self.form = interactions, form
        self.text = discord.ui.TextInput(label=form.label[:45], style=discord.TextStyle.paragraph,
                                         default=form.prefill[:form.max_length], max_length=form.max_length)
        self.add_item(self.text)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        result = await self.interactions.core.commands.submit(self.interactions.context(interaction), self.form.action,
                                                            self.text.value)
        await self.interactions.followup(interaction, result)


class CommandHost(Protocol):
    """What the commands ask of their Discord adapter (a ChatAdapter itself)."""

    core: Core  # the commands ask its commands, gatekeeping and coordination
    client: discord.Client
    settings: DiscordSettings
    character_name: str
    speakers: dict[str, ChatAdapter]  # who speaks, by casefolded name: the bot's character, or a host's

    def key(self, channel) -> ConversationKey: ...
    async def asker(self, user: discord.abc.User, channel) -> Asker | None: ...
    async def quietly(self, call: Awaitable[Any]) -> None: ...
    async def regenerate(self, *args: Any) -> str | None: ...
    async def answer(self, place: Any, incoming: IncomingMessage) -> None: ...


class Interactions:
    """The app-command tree of one Discord adapter and everything that answers an interaction."""

    def __init__(self, adapter: CommandHost):
        self.adapter, self.core = adapter, adapter.core
        self.tree = app_commands.CommandTree(adapter.client)
        self.tree.on_error = self.on_command_error
        self.tree.interaction_check = self.interaction_check
        self._register_commands()

    async def sync(self) -> None:
        """Sync the slash commands, from one process only: the one that claims the sync, and
        only when the commands changed since the last sync (their fingerprint is kept in the
        database), so shards and processes starting together do not each sync them."""
        guild = discord.Object(self.adapter.settings.dev_guild) if self.adapter.settings.dev_guild else None
        if guild is not None:
            self.tree.copy_global_to(guild=guild)
        commands = [command.to_dict(self.tree) for command in self.tree.get_commands(guild=guild)]
        fingerprint = hashlib.sha256(json.dumps(commands, sort_keys=True).encode()).hexdigest()
        key = f"discord_commands:{self.adapter.character_name}:{guild.id if guild else 'global'}"

        async def sync() -> None:
            await self.tree.sync(guild=guild)
        await self.core.coordination.once_per_change(key, fingerprint, sync)

    def context(self, interaction: discord.Interaction) -> CommandContext:
        """Who asks and where; their `Asker` as `interaction_check` found it (roles and all)."""
        user = interaction.user
        asker = interaction.extras.get("asker") or asker_of(user, interaction.channel,
                                                             self.adapter.settings.nsfw_in_dms)
        return CommandContext(self.adapter.key(interaction.channel), Identity(PLATFORM, str(user.id)),
                              user.display_name, asker)

    def _register_commands(self) -> None:
        """The slash-command tree, made from the core's command table: a group becomes a slash
        group, a command acting on a message becomes an item of a message's Apps menu."""
        for spec in self.core.commands.command_table():
            if not spec.offered_on(PLATFORM):
                continue
            if spec.message_menu:
                self.tree.add_command(app_commands.ContextMenu(name=spec.message_menu, callback=self.remember_this))
            elif spec.subcommands:
                group = app_commands.Group(name=spec.name, description=self.described(spec))
                for sub in spec.subcommands:
                    group.add_command(self.slash_command(sub))
                self.tree.add_command(group)
            else:
                self.tree.add_command(self.slash_command(spec))

    def described(self, group: CommandSpec) -> str:
        """A group's description: /memory's names the characters whose memories it shows."""
        if group.name != "memory":
            return group.description[:100]
        speakers = self.adapter.speakers.values()
        if len(speakers) > 1:
            return f"What {' and '.join(s.character_name for s in speakers)} remember"[:100]
        return f"What {self.adapter.character_name} remembers about you"[:100]

    def slash_command(self, spec: CommandSpec) -> app_commands.Command:
        """One slash command whose typed options are the spec's (discord.py reads them from the
        callback's signature, which is made here)."""

        async def callback(interaction: discord.Interaction, **options) -> None:
            if spec.name == "image":  # not a private answer: a message to the character, drawn
                await self.image(interaction, options["scene"])
                return
            await interaction.response.defer(ephemeral=True, thinking=True)
            result = await self.core.commands.run(self.context(interaction), spec.handler, options)
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

    async def image(self, interaction: discord.Interaction, scene: str) -> None:
        """`/image <scene>` (SPEC 20): said in the channel for everyone, then answered there as a
        message is — the character draws it with its `picture` tool, under the same gate and limits."""
        await interaction.response.send_message(f"/image {scene}"[:LIMIT])
        said = await interaction.original_response()
        incoming = IncomingMessage(self.adapter.key(interaction.channel), Identity(PLATFORM, str(interaction.user.id)),
                                   interaction.user.display_name, f"/image {scene}", str(said.id),
                                   asker=interaction.extras.get("asker"), draw=scene)
        await self.adapter.answer(interaction.channel, incoming)

    async def remember_this(self, interaction: discord.Interaction, message: discord.Message) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        result = await self.core.commands.remember(self.context(interaction), str(message.id))
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

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        """[access] for commands and buttons: someone no character of this bot lets in is told
        so, privately. The core's gate decides again for the character a command or button acts
        on (a host bot's `character:Aki`), with the asker kept here."""
        asker = await self.adapter.asker(interaction.user, interaction.channel)
        interaction.extras["asker"] = asker
        if asker is not None and any(self.core.gatekeeping.lets_in(speaker.character_name, asker)
                                     for speaker in self.adapter.speakers.values()):
            return True
        await self.adapter.quietly(interaction.response.send_message(NOT_ALLOWED, ephemeral=True))
        return False

    async def on_command_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        log.error("Discord command failed: %s", error, exc_info=error)
        text = "Sorry, something went wrong on my side. Nothing was changed; try again."
        if interaction.response.is_done():
            await self.adapter.quietly(interaction.followup.send(text, ephemeral=True))
        else:
            await self.adapter.quietly(interaction.response.send_message(text, ephemeral=True))

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
                await self.adapter.quietly(interaction.followup.send(text, ephemeral=True))
            else:
                await self.adapter.quietly(interaction.response.send_message(text, ephemeral=True))

    async def press(self, interaction: discord.Interaction, custom_id: str) -> None:
        result = await self.core.commands.press(self.context(interaction), custom_id)
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
        host = self.adapter  # speaks itself, unless the pressed message came through a character's webhook
        speaker = host.speakers.get(pressed.author.name.casefold(), host) if pressed.webhook_id else host
        key = replace(host.key(interaction.channel), character=speaker.character_name)
        place = interaction.channel if speaker is host else speaker.place_of(key)
        failed = await speaker.regenerate(place, key, presser, interaction.extras.get("asker"), turn, str(pressed.id),
                                          acknowledge)
        if failed:
            await interaction.followup.send(failed, ephemeral=True)
