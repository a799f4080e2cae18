"""Platform → adapter: the adapter that runs a character on a platform, given its settings.
Only the entry point (`bot/cli.py`) imports this, so the core never depends on a platform
library; each platform's library loads only when a character uses it."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from adapters.settings import DiscordSettings, TelegramSettings
from bot.contract import Core

# An adapter starter gets the core and a stop event, and returns when the event is set.
AdapterStarter = Callable[[Core, asyncio.Event], Awaitable[None]]


def adapter_for(character: str, settings: DiscordSettings | TelegramSettings) -> AdapterStarter:
    async def start(core: Core, stop: asyncio.Event) -> None:
        if isinstance(settings, DiscordSettings):
            from adapters.discord import DiscordAdapter

            await DiscordAdapter(core, character, settings).run(stop)
        else:
            from adapters.telegram import TelegramAdapter

            await TelegramAdapter(core, character, settings).run(stop)
    return start
