"""The Coordination port, between two stores on one database (two processes): a conversation is
answered by one at a time, a job is claimed by one, meta is shared."""

import asyncio



async def test_a_job_is_claimed_by_one_process_and_free_again_after(open_backend):
    first, second = await open_backend(), await open_backend()
    async with first.coordination.claim("summary:1", 60) as mine:
        assert mine
        async with second.coordination.claim("summary:1", 60) as theirs:
            assert not theirs
    async with second.coordination.claim("summary:1", 60) as theirs:
        assert theirs


async def test_a_conversation_is_answered_by_one_process_at_a_time(open_backend):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    one = await first.conversations.add_user_message(chat, ann, "Ann", "one", 1, None)
    two = await second.conversations.add_user_message(chat, ann, "Ann", "two", 1, None)
    running = await first.turns.begin_turn(chat, ann, one.id)  # the first process answers
    waiting = asyncio.create_task(second.turns.begin_turn(chat, ann, two.id))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # the second waits for the conversation
    await first.turns.finish_turn(running, one, "Mira", "reply to one", 3, {})
    second_turn = await asyncio.wait_for(waiting, 5)
    assert (await second.turns.turn(second_turn)).status == "running"


async def test_meta_is_shared(open_backend):
    first, second = await open_backend(), await open_backend()
    await first.coordination.set_meta("maintenance_at", "1.5")
    assert await second.coordination.get_meta("maintenance_at") == "1.5"
    assert await second.coordination.get_meta("unknown") is None
