"""On PostgreSQL, processes on any machine learn that another one is gone from the database
(its presence lock is free the moment its connection drops): its running turn, its place in a
conversation's line and its claims stop holding anyone up. (Closing a store is how a process
leaves here; the real SIGKILL is in test_webhook_processes.py.)"""

import asyncio

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from tests.postgres import fresh_schema_url


@pytest.fixture
async def url():
    schemas = fresh_schema_url()
    yield await anext(schemas)
    await anext(schemas, None)


async def conversation(store):
    mira = await store.characters.ensure_character("Mira")
    ann = await store.people.person_for_identity("telegram", "501")
    chat = (await store.conversations.conversation("telegram", "501", None, mira, False)).id
    return mira, ann, chat


async def test_a_gone_processes_turns_are_answered_again_at_once_and_before_the_later_message(url, tmp_path):
    """Process A dies with one turn running and one queued; B holds a later message of the same
    conversation. B's waiter finds A gone at once, undoes A's running turn, and wakes B's
    recovery; A's two messages are answered again first, in order, and only then B's."""
    gone, alive = await open_store(url, CAPS, tmp_path), await open_store(url, CAPS, tmp_path)
    try:
        mira, ann, chat = await conversation(gone)
        one, two = [(await gone.turns.store_and_queue(chat, ann, "Ann", text, 1, None, None))
                    for text in ("one", "two")]
        cut_off = one.turn_id  # started as it was stored: nothing held the conversation
        await gone.memories.add_memory(ann, mira, "character", "written mid-reply", 3, False, "ai", turn_id=cut_off)
        three = await alive.turns.store_and_queue(chat, ann, "Ann", "three", 1, None, None)
        await gone.close()

        waiting = asyncio.create_task(alive.turns.start_turn(three.ticket))
        await asyncio.wait_for(alive.turns.stray_found(10), 2)  # found at once, not at a 15 s pass
        assert (await alive.turns.turn(cut_off)).status == "failed"
        assert await alive.memories.count_memories(ann, mira, "character", False) == 0  # its write undone
        answered = []
        for round in range(2):  # what the adapter's recovery does, woken by stray_found
            if round:
                await asyncio.wait_for(alive.turns.stray_found(10), 2)  # A's queued "two", found at once
            for stray in await alive.turns.interrupted_turns("telegram", mira):
                ticket = await alive.turns.requeue_interrupted_turn(stray.turn.id)
                turn_id = await asyncio.wait_for(alive.turns.start_turn(ticket), 30)  # a guard: "at once" is above
                answered.append(stray.user_message.content)
                assert not waiting.done()  # "three" waits behind what came before it
                await alive.turns.fail_turn(turn_id)
        assert answered == ["one", "two"]
        started = await asyncio.wait_for(waiting, 30)
        assert (await alive.turns.turn(started)).user_message_id == three.message.id
    finally:
        await alive.close()


async def test_a_queued_message_of_a_process_that_is_gone_is_answered_again_not_lost(url, tmp_path):
    gone, alive = await open_store(url, CAPS, tmp_path), await open_store(url, CAPS, tmp_path)
    try:
        mira, ann, chat = await conversation(gone)
        message = await gone.conversations.add_user_message(chat, ann, "Ann", "are you there?", 3, None)
        await gone.turns.queue_turn(chat, ann, message.id)
        await gone.close()
        assert await alive.turns.recover_interrupted_turns() == 1
        [interrupted] = await alive.turns.interrupted_turns("telegram", mira)
        assert interrupted.user_message.content == "are you there?"
    finally:
        await alive.close()


async def test_a_claim_of_a_process_that_is_gone_is_free_at_once_not_after_its_lease(url, tmp_path):
    gone, alive = await open_store(url, CAPS, tmp_path), await open_store(url, CAPS, tmp_path)
    try:
        claim = gone.coordination.claim("summary:1", 3600)
        assert await claim.__aenter__()
        await gone.db.close()  # the process dies holding it: no release runs
        async with alive.coordination.claim("summary:1", 3600) as mine:
            assert mine
    finally:
        await alive.close()


async def test_the_daily_maintenance_forgets_processes_that_are_gone_and_keeps_the_live_ones(url, tmp_path):
    gone, alive = await open_store(url, CAPS, tmp_path), await open_store(url, CAPS, tmp_path)
    try:
        await gone.close()
        report = await alive.maintain(0.0, None)
        assert "1 gone processes forgotten" in report
        assert await alive.db.value("SELECT COUNT(*) FROM processes") == 1
    finally:
        await alive.close()
