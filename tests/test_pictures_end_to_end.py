"""SPEC 20, pictures, as a person meets them: the real `python -m bot` process with `[pictures]`
as SPEC 10 writes it, against a fake image server on loopback that answers a real PNG made here:
Telegram's `sendPhoto` after the reply, a Discord attachment."""

import asyncio
import sqlite3
from contextlib import closing

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text, tool_calls
from tests.process import bot_running, mira_config

ANN = 831
DISCORD_ANN = FakeDiscord.user("900000000000000051", "Ann")
DISCORD_ANN_DM = "910000000000000051"
SCENE = "the lighthouse at dusk, its lamp just lit"


def config(llm, images, *, telegram=None) -> str:
    return mira_config(llm, f"""[pictures]
kind = "openai"
base_url = "{images.base_url}/v1"
per_day = 20
tokens_each = 1000""", telegram=telegram, character='appearance = "a woman in her thirties, oilskin coat, grey braid"')


def stored(folder) -> list[str]:
    with closing(sqlite3.connect(folder / "keepsake.sqlite3")) as db:
        return [row[0] for row in db.execute("SELECT content FROM messages WHERE role = 'assistant'")]


@pytest.mark.timeout(120)
async def test_a_picture_arrives_after_the_reply_on_telegram(tmp_path, llm, telegram, images):
    async with bot_running(tmp_path, config(llm, images, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        llm.add(tool_calls(("picture", {"scene": SCENE})), text("Here — the lamp just came on."))
        asked = telegram.send(telegram.chat(ANN), telegram.user(ANN, "Ann"), "send me a photo of the lighthouse")
        reply, photo = await telegram.wait_for(  # the reply, with its Regenerate button, then the picture
            lambda: (found := [m for m in telegram.bot_messages(ANN) if m.message_id > asked])[1:] and
            found[0].buttons() and found, timeout=30)
        assert reply.text == "Here — the lamp just came on."
        assert photo.photo == images.png and photo.message_id > reply.message_id
        assert stored(tmp_path) == [f"Here — the lamp just came on.\n[sent a picture: {SCENE}]"]


@pytest.mark.timeout(120)
async def test_a_picture_arrives_as_an_attachment_on_discord(tmp_path, llm, discord_fake, images):
    async with bot_running(tmp_path, config(llm, images), MIRA_DISCORD_TOKEN="discord-token-20",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base):
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        llm.add(tool_calls(("picture", {"scene": SCENE})), text("Here — the lamp just came on."))
        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "send me a photo of the lighthouse", guild=False)

        def from_bot():
            return [m for m in discord_fake.in_channel(DISCORD_ANN_DM) if m.author_id == discord_fake.app_id]
        reply, sent = await discord_fake.wait_for(lambda: (found := from_bot())[1:] and found, timeout=30)
        assert reply.content == "Here — the lamp just came on."
        file, = sent.attachments
        assert file["data"] == images.png and file["filename"] == "picture.png"
        assert images.requests[-1][1]["moderation"] == "auto"  # a DM that is not age-restricted: the safe setting


@pytest.mark.timeout(120)
async def test_image_asks_for_a_picture_through_the_same_tool_on_telegram(tmp_path, llm, telegram, images):
    """#62: `/image <scene>` calls the `picture` tool with that scene itself — the same gate and
    limits — and the character answers knowing it drew it; the message is kept as it was said."""
    async with bot_running(tmp_path, config(llm, images, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        llm.add(text("There it is, lamp and all."))
        asked = telegram.send(telegram.chat(ANN), telegram.user(ANN, "Ann"), f"/image {SCENE}")
        reply, photo = await telegram.wait_for(
            lambda: (found := [m for m in telegram.bot_messages(ANN) if m.message_id > asked])[1:] and
            found[0].buttons() and found, timeout=30)
        assert reply.text == "There it is, lamp and all." and photo.photo == images.png
        assert images.requests[-1][1]["prompt"] == f"Mira, a woman in her thirties, oilskin coat, grey braid. {SCENE}"
        told = [m for m in llm.requests[-1]["messages"] if m["role"] in ("assistant", "tool")]
        assert told[0]["tool_calls"][0]["function"]["name"] == "picture" and '"sent": true' in told[1]["content"]
        assert stored(tmp_path) == [f"There it is, lamp and all.\n[sent a picture: {SCENE}]"]
        empty = telegram.send(telegram.chat(ANN), telegram.user(ANN, "Ann"), "/image")
        said = await telegram.wait_for(lambda: [m for m in telegram.bot_messages(ANN) if m.message_id > empty])
        assert said[0].text == "Say what to draw: /image a lighthouse at dusk"


@pytest.mark.timeout(120)
async def test_image_as_a_slash_command_on_discord_is_said_in_the_channel_and_drawn(tmp_path, llm, discord_fake,
                                                                                     images):
    async with bot_running(tmp_path, config(llm, images), MIRA_DISCORD_TOKEN="discord-token-20",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base):
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        llm.add(text("There it is, lamp and all."))
        await discord_fake.slash(DISCORD_ANN, DISCORD_ANN_DM, "image", guild=False, scene=SCENE)

        def from_bot():
            return [m for m in discord_fake.in_channel(DISCORD_ANN_DM) if m.author_id == discord_fake.app_id]
        asked, reply, sent = await discord_fake.wait_for(lambda: (found := from_bot())[2:] and found, timeout=30)
        assert asked.content == f"/image {SCENE}" and not asked.ephemeral  # said for everyone to see
        assert reply.content == "There it is, lamp and all."
        file, = sent.attachments
        assert file["data"] == images.png
