"""The Reminders port (SPEC 19) on every backend: the cap counted inside the write, a person's
own reminders only, the due ones of a platform, a letter kept once (several processes), moved
or removed when shown, due again when taken back, and gone with the turn that set them."""

import asyncio

import pytest

from storage.ports import Store, TooManyReminders

DUE = 1_800_000_000.0


async def asked(store: Store, chat: int, ann: int, answered: bool = False) -> int:
    """A turn of Ann's in her DM (what a remind tool call runs under), running or `answered`."""
    message = await store.conversations.add_user_message(chat, ann, "Ann", "remind me", 2, None)
    turn = await store.turns.begin_turn(chat, ann, message.id)
    if answered:
        reply = await store.turns.finish_turn(turn, message, "Mira", "I will.", 2, {})
        await store.turns.shown(reply.id, ["1"])
    return turn


async def test_at_most_the_cap_of_pending_reminders_is_counted_inside_the_write(store: Store, mira, ann, chat):
    turn = await asked(store, chat, ann)
    for n in range(3):
        await store.reminders.add(ann, mira, chat, turn, DUE + n, "Europe/Paris", f"thing {n}", "once", cap=3)
    with pytest.raises(TooManyReminders):
        await store.reminders.add(ann, mira, chat, turn, DUE + 9, "Europe/Paris", "one more", "once", cap=3)
    assert [r.words for r in await store.reminders.pending(ann)] == ["thing 0", "thing 1", "thing 2"]  # soonest first


async def test_the_cap_of_pending_reminders_counts_only_the_persons_own(store: Store, mira, ann, chat):
    turn = await asked(store, chat, ann)
    for n in range(3):
        await store.reminders.add(ann, mira, chat, turn, DUE + n, "UTC", f"thing {n}", "once", cap=3)
    bob = await store.people.person_for_identity("telegram", "502")
    bobs = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    await store.reminders.add(bob, mira, bobs, await asked(store, bobs, bob), DUE, "UTC", "tea", "once", cap=3)
    assert [r.words for r in await store.reminders.pending(bob)] == ["tea"]


async def test_only_the_persons_own_reminder_is_cancelled(store: Store, mira, ann, chat):
    bob = await store.people.person_for_identity("telegram", "502")
    row = await store.reminders.add(ann, mira, chat, await asked(store, chat, ann), DUE, "UTC", "tea", "once", 25)
    assert not await store.reminders.cancel(bob, row.id)
    assert await store.reminders.cancel(ann, row.id)
    assert await store.reminders.pending(ann) == []


async def test_a_stale_cancel_button_never_cancels_the_next_reminder(store: Store, mira, ann, chat):
    """A Cancel button names its reminder's id: once that reminder is gone, the id is given to no other."""
    turn = await asked(store, chat, ann)
    first = await store.reminders.add(ann, mira, chat, turn, DUE, "UTC", "tea", "once", 25)
    assert await store.reminders.cancel(ann, first.id)
    second = await store.reminders.add(ann, mira, chat, turn, DUE, "UTC", "pills", "once", 25)
    assert not await store.reminders.cancel(ann, first.id)  # pressed again on the old list
    assert await store.reminders.pending(ann) == [second]


async def test_due_finds_a_characters_reminders_due_on_a_platform(store: Store, mira, ann, chat):
    turn = await asked(store, chat, ann)
    now_due = await store.reminders.add(ann, mira, chat, turn, DUE - 5, "UTC", "now", "once", 25)
    await store.reminders.add(ann, mira, chat, turn, DUE + 60, "UTC", "later", "once", 25)
    assert await store.reminders.due(mira, "telegram", DUE, 10) == [now_due]
    assert await store.reminders.due(mira, "discord", DUE, 10) == []


async def test_a_letter_is_kept_once_and_when_shown_a_one_off_goes_and_a_daily_one_moves_on(
        open_backend, mira, ann, chat):
    here, there = await open_backend(), await open_backend()  # two processes
    turn = await asked(here, chat, ann)
    once = await here.reminders.add(ann, mira, chat, turn, DUE, "UTC", "tea", "once", 25)
    daily = await here.reminders.add(ann, mira, chat, turn, DUE, "UTC", "pills", "daily", 25)
    letter = await here.reminders.keep(once, None, "Mira", "Tea time!", 3, {})
    assert letter is not None and await there.reminders.keep(once, None, "Mira", "Tea time!", 3, {}) is None
    assert await here.reminders.due(mira, "telegram", DUE, 10) == [daily]  # not due while being sent
    pills = await there.reminders.keep(daily, DUE + 86_400, "Mira", "Pills!", 2, {})
    for shown in (letter, pills):
        await here.turns.shown(shown.id, ["1"])
    (moved,) = await here.reminders.pending(ann)
    assert (moved.words, moved.due_at) == ("pills", DUE + 86_400)


async def test_a_letter_is_kept_after_the_persons_messages_there_are_gone_but_never_for_a_forgotten_person(
        store: Store, mira, ann, chat):
    row = await store.reminders.add(ann, mira, chat, await asked(store, chat, ann), DUE, "UTC", "tea", "once", 25)
    for message in await store.conversations.recent_messages(chat, 10):  # deleted on the platform
        await store.conversations.set_platform_message_ids(chat, message.id, [f"p{message.id}"])
        assert await store.conversations.delete_platform_message(chat, f"p{message.id}")
    letter = await store.reminders.keep(row, None, "Mira", "Tea time!", 3, {})
    assert letter is not None
    await store.turns.shown(letter.id, ["1"])
    assert await store.reminders.pending(ann) == []  # sent, once

    again = await store.reminders.add(ann, mira, chat, await asked(store, chat, ann), DUE, "UTC", "pills", "once", 25)
    await store.people.forget_person(ann, "2027-01-15")  # meanwhile, while the letter was written
    assert await store.reminders.keep(again, None, "Mira", "Pills!", 2, {}) is None
    assert await store.conversations.recent_messages(chat, 10) == []


async def test_a_letter_in_a_group_answers_the_persons_own_last_message_there(store: Store, mira, ann):
    """Ann asked for the reminder in a group where Bob spoke after her: the letter's turn answers
    Ann's words (what /memory why and /forgetme go by), never Bob's."""
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    turn = await asked(store, group, ann, answered=True)
    bob = await store.people.person_for_identity("telegram", "502")
    await store.conversations.add_user_message(group, bob, "Bob", "lovely weather", 2, None)
    row = await store.reminders.add(ann, mira, group, turn, DUE, "UTC", "tea", "once", 25)
    letter = await store.reminders.keep(row, None, "Mira", "Tea time!", 3, {})
    answered = await store.turns.last_receipt(group, ann, mira)
    assert answered.reply_message_id == letter.id
    assert (await store.conversations.message(answered.user_message_id)).person_id == ann


async def test_a_letter_is_kept_once_by_two_processes_at_once(open_backend, mira, ann, chat):
    here, there = await open_backend(), await open_backend()
    row = await here.reminders.add(ann, mira, chat, await asked(here, chat, ann), DUE, "UTC", "tea", "once", 25)
    kept = await asyncio.gather(*(store.reminders.keep(row, None, "Mira", "Tea time!", 3, {})
                                  for store in (here, there, here, there)))
    assert len([letter for letter in kept if letter is not None]) == 1
    assert [m.content for m in await here.conversations.recent_messages(chat, 10)].count("Tea time!") == 1


async def test_a_letter_taken_back_leaves_its_reminder_due_again(store: Store, mira, ann, chat):
    row = await store.reminders.add(ann, mira, chat, await asked(store, chat, ann), DUE, "UTC", "tea", "once", 25)
    letter = await store.reminders.keep(row, None, "Mira", "Tea time!", 3, {})
    await store.reminders.take_back(letter.id)
    assert await store.reminders.due(mira, "telegram", DUE, 10) == [row]
    assert await store.conversations.message(letter.id) is None  # what was not shown was not said


async def test_a_turn_taken_back_takes_the_reminders_it_set(store: Store, mira, ann, chat):
    turn = await asked(store, chat, ann)
    await store.reminders.add(ann, mira, chat, turn, DUE, "UTC", "tea", "once", 25)
    await store.turns.fail_turn(turn)  # a failed turn, a withdrawn reply or Regenerate: one place undoes them
    assert await store.reminders.pending(ann) == []


async def test_a_letter_whose_process_died_before_it_was_shown_is_due_again_for_another(open_backend, request):
    if "postgresql" not in request.node.name:
        pytest.skip("SQLite only finds a dead process by its pid, which no test can fake in process; "
                    "PostgreSQL's advisory lock goes with the connection")
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    turn = await asked(first, chat, ann, answered=True)
    row = await first.reminders.add(ann, mira, chat, turn, DUE, "UTC", "tea", "once", 25)
    letter = await first.reminders.keep(row, None, "Mira", "Tea time!", 3, {})
    assert await second.reminders.due(mira, "telegram", DUE, 10) == []  # being sent by the first
    await first.close()  # the process dies at the due moment, its letter unshown
    await second.turns.recover_interrupted_turns()
    assert await second.reminders.due(mira, "telegram", DUE, 10) == [row]  # sent by the other, once
    assert await second.conversations.message(letter.id) is None


async def test_only_letters_that_reached_their_chat_count_as_reminders_sent(store: Store, mira, ann, chat, clock):
    since = clock()
    turn = await asked(store, chat, ann, answered=True)
    shown = await store.reminders.add(ann, mira, chat, turn, DUE, "UTC", "tea", "once", 25)
    unshown = await store.reminders.add(ann, mira, chat, turn, DUE, "UTC", "cake", "once", 25)
    letter = await store.reminders.keep(shown, None, "Mira", "Tea time!", 3, {})
    await store.reminders.keep(unshown, None, "Mira", "Cake time!", 3, {})
    await store.turns.shown(letter.id, ["2"])
    assert await store.reminders.sent_since(since) == 1
    assert await store.reminders.sent_since(clock() + 1) == 0


async def test_a_reminder_another_process_is_sending_is_no_longer_due_as_it_was_read(open_backend, mira, ann, chat):
    """What a process asks as it takes a reminder's claim, so a scan that found it before another
    process sent it makes no model call (bot/writing_first/outbox.py)."""
    here, there = await open_backend(), await open_backend()
    row = await here.reminders.add(ann, mira, chat, await asked(here, chat, ann), DUE, "UTC", "tea", "once", 25)
    assert await there.reminders.still_due(row)
    await here.reminders.keep(row, None, "Mira", "Tea time!", 3, {})
    assert not await there.reminders.still_due(row)
