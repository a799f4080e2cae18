"""The bot as an outsider would attack and use it: the real `python -m bot` process against the
fake Telegram Bot API and the scripted model (and the console, piped), for the hardening rules —
nobody in particular, /link, bad numbers, forged buttons, edited commands, photos, arrival
order, a revoked token, and a reply cut off by SIGKILL."""

import asyncio
import signal
import sqlite3
import sys
from contextlib import closing

import pytest

from tests.conftest import ROOT
from tests.fakes.llm_server import stall, text
from tests.fakes.telegram_server import FakeTelegram
from tests.test_end_to_end import start_bot, stop_bot, write_config

ANN, BOB = 601, 602


def after(telegram: FakeTelegram, chat_id: int, message_id: int):
    return [m for m in telegram.bot_messages(chat_id) if m.message_id > message_id]


async def answer_to(telegram: FakeTelegram, chat_id: int, message_id: int):
    return (await telegram.wait_for(lambda: after(telegram, chat_id, message_id), timeout=30))[0]


async def final_reply_to(telegram: FakeTelegram, chat_id: int, message_id: int):
    """The character's reply once streamed whole: its last message carries the Regenerate button."""
    def final():
        later = after(telegram, chat_id, message_id)
        return later if later and later[-1].buttons() else None
    return (await telegram.wait_for(final, timeout=30))[-1]


@pytest.mark.timeout(180)
async def test_an_outsider_meets_a_safe_bot(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    bot = await start_bot(config, telegram, tmp_path, log_level="INFO")
    try:
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        bob, bob_dm = telegram.user(BOB, "Bob"), telegram.chat(BOB)

        # 1. Anonymous admins of two groups are nobody in particular: no memory passes between them.
        admin = telegram.anonymous_admin()
        group_a = telegram.chat(-1001, "supergroup", "Group A")
        group_b = telegram.chat(-1002, "supergroup", "Group B")
        llm.add(text("Noted."), text("I don't know you."))
        said = telegram.send(group_a, admin, "@mira_bot please remember that my salary is 99000 dollars",
                             sender_chat=group_a)
        await answer_to(telegram, group_a["id"], said)
        said = telegram.send(group_b, admin, "@mira_bot what do you know about me?", sender_chat=group_b)
        assert (await answer_to(telegram, group_b["id"], said)).text == "I don't know you."
        assert "tools" not in llm.requests[-2] and "tools" not in llm.requests[-1]  # nothing can be saved
        assert "99000" not in llm.prompt_text()
        said = telegram.send(group_b, admin, "/memory view", sender_chat=group_b)
        assert "Write as yourself" in (await answer_to(telegram, group_b["id"], said)).text

        # 2. /link: a code entered on the platform that made it is refused; wrong codes pause /link.
        said = telegram.send(bob_dm, bob, "/link")
        code = (await answer_to(telegram, BOB, said)).text.split("Your link code is ")[1].split(".")[0]
        said = telegram.send(ann_dm, ann, f"/link {code}")
        refused = await answer_to(telegram, ANN, said)
        assert "Enter it from your account on the other platform" in refused.text and not refused.buttons()
        for guess in ("AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE"):
            said = telegram.send(ann_dm, ann, f"/link {guess}")
            await answer_to(telegram, ANN, said)
        said = telegram.send(ann_dm, ann, f"/link {code}")
        assert "/link is paused" in (await answer_to(telegram, ANN, said)).text

        # 5. Numbers that are not ASCII digits within range get the usage text.
        said = telegram.send(ann_dm, ann, "/memory add I grow tomatoes")
        await answer_to(telegram, ANN, said)
        for line, expected in (("/memory delete 99999999999999999999999", "is not a memory number"),
                               ("/memory view ²", "/memory view takes a scope"),
                               ("/memory edit ١٢ x", "is not a memory number")):
            said = telegram.send(ann_dm, ann, line)
            assert expected in (await answer_to(telegram, ANN, said)).text

        # 6. Forged button data is acknowledged: "This button no longer works".
        said = telegram.send(ann_dm, ann, "/memory view")
        view = await answer_to(telegram, ANN, said)
        answered = len(telegram.calls_to("answerCallbackQuery"))
        for forged in ("1:view:../../:1", "1:del:99999999999999999999999:all:1", "1:regen:x"):
            telegram.press(ann_dm, ann, view.message_id, forged)
        await telegram.wait_for(lambda: len(telegram.calls_to("answerCallbackQuery")) == answered + 3)
        assert {c.get("text") for c in telegram.calls_to("answerCallbackQuery")[answered:]} == \
            {"This button no longer works."}

        # 7. An edited command is never run again.
        said = telegram.send(ann_dm, ann, "/memory add I have a cat")
        await answer_to(telegram, ANN, said)
        telegram.edit(ann_dm, ann, said, "/memory add I have a dog")
        said = telegram.send(ann_dm, ann, "/memory view")
        listing = (await answer_to(telegram, ANN, said)).text
        assert "I have a cat" in listing and "I have a dog" not in listing

        # 8. A photo's caption is answered; a bare sticker gets one line.
        llm.add(text("I can't see it, but I'd love to hear about it."))
        said = telegram.send(ann_dm, ann, "what is in this picture?", photo=True)
        assert (await final_reply_to(telegram, ANN, said)).text == "I can't see it, but I'd love to hear about it."
        said = telegram.send(ann_dm, ann, "", sticker=True)
        assert (await answer_to(telegram, ANN, said)).text.startswith("I can't see a sticker")

        # 9. 30 new people, 6 DMs each, 20 ms apart: stored and answered in arrival order.
        llm.default = "ok"
        people, each = 30, 6
        before = len(llm.requests)
        for i in range(each):
            for n in range(people):
                telegram.send(telegram.chat(7000 + n), telegram.user(7000 + n, f"P{n}"), f"p{n} m{i}")
            await asyncio.sleep(0.02)
        await telegram.wait_for(lambda: len(llm.requests) >= before + people * each, timeout=90)
        answered_order = [[m["content"] for m in r["messages"] if m["role"] == "user"]
                          for r in llm.requests[before:]]
        for n in range(people):
            mine = [window for window in answered_order if window[-1].startswith(f"p{n} ")]
            assert [w[-1] for w in mine] == [f"p{n} m{i}" for i in range(each)]  # answered in order
            assert mine[-1] == [f"p{n} m{i}" for i in range(each)]  # and stored in order
    finally:
        await stop_bot(bot)


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

        def recorded() -> bool:  # the bot noted where the partial reply shows (right after sending it)
            with closing(sqlite3.connect(database)) as db:
                return db.execute("SELECT COUNT(*) FROM turns WHERE status = 'running' "
                                  "AND partial_message_id IS NOT NULL").fetchone()[0] == 1
        await telegram.wait_for(recorded)
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


@pytest.mark.timeout(60)
async def test_a_revoked_token_stops_the_process_with_one_error_line_and_a_non_zero_exit(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    bot = await start_bot(config, telegram, tmp_path)
    telegram.revoke_token()
    _, err = await asyncio.wait_for(bot.communicate(), 30)
    assert bot.returncode == 1
    errors = [line for line in err.decode().splitlines() if " ERROR " in line]
    assert errors[0].endswith("telegram:Mira stopped for good: Telegram refused the bot token of Mira: "
                              "Unauthorized") or "refused the bot token of Mira" in errors[0]
    assert "Traceback" not in err.decode()


@pytest.mark.timeout(60)
async def test_a_token_refused_at_start_up_is_not_retried(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    telegram.revoke_token()
    env_token = telegram.token.removesuffix("-revoked")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", config, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MIRA_TELEGRAM_TOKEN": env_token,
             "KEEPSAKE_TEST_API_KEY": "sk-test"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    assert "refused the bot token of Mira" in err.decode()
    assert "restarting in" not in err.decode()


@pytest.mark.timeout(60)
async def test_sigint_stops_the_bot_cleanly_and_the_log_stays_quiet(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    bot = await start_bot(config, telegram, tmp_path, log_level="INFO")
    await asyncio.sleep(0.5)  # the scheduler's first jobs run
    bot.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(bot.communicate(), 30)
    log = err.decode()
    assert bot.returncode == 0, log
    assert "still running" not in log and "restarting in" not in log and "Traceback" not in log
    assert "Running job" not in log  # APScheduler's every-minute line stays below INFO


@pytest.mark.timeout(120)
async def test_a_discord_reply_cut_off_by_sigkill_is_answered_again_in_place(tmp_path, llm):
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_end_to_end import SITECUSTOMIZE

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
