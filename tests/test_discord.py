"""SPEC section 7 (Discord) — a real discord.Client against a loopback fake of Discord's gateway
and REST API, and the scripted LLM server."""

import asyncio
import json
import logging
import time

import discord
import pytest

from adapters.discord.adapter import DiscordAdapter
from adapters.settings import DiscordSettings
from adapters.splitting import open_fence
from bot.access.rules import AccessRules
from bot.commands.table import TABLE
from bot.config import parse_config
from bot.contract import ConversationKey
from bot.runtime import build_runtime
from tests.conftest import RunningAdapters, adapter_settings, config_dict, eventually
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text, tool_calls

ANN = FakeDiscord.user("900000000000000001", "Ann")
BOB = FakeDiscord.user("900000000000000002", "Bob")
ANN_DM = "910000000000000001"


@pytest.fixture
async def discord_fake():
    fake = FakeDiscord()
    await fake.start()
    with fake.patched():
        yield fake
    await fake.stop()


@pytest.fixture
async def running():
    adapters = RunningAdapters()
    yield adapters
    await adapters.stop_all()


@pytest.fixture
async def start(discord_fake, llm, tmp_path, monkeypatch, clock, running):
    """Starts the Discord adapter on a config (changed by `adjust`); stops it after the test."""

    async def start_with(adjust=lambda raw: None):
        monkeypatch.setenv("MIRA_DISCORD_TOKEN", "discord-test-token-123")
        raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
        raw["characters"][0]["discord_token_env"] = "MIRA_DISCORD_TOKEN"
        raw["characters"][0]["discord_always_on_channels"] = [int(discord_fake.always_on_id)]
        adjust(raw)
        config = parse_config(raw, tmp_path)
        runtime = await build_runtime(config, clock=clock)
        adapter = DiscordAdapter(runtime.core, "Mira", adapter_settings(config, DiscordSettings))
        running.start(runtime, adapter)
        await asyncio.wait_for(discord_fake.identified.wait(), 10)
        # discord.py reports "ready" 2 s after the last guild arrives; events flow as soon as it is cached.
        await discord_fake.wait_for(lambda: adapter.client.get_guild(int(discord_fake.guild_id)))
        return runtime
    return start_with


@pytest.fixture
async def bot(start):
    return await start()


async def handled() -> None:
    """Every event discord.py has received so far has been handled to the end: it runs each in a
    task of its own ("discord.py: on_…" for a gateway event, "CommandTree-invoker" for a slash
    command, "discord-ui-…" for a component), and each of those is done."""
    while running := [task for task in asyncio.all_tasks() if not task.done()
                      and task.get_name().startswith(("discord.py: on_", "CommandTree-invoker", "discord-ui-"))]:
        await asyncio.wait_for(asyncio.wait(running), 30)


async def bot_reply(fake: FakeDiscord, channel_id: str, count: int = 1):
    """The bot's messages in the channel once `count` are there (a slash command's answers are
    not among them) and the events that made them are handled to the end."""
    def sent() -> list:
        return [m for m in fake.in_channel(channel_id) if m.author_id == fake.app_id and m.interaction_token is None]
    await fake.wait_for(lambda: len(sent()) >= count)
    await handled()  # the reply is whole, and nothing more comes of the message
    return sent()


async def answer(fake: FakeDiscord, interaction: dict):
    """The private answer to a slash command (its follow-up after the deferral)."""
    await fake.wait_for(lambda: [m for m in fake.for_interaction(interaction) if m.content])
    await handled()
    return [m for m in fake.for_interaction(interaction) if m.content][-1]


async def test_a_mention_in_a_channel_is_answered(bot, discord_fake, llm):
    llm.add(text("Hello Ann, welcome to the harbour."))
    await discord_fake.say(discord_fake.channel_id, ANN, "hello there", mention_bot=True)
    reply, = await bot_reply(discord_fake, discord_fake.channel_id)
    assert reply.content == "Hello Ann, welcome to the harbour."
    assert [b["label"] for b in reply.buttons()] == ["🔄 Regenerate"]
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "Ann: hello there"}
    assert any(r[1].endswith("typing") for r in discord_fake.requests)


async def test_commands_are_synced_at_start_up(bot, discord_fake):
    names = {c["name"]: c for c in discord_fake.commands}
    assert set(names) == {"memory", "persona", "link", "forgetme", "checkins", "timezone", "reminders", "scene",
                          "image", "usage", "stats", "Remember this"}
    assert {o["name"] for o in names["persona"]["options"]} == {"set", "view", "clear"}  # SPEC 17
    subcommands = {o["name"]: o for o in names["memory"]["options"]}
    assert set(subcommands) == {"view", "add", "edit", "delete", "pin", "unpin", "clear", "summary", "rebuild",
                                "learning", "generate", "save", "why", "export", "page"}
    add_options = {o["name"]: o for o in subcommands["add"]["options"]}
    assert [c["value"] for c in add_options["scope"]["choices"]] == ["character", "global"]
    assert list(add_options) == ["text", "scope", "pin", "character"]  # in a scene: which character (SPEC 15)
    assert not add_options["character"].get("required")
    assert {o["name"] for o in subcommands["edit"]["options"]} == {"id", "text", "character"}
    assert {o["name"] for o in subcommands["learning"]["options"]} == {"state", "character"}
    assert {o["name"] for o in subcommands["generate"]["options"]} == {"description", "character"}
    assert {o["name"] for o in subcommands["save"]["options"]} == {"n", "character"}
    assert names["Remember this"]["type"] == 3  # a message context menu


async def test_the_synced_slash_command_tree_is_the_command_table(bot, discord_fake):
    """Every Discord command, option, type, range and choice comes from bot/commands/table.py."""
    def option(spec):
        kind = 3 if spec.kind == "text" and not spec.choices else 4 if spec.kind == "number" else \
            5 if spec.kind == "yes_no" else 3
        shown = {"name": spec.name, "description": spec.description, "type": kind, "required": spec.required}
        if spec.choices:
            shown["choices"] = [c for c in spec.choices]
        if spec.low is not None:
            shown["min_value"] = spec.low
        if spec.high is not None:
            shown["max_value"] = spec.high
        return shown

    def synced_option(raw):
        shown = {k: raw[k] for k in ("name", "description", "type")} | {"required": raw.get("required", False)}
        if "choices" in raw:
            shown["choices"] = [c["value"] for c in raw["choices"]]
        shown |= {k: raw[k] for k in ("min_value", "max_value") if k in raw}
        return shown

    synced = {c["name"]: c for c in discord_fake.commands}
    expected = {}
    for spec in TABLE:
        if not spec.offered_on("discord"):
            continue
        if spec.message_menu:
            expected[spec.message_menu] = "message menu"
        elif spec.subcommands:
            expected[spec.name] = {sub.name: (sub.description, [option(o) for o in sub.options])
                                   for sub in spec.subcommands}
        else:
            expected[spec.name] = (spec.description, [option(o) for o in spec.options])
    assert set(synced) == set(expected)
    for name, want in expected.items():
        got = synced[name]
        if want == "message menu":
            assert got["type"] == 3
        elif isinstance(want, dict):
            assert {sub["name"]: (sub["description"], sorted((synced_option(o) for o in sub.get("options", [])),
                                                             key=lambda o: not o["required"]))
                    for sub in got["options"]} == {
                k: (d, sorted(opts, key=lambda o: not o["required"])) for k, (d, opts) in want.items()}
        else:
            assert (got["description"], [synced_option(o) for o in got.get("options", [])]) == want


async def test_a_message_not_addressed_to_the_bot_is_ignored(bot, discord_fake, llm):
    await discord_fake.say(discord_fake.channel_id, ANN, "just talking to friends")
    await discord_fake.say(discord_fake.channel_id, ANN, "hello there", mention_bot=True)
    replies = await bot_reply(discord_fake, discord_fake.channel_id)  # handled after the first one
    assert len(replies) == 1 and len(llm.requests) == 1
    assert "just talking to friends" not in llm.prompt_text()


async def test_every_message_in_an_always_on_channel_is_answered(bot, discord_fake, llm):
    await discord_fake.say(discord_fake.always_on_id, ANN, "no mention needed here")
    reply, = await bot_reply(discord_fake, discord_fake.always_on_id)
    assert reply.content == "Okay."


async def test_in_an_always_on_channel_a_message_mentioning_another_bot_is_left_to_that_bot(bot, discord_fake, llm):
    aki_bot = {**FakeDiscord.user("900000000000000081", "Aki"), "bot": True}  # a character on its own account
    to_aki = discord_fake.message_payload(discord_fake.always_on_id, ANN, "<@900000000000000081> your turn",
                                          mentions=[aki_bot])
    await discord_fake.dispatch("MESSAGE_CREATE", to_aki)
    await discord_fake.say(discord_fake.always_on_id, ANN, "and hello to everyone")
    replies = await bot_reply(discord_fake, discord_fake.always_on_id)  # handled after the one before it
    assert len(replies) == 1 and len(llm.requests) == 1
    assert "your turn" not in llm.prompt_text()


async def test_a_bot_stopped_before_discord_says_it_is_ready_stops_at_once(bot, running):
    started = time.monotonic()  # discord.py says ready 2 s after the last server arrived: not yet
    await running.stop_all()
    assert time.monotonic() - started < 1.0


async def test_a_dm_is_answered(bot, discord_fake, llm):
    llm.add(text("Just us here."))
    await discord_fake.say(ANN_DM, ANN, "hi in private", guild=False)
    reply, = await bot_reply(discord_fake, ANN_DM)
    assert reply.content == "Just us here."
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "hi in private"}


async def test_stickers_alone_get_one_line_naming_each_and_with_words_the_words_are_answered(bot, discord_fake, llm):
    await discord_fake.say(ANN_DM, ANN, "", guild=False, stickers=("wave", "heart"))
    line, = await bot_reply(discord_fake, ANN_DM)
    assert line.content.startswith("I can't see 2 stickers — I can only read text.")
    llm.add(text("Waving back!"))
    await discord_fake.say(ANN_DM, ANN, "hello!", guild=False, stickers=("wave",))
    await bot_reply(discord_fake, ANN_DM, count=2)
    assert "came with a sticker, which you cannot see" in llm.prompt_text()
    assert len(llm.requests) == 1


async def test_a_reply_to_the_bot_is_answered(bot, discord_fake, llm):
    await discord_fake.say(discord_fake.channel_id, ANN, "first", mention_bot=True)
    first, = await bot_reply(discord_fake, discord_fake.channel_id)
    await discord_fake.say(discord_fake.channel_id, ANN, "answering you", reply_to=first)
    await bot_reply(discord_fake, discord_fake.channel_id, count=2)
    assert llm.requests[-1]["messages"][-1]["content"] == "Ann: answering you"


async def test_a_thread_is_its_own_conversation_and_inherits_always_on(bot, discord_fake, llm):
    thread = discord_fake.thread(discord_fake.always_on_id)
    await discord_fake.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
    await discord_fake.say(discord_fake.always_on_id, ANN, "in the channel: the password is swordfish")
    await bot_reply(discord_fake, discord_fake.always_on_id)
    await discord_fake.say(thread["id"], ANN, "in the thread, no mention")
    await bot_reply(discord_fake, thread["id"])
    thread_prompt = llm.prompt_text()
    assert "in the thread, no mention" in thread_prompt and "swordfish" not in thread_prompt


async def test_memory_add_view_pin_and_clear_with_both_confirmations(bot, discord_fake):
    channel = discord_fake.channel_id
    added = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "add",
                                                                text="I am allergic to peanuts"))
    assert added.ephemeral and added.content.startswith("Saved #1")
    await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "add", text="My sister is Kari",
                                                        scope="global", pin=True))
    view = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "view"))
    assert view.ephemeral
    assert "📌 #2 · global · recent — My sister is Kari" in view.content
    deferral = discord_fake.callbacks[-1]
    assert deferral["type"] == 5 and deferral["data"]["flags"] == 64  # deferred, ephemeral

    await discord_fake.click(ANN, view, "Pin #1")
    await discord_fake.wait_for(lambda: "Pinned #1" in view.content)
    assert view.content.count("📌") == 2

    await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "add", text="I live in Bergen"))
    clear = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "clear"))
    assert "Delete your 1 unpinned character memory?" in clear.content
    await discord_fake.click(ANN, clear, "Delete 1")
    await discord_fake.wait_for(lambda: "protected from the AI" in clear.content)
    await discord_fake.click(ANN, clear, "Delete pinned too")
    await discord_fake.wait_for(lambda: "Deleted 1 pinned character memory." in clear.content)
    left = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "view"))
    assert "My sister is Kari" in left.content and "peanuts" not in left.content  # global scope untouched


async def test_memory_page_answers_with_an_ephemeral_one_time_link(start, discord_fake):
    """SPEC 21: on Discord the link is shown only to the person who asked (ephemeral)."""
    await start(lambda raw: raw.update({"web": {"port": 8080}}))
    page = await answer(discord_fake, await discord_fake.slash(ANN, discord_fake.channel_id, "memory", "page"))
    assert page.ephemeral and page.content.startswith("Your memory page: http://127.0.0.1:8080/open/")


async def test_bad_input_to_a_slash_command_gets_a_clear_private_answer(bot, discord_fake):
    result = await answer(discord_fake, await discord_fake.slash(ANN, discord_fake.channel_id, "memory", "add",
                                                                 text="x" * 501))
    assert result.ephemeral and "501 characters" in result.content and "at most 500" in result.content
    missing = await answer(discord_fake, await discord_fake.slash(ANN, discord_fake.channel_id, "memory", "delete",
                                                                  id=4242))
    assert missing.content == "There is no memory #4242."


async def test_remember_this_on_a_message_saves_it_pinned(bot, discord_fake, llm):
    llm.add(text("A lighthouse needs a keeper."))
    await discord_fake.say(discord_fake.channel_id, ANN, "why are you here?", mention_bot=True)
    reply, = await bot_reply(discord_fake, discord_fake.channel_id)
    target = discord_fake.message_payload(reply.channel_id, discord_fake.bot, reply.content, message_id=reply.id)
    picked = await answer(discord_fake, await discord_fake.context_menu(ANN, target))
    assert picked.ephemeral and "> Mira: A lighthouse needs a keeper." in picked.content
    await discord_fake.click(ANN, picked, "Use as-is")
    await discord_fake.wait_for(lambda: "(pinned)" in picked.content)
    assert "📌" in (await answer(discord_fake, await discord_fake.slash(ANN, reply.channel_id, "memory", "view"))).content


async def test_remember_this_on_a_later_part_of_a_split_reply_picks_the_whole_reply(bot, discord_fake, llm):
    llm.add(text("The lamp was lit at dusk. " * 100))  # 2,600 characters: two Discord messages of ≤ 2,000
    await discord_fake.say(discord_fake.channel_id, ANN, "tell me everything", mention_bot=True)
    first, second = await bot_reply(discord_fake, discord_fake.channel_id, count=2)
    target = discord_fake.message_payload(second.channel_id, discord_fake.bot, second.content, message_id=second.id)
    picked = await answer(discord_fake, await discord_fake.context_menu(ANN, target))
    assert "> Mira: The lamp was lit at dusk." in picked.content


async def test_regenerate_pressed_by_the_right_and_by_the_wrong_person(bot, discord_fake, llm):
    llm.add(text("First answer."), text("Second answer."))
    await discord_fake.say(discord_fake.channel_id, ANN, "tell me about the storm", mention_bot=True)
    reply, = await bot_reply(discord_fake, discord_fake.channel_id)
    await discord_fake.click(BOB, reply, "🔄 Regenerate")
    refused = await discord_fake.wait_for(lambda: [c for c in discord_fake.callbacks if c["type"] == 4])
    assert refused[0]["data"]["content"] == "Only the person this reply answered can regenerate it."
    assert refused[0]["data"]["flags"] == 64
    assert reply.content == "First answer."

    await discord_fake.click(ANN, reply, "🔄 Regenerate")
    await discord_fake.wait_for(lambda: reply.content == "Second answer.")
    assert [m.content for m in discord_fake.in_channel(discord_fake.channel_id)
            if m.author_id == discord_fake.app_id and not m.ephemeral] == ["Second answer."]


async def test_the_button_is_removed_from_older_replies(bot, discord_fake, llm):
    await discord_fake.say(discord_fake.channel_id, ANN, "one", mention_bot=True)
    first, = await bot_reply(discord_fake, discord_fake.channel_id)
    await discord_fake.say(discord_fake.channel_id, ANN, "two", mention_bot=True)
    first, second = await bot_reply(discord_fake, discord_fake.channel_id, count=2)
    assert first.buttons() == [] and [b["label"] for b in second.buttons()] == ["🔄 Regenerate"]


async def test_a_5000_character_reply_with_a_code_block_is_split_with_balanced_fences(bot, discord_fake, llm):
    code = "\n".join(f"    print('line {i}')" for i in range(230))
    long_reply = "Here is the script:\n\n```python\n" + code + "\n```\n\nThat is all. " + "Bye. " * 40
    assert len(long_reply) > 5_000
    llm.add(text(long_reply))
    await discord_fake.say(discord_fake.channel_id, ANN, "write me a script", mention_bot=True)
    chunks = await bot_reply(discord_fake, discord_fake.channel_id, count=3)
    assert len(chunks) >= 3
    assert all(len(c.content) <= 2_000 and open_fence(c.content) is None for c in chunks)
    assert [b["label"] for b in chunks[-1].buttons()] == ["🔄 Regenerate"]


async def test_a_reply_of_2000_characters_is_one_message_and_one_of_2001_is_two(bot, discord_fake, llm):
    channel = discord_fake.channel_id
    llm.add(text("a" * 2_000), text("b" * 2_001))  # no boundary to split at: cut at the limit
    await discord_fake.say(channel, ANN, "say a lot", mention_bot=True)
    assert [len(m.content) for m in await bot_reply(discord_fake, channel)] == [2_000]
    await discord_fake.say(channel, ANN, "say more", mention_bot=True)
    second = [m.content for m in await bot_reply(discord_fake, channel, count=3)][1:]
    assert len(second) == 2 and all(len(part) <= 2_000 for part in second) and "".join(second) == "b" * 2_001


async def test_model_output_can_never_ping_anyone(bot, discord_fake, llm):
    llm.add(text("Hey @everyone and @here, <@&1> and <@2>!"))
    await discord_fake.say(discord_fake.channel_id, ANN, "say hi to all", mention_bot=True)
    await bot_reply(discord_fake, discord_fake.channel_id)
    sent = [body for method, path, body in discord_fake.requests
            if path.endswith("/messages") or "/messages/" in path]
    assert sent and all(body.get("allowed_mentions", {}).get("parse") == [] for body in sent if "content" in body)
    assert all(not body.get("allowed_mentions", {}).get("users") and not body.get("allowed_mentions", {}).get("roles")
               for body in sent)


async def test_anns_memories_never_reach_bobs_prompt_nor_any_public_message(bot, discord_fake, llm):
    channel = discord_fake.channel_id
    await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "add",
                                                        text="Ann's secret: she fears the dark", pin=True))
    llm.add(text("Hello, Ann."), text("Hello, Bob."))
    await discord_fake.say(channel, ANN, "hello!", mention_bot=True)
    got = await bot_reply(discord_fake, channel)
    assert llm.requests, [(m.content, m.ephemeral, m.interaction_token) for m in got]
    assert "fears the dark" in llm.prompt_text()
    await discord_fake.say(channel, BOB, "what do you know about Ann?", mention_bot=True)
    await bot_reply(discord_fake, channel, count=2)
    assert "fears the dark" not in llm.prompt_text()
    await answer(discord_fake, await discord_fake.slash(BOB, channel, "memory", "view"))
    public = [m.content for m in discord_fake.messages if not m.ephemeral]
    assert not any("fears the dark" in c for c in public)
    bobs = [m.content for m in discord_fake.messages if m.interaction_token and any(
        i["token"] == m.interaction_token for i in discord_fake.interactions[-1:])]
    assert not any("fears the dark" in c for c in bobs)


async def test_editing_and_deleting_a_message_updates_the_store(bot, discord_fake, llm):
    original = await discord_fake.say(ANN_DM, ANN, "I live in Bergen", guild=False)
    await bot_reply(discord_fake, ANN_DM)
    await discord_fake.edit(original, "I live in Oslo")
    doomed = await discord_fake.say(ANN_DM, ANN, "my PIN is 1234", guild=False)
    await bot_reply(discord_fake, ANN_DM, count=2)
    await discord_fake.delete(doomed)

    async def stored() -> list[str]:
        key = ConversationKey("discord", ANN_DM, None, "Mira", is_shared=False)
        conversation = await bot.cast.conversation_for(key)
        return [m.content for m in await bot.store.conversations.recent_messages(conversation.id, 10)]

    for _ in range(100):
        contents = await stored()
        if "I live in Oslo" in contents and "my PIN is 1234" not in contents:
            break
        await asyncio.sleep(0.05)
    assert "I live in Oslo" in contents and "my PIN is 1234" not in contents
    await discord_fake.say(ANN_DM, ANN, "where do I live?", guild=False)
    await bot_reply(discord_fake, ANN_DM, count=3)
    prompt = llm.prompt_text()
    assert "I live in Oslo" in prompt and "Bergen" not in prompt and "1234" not in prompt


async def test_memory_export_is_an_attached_json_file(bot, discord_fake):
    channel = discord_fake.channel_id
    await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "add", text="I collect sea glass"))
    exported = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "export"))
    assert exported.ephemeral
    data = json.loads(exported.attachments[0]["data"])
    assert data["memories"][0]["content"] == "I collect sea glass"


async def test_a_summary_entry_is_edited_in_a_modal(bot, discord_fake, llm):
    runtime = bot
    conversation = (await runtime.store.conversations.conversation("discord", ANN_DM, None,
                                                     runtime.cast.character("Mira").id, False)).id
    entry = await runtime.store.summaries.write_summary(conversation, 0, "recent", "- Ann said hello.", 5, 2, 2, [])
    summary = await answer(discord_fake, await discord_fake.slash(ANN, ANN_DM, "memory", "summary", guild=False))
    assert "- Ann said hello." in summary.content
    await discord_fake.click(ANN, summary, f"Edit S{entry.id}", guild=False)
    modal = (await discord_fake.wait_for(lambda: [c for c in discord_fake.callbacks if c["type"] == 9]))[0]
    await discord_fake.submit_modal(ANN, modal["data"], "Ann and Mira agreed to meet at 9.", ANN_DM, guild=False)
    await discord_fake.wait_for(lambda: any("now reads as you wrote it" in m.content for m in discord_fake.messages))
    assert (await runtime.store.summaries.summaries(conversation))[0].content == "Ann and Mira agreed to meet at 9."


async def test_the_character_saving_a_memory_from_a_discord_message(bot, discord_fake, llm):
    llm.add(tool_calls(("save_memory", {"content": "Ann works night shifts"})), text("Noted, night owl."))
    await discord_fake.say(ANN_DM, ANN, "I work night shifts", guild=False)
    reply, = await bot_reply(discord_fake, ANN_DM)
    assert reply.content == "Noted, night owl."
    view = await answer(discord_fake, await discord_fake.slash(ANN, ANN_DM, "memory", "view", guild=False))
    assert "Ann works night shifts" in view.content


async def test_bot_and_webhook_authors_are_not_answered_and_nothing_is_stored_for_them(bot, discord_fake, llm):
    webhook = {**FakeDiscord.user("900000000000000077", "Announcer"), "bot": True}
    posted = discord_fake.message_payload(discord_fake.always_on_id, webhook, "hello everyone")
    await discord_fake.dispatch("MESSAGE_CREATE", {**posted, "webhook_id": "900000000000000078"})
    await discord_fake.dispatch("MESSAGE_CREATE", {**posted, "id": "900000000000000079",
                                                   "author": {**webhook, "bot": False},
                                                   "webhook_id": "900000000000000078"})
    await discord_fake.say(discord_fake.always_on_id, ANN, "and a person says hi")
    replies = await bot_reply(discord_fake, discord_fake.always_on_id)  # handled after the two before it
    assert len(replies) == 1 and len(llm.requests) == 1
    assert "hello everyone" not in llm.prompt_text()
    key = ConversationKey("discord", discord_fake.always_on_id, None, "Mira", is_shared=True)
    stored = await bot.store.conversations.recent_messages((await bot.cast.conversation_for(key)).id, 10)
    assert [m.speaker_name for m in stored if m.role == "user"] == ["Ann"]


async def stored_in_anns_dm(bot) -> list[str]:
    conversation = await bot.cast.conversation_for(ConversationKey("discord", ANN_DM, None, "Mira", is_shared=False))
    return [m.content for m in reversed(await bot.store.conversations.recent_messages(conversation.id, 10))]


async def test_messages_a_moderator_deletes_at_once_go_from_the_store(bot, discord_fake, llm):
    said = []
    for words in ("my address is 12 Harbour Lane", "and my phone is 555 0100", "the lamp is lit"):
        said.append(await discord_fake.say(discord_fake.channel_id, BOB, words, mention_bot=True))
        await bot_reply(discord_fake, discord_fake.channel_id, count=len(said))
    await discord_fake.delete_many(*said[:2])

    async def kept() -> list[str]:
        key = ConversationKey("discord", discord_fake.channel_id, None, "Mira", is_shared=True)
        conversation = await bot.cast.conversation_for(key)
        return [m.content for m in await bot.store.conversations.recent_messages(conversation.id, 10)
                if m.role == "user"]
    async def only_the_last() -> bool:
        return await kept() == ["the lamp is lit"]
    await eventually(only_the_last)


async def test_an_edit_keeps_what_came_with_the_message_a_text_file_read_in_and_a_picture_named(
        bot, discord_fake, llm):
    original = await discord_fake.say(ANN_DM, ANN, "read this", guild=False, attachments=(
        ("notes.txt", "text/plain", b"The spare key is under the third stone."),
        ("boat.png", "image/png", b"not really a picture")))
    await bot_reply(discord_fake, ANN_DM)
    await discord_fake.edit(original, "read this, please")
    kept = "[an image] read this, please\n\n[file: notes.txt]\nThe spare key is under the third stone."
    await eventually(lambda: _first_is(stored_in_anns_dm(bot), kept))


async def test_an_edit_of_a_message_to_no_character_fetches_none_of_its_files(bot, discord_fake, llm):
    original = await discord_fake.say(discord_fake.channel_id, BOB, "for the team", attachments=(
        ("minutes.txt", "text/plain", b"Nothing for the bot."),))
    await discord_fake.edit(original, "for the whole team")
    await eventually(lambda: bot.store.conversations.conversation_by_id(1))  # the edit was taken up
    await discord_fake.say(ANN_DM, ANN, "hello", guild=False)
    await bot_reply(discord_fake, ANN_DM)  # events are handled in order: the edit's are done
    assert discord_fake.fetched == []


async def test_discords_own_update_of_a_message_a_links_preview_is_no_edit(bot, discord_fake, llm):
    original = await discord_fake.say(ANN_DM, ANN, "see https://example.org", guild=False,
                                      attachments=(("notes.txt", "text/plain", b"Boats at noon."),))
    await bot_reply(discord_fake, ANN_DM)
    preview = {"type": "link", "url": "https://example.org", "title": "Example"}
    await discord_fake.dispatch("MESSAGE_UPDATE", {**original, "embeds": [preview]})  # edited_timestamp: none
    await discord_fake.edit(original, "see https://example.org/boats")
    await eventually(lambda: _first_is(stored_in_anns_dm(bot), "see https://example.org/boats\n\n[file: notes.txt]\n"
                                                                "Boats at noon."))
    assert len(discord_fake.fetched) == 2  # read when it came and when Ann edited it, never for the preview


async def _first_is(read, expected: str) -> bool:
    return (await read)[0] == expected


async def test_an_edit_in_a_server_channel_before_any_turn_leaves_the_conversation_shared(bot, discord_fake, llm):
    original = discord_fake.message_payload(discord_fake.channel_id, ANN, "a message from before the bot came")
    await discord_fake.edit(original, "edited before any turn here")
    await eventually(lambda: bot.store.conversations.conversation_by_id(1))  # the edit looked it up
    assert (await bot.store.conversations.conversation_by_id(1)).is_shared
    await discord_fake.say(discord_fake.channel_id, ANN, "hello there", mention_bot=True)
    await bot_reply(discord_fake, discord_fake.channel_id)
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "Ann: hello there"}  # group framing
    reply_turn = await bot.store.turns.turn(1)
    assert (await bot.store.conversations.conversation_by_id(reply_turn.conversation_id)).is_shared


async def test_a_process_runs_the_shards_the_config_gives_it(discord_fake, llm, tmp_path, monkeypatch, clock):
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["discord"] = {"shard_count": 2, "shard_ids": [1]}
    raw["characters"][0]["discord_token_env"] = "MIRA_DISCORD_TOKEN"
    monkeypatch.setenv("MIRA_DISCORD_TOKEN", "discord-test-token-123")
    config = parse_config(raw, tmp_path)
    runtime = await build_runtime(config, clock=clock)
    adapter = DiscordAdapter(runtime.core, "Mira", adapter_settings(config, DiscordSettings))
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    try:
        await asyncio.wait_for(discord_fake.identified.wait(), 10)
        assert [i.get("shard") for i in discord_fake.identifies] == [[1, 2]]
        await discord_fake.wait_for(lambda: adapter.client.get_guild(int(discord_fake.guild_id)))
        llm.add(text("Hello from shard 1."))
        await discord_fake.say(discord_fake.channel_id, ANN, "hello there", mention_bot=True)
        reply, = await bot_reply(discord_fake, discord_fake.channel_id)
        assert reply.content == "Hello from shard 1."
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await runtime.close()


async def test_slash_commands_are_synced_by_one_process_and_not_again_while_unchanged(discord_fake, llm, tmp_path,
                                                                                       monkeypatch, clock):
    monkeypatch.setenv("MIRA_DISCORD_TOKEN", "discord-test-token-123")
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0]["discord_token_env"] = "MIRA_DISCORD_TOKEN"
    config = parse_config(raw, tmp_path)
    for start in range(2):  # a second process (or a restart) on the same database
        runtime = await build_runtime(config, clock=clock)
        adapter = DiscordAdapter(runtime.core, "Mira", adapter_settings(config, DiscordSettings))
        discord_fake.identified.clear()
        stop = asyncio.Event()
        task = asyncio.create_task(adapter.run(stop))
        await asyncio.wait_for(discord_fake.identified.wait(), 10)
        stop.set()
        await asyncio.wait_for(task, 10)
        await runtime.close()
    assert discord_fake.command_syncs == 1
    assert "memory" in {c["name"] for c in discord_fake.commands}


async def test_access_is_checked_for_slash_commands_buttons_and_remember_this(start, discord_fake, llm):
    """Bob is denied: his slash command, his press of Ann's button and his "Remember this" get
    the private "not able to talk" line and change nothing."""
    from bot.contract import NOT_ALLOWED

    runtime = await start(lambda raw: raw.update({"access": {"deny": [f"discord:{BOB['id']}"]}}))
    channel = discord_fake.channel_id
    refused = await answer(discord_fake, await discord_fake.slash(BOB, channel, "memory", "add", text="I am Bob"))
    assert refused.ephemeral and refused.content == NOT_ALLOWED
    view = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "add", text="Ann's fact"))
    listing = await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "view"))
    pressed = await discord_fake.click(BOB, listing, "Delete #1")
    await discord_fake.wait_for(lambda: any(m.content == NOT_ALLOWED for m in discord_fake.for_interaction(pressed)))
    llm.add(text("Hello Ann."))
    await discord_fake.say(channel, ANN, "hello", mention_bot=True)
    reply, = await discord_fake.wait_for(lambda: [m for m in discord_fake.in_channel(channel) if m.content == "Hello Ann."])
    target = discord_fake.message_payload(reply.channel_id, discord_fake.bot, reply.content, message_id=reply.id)
    remembered = await answer(discord_fake, await discord_fake.context_menu(BOB, target))
    assert remembered.content == NOT_ALLOWED
    assert "Ann's fact" in (await answer(discord_fake, await discord_fake.slash(ANN, channel, "memory", "view"))).content
    bob = await runtime.store.people.person_for_identity("discord", BOB["id"])
    assert await runtime.store.memories.count_memories(bob, 1, "character", False) == 0
    assert view.content.startswith("Saved #1")


async def test_a_role_denied_in_a_server_is_denied_in_dms_too(start, discord_fake, llm):
    from bot.contract import NOT_ALLOWED

    await start(lambda raw: raw.update({"access": {"deny": [f"discord-role:{discord_fake.role_id}"]}}))
    discord_fake.member_roles[BOB["id"]] = (discord_fake.role_id,)  # Bob has the role in the shared server
    discord_fake.member_roles[ANN["id"]] = ()
    await discord_fake.say("920000000000000002", BOB, "hello in private", guild=False)
    refused, = await bot_reply(discord_fake, "920000000000000002")
    assert refused.content == NOT_ALLOWED
    llm.add(text("Hello Ann."))
    await discord_fake.say(ANN_DM, ANN, "hello in private", guild=False)
    answered, = await bot_reply(discord_fake, ANN_DM)
    assert answered.content == "Hello Ann."
    slash = await answer(discord_fake, await discord_fake.slash(BOB, "920000000000000002", "memory", "view", guild=False))
    assert slash.content == NOT_ALLOWED


async def test_a_check_in_reaches_the_dm_with_its_button_and_a_closed_dm_gets_none(start, discord_fake, llm, clock):
    """SPEC 14 through discord.py: the check-in is sent in the DM with "🔕 Don't write first",
    which turns check-ins off; a person Discord will not let the bot write to (50007) gets none."""
    runtime = await start(lambda raw: raw["characters"][0].update(checkins={"after_hours": 48}))
    bob_dm = "910000000000000002"
    for channel, person in ((ANN_DM, ANN), (bob_dm, BOB)):
        for n in range(4):
            await discord_fake.say(channel, person, f"hello {n}", guild=False)
            await bot_reply(discord_fake, channel, n + 1)
    discord_fake.closed_dms.add(bob_dm)
    clock.now += 49 * 3600
    llm.add(text("How did the tomatoes do, Ann?"))
    assert await runtime.checkins.scan("Mira") == 1
    checkin = discord_fake.in_channel(ANN_DM)[-1]
    assert checkin.content == "How did the tomatoes do, Ann?"
    assert [b["label"] for b in checkin.buttons()] == ["🔕 Don't write first"]
    assert "How did the tomatoes do, Ann?" not in [m.content for m in discord_fake.in_channel(bob_dm)]

    await discord_fake.click(ANN, checkin, "🔕 Don't write first", guild=False)
    await discord_fake.wait_for(lambda: any("won't write first" in (m.content or "") for m in discord_fake.messages))
    assert checkin.content == "How did the tomatoes do, Ann?" and not checkin.buttons()  # its own line; the text stays
    discord_fake.closed_dms.discard(bob_dm)  # Bob opens his DMs again, but has not written
    clock.now += 100 * 3600
    calls = len(llm.requests)
    assert await runtime.checkins.scan("Mira") == 0  # Ann said no; Bob's refusal switched his off
    assert len(llm.requests) == calls


async def test_a_check_in_asks_the_gate_about_the_person_as_discord_describes_them(start, discord_fake, llm, clock):
    """SPEC 14: someone `[access]` denies gets no check-in (and no model call is made for it)."""
    runtime = await start(lambda raw: raw["characters"][0].update(checkins={"after_hours": 48}))
    for n in range(4):
        await discord_fake.say(ANN_DM, ANN, f"hello {n}", guild=False)
        await bot_reply(discord_fake, ANN_DM, n + 1)
    runtime.gate.access = AccessRules(deny=frozenset({f"discord:{ANN['id']}"}))  # [access] deny, as of now
    clock.now += 49 * 3600
    calls = len(llm.requests)
    assert await runtime.checkins.scan("Mira") == 0 and len(llm.requests) == calls


async def test_the_log_says_discord_is_online_and_warns_of_no_voice_support(start, discord_fake, caplog):
    """What a person starting the bot reads: an "online as" line like Telegram's, and no warning
    about voice, which characters never use."""
    caplog.set_level(logging.INFO)
    await start()
    await discord_fake.wait_for(lambda: "Discord: Mira is online as Mira" in caplog.text)
    assert "PyNaCl" not in caplog.text and "voice will NOT be supported" not in caplog.text
    # #36: the invite link with exactly the permissions the README lists (no Manage Webhooks: not a host)
    wanted = discord.Permissions(view_channel=True, read_message_history=True, send_messages=True,
                                 send_messages_in_threads=True, attach_files=True, send_voice_messages=True)
    assert (f"https://discord.com/oauth2/authorize?client_id={discord_fake.app_id}"
            f"&scope=bot+applications.commands&permissions={wanted.value}") in caplog.text
