"""Shared fixtures: the scripted LLM server, a config pointing at it, and a running core."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# A bot process a test starts that dies of a signal prints where it was (CI once saw one exit -11).
os.environ.setdefault("PYTHONFAULTHANDLER", "1")

import adapters.registry  # noqa: E402,F401 — declares the platforms' traits, as the entry point does
from bot.config import Config, parse_config  # noqa: E402
from bot.contract import (  # noqa: E402
    Asker,
    CommandContext,
    ConversationKey,
    Identity,
    IncomingMessage,
    TurnRef,
)
from bot.runtime import Runtime, build_runtime  # noqa: E402
from storage.sqlite.database import Database  # noqa: E402
from tests.fakes.llm_server import ScriptedLLM  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402

API_KEY_ENV = "KEEPSAKE_TEST_API_KEY"
DAY = 86_400.0


async def eventually(check, timeout: float = 10.0) -> None:
    """Wait for a positive signal: until `check()` (a function, or a coroutine function such as
    a store query) comes back true."""
    for _ in range(int(timeout / 0.02)):
        found = check()
        if hasattr(found, "__await__"):
            found = await found
        if found:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("what the test waited for never happened")


async def while_progressing(count, target: int, stall_s: float = 30.0) -> None:
    """Wait until `count()` reaches `target`, for as long as it keeps growing: fail only when it
    stops moving for `stall_s` (a busy machine is slow, not broken)."""
    seen, moved = count(), asyncio.get_running_loop().time()
    while seen < target:
        await asyncio.sleep(0.05)
        now, current = asyncio.get_running_loop().time(), count()
        if current > seen:
            seen, moved = current, now
        elif now - moved > stall_s:
            raise AssertionError(f"stuck at {seen} of {target} for {stall_s:.0f} s")


class FakeClock:
    """A clock tests can move: `clock.now += 8 * DAY`."""

    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def config_dict(base_url: str, db_path: Path, **llm: Any) -> dict[str, Any]:
    return {
        "llm": {"base_url": base_url, "api_key_env": API_KEY_ENV, "model": "gpt-4o-mini",
                "context_window": 128_000, "max_reply_tokens": 200, "temperature": 0.5,
                "tools": "auto", "timeout_s": 5, "max_retries": 1, **llm},
        "storage": {"path": str(db_path)},
        "characters": [{"name": "Mira", "persona": "You are Mira, a kind lighthouse keeper."}],
    }


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-test-not-a-real-key")


@contextlib.asynccontextmanager
async def started(fake):
    """A fake server on loopback, started, and stopped when the block ends (whatever the test did)."""
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def llm() -> ScriptedLLM:
    async with started(ScriptedLLM()) as server:
        yield server


@pytest.fixture
async def telegram() -> FakeTelegram:
    async with started(FakeTelegram()) as fake:
        yield fake


@pytest.fixture
async def discord_fake():
    """The fake Discord gateway and REST API, for a bot process pointed at it (SITECUSTOMIZE in
    tests/process.py); tests/test_discord.py drives discord.py in process instead."""
    from tests.fakes.discord_server import FakeDiscord

    async with started(FakeDiscord()) as fake:
        yield fake


@pytest.fixture
async def images():
    """The fake image server (SPEC 20), both shapes, on loopback."""
    from tests.fakes.image_server import FakeImageServer

    async with started(FakeImageServer()) as server:
        yield server


@pytest.fixture
async def searxng():
    """A SearXNG instance on loopback (its JSON API), answering what a test gives it."""
    from tests.fakes.searxng import FakeSearXNG

    async with started(FakeSearXNG()) as fake:
        yield fake


@pytest.fixture
async def hostile():
    """A hostile server on loopback: a page, search engine or image server as the open internet
    could send them (SPEC 18)."""
    from tests.fakes.hostile import HostileServer

    async with started(HostileServer()) as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite store migrated once a test session. `make_config`'s store starts as a copy of it,
    as a process finds a store another one migrated: a new file takes every migration (~40 ms),
    which the migration tests, the schema test and every bot process a test starts still run."""
    path = tmp_path_factory.mktemp("migrated") / "keepsake.sqlite3"

    async def migrate() -> None:
        database = Database(path)
        await database.open()
        await database.close()
    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # an event loop of its own, not a test's
        thread.submit(asyncio.run, migrate()).result()
    return path


@pytest.fixture
def make_config(llm: ScriptedLLM, tmp_path: Path, migrated_store: Path):
    store = tmp_path / "keepsake.sqlite3"

    def make(**llm_options: Any) -> Config:
        if not store.exists():
            shutil.copyfile(migrated_store, store)
        return parse_config(config_dict(llm.base_url, store, **llm_options), base=tmp_path)
    return make


def pytest_sessionfinish(session, exitstatus) -> None:
    from tests.postgres import drop_emptied

    drop_emptied()


@pytest.fixture
async def runtime(make_config, clock: FakeClock) -> Runtime:
    rt = await build_runtime(make_config(), clock=clock)
    yield rt
    await rt.close()


@contextlib.asynccontextmanager
async def runtimes_on(backend: str, tmp_path: Path):
    """`start(raw, clock, count)`: runtimes ("processes") on one database of `backend` (SQLite, or
    an empty PostgreSQL schema of its own), built from the config `raw`; all closed, the schema
    emptied, after."""
    from tests.postgres import emptied_schema_url

    schemas = emptied_schema_url() if backend == "postgresql" else None
    url = await anext(schemas) if schemas else None
    runtimes: list[Runtime] = []

    async def start(raw: dict[str, Any], clock: FakeClock, count: int = 1):
        if url:
            raw["storage"] = {"url": url}
        config = parse_config(raw, tmp_path)
        started = [await build_runtime(config, clock=clock) for _ in range(count)]
        runtimes.extend(started)
        return started if count > 1 else started[0]

    try:
        yield start
    finally:
        for runtime in runtimes:
            await runtime.close()
        if schemas:
            await anext(schemas, None)


class Chat:
    """Sends messages and commands as one person in one conversation."""

    def __init__(self, runtime: Runtime, user: str = "ann", name: str = "Ann", chat_id: str = "dm-ann",
                 shared: bool = False, platform: str = "console"):
        self.runtime = runtime
        self.identity = Identity(platform, user)
        self.name = name
        self.key = ConversationKey(platform, chat_id, None, "Mira", is_shared=shared)
        # who asks, for [access], as the platform's adapter says it (the console: its owner, always let in)
        self.asker = Asker(platform, user, (chat_id,) if platform != "console" else ())
        self.ctx = CommandContext(self.key, self.identity, name, self.asker)

    async def say(self, text: str, on_text=None):
        message = IncomingMessage(self.key, self.identity, self.name, text, asker=self.asker)
        return await shown(self.runtime, await self.runtime.core.conversation.handle(message, on_text=on_text))

    async def regenerate(self, turn: TurnRef):
        reply = await self.runtime.core.regenerating.regenerate(self.key, self.identity, turn, self.asker)
        return await shown(self.runtime, reply)

    async def memory(self, text: str):
        return await self.runtime.commands.run_text(self.ctx, text)

    async def run(self, name: str, **options: Any):
        return await self.runtime.commands.run(self.ctx, name, options)

    async def press(self, action: str):
        return await self.runtime.commands.press(self.ctx, action)

    async def person_id(self) -> int:
        return await self.runtime.store.people.person_for_identity(self.identity.platform, self.identity.user_id)


MEMORY_TOOLS = {"save_memory", "update_memory", "delete_memory"}


def offers_memory_tools(request: dict) -> bool:
    """Whether a model request offered the memory tools (other tools, SPEC 18, may be there)."""
    return any(spec["function"]["name"] in MEMORY_TOOLS for spec in request.get("tools", []))


async def shown(runtime: Runtime, reply):
    """The reply as an adapter shows it: the platform took it (Turns.shown), and nothing else
    an adapter's delivery sets off (no summaries, no scene) follows."""
    turn = await runtime.store.turns.turn(reply.turn.id) if reply.turn is not None else None
    if turn is not None and turn.reply_message_id is not None:
        await runtime.store.turns.shown(turn.reply_message_id, [])
    return reply


@pytest.fixture
def ann(runtime: Runtime) -> Chat:
    return Chat(runtime)


@pytest.fixture
def bob(runtime: Runtime) -> Chat:
    return Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")


def adapter_settings(config, kind):
    """The settings the entry point gives the first adapter of this kind (adapters/settings.py)."""
    from bot.cli import platform_settings

    return next(settings for *_, settings in platform_settings(config) if isinstance(settings, kind))


async def telegram_runtime(telegram: FakeTelegram, llm: ScriptedLLM, tmp_path: Path, monkeypatch, clock,
                           adjust=lambda raw: None):
    """Mira's runtime on Telegram against the fake Bot API (the config changed by `adjust`), and her
    adapter, not yet running."""
    from adapters.settings import TelegramSettings
    from adapters.telegram.adapter import TelegramAdapter

    monkeypatch.setenv("MIRA_TELEGRAM_TOKEN", telegram.token)
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["telegram"] = {"base_url": telegram.base_url}
    raw["characters"][0]["telegram_token_env"] = "MIRA_TELEGRAM_TOKEN"
    adjust(raw)
    config = parse_config(raw, tmp_path)
    runtime = await build_runtime(config, clock=clock)
    try:
        return runtime, TelegramAdapter(runtime.core, "Mira", adapter_settings(config, TelegramSettings))
    except BaseException:
        await runtime.close()  # a test's config mistake fails the test; its open store would hang the run's exit
        raise


class RunningAdapters:
    """Platform adapters a test started; `stop_all` stops them and closes their runtimes."""

    def __init__(self) -> None:
        self.running: list[tuple[Any, asyncio.Event, asyncio.Task]] = []

    def start(self, runtime, adapter) -> None:
        stop = asyncio.Event()
        self.running.append((runtime, stop, asyncio.create_task(adapter.run(stop))))

    async def stop_all(self) -> None:
        running, self.running = self.running, []
        for runtime, stop, task in running:
            stop.set()
            await asyncio.wait_for(task, 10)
            await runtime.close()
