"""Characters voiced by one Discord host bot (SPEC 15, `[discord] host_token_env`).

In a server channel each character speaks through a channel webhook the host bot made for it,
under the character's name and with its card's picture as the avatar, so one bot application
voices any number of characters in a scene. The host bot's own account speaks in DMs (as the
first character it voices), and takes every slash command and button press.

`WebhookVoice` is one such character's reply flow (adapters/base.py): where a conversation lives
and how to send, edit and delete its messages there. `Webhooks` finds or makes the webhooks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import discord

from adapters.base import CannotSend, ChatAdapter
from adapters.discord.messages import attachment_of, audio_file, view_of
from bot.contract import Asker, Button, ConversationKey, Core, Media, VoiceNote

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Spot:
    """Where a hosted character speaks: a server channel (or a thread of one), by webhook; or the
    host bot's DM with a person."""

    channel_id: int
    thread_id: int | None
    shared: bool
    messageable: discord.abc.Messageable


class Webhooks:
    """The host bot's webhook for each character in each channel: found among the channel's
    webhooks the host bot made (by the character's name), else made; remembered in this process
    until Discord says it is gone (a process that finds none makes its own)."""

    def __init__(self, client: discord.Client, portrait):
        self.client = client
        self.portrait = portrait  # character name -> PNG bytes or None
        self._known: dict[tuple[int, str], discord.Webhook] = {}

    async def of(self, channel_id: int, character: str) -> discord.Webhook:
        key = (channel_id, character.casefold())
        if key not in self._known:
            channel = self.client.get_channel(channel_id) or await self.client.fetch_channel(channel_id)
            mine = [hook for hook in await channel.webhooks()
                    if hook.user is not None and hook.user.id == self.client.user.id and hook.name == character]
            self._known[key] = mine[0] if mine else await channel.create_webhook(
                name=character, avatar=self.portrait(character), reason="Keepsake: a character's voice in scenes")
        return self._known[key]

    def forget(self, channel_id: int, character: str) -> None:
        self._known.pop((channel_id, character.casefold()), None)


class Host(Protocol):
    """What a hosted character's voice asks of the host bot's adapter (adapter.py)."""

    core: Core
    limit: int
    failures: tuple[type[BaseException], ...]
    webhooks: Webhooks

    def place_of(self, conversation: ConversationKey) -> discord.abc.Messageable: ...
    def permissions_in(self, conversation: ConversationKey) -> discord.Permissions | None: ...
    def refuses_person(self, failure: BaseException) -> bool: ...
    async def can_speak(self, conversation: ConversationKey) -> bool: ...
    async def asker_for(self, conversation: ConversationKey, user_id: str) -> Asker | None: ...
    async def send(self, place: discord.abc.Messageable, text: str, buttons: list[list[Button]],
                   reply_to: str | None, formatted: bool = True) -> str: ...
    async def edit(self, place: discord.abc.Messageable, message_id: str, text: str, buttons: list[list[Button]],
                   formatted: bool = True) -> None: ...
    async def delete(self, place: discord.abc.Messageable, message_id: str) -> None: ...
    async def drop_buttons(self, place: discord.abc.Messageable, message_id: str) -> None: ...
    async def send_media(self, place: discord.abc.Messageable, media: Media) -> str: ...


class WebhookVoice(ChatAdapter[Spot]):
    """A character the host bot voices: by webhook in server channels, as the host in DMs."""

    platform = "discord"
    shows_waveforms = True

    def __init__(self, host: Host, character: str):
        super().__init__(host.core, character)
        self.host = host
        self.limit = host.limit
        self.failures = host.failures

    def place_of(self, conversation: ConversationKey) -> Spot:
        return Spot(int(conversation.chat_id), int(conversation.thread_id) if conversation.thread_id else None,
                    conversation.is_shared, self.host.place_of(conversation))

    def _small(self, line: str) -> str:
        return f"-# {line}"  # Discord's subtext

    def typing(self, place: Spot):
        return place.messageable.typing()

    def refuses_person(self, failure: BaseException) -> bool:
        return self.host.refuses_person(failure)

    async def can_speak(self, conversation: ConversationKey) -> bool:
        """In a server channel the character speaks by the host's webhook: Manage Webhooks."""
        if not conversation.is_shared:
            return await self.host.can_speak(conversation)
        permissions = self.host.permissions_in(conversation)
        return permissions is None or permissions.manage_webhooks

    async def asker_for(self, conversation: ConversationKey, user_id: str) -> Asker | None:
        return await self.host.asker_for(conversation, user_id)

    async def send(self, place: Spot, text: str, buttons: list[list[Button]], reply_to: str | None,
                   formatted: bool = True) -> str:
        if not place.shared:
            return await self.host.send(place.messageable, text, buttons, reply_to, formatted)
        # a webhook cannot reply to a message: the character's name heads its message instead
        message = await self._hooked(place, lambda hook: hook.send(
            text, username=self.character_name, wait=True, allowed_mentions=discord.AllowedMentions.none(),
            **self._view(buttons), **self._thread(place)))
        return str(message.id)

    async def send_media(self, place: Spot, media: Media) -> str:
        """In a DM as the host; in a channel by the character's webhook: a picture or a file as an
        attachment, a voice note as an audio file (a webhook sends no voice message)."""
        if not place.shared:
            return await self.host.send_media(place.messageable, media)
        file = attachment_of(media) or (audio_file(media) if isinstance(media, VoiceNote) else None)
        if file is None:
            raise CannotSend(type(media).__name__)
        message = await self._hooked(place, lambda hook: hook.send(
            username=self.character_name, wait=True, file=file, **self._thread(place)))
        return str(message.id)

    async def edit(self, place: Spot, message_id: str, text: str, buttons: list[list[Button]],
                   formatted: bool = True) -> None:
        if not place.shared:
            return await self.host.edit(place.messageable, message_id, text, buttons, formatted)
        await self._hooked(place, lambda hook: hook.edit_message(
            int(message_id), content=text, view=view_of(buttons), **self._thread(place)))

    async def delete(self, place: Spot, message_id: str) -> None:
        if not place.shared:
            return await self.host.delete(place.messageable, message_id)
        await self._hooked(place, lambda hook: hook.delete_message(int(message_id), **self._thread(place)))

    async def drop_buttons(self, place: Spot, message_id: str) -> None:
        if not place.shared:
            return await self.host.drop_buttons(place.messageable, message_id)
        await self._hooked(place, lambda hook: hook.edit_message(int(message_id), view=None, **self._thread(place)))

    async def replaceable(self, place: Spot, message_ids: list[str]) -> bool:
        """A webhook's message can be edited only through that webhook: if it was deleted, a
        reply regenerated into it could never show (SPEC 15, "What was not shown was not said")."""
        if not place.shared:
            return True
        hook = await self.host.webhooks.of(place.channel_id, self.character_name)
        try:
            await hook.fetch_message(int(message_ids[0]), **self._thread(place))
        except discord.NotFound:
            return False
        return True

    async def _hooked(self, place: Spot, call) -> Any:
        """Make the call with the character's webhook in the channel; once more with a new one
        if someone deleted the webhook meanwhile."""
        hook = await self.host.webhooks.of(place.channel_id, self.character_name)
        try:
            return await call(hook)
        except discord.NotFound as gone:
            if gone.code != 10015:  # "Unknown Webhook"; an unknown message is the caller's to hear
                raise
            self.host.webhooks.forget(place.channel_id, self.character_name)
            return await call(await self.host.webhooks.of(place.channel_id, self.character_name))

    def _view(self, buttons: list[list[Button]]) -> dict[str, Any]:
        view = view_of(buttons)
        return {"view": view} if view is not None else {}

    @staticmethod
    def _thread(place: Spot) -> dict[str, Any]:
        return {"thread": discord.Object(place.thread_id)} if place.thread_id is not None else {}
