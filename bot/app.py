"""Builds the running bot from its config: store, token counter, characters, LLM, turn handler,
/memory service; runs the adapters that have a token; shuts down cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from bot.characters import CharacterRuntime, load_character
from bot.commands import MemoryCommands
from bot.config import Config
from bot.llm import LLMClient
from bot.prompt import system_prompt
from bot.tokens import TokenCounter
from bot.turn import TurnHandler
from storage.sqlite import SQLiteStore

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    config: Config
    store: SQLiteStore
    llm: LLMClient
    counter: TokenCounter
    turns: TurnHandler
    commands: MemoryCommands

    async def close(self) -> None:
        await self.llm.close()
        await self.store.close()


async def build_runtime(config: Config, clock: Callable[[], float] = time.time) -> Runtime:
    # Characters load first: a malformed card stops start-up before anything is opened.
    loaded = [(c.name, load_character(c)) for c in config.characters]
    store = SQLiteStore(config.storage.path, clock=clock)
    await store.open()
    recovered = await store.recover_interrupted_turns()
    if recovered:
        log.warning("%d turn(s) were interrupted by a stop; their memory writes were undone", recovered)
    counter = TokenCounter(config.llm.model)
    characters = {}
    for name, character in loaded:
        character_id = await store.ensure_character(name)
        prompt_tokens = counter.count(system_prompt(character, "someone", tools=True))
        characters[name] = CharacterRuntime(character, character_id, prompt_tokens)
    llm = LLMClient(config.llm)
    turns = TurnHandler(store, llm, counter, characters, config.llm.context_window, clock=clock)
    commands = MemoryCommands(turns, clock=clock)
    return Runtime(config, store, llm, counter, turns, commands)


# An adapter starter gets the runtime and a stop event, and returns when the event is set.
AdapterStarter = Callable[[Runtime, asyncio.Event], Awaitable[None]]


def platform_adapters(config: Config) -> list[tuple[str, AdapterStarter]]:
    """The Discord and Telegram adapters of every character that has a token set."""
    return []


async def run_bot(config: Config) -> int:
    adapters = platform_adapters(config)
    if not adapters:
        names = ", ".join(
            env for c in config.characters for env in (c.discord_token_env, c.telegram_token_env) if env
        )
        log.error("no platform adapter can start: set a bot token in %s, or chat in the terminal "
                  "with: python -m bot console --character NAME", names or "a *_token_env variable")
        return 1
    runtime = await build_runtime(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(start(runtime, stop), name=name) for name, start in adapters]
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        await asyncio.gather(*tasks, return_exceptions=True)
        await runtime.close()
    return 0
