"""SPEC section 14 as a person meets it: the real `python -m bot` process, with
`[characters.checkins]` in its config, writes first once after a short absence — on Telegram
(the fake Bot API) and on Discord (discord.py against the fake gateway) — and not again until
the person writes."""

import asyncio
import re
import socket
import sqlite3
from contextlib import closing

import aiohttp
import pytest

from tests.conftest import ROOT
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text as llm_text
from tests.process import bot_running, final_reply_to, llm_table, start_bot, stop_bot, write_config

ANN = 801
DISCORD_ANN = FakeDiscord.user("900000000000000021", "Ann")
DISCORD_ANN_DM = "910000000000000021"
AFTER_HOURS = 0.001  # 3.6 seconds
DONT = "🔕 Don't write first"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def scans_after(port: int, more: int) -> None:
    """Wait until the process has scanned for due check-ins `more` times from now (its metrics):
    a positive signal that time passed with scans in it, where a sleep would only hope so."""
    async def scans() -> float:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as answer:
            found = re.search(r'^keepsake_checkin_scans_total\{character="Mira"\} (\S+)$', await answer.text(), re.M)
        return float(found.group(1)) if found else 0.0

    target = await scans() + more
    deadline = asyncio.get_running_loop().time() + 60
    while await scans() < target:
        assert asyncio.get_running_loop().time() < deadline, "the process stopped scanning"
        await asyncio.sleep(0.1)


METRICS_PORT = free_port()


@pytest.fixture
async def running(tmp_path, llm, telegram, discord_fake):
    async with bot_running(tmp_path, llm_table(llm) + f"""
[telegram]
base_url = "{telegram.base_url}"

[metrics]
port = {METRICS_PORT}

[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"
discord_token_env = "MIRA_DISCORD_TOKEN"

[characters.checkins]
after_hours = {AFTER_HOURS}
scan_seconds = 0.5
""", MIRA_TELEGRAM_TOKEN=telegram.token, MIRA_DISCORD_TOKEN="discord-token-checkins",
                                  KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base) as process:
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        yield process


@pytest.mark.timeout(120)
async def test_the_bot_writes_first_once_per_absence_on_telegram_and_discord(running, llm, telegram, discord_fake):
    ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)

    def telegram_checkins():  # sent with the button (a later reply takes it away, like Regenerate's)
        return [call for call in telegram.calls_to("sendMessage") if DONT in str(call.get("reply_markup"))]

    def discord_checkins():
        return [m for m in discord_fake.in_channel(DISCORD_ANN_DM) if [b["label"] for b in m.buttons()] == [DONT]]

    for n in range(4):
        await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, f"telegram message {n}"))
        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, f"discord message {n}", guild=False)
        await discord_fake.wait_for(lambda: len([m for m in discord_fake.in_channel(DISCORD_ANN_DM)
                                                 if m.author_id == discord_fake.app_id]) == n + 1, timeout=30)
    await telegram.wait_for(telegram_checkins, timeout=30)
    await discord_fake.wait_for(discord_checkins, timeout=30)
    assert "has not written for a little while. Write to them first" in str(llm.requests[-1]["messages"][-1])

    await scans_after(METRICS_PORT, 10)  # 10 scans, 0.5 s apart: longer than another absence, still one each
    assert len(telegram_checkins()) == 1 and len(discord_checkins()) == 1

    await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "I'm back"))
    await telegram.wait_for(lambda: len(telegram_checkins()) == 2, timeout=30)
    assert len(discord_checkins()) == 1  # Ann wrote on Telegram only


@pytest.mark.timeout(120)
async def test_a_check_in_whose_sending_was_cut_off_by_a_kill_is_sent_once_after_the_restart(tmp_path, llm, telegram):
    """SPEC 14: the process is killed while Telegram holds the check-in's sendMessage; after the
    restart the check-in is sent once — never twice, and never left stored as said."""
    config = write_config(tmp_path, llm, telegram)
    with open(config, "a") as file:
        file.write(f"\n[metrics]\nport = {METRICS_PORT}\n"
                   f"\n[characters.checkins]\nafter_hours = {AFTER_HOURS}\nscan_seconds = 0.5\n")
    ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    process = await start_bot(config, telegram, tmp_path)
    try:
        for n in range(4):
            await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, f"message {n}"))
        telegram.stalled = DONT
        llm.add(llm_text("How did the tomatoes do, Ann?"))
        await telegram.wait_for(lambda: [c for c in telegram.calls_to("sendMessage")
                                         if DONT in str(c.get("reply_markup"))], timeout=30)
    finally:
        process.kill()
        await process.wait()
    telegram.stalled = None
    llm.add(llm_text("How did the tomatoes do, Ann?"))
    process = await start_bot(config, telegram, tmp_path)
    try:
        await telegram.wait_for(lambda: [m for m in telegram.bot_messages(ANN) if m.text.startswith("How did")],
                                timeout=30)
        await scans_after(METRICS_PORT, 10)  # longer than another absence: still one
        assert [m.text for m in telegram.bot_messages(ANN)].count("How did the tomatoes do, Ann?") == 1
    finally:
        await stop_bot(process)
    with closing(sqlite3.connect(tmp_path / "data" / "keepsake.sqlite3")) as db:
        stored = [row[0] for row in db.execute("SELECT content FROM messages WHERE role = 'assistant'")]
    assert stored.count("How did the tomatoes do, Ann?") == 1  # the one that was shown, once
