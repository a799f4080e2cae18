"""Platform → adapter: each platform's traits (what the core asks of it: rule kinds, age lines,
who writes first, typed commands), its config types, and the adapter that runs a character on
it. Only the entry point (`bot/cli.py`) imports this — importing it declares the platforms to the
core (`declare_platforms`) — so the core never depends on a platform library; each platform's
library loads only when a character uses it. A new platform is one more row here, with its
settings in adapters/settings.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pydantic import BaseModel

from adapters.settings import (
    DiscordCharacter,
    DiscordSection,
    DiscordSettings,
    TelegramCharacter,
    TelegramSection,
    TelegramSettings,
    discord_adapters,
    discord_settings,
    one_each,
    telegram_settings,
)
from bot.contract import Core, PlatformTraits, declare_platforms

# An adapter starter gets the core and a stop event, and returns when the event is set.
AdapterStarter = Callable[[Core, asyncio.Event], Awaitable[None]]


async def _run_discord(core: Core, characters: tuple[str, ...], settings: DiscordSettings,
                       stop: asyncio.Event) -> None:
    from adapters.discord.adapter import DiscordAdapter

    await DiscordAdapter(core, characters, settings).run(stop)


async def _run_telegram(core: Core, characters: tuple[str, ...], settings: TelegramSettings,
                        stop: asyncio.Event) -> None:
    from adapters.telegram.adapter import TelegramAdapter

    (character,) = characters
    await TelegramAdapter(core, character, settings).run(stop)


@dataclass(frozen=True)
class Platform:
    traits: PlatformTraits  # what the core knows of it
    section: type[BaseModel]  # its top-level table, e.g. [telegram]
    character: type[BaseModel]  # its keys in a [[characters]] table, e.g. telegram_token_env
    settings: Callable[[Any, Any], Any]  # (section, character keys) -> the adapter's settings, None without a token
    # the characters' settings -> the adapters to run: (the characters one runs, its settings)
    adapters: Callable[[list[tuple[str, Any]]], list[tuple[tuple[str, ...], Any]]]
    run: Callable[[Core, tuple[str, ...], Any, asyncio.Event], Awaitable[None]]  # runs an adapter until stop

    @property
    def name(self) -> str:
        return self.traits.name

    def adapter(self, characters: tuple[str, ...], settings: Any) -> AdapterStarter:
        return lambda core, stop: self.run(core, characters, settings, stop)


DISCORD = PlatformTraits(
    "discord", "Discord", place_rule="discord-channel", role_rule="discord-role",
    age_line="{name} is an age-restricted character and talks only in age-restricted channels.",
    age_line_private="{name} is an age-restricted character and does not talk in DMs here.",
    picking="use Remember this on a message (right-click or long-press it, then Apps), or send /memory save with "
            "n for the last n messages")
TELEGRAM = PlatformTraits(
    "telegram", "Telegram", text_commands=True, place_rule="telegram-chat",
    age_line="{name} is an age-restricted character and does not talk on Telegram here.",
    picking="reply to a message with /remember, or send /memory save N for the last N messages")
CONSOLE = PlatformTraits("console", "the console", chat=False, owned=True, text_commands=True)  # adapters/console.py

PLATFORMS = (
    Platform(DISCORD, DiscordSection, DiscordCharacter, discord_settings, discord_adapters, _run_discord),
    Platform(TELEGRAM, TelegramSection, TelegramCharacter, telegram_settings, one_each, _run_telegram),
)
declare_platforms(*(platform.traits for platform in PLATFORMS), CONSOLE)
