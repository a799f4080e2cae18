"""Platform → adapter: each platform's config types, and the adapter that runs a character on
it. Only the entry point (`bot/cli.py`) imports this, so the core never depends on a platform
library; each platform's library loads only when a character uses it. A new platform is one
more row here, with its settings in adapters/settings.py."""

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
from bot.contract import Core

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
    name: str
    section: type[BaseModel]  # its top-level table, e.g. [telegram]
    character: type[BaseModel]  # its keys in a [[characters]] table, e.g. telegram_token_env
    settings: Callable[[Any, Any], Any]  # (section, character keys) -> the adapter's settings, None without a token
    # the characters' settings -> the adapters to run: (the characters one runs, its settings)
    adapters: Callable[[list[tuple[str, Any]]], list[tuple[tuple[str, ...], Any]]]
    run: Callable[[Core, tuple[str, ...], Any, asyncio.Event], Awaitable[None]]  # runs an adapter until stop

    def adapter(self, characters: tuple[str, ...], settings: Any) -> AdapterStarter:
        return lambda core, stop: self.run(core, characters, settings, stop)


PLATFORMS = (
    Platform("discord", DiscordSection, DiscordCharacter, discord_settings, discord_adapters, _run_discord),
    Platform("telegram", TelegramSection, TelegramCharacter, telegram_settings, one_each, _run_telegram),
)
