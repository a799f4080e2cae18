"""SPEC 15 as people meet it: the real `python -m bot` process with two characters in one chat.

Telegram: two bots (two tokens) over the fake Bot API, each in privacy mode (a bot gets the
group's messages that mention it or reply to it; Telegram never shows a bot another bot's
messages, so the scene is shared through the database). Discord: one host bot voices both
characters through channel webhooks, under their names (and a PNG card's picture), over
discord.py's own code paths against the fake gateway and REST API. Each time a person addresses
Mira; she answers and names Aki; Aki answers; the chain stops at `[scenes] max_chain = 3`; every
prompt holds the whole scene."""

import asyncio

import pytest

from tests.conftest import ROOT
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text as llm_text
from tests.process import bot_running, llm_table
from tests.test_characters import png_with_card

ANN = 801
GROUP = -100500
AKI_TOKEN = "654321:AKI-TOKEN"
AKI_ID = 654321
MIRA_ID = 123456


@pytest.fixture
async def two_bots(tmp_path, llm, telegram):
    aki = telegram.add_bot(AKI_TOKEN, AKI_ID, "aki_bot", "Aki")
    async with bot_running(tmp_path, llm_table(llm) + f"""
[telegram]
base_url = "{telegram.base_url}"

[scenes]
max_chain = 3

[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"

[[characters]]
name = "Aki"
persona = "You are Aki, a sardonic harbour pilot who has seen every kind of fog."
telegram_token_env = "AKI_TELEGRAM_TOKEN"
""", MIRA_TELEGRAM_TOKEN=telegram.token, AKI_TELEGRAM_TOKEN=AKI_TOKEN):
        await telegram.wait_for(lambda: len(telegram.calls_to("setMyCommands")) >= 2, timeout=30)  # both bots up
        yield aki


def scene_messages(telegram) -> list[tuple[int, str]]:
    """The group's messages as people see them: (sender, text), the final text of each."""
    return [(m.sender_id, m.text) for m in telegram.chats[GROUP]]


def prompt(llm, index: int) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in llm.requests[index]["messages"] if m["role"] != "system"]


@pytest.mark.timeout(120)
async def test_two_telegram_bots_play_one_scene_and_the_chain_stops_at_max_chain(two_bots, llm, telegram):
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    llm.add(*(llm_text(t) for t in ("Aki, what do you make of the fog?", "Mira, it's thick as soup.",
                                    "Aki, then we wait for the morning.")))
    asked = telegram.send(group, ann, "@mira_bot fog tonight?")

    chain = [(MIRA_ID, "Aki, what do you make of the fog?"), (AKI_ID, "Mira, it's thick as soup."),
             (MIRA_ID, "Aki, then we wait for the morning.")]
    await telegram.wait_for(lambda: scene_messages(telegram)[1:] == chain, timeout=60)
    await asyncio.sleep(1.0)  # the cap: no fourth character message without a person
    assert len(llm.requests) == 3 and len(scene_messages(telegram)) == 4
    # Mira's first reply answers Ann's message; each prompt held the whole scene so far
    assert telegram.chats[GROUP][1].reply_to == asked
    assert prompt(llm, 1) == [("user", "Ann: fog tonight?"), ("user", "Mira: Aki, what do you make of the fog?")]
    assert prompt(llm, 2) == [("user", "Ann: fog tonight?"), ("assistant", "Aki, what do you make of the fog?"),
                              ("user", "Aki: Mira, it's thick as soup.")]

    # Ann replies to Aki's message: Aki's bot gets it (a reply to it) and answers; a person's
    # message ends the chain, so a new one may start.
    aki_message = telegram.chats[GROUP][2].message_id
    llm.add(llm_text("Aye, Ann, the pilot boat stays in."))
    telegram.send(group, ann, "so no boats?", reply_to=aki_message)
    await telegram.wait_for(lambda: (AKI_ID, "Aye, Ann, the pilot boat stays in.") in scene_messages(telegram),
                            timeout=30)
    assert prompt(llm, 3)[-1] == ("user", "Ann: so no boats?")
    assert ("assistant", "Mira, it's thick as soup.") in prompt(llm, 3)  # Aki's own line, as Aki's



# -- Discord: one host bot voices both characters through channel webhooks ---------------------
DISCORD_ANN = FakeDiscord.user("900000000000000031", "Ann")
MIRA_CARD = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {
    "name": "Mira", "description": "{{char}} keeps the lighthouse on Gull Island.", "personality": "kind",
    "first_mes": "Oh, hello {{user}}.", "extensions": {"talkativeness": "0.8"}}}


@pytest.fixture
async def host_bot(tmp_path, llm, discord_fake):
    card = tmp_path / "mira.png"
    card.write_bytes(png_with_card(MIRA_CARD))
    async with bot_running(tmp_path, llm_table(llm) + f"""
[discord]
host_token_env = "KEEPSAKE_DISCORD_HOST"

[scenes]
max_chain = 3

[[characters]]
name = "Mira"
card = "{card}"

[[characters]]
name = "Aki"
persona = "You are Aki, a sardonic harbour pilot who has seen every kind of fog."
""", KEEPSAKE_DISCORD_HOST="discord-host-token", KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base):
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        yield card


def voices(discord_fake) -> list[tuple[str, str]]:
    """The tavern's character messages: (the name it shows under, text)."""
    return [(m.username, m.content) for m in discord_fake.in_channel(discord_fake.channel_id) if m.webhook_id]


@pytest.mark.timeout(120)
async def test_one_discord_host_bot_voices_two_characters_by_webhook_and_the_chain_stops_at_max_chain(
        host_bot, llm, discord_fake):
    card = host_bot
    llm.add(*(llm_text(t) for t in ("Aki, what do you make of the fog?", "Mira, it's thick as soup.",
                                    "Aki, then we wait for the morning.")))
    await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "Mira, fog tonight?")
    chain = [("Mira", "Aki, what do you make of the fog?"), ("Aki", "Mira, it's thick as soup."),
             ("Mira", "Aki, then we wait for the morning.")]
    await discord_fake.wait_for(lambda: voices(discord_fake) == chain, timeout=60)
    await asyncio.sleep(1.0)  # the cap: no fourth character message without a person
    assert len(llm.requests) == 3 and len(voices(discord_fake)) == 3
    # one webhook a character in the channel, made by the host bot, under its name and PNG card image
    hooks = {hook["name"]: hook for hook in discord_fake.webhooks.values()}
    assert set(hooks) == {"Mira", "Aki"} and all(h["channel_id"] == discord_fake.channel_id for h in hooks.values())
    assert discord_fake.avatars[hooks["Mira"]["id"]] == card.read_bytes() and hooks["Aki"]["id"] not in discord_fake.avatars
    assert not [m for m in discord_fake.in_channel(discord_fake.channel_id) if m.author_id == discord_fake.app_id]
    # every prompt held the scene so far
    assert prompt(llm, 2) == [("user", "Ann: Mira, fog tonight?"), ("assistant", "Aki, what do you make of the fog?"),
                              ("user", "Aki: Mira, it's thick as soup.")]

    # Ann replies to Aki's webhook message: Aki answers; Regenerate (on Aki's reply to a person)
    # goes through the host bot and replaces Aki's reply only.
    aki_message = next(m for m in discord_fake.in_channel(discord_fake.channel_id) if m.username == "Aki")
    llm.add(llm_text("Aye, Ann, the pilot boat stays in."), llm_text("Aye, Ann. No boats tonight."))
    await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "so no boats?", reply_to=aki_message)
    answer = await discord_fake.wait_for(lambda: next((m for m in discord_fake.in_channel(discord_fake.channel_id)
                                                       if m.content == "Aye, Ann, the pilot boat stays in."
                                                       and m.buttons()), None), timeout=30)
    assert answer.username == "Aki"
    await discord_fake.click(DISCORD_ANN, answer, "🔄 Regenerate")
    await discord_fake.wait_for(lambda: answer.content == "Aye, Ann. No boats tonight.", timeout=30)
    assert voices(discord_fake)[:3] == chain  # Mira's replies, and Aki's earlier one, stay as they were

    # /memory in the scene: through the host bot, naming the character, privately
    asked = await discord_fake.slash(DISCORD_ANN, discord_fake.channel_id, "memory", "add",
                                     text="Ann fears eels", character="Aki")
    added = await discord_fake.wait_for(lambda: [m for m in discord_fake.for_interaction(asked) if m.content],
                                        timeout=30)
    assert added[-1].ephemeral and "Aki" in added[-1].content
    shown = await discord_fake.slash(DISCORD_ANN, discord_fake.channel_id, "memory", "view")  # default: Aki, who answered last
    viewed = await discord_fake.wait_for(lambda: [m for m in discord_fake.for_interaction(shown) if m.content],
                                         timeout=30)
    assert "Ann fears eels" in viewed[-1].content

    # A mention of the host bot addresses no one character: the scene chooses, never the one
    # that spoke last (Aki), so Mira answers.
    llm.add(llm_text("Still here, Ann."))
    await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "anyone awake?", mention_bot=True)
    await discord_fake.wait_for(lambda: voices(discord_fake)[-1] == ("Mira", "Still here, Ann."), timeout=30)
