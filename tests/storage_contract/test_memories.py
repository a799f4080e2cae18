"""The Memories port: 100 unpinned + 20 pinned per scope checked inside the write, only the
owner's entries, pinned entries out of the AI's reach, the journal undone, Learn from chat."""

import pytest

from storage.ports import AlreadySaved, CapReached, PinnedMemory, Store


async def test_100_unpinned_and_20_pinned_per_scope_the_next_is_refused(store: Store, ann, mira):
    for i in range(100):
        await store.memories.add_memory(ann, mira, "character", f"fact {i}", 2, False, "person")
    for i in range(20):
        await store.memories.add_memory(ann, mira, "character", f"pin {i}", 2, True, "person")
    with pytest.raises(CapReached) as full:
        await store.memories.add_memory(ann, mira, "character", "one more", 2, False, "person")
    assert (full.value.kind, full.value.limit) == ("unpinned", 100)
    with pytest.raises(CapReached):
        await store.memories.add_memory(ann, mira, "character", "one more pin", 2, True, "person")
    await store.memories.add_memory(ann, mira, "global", "the other scope has room", 2, False, "person")
    assert await store.memories.count_memories(ann, mira, "character", pinned=False) == 100


async def test_another_persons_memory_is_not_found(store: Store, ann, mira):
    bob = await store.people.person_for_identity("telegram", "502")
    secret = await store.memories.add_memory(ann, mira, "character", "Ann's secret", 2, False, "person")
    assert await store.memories.update_memory(bob, mira, secret.id, "stolen", 1) is None
    assert await store.memories.delete_memory(bob, mira, secret.id) is None
    assert await store.memories.set_pinned(bob, mira, secret.id, True) is None
    assert (await store.memories.list_memories(bob, mira, None, 0, 10)) == ([], 0)
    await store.memories.add_memory(ann, mira, "global", "Ann's other secret", 3, False, "person")
    for scope in ("character", "global"):  # a listing of one scope is the owner's alone too
        assert (await store.memories.list_memories(bob, mira, scope, 0, 10)) == ([], 0)
    await store.memories.add_memory(ann, mira, "character", "Ann's pinned secret", 3, True, "person")
    in_play = await store.memories.memories_in_play(bob, mira, 100)  # what Bob's prompt would get
    assert in_play.pinned == [] and not any(in_play.unpinned.values())
    await store.memories.set_learning(ann, mira, False)
    export = await store.memories.export_person(bob)  # what /memory export hands Bob
    assert (export["identities"], export["memories"], export["learn_from_chat"]) == (["telegram:502"], [], {})


async def test_a_pinned_memory_cannot_be_changed_by_a_turn_but_by_the_person(store: Store, ann, mira, chat):
    pinned = await store.memories.add_memory(ann, mira, "character", "allergic to peanuts", 3, True, "person")
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "forget it", 2, None)
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    with pytest.raises(PinnedMemory):
        await store.memories.delete_memory(ann, mira, pinned.id, turn_id=turn)
    with pytest.raises(PinnedMemory):
        await store.memories.update_memory(ann, mira, pinned.id, "not allergic", 2, turn_id=turn)
    assert (await store.memories.update_memory(ann, mira, pinned.id, "allergic to all nuts", 4)).content == \
        "allergic to all nuts"


async def test_a_failed_turn_undoes_its_memory_writes(store: Store, ann, mira, chat):
    kept = await store.memories.add_memory(ann, mira, "character", "my dog is Rex", 3, False, "person")
    doomed = await store.memories.add_memory(ann, mira, "character", "I like tea", 3, False, "person")
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "changes", 1, None)
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    await store.memories.add_memory(ann, mira, "global", "added by the turn", 3, False, "ai", turn_id=turn)
    await store.memories.update_memory(ann, mira, kept.id, "my dog is Max", 3, turn_id=turn)
    await store.memories.delete_memory(ann, mira, doomed.id, turn_id=turn)
    await store.turns.fail_turn(turn)
    rows, total = await store.memories.list_memories(ann, mira, None, 0, 10)
    assert sorted(m.content for m in rows) == ["I like tea", "my dog is Rex"] and total == 2
    assert (await store.turns.turn(turn)).status == "failed"


async def test_memories_in_play_are_pinned_then_the_newest_unpinned_an_even_split_of_100_can_use(
        store: Store, ann, mira, clock):
    """SPEC 5: every pinned entry, and up to 100 unpinned split evenly across the two scopes, a
    share one scope does not use going to the other: each scope's newest, no more than its
    share can be (a turn reads no more than it may use)."""
    async def add(scope: str, count: int) -> None:
        for _ in range(count):
            clock.now += 1
            await store.memories.add_memory(ann, mira, scope, f"{scope} at {clock.now}", 1, False, "person")

    def newest(in_play, scope: str) -> list[str]:
        return [m.content for m in in_play.unpinned[scope]]

    await store.memories.add_memory(ann, mira, "global", "pinned", 1, True, "person")
    await add("character", 80)
    await add("global", 30)
    in_play = await store.memories.memories_in_play(ann, mira, 100)
    assert [m.content for m in in_play.pinned] == ["pinned"]
    assert len(newest(in_play, "character")) == 70 and len(newest(in_play, "global")) == 30  # 30 unused go over
    assert newest(in_play, "character")[0] == f"character at {clock.now - 30}"  # newest first
    await add("global", 50)
    in_play = await store.memories.memories_in_play(ann, mira, 100)
    assert len(newest(in_play, "character")) == 50 and len(newest(in_play, "global")) == 50
    assert newest(in_play, "global")[0] == f"global at {clock.now}"


async def test_clear_all_deletes_a_scopes_unpinned_entries_then_separately_its_pinned(store: Store, ann, mira):
    for i in range(3):
        await store.memories.add_memory(ann, mira, "character", f"c{i}", 1, False, "person")
    await store.memories.add_memory(ann, mira, "character", "kept", 1, True, "person")
    assert await store.memories.clear_memories(ann, mira, "character", pinned=False) == 3
    assert await store.memories.count_memories(ann, mira, "character", pinned=True) == 1
    assert await store.memories.clear_memories(ann, mira, "character", pinned=True) == 1


async def test_the_same_words_are_kept_once_a_scope_and_nothing_is_written_the_second_time(store: Store, ann, mira):
    kept = await store.memories.add_memory(ann, mira, "character", "Ann keeps bees", 3, False, "person")
    with pytest.raises(AlreadySaved) as same:
        await store.memories.add_memory(ann, mira, "character", " ann KEEPS\tbees", 3, True, "ai")
    assert same.value.memory == kept
    assert [c.action for c in await store.memories.history(ann, 0)] == ["add"]
    await store.memories.add_memory(ann, mira, "global", "Ann keeps bees", 3, False, "person")
    aki = await store.characters.ensure_character("Aki")
    await store.memories.add_memory(ann, aki, "character", "Ann keeps bees", 3, False, "person")
    bob = await store.people.person_for_identity("telegram", "502")
    await store.memories.add_memory(bob, mira, "character", "Ann keeps bees", 3, False, "person")


async def test_clear_all_deletes_only_the_persons_own_entries(store: Store, ann, mira):
    bob = await store.people.person_for_identity("telegram", "502")
    for scope in ("character", "global"):
        for pinned in (False, True):
            kind = "pinned" if pinned else "unpinned"
            await store.memories.add_memory(ann, mira, scope, f"Ann's {kind} {scope} entry", 3, pinned, "person")
            await store.memories.add_memory(bob, mira, scope, f"Bob's {kind} {scope} entry", 3, pinned, "person")
            assert await store.memories.clear_memories(ann, mira, scope, pinned=pinned) == 1
    assert (await store.memories.list_memories(ann, mira, None, 0, 10)) == ([], 0)
    kept, total = await store.memories.list_memories(bob, mira, None, 0, 10)
    assert total == 4 and all(row.content.startswith("Bob's") for row in kept)


async def test_learn_from_chat_is_on_until_the_person_turns_it_off(store: Store, ann, mira):
    """Asked of the memories, and read with the person's profile (what a turn reads in one look),
    for that character only."""
    aki = await store.characters.ensure_character("Aki")
    assert await store.memories.learning_enabled(ann, mira) is True
    assert (await store.people.profile(ann, mira)).learns is True
    await store.memories.set_learning(ann, mira, False)
    assert await store.memories.learning_enabled(ann, mira) is False
    assert (await store.people.profile(ann, mira)).learns is False
    assert (await store.people.profile(ann, aki)).learns is True and (await store.people.profile(ann)).learns is True
    export = await store.memories.export_person(ann)
    assert export["learn_from_chat"] == {"Mira": False} and export["identities"] == ["telegram:501"]


async def test_a_memory_a_turn_wrote_comes_from_the_persons_message_that_turn_answered(store: Store, ann, mira, chat):
    """SPEC 21 "Where it came from": the journal's turn names the message; only the person's own."""
    said = await store.conversations.add_user_message(chat, ann, "Ann", "I moved to Tromsø", 4, None)
    turn = await store.turns.begin_turn(chat, ann, said.id)
    written = await store.memories.add_memory(ann, mira, "character", "Ann lives in Tromsø", 4, False, "ai",
                                              turn_id=turn)
    typed = await store.memories.add_memory(ann, mira, "character", "Ann likes tea", 3, False, "person")
    origins = await store.memories.written_from(ann)
    assert origins[written.id].id == said.id and typed.id not in origins
    bob = await store.people.person_for_identity("telegram", "502")
    assert await store.memories.written_from(bob) == {}
    assert chat in {c.id for c in (await store.memories.written_in(ann)).values()}
    assert await store.memories.written_in(bob) == {}


async def test_receipts_are_the_persons_own_shown_replies_newest_first(store: Store, ann, mira, chat):
    bob = await store.people.person_for_identity("telegram", "502")
    for person, words in ((ann, "first"), (bob, "bob's"), (ann, "second")):
        said = await store.conversations.add_user_message(chat, person, "x", words, 1, None)
        turn = await store.turns.begin_turn(chat, person, said.id)
        reply = await store.turns.finish_turn(turn, said, "Mira", f"re: {words}", 2, {"memories": {"pinned": [7]}})
        await store.turns.shown(reply.id, [])
    found = await store.turns.receipts(ann, 10)
    assert [(r.reply, r.character_id, r.receipt["memories"]) for r in found] == [
        ("re: second", mira, {"pinned": [7]}), ("re: first", mira, {"pinned": [7]})]


async def test_the_receipts_of_a_characters_replies_before_a_place_come_newest_first_with_its_place(
        store: Store, ann, mira, chat):
    """What a lorebook's timed entries count from: earlier replies of this character, not one
    answering the message now answered again (Regenerate), nor another character's."""
    asked = []
    for n in range(3):
        said = await store.conversations.add_user_message(chat, ann, "Ann", f"message {n}", 1, None)
        turn = await store.turns.begin_turn(chat, ann, said.id, mira)
        reply = await store.turns.finish_turn(turn, said, "Mira", f"reply {n}", 2, {"lore": [{"fired": f"{n}:Curse"}]})
        await store.turns.shown(reply.id, [])
        asked.append(said.pos)
    before = await store.turns.receipts_before(chat, mira, asked[2], 5)
    assert before == [(asked[1], {"lore": [{"fired": "1:Curse"}]}), (asked[0], {"lore": [{"fired": "0:Curse"}]})]
    assert [pos for pos, _ in await store.turns.receipts_before(chat, mira, None, 2)] == [asked[2], asked[1]]
    aki = await store.characters.ensure_character("Aki")
    assert await store.turns.receipts_before(chat, aki, None, 5) == []


async def test_every_change_is_in_the_history_and_the_latest_of_a_memory_can_be_undone(store: Store, ann, mira, clock):
    """SPEC 21 "History and undo": add, edit, pin, delete — each a change; undoing the delete
    brings the memory back as it was, pinned; the undo is a change too, and can be undone."""
    row = await store.memories.add_memory(ann, mira, "character", "Ann likes tea", 3, False, "person")
    await store.memories.update_memory(ann, mira, row.id, "Ann likes green tea", 4)
    assert not (await store.memories.set_pinned(ann, mira, row.id, True)).pinned  # as it was: it changed
    assert (await store.memories.set_pinned(ann, mira, row.id, True)).pinned  # pinned already: nothing changed
    await store.memories.delete_memory(ann, mira, row.id)
    changes = await store.memories.history(ann, clock.now - 60)
    assert [(c.action, c.latest) for c in changes] == [("delete", True), ("pin", False), ("update", False),
                                                      ("add", False)]
    assert await store.memories.undo_change(ann, changes[1].id, clock.now - 60) is None  # not the latest
    back = await store.memories.undo_change(ann, changes[0].id, clock.now - 60)
    assert back.action == "add" and (back.after.id, back.after.content, back.after.pinned) == (
        row.id, "Ann likes green tea", True)
    again = await store.memories.undo_change(ann, back.id, clock.now - 60)  # undo the undo: deleted again
    assert again.action == "delete" and await store.memories.list_memories(ann, mira, None, 0, 10) == ([], 0)
    bob = await store.people.person_for_identity("telegram", "502")
    assert await store.memories.history(bob, 0) == [] and await store.memories.undo_change(bob, again.id, 0) is None


async def test_a_change_is_kept_30_days_then_the_daily_upkeep_forgets_it(store: Store, ann, mira, clock):
    """SPEC 21 "History and undo": a change is kept 30 days, and can be undone until then."""
    await store.memories.add_memory(ann, mira, "character", "Ann likes tea", 3, False, "person")
    await store.maintain(clock.now + 30 * 86_400, None)
    assert [change.action for change in await store.memories.history(ann, 0)] == ["add"]
    await store.maintain(clock.now + 30 * 86_400 + 1, None)
    assert await store.memories.history(ann, 0) == []


async def test_an_undo_that_would_keep_the_same_words_twice_changes_nothing(store: Store, ann, mira):
    tea = await store.memories.add_memory(ann, mira, "character", "Ann likes tea", 3, False, "person")
    await store.memories.delete_memory(ann, mira, tea.id)
    again = await store.memories.add_memory(ann, mira, "character", "ann likes tea", 3, False, "person")
    deleted = next(c for c in await store.memories.history(ann, 0) if c.action == "delete")
    assert await store.memories.undo_change(ann, deleted.id, 0) is None
    await store.memories.update_memory(ann, mira, again.id, "Ann likes coffee", 3)
    await store.memories.add_memory(ann, mira, "character", "Ann likes tea", 3, False, "person")
    edited = (await store.memories.history(ann, 0))[1]  # the edit to coffee, then tea added again
    assert edited.action == "update" and await store.memories.undo_change(ann, edited.id, 0) is None
    assert sorted(m.content for m in (await store.memories.list_memories(ann, mira, None, 0, 10))[0]) == \
        ["Ann likes coffee", "Ann likes tea"]


async def test_an_undo_that_would_pass_the_pin_budget_is_refused(store: Store, ann, mira, clock):
    pinned = await store.memories.add_memory(ann, mira, "character", "pin 0", 2, True, "person")
    await store.memories.delete_memory(ann, mira, pinned.id)
    for n in range(1, 21):
        await store.memories.add_memory(ann, mira, "character", f"pin {n}", 2, True, "person")
    deleted = next(c for c in await store.memories.history(ann, 0) if c.action == "delete")
    with pytest.raises(CapReached):
        await store.memories.undo_change(ann, deleted.id, 0)


async def test_the_id_of_a_forgotten_newest_change_is_never_given_again(store: Store, ann, mira, clock):
    """SPEC 21 "History and undo": a page still open may undo a change by its id after the
    upkeep forgot it; the next change never gets that id, so the stale Undo finds nothing."""
    await store.memories.add_memory(ann, mira, "character", "Ann likes tea", 3, False, "person")
    [forgotten] = await store.memories.history(ann, 0)
    await store.maintain(clock.now + 30 * 86_400 + 1, None)
    await store.memories.add_memory(ann, mira, "character", "Ann likes coffee", 3, False, "person")
    [newer] = await store.memories.history(ann, 0)
    assert newer.id > forgotten.id
    assert await store.memories.undo_change(ann, forgotten.id, 0) is None
