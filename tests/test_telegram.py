"""SPEC section 7 (Telegram) — a real python-telegram-bot Application against a fake Bot API
server on 127.0.0.1, and the scripted LLM server."""

import asyncio
import contextlib
import io
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from PIL import Image

from adapters.settings import TelegramSettings
from adapters.streaming import ThrottledStream
from adapters.telegram.adapter import TelegramAdapter
from bot.access.rules import AccessRules
from bot.commands.table import TABLE
from bot.config import parse_config
from bot.contract import AlbumItem, ConversationKey, Core
from bot.runtime import build_runtime
from tests.conftest import (
    RunningAdapters,
    adapter_settings,
    config_dict,
    eventually,
    offers_memory_tools,
    telegram_runtime,
)
from tests.fakes.llm_server import text, tool_calls
from tests.fakes.telegram_server import FakeTelegram, parse_html

ANN, BOB = 501, 502
GROUP = -100777


@pytest.fixture
async def start(telegram, llm, tmp_path, monkeypatch, clock):
    """Starts the Telegram adapter (polling) on a config changed by `adjust`; stops it after."""
    running = RunningAdapters()

    async def start_with(adjust=lambda raw: None):
        runtime, adapter = await telegram_runtime(telegram, llm, tmp_path, monkeypatch, clock, adjust)
        running.start(runtime, adapter)
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"))
        telegram.polled_by.append(adapter.application)
        return runtime
    yield start_with
    await running.stop_all()


@pytest.fixture
async def bot(start):
    return await start()


class Person:
    def __init__(self, telegram: FakeTelegram, user_id: int, name: str, chat_id: int | None = None):
        self.tg = telegram
        self.user = telegram.user(user_id, name)
        self.dm = telegram.chat(user_id)
        self.chat = telegram.chat(chat_id, "supergroup") if chat_id else self.dm

    def say(self, words: str, chat: dict | None = None, **kwargs) -> int:
        return self.tg.send(chat or self.chat, self.user, words, **kwargs)

    async def reply_to(self, message_id: int, count: int = 1, chat=None):
        """Wait until the bot has answered message_id with `count` messages; return them."""
        chat_id = (chat or self.chat)["id"]

        def answers():
            ids = [m.message_id for m in self.tg.chats[chat_id]]
            later = [m for m in self.tg.bot_messages(chat_id) if m.message_id > message_id]
            done = len(later) >= count and all(m.message_id in ids for m in later)
            return later if done else None
        await self.tg.wait_for(answers)
        await self.tg.settled()  # its handler has returned: the reply is whole, and nothing more comes
        return answers()

    async def dm_answer(self, after: int = 0):
        return (await self.tg.wait_for(
            lambda: [m for m in self.tg.bot_messages(self.dm["id"]) if m.message_id > after]))[-1]

    def press(self, message, label: str):
        button = next(b for b in message.buttons() if b["text"] == label)
        self.tg.press(self.tg.chat(message.chat_id, "private" if message.chat_id > 0 else "supergroup"),
                      self.user, message.message_id, button["callback_data"])


async def test_commands_are_published_with_set_my_commands_at_start_up(bot, telegram):
    commands = telegram.calls_to("setMyCommands")[0]["commands"]
    assert [c["command"] for c in commands] == ["start", "memory", "persona", "remember", "link", "forgetme", "checkins",
                                              "timezone", "reminders", "scene", "image", "usage", "stats", "help"]
    assert [(c["command"], c["description"]) for c in commands] == [
        (spec.name, spec.description) for spec in TABLE if spec.offered_on("telegram")]


async def test_help_lists_every_command_of_the_table_with_its_options(bot, telegram):
    ann = Person(telegram, ANN, "Ann")
    shown, = await ann.reply_to(ann.say("/help"))
    for spec in TABLE:
        for leaf, path in [(sub, f"{spec.name} {sub.name}") for sub in spec.subcommands] or [(spec, spec.name)]:
            assert f"/{path}{' ' if leaf.usage() else ''}{leaf.usage()} — " in shown.text
    assert "/memory edit <id> <text> — change a memory" in shown.text
    assert "/memory learning <on|off> — " in shown.text


async def test_a_dm_is_answered_with_typing_and_a_regenerate_button(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("Hello Ann, welcome to the lighthouse."))
    asked = ann.say("hi Mira!")
    reply, = await ann.reply_to(asked)
    assert reply.text == "Hello Ann, welcome to the lighthouse."
    assert [b["text"] for b in reply.buttons()] == ["🔄 Regenerate"]
    assert telegram.calls_to("sendChatAction")[0]["action"] == "typing"
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "hi Mira!"}


async def test_start_greets_with_the_characters_first_message_which_the_model_then_sees(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    greeting, = await ann.reply_to(ann.say("/start"))
    assert greeting.text == "Hi Ann, I'm Mira."  # a persona without a card: the default greeting, by name
    await ann.reply_to(ann.say("/start"))  # again: the conversation already has its first message
    await ann.reply_to(ann.say("hello!"))
    chat = [m for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert chat[-2:] == [{"role": "assistant", "content": greeting.text}, {"role": "user", "content": "hello!"}]


async def test_start_writes_a_cards_time_words_where_the_person_is(start, telegram, tmp_path):
    """SPEC 19: the person's /timezone, else the deployment's; the test clock is 2027-01-15 08:00 UTC."""
    card = tmp_path / "nox.json"
    card.write_text(json.dumps({"spec": "chara_card_v3", "data": {"name": "Nox", "first_mes": "Today is {{isodate}}."}}))
    await start(lambda raw: (raw["characters"][0].pop("persona"), raw["characters"][0].update(card=str(card))))
    ann = Person(telegram, ANN, "Ann")
    greeting, = await ann.reply_to(ann.say("/start"))
    assert greeting.text == "Today is 2027-01-15."
    await ann.reply_to(ann.say("/timezone Pacific/Honolulu"))
    greeting, = await ann.reply_to(ann.say("/start"))
    assert greeting.text == "Today is 2027-01-14."


async def test_memory_add_view_pin_and_clear_with_both_confirmations(bot, telegram):
    ann = Person(telegram, ANN, "Ann")
    (await ann.reply_to(ann.say("/memory add I am allergic to peanuts")))
    (await ann.reply_to(ann.say("/memory add pin:yes My sister is Kari")))
    view, = await ann.reply_to(ann.say("/memory view"))
    assert "📌 #2 · character · recent — My sister is Kari" in view.text
    assert "#1 · character · recent — I am allergic to peanuts" in view.text

    ann.press(view, "Pin #1")
    await telegram.wait_for(lambda: "Pinned #1" in telegram.message(view.chat_id, view.message_id).text)
    assert telegram.message(view.chat_id, view.message_id).text.count("📌") == 2

    (await ann.reply_to(ann.say("/memory add I live in Bergen")))
    clear, = await ann.reply_to(ann.say("/memory clear"))
    assert "Delete your 1 unpinned character memory?" in clear.text
    ann.press(clear, "Delete 1")
    second = await telegram.wait_for(
        lambda: "protected from the AI" in telegram.message(clear.chat_id, clear.message_id).text
        and telegram.message(clear.chat_id, clear.message_id))
    ann.press(second, "Delete pinned too")
    await telegram.wait_for(
        lambda: "Deleted 2 pinned character memories." in telegram.message(clear.chat_id, clear.message_id).text)
    empty, = await ann.reply_to(ann.say("/memory view"))
    assert "no saved memories" in empty.text
    answered = telegram.calls_to("answerCallbackQuery")
    assert len(answered) == 3  # every press was answered


async def test_a_press_still_at_work_is_answered_before_telegram_forgets_it_and_its_result_still_shows(
        bot, telegram, monkeypatch):
    """Telegram forgets a press not answered within seconds (then "query is too old"): a
    /forgetme that waits for the daily backup under way is answered at once, and says it is done
    when it is."""
    monkeypatch.setattr("adapters.telegram.presses.PRESS_ANSWERED_WITHIN_S", 0.05)
    telegram.presses_kept_s = 1.0
    ann = Person(telegram, ANN, "Ann")
    asked, = await ann.reply_to(ann.say("/forgetme"))
    async with bot.store.backups.held():  # the daily backup under way: /forgetme waits for it
        ann.press(asked, "Delete everything")
        await telegram.wait_for(lambda: telegram.calls_to("answerCallbackQuery"))
        assert "Are you sure?" in telegram.message(ANN, asked.message_id).text  # still at work
    await telegram.wait_for(
        lambda: "Everything stored about you is deleted" in telegram.message(ANN, asked.message_id).text)
    assert len(telegram.calls_to("answerCallbackQuery")) == 1


async def test_a_press_that_fails_after_it_was_answered_says_so_below_the_pressed_message(bot, telegram, monkeypatch):
    """A press is answered once: one answered while still at work can no longer fail as an alert,
    so its failure is a reply to the message pressed."""
    monkeypatch.setattr("adapters.telegram.presses.PRESS_ANSWERED_WITHIN_S", 0.05)
    ann = Person(telegram, ANN, "Ann")
    asked, = await ann.reply_to(ann.say("/forgetme"))

    async def a_full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(bot.store.people, "_forget_here", a_full_disk)
    async with bot.store.backups.held():  # the daily backup under way: the press is answered meanwhile
        ann.press(asked, "Delete everything")
        await telegram.wait_for(lambda: telegram.calls_to("answerCallbackQuery"))
    said = await telegram.wait_for(lambda: [m for m in telegram.bot_messages(ANN) if m.reply_to == asked.message_id])
    assert said[0].text == "Sorry, something went wrong on my side handling that. Try again."
    assert "Are you sure?" in telegram.message(ANN, asked.message_id).text


async def test_regenerate_pressed_edits_the_reply_in_place(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("First answer."), text("Second answer."))
    reply, = await ann.reply_to(ann.say("tell me about the storm"))
    ann.press(reply, "🔄 Regenerate")
    await telegram.wait_for(lambda: telegram.message(ANN, reply.message_id).text == "Second answer.")
    assert len(telegram.bot_messages(ANN)) == 1
    assert [b["text"] for b in telegram.message(ANN, reply.message_id).buttons()] == ["🔄 Regenerate"]


async def test_a_forged_callback_from_another_user_is_refused(bot, telegram, llm):
    ann, bob = Person(telegram, ANN, "Ann", GROUP), Person(telegram, BOB, "Bob", GROUP)
    llm.add(text("Hi Ann."))
    reply, = await ann.reply_to(ann.say("@mira_bot hello"))
    bob.press(reply, "🔄 Regenerate")
    refused = await telegram.wait_for(lambda: [c for c in telegram.calls_to("answerCallbackQuery")
                                               if c.get("text")])
    assert refused[0]["text"] == "Only the person this reply answered can regenerate it."
    assert refused[0]["show_alert"] is True
    assert telegram.message(GROUP, reply.message_id).text == "Hi Ann."

    (await ann.reply_to(ann.say("/memory add tea"), chat=ann.dm))  # asked in the group, answered in the DM
    view, = await ann.reply_to(ann.say("/memory view"), chat=ann.dm)
    forged = next(b for b in view.buttons() if b["text"].startswith("Delete"))
    telegram.press(telegram.chat(ANN), bob.user, view.message_id, forged["callback_data"])
    await telegram.wait_for(lambda: any(c.get("text") == "That button belongs to someone else."
                                        for c in telegram.calls_to("answerCallbackQuery")))
    assert "tea" in telegram.message(ANN, view.message_id).text
    again, = await ann.reply_to(ann.say("/memory view"), chat=ann.dm)
    assert "tea" in again.text  # Bob's press deleted nothing


async def test_in_a_group_anns_memories_never_reach_bobs_prompt_or_screen(bot, telegram, llm):
    ann, bob = Person(telegram, ANN, "Ann", GROUP), Person(telegram, BOB, "Bob", GROUP)
    (await ann.reply_to(ann.say("/memory add pin:yes Ann's secret: she fears the dark", chat=ann.dm),
                        chat=ann.dm))
    llm.add(text("Hello, Ann."), text("Hello, Bob."))
    await ann.reply_to(ann.say("@mira_bot hello!"))
    assert "fears the dark" in llm.prompt_text()
    asked = bob.say("@mira_bot what do you know about Ann?")
    await bob.reply_to(asked)
    assert "fears the dark" not in llm.prompt_text()
    assert "Ann: @" not in llm.prompt_text() and "Ann: hello!" in llm.prompt_text()
    (await bob.reply_to(bob.say("/memory view"), chat=bob.dm))
    everything_bob_sees = [m.text for m in telegram.chats[BOB]] + [m.text for m in telegram.chats[GROUP]]
    assert not any("fears the dark" in t for t in everything_bob_sees)


async def test_memory_in_a_group_answers_in_the_dm_or_asks_to_open_one(bot, telegram):
    ann, bob = Person(telegram, ANN, "Ann", GROUP), Person(telegram, BOB, "Bob", GROUP)
    ann.say("/memory add I like rain")
    dm = await ann.dm_answer()
    assert "Saved #1" in dm.text
    assert telegram.bot_messages(GROUP) == []
    telegram.blocked_dms.add(BOB)
    asked = bob.say("/memory view")
    note, = await bob.reply_to(asked)
    assert "open a chat with me" in note.text and "#" not in note.text


async def test_memory_page_from_a_group_sends_the_link_only_in_the_dm(start, telegram):
    """SPEC 21: the one-time link is private — on Telegram only in the person's DM; a person the
    bot cannot write to gets no link in the group either."""
    await start(lambda raw: raw.update({"web": {"port": 8080}}))
    ann, bob = Person(telegram, ANN, "Ann", GROUP), Person(telegram, BOB, "Bob", GROUP)
    ann.say("/memory page")
    dm = await ann.dm_answer()
    assert dm.text.startswith("Your memory page: http://127.0.0.1:8080/open/")
    telegram.blocked_dms.add(BOB)
    note, = await bob.reply_to(bob.say("/memory page"))
    assert "open a chat with me" in note.text
    assert not any("/open/" in m.text for m in telegram.bot_messages(GROUP))


async def test_a_group_message_not_addressed_to_the_bot_is_ignored(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann", GROUP)
    ignored = ann.say("just chatting with friends")
    reply_target = ann.say("@mira_bot hi")
    first, = await ann.reply_to(reply_target)  # handled after the message before it
    asked = ann.say("and a reply to you", reply_to=first.message_id)
    await ann.reply_to(asked)
    assert len(llm.requests) == 2 and "just chatting" not in str(llm.requests)
    assert all(m.reply_to != ignored for m in telegram.bot_messages(GROUP))


async def test_a_10000_character_reply_arrives_as_three_messages_of_at_most_4096(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    paragraph = ("The sea was calm that evening, and the lamp turned slowly. " * 8).strip()
    long_reply = "\n\n".join([paragraph] * 21)[:10_000]
    llm.add(text(long_reply))
    await ann.reply_to(ann.say("tell me a long story"), count=3)
    await telegram.wait_for(lambda: telegram.bot_messages(ANN)[-1].buttons())  # delivered whole
    messages = telegram.bot_messages(ANN)
    assert len(messages) == 3
    assert all(len(parse_html(m.text)[1]) <= 4_096 for m in messages)
    assert [b["text"] for b in messages[-1].buttons()] == ["🔄 Regenerate"]


async def test_model_output_full_of_markup_characters_is_delivered_without_a_parse_error(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    nasty = "5 < 6 && 7 > 3, *stars*, _under_, <b>unclosed, <script>x</script> & &amp; **bold** `a<b`"
    llm.add(text(nasty))
    reply, = await ann.reply_to(ann.say("show me symbols"))
    error, visible = parse_html(reply.text)
    assert error is None
    assert "5 < 6 && 7 > 3" in visible and "<b>unclosed" in visible and "<script>x</script>" in visible
    assert reply.parse_mode == "HTML"


async def test_retry_after_from_telegram_is_honoured_without_losing_the_reply(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("Still here."))
    telegram.fail_next("sendMessage", retry_after=1)
    reply, = await ann.reply_to(ann.say("hello?"))
    assert reply.text == "Still here."
    assert len([c for c in telegram.calls_to("sendMessage") if c.get("text") == "Still here."]) == 2


async def test_an_edited_message_updates_the_stored_text(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    asked = ann.say("I live in Bergen")
    await ann.reply_to(asked)
    telegram.edit(ann.chat, ann.user, asked, "I live in Oslo")

    async def stored_edit() -> bool:
        conversation = await bot.cast.conversation_for(ConversationKey("telegram", str(ANN), None, "Mira"))
        return (await bot.store.conversations.message_by_platform_id(conversation.id, str(asked))).content == \
            "I live in Oslo"
    await eventually(stored_edit)
    llm.add(text("Oslo, then."))
    await ann.reply_to(ann.say("where do I live?"))
    prompt = llm.prompt_text()
    assert "I live in Oslo" in prompt and "Bergen" not in prompt


async def test_remember_replying_to_a_message_saves_it_pinned(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("A lighthouse needs a keeper."))
    reply, = await ann.reply_to(ann.say("why are you here?"))
    picked, = await ann.reply_to(ann.say("/remember", reply_to=reply.message_id))
    assert "> Mira: A lighthouse needs a keeper." in picked.text
    ann.press(picked, "Use as-is")
    await telegram.wait_for(lambda: "(pinned)" in telegram.message(ANN, picked.message_id).text)


async def test_remember_on_a_later_part_of_a_split_reply_picks_the_whole_reply(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    long_reply = "The lamp was lit at dusk. " * 200  # 5,200 characters: two Telegram messages of ≤ 4,096
    llm.add(text(long_reply))
    first, second = await ann.reply_to(ann.say("tell me everything"), count=2)
    picked, = await ann.reply_to(ann.say("/remember", reply_to=second.message_id))
    assert "> Mira: The lamp was lit at dusk." in picked.text


async def test_memory_export_arrives_as_a_json_document(bot, telegram):
    ann = Person(telegram, ANN, "Ann")
    (await ann.reply_to(ann.say("/memory add I collect sea glass")))
    ann.say("/memory export")
    document = await telegram.wait_for(lambda: telegram.calls_to("sendDocument"))
    data = json.loads(document[0]["document"]["data"])
    assert data["memories"][0]["content"] == "I collect sea glass"


async def test_the_character_saving_a_memory_in_a_telegram_dm(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(tool_calls(("save_memory", {"content": "Ann works night shifts"})), text("Noted, night owl."))
    await ann.reply_to(ann.say("I work night shifts"))
    view, = await ann.reply_to(ann.say("/memory view"))
    assert "Ann works night shifts" in view.text


async def test_streaming_shows_at_most_about_one_edit_a_second():
    shown: list[str] = []

    async def show(text: str) -> None:
        shown.append(text)

    stream = ThrottledStream(show, interval=1.0)
    for i in range(50):
        await stream("x" * (i + 1))
    assert shown == ["x"]  # everything else arrived within the same second
    await asyncio.sleep(1.05)
    await stream("x" * 60)
    assert shown == ["x", "x" * 60]


async def test_a_forum_topic_is_its_own_conversation(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann", GROUP)
    await ann.reply_to(ann.say("@mira_bot in the general chat: the password is swordfish"))
    asked = ann.say("@mira_bot hello from the topic", thread_id=77)
    reply, = await ann.reply_to(asked)
    assert reply.thread_id == 77
    assert "hello from the topic" in llm.prompt_text() and "swordfish" not in llm.prompt_text()


async def test_a_reply_telegram_still_refuses_to_parse_is_resent_as_plain_text(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("**Bold** claims & <odd> things."))
    for _ in range(3):  # the streamed preview is refused, formatted and plain; then the formatted final reply
        telegram.fail_next("sendMessage", status=400, description="Bad Request: can't parse entities: unknown")
    reply, = await ann.reply_to(ann.say("say something odd"))
    assert reply.text == "**Bold** claims & <odd> things." and reply.parse_mode is None
    attempts = [c for c in telegram.calls_to("sendMessage") if "claims" in str(c.get("text"))]
    assert [a.get("parse_mode") for a in attempts] == ["HTML", None, "HTML", None]


async def test_an_adapter_run_again_by_its_supervisor_adds_no_second_listener(bot, telegram):
    runtime = bot
    assert len(runtime.notifications) == 1
    again = TelegramAdapter(runtime.core, "Mira", adapter_settings(runtime.config, TelegramSettings))
    stop = asyncio.Event()
    task = asyncio.create_task(again.run(stop))
    await telegram.wait_for(lambda: len(runtime.notifications) == 2)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert len(runtime.notifications) == 1  # the run that ended took its listener with it


def test_the_file_url_sits_beside_a_configured_base_url():
    from adapters.telegram.messages import file_url

    assert file_url("https://api.telegram.org/bot") == "https://api.telegram.org/file/bot"
    assert file_url("http://bot.example:8081/bot/") == "http://bot.example:8081/file/bot"


# -- hardening: who is a person, bad input, platform failures (issue: privacy and account safety) --
async def test_anonymous_admins_of_different_groups_share_no_saved_memories(bot, telegram, llm):
    admin = telegram.anonymous_admin()
    group_a = telegram.chat(-1001, "supergroup", "Group A")
    group_b = telegram.chat(-1002, "supergroup", "Group B")
    llm.add(text("Noted."), text("I don't know you yet."))
    telegram.send(group_a, admin, "@mira_bot please remember that my salary is 99000 dollars",
                  sender_chat=group_a)
    await telegram.wait_for(lambda: telegram.bot_messages(group_a["id"]))
    telegram.send(group_b, admin, "@mira_bot what do you know about me?", sender_chat=group_b)
    answer = await telegram.wait_for(lambda: telegram.bot_messages(group_b["id"]))
    await telegram.settled()
    assert not any(offers_memory_tools(r) for r in llm.requests)  # nothing can be saved for nobody in particular
    assert "99000" not in llm.prompt_text()
    assert [b["text"] for b in answer[-1].buttons()] == []  # no Regenerate for nobody
    asked = telegram.send(group_b, admin, "/memory view", sender_chat=group_b)
    refusal = await telegram.wait_for(
        lambda: [m for m in telegram.bot_messages(group_b["id"]) if m.message_id > asked])
    assert "Write as yourself" in refusal[0].text


async def test_a_message_with_no_sender_is_handled_without_error(bot, telegram, llm):
    channel = telegram.chat(-1003, "supergroup", "News")
    llm.add(text("Interesting news."))
    telegram.send(channel, None, "@mira_bot big news today", sender_chat=channel)
    answer = await telegram.wait_for(lambda: telegram.bot_messages(channel["id"]))
    assert answer[0].text == "Interesting news."


async def test_an_edited_caption_changes_the_stored_message_and_the_photo_stays_named(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    asked = telegram.send(ann.dm, ann.user, "my boat", photo=picture((20, 20, 160)))
    await ann.reply_to(asked)
    telegram.edit(ann.dm, ann.user, asked, "my new boat")

    async def stored() -> str:
        conversation = await bot.cast.conversation_for(ConversationKey("telegram", str(ANN), None, "Mira"))
        return (await bot.store.conversations.message_by_platform_id(conversation.id, str(asked))).content
    await eventually(lambda: _is(stored, "[a photo] my new boat"))


async def test_an_albums_caption_edited_later_changes_the_stored_album_and_its_photos_stay_named(
        bot, telegram, llm):
    """SPEC 7: a person editing their message updates it in the store. An album is stored as one
    message: an item's caption edited later is read with every other item again."""
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("What a trip!"))
    first = send_album(telegram, ann, "from my trip", "trip", RED, GREEN, BLUE)
    await ann.reply_to(first)
    telegram.edit(ann.dm, ann.user, first, "from my long trip")
    telegram.edit(ann.dm, ann.user, first + 1, "the green one")

    async def stored() -> str:
        conversation = await bot.cast.conversation_for(ConversationKey("telegram", str(ANN), None, "Mira"))
        return (await bot.store.conversations.message_by_platform_id(conversation.id, str(first))).content
    await eventually(lambda: _is(stored, "[3 photos] from my long trip\nthe green one"))
    assert len(llm.requests) == 1  # an edit is stored, never answered


async def _is(read, expected) -> bool:
    return await read() == expected


async def test_an_edited_command_is_never_run_again(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    asked = ann.say("/memory add x")
    await ann.reply_to(asked)
    telegram.edit(ann.dm, ann.user, asked, "/memory add y")
    await telegram.settled()  # the edit is handled: had the command run again, it would have answered
    view, = await ann.reply_to(ann.say("/memory view"))
    assert "#1 · character · recent — x" in view.text
    assert "— y" not in view.text and "#2" not in view.text


async def test_a_photo_with_a_caption_is_answered_and_a_bare_sticker_gets_one_line(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("I can't see pictures, I'm afraid — but tell me about it."))
    asked = telegram.send(ann.dm, ann.user, "what is in this picture?", photo=True)
    reply, = await ann.reply_to(asked)
    assert reply.text == "I can't see pictures, I'm afraid — but tell me about it."
    assert "came with a photo, which you cannot see" in llm.prompt_text()
    sticker = telegram.send(ann.dm, ann.user, "", sticker=True)
    line, = await ann.reply_to(sticker)
    assert line.text.startswith("I can't see a sticker — I can only read text.")
    assert len(llm.requests) == 1


def picture(colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(out, "JPEG")
    return out.getvalue()


def send_album(telegram: FakeTelegram, person: Person, caption: str, album: str, *colours) -> int:
    """The person sends photos of these colours together, the first with the caption; its id."""
    first = telegram.send(person.dm, person.user, caption, photo=picture(colours[0]), album=album)
    for colour in colours[1:]:
        telegram.send(person.dm, person.user, "", photo=picture(colour), album=album)
    return first


def asked_once_with_photos(llm, words: str, photos: int) -> None:
    """The model was asked once, the album as one message: its words, then every photo."""
    assert len(llm.requests) == 1
    asked = llm.requests[0]["messages"][-1]["content"]
    assert asked[0] == {"type": "text", "text": words}
    assert [part["type"] for part in asked[1:]] == ["image_url"] * photos


RED, GREEN, BLUE = (200, 30, 30), (30, 200, 30), (30, 30, 200)


async def test_photos_sent_together_as_an_album_are_answered_once_with_every_photo(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("What a trip!"))
    first = send_album(telegram, ann, "from my trip", "trip", RED, GREEN, BLUE)
    reply, = await ann.reply_to(first)
    await telegram.settled()
    assert reply.text == "What a trip!" and len(telegram.bot_messages(ann.dm["id"])) == 1
    asked_once_with_photos(llm, "[3 photos] from my trip", 3)


def an_album_then_a_question(telegram: FakeTelegram, llm, ann: Person) -> int:
    """Ann sends two photos together and asks about them at once; the question's id."""
    llm.add(text("Lovely boats."), text("The red one."))
    send_album(telegram, ann, "the harbour", "harbour", RED, BLUE)
    return ann.say("which one do you like?")


def answered_the_album_then_the_question(telegram: FakeTelegram, llm, ann: Person) -> None:
    assert [m.text for m in telegram.bot_messages(ann.dm["id"])] == ["Lovely boats.", "The red one."]
    album, after = (r["messages"][-1]["content"] for r in llm.requests)
    assert album[0]["text"] == "[2 photos] the harbour" and after == "which one do you like?"


async def test_a_message_sent_right_after_an_album_is_answered_after_it(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    await ann.reply_to(an_album_then_a_question(telegram, llm, ann), count=2)
    answered_the_album_then_the_question(telegram, llm, ann)


async def test_an_album_in_a_group_is_answered_once_when_its_caption_names_the_character(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann", chat_id=GROUP)
    llm.add(text("Nice cat."))
    first = telegram.send(ann.chat, ann.user, "@mira_bot my cat", photo=picture((90, 90, 90)), album="cat")
    telegram.send(ann.chat, ann.user, "", photo=picture((250, 250, 250)), album="cat")
    reply, = await ann.reply_to(first, chat=ann.chat)
    await telegram.settled()
    assert reply.reply_to == first
    assert len(llm.requests) == 1
    assert [part["type"] for part in llm.requests[0]["messages"][-1]["content"]] == ["text", "image_url", "image_url"]


async def test_a_forged_or_stale_button_is_acknowledged(bot, telegram, llm):
    ann = Person(telegram, ANN, "Ann")
    view, = await ann.reply_to(ann.say("/memory view"))
    for forged in ("2:view:../../:1", "1:view:all:99999999999999999999999", "1:regen:²", "nonsense"):
        telegram.press(ann.dm, ann.user, view.message_id, forged)
    await telegram.wait_for(lambda: len(telegram.calls_to("answerCallbackQuery")) == 4)
    answers = [c.get("text") for c in telegram.calls_to("answerCallbackQuery")]
    assert answers == ["This button no longer works."] * 4


async def test_a_token_revoked_while_running_stops_the_adapter_for_good(telegram, llm, tmp_path, monkeypatch,
                                                                         clock, caplog):
    from bot.contract import PlatformRefused

    runtime, adapter = await telegram_runtime(telegram, llm, tmp_path, monkeypatch, clock)
    try:
        task = asyncio.create_task(adapter.run(asyncio.Event()))
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"))
        telegram.revoke_token()
        with pytest.raises(PlatformRefused, match="Telegram refused the bot token of Mira"):
            await asyncio.wait_for(task, 20)
    finally:
        await runtime.close()


@pytest.fixture
async def webhook(telegram, llm, tmp_path, monkeypatch, clock):
    """A Telegram adapter in webhook mode; yields the URL it serves, and a way to stop it."""
    async with serving_webhook(telegram, llm, tmp_path, monkeypatch, clock) as served:
        yield served


@pytest.fixture(params=["sqlite", "postgresql"])
async def two_webhooks(request, telegram, llm, tmp_path, monkeypatch, clock):
    """Two bot processes behind one load balancer: each its own runtime and webhook, one database
    (an SQLite file, or a PostgreSQL schema)."""
    from tests.postgres import emptied_schema_url

    schemas = emptied_schema_url() if request.param == "postgresql" else None
    storage_url = await anext(schemas) if schemas else None
    try:
        async with serving_webhook(telegram, llm, tmp_path, monkeypatch, clock, storage_url) as one:
            async with serving_webhook(telegram, llm, tmp_path, monkeypatch, clock, storage_url) as other:
                yield one, other
    finally:
        if schemas:
            await anext(schemas, None)


@contextlib.asynccontextmanager
async def serving_webhook(telegram, llm, tmp_path, monkeypatch, clock, storage_url: str | None = None):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = webhook_config(telegram, llm, tmp_path, monkeypatch, port, storage_url)
    runtime = await build_runtime(config, clock=clock)
    adapter = TelegramAdapter(runtime.core, "Mira", adapter_settings(config, TelegramSettings))
    set_before = len(telegram.calls_to("setWebhook"))
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))

    async def stopped() -> None:
        stop.set()
        await asyncio.wait_for(task, 10)
    try:
        await telegram.wait_for(lambda: len(telegram.calls_to("setWebhook")) > set_before)
        yield Webhook(f"http://127.0.0.1:{port}/telegram", stopped, runtime.core)
    finally:
        await stopped()
        await runtime.close()


def webhook_config(telegram, llm, tmp_path, monkeypatch, port: int, storage_url: str | None = None):
    """Mira on Telegram in webhook mode, served on 127.0.0.1:`port` (on SQLite, or `storage_url`)."""
    monkeypatch.setenv("MIRA_TELEGRAM_TOKEN", telegram.token)
    monkeypatch.setenv("KEEPSAKE_WEBHOOK_SECRET", "s3cret-token")
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    if storage_url:
        raw["storage"] = {"url": storage_url}
    raw["telegram"] = {"base_url": telegram.base_url, "mode": "webhook", "listen": "127.0.0.1", "port": port,
                       "webhook_url": "https://bot.example.com/telegram", "secret_token_env": "KEEPSAKE_WEBHOOK_SECRET"}
    raw["characters"][0]["telegram_token_env"] = "MIRA_TELEGRAM_TOKEN"
    return parse_config(raw, tmp_path)


async def test_a_webhook_port_already_taken_is_named_as_the_config_names_it(telegram, llm, tmp_path, monkeypatch,
                                                                            clock):
    """The adapter stops with an error the log shows once a try (bot/cli.py starts it again later):
    it names `telegram.port` and the address, not only errno 98."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = webhook_config(telegram, llm, tmp_path, monkeypatch, port)
        async with await build_runtime(config, clock=clock) as runtime:
            adapter = TelegramAdapter(runtime.core, "Mira", adapter_settings(config, TelegramSettings))
            with pytest.raises(OSError) as failure:
                await asyncio.wait_for(adapter.run(asyncio.Event()), 10)
    assert str(failure.value) == (f"[Errno 98] telegram.port: the webhook cannot listen on 127.0.0.1:{port} "
                                  "(Address already in use); set [telegram] port to a free port")
    assert not telegram.calls_to("setWebhook")  # Telegram is never pointed at an address nobody serves


@dataclass
class Webhook:
    """Where the adapter takes updates, and `stopped`: stop it once every update posted is handled
    (Application.stop waits for the handlers it started), so nothing more can be answered."""
    url: str
    stopped: Callable[[], Awaitable[None]]
    core: Core


async def test_webhook_mode_takes_updates_with_the_secret_token_and_refuses_the_rest(telegram, llm, webhook):
    import aiohttp

    registered = telegram.calls_to("setWebhook")[0]
    assert registered["url"] == "https://bot.example.com/telegram"
    assert registered["secret_token"] == "s3cret-token"
    ann, bob = Person(telegram, ANN, "Ann"), Person(telegram, BOB, "Bob")
    llm.add(text("Hello by webhook."))
    ann.say("hello over the webhook")
    bob.say("a forged update")
    genuine, fake = telegram.updates_waiting()
    async with aiohttp.ClientSession() as http:
        refused = await http.post(webhook.url, json=fake, headers={"X-Telegram-Bot-Api-Secret-Token": "guess"})
        missing = await http.post(webhook.url, json=fake)
        taken = await http.post(webhook.url, json=genuine, headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"})
    assert (refused.status, missing.status, taken.status) == (403, 403, 200)
    await webhook.stopped()
    reply, = telegram.bot_messages(ANN)
    assert reply.text == "Hello by webhook."
    assert telegram.bot_messages(BOB) == [] and "forged" not in str(llm.requests)
    assert not telegram.calls_to("getUpdates")  # no polling beside the webhook


async def test_a_malformed_webhook_body_gets_400_and_at_most_one_warning_a_minute(telegram, llm, webhook, caplog):
    import aiohttp

    secret = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
    bodies = ["[]", "{}", "null", '{"message": 7}', '{"update_id": 9, "message": 7}', '{"update_id": "9"}', "not json"]
    with caplog.at_level("WARNING"):
        async with aiohttp.ClientSession() as http:
            statuses = []
            for _ in range(10):
                for body in bodies:
                    async with http.post(webhook.url, data=body, headers={**secret, "Content-Type": "application/json"}) as answer:
                        statuses.append(answer.status)
    assert set(statuses) == {400}
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "a body that is not an update was refused with 400" in caplog.records[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)


async def test_an_albums_items_posted_to_the_webhook_one_by_one_are_answered_once_with_every_photo(
        telegram, llm, webhook, tmp_path):
    """Telegram posts an album's next item only once the item before is acknowledged: each is
    stored with the first before it is acknowledged (a crash loses none), and the album is
    answered once, as one message."""
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("What a trip!"))
    send_album(telegram, ann, "from my trip", "trip", RED, GREEN, BLUE)
    await telegram.post_waiting_updates(webhook.url, "s3cret-token")  # each once the one before is acknowledged
    with contextlib.closing(sqlite3.connect(tmp_path / "keepsake.sqlite3")) as db:
        acknowledged = db.execute("SELECT content FROM messages WHERE role = 'user'").fetchall()
    assert acknowledged == [("[3 photos] from my trip",)]
    await webhook.stopped()  # once every handler is done
    reply, = telegram.bot_messages(ann.dm["id"])
    assert reply.text == "What a trip!"
    asked_once_with_photos(llm, "[3 photos] from my trip", 3)


async def test_an_album_whose_items_reach_two_processes_behind_a_load_balancer_is_answered_once(
        telegram, llm, two_webhooks):
    """SPEC 12: updates of one chat reaching different processes are answered in order, once.
    The album is gathered in the database: the item reaching the other process joins it there."""
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("What a trip!"))
    send_album(telegram, ann, "from my trip", "trip", RED, GREEN, BLUE)
    await telegram.post_waiting_updates([webhook.url for webhook in two_webhooks], "s3cret-token")
    one, other = two_webhooks
    key = ConversationKey("telegram", str(ann.dm["id"]), None, "Mira")
    # every item stored with the first before it was acknowledged, whichever process took it
    assert await other.core.conversation.left_off(key) == [("Ann", "[3 photos] from my trip")]
    assert await one.core.conversation.album_size(key, "trip") == 3
    await telegram.wait_for(lambda: telegram.bot_messages(ann.dm["id"]))
    for webhook in two_webhooks:
        await webhook.stopped()
    reply, = telegram.bot_messages(ann.dm["id"])
    assert reply.text == "What a trip!"
    asked_once_with_photos(llm, "[3 photos] from my trip", 3)
    assert await other.core.conversation.album_size(key, "trip") == 0  # taken by its turn


async def test_an_albums_caption_edited_later_reaching_another_process_changes_the_stored_album(
        telegram, llm, two_webhooks):
    """The album answered by one process; its caption's edit posted to the other, which reads the
    album's items from the database."""
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("Two fine boats."))
    first = send_album(telegram, ann, "the harbour", "harbour", RED, BLUE)
    one, other = two_webhooks
    await telegram.post_waiting_updates(one.url, "s3cret-token")
    await telegram.wait_for(lambda: telegram.bot_messages(ann.dm["id"]))
    telegram.edit(ann.dm, ann.user, first, "the harbour at dawn")
    await telegram.post_waiting_updates(other.url, "s3cret-token")
    key = ConversationKey("telegram", str(ann.dm["id"]), None, "Mira")
    said = [words for speaker, words in await one.core.conversation.left_off(key, 3) if speaker == "Ann"]
    assert said == ["[2 photos] the harbour at dawn"]


async def test_an_album_item_a_process_joined_before_it_died_is_read_by_the_albums_turn(telegram, llm, webhook):
    """A process that added an item to the album and died before storing it into the album's
    message: the album's turn takes it all the same, and the message is stored with it."""
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("Two fine boats."))
    send_album(telegram, ann, "the harbour", "harbour", RED, BLUE)
    first, second = (update["message"] for update in telegram.updates_waiting())
    telegram._updates.pop()  # the second reached the process that died
    await telegram.post_waiting_updates(webhook.url, "s3cret-token")
    key = ConversationKey("telegram", str(ann.dm["id"]), None, "Mira")
    joined = await webhook.core.conversation.join_album(
        key, AlbumItem("harbour", str(second["message_id"]), json.dumps(second)))
    assert joined.stored_as == str(first["message_id"])
    await webhook.stopped()  # once every handler is done
    reply, = telegram.bot_messages(ann.dm["id"])
    assert reply.text == "Two fine boats."
    asked_once_with_photos(llm, "[2 photos] the harbour", 2)


async def test_an_album_item_posted_to_the_webhook_again_is_stored_once(telegram, llm, webhook):
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("Two fine boats."))
    send_album(telegram, ann, "the harbour", "harbour", RED, BLUE)
    second = telegram.updates_waiting()[1]
    await telegram.post_waiting_updates(webhook.url, "s3cret-token")
    telegram._updates.append(second)  # its acknowledgement was lost: Telegram posts it again
    await telegram.post_waiting_updates(webhook.url, "s3cret-token")
    await webhook.stopped()
    assert len(telegram.bot_messages(ann.dm["id"])) == 1
    asked_once_with_photos(llm, "[2 photos] the harbour", 2)


async def test_a_message_posted_to_the_webhook_right_after_an_album_is_answered_after_it(telegram, llm, webhook):
    ann = Person(telegram, ANN, "Ann")
    an_album_then_a_question(telegram, llm, ann)
    await telegram.post_waiting_updates(webhook.url, "s3cret-token")
    await webhook.stopped()
    answered_the_album_then_the_question(telegram, llm, ann)


async def test_the_same_update_posted_again_is_stored_and_answered_once(telegram, llm, webhook):
    """Telegram posts an update again whenever an acknowledgement is lost: a message is stored,
    answered and counted once, even when the copies arrive at the same time; a command runs once."""
    import aiohttp

    ann = Person(telegram, ANN, "Ann")
    llm.add(text("Hello once."))
    ann.say("hello")
    ann.say("/memory add I keep bees")
    message, command = telegram.updates_waiting()
    secret = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
    async with aiohttp.ClientSession() as http:
        async def post(update):
            async with http.post(webhook.url, json=update, headers=secret) as answer:
                return answer.status
        assert await asyncio.gather(*(post(message) for _ in range(3))) == [200, 200, 200]
        assert await post(message) == 200
        assert await asyncio.gather(post(command), post(command)) == [200, 200]
        assert await post(command) == 200
    await webhook.stopped()
    texts = [m.text for m in telegram.bot_messages(ANN)]
    assert len(texts) == 2 and texts.count("Hello once.") == 1 and sum("I keep bees" in t for t in texts) == 1
    assert len(llm.requests) == 1


async def test_access_is_checked_for_buttons_and_for_the_chat_a_message_is_sent_as(start, telegram, llm):
    """Bob is denied: his press of a button gets the notice and changes nothing. A channel
    denied by `telegram-chat:` cannot post into an allowed group as `sender_chat` either."""
    from bot.contract import NOT_ALLOWED

    channel = telegram.chat(-100_999, "channel", "Loud Channel")
    runtime = await start(lambda raw: raw.update({"access": {"deny": [f"telegram:{BOB}", "telegram-chat:-100999"]}}))
    ann = Person(telegram, ANN, "Ann")
    listing_asked = ann.say("/memory add I keep bees")
    await ann.reply_to(listing_asked)
    view, = await ann.reply_to(ann.say("/memory view"))
    pressed = len(telegram.calls_to("answerCallbackQuery"))
    telegram.press(ann.dm, telegram.user(BOB, "Bob"), view.message_id,
                   next(b for b in view.buttons() if b["text"].startswith("Delete"))["callback_data"])
    await telegram.wait_for(lambda: len(telegram.calls_to("answerCallbackQuery")) > pressed)
    assert telegram.calls_to("answerCallbackQuery")[-1].get("text") == NOT_ALLOWED
    assert "I keep bees" in (await ann.reply_to(ann.say("/memory view")))[0].text

    group = telegram.chat(-100_500, "supergroup", "Allowed Group")
    said = telegram.send(group, telegram.user(136817688, "Channel_Bot"), "@mira_bot hello from the channel",
                         sender_chat=channel)
    llm.add(text("Hello group."))
    later = telegram.send(group, telegram.user(ANN, "Ann"), "@mira_bot hello from Ann")
    await telegram.wait_for(lambda: [m for m in telegram.bot_messages(group["id"]) if m.message_id > later])
    assert "hello from the channel" not in str(llm.requests)
    assert said
    assert await runtime.store.db.value("SELECT COUNT(*) FROM identities WHERE user_id = $1", str(BOB)) == 0


async def test_a_cards_actions_show_in_italics_not_as_asterisks(bot, telegram, llm):
    """Cards are full of *actions*: Telegram shows them as italics (previews while streaming go
    through the same rendering), never as literal asterisks."""
    ann = Person(telegram, ANN, "Ann")
    llm.add(text("*smiles and sets down the lamp* Hello, _traveller_. Tea?"))
    reply, = await ann.reply_to(ann.say("hi"))
    sent = [c for c in telegram.calls if c[0] in ("sendMessage", "editMessageText") and "Tea?" in str(c[1].get("text"))]
    assert sent[-1][1].get("parse_mode") == "HTML"
    assert "<i>smiles and sets down the lamp</i> Hello, <i>traveller</i>. Tea?" in sent[-1][1]["text"]
    assert "*" not in reply.text and "_" not in reply.text


async def test_a_check_in_reaches_the_dm_with_its_button_and_a_blocked_bot_gets_none(start, telegram, llm, clock):
    """SPEC 14 over the Bot API: the check-in is sent in the DM with "🔕 Don't write first",
    which turns check-ins off; a person who blocked the bot (403) gets none, and nothing
    undelivered stays in their conversation."""
    runtime = await start(lambda raw: raw["characters"][0].update(checkins={"after_hours": 48}))
    ann, bob = Person(telegram, ANN, "Ann"), Person(telegram, BOB, "Bob")
    for person in (ann, bob):
        for n in range(4):
            await person.reply_to(person.say(f"hello {n}"))
    telegram.blocked_dms.add(BOB)
    clock.now += 49 * 3600
    llm.add(text("How did the tomatoes do, Ann?"))
    assert await runtime.checkins.scan("Mira") == 1
    checkin = telegram.bot_messages(ANN)[-1]
    assert checkin.text == "How did the tomatoes do, Ann?"
    assert [b["text"] for b in checkin.buttons()] == ["🔕 Don't write first"]
    assert telegram.bot_messages(BOB)[-1].text != "How did the tomatoes do, Ann?"
    bob_conversation = await runtime.cast.conversation_for(ConversationKey("telegram", str(BOB), None, "Mira"))
    newest, = await runtime.store.conversations.recent_messages(bob_conversation.id, 1)
    assert newest.content == "Okay."  # Bob's last reply, not an undelivered check-in

    ann.press(checkin, "🔕 Don't write first")
    await telegram.wait_for(lambda: any("won't write first" in m.text for m in telegram.bot_messages(ANN)))
    assert checkin.text == "How did the tomatoes do, Ann?" and not checkin.buttons()  # its own line; the text stays
    telegram.blocked_dms.discard(BOB)
    clock.now += 100 * 3600
    assert await runtime.checkins.scan("Mira") == 0  # Ann said no; Bob has not written since


async def test_a_check_in_asks_the_gate_about_the_person_as_telegram_describes_them(start, telegram, llm, clock):
    """SPEC 14: someone `[access]` denies gets no check-in (and no model call is made for it)."""
    runtime = await start(lambda raw: raw["characters"][0].update(checkins={"after_hours": 48}))
    ann = Person(telegram, ANN, "Ann")
    for n in range(4):
        await ann.reply_to(ann.say(f"hello {n}"))
    runtime.gate.access = AccessRules(deny=frozenset({f"telegram:{ANN}"}))  # [access] deny, as of now
    clock.now += 49 * 3600
    calls = len(llm.requests)
    assert await runtime.checkins.scan("Mira") == 0 and len(llm.requests) == calls


async def test_a_reply_telegram_refused_is_taken_back_and_reaches_no_later_prompt(bot, telegram, llm):
    """SPEC 15 "What was not shown was not said": the second part of a long reply is refused; the
    reply is taken back whole (never in the window, the summary or recall), and the next prompt
    does not hold it — even for a message Ann sent while the reply was still being sent: its turn
    waits until the reply is shown or taken back (#48)."""
    ann = Person(telegram, ANN, "Ann")
    telegram.refused, telegram.refusal_held = "PART-TWO", asyncio.Event()
    llm.add(text("Lamp. " * 700 + "\n\nPART-TWO the tide turns at six"))
    ann.say("tell me everything")
    await telegram.wait_for(lambda: [c for c in telegram.calls_to("sendMessage") if "PART-TWO" in str(c.get("text"))])
    llm.add(text("Six, I think."))
    asked = ann.say("so when does the tide turn?")  # while the refused part is still under way
    with contextlib.suppress(AssertionError):  # the second turn would start within 2 s if it did not wait
        await telegram.wait_for(lambda: len(llm.requests) >= 2, timeout=2.0)
    asked_while_sending = len(llm.requests)
    telegram.refusal_held.set()
    await ann.reply_to(asked)
    assert asked_while_sending == 1  # the model was not asked while the reply was being sent
    prompt = llm.prompt_text()
    assert "tide turns at six" not in prompt and "Lamp. Lamp." not in prompt
    assert "tell me everything" in prompt  # the person's message is kept


async def test_the_privacy_mode_warning_is_only_for_a_bot_that_joins_groups(start, telegram, caplog):
    """#62: a DM-only bot (BotFather → /setjoingroups → Disable) never hears a group: privacy mode
    is nothing to fix."""
    caplog.set_level(logging.WARNING)
    telegram.joins_groups = False
    await start()
    assert "privacy mode" not in caplog.text
