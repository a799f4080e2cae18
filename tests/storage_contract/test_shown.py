"""SPEC 15 "What was not shown was not said", through the Turns port on every backend: a reply
is stored unshown and is the conversation's for good once its platform took it (`shown`); one
the platform refused (`withdraw_reply`), or one whose process died before it was shown
(`recover_interrupted_turns`), leaves nothing in the window, the summary's pending messages or
recall, and a Regenerate that could not be shown leaves the shown reply as the stored one."""

import pytest

QUESTION, ANSWER = "when does the tide turn at the harbour?", "the tide turns at six"


async def answered(store, chat: int, ann: int, reply: str = ANSWER):
    """A message, its turn and its reply, stored and not yet shown."""
    asked = await store.conversations.add_user_message(chat, ann, "Ann", QUESTION, 8, None)
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    return asked, turn, await store.turns.finish_turn(turn, asked, "Mira", reply, 5, {})


async def contents(store, chat: int) -> list[str]:
    return [m.content for m in reversed(await store.conversations.recent_messages(chat, 50))]


async def test_a_reply_the_platform_refused_is_in_no_window_summary_or_recall(store, chat, ann):
    _, turn, reply = await answered(store, chat, ann)
    await store.turns.withdraw_reply(reply.id)
    assert await contents(store, chat) == [QUESTION]
    assert await store.conversations.count_messages(chat, 0) == 1  # all a summary could take
    assert await store.recall.search(chat, ["six"], 10**9, 10, 10**9) == []
    assert (await store.turns.turn(turn)).status == "failed"


async def test_a_shown_reply_is_the_conversations_for_good(store, chat, ann):
    _, _, reply = await answered(store, chat, ann)
    await store.turns.shown(reply.id, ["77", "78"])
    await store.turns.withdraw_reply(reply.id)  # too late: people saw it
    assert await contents(store, chat) == [QUESTION, ANSWER]
    assert await store.conversations.platform_message_ids(reply.id) == ["77", "78"]


async def test_a_regenerate_that_could_not_be_shown_leaves_the_shown_reply_as_the_stored_one(store, chat, ann):
    asked, turn, reply = await answered(store, chat, ann)
    await store.turns.shown(reply.id, ["77"])
    refused = await store.turns.begin_regenerate(turn)
    again = await store.turns.finish_turn(refused, asked, "Mira", "six, give or take", 4, {})
    await store.turns.withdraw_reply(again.id)
    assert await contents(store, chat) == [QUESTION, ANSWER]
    assert (await store.turns.latest_turn(chat)).id == turn  # its Regenerate button works again
    shown = await store.turns.begin_regenerate(turn)
    newer = await store.turns.finish_turn(shown, asked, "Mira", "six sharp", 2, {})
    await store.turns.shown(newer.id, ["79"])
    assert await contents(store, chat) == [QUESTION, "six sharp"]


async def test_a_reply_whose_process_died_before_it_was_shown_is_taken_back_and_answered_again(
        open_backend, request):
    if "postgresql" not in request.node.name:
        pytest.skip("SQLite only: a process that died is found by its pid, which no test can fake in "
                    "process; tests/test_checkins_end_to_end.py kills a real one instead")
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    ann = await first.people.person_for_identity("telegram", "501")
    chat = (await first.conversations.conversation("telegram", "501", None, mira, False)).id
    await answered(first, chat, ann)
    await first.close()  # the process dies before its platform took the reply
    assert await second.turns.recover_interrupted_turns() == 1
    assert await contents(second, chat) == [QUESTION]
    cut, = await second.turns.interrupted_turns("telegram", mira)  # its adapter answers it again
    assert cut.user_message.content == QUESTION


async def test_a_persons_last_receipt_in_a_group_is_of_their_own_turn_not_one_answered_after(store, mira, ann):
    """/memory why in a group explains the reply to the person asking, even when the character
    answered someone else after it."""
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    bob = await store.people.person_for_identity("telegram", "502")
    turns = []
    for person in (ann, bob):
        _, turn, reply = await answered(store, group, person)
        await store.turns.shown(reply.id, [f"to {person}"])  # the line moves on
        turns.append(turn)
    assert [(await store.turns.last_receipt(group, person, mira)).id for person in (ann, bob)] == turns
