"""SPEC section 13 as a person running the bot meets it: the real `python -m bot` process, with a
config in the format of SPEC section 10, a card with a lorebook, `[access]` and `[limits]`,
against the fake Telegram Bot API, the fake Discord gateway and the scripted model — lorebook
entries, photos and image attachments for a vision model and a text-only one, text files, who
may talk, and the rate limit."""

import asyncio
import base64
import io
import json
import os
import sqlite3
import sys
from contextlib import closing

import pytest
from PIL import Image

from bot.contract import NOT_ALLOWED
from bot.turn.attachments import IMAGE_MAX_SIDE
from tests.conftest import API_KEY_ENV, ROOT
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text
from tests.fakes.telegram_server import FakeTelegram
from tests.process import SITECUSTOMIZE, answer_to, final_reply_to, stop_bot, write_config

ANN, BOB, CAI, DAN, EVE = 701, 702, 703, 704, 705
GROUP = -100_700
DISCORD_ANN = FakeDiscord.user("900000000000000011", "Ann")
DISCORD_ZED = FakeDiscord.user("900000000000000012", "Zed")  # denied by id
DISCORD_ROY = FakeDiscord.user("900000000000000013", "Roy")  # denied by a role
DISCORD_ANN_DM, DISCORD_ZED_DM = "910000000000000011", "910000000000000012"

CARD = {
    "spec": "chara_card_v2", "spec_version": "2.0",
    "data": {
        "name": "Mira", "description": "{{char}} keeps the lighthouse at the end of the pier.",
        "first_mes": "Welcome in, {{user}}.",
        "character_book": {"scan_depth": 2, "entries": [
            {"keys": ["Eldoria"], "content": "Eldoria is the drowned city {{char}} grew up in.",
             "enabled": True, "insertion_order": 10, "name": "Eldoria"},
            {"keys": ["storm"], "secondary_keys": ["ship"], "selective": True, "enabled": True,
             "content": "A storm sank the ship Marigold in 1899.", "insertion_order": 20, "name": "Marigold"},
        ]},
    },
}


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(out, "PNG")
    return out.getvalue()


def write_setup(tmp_path, llm, telegram: FakeTelegram, discord_fake: FakeDiscord) -> str:
    (tmp_path / "mira.json").write_text(json.dumps(CARD))
    config = tmp_path / "config.toml"
    config.write_text(f"""
[llm]
base_url = "{llm.base_url}"
api_key_env = "{API_KEY_ENV}"
model = "gpt-4o-mini"
max_retries = 0
vision = "auto"

[storage]
url = "sqlite:///keepsake.sqlite3"

[telegram]
base_url = "{telegram.base_url}"

[access]
deny = ["telegram:{BOB}", "discord:{DISCORD_ZED['id']}"]

[limits]
turns_per_minute = 4

[[characters]]
name = "Mira"
card = "mira.json"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"
discord_token_env = "MIRA_DISCORD_TOKEN"
discord_always_on_channels = [{discord_fake.always_on_id}]

[characters.access]
deny = ["discord-role:{discord_fake.role_id}"]
""")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return str(config)


@pytest.fixture
async def running(tmp_path, llm, telegram, discord_fake):
    config = write_setup(tmp_path, llm, telegram, discord_fake)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'hooks'}:{ROOT}", "MIRA_TELEGRAM_TOKEN": telegram.token,
           "MIRA_DISCORD_TOKEN": "discord-token-14", API_KEY_ENV: "sk-test-not-a-real-key",
           "KEEPSAKE_TEST_DISCORD_BASE": discord_fake.base, "KEEPSAKE_LOG_LEVEL": "INFO"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", config, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
    await asyncio.wait_for(discord_fake.identified.wait(), 30)
    await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
    try:
        yield tmp_path / "keepsake.sqlite3"
    finally:
        if process.returncode is None:
            await stop_bot(process)


def stored(database, sql: str, *args) -> list[tuple]:
    with closing(sqlite3.connect(database)) as db:
        return db.execute(sql, args).fetchall()


def user_message(request: dict) -> dict:
    return request["messages"][-1]


@pytest.mark.timeout(120)
async def test_telegram_lorebook_images_files_access_and_the_rate_limit(running, llm, telegram):
    database = running
    ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)

    # A lorebook entry reaches the prompt when its key is said, and not otherwise.
    await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "What was Eldoria like?"))
    assert "Eldoria is the drowned city Mira grew up in." in llm.prompt_text()
    assert "Marigold" not in llm.prompt_text()  # selective: "storm" alone is not enough, and was not said
    await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "What's for dinner?"))
    await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "Did the storm take a ship?"))
    assert "A storm sank the ship Marigold in 1899." in llm.prompt_text()
    assert "Eldoria is the drowned city" not in llm.prompt_text()  # scan depth 2: three messages ago

    # A photo with a caption reaches the vision model as an image part, downscaled.
    dan, dan_dm = telegram.user(DAN, "Dan"), telegram.chat(DAN)
    await final_reply_to(telegram, DAN, telegram.send(dan_dm, dan, "what colour is this?", photo=png(2000, 1500)))
    image, = llm.image_parts()
    assert image.startswith("data:image/jpeg;base64,")
    with Image.open(io.BytesIO(base64.b64decode(image.split(",", 1)[1]))) as seen:
        assert max(seen.size) == IMAGE_MAX_SIDE
    assert user_message(llm.requests[-1])["content"][0] == {"type": "text", "text": "[a photo] what colour is this?"}
    # Later turns keep only the placeholder.
    await final_reply_to(telegram, DAN, telegram.send(dan_dm, dan, "and now?"))
    assert llm.image_parts() == []
    assert {"role": "user", "content": "[a photo] what colour is this?"} in llm.requests[-1]["messages"]

    # A text file is read as text.
    eve, eve_dm = telegram.user(EVE, "Eve"), telegram.chat(EVE)
    notes = "Shopping list:\n- lamp oil\n- rope\n".encode()
    await final_reply_to(telegram, EVE, telegram.send(eve_dm, eve, "can you read this?",
                                                      document=("notes.md", "text/markdown", notes)))
    assert "can you read this?\n\n[file: notes.md]\nShopping list:\n- lamp oil\n- rope" in llm.prompt_text()

    # A text-only model: the photo's caption is still answered, and the character says it cannot see.
    llm.sees_images = False
    asked = telegram.send(dan_dm, dan, "and this one?", photo=png(300, 200))
    await final_reply_to(telegram, DAN, asked)
    assert llm.image_parts(-2) and not llm.image_parts(-1)  # refused once, then asked without the image
    assert "came with a photo, which you cannot see" in llm.prompt_text()
    requests = len(llm.requests)
    await final_reply_to(telegram, DAN, telegram.send(dan_dm, dan, "one more", photo=png(300, 200)))
    assert len(llm.requests) == requests + 1  # remembered: images are not tried again

    # A denied person gets one short line in a DM and silence in a group; nothing of theirs is stored.
    bob, bob_dm = telegram.user(BOB, "Bob"), telegram.chat(BOB)
    said = telegram.send(bob_dm, bob, "hello, remember my code is 4411")
    assert (await answer_to(telegram, BOB, said)).text == NOT_ALLOWED
    group = telegram.chat(GROUP, "supergroup")
    said = telegram.send(group, bob, "@mira_bot my code is 4411")
    ann_said = telegram.send(group, ann, "@mira_bot good evening")
    await final_reply_to(telegram, GROUP, ann_said)
    assert [m.reply_to for m in telegram.bot_messages(GROUP)] == [ann_said]  # Bob's got no answer
    assert stored(database, "SELECT * FROM identities WHERE platform = 'telegram' AND user_id = ?", str(BOB)) == []
    assert stored(database, "SELECT * FROM messages WHERE content LIKE '%4411%'") == []
    assert all("4411" not in json.dumps(r) for r in llm.requests)

    # Over [limits] turns_per_minute = 4: a polite answer, and the message is still kept.
    cai, cai_dm = telegram.user(CAI, "Cai"), telegram.chat(CAI)
    for n in range(1, 6):
        telegram.send(cai_dm, cai, f"message number {n}")
    too_fast = await telegram.wait_for(
        lambda: [m for m in telegram.bot_messages(CAI) if m.text.startswith("You're writing faster")], timeout=30)
    assert "at most 4 replies a minute" in too_fast[0].text and "I've kept your message" in too_fast[0].text
    await telegram.wait_for(lambda: [m.text for m in telegram.bot_messages(CAI)].count(llm.default) == 4, timeout=30)
    kept = stored(database, "SELECT content FROM messages WHERE role = 'user' AND content LIKE 'message number %'")
    assert sorted(c for c, in kept) == [f"message number {n}" for n in range(1, 6)]


@pytest.mark.timeout(120)
async def test_discord_lorebook_image_attachment_text_file_and_access(running, llm, discord_fake):
    database = running

    async def replies(channel_id: str, count: int):
        return await discord_fake.wait_for(
            lambda: (found := [m for m in discord_fake.in_channel(channel_id) if m.author_id == discord_fake.app_id
                               and (m.buttons() or m.content == NOT_ALLOWED)])[count - 1:] and found, timeout=30)

    # A lorebook entry, called up in a server channel.
    await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "have you been to Eldoria?", mention_bot=True)
    await replies(discord_fake.channel_id, 1)
    assert "Eldoria is the drowned city Mira grew up in." in llm.prompt_text()

    # An image attachment reaches the vision model; a text file is read as text.
    await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "what is this?", guild=False,
                           attachments=(("lamp.png", "image/png", png(640, 480)), ("log.txt", "text/plain",
                                                                                  b"lamp lit at 21:04")))
    await replies(DISCORD_ANN_DM, 1)
    image, = llm.image_parts()
    with Image.open(io.BytesIO(base64.b64decode(image.split(",", 1)[1]))) as seen:
        assert seen.size == (640, 480)  # under the cap: not resized
    assert "[file: log.txt]\nlamp lit at 21:04" in user_message(llm.requests[-1])["content"][0]["text"]

    # Denied by id: one line in a DM. Denied by a role: silence in the channel. Nothing stored.
    requests = len(llm.requests)
    await discord_fake.say(DISCORD_ZED_DM, DISCORD_ZED, "my code is 5522", guild=False)
    reply, = await replies(DISCORD_ZED_DM, 1)
    assert reply.content == NOT_ALLOWED
    await discord_fake.say(discord_fake.always_on_id, DISCORD_ROY, "my code is 5522", roles=(discord_fake.role_id,))
    await discord_fake.say(discord_fake.always_on_id, DISCORD_ANN, "and a good evening to you")
    answered, = await replies(discord_fake.always_on_id, 1)
    assert len(llm.requests) == requests + 1 and "5522" not in json.dumps(llm.requests)
    assert stored(database, "SELECT * FROM identities WHERE user_id IN (?, ?)",
                  DISCORD_ZED["id"], DISCORD_ROY["id"]) == []
    assert stored(database, "SELECT * FROM messages WHERE content LIKE '%5522%'") == []


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
        assert (await final_reply_to(telegram, ANN, asked)).text == "No peanuts, Ann — not even a little."
        assert '"I am allergic to peanuts"' in llm.prompt_text()
    finally:
        err = await stop_bot(bot)
        await telegram.stop()
        await discord_fake.stop()
    assert "discord-e2e-token-456" not in err and telegram.token not in err
