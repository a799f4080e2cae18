"""SPEC 21 "Every memory with its story", on the memory page over real HTTP: where a memory came
from (who wrote it, when, the person's own message a character wrote it from), when it last
reached a prompt and how often, and each character's latest replies with what their prompts
held, a memory linking to the replies that used it — and nothing of another person's, ever. On
SQLite and PostgreSQL."""

import html
import re

import pytest

from bot.memory.story import times_used
from storage.ports import ReplyReceipt
from tests.conftest import Chat
from tests.fakes.llm_server import text, tool_calls
from tests.postgres import fresh_schema_url
from tests.test_memory_page import serving, signed_in, web_config


@pytest.fixture(params=["sqlite", "postgresql"])
async def web(request, llm, tmp_path, clock):
    """A runtime with Mira and Aki, its page served on loopback, on either store."""
    schemas = fresh_schema_url() if request.param == "postgresql" else None
    url = await anext(schemas) if schemas else None
    async with serving(web_config(llm, tmp_path, storage_url=url), clock) as served:
        yield served
    if schemas:
        await anext(schemas, None)
TODAY = "2027-01-15"  # the tests' clock (tests/conftest.py FakeClock)


async def page_of(browser, chat: Chat) -> str:
    _, body = await (await signed_in(browser, chat)).request("GET", "/")
    return html.unescape(body)


def memory_item(page: str, memory_id: int) -> str:
    return page.split(f'id="memory-{memory_id}"')[1].split("</li>")[0]


async def written_by_mira(chat: Chat, llm, said: str, fact: str) -> int:
    llm.add(tool_calls(("save_memory", {"content": fact, "scope": "character"})), text("I'll remember that."))
    await chat.say(said)
    row = await chat.runtime.store.db.one("SELECT id FROM memories WHERE content = $1", fact)
    return row["id"]


async def test_a_memory_the_character_wrote_shows_the_persons_message_it_came_from_with_its_date(web, llm):
    runtime, browser = web
    ann = Chat(runtime)
    memory = await written_by_mira(ann, llm, "I moved to Tromsø last spring", "Ann lives in Tromsø")
    item = memory_item(await page_of(browser, ann), memory)
    assert re.search(rf"written by Mira mid-reply in the console, {TODAY}; "
                     rf"from your message “I moved to Tromsø last spring” "
                     rf"\({TODAY}\); not in a reply's prompt yet", item), item


async def test_a_reply_lists_the_memories_its_prompt_held_and_each_memory_links_to_the_replies_that_used_it(web, llm):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/memory add I am allergic to peanuts")
    llm.add(text("No peanuts, then."))
    reply = await ann.say("what should I bake?")
    page = await page_of(browser, ann)
    turn = reply.turn.id
    listed = page.split(f'id="reply-{turn}"')[1].split("</li>")[0]
    assert "“No peanuts, then.”" in listed and 'href="#memory-1">#1</a>' in listed and "tokens" in listed
    item = memory_item(page, 1)
    assert f"written by you in the console, {TODAY}; in a reply's prompt once, last {TODAY}" in item
    assert f'href="#reply-{turn}">reply R{turn}</a>' in item


async def test_the_page_lists_each_characters_last_20_replies_to_the_person(web, llm):
    runtime, browser = web
    ann = Chat(runtime)
    turns = []
    for n in range(21):
        llm.add(text(f"Reply number {n}."))
        turns.append((await ann.say(f"message {n}")).turn.id)
    page = await page_of(browser, ann)
    assert [f'id="reply-{turn}"' in page for turn in turns] == [False] + [True] * 20  # the oldest is not listed


async def test_in_a_group_chat_the_page_shows_nothing_of_another_persons(web, llm):
    """Bob's words, his memories and the replies to him never reach Ann's page, though both talk
    to Mira in one group."""
    runtime, browser = web
    ann = Chat(runtime, user="301", name="Ann", chat_id="-100", shared=True, platform="telegram")
    bob = Chat(runtime, user="302", name="Bob", chat_id="-100", shared=True, platform="telegram")
    await written_by_mira(bob, llm, "Mira, my locker code is 4411", "Bob's locker code is 4411")
    llm.add(text("Hello to you too, Ann."))
    await ann.say("Mira, hello")
    page = await page_of(browser, ann)
    assert "4411" not in page and "locker" not in page
    assert "Hello to you too, Ann." in page  # her own reply is there, with what it used
    assert "I'll remember that." not in page  # the reply to Bob is not


async def test_delete_then_undo_on_the_page_brings_the_memory_back_with_its_pin(web):
    """SPEC 21 "History and undo": every change is in the history; undoing the delete is a change
    too, under the same limits, and the memory is as it was."""
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/memory add pin:yes I am allergic to peanuts")
    page = await signed_in(browser, ann)
    await page.act("delete", id="1")
    _, body = await page.request("GET", "/")
    history = html.unescape(body).split('id="history"')[1].split("</section>")[0]
    assert f"{TODAY} · you deleted #1 “I am allergic to peanuts” (pinned)" in history
    undo = re.search(r'name="id" value="(\d+)"><button type="submit" id="undo-', history).group(1)
    response, body = await page.act("undo", id=undo)
    assert response.status == 200 and "Undone: #1 is back (pinned)." in html.unescape(body)
    assert "📌 #1 · character · recent — I am allergic to peanuts" in (await ann.memory("/memory view")).text
    response, _ = await page.act("undo", id=undo)  # that change was undone: nothing more to undo there
    assert response.status == 404


async def test_forgetme_removes_the_history_too(web):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/memory add I am allergic to peanuts")
    forget = await ann.memory("/forgetme")
    await ann.press(forget.buttons[0][0].action)
    assert await runtime.store.db.value("SELECT COUNT(*) FROM memory_history") == 0


async def test_memory_view_with_a_number_tells_that_memorys_story(web, llm):
    """SPEC 21: "in /memory view <n>" too — `/memory view #1` (`id:1` on Discord)."""
    runtime, browser = web
    ann = Chat(runtime)
    memory = await written_by_mira(ann, llm, "I moved to Tromsø last spring", "Ann lives in Tromsø")
    llm.add(text("Tromsø it is."))
    await ann.say("remember where I live?")
    told = (await ann.memory(f"/memory view #{memory}")).text
    assert told.startswith(f"#{memory} · character · recent — Ann lives in Tromsø")
    assert (f"written by Mira mid-reply in the console, {TODAY}; "
            f"from your message “I moved to Tromsø last spring” ({TODAY}); "
            f"in a reply's prompt once, last {TODAY}.") in told
    assert (await ann.memory("/memory view 1")).text.startswith("Your memories with Mira: 1 — page 1 of 1")
    assert (await ann.memory("/memory view #99")).text == "There is no memory #99."


async def test_a_memory_written_in_a_group_says_so_without_naming_the_group_and_one_from_the_page_says_that(web):
    runtime, browser = web
    ann = Chat(runtime, user="301", name="Ann", chat_id="-100777", shared=True, platform="telegram")
    await ann.memory("/memory add I sing in the harbour choir")
    page = await signed_in(browser, ann)
    await page.act("add", text="I have a blue boat", scope="character")
    body = html.unescape((await page.request("GET", "/"))[1])
    assert f"written by you in a Telegram group, {TODAY}" in memory_item(body, 1) and "-100777" not in body
    assert f"written by you on this page, {TODAY}" in memory_item(body, 2)


def test_a_memorys_story_counts_every_prompt_it_reached_and_tells_the_latest():
    day = 86_400.0
    held = {3: {"pinned": [7], "unpinned": [8, 9]}, 2: {"unpinned": [8]}, 1: {"pinned": [7], "unpinned": [8]}}
    receipts = [ReplyReceipt(turn, 1, turn * day, "…", {"memories": held[turn]}) for turn in (3, 2, 1)]  # newest first
    used = times_used(receipts)
    assert used[8] == (3, 3 * day) and used[7] == (2, 3 * day) and used[9] == (1, 3 * day)
    assert times_used(receipts[1:])[7] == (1, 1 * day)  # the latest it reached, not the first read
