"""Two bot processes on one SQLite file (two runtimes, each with its own connections, as two
processes have) stay correct: what one writes the other sees at once, caps hold between them,
messages keep their arrival order, and each summary batch is written once."""

import asyncio

import pytest

from bot.runtime import build_runtime
from tests.conftest import Chat
from tests.fakes.llm_server import text
from tests.fakes.summarizer import kind_of


@pytest.fixture
async def two(make_config, clock):
    config = make_config()
    first = await build_runtime(config, clock=clock)
    second = await build_runtime(config, clock=clock)
    yield first, second
    await first.close()
    await second.close()


async def test_learning_off_in_one_process_is_obeyed_by_the_other_at_once(two, llm):
    a, b = two
    await Chat(a).memory("/memory add I am allergic to peanuts")
    await Chat(a).say("hello")
    assert "allergic to peanuts" in llm.prompt_text()
    await Chat(b).memory("/memory learning off")
    await Chat(a).say("what do you know about me?")
    assert "allergic to peanuts" not in llm.prompt_text()
    assert "tools" not in llm.requests[-1]


async def test_memories_cleared_in_one_process_are_gone_from_the_others_prompt(two, llm):
    a, b = two
    await Chat(a).memory("/memory add my salary is 99000 dollars")
    clear = await Chat(b).memory("/memory clear")
    await Chat(b).press(clear.buttons[0][0].action)
    await Chat(a).say("what do you know about me?")
    assert "99000" not in llm.prompt_text()


async def test_the_100_unpinned_cap_holds_between_two_processes_writing_at_once(two):
    a, b = two

    async def add(runtime, n: int):
        return await Chat(runtime).memory(f"/memory add fact number {n}")

    results = await asyncio.gather(*(add(a if n % 2 else b, n) for n in range(130)))
    assert sum(r.ok for r in results) == 100
    assert all("the most there can be" in r.text for r in results if not r.ok)
    view = await Chat(a).memory("/memory view character")
    assert "100 — page 1 of 10" in view.text


async def test_messages_from_two_processes_keep_one_arrival_order(two, llm):
    a, b = two
    ann_a, bob_b = Chat(a, chat_id="group", shared=True), Chat(b, user="bob", name="Bob", chat_id="group", shared=True)
    conversation = (await a.turns.conversation_for(ann_a.key)).id
    for i in range(10):
        await a.store.conversations.add_user_message(conversation, await ann_a.person_id(), "Ann", f"a{i}", 1, None)
        await b.store.conversations.add_user_message(conversation, await bob_b.person_id(), "Bob", f"b{i}", 1, None)
    stored = await b.store.conversations.recent_messages(conversation, 100)
    assert [m.content for m in reversed(stored)] == [x for i in range(10) for x in (f"a{i}", f"b{i}")]
    assert len({m.pos for m in stored}) == 20


async def test_a_summary_batch_is_written_once_when_both_processes_run_it(two, llm):
    a, b = two
    ann = Chat(a)
    conversation = (await a.turns.conversation_for(ann.key)).id
    for i in range(50 + 10):
        await a.store.conversations.add_user_message(conversation, await ann.person_id(), "Ann", f"m{i}", 5, None)

    llm.responder = lambda body: None if kind_of(body) == "chat" else text("- Ann said ten things.")
    a.summarizer.schedule(conversation)
    b.summarizer.schedule(conversation)
    await asyncio.gather(a.summarizer.idle(), b.summarizer.idle())
    summaries = await a.store.summaries.summaries(conversation)
    assert [s.content for s in summaries] == ["- Ann said ten things."]
    assert sum(1 for r in llm.requests if kind_of(r) != "chat") == 1
