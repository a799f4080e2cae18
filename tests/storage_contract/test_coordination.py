"""The Coordination port, between two stores on one database (two processes): a conversation is
answered by one at a time, a job is claimed by one, meta is shared."""

import asyncio

from storage.ports import CapReached



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


async def test_two_processes_opening_a_new_database_at_once_migrate_it_once(open_backend):
    first, second = await asyncio.gather(open_backend(), open_backend())
    mira = await first.characters.ensure_character("Mira")
    assert await second.characters.ensure_character("mira") == mira


async def test_messages_stored_at_once_by_two_processes_each_take_their_own_place(open_backend):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    stored = await asyncio.gather(*(
        (first if n % 2 else second).conversations.add_user_message(chat, ann, "Ann", f"m{n}", 1, None)
        for n in range(40)))
    assert len({m.pos for m in stored}) == 40
    assert all(m.pos % 2 == 0 for m in stored)  # each leaves the odd place after it for its reply


async def test_a_new_person_seen_by_two_processes_at_once_is_one_person(open_backend):
    first, second = await open_backend(), await open_backend()
    ids = await asyncio.gather(*((first if n % 2 else second).people.person_for_identity("discord", "77")
                                 for n in range(10)))
    assert len(set(ids)) == 1


async def test_turns_start_in_the_order_they_were_queued_whichever_process_queued_them(open_backend):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    messages = [await first.conversations.add_user_message(chat, ann, "Ann", f"m{n}", 1, None) for n in range(6)]
    stores = [first if n % 2 else second for n in range(6)]
    tickets = [await s.turns.queue_turn(chat, ann, m.id) for s, m in zip(stores, messages)]
    started: list[int] = []

    async def answer(n: int) -> None:
        turn = await stores[n].turns.start_turn(tickets[n])
        started.append(n)
        await asyncio.sleep(0.01)
        await stores[n].turns.finish_turn(turn, messages[n], "Mira", f"reply {n}", 2, {})

    await asyncio.gather(*(answer(n) for n in reversed(range(6))))  # the last asks first
    assert started == [0, 1, 2, 3, 4, 5]


async def test_the_unpinned_cap_of_100_holds_for_two_processes_writing_at_once(open_backend):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")

    async def add(n: int) -> bool:
        try:
            await (first if n % 2 else second).memories.add_memory(ann, mira, "character", f"fact {n}", 2, False,
                                                                   "person")
            return True
        except CapReached:
            return False

    assert sum(await asyncio.gather(*(add(n) for n in range(120)))) == 100
    assert await second.memories.count_memories(ann, mira, "character", False) == 100


async def test_a_persons_turns_of_the_last_minute_are_counted_in_every_process(open_backend, clock):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    one = await first.conversations.add_user_message(chat, ann, "Ann", "one", 1, None)
    await first.turns.begin_turn(chat, ann, one.id)
    clock.now += 30
    two = await second.conversations.add_user_message(chat, ann, "Ann", "two", 1, None)
    await second.turns.queue_turn(chat, ann, two.id)  # queued, not started: it counts too
    assert len(await second.turns.turn_times_since(ann, clock.now - 60)) == 2
    assert len(await first.turns.turn_times_since(ann, clock.now - 10)) == 1
