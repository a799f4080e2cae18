"""The bot as a person runs it: `python -m bot --config config.toml` in a subprocess, pointed at
the fake Telegram and the scripted LLM, stopped with SIGTERM and started again."""

import asyncio
import os
import signal
import sys

import pytest

from tests.conftest import API_KEY_ENV, ROOT
from tests.fakes.llm_server import text, tool_calls
from tests.fakes.telegram_server import FakeTelegram

ANN = 501


def write_config(tmp_path, llm, telegram) -> str:
    config = tmp_path / "config.toml"
    config.write_text(f"""
[llm]
base_url = "{llm.base_url}"
api_key_env = "{API_KEY_ENV}"
model = "gpt-4o-mini"
max_retries = 1

[storage]
path = "data/keepsake.sqlite3"

[telegram]
base_url = "{telegram.base_url}"

[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"
""")
    return str(config)


async def start_bot(config: str, telegram: FakeTelegram, tmp_path, log_level: str = "DEBUG"):
    """The bot process; its stderr is a pipe read when it stops, so a long run logs at INFO (a
    full pipe would block the process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MIRA_TELEGRAM_TOKEN": telegram.token,
           API_KEY_ENV: "sk-test-not-a-real-key", "KEEPSAKE_LOG_LEVEL": log_level}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", config, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    polls = len(telegram.calls_to("getUpdates"))
    await telegram.wait_for(lambda: len(telegram.calls_to("getUpdates")) > polls, timeout=30)
    return process


async def stop_bot(process) -> str:
    process.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()[-2000:]
    return err.decode()


async def answer(telegram: FakeTelegram, after: int):
    def final():
        later = [m for m in telegram.bot_messages(ANN) if m.message_id > after]
        return later if later and later[-1].buttons() else None
    return (await telegram.wait_for(final, timeout=30))[-1]


@pytest.mark.timeout(120)
async def test_memories_survive_a_restart_of_the_bot_process(tmp_path, llm):
    telegram = FakeTelegram()
    await telegram.start()
    try:
        config = write_config(tmp_path, llm, telegram)
        ann_user, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)

        bot = await start_bot(config, telegram, tmp_path)
        llm.add(tool_calls(("save_memory", {"content": "Ann is allergic to peanuts", "scope": "global"})),
                text("Noted — no peanuts for you."))
        asked = telegram.send(ann_dm, ann_user, "I'm allergic to peanuts")
        assert (await answer(telegram, asked)).text == "Noted — no peanuts for you."
        first_log = await stop_bot(bot)

        bot = await start_bot(config, telegram, tmp_path)
        llm.add(text("Not the peanut cookies, Ann."))
        asked = telegram.send(ann_dm, ann_user, "which cookies should I avoid?")
        assert (await answer(telegram, asked)).text == "Not the peanut cookies, Ann."
        last_log = await stop_bot(bot)

        prompt = llm.prompt_text()
        assert '"Ann is allergic to peanuts"' in prompt  # the saved memory, after the restart
        assert "I'm allergic to peanuts" in prompt  # and the window came back from the file
        for log in (first_log, last_log):  # a DEBUG run never writes the secrets
            assert telegram.token not in log and "sk-test-not-a-real-key" not in log
    finally:
        await telegram.stop()


SITECUSTOMIZE = '''
import os
if os.environ.get("KEEPSAKE_TEST_DISCORD_BASE"):
    import discord, yarl
    base = os.environ["KEEPSAKE_TEST_DISCORD_BASE"]
    discord.http.Route.BASE = base + "/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(base.replace("http", "ws") + "/gateway")
'''


@pytest.mark.timeout(120)
async def test_a_fact_pinned_on_discord_is_used_in_telegram_after_link(tmp_path, llm):
    from tests.fakes.discord_server import FakeDiscord

    telegram, discord_fake = FakeTelegram(), FakeDiscord()
    await telegram.start()
    await discord_fake.start()
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    config = tmp_path / "config.toml"
    config.write_text(open(write_config(tmp_path, llm, telegram)).read() +
                      'discord_token_env = "MIRA_DISCORD_TOKEN"\n')
    env = {**os.environ, "PYTHONPATH": f"{hooks}:{ROOT}", "MIRA_TELEGRAM_TOKEN": telegram.token,
           "MIRA_DISCORD_TOKEN": "discord-e2e-token-456", API_KEY_ENV: "sk-test-not-a-real-key",
           "KEEPSAKE_TEST_DISCORD_BASE": discord_fake.base}
    bot = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", str(config), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)

        ann_discord = FakeDiscord.user("900000000000000001", "Ann")

        async def discord_answer(interaction):
            found = await discord_fake.wait_for(
                lambda: [m for m in discord_fake.for_interaction(interaction) if m.content], timeout=30)
            return found[-1].content

        pinned = await discord_answer(await discord_fake.slash(
            ann_discord, discord_fake.channel_id, "memory", "add", text="I am allergic to peanuts", pin=True))
        assert pinned.startswith("Saved #1 (pinned)")
        code = (await discord_answer(await discord_fake.slash(ann_discord, discord_fake.channel_id, "link")))
        code = code.split("Your link code is ")[1].split(".")[0]

        ann_user, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        asked = telegram.send(ann_dm, ann_user, f"/link {code}")
        question = (await telegram.wait_for(
            lambda: [m for m in telegram.bot_messages(ANN) if m.message_id > asked], timeout=30))[0]
        assert "whoever holds either account sees them all" in question.text
        telegram.press(ann_dm, ann_user, question.message_id, question.buttons()[0]["callback_data"])
        linked = await telegram.wait_for(
            lambda: telegram.message(ANN, question.message_id).text.startswith("Linked") and
            telegram.message(ANN, question.message_id), timeout=30)
        assert linked.text.startswith("Linked: discord, telegram")

        llm.add(text("No peanuts, Ann — not even a little."))
        asked = telegram.send(ann_dm, ann_user, "what should I never eat?")
        assert (await answer(telegram, asked)).text == "No peanuts, Ann — not even a little."
        assert '"I am allergic to peanuts"' in llm.prompt_text()
    finally:
        err = await stop_bot(bot)
        await telegram.stop()
        await discord_fake.stop()
    assert "discord-e2e-token-456" not in err and telegram.token not in err
