"""SPEC 22 as people meet it: the real `python -m bot` process, Mira and Aki in one group. Ann
tells Mira a secret while Aki is away; Aki is invited; asked about it, Aki's prompt holds
nothing of it while Mira's does — and after 200 more messages (summaries rolled), the same.
Telegram: two bots over the fake Bot API (`/scene` commands through Mira's bot, answered in
Ann's DM); Discord: one host bot voicing both by webhooks, `/scene` as a slash command. The
summarizing model is the extractive stand-in: a summary keeps every line marked `!` it was
given, so the secret reaches a summary exactly when it was fed to it. Two processes on one
PostgreSQL database, each running one character's bot, agree on who witnessed what."""

import asyncio
import contextlib
import json
import sqlite3
from contextlib import AsyncExitStack

import pytest

from bot.commands.scene import CAME, LEFT
from tests import test_scenes_end_to_end as scenes
from tests.fakes.summarizer import extractive, kind_of
from tests.postgres import fresh_schema_url
from tests.process import bot_running, llm_table, logged
from tests.test_scenes_end_to_end import AKI_ID, ANN, DISCORD_ANN, GROUP, MIRA_ID, private_answer, voices

two_bots = scenes.two_bots  # the fixtures: Mira and Aki as two Telegram bots, or voiced by a Discord host bot
host_bot = scenes.host_bot

SECRET = "the spare key is under the heron stone!"


def chats(llm) -> list[dict]:
    return [r for r in llm.requests if kind_of(r) == "chat"]


def holds_secret(request: dict) -> bool:
    return "heron" in json.dumps(request)


async def answered(telegram, ann, group, text: str, bot_id: int) -> None:
    """Ann writes in the group; the bot of `bot_id` answers there."""
    before = len([m for m in telegram.chats[GROUP] if m.sender_id == bot_id])
    telegram.send(group, ann, text)
    await telegram.wait_for(lambda: len([m for m in telegram.chats[GROUP] if m.sender_id == bot_id]) > before,
                            timeout=30)


async def scene_command(telegram, ann, group, text: str) -> str:
    """A /scene command in the group, answered privately in Ann's DM by Mira's bot."""
    before = len(telegram.chats.get(ANN, []))
    telegram.send(group, ann, text)
    answers = await telegram.wait_for(lambda: telegram.chats.get(ANN, [])[before:], timeout=30)
    return answers[-1].text


@pytest.mark.timeout(240)
async def test_on_telegram_aki_never_learns_the_secret_told_while_it_was_away(two_bots, llm, telegram):
    llm.responder = extractive
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    assert await scene_command(telegram, ann, group, "/scene invite Aki") == CAME.format(name="Aki")
    await answered(telegram, ann, group, "@mira_bot good evening!", MIRA_ID)
    assert await scene_command(telegram, ann, group, "/scene dismiss Aki") == LEFT.format(name="Aki")
    await answered(telegram, ann, group, f"@mira_bot {SECRET}", MIRA_ID)
    assert await scene_command(telegram, ann, group, "/scene invite Aki") == CAME.format(name="Aki")
    await answered(telegram, ann, group, "@aki_bot where is the spare key?", AKI_ID)
    assert not holds_secret(chats(llm)[-1])
    await answered(telegram, ann, group, "@mira_bot where is the spare key?", MIRA_ID)
    assert holds_secret(chats(llm)[-1])

    # 200 more messages: 100 of Ann's, each answered by Mira; the summaries roll meanwhile
    for n in range(100):
        await answered(telegram, ann, group, f"@mira_bot harbour log {n}: the tide turned!", MIRA_ID)
    batches = lambda: [r for r in llm.requests if kind_of(r) == "batch"]  # noqa: E731
    await telegram.wait_for(lambda: len(batches()) >= 6, timeout=60)  # the scene's (Mira's) and Aki's own
    assert any(holds_secret(r) for r in batches()) and not all(holds_secret(r) for r in batches())
    await answered(telegram, ann, group, "@aki_bot the spare key, where was it?", AKI_ID)
    asked_aki = chats(llm)[-1]
    assert "harbour log 0: the tide turned!" in json.dumps(asked_aki)  # its summary, of what it witnessed
    assert not holds_secret(asked_aki)
    await answered(telegram, ann, group, "@mira_bot the spare key, where was it?", MIRA_ID)
    assert holds_secret(chats(llm)[-1])


@pytest.mark.timeout(240)
async def test_on_discord_a_host_bot_keeps_the_secret_from_aki_through_its_webhooks(host_bot, llm, discord_fake):
    llm.responder = extractive
    channel = discord_fake.channel_id
    database = host_bot[0].parent / "data" / "keepsake.sqlite3"

    def replies_stored() -> int:
        with contextlib.closing(sqlite3.connect(database)) as db:
            return db.execute("SELECT COUNT(*) FROM messages WHERE role = 'assistant'").fetchone()[0]

    async def voiced(text: str, character: str) -> None:
        """Ann's message, answered by `character`: its webhook message shows (a streamed reply
        shows before it is whole) and the reply is stored — only then may a scene command follow,
        or whether the character it invites or dismisses witnessed that reply is a race."""
        before, stored = len(voices(discord_fake)), replies_stored()
        await discord_fake.say(channel, DISCORD_ANN, text)
        await discord_fake.wait_for(lambda: len(voices(discord_fake)) > before
                                    and voices(discord_fake)[-1][0] == character, timeout=30)
        while replies_stored() == stored:
            await asyncio.sleep(0.02)

    async def scene(action: str) -> str:
        return await private_answer(discord_fake, await discord_fake.slash(DISCORD_ANN, channel, "scene", action=action,
                                                                    character="Aki"))

    await voiced("Mira and Aki, good evening!", "Mira")  # both named: both present
    assert await scene("dismiss") == LEFT.format(name="Aki")
    await voiced(f"Mira, {SECRET}", "Mira")
    assert await scene("invite") == CAME.format(name="Aki")
    await voiced("Aki, where is the spare key?", "Aki")
    assert not holds_secret(chats(llm)[-1])
    await voiced("Mira, where is the spare key?", "Mira")
    assert holds_secret(chats(llm)[-1])
    listed = await private_answer(discord_fake, await discord_fake.slash(DISCORD_ANN, channel, "scene"))
    assert listed.startswith("In this scene: Mira, Aki.")
    why = await private_answer(discord_fake, await discord_fake.slash(DISCORD_ANN, channel, "memory", "why",
                                                               character="Aki"))
    assert "• Witnessed: 6 of this scene's 8 messages — Aki reads only those" in why  # not the secret, nor its answer

    for n in range(100):  # 200 more messages; the summaries roll meanwhile
        await voiced(f"Mira, harbour log {n}: the tide turned!", "Mira")
    batches = lambda: [r for r in llm.requests if kind_of(r) == "batch"]  # noqa: E731
    await discord_fake.wait_for(lambda: len(batches()) >= 6, timeout=60)  # the scene's (Mira's) and Aki's own
    await voiced("Aki, the spare key, where was it?", "Aki")
    assert "harbour log 0: the tide turned!" in json.dumps(chats(llm)[-1]) and not holds_secret(chats(llm)[-1])
    await voiced("Mira, the spare key, where was it?", "Mira")
    assert holds_secret(chats(llm)[-1])


@pytest.mark.timeout(60)
async def test_a_telegram_bot_removed_from_the_group_leaves_its_scene(two_bots, llm, telegram):
    process = two_bots
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    await answered(telegram, ann, group, "@mira_bot good evening", MIRA_ID)
    assert await scene_command(telegram, ann, group, "/scene invite Aki") == CAME.format(name="Aki")
    telegram.remove_bot(group, AKI_ID, ann)  # Telegram tells Aki's bot: it is no longer a member
    await logged(process, f"Aki left telegram chat {GROUP}")
    assert (await scene_command(telegram, ann, group, "/scene")).startswith("In this scene: Mira.\n")


@pytest.mark.timeout(60)
async def test_on_telegram_a_character_whose_bot_is_not_in_the_group_is_not_brought_in_by_its_name(
        two_bots, llm, telegram):
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    telegram.outside.add((AKI_ID, GROUP))  # only Mira's bot is a member
    await answered(telegram, ann, group, "@mira_bot does Aki know the tides?", MIRA_ID)
    assert (await scene_command(telegram, ann, group, "/scene")).startswith("In this scene: Mira.\n")
    refused = await scene_command(telegram, ann, group, "/scene invite Aki")
    assert refused == "Aki cannot be in this scene: Aki's bot is not a member of this chat (add it first)."


def runs_one(llm, telegram, storage_url: str, runs: str) -> str:
    """A process of a deployment on one PostgreSQL database that runs `runs`' Telegram bot only
    (the other character is in its config, run by the other process)."""
    tokens = {"Mira": "MIRA_TELEGRAM_TOKEN", "Aki": "AKI_TELEGRAM_TOKEN"}
    tables = "".join(f"""
[[characters]]
name = "{name}"
persona = "You are {name}, who lives by the harbour."
{f'telegram_token_env = "{tokens[name]}"' if name == runs else ""}
""" for name in tokens)
    return llm_table(llm) + f"""
[storage]
url = "{storage_url}"

[telegram]
base_url = "{telegram.base_url}"
""" + tables


@pytest.mark.timeout(120)
async def test_two_processes_on_postgresql_each_running_one_characters_bot_agree_on_who_witnessed_what(
        tmp_path, llm, telegram):
    """Mira's bot runs in one process, Aki's in another, on one PostgreSQL database: presence set
    through Mira's process holds for Aki's, whose prompt never holds the secret."""
    schemas = fresh_schema_url()
    storage_url = await anext(schemas)
    telegram.add_bot(scenes.AKI_TOKEN, AKI_ID, "aki_bot", "Aki")
    llm.responder = extractive
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    try:
        async with AsyncExitStack() as processes:
            for name in ("Mira", "Aki"):
                folder = tmp_path / name
                folder.mkdir()
                await processes.enter_async_context(bot_running(
                    folder, runs_one(llm, telegram, storage_url, name), MIRA_TELEGRAM_TOKEN=telegram.token,
                    AKI_TELEGRAM_TOKEN=scenes.AKI_TOKEN))
                await telegram.wait_for(lambda: len(telegram.calls_to("setMyCommands")) >= (2 if name == "Aki" else 1),
                                        timeout=30)
            await answered(telegram, ann, group, "@mira_bot good evening, you and Aki!", MIRA_ID)
            assert await scene_command(telegram, ann, group, "/scene dismiss Aki") == LEFT.format(name="Aki")
            await answered(telegram, ann, group, f"@mira_bot {SECRET}", MIRA_ID)
            assert await scene_command(telegram, ann, group, "/scene invite Aki") == CAME.format(name="Aki")
            await answered(telegram, ann, group, "@aki_bot where is the spare key?", AKI_ID)  # Aki's process
            assert not holds_secret(chats(llm)[-1])
            assert "good evening, you and Aki!" in json.dumps(chats(llm)[-1])  # what it witnessed, it reads
            await answered(telegram, ann, group, "@mira_bot where is the spare key?", MIRA_ID)
            assert holds_secret(chats(llm)[-1])
    finally:
        await anext(schemas, None)
