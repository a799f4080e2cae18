"""SPEC 15 as people meet it: the real `python -m bot` process with two characters in one chat.

Telegram: two bots (two tokens) over the fake Bot API, each in privacy mode (a bot gets the
group's messages that mention it or reply to it; Telegram never shows a bot another bot's
messages, so the scene is shared through the database). Discord: one host bot voices both
characters through channel webhooks, under their names (and a PNG card's picture), over
discord.py's own code paths against the fake gateway and REST API. Each time a person addresses
Mira; she answers and names Aki; Aki answers; the chain stops at `[scenes] max_chain = 3`; every
prompt holds the scene as its character witnessed it (SPEC 22)."""

import asyncio

import pytest

from bot.contract import NOT_ALLOWED
from bot.text import CHAIN_ENDED
from tests.conftest import ROOT
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text as llm_text
from tests.process import bot_running, llm_table, logged, stop_bot
from tests.test_characters import png_with_card

ANN = 801
GROUP = -100500
AKI_TOKEN = "654321:AKI-TOKEN"
AKI_ID = 654321
MIRA_ID = 123456


@pytest.fixture
async def two_bots(tmp_path, llm, telegram):
    telegram.add_bot(AKI_TOKEN, AKI_ID, "aki_bot", "Aki")
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
""", MIRA_TELEGRAM_TOKEN=telegram.token, AKI_TELEGRAM_TOKEN=AKI_TOKEN) as process:
        await telegram.wait_for(lambda: len(telegram.calls_to("setMyCommands")) >= 2, timeout=30)  # both bots up
        yield process


def scene_messages(telegram) -> list[tuple[int, str]]:
    """The group's messages as people see them: (sender, text), the final text of each."""
    return [(m.sender_id, m.text) for m in telegram.chats[GROUP]]


def prompt(llm, index: int) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in llm.requests[index]["messages"] if m["role"] != "system"]


@pytest.mark.timeout(120)
async def test_two_telegram_bots_play_one_scene_and_the_chain_stops_at_max_chain(two_bots, llm, telegram):
    process = two_bots
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    llm.add(*(llm_text(t) for t in ("Aki, what do you make of the fog?", "Mira, it's thick as soup.",
                                    "Aki, then we wait for the morning.")))
    asked = telegram.send(group, ann, "@mira_bot fog tonight?")

    chain = [(MIRA_ID, "Aki, what do you make of the fog?"), (AKI_ID, "Mira, it's thick as soup."),
             (MIRA_ID, "Aki, then we wait for the morning.")]
    await telegram.wait_for(lambda: scene_messages(telegram)[1:] == chain, timeout=60)
    await logged(process, "reached [scenes] max_chain (3 character messages in a row)")  # the cap: no fourth
    assert len(llm.requests) == 3 and len(scene_messages(telegram)) == 4
    # Mira's first reply answers Ann's message; each prompt held the scene as its character
    # witnessed it (SPEC 22): Aki came in when Mira named it, after Ann's question
    assert telegram.chats[GROUP][1].reply_to == asked
    assert prompt(llm, 1) == [("user", "Mira: Aki, what do you make of the fog?")]
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
""", KEEPSAKE_DISCORD_HOST="discord-host-token", KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base) as process:
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        yield card, process


def voices(discord_fake) -> list[tuple[str, str]]:
    """The tavern's character messages: (the name it shows under, text)."""
    return [(m.username, m.content) for m in discord_fake.in_channel(discord_fake.channel_id) if m.webhook_id]


@pytest.mark.timeout(120)
async def test_one_discord_host_bot_voices_two_characters_by_webhook_and_the_chain_stops_at_max_chain(
        host_bot, llm, discord_fake):
    card, process = host_bot
    llm.add(*(llm_text(t) for t in ("Aki, what do you make of the fog?", "Mira, it's thick as soup.",
                                    "Aki, then we wait for the morning.")))
    await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "Mira, fog tonight?")
    chain = [("Mira", "Aki, what do you make of the fog?"), ("Aki", "Mira, it's thick as soup."),
             ("Mira", "Aki, then we wait for the morning.")]
    await discord_fake.wait_for(lambda: voices(discord_fake) == chain, timeout=60)
    await logged(process, "reached [scenes] max_chain (3 character messages in a row)")  # the cap: no fourth
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


# -- rules follow the character that answers (SPEC 15), on the real process ----------------------
DISCORD_ZED = FakeDiscord.user("900000000000000066", "Zed")
ZED = 866


def host_bot_config(llm, aki: str = "") -> str:
    """A Discord host bot voicing Mira and Aki (with `aki`: more keys of Aki's table)."""
    return llm_table(llm) + f"""
[discord]
host_token_env = "KEEPSAKE_DISCORD_HOST"

[[characters]]
name = "Mira"
persona = "You are Mira, who keeps the lighthouse."

[[characters]]
name = "Aki"
persona = "You are Aki, a sardonic harbour pilot."
{aki}
"""


@pytest.fixture
async def host_bot_aki_denies_zed(tmp_path, llm, discord_fake):
    aki_denies_zed = f'access = {{ deny = ["discord:{DISCORD_ZED["id"]}"] }}'
    async with bot_running(tmp_path, host_bot_config(llm, aki_denies_zed), KEEPSAKE_DISCORD_HOST="discord-host-token",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base) as process:
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        yield process


async def private_answer(discord_fake, interaction) -> str:
    answered = await discord_fake.wait_for(lambda: [m for m in discord_fake.for_interaction(interaction) if m.content],
                                           timeout=30)
    assert answered[-1].ephemeral
    return answered[-1].content


@pytest.mark.timeout(120)
async def test_a_host_bot_applies_each_characters_own_access_on_every_path(host_bot_aki_denies_zed, llm, discord_fake):
    process = host_bot_aki_denies_zed
    channel = discord_fake.channel_id
    llm.add(llm_text("Aye, Ann."))
    await discord_fake.say(channel, DISCORD_ANN, "Aki, is the harbour open?")  # Aki lets Ann in
    aki_message = await discord_fake.wait_for(lambda: next((m for m in discord_fake.in_channel(channel)
                                                            if m.username == "Aki"), None), timeout=30)
    # Zed, whom Aki denies: by Aki's name, and by a reply to Aki's webhook message
    await discord_fake.say(channel, DISCORD_ZED, "Aki, give me the harbour codes")
    await discord_fake.say(channel, DISCORD_ZED, "the codes, now", reply_to=aki_message)
    # a command naming Aki, through the host bot
    added = await discord_fake.slash(DISCORD_ZED, channel, "memory", "add", text="Zed owns the harbour",
                                     character="Aki")
    generated = await discord_fake.slash(DISCORD_ZED, channel, "memory", "generate",
                                         description="Zed is the harbour master", character="Aki")
    assert await private_answer(discord_fake, added) == NOT_ALLOWED
    assert await private_answer(discord_fake, generated) == NOT_ALLOWED
    # and through Mira, who lets Zed in: her reply names Aki, and Aki does not answer for Zed
    llm.add(llm_text("Aki, Zed here wants the codes."))
    await discord_fake.say(channel, DISCORD_ZED, "Mira, ask Aki for the codes")
    await discord_fake.wait_for(lambda: ("Mira", "Aki, Zed here wants the codes.") in voices(discord_fake), timeout=30)
    await logged(process, "Aki does not answer for the person who started the chain")
    assert len(llm.requests) == 2  # Ann's answer and Mira's: nothing on Zed's behalf reached Aki
    assert [text for name, text in voices(discord_fake) if name == "Aki"] == ["Aye, Ann."]
    shown = await discord_fake.slash(DISCORD_ZED, channel, "memory", "view", character="Mira")
    assert "harbour" not in await private_answer(discord_fake, shown)


@pytest.fixture
async def two_bots_aki_denies_zed(tmp_path, llm, telegram):
    aki = telegram.add_bot(AKI_TOKEN, AKI_ID, "aki_bot", "Aki")
    async with bot_running(tmp_path, llm_table(llm) + f"""
[telegram]
base_url = "{telegram.base_url}"

[[characters]]
name = "Mira"
persona = "You are Mira, who keeps the lighthouse."
telegram_token_env = "MIRA_TELEGRAM_TOKEN"

[[characters]]
name = "Aki"
persona = "You are Aki, a sardonic harbour pilot."
telegram_token_env = "AKI_TELEGRAM_TOKEN"
access = {{ deny = ["telegram:{ZED}"] }}
""", MIRA_TELEGRAM_TOKEN=telegram.token, AKI_TELEGRAM_TOKEN=AKI_TOKEN):
        await telegram.wait_for(lambda: len(telegram.calls_to("setMyCommands")) >= 2, timeout=30)
        yield aki


@pytest.mark.timeout(120)
async def test_a_command_naming_a_character_is_decided_by_that_characters_access_on_telegram(
        two_bots_aki_denies_zed, llm, telegram):
    zed = telegram.user(ZED, "Zed")
    dm = telegram.chat(ZED, "private", "Zed")
    telegram.send(dm, zed, "/memory add character:Aki Zed owns the harbour")  # to Mira's bot, which lets Zed in
    telegram.send(dm, zed, "/memory generate character:Aki Zed is the harbour master")
    await telegram.wait_for(lambda: [m.text for m in telegram.bot_messages(ZED)].count(NOT_ALLOWED) == 2, timeout=30)
    telegram.send(dm, zed, "/memory view character:Mira")
    await telegram.wait_for(lambda: len(telegram.bot_messages(ZED)) == 3, timeout=30)
    assert "harbour" not in telegram.bot_messages(ZED)[-1].text and llm.requests == []


@pytest.mark.timeout(120)
async def test_a_host_bot_without_manage_webhooks_names_the_permission_and_calls_no_model(tmp_path, llm, discord_fake):
    """SPEC 15 "Webhook trouble is named": one line to the person, one WARNING a channel, no model call."""
    discord_fake.no_manage_webhooks.add(discord_fake.channel_id)
    async with bot_running(tmp_path, host_bot_config(llm), KEEPSAKE_DISCORD_HOST="discord-host-token",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base) as process:
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        channel = discord_fake.channel_id
        for n in range(3):
            await discord_fake.say(channel, DISCORD_ANN, f"Aki, is the harbour open? ({n})")
        said = await discord_fake.wait_for(
            lambda: [m for m in discord_fake.in_channel(channel) if m.author_id == discord_fake.app_id][2:], timeout=30)
        assert said[-1].content == "Aki can't speak in this channel: the bot needs the Manage Webhooks permission here."
        assert llm.requests == [] and not voices(discord_fake)
        log = await stop_bot(process)
    assert log.count("needs the Manage Webhooks permission") == 1 and "Traceback" not in log
    assert "WARNING" in next(line for line in log.splitlines() if "Manage Webhooks" in line)


@pytest.mark.timeout(120)
async def test_a_character_whose_bot_is_not_in_the_group_takes_no_part_in_its_scene(two_bots, llm, telegram):
    """SPEC 15: only characters whose voice can speak in the chat take part; nothing is said for
    one that cannot (no model call, nothing stored, nothing in a later prompt)."""
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    telegram.outside.add((AKI_ID, GROUP))  # only Mira's bot is in the group
    llm.add(llm_text("Aki, when does the tide turn?"))
    telegram.send(group, ann, "@mira_bot tide tonight?")
    await telegram.wait_for(lambda: scene_messages(telegram)[1:] == [(MIRA_ID, "Aki, when does the tide turn?")],
                            timeout=30)
    await logged(two_bots, "Aki cannot speak there")
    assert len(llm.requests) == 1 and not telegram.calls_to("sendMessage")[1:]
    llm.add(llm_text("Still turning, Ann."))
    telegram.send(group, ann, "@mira_bot and now?")
    await telegram.wait_for(lambda: (MIRA_ID, "Still turning, Ann.") in scene_messages(telegram), timeout=30)
    assert not any(content.startswith("Aki:") for _, content in prompt(llm, 1))


@pytest.mark.timeout(120)
async def test_regenerate_through_a_deleted_webhook_leaves_the_shown_reply_as_the_stored_one(
        host_bot, llm, discord_fake):
    """SPEC 15 "What was not shown was not said": a webhook's message can be edited only through
    it; once an admin deleted it, Regenerate says so, calls no model, and the reply people see
    stays the one the character remembers."""
    channel = discord_fake.channel_id
    llm.add(llm_text("Aye, Ann. The tide turns at six."))
    await discord_fake.say(channel, DISCORD_ANN, "Aki, when does the tide turn?")
    answer = await discord_fake.wait_for(lambda: next((m for m in discord_fake.in_channel(channel)
                                                       if m.username == "Aki" and m.buttons()), None), timeout=30)
    discord_fake.webhooks.pop(answer.webhook_id)  # an admin deletes Aki's webhook
    pressed = await discord_fake.click(DISCORD_ANN, answer, "🔄 Regenerate")
    refused = await discord_fake.wait_for(lambda: [m for m in discord_fake.for_interaction(pressed) if m.content],
                                          timeout=30)
    assert refused[-1].ephemeral and "webhook that is gone" in refused[-1].content
    assert len(llm.requests) == 1 and answer.content == "Aye, Ann. The tide turns at six."
    llm.add(llm_text("Six, as I said."))
    await discord_fake.say(channel, DISCORD_ANN, "Aki, when again?")  # the webhook is made again, once
    await discord_fake.wait_for(lambda: ("Aki", "Six, as I said.") in voices(discord_fake), timeout=30)
    assert ("assistant", "Aye, Ann. The tide turns at six.") in prompt(llm, 1)  # the shown reply is the stored one


@pytest.mark.timeout(120)
async def test_a_persons_message_to_nobody_ends_a_chain_voiced_by_a_discord_host_bot(tmp_path, llm, discord_fake):
    """#54, SPEC 15: with one host bot voicing Mira and Aki and `max_chain = 10`, Ann's message to
    no character ends the chain: at most the reply already in flight follows."""
    config = host_bot_config(llm).replace("[discord]", "[scenes]\nmax_chain = 10\n\n[discord]")
    async with bot_running(tmp_path, config, KEEPSAKE_DISCORD_HOST="discord-host-token",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base) as process:
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)
        llm.add(*(llm_text(("Aki" if n % 2 == 0 else "Mira") + f", line {n}.", delay=1.0) for n in range(10)))
        await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "Mira, start talking to Aki")
        await discord_fake.wait_for(lambda: len(voices(discord_fake)) >= 1 and llm.answering == 1, timeout=30)
        await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "Stop, both of you, quiet please.")
        stopped_at = len(voices(discord_fake))
        await logged(process, CHAIN_ENDED)  # the next chain turn found Ann's message and sent nothing
        await discord_fake.wait_for(lambda: llm.answering == 0, timeout=30)
        assert len(voices(discord_fake)) <= stopped_at + 1 and len(llm.requests) <= stopped_at + 1


@pytest.mark.timeout(120)
async def test_on_telegram_a_persons_message_to_nobody_ends_the_chain(two_bots, llm, telegram):
    """#54, SPEC 15, a bot account per character: Ann writes to nobody while Mira's reply (naming
    Aki) is being written; it shows, and Aki does not answer it."""
    process = two_bots
    ann, group = telegram.user(ANN, "Ann"), telegram.chat(GROUP, "supergroup", "Harbour")
    llm.add(llm_text("Aki, what do you make of the fog?", delay=1.0), llm_text("Thick as soup.", delay=1.0))
    telegram.send(group, ann, "@mira_bot fog tonight?")
    await telegram.wait_for(lambda: llm.answering == 1, timeout=30)
    telegram.send(group, ann, "never mind, both of you")
    await logged(process, CHAIN_ENDED)
    assert [said for said in scene_messages(telegram) if said[0] != ANN] == [(MIRA_ID, "Aki, what do you make of the fog?")]
    assert len(llm.requests) == 1
