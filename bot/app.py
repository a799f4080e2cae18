"""Builds the running bot from its config: store, token counter, characters, LLM, turn handler,
/memory service; runs the adapters that have a token; shuts down cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator

from bot.characters import CharacterRuntime, load_character
from bot.commands import MemoryCommands
from bot.config import Config
from bot.llm import LLMClient
from bot.models import PlatformRefused
from bot.prompt import system_prompt
from bot.rebuild import Rebuilds
from bot.scheduler import BackgroundJobs
from bot.summaries import Summarizer
from bot.tokens import TokenCounter
from bot.turn import TurnHandler
from storage.base import ConversationRow
from storage.sqlite import SQLiteStore

log = logging.getLogger(__name__)


# An adapter's way to tell a person something unprompted (a rebuild finished):
# (conversation, person id, text); it ignores conversations of other platforms.
Notifier = Callable[[ConversationRow, "int | None", str], Awaitable[None]]


@dataclass
class Runtime:
    config: Config
    store: SQLiteStore
    llm: LLMClient
    counter: TokenCounter
    turns: TurnHandler
    summarizer: Summarizer
    rebuilds: Rebuilds
    commands: MemoryCommands
    jobs: BackgroundJobs
    notifiers: list[Notifier] = field(default_factory=list)

    async def notify(self, conversation_id: int, person_id: int | None, text: str) -> None:
        conversation = await self.store.conversation_by_id(conversation_id)
        if conversation is None:
            return
        for notifier in self.notifiers:
            await notifier(conversation, person_id, text)

    @contextlib.contextmanager
    def listening(self, notifier: Notifier) -> Iterator[None]:
        """Deliver notifications to `notifier` while the block runs (an adapter's lifetime)."""
        self.notifiers.append(notifier)
        try:
            yield
        finally:
            self.notifiers.remove(notifier)

    def start(self) -> None:
        """Start the background jobs (inside the running event loop)."""
        self.jobs.start()

    async def close(self) -> None:
        self.jobs.shutdown()
        await self.rebuilds.stop()
        await self.summarizer.stop()
        await self.llm.close()
        await self.store.close()


async def build_runtime(config: Config, clock: Callable[[], float] = time.time,
                        llm_http_client: Any = None) -> Runtime:
    # Characters load first: a malformed card stops start-up before anything is opened.
    loaded = [(c.name, load_character(c)) for c in config.characters]
    store = SQLiteStore(config.storage.path, clock=clock)
    await store.open()
    recovered = await store.recover_interrupted_turns()
    if recovered:
        log.warning("%d turn(s) were interrupted by a stop; their memory writes were undone, and each "
                    "platform answers them again or marks their partial reply", recovered)
    counter = TokenCounter(config.llm.model)
    characters = {}
    for name, character in loaded:
        character_id = await store.ensure_character(name)
        prompt_tokens = counter.count(system_prompt(character, "someone", tools=True))
        characters[name] = CharacterRuntime(character, character_id, prompt_tokens)
    llm = LLMClient(config.llm, http_client=llm_http_client)
    window = config.llm.context_window
    turns = TurnHandler(store, llm, counter, characters, window, clock=clock)
    by_id = {rt.id: rt for rt in characters.values()}
    summarizer = Summarizer(store, llm, counter, by_id, window, clock=clock)
    turns.read_summary = store.summaries
    turns.after_delivery = summarizer.schedule
    runtime: Runtime
    rebuilds = Rebuilds(store, summarizer, lambda *args: runtime.notify(*args))
    commands = MemoryCommands(turns, rebuilds, clock=clock)
    jobs = BackgroundJobs(store, summarizer, rebuilds, config.storage, clock=clock)
    runtime = Runtime(config, store, llm, counter, turns, summarizer, rebuilds, commands, jobs)
    return runtime


# An adapter starter gets the runtime and a stop event, and returns when the event is set.
AdapterStarter = Callable[[Runtime, asyncio.Event], Awaitable[None]]


def platform_adapters(config: Config) -> list[tuple[str, AdapterStarter]]:
    """The Discord and Telegram adapters of every character that has a token set."""
    adapters: list[tuple[str, AdapterStarter]] = []
    for character in config.characters:
        if character.discord_token:
            adapters.append((f"discord:{character.name}", _discord(character)))
        if character.telegram_token:
            adapters.append((f"telegram:{character.name}", _telegram(character)))
    return adapters


def _discord(character) -> AdapterStarter:
    async def start(runtime: "Runtime", stop: asyncio.Event) -> None:
        from adapters.discord import DiscordAdapter

        await DiscordAdapter(runtime, character, character.discord_token).run(stop)
    return start


def _telegram(character) -> AdapterStarter:
    async def start(runtime: "Runtime", stop: asyncio.Event) -> None:
        from adapters.telegram import TelegramAdapter

        token = character.telegram_token
        await TelegramAdapter(runtime, character, token, runtime.config.telegram.base_url).run(stop)
    return start


async def run_bot(config: Config) -> int:
    """Run every adapter that has a token until SIGINT/SIGTERM (exit 0), or until every adapter
    has stopped for good because its platform refused it (exit 1, so a supervisor notices)."""
    adapters = platform_adapters(config)
    if not adapters:
        names = ", ".join(
            env for c in config.characters for env in (c.discord_token_env, c.telegram_token_env) if env
        )
        log.error("no platform adapter can start: set a bot token in %s, or chat in the terminal "
                  "with: python -m bot console --character NAME", names or "a *_token_env variable")
        return 1
    runtime = await build_runtime(config)
    runtime.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(_supervised(name, start, runtime, stop)) for name, start in adapters]
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({stopping, asyncio.gather(*tasks)}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        log.info("stopping")
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        stopping.cancel()
        await runtime.close()
    if all(task.result() is False for task in tasks):
        log.error("no platform adapter is left running; stopping with exit status 1")
        return 1
    return 0


async def _supervised(name: str, start: AdapterStarter, runtime: Runtime, stop: asyncio.Event) -> bool:
    """Run one adapter; if it fails, say so and try again after a pause, until the bot stops.
    False when its platform refused it for good (a revoked token): that is not retried."""
    delay = 5.0
    while not stop.is_set():
        try:
            await start(runtime, stop)
            return True
        except asyncio.CancelledError:
            raise
        except PlatformRefused as refused:
            log.error("%s stopped for good: %s", name, refused)
            return False
        except Exception as failure:
            # Secrets in the text (python-telegram-bot puts the token into InvalidToken's) are
            # masked by the log formatter; see bot/logs.py.
            log.error("%s stopped: %s: %s; restarting in %.0f s", name, type(failure).__name__, failure, delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except asyncio.TimeoutError:
            delay = min(delay * 2, 300.0)
    return True
