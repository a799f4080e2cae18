"""On PostgreSQL, processes on any machine learn that another one is gone from the database
(its presence lock is free the moment its connection drops): its running turn, its place in a
conversation's line and its claims stop holding anyone up. (Closing a store is how a process
leaves here; the real SIGKILL is in test_webhook_processes.py.)"""

import asyncio

import pytest

from bot.saved_memories import CAPS
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


async def test_the_running_turn_of_a_process_that_is_gone_is_undone_and_the_next_turn_starts(url, tmp_path):
    gone, alive = await open_store(url, CAPS, tmp_path), await open_store(url, CAPS, tmp_path)
    try:
        mira, ann, chat = await conversation(gone)
        first = await gone.conversations.add_user_message(chat, ann, "Ann", "one", 1, None)
        second = await alive.conversations.add_user_message(chat, ann, "Ann", "two", 1, None)
        cut_off = await gone.turns.begin_turn(chat, ann, first.id)
        await gone.memories.add_memory(ann, mira, "character", "written mid-reply", 3, False, "ai", turn_id=cut_off)
        await gone.close()
        started = await asyncio.wait_for(alive.turns.begin_turn(chat, ann, second.id), 5)
        assert (await alive.turns.turn(started)).status == "running"
        assert (await alive.turns.turn(cut_off)).status == "failed"
        assert await alive.memories.count_memories(ann, mira, "character", False) == 0  # its write undone
        [interrupted] = await alive.turns.interrupted_turns("telegram", mira)
        assert interrupted.user_message.content == "one"  # waiting to be answered again
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
        report = await alive.maintain(0.0, None, None)
        assert "1 gone processes forgotten" in report
        assert await alive.db.value("SELECT COUNT(*) FROM processes") == 1
    finally:
        await alive.close()
