"""On PostgreSQL, /forgetme and what is written for the same person meanwhile wait for each
other's rows in one order: both hold the person's turns first (a reply its turn, /forgetme all of
them), then the person's row (a spend or a message refers to it), so a reply or a message under
way is waited for and then forgotten with the rest, or finds its turn or its person gone.
(Before, each waited for a row the other held, and what /forgetme read before the other was
kept left it behind.) Where an order still crosses (a memory tool's write holds the person's row,
then refers to its turn; a message holds its conversation's row, then refers to its person),
PostgreSQL breaks the deadlock by ending one of the two transactions: /forgetme's runs again
(`in_transaction`) and never fails for it. Each test stages one order: one transaction is paused
after a statement until the other waits for a lock. (SQLite's one writer never deadlocks.)"""

import asyncio
import contextlib

import asyncpg
import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.ports import Spend
from tests.postgres import fresh_schema_url

DAY = "2027-01-15"


@pytest.fixture
async def store(tmp_path):
    schemas = fresh_schema_url()
    opened = await open_store(await anext(schemas), CAPS, tmp_path)
    yield opened
    await opened.close()
    await anext(schemas, None)


async def a_chain_reply_to_ann(store):
    """Ann speaks in a scene, Mira answers her, and Aki's turn answers Mira (a chain Ann set off)."""
    mira, aki = await store.characters.ensure_character("Mira"), await store.characters.ensure_character("Aki")
    ann = await store.people.person_for_identity("telegram", "501")
    scene = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    asked = await store.conversations.add_user_message(scene, ann, "Ann", "hello, both of you", 5, "a1")
    first = await store.turns.begin_turn(scene, ann, asked.id, mira)
    answer = await store.turns.finish_turn(first, asked, "Mira", "Hello Ann! Aki?", 5, {}, character_id=mira)
    await store.turns.shown(answer.id, ["m1"])
    chain = await store.turns.begin_turn(scene, ann, answer.id, aki)
    return ann, aki, scene, answer, chain


@contextlib.contextmanager
def paused_after(store, statement: str):
    """The next transaction that runs a statement starting with `statement` stops after it, holding
    what it holds, until the event this yields is set."""
    go, paused = asyncio.Event(), asyncio.Event()
    transaction = store.db.transaction

    @contextlib.asynccontextmanager
    async def staged(short=False):
        async with transaction(short) as tx:
            for name in ("execute", "one", "all", "value"):
                setattr(tx, name, pausing(getattr(tx, name)))
            yield tx

    def pausing(run):
        async def then_pause(sql, *params):
            done = await run(sql, *params)
            if sql.startswith(statement) and not paused.is_set():
                paused.set()
                await go.wait()
            return done
        return then_pause

    store.db.transaction = staged
    try:
        yield paused, go
    finally:
        store.db.transaction = transaction


async def until_a_transaction_waits_for_a_lock(store):
    for _ in range(250):
        if await store.db.value("SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND datname = current_database()"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("no transaction came to wait for a lock")


async def nothing_of_ann_is_left(store, scene):
    assert await store.people.person_of_identity("telegram", "501") is None
    left = await store.conversations.recent_messages(scene, 10)
    assert [m.content for m in left] == []  # her message, Mira's answer to it and Aki's to Mira's


async def test_forgetme_while_a_chain_reply_is_kept_waits_for_it_and_forgets_the_reply(store):
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    with paused_after(store, "INSERT INTO usage_days") as (paused, go):  # the reply holds Ann's row
        keeping = asyncio.create_task(store.turns.finish_turn(
            chain, answer, "Aki", "Hello from me too!", 5, {}, character_id=aki, spend=Spend(ann, aki, DAY, 10, 5)))
        await paused.wait()
    forgetting = asyncio.create_task(store.people.forget_person(ann, DAY))  # waits for the reply's turn
    await until_a_transaction_waits_for_a_lock(store)
    go.set()
    kept = await asyncio.wait_for(keeping, 30)
    assert kept.content == "Hello from me too!"
    assert await asyncio.wait_for(forgetting, 30) == [scene]  # after the reply: it goes too
    await nothing_of_ann_is_left(store, scene)


async def test_forgetme_never_waits_for_another_persons_reply_being_kept(store):
    """/forgetme holds the person's own turns only: Bob's reply, paused mid-keep in his DM,
    holds nothing Ann's /forgetme needs."""
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    mira = await store.characters.ensure_character("Mira")
    bob = await store.people.person_for_identity("telegram", "502")
    dm = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    asked = await store.conversations.add_user_message(dm, bob, "Bob", "hello", 1, "b1")
    turn = await store.turns.begin_turn(dm, bob, asked.id)
    with paused_after(store, "INSERT INTO usage_days") as (paused, go):  # Bob's reply holds his turn
        keeping = asyncio.create_task(store.turns.finish_turn(
            turn, asked, "Mira", "Hello Bob!", 3, {}, spend=Spend(bob, mira, DAY, 10, 5)))
        await paused.wait()
    try:
        assert await asyncio.wait_for(store.people.forget_person(ann, DAY), 10) == [scene]
    finally:
        go.set()
    assert (await asyncio.wait_for(keeping, 30)).content == "Hello Bob!"
    await nothing_of_ann_is_left(store, scene)


async def test_a_reply_kept_while_forgetme_holds_its_turn_waits_and_finds_the_turn_gone(store):
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    with paused_after(store, "DELETE FROM messages WHERE person_id") as (paused, go):  # /forgetme holds the turn
        forgetting = asyncio.create_task(store.people.forget_person(ann, DAY))
        await paused.wait()
    keeping = asyncio.create_task(store.turns.finish_turn(  # waits for its turn
        chain, answer, "Aki", "Hello from me too!", 5, {}, character_id=aki, spend=Spend(ann, aki, DAY, 10, 5)))
    await until_a_transaction_waits_for_a_lock(store)
    go.set()
    assert await asyncio.wait_for(forgetting, 30) == [scene]
    assert await asyncio.wait_for(keeping, 30) is None  # its turn went with Ann
    await nothing_of_ann_is_left(store, scene)


async def test_forgetme_ended_to_break_a_deadlock_with_a_memory_tools_write_runs_again_and_forgets_it(store):
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    with paused_after(store, "SELECT id FROM persons") as (paused, go):  # the write holds Ann's row
        writing = asyncio.create_task(store.memories.add_memory(ann, aki, "character", "Ann greets everyone", 4,
                                                                False, "ai", turn_id=chain))
        await paused.wait()
    forgetting = asyncio.create_task(store.people.forget_person(ann, DAY))  # holds her turns, waits for her row
    await until_a_transaction_waits_for_a_lock(store)
    go.set()  # the write refers to its turn: a deadlock, which ends /forgetme's transaction
    assert (await asyncio.wait_for(writing, 30)).content == "Ann greets everyone"
    assert await asyncio.wait_for(forgetting, 30) == [scene]  # run again after the write: it goes too
    await nothing_of_ann_is_left(store, scene)
    assert await store.memories.count_memories(ann, aki, "character", False) == 0


async def test_a_spend_added_while_forgetme_deletes_its_person_waits_and_adds_nothing(store):
    """SPEC 17: /forgetme keeps the day's spend by platform id; a spend arriving as the person's
    row goes waits for it and is added to no one, where the reference alone would have failed."""
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    with paused_after(store, "DELETE FROM persons") as (paused, go):
        forgetting = asyncio.create_task(store.people.forget_person(ann, DAY))
        await paused.wait()
    adding = asyncio.create_task(store.usage.add_turn(ann, aki, DAY, 10, 5))
    await until_a_transaction_waits_for_a_lock(store)
    go.set()
    assert await asyncio.wait_for(forgetting, 30) == [scene]
    await asyncio.wait_for(adding, 30)
    assert await store.db.value("SELECT COUNT(*) FROM usage_days") == 0


async def test_a_message_stored_while_forgetme_waits_for_it_is_forgotten_too(store):
    """SPEC 6: /forgetme deletes the person's messages. One being stored holds their row (its
    reference does); /forgetme waits for it, then deletes it too: it is never left behind with
    its person's id taken off (the reference's ON DELETE SET NULL), as it was when /forgetme read
    their messages before it came to their row."""
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    with paused_after(store, "INSERT INTO messages") as (paused, go):
        arriving = asyncio.create_task(store.turns.store_and_queue(scene, ann, "Ann", "one more thing", 3, "a2", None))
        await paused.wait()
    forgetting = asyncio.create_task(store.people.forget_person(ann, DAY))
    await until_a_transaction_waits_for_a_lock(store)
    go.set()
    assert (await asyncio.wait_for(arriving, 30)).message.content == "one more thing"
    assert await asyncio.wait_for(forgetting, 30) == [scene]
    await nothing_of_ann_is_left(store, scene)


async def test_a_message_arriving_once_forgetme_holds_the_persons_row_is_not_stored(store):
    """The arrival waits for /forgetme, which goes on; the message is refused (a deadlock ended
    it, or its person is gone: the person is told it was not saved) and nothing of Ann is left."""
    ann, aki, scene, answer, chain = await a_chain_reply_to_ann(store)
    with paused_after(store, "SELECT id FROM persons") as (paused, go):
        forgetting = asyncio.create_task(store.people.forget_person(ann, DAY))
        await paused.wait()
    arriving = asyncio.create_task(store.turns.store_and_queue(scene, ann, "Ann", "one more thing", 3, "a2", None))
    await until_a_transaction_waits_for_a_lock(store)
    go.set()
    assert await asyncio.wait_for(forgetting, 30) == [scene]
    with pytest.raises((asyncpg.DeadlockDetectedError, asyncpg.ForeignKeyViolationError)):
        await asyncio.wait_for(arriving, 30)
    await nothing_of_ann_is_left(store, scene)
