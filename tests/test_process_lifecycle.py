"""SPEC section 9 on the real `python -m bot` process: what survives a restart, a reply cut off
by SIGKILL, a revoked token, and stopping cleanly."""

import asyncio
import signal
import socket
import sqlite3
import sys
import threading
from contextlib import closing

import pytest

from bot.runtime import build_runtime
from tests.conftest import ROOT
from tests.fakes.llm_server import stall, text, tool_calls
from tests.fakes.telegram_server import FakeTelegram
from tests.process import (
    SITECUSTOMIZE,
    answer_to,
    final_reply_to,
    partial_reply_noted,
    start_bot,
    stop_bot,
    write_config,
)

ANN = 601


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
        assert (await final_reply_to(telegram, ANN, asked)).text == "Noted — no peanuts for you."
        first_log = await stop_bot(bot)

        bot = await start_bot(config, telegram, tmp_path)
        llm.add(text("Not the peanut cookies, Ann."))
        asked = telegram.send(ann_dm, ann_user, "which cookies should I avoid?")
        assert (await final_reply_to(telegram, ANN, asked)).text == "Not the peanut cookies, Ann."
        last_log = await stop_bot(bot)

        prompt = llm.prompt_text()
        assert '"Ann is allergic to peanuts"' in prompt  # the saved memory, after the restart
        assert "I'm allergic to peanuts" in prompt  # and the window came back from the file
        for log in (first_log, last_log):  # a DEBUG run never writes the secrets
            assert telegram.token not in log and "sk-test-not-a-real-key" not in log
    finally:
        await telegram.stop()


@pytest.mark.timeout(120)
async def test_a_reply_cut_off_by_sigkill_is_answered_again_or_marked_interrupted(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    database = tmp_path / "data" / "keepsake.sqlite3"
    ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)

    async def killed_mid_reply(words: str):
        llm.add(stall("Once upon a time, far out at sea, there stood a lighthouse that " * 3, at=0.5))
        bot = await start_bot(config, telegram, tmp_path)
        said = telegram.send(ann_dm, ann, words)
        partial = await answer_to(telegram, ANN, said)  # the reply streams in, then the model stalls

        await partial_reply_noted(telegram, database)
        bot.kill()
        await bot.wait()
        assert partial.text.startswith("Once upon a time")
        return partial

    # Restarted within 5 minutes: the message is answered again, in place of the partial reply.
    partial = await killed_mid_reply("tell me a story")
    llm.add(text("Once upon a time there was a lighthouse keeper named Mira. The end."))
    bot = await start_bot(config, telegram, tmp_path)
    try:
        await telegram.wait_for(lambda: telegram.message(ANN, partial.message_id).text.endswith("The end."))
        assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "tell me a story"}
        assert [b["text"] for b in telegram.message(ANN, partial.message_id).buttons()] == ["🔄 Regenerate"]
    finally:
        await stop_bot(bot)

    # Restarted later than that: the partial reply says it was interrupted.
    partial = await killed_mid_reply("tell me another one")
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("UPDATE turns SET created_at = created_at - 6 * 60 WHERE status = 'running'")
    requests = len(llm.requests)
    bot = await start_bot(config, telegram, tmp_path)
    try:
        await telegram.wait_for(lambda: "cut off when I restarted" in telegram.message(ANN, partial.message_id).text)
        assert len(llm.requests) == requests  # not answered again
    finally:
        await stop_bot(bot)


@pytest.mark.timeout(120)
async def test_a_discord_reply_cut_off_by_sigkill_is_answered_again_in_place(tmp_path, llm):
    from tests.fakes.discord_server import FakeDiscord

    discord_fake = FakeDiscord()
    await discord_fake.start()
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nbase_url = "{llm.base_url}"\napi_key_env = "KEEPSAKE_TEST_API_KEY"\n'
                      'max_retries = 0\n\n[storage]\npath = "k.sqlite3"\n\n[[characters]]\nname = "Mira"\n'
                      'persona = "You are Mira."\ndiscord_token_env = "MIRA_DISCORD_TOKEN"\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{hooks}:{ROOT}", "MIRA_DISCORD_TOKEN": "discord-token-789",
           "KEEPSAKE_TEST_API_KEY": "sk-test", "KEEPSAKE_TEST_DISCORD_BASE": discord_fake.base}

    async def start():
        discord_fake.identified.clear()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(config), cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        return process

    ann, dm = FakeDiscord.user("900000000000000001", "Ann"), "910000000000000001"
    try:
        bot = await start()
        llm.add(stall("Once upon a time, far out at sea, there stood a lighthouse that " * 3, at=0.5))
        await discord_fake.say(dm, ann, "tell me a story", guild=False)
        partial = await discord_fake.wait_for(lambda: discord_fake.in_channel(dm), timeout=30)

        def recorded() -> bool:  # the bot noted where the partial reply shows (right after sending it)
            with closing(sqlite3.connect(tmp_path / "k.sqlite3")) as db:
                return db.execute("SELECT COUNT(*) FROM turns WHERE status = 'running' "
                                  "AND partial_message_id IS NOT NULL").fetchone()[0] == 1
        await discord_fake.wait_for(recorded, timeout=30)
        bot.kill()
        await bot.wait()
        assert partial[0].content.startswith("Once upon a time")

        llm.add(text("Once upon a time there was a lighthouse keeper named Mira. The end."))
        bot = await start()
        await discord_fake.wait_for(lambda: discord_fake.in_channel(dm)[0].content.endswith("The end."), timeout=30)
        assert len(discord_fake.in_channel(dm)) == 1  # replaced in place, not sent again
        assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "tell me a story"}
        bot.terminate()
        await bot.wait()
    finally:
        await discord_fake.stop()


@pytest.mark.timeout(60)
async def test_a_revoked_token_stops_the_process_with_one_error_line_and_a_non_zero_exit(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    bot = await start_bot(config, telegram, tmp_path)
    telegram.revoke_token()
    _, err = await asyncio.wait_for(bot.communicate(), 30)
    assert bot.returncode == 1
    errors = [line for line in err.decode().splitlines() if " ERROR " in line]
    assert errors[0].endswith("telegram:Mira stopped for good: Telegram refused the bot token of Mira "
                              "(MIRA_TELEGRAM_TOKEN): Unauthorized")
    assert "Traceback" not in err.decode()


@pytest.mark.timeout(60)
async def test_a_token_refused_at_start_up_is_not_retried(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    telegram.revoke_token()
    env_token = telegram.token.removesuffix("-revoked")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", config, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MIRA_TELEGRAM_TOKEN": env_token,
             "KEEPSAKE_TEST_API_KEY": "sk-test", "PYTHONFAULTHANDLER": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1, err.decode()[-3000:]
    assert "refused the bot token of Mira (MIRA_TELEGRAM_TOKEN)" in err.decode()
    assert "restarting in" not in err.decode()


@pytest.mark.timeout(60)
async def test_sigint_stops_the_bot_cleanly_and_the_log_stays_quiet(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    bot = await start_bot(config, telegram, tmp_path, log_level="INFO")
    database = tmp_path / "data" / "keepsake.sqlite3"

    def maintained() -> bool:  # the scheduler's first jobs have run (maintenance notes when it ran)
        with closing(sqlite3.connect(database)) as db:
            return db.execute("SELECT COUNT(*) FROM meta WHERE key = 'maintenance_at'").fetchone()[0] == 1
    await telegram.wait_for(maintained, timeout=30)
    bot.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(bot.communicate(), 30)
    log = err.decode()
    assert bot.returncode == 0, log
    assert "still running" not in log and "restarting in" not in log and "Traceback" not in log
    assert "Running job" not in log  # APScheduler's every-minute line stays below INFO
    assert "was missed" not in log  # a job that starts late on a busy machine just runs


@pytest.mark.timeout(60)
async def test_a_metrics_port_in_use_is_one_error_naming_it_and_the_bot_talks_on(tmp_path, llm, telegram):
    """Before, the port's OSError stopped start-up with a traceback, and the process never exited
    (the open store's threads held it): no supervisor could notice."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, llm, telegram)
        with open(config, "a") as more:
            more.write(f"\n[metrics]\nport = {port}\nlisten = \"127.0.0.1\"\n")
        bot = await start_bot(config, telegram, tmp_path, log_level="INFO")  # it polls Telegram: it talks
        llm.add(text("Hello Ann."))
        asked = telegram.send(telegram.chat(ANN), telegram.user(ANN, "Ann"), "hi")
        assert (await answer_to(telegram, ANN, asked)).text == "Hello Ann."
        log = await stop_bot(bot)
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"metrics.port: /metrics cannot listen on 127.0.0.1:{port}" in errors[0]
    assert "Traceback" not in log


async def test_a_start_up_that_fails_after_the_store_is_open_leaves_no_thread_to_hold_the_process(
        make_config, monkeypatch):
    """The database going away while a runtime is built (a PostgreSQL restart), or any error in the
    block that uses it: the store is closed, so the process exits on the error instead of hanging."""
    import bot.runtime

    before = set(threading.enumerate())
    opened = bot.runtime.open_store

    def left_running() -> set[threading.Thread]:
        """The threads started since that would hold the process at exit and do not end within 5 s
        (a closed connection's ends at once). The event loop's own executor's idle workers are
        asyncio's to end, and it does at exit."""
        holding = {thread for thread in set(threading.enumerate()) - before
                   if not thread.daemon and not thread.name.startswith("asyncio_")}
        for thread in holding:
            thread.join(timeout=5)
        return {thread for thread in holding if thread.is_alive()}

    async def store_that_goes_away(*args, **kwargs):
        store = await opened(*args, **kwargs)

        async def gone(name):
            raise ConnectionResetError("the database went away")
        store.characters.ensure_character = gone
        return store
    monkeypatch.setattr(bot.runtime, "open_store", store_that_goes_away)
    with pytest.raises(ConnectionResetError):
        await build_runtime(make_config())
    assert not left_running()

    monkeypatch.setattr(bot.runtime, "open_store", opened)
    with pytest.raises(RuntimeError):
        async with await build_runtime(make_config()) as runtime:
            runtime.start()
            raise RuntimeError("a start-up step failed")
    assert not left_running()
