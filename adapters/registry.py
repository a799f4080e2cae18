"""Platform → adapter: which adapters a config runs. Only the entry point (`bot/cli.py`) imports
this, so the core never depends on a platform library."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from bot.config import CharacterConfig, Config
from bot.runtime import Runtime

# An adapter starter gets the runtime and a stop event, and returns when the event is set.
AdapterStarter = Callable[[Runtime, asyncio.Event], Awaitable[None]]


def platform_adapters(config: Config) -> list[tuple[str, AdapterStarter]]:
    """The Discord and Telegram adapters of every character that has a token set."""
    adapters: list[tuple[str, AdapterStarter]] = []
    for character in config.characters:
        if character.discord_token:
            adapters.append((f"discord:{character.name}", _discord(character)))
        if character.telegram_token:
            adapters.append((f"telegram:{character.name}", _telegram(config, character)))
    return adapters


def _discord(character: CharacterConfig) -> AdapterStarter:
    async def start(runtime: Runtime, stop: asyncio.Event) -> None:
        from adapters.discord import DiscordAdapter  # discord.py loads only when a character uses it

        await DiscordAdapter(runtime, character, character.discord_token).run(stop)
    return start


def _telegram(config: Config, character: CharacterConfig) -> AdapterStarter:
    async def start(runtime: Runtime, stop: asyncio.Event) -> None:
        from adapters.telegram import TelegramAdapter

        await TelegramAdapter(runtime, character, character.telegram_token, config.telegram.base_url).run(stop)
    return start
