"""SPEC 19, reminders, as a person meets them: the real `python -m bot` process on Telegram (a
DM and a group) and on Discord, `[reminders]` and `/timezone` as SPEC 10 and 19 write them. The
model is the scripted server, answering like a model that uses the `remind` tool. Time moves the
way a clock the test controls would: the test brings the stored reminder's moment to now in the
database the process shares, and the process's own scan (every 10 s) finds it due."""

import asyncio
import json
import sqlite3
import time
from contextlib import closing

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import Step, text, tool_calls
from tests.process import answer_to, bot_running, final_reply_to, logged, mira_config

ANN, BOB = 821, 822
GROUP = -100821
DISCORD_ANN = FakeDiscord.user("900000000000000041", "Ann")
DISCORD_ANN_DM = "910000000000000041"


def reminding(request: dict) -> Step | None:
    """A model that sets reminders with its tool, confirms the time it was given, and writes the
    reminder when asked to."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return text(f"Done — I'll remind you {json.loads(last['content'])['when']}.")
    if last["role"] == "system" and "asked you to remind them" in last["content"]:
        return text("Ann! The kettle — you asked me to remind you. *Mira points at the stove.*")
    words = last["content"] if isinstance(last["content"], str) else ""
    if "remind me in 2 minutes" in words:
        return tool_calls(("remind", {"after": "2 minutes", "what": "check the kettle"}))
    return None


def config(llm, *, telegram=None) -> str:
    return mira_config(llm, """[limits]
timezone = "Europe/Paris"

[reminders]
grace_hours = 12""", telegram=telegram)


def due_now(folder) -> int:
    """Bring every pending reminder's moment to now, as the clock reaching it would; how many."""
    with closing(sqlite3.connect(folder / "keepsake.sqlite3")) as db, db:
        return db.execute("UPDATE reminders SET due_at = ? WHERE sending IS NULL", (time.time(),)).rowcount


def pending(folder) -> int:
    with closing(sqlite3.connect(folder / "keepsake.sqlite3")) as db:
        return db.execute("SELECT COUNT(*) FROM reminders").fetchone()[0]


@pytest.mark.timeout(120)
async def test_a_reminder_set_in_a_telegram_dm_and_a_group_is_sent_once_in_the_characters_voice(
        tmp_path, llm, telegram):
    llm.responder = reminding
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        reply = await answer_to(telegram, ANN, telegram.send(dm, ann, "/timezone America/New_York"))
        assert reply.text.startswith("Your time zone is now America/New_York")

        asked = telegram.send(dm, ann, "remind me in 2 minutes to check the kettle")
        reply = await final_reply_to(telegram, ANN, asked)
        told = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))
        assert told["when"].endswith("(America/New_York)")  # resolved by the server, in her zone
        assert reply.text.startswith(f"Done — I'll remind you {told['when']}.")
        listed = await answer_to(telegram, ANN, telegram.send(dm, ann, "/reminders"))
        assert "check the kettle" in listed.text and told["when"] in listed.text

        last = telegram.bot_messages(ANN)[-1].message_id
        assert due_now(tmp_path) == 1
        letter = (await telegram.wait_for(lambda: [m for m in telegram.bot_messages(ANN) if m.message_id > last],
                                          timeout=30))[0]
        assert letter.text.startswith("Ann! The kettle — you asked me to remind you.")
        # Shown, the letter takes the reminder with it: no later scan can send it again.
        await telegram.wait_for(lambda: pending(tmp_path) == 0, timeout=30)
        assert len([m for m in telegram.bot_messages(ANN) if m.message_id > last]) == 1

        # In a group, the letter names the person it is for.
        group = telegram.chat(GROUP, "supergroup", "Harbour")
        asked = telegram.send(group, ann, "@mira_bot remind me in 2 minutes to check the kettle")
        await telegram.wait_for(lambda: [m for m in telegram.bot_messages(GROUP) if m.buttons()], timeout=30)
        before = len(telegram.bot_messages(GROUP))
        assert due_now(tmp_path) == 1
        await telegram.wait_for(lambda: len(telegram.bot_messages(GROUP)) > before, timeout=30)
        instruction = llm.requests[-1]["messages"][-1]["content"]
        assert "Others read this chat: address Ann by name." in instruction

        # /reminders cancel, typed
        await final_reply_to(telegram, ANN, telegram.send(dm, ann, "remind me in 2 minutes to check the kettle"))
        number = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))["number"]
        cancelled = await answer_to(telegram, ANN, telegram.send(dm, ann, f"/reminders cancel {number}"))
        assert cancelled.text == f"Reminder {number} is cancelled." and pending(tmp_path) == 0


@pytest.mark.timeout(120)
async def test_a_reminder_set_on_discord_is_sent_in_the_dm_and_cancel_works_there(tmp_path, llm, discord_fake):
    llm.responder = reminding
    async with bot_running(tmp_path, config(llm), MIRA_DISCORD_TOKEN="discord-token-19",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base):
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        assert {"timezone", "reminders"} <= {c["name"] for c in discord_fake.commands}  # the table's commands

        def from_bot():
            return [m for m in discord_fake.in_channel(DISCORD_ANN_DM) if m.author_id == discord_fake.app_id]

        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "remind me in 2 minutes to check the kettle", guild=False)
        confirmed = (await discord_fake.wait_for(lambda: (found := from_bot()) and found[-1].buttons() and found,
                                                 timeout=30))[-1]
        assert confirmed.content.startswith("Done — I'll remind you ") and "(Europe/Paris)" in confirmed.content
        assert due_now(tmp_path) == 1
        letter = (await discord_fake.wait_for(lambda: from_bot()[1:], timeout=30))[-1]
        assert letter.content.startswith("Ann! The kettle")
        await discord_fake.wait_for(lambda: pending(tmp_path) == 0, timeout=30)  # once the bot records it shown

        # /reminders and /reminders cancel, as slash commands
        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "remind me in 2 minutes to check the kettle", guild=False)
        await discord_fake.wait_for(lambda: len([m for m in from_bot() if m.buttons()]) >= 2, timeout=30)
        number = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))["number"]

        async def answer(interaction):
            return (await discord_fake.wait_for(
                lambda: [m for m in discord_fake.for_interaction(interaction) if m.content], timeout=30))[-1]
        listed = await answer(await discord_fake.slash(DISCORD_ANN, DISCORD_ANN_DM, "reminders", guild=False))
        assert f"⏰ {number} · " in listed.content and listed.ephemeral
        cancelled = await answer(await discord_fake.slash(DISCORD_ANN, DISCORD_ANN_DM, "reminders", guild=False,
                                                          action="cancel", n=number))
        assert cancelled.content == f"Reminder {number} is cancelled." and pending(tmp_path) == 0


@pytest.mark.timeout(150)
async def test_a_letter_telegram_cannot_take_is_written_once_a_gone_chat_ends_it_and_a_migrated_group_is_followed(
        tmp_path, llm, telegram):
    """#60: a chat that is gone called the model every 10 s for ever. Now: one letter written, one
    INFO line, the reminder ends; a group upgraded to a supergroup gets its letter there, once."""
    llm.responder = reminding
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token) as bot:
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann = telegram.user(ANN, "Ann")
        group, supergroup = -821, -100823
        telegram.send(telegram.chat(group, "group", "Harbour"), ann, "@mira_bot remind me in 2 minutes to check the kettle")
        await telegram.wait_for(lambda: [m for m in telegram.bot_messages(group) if m.buttons()], timeout=30)
        telegram.migrated[group] = supergroup  # upgraded meanwhile
        letters = len([r for r in llm.requests if "asked you to remind them" in str(r["messages"][-1])])
        assert due_now(tmp_path) == 1
        moved = await telegram.wait_for(lambda: telegram.bot_messages(supergroup), timeout=30)
        assert len(moved) == 1 and moved[0].text.startswith("Ann! The kettle")
        await telegram.wait_for(lambda: pending(tmp_path) == 0, timeout=30)

        await final_reply_to(telegram, ANN, telegram.send(telegram.chat(ANN), ann,
                                                          "remind me in 2 minutes to check the kettle"))
        telegram.gone.add(ANN)  # the chat is no more
        assert due_now(tmp_path) == 1
        line = await logged(bot, "the reminder ends")
        assert "chat not found" in line.lower() and pending(tmp_path) == 0
        written = [r for r in llm.requests if "asked you to remind them" in str(r["messages"][-1])]
        assert len(written) == letters + 2  # one letter each: none written again
