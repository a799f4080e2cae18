"""Two bot processes on one database, SQLite file or PostgreSQL (two runtimes, each with its own
connections, as two processes have), stay correct: what one writes the other sees at once, caps
hold between them, messages keep their arrival order and are answered in it, and each summary
batch is written once."""

import asyncio

import pytest

from bot.contract import IncomingMessage
from bot.runtime import build_runtime
from tests.conftest import Chat, offers_memory_tools, shown
from tests.fakes.llm_server import text
from tests.fakes.summarizer import kind_of
from tests.postgres import fresh_schema_url


@pytest.fixture(params=["sqlite", "postgresql"])
async def two(request, make_config, clock):
    config = make_config()
    schemas = fresh_schema_url() if request.param == "postgresql" else None
    if schemas:
        config = config.changed("storage", url=await anext(schemas))
    first = await build_runtime(config, clock=clock)
    second = await build_runtime(config, clock=clock)
    yield first, second
    await first.close()
    await second.close()
    if schemas:
        await anext(schemas, None)


async def test_learning_off_in_one_process_is_obeyed_by_the_other_at_once(two, llm):
    a, b = two
    await Chat(a).memory("/memory add I am allergic to peanuts")
    await Chat(a).say("hello")
    assert "allergic to peanuts" in llm.prompt_text()
    await Chat(b).memory("/memory learning off")
    await Chat(a).say("what do you know about me?")
    assert "allergic to peanuts" not in llm.prompt_text()
    assert not offers_memory_tools(llm.requests[-1])


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
    conversation = (await a.cast.conversation_for(ann_a.key)).id
    for i in range(10):
        await a.store.conversations.add_user_message(conversation, await ann_a.person_id(), "Ann", f"a{i}", 1, None)
        await b.store.conversations.add_user_message(conversation, await bob_b.person_id(), "Bob", f"b{i}", 1, None)
    stored = await b.store.conversations.recent_messages(conversation, 100)
    assert [m.content for m in reversed(stored)] == [x for i in range(10) for x in (f"a{i}", f"b{i}")]
    assert len({m.pos for m in stored}) == 20


async def test_a_summary_batch_is_written_once_when_both_processes_run_it(two, llm):
    a, b = two
    ann = Chat(a)
    conversation = (await a.cast.conversation_for(ann.key)).id
    for i in range(50 + 10):
        await a.store.conversations.add_user_message(conversation, await ann.person_id(), "Ann", f"m{i}", 5, None)

    llm.responder = lambda body: None if kind_of(body) == "chat" else text("- Ann said ten things.")
    a.summarizer.schedule(conversation)
    b.summarizer.schedule(conversation)
    await asyncio.gather(a.summarizer.idle(), b.summarizer.idle())
    summaries = await a.store.summaries.summaries(conversation)
    assert [s.content for s in summaries] == ["- Ann said ten things."]
    assert sum(1 for r in llm.requests if kind_of(r) != "chat") == 1


async def delivered(process, message: IncomingMessage):
    """The turn, and its reply delivered as by its adapter (the line moves once it is shown)."""
    return await shown(process, await process.turns.handle(message))


async def test_one_persons_messages_alternating_between_processes_are_answered_in_order_once_each(two, llm):
    """As a webhook behind a load balancer: each message goes to the next process as soon as the
    previous one was kept, while earlier turns are still being answered."""
    processes = two
    llm.responder = lambda body: text("Okay.", delay=0.05)
    replies = []
    for n in range(10):
        kept = asyncio.Event()
        chat = Chat(processes[n % 2])
        message = IncomingMessage(chat.key, chat.identity, chat.name, f"message {n}", kept=kept.set)
        replies.append(asyncio.create_task(delivered(processes[n % 2], message)))
        await kept.wait()
    await asyncio.gather(*replies)
    answered = [r["messages"][-1]["content"] for r in llm.requests if kind_of(r) == "chat"]
    assert answered == [f"message {n}" for n in range(10)]
    conversation = (await processes[0].cast.conversation_for(Chat(processes[0]).key)).id
    stored = list(reversed(await processes[1].store.conversations.recent_messages(conversation, 100)))
    assert [m.role for m in stored] == ["user", "assistant"] * 10
    assert [m.content for m in stored[::2]] == [f"message {n}" for n in range(10)]
