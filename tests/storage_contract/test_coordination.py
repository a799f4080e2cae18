"""The Coordination port, between two stores on one database (two processes): a conversation is
answered by one at a time, a job is claimed by one, meta is shared."""

import asyncio

import pytest

from storage.ports import AlreadySaved, CallLimit, CapReached, LeftTheLine
from tests.conftest import eventually


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
    tries = 0
    try_start = second.turns._try_start

    async def counted(ticket):
        nonlocal tries
        tries += 1
        return await try_start(ticket)
    second.turns._try_start = counted
    waiting = asyncio.create_task(second.turns.begin_turn(chat, ann, two.id))
    await eventually(lambda: tries >= 3)  # the second looked three times…
    assert not waiting.done()  # …and waits for the conversation
    reply = await first.turns.finish_turn(running, one, "Mira", "reply to one", 3, {})
    await first.turns.shown(reply.id, ["1"])  # the line moves once the reply is shown
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
        reply = await stores[n].turns.finish_turn(turn, messages[n], "Mira", f"reply {n}", 2, {})
        await stores[n].turns.shown(reply.id, [f"{n}"])

    await asyncio.gather(*(answer(n) for n in reversed(range(6))))  # the last asks first
    assert started == [0, 1, 2, 3, 4, 5]


async def written_by_two_processes_at_once(open_backend, contents: list[str]) -> tuple[int, int]:
    """Ann's character memories with these contents, added at once by two processes: how many
    adds were taken (a full scope or the same words refuse the others), and how many are kept."""
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")

    async def add(n: int, content: str) -> bool:
        try:
            await (first if n % 2 else second).memories.add_memory(ann, mira, "character", content, 2, False, "ai")
            return True
        except (CapReached, AlreadySaved):
            return False

    taken = sum(await asyncio.gather(*(add(n, content) for n, content in enumerate(contents))))
    return taken, await second.memories.count_memories(ann, mira, "character", False)


async def test_the_unpinned_cap_of_100_holds_for_two_processes_writing_at_once(open_backend):
    assert await written_by_two_processes_at_once(open_backend, [f"fact {n}" for n in range(120)]) == (100, 100)


async def test_the_same_words_written_by_two_processes_at_once_are_kept_once(open_backend):
    assert await written_by_two_processes_at_once(open_backend, ["Ann keeps bees"] * 8) == (1, 1)


async def test_model_calls_are_taken_atomically_in_every_process_and_free_up_after_60_seconds(open_backend, clock):
    """[limits] turns_per_minute = 3, with 12 calls asked at once by two processes: 3 are taken."""
    first, second = await open_backend(), await open_backend()
    limit = CallLimit("person:1", 3, 60.0)
    waits = await asyncio.gather(*((first if n % 2 else second).coordination.take_call(limit) for n in range(12)))
    assert waits.count(None) == 3
    assert {w for w in waits if w is not None} == {60}
    clock.now += 30
    assert await first.coordination.take_call(limit) == 30  # nothing counted for a refusal
    assert await second.coordination.past_limit(limit)  # asked, not taken
    assert await first.coordination.take_call(CallLimit("chat:telegram:-100", 3, 60.0)) is None  # its own count
    clock.now += 31
    assert not await second.coordination.past_limit(limit)
    assert await second.coordination.take_call(limit) is None


async def test_a_message_and_its_call_and_its_place_in_line_are_stored_together(open_backend, clock):
    store = await open_backend()
    mira = await store.characters.ensure_character("Mira")
    ann = await store.people.person_for_identity("telegram", "501")
    chat = (await store.conversations.conversation("telegram", "501", None, mira, False)).id
    limit = CallLimit(f"person:{ann}", 2, 60.0)
    arrivals = [await store.turns.store_and_queue(chat, ann, "Ann", f"m{n}", 1, str(n), limit) for n in range(3)]
    assert [a.wait_s is None for a in arrivals] == [True, True, False]
    assert arrivals[0].turn_id is not None and arrivals[1].ticket is not None  # started at once; in line behind it
    assert arrivals[2].wait_s == 60 and arrivals[2].message.content == "m2"  # kept, not queued
    assert [m.content for m in await store.conversations.recent_messages(chat, 10)] == ["m2", "m1", "m0"]


async def test_a_platform_message_delivered_twice_is_stored_once_in_its_conversation(open_backend, clock):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    other = (await first.conversations.conversation("telegram", "502", None, mira, False)).id
    arrivals = await asyncio.gather(*((first if n % 2 else second).turns.store_and_queue(
        chat, ann, "Ann", "hello", 1, "77", None) for n in range(3)))
    assert sum(a.message is not None for a in arrivals) == 1
    assert sum(a.message is None and a.ticket is None for a in arrivals) == 2
    assert (await first.turns.store_and_queue(other, ann, "Ann", "hello", 1, "77", None)).message is not None
    assert (await first.turns.store_and_queue(chat, ann, "Ann", "no id", 1, None, None)).message is not None
    assert (await first.turns.store_and_queue(chat, ann, "Ann", "no id", 1, None, None)).message is not None


async def test_a_platform_update_is_taken_once_by_all_processes(open_backend):
    first, second = await open_backend(), await open_backend()
    seen = await asyncio.gather(*((first if n % 2 else second).coordination.first_delivery("telegram:1:500")
                                  for n in range(4)))
    assert sorted(seen) == [False, False, False, True]
    assert await second.coordination.first_delivery("telegram:1:501")


async def test_start_up_recovery_leaves_a_live_processs_running_turn_alone(open_backend):
    """A process starting next to a live one must not interrupt the turn that one is answering:
    only the turns of processes that are gone are interrupted (SPEC 9)."""
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    message = await first.conversations.add_user_message(chat, ann, "Ann", "hello", 1, None)
    running = await first.turns.begin_turn(chat, ann, message.id)
    assert await second.turns.recover_interrupted_turns() == 0
    assert (await second.turns.turn(running)).status == "running"


def looks_of(turns) -> list[tuple[int, int | None]]:
    """Each time `turns` has looked whether a waiting turn may start: (its ticket, the turn
    started, or None: it still waits)."""
    looks: list[tuple[int, int | None]] = []
    try_start = turns._try_start

    async def counted(ticket):
        started = await try_start(ticket)
        looks.append((ticket, started))
        return started
    turns._try_start = counted
    return looks


async def a_running_turn(store):
    """Ann's first message in a scene, its turn running: (scene, Ann, the message, the turn)."""
    mira = await store.characters.ensure_character("Mira")
    ann = await store.people.person_for_identity("telegram", "501")
    chat = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    first = await store.conversations.add_user_message(chat, ann, "Ann", "first", 1, None)
    return chat, ann, first, await store.turns.begin_turn(chat, ann, first.id)


async def test_of_a_processs_waiting_turns_only_the_first_looks_at_the_database(open_backend):
    """SPEC 9 "Waiting costs nothing": 20 turns wait behind a running one; only the first of them
    looks, ever less often, and the rest wait for the line to move."""
    store = await open_backend()
    chat, ann, first, running = await a_running_turn(store)
    later = [await store.conversations.add_user_message(chat, ann, "Ann", f"m{n}", 1, None) for n in range(20)]
    tries = looks_of(store.turns)
    tickets = [await store.turns.queue_turn(chat, ann, message.id) for message in later]
    waiting = [asyncio.create_task(store.turns.start_turn(ticket)) for ticket in tickets]
    await asyncio.sleep(1.0)
    assert {ticket for ticket, _ in tries} == {tickets[0]} and len(tries) <= 8  # 20 ms, doubling to 0.5 s: not 20 × 50 a second
    reply = await store.turns.finish_turn(running, first, "Mira", "reply", 1, {})
    await store.turns.shown(reply.id, ["1"])
    started = await asyncio.wait_for(waiting[0], 5)  # woken at once by the reply shown
    await store.turns.fail_turn(started)
    await asyncio.wait_for(waiting[1], 5)
    for task in waiting[2:]:
        task.cancel()
    await asyncio.gather(*waiting[2:], return_exceptions=True)


async def test_a_stopping_process_takes_its_waiting_turns_out_of_line_and_keeps_their_tickets(open_backend):
    """SPEC 9: told to stop, a process does not wait for the line; what waited is answered by
    another process (or after the restart), in order, once."""
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    one = await first.conversations.add_user_message(chat, ann, "Ann", "one", 1, None)
    two = await second.conversations.add_user_message(chat, ann, "Ann", "two", 1, None)
    running = await first.turns.begin_turn(chat, ann, one.id)
    ticket = await second.turns.queue_turn(chat, ann, two.id)
    looks = looks_of(second.turns)
    waiting = asyncio.create_task(second.turns.start_turn(ticket))
    await eventually(lambda: looks)  # it waits in line
    second.turns.leave_lines()  # SIGTERM
    with pytest.raises(LeftTheLine):
        await asyncio.wait_for(waiting, 5)
    reply = await first.turns.finish_turn(running, one, "Mira", "reply to one", 3, {})
    await first.turns.shown(reply.id, ["1"])
    answered = await asyncio.wait_for(first.turns.start_turn(ticket), 5)  # still in line: taken here
    assert (await first.turns.turn(answered)).user_message_id == two.id


async def test_a_waiting_turn_is_woken_at_once_when_the_reply_before_is_shown(open_backend, monkeypatch):
    """SPEC 9: the reply shown wakes the next turn of its process — no polling stands in for it
    (polling is slowed to once in 30 s here: only the wake-up can start it within a second)."""
    import storage.sql.turns

    monkeypatch.setattr(storage.sql.turns, "POLL_S", 30.0)
    monkeypatch.setattr(storage.sql.turns, "MAX_POLL_S", 30.0)
    store = await open_backend()
    chat, ann, first, running = await a_running_turn(store)
    second = await store.conversations.add_user_message(chat, ann, "Ann", "second", 1, None)
    looks = looks_of(store.turns)
    waiting = asyncio.create_task(store.turns.start_turn(await store.turns.queue_turn(chat, ann, second.id)))
    await eventually(lambda: looks)
    assert [started for _, started in looks] == [None]  # it looked once, and waits
    reply = await store.turns.finish_turn(running, first, "Mira", "reply", 1, {})
    await eventually(lambda: len(looks) == 2)  # woken by the turn that ended, it looked again
    assert [started for _, started in looks] == [None, None]  # the reply is not shown yet
    await store.turns.shown(reply.id, ["1"])
    started = await asyncio.wait_for(waiting, 1.0)
    assert (await store.turns.turn(started)).user_message_id == second.id


@pytest.mark.parametrize("delivery", ["shown", "taken back"])
async def test_the_next_turn_waits_until_the_reply_before_is_shown_or_taken_back(open_backend, delivery):
    """SPEC 15 "What was not shown was not said": a reply stored but still being sent holds its
    conversation's line, so the next turn never reads a reply that is then taken back; shown or
    taken back, the next turn starts at once (in another process too)."""
    store, other = await open_backend(), await open_backend()
    chat, ann, first, running = await a_running_turn(store)
    second = await store.conversations.add_user_message(chat, ann, "Ann", "second", 1, None)
    reply = await store.turns.finish_turn(running, first, "Mira", "a reply being sent", 4, {})
    looks = looks_of(other.turns)
    waiting = asyncio.create_task(other.turns.start_turn(await other.turns.queue_turn(chat, ann, second.id)))
    await eventually(lambda: len(looks) >= 3 or waiting.done())  # the other process looked, again and again
    assert {started for _, started in looks} == {None}  # and waits while the reply is being sent
    if delivery == "shown":
        await store.turns.shown(reply.id, ["1"])
    else:
        await store.turns.withdraw_reply(reply.id)
    started = await asyncio.wait_for(waiting, 2.0)
    window = [m.content for m in await other.conversations.recent_messages(chat, 10)]
    assert ("a reply being sent" in window) == (delivery == "shown")
    assert (await other.turns.turn(started)).user_message_id == second.id


async def test_a_message_starts_its_turn_as_it_is_stored_only_when_nothing_holds_its_conversation(open_backend):
    """SPEC 9 and 15, for a message as it arrives: its turn starts in the transaction that stores
    it only when `start_turn` would start it at once; behind a running turn, a reply still being
    sent or a message waiting in line, it takes a ticket (in another process too)."""
    store, other = await open_backend(), await open_backend()
    chat, ann, first, running = await a_running_turn(store)

    async def arrives(text: str):
        return await other.turns.store_and_queue(chat, ann, "Ann", text, 1, None, None)

    behind_running = await arrives("behind a running turn")
    await other.turns.withdraw(behind_running.ticket)
    reply = await store.turns.finish_turn(running, first, "Mira", "a reply being sent", 4, {})
    behind_sending = await arrives("behind a reply being sent")
    await other.turns.withdraw(behind_sending.ticket)
    await store.turns.shown(reply.id, ["1"])
    waiting = await store.turns.queue_turn(chat, ann, behind_sending.message.id)
    behind_waiting = await arrives("behind a message waiting")
    assert [a.turn_id for a in (behind_running, behind_sending, behind_waiting)] == [None, None, None]
    for ticket in (waiting, behind_waiting.ticket):
        await other.turns.fail_turn(await asyncio.wait_for(other.turns.start_turn(ticket), 2.0))
    for text in ("to a free conversation", "after it"):
        free = await arrives(text)
        assert free.ticket is None and (await store.turns.turn(free.turn_id)).status == "running"
        await store.turns.fail_turn(free.turn_id)  # nothing of it is left in line


async def test_a_reply_whose_sender_died_while_sending_is_taken_back_by_the_process_waiting(open_backend, request):
    """A process dies between storing a reply and seeing it shown: the next turn's process,
    waiting behind it, takes the reply back (it was never said) and leaves its message to be
    answered again, as a reply cut off mid-way (SPEC 9, 15)."""
    if "postgresql" not in request.node.name:
        pytest.skip("SQLite only finds a dead process by its pid, which no test can fake in process; "
                    "PostgreSQL's advisory lock goes with the connection")
    first, second = await open_backend(), await open_backend()
    chat, ann, message, running = await a_running_turn(first)
    await first.turns.finish_turn(running, message, "Mira", "never sent", 2, {})
    later = await second.conversations.add_user_message(chat, ann, "Ann", "hello?", 1, None)
    waiting = asyncio.create_task(second.turns.start_turn(await second.turns.queue_turn(chat, ann, later.id)))
    await first.close()  # dies while sending
    mira = await second.characters.ensure_character("Mira")
    await eventually(lambda: second.turns.interrupted_turns("telegram", mira))
    assert "never sent" not in [m.content for m in await second.conversations.recent_messages(chat, 10)]
    waiting.cancel()  # it waits for the first message to be answered again (its adapter's recovery)
    await asyncio.gather(waiting, return_exceptions=True)
