"""SPEC section 7 (Discord) — a real discord.Client against a loopback fake of Discord's gateway
and REST API, and the scripted LLM server."""

import asyncio
import json

import pytest

from adapters.discord import DiscordAdapter
from adapters.splitting import open_fence
from bot.app import build_runtime
from bot.config import parse_config
from tests.conftest import config_dict
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text, tool_calls

ANN = FakeDiscord.user("900000000000000001", "Ann")
BOB = FakeDiscord.user("900000000000000002", "Bob")
ANN_DM, BOB_DM = "910000000000000001", "910000000000000002"


@pytest.fixture
async def discord_fake():
    fake = FakeDiscord()
    await fake.start()
    with fake.patched():
        yield fake
    await fake.stop()


@pytest.fixture
async def bot(discord_fake, llm, tmp_path, monkeypatch, clock):
    monkeypatch.setenv("MIRA_DISCORD_TOKEN", "discord-test-token-123")
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0]["discord_token_env"] = "MIRA_DISCORD_TOKEN"
    raw["characters"][0]["discord_always_on_channels"] = [int(discord_fake.always_on_id)]
    config = parse_config(raw, tmp_path)
    runtime = await build_runtime(config, clock=clock)
    adapter = DiscordAdapter(runtime, config.characters[0], "discord-test-token-123")
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    await asyncio.wait_for(discord_fake.identified.wait(), 10)
    await discord_fake.wait_for(lambda: adapter.client.is_ready())
    yield runtime
    stop.set()
    await asyncio.wait_for(task, 10)
    await runtime.close()


async def quiet(fake: FakeDiscord, for_s: float = 0.15) -> None:
    """Wait until the bot has made no REST call (but typing) for a moment."""
    def busy() -> int:
        return len([r for r in fake.requests if not r[1].endswith("typing")])
    seen = -1
    while seen != busy():
        seen = busy()
        await asyncio.sleep(for_s)


async def bot_reply(fake: FakeDiscord, channel_id: str, count: int = 1):
    await fake.wait_for(lambda: len([m for m in fake.in_channel(channel_id) if m.author_id == fake.app_id]) >= count)
    await quiet(fake)
    return [m for m in fake.in_channel(channel_id) if m.author_id == fake.app_id]


async def answer(fake: FakeDiscord, interaction: dict):
    """The private answer to a slash command (its follow-up after the deferral)."""
    await fake.wait_for(lambda: [m for m in fake.for_interaction(interaction) if m.content])
    await quiet(fake)
    return [m for m in fake.for_interaction(interaction) if m.content][-1]


async def test_a_mention_in_a_channel_is_answered(bot, discord_fake, llm):
    llm.add(text("Hello Ann, welcome to the harbour."))
    await discord_fake.say(discord_fake.channel_id, ANN, "hello there", mention_bot=True)
    reply, = await bot_reply(discord_fake, discord_fake.channel_id)
    assert reply.content == "Hello Ann, welcome to the harbour."
    assert [b["label"] for b in reply.buttons()] == ["🔄 Regenerate"]
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "Ann: hello there"}
    assert any(r[1].endswith("typing") for r in discord_fake.requests)
