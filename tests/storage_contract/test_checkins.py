"""The Checkins port (SPEC 14), on every backend: a one-to-one conversation's absence counted as
its person's messages are stored, found when due, its check-in stored once with its "sent" mark,
taken back, passed over, and the person's choice."""

import asyncio

from storage.ports import Absence

FROM = 4  # the person's messages before a check-in may follow an absence


async def conversation_with(store, messages: int, user: str = "501"):
    mira = await store.characters.ensure_character("Mira")
    person = await store.people.person_for_identity("telegram", user)
    chat = (await store.conversations.conversation("telegram", user, None, mira, False)).id
    for n in range(messages):
        await store.turns.store_and_queue(chat, person, "Ann", f"message {n}", 2, None, None, checkin_from=FROM)
    return mira, person, chat


async def test_an_absence_is_due_once_the_person_wrote_4_messages_and_went_quiet(open_backend, clock):
    store = await open_backend()
    mira, person, chat = await conversation_with(store, 3)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == []
    await conversation_with(store, 1)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == [Absence(chat, person, clock.now)]
    assert await store.checkins.due(mira, "telegram", clock.now - 1, 100) == []  # not away long enough
    assert await store.checkins.due(mira, "discord", clock.now + 1, 100) == []


async def test_messages_stored_without_checkin_from_never_count(open_backend, clock):
    store = await open_backend()
    mira = await store.characters.ensure_character("Mira")
    person = await store.people.person_for_identity("telegram", "501")
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    for n in range(6):
        await store.turns.store_and_queue(group, person, "Ann", f"message {n}", 2, None, None)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == []


async def test_a_check_in_is_stored_once_by_two_processes_at_once(open_backend, clock):
    first, second = await open_backend(), await open_backend()
    mira, person, chat = await conversation_with(first, 4)
    absence, = await first.checkins.due(mira, "telegram", clock.now + 1, 100)
    stored = await asyncio.gather(first.checkins.store(absence, "Mira", "hello?", 2, {"checkin": True}),
                                  second.checkins.store(absence, "Mira", "hello?", 2, {"checkin": True}))
    assert len([row for row in stored if row is not None]) == 1
    assert await first.checkins.due(mira, "telegram", clock.now + 1, 100) == []
    assert (await first.turns.last_receipt(chat, person)).receipt == {"checkin": True}


async def test_a_check_in_is_stored_after_the_person_deleted_what_they_wrote(open_backend, clock):
    store = await open_backend()
    mira = await store.characters.ensure_character("Mira")
    person = await store.people.person_for_identity("telegram", "501")
    chat = (await store.conversations.conversation("telegram", "501", None, mira, False)).id
    for n in range(FROM):
        await store.turns.store_and_queue(chat, person, "Ann", f"message {n}", 2, f"p{n}", None, checkin_from=FROM)
        assert await store.conversations.delete_platform_message(chat, f"p{n}")  # as Discord tells of it
    absence, = await store.checkins.due(mira, "telegram", clock.now + 1, 100)
    assert await store.checkins.store(absence, "Mira", "hello?", 2, {"checkin": True}) is not None
    assert (await store.turns.last_receipt(chat, person)).receipt == {"checkin": True}


async def test_a_check_in_the_person_wrote_before_is_not_stored(open_backend, clock):
    store = await open_backend()
    mira, person, chat = await conversation_with(store, 4)
    absence, = await store.checkins.due(mira, "telegram", clock.now + 1, 100)
    clock.now += 10
    await conversation_with(store, 1)  # a new message: a new absence
    assert await store.checkins.store(absence, "Mira", "hello?", 2, {}) is None


async def test_a_withdrawn_check_in_goes_and_its_absence_waits_again_or_not(open_backend, clock):
    store = await open_backend()
    mira, person, chat = await conversation_with(store, 4)
    absence, = await store.checkins.due(mira, "telegram", clock.now + 1, 100)
    row = await store.checkins.store(absence, "Mira", "hello?", 2, {})
    await store.checkins.withdraw(absence, row.id, wait_again=True)
    assert await store.conversations.message(row.id) is None
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == [absence]
    row = await store.checkins.store(absence, "Mira", "hello?", 2, {})
    await store.checkins.withdraw(absence, row.id, wait_again=False)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == []


async def test_passed_over_and_turned_off_absences_are_not_due_until_turned_on(open_backend, clock):
    store = await open_backend()
    mira, person, chat = await conversation_with(store, 4)
    absence, = await store.checkins.due(mira, "telegram", clock.now + 1, 100)
    await store.checkins.pass_over(absence)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == []
    await store.checkins.set_wanted(person, mira, False, FROM)
    clock.now += 10
    await conversation_with(store, 1)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == []  # off, even after writing
    await store.checkins.set_wanted(person, mira, True, FROM)
    assert len(await store.checkins.due(mira, "telegram", clock.now + 1, 100)) == 1


async def test_turning_check_ins_off_changes_only_the_persons_own(open_backend, clock):
    store = await open_backend()
    mira, ann, _ = await conversation_with(store, 4)
    _, bob, bobs_chat = await conversation_with(store, 4, user="502")
    await store.checkins.set_wanted(ann, mira, False, FROM)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == [Absence(bobs_chat, bob, clock.now)]


async def test_linking_two_accounts_keeps_check_ins_off_where_either_turned_them_off(open_backend, clock):
    store = await open_backend()
    mira, ann_telegram, chat = await conversation_with(store, 4)
    ann_discord = await store.people.person_for_identity("discord", "901")
    await store.checkins.set_wanted(ann_discord, mira, False, FROM)
    await store.people.merge_persons(ann_telegram, ann_discord)
    clock.now += 10
    await conversation_with(store, 1)
    assert await store.checkins.due(mira, "telegram", clock.now + 1, 100) == []


async def test_an_absence_another_process_sent_its_check_in_for_is_no_longer_waiting(open_backend, clock):
    """What a process asks as it takes a check-in's claim, so a scan that found the absence before
    another process sent it makes no model call (bot/writing_first/outbox.py)."""
    first, second = await open_backend(), await open_backend()
    mira, person, chat = await conversation_with(first, FROM)
    [absence] = await second.checkins.due(mira, "telegram", clock.now + 1, 100)
    assert await second.checkins.still_waiting(absence)
    assert await first.checkins.store(absence, "Mira", "Hello again?", 3, {}) is not None
    assert not await second.checkins.still_waiting(absence)
