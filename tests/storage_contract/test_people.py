"""The People and Characters ports: identities, link codes, merging, forgetting, characters."""

import pytest

from storage.ports import CapReached, Store, SummaryStartedAgain
from tests.storage_contract.test_shown import contents


async def test_an_identity_maps_to_one_person_created_on_first_sight(store: Store):
    ann = await store.people.person_for_identity("telegram", "501")
    assert await store.people.person_for_identity("telegram", "501") == ann
    assert await store.people.person_for_identity("discord", "501") != ann
    assert await store.people.identities_of(ann) == [("telegram", "501")]


async def test_a_link_code_names_its_owner_and_platform_until_it_expires(store: Store, ann, clock):
    await store.people.create_link_code(ann, "telegram", "ABCD2345", clock.now + 600)
    assert await store.people.link_code("ABCD2345", clock.now) == (ann, "telegram")
    assert await store.people.link_code("ABCD2345", clock.now + 601) is None
    await store.people.create_link_code(ann, "telegram", "WXYZ6789", clock.now + 600)
    assert await store.people.link_code("ABCD2345", clock.now) is None  # the newer code replaces it


async def test_wrong_link_codes_are_counted_per_person_in_time(store: Store, ann, clock):
    for _ in range(3):
        await store.people.add_link_failure(ann, clock.now)
    assert await store.people.link_failures_since(ann, clock.now - 1) == 3
    assert await store.people.link_failures_since(ann, clock.now + 1) == 0


async def test_a_persons_link_code_and_wrong_codes_leave_another_persons_alone(store: Store, ann, clock):
    bob = await store.people.person_for_identity("telegram", "502")
    await store.people.create_link_code(ann, "telegram", "ABCD2345", clock.now + 600)
    await store.people.create_link_code(bob, "telegram", "WXYZ6789", clock.now + 600)
    assert await store.people.link_code("ABCD2345", clock.now) == (ann, "telegram")
    await store.people.add_link_failure(bob, clock.now)
    assert await store.people.link_failures_since(ann, clock.now - 1) == 0


async def test_merging_moves_everything_and_uses_up_the_code(store: Store, ann, mira, clock):
    other = await store.people.person_for_identity("discord", "900")
    await store.memories.add_memory(other, mira, "global", "from Discord", 2, True, "person")
    await store.people.create_link_code(ann, "telegram", "ABCD2345", clock.now + 600)
    report = await store.people.merge_persons(ann, other)
    assert report.unpinned_pins == 0
    assert await store.people.identities_of(ann) == [("discord", "900"), ("telegram", "501")]
    assert [m.content for m in (await store.memories.list_memories(ann, mira, None, 0, 10))[0]] == ["from Discord"]
    assert [c.action for c in await store.memories.history(ann, 0)] == ["add"]  # its history came along (SPEC 21)
    assert await store.people.link_code("ABCD2345", clock.now) is None


async def test_merging_moves_only_the_two_linked_peoples_rows(store: Store, ann, mira, chat, clock):
    other = await store.people.person_for_identity("discord", "900")
    bob = await store.people.person_for_identity("telegram", "502")
    await store.memories.add_memory(bob, mira, "global", "Bob's pin", 2, True, "person")
    await store.memories.add_memory(bob, mira, "global", "Bob's fact", 2, False, "person")
    await store.memories.set_learning(bob, mira, False)
    await store.usage.add_turn(bob, mira, "2027-01-15", 100, 20)
    await store.conversations.add_user_message(chat, bob, "Bob", "Bob in Ann's chat", 4, None)
    await store.people.create_link_code(bob, "telegram", "WXYZ6789", clock.now + 600)
    await store.usage.notice_once(bob, "2027-01-15")  # told he was past his tokens
    await store.people.merge_persons(ann, other)
    assert await store.usage.notice_once(ann, "2027-01-15")  # Ann was not
    assert [m.content for m in (await store.memories.list_memories(bob, mira, None, 0, 10))[0]] == \
        ["Bob's pin", "Bob's fact"]
    assert await store.memories.list_memories(ann, mira, None, 0, 10) == ([], 0)
    assert not await store.memories.learning_enabled(bob, mira) and await store.memories.learning_enabled(ann, mira)
    assert (await store.usage.spent(bob, "2027-01-15", "2027-01-15"),
            await store.usage.spent(ann, "2027-01-15", "2027-01-15")) == (120, 0)
    assert [m.person_id for m in await store.conversations.recent_messages(chat, 10)] == [bob]
    assert await store.people.link_code("WXYZ6789", clock.now) == (bob, "telegram")


async def test_merging_past_20_pins_keeps_the_pins_of_the_account_that_made_the_code_pinned_first(
        store: Store, ann, mira, clock):
    """Ann (who made the code) has 15 pins; the account entering it has 10 newer ones. Of the
    25, Ann's 15 stay pinned and then the other's 5 newest: 5 are unpinned (SPEC 5: 20 pinned)."""
    other = await store.people.person_for_identity("discord", "900")
    for i in range(15):
        await store.memories.add_memory(ann, mira, "global", f"Ann's pin {i}", 2, True, "person")
    for i in range(10):
        clock.now += 60
        await store.memories.add_memory(other, mira, "global", f"other pin {i}", 2, True, "person")
    assert (await store.people.merge_persons(ann, other)).unpinned_pins == 5
    listed, _ = await store.memories.list_memories(ann, mira, "global", 0, 30)
    assert sorted(m.content for m in listed if m.pinned) == \
        sorted([f"Ann's pin {i}" for i in range(15)] + [f"other pin {i}" for i in range(5, 10)])


async def test_merging_past_100_unpinned_is_refused_and_changes_nothing(store: Store, ann, mira):
    other = await store.people.person_for_identity("discord", "900")
    for i in range(60):
        await store.memories.add_memory(ann, mira, "global", f"a{i}", 1, False, "person")
        await store.memories.add_memory(other, mira, "global", f"b{i}", 1, False, "person")
    with pytest.raises(CapReached):
        await store.people.merge_persons(ann, other)
    assert await store.people.identities_of(other) == [("discord", "900")]


async def test_forgetting_a_person_leaves_no_row_about_them(store: Store, ann, mira, chat):
    await store.memories.add_memory(ann, mira, "global", "a fact", 2, False, "person")
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "hello", 1, None)
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    await store.turns.finish_turn(turn, asked, "Mira", "hi Ann", 2, {})
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    await store.conversations.add_user_message(group, ann, "Ann", "in the group", 2, None)
    assert await store.people.forget_person(ann, "2027-01-15") == [group]
    assert await store.conversations.conversation_by_id(chat) is None  # one-to-one: gone whole
    assert await store.conversations.recent_messages(group, 10) == []
    assert await store.people.identities_of(ann) == []
    again = await store.people.person_for_identity("telegram", "501")  # seen again: a new, empty person
    assert await store.memories.list_memories(again, mira, None, 0, 10) == ([], 0)


async def test_forgetting_a_person_leaves_everyone_elses_words_and_what_was_said_to_them(store: Store, ann, mira, chat):
    bob = await store.people.person_for_identity("telegram", "502")
    bobs_chat = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id

    async def exchange(conversation: int, person: int, name: str) -> None:
        asked = await store.conversations.add_user_message(conversation, person, name, f"{name} speaking", 2, None)
        turn = await store.turns.begin_turn(conversation, person, asked.id)
        reply = await store.turns.finish_turn(turn, asked, "Mira", f"hello {name}", 2, {})
        await store.turns.shown(reply.id, [f"to {name}"])  # the conversation's line moves on

    bobs_group = (await store.conversations.conversation("telegram", "-200", None, mira, True)).id
    for conversation, person, name in ((chat, ann, "Ann"), (bobs_chat, bob, "Bob"), (group, ann, "Ann"),
                                       (group, bob, "Bob"), (bobs_group, bob, "Bob")):
        await exchange(conversation, person, name)
    await store.memories.add_memory(bob, mira, "global", "Bob's fact", 2, False, "person")
    await store.usage.add_turn(bob, mira, "2027-01-15", 100, 20)
    # only the group Ann spoke in has places gone (its summaries start over); Bob's group has none
    assert await store.people.forget_person(ann, "2027-01-15") == [group]
    assert await contents(store, bobs_chat) == ["Bob speaking", "hello Bob"]
    assert await contents(store, group) == ["Bob speaking", "hello Bob"]
    assert [m.content for m in (await store.memories.list_memories(bob, mira, None, 0, 10))[0]] == ["Bob's fact"]
    assert await store.usage.spent(bob, "2027-01-15", "2027-01-15") == 120
    assert await store.people.identities_of(bob) == [("telegram", "502")]


async def test_forgetting_a_person_linked_into_another_meanwhile_deletes_nothing_and_says_so(
        store: Store, ann, mira):
    """/forgetme confirmed for Ann's Telegram person as her accounts were linked into her Discord
    one: that person is no longer there, and their words now belong to the one kept. None, and
    nothing deleted, so she is told to ask again, never that everything went."""
    kept = await store.people.person_for_identity("discord", "900")
    await store.memories.add_memory(ann, mira, "global", "from Telegram", 2, False, "person")
    await store.people.merge_persons(kept, ann)
    assert await store.people.forget_person(ann, "2027-01-15") is None
    assert [m.content for m in (await store.memories.list_memories(kept, mira, None, 0, 10))[0]] == ["from Telegram"]
    assert await store.people.identities_of(kept) == [("discord", "900"), ("telegram", "501")]


async def test_forgetting_a_person_takes_every_summary_of_their_group_at_once_and_a_pass_that_read_before_writes_none(
        store: Store, ann, mira):
    """SPEC 6, /forgetme: what was summarized of their words serves no prompt once it says done —
    the group's summary goes in the same transaction and is written again without them — and a
    summary pass that read them before (its model still writing) is refused when it writes."""
    bob = await store.people.person_for_identity("telegram", "502")
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    said = await store.conversations.add_user_message(group, ann, "Ann", "the key is under the heron stone", 5, None)
    await store.conversations.add_user_message(group, bob, "Bob", "good to know", 3, None)
    await store.summaries.write_summary(group, 0, "recent", "- Ann: the key is under the heron stone.", 9, said.pos,
                                        said.pos + 1, [], covered_pos=said.pos + 1)
    read = await store.summaries.summary_state(group)  # a pass begins: its batch is read, the model writes
    assert await store.people.forget_person(ann, "2027-01-15") == [group]
    assert await store.summaries.summaries(group) == []
    assert (await store.summaries.summary_state(group)).summarized_pos == 0
    assert (await store.summaries.rebuild(group)).status == "running"  # written again, from what is left
    with pytest.raises(SummaryStartedAgain):
        await store.summaries.write_summary(group, read.generation, "recent", "- Ann: the heron stone.", 6,
                                            said.pos, said.pos + 1, [], covered_pos=said.pos + 1)
    assert await store.summaries.summaries(group) == []


async def test_forgetting_a_person_keeps_the_group_summary_over_none_of_their_words_until_it_is_rebuilt(
        store: Store, ann, mira):
    """SPEC 4 with SPEC 6: the entries written over the forgotten person's messages or the replies
    to them go at once; the others never read their words, and serve until the rebuilt summary
    is swapped in, as during any rebuild (the group is not left without one). Those a person
    edited are corrections the rebuild carries word for word."""
    bob = await store.people.person_for_identity("telegram", "502")
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    bobs = [await store.conversations.add_user_message(group, bob, "Bob", f"Bob's line {i}", 3, None) for i in range(3)]
    asked = await store.conversations.add_user_message(group, ann, "Ann", "the key is under the heron stone", 5, None)
    turn = await store.turns.begin_turn(group, ann, asked.id)
    answer = await store.turns.finish_turn(turn, asked, "Mira", "Then the heron keeps it.", 5, {})
    later = await store.conversations.add_user_message(group, bob, "Bob", "Bob again", 3, None)
    entries = [await store.summaries.write_summary(group, 0, "recent", text, 3, first.pos, last.pos, [])
               for text, first, last in [("- Bob talked.", bobs[0], bobs[-1]), ("- Ann: heron stone.", asked, asked),
                                         ("- Mira: the heron.", answer, answer), ("- Bob again.", later, later)]]
    for entry in entries[:3]:
        assert await store.summaries.edit_summary(group, entry.id, entry.content + " (corrected)", 4)
    await store.people.forget_person(ann, "2027-01-15")
    serving = await store.summaries.summaries(group)
    assert [(e.content, e.edited) for e in serving] == [("- Bob talked. (corrected)", True), ("- Bob again.", False)]
    rebuilding = await store.summaries.rebuild(group)
    await store.summaries.write_summary(group, rebuilding.generation, "recent", "- Bob talked, and again.", 6,
                                        bobs[0].pos, later.pos, [], covered_pos=later.pos)
    await store.summaries.finish_rebuild(group, rebuilding.generation)
    assert [e.content for e in await store.summaries.summaries(group)] == ["- Bob talked, and again."]


async def test_forgetting_a_person_starts_a_running_rebuild_over_as_a_new_generation(store: Store, ann, mira):
    """A rebuild Bob asked for, half-way when Ann is forgotten, may hold her words: it starts over,
    and Bob is still told when it ends; what it wrote before, and its swap, are refused."""
    bob = await store.people.person_for_identity("telegram", "502")
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    said = await store.conversations.add_user_message(group, ann, "Ann", "the key is under the heron stone", 5, None)
    asked = await store.summaries.start_rebuild(group, bob)
    await store.summaries.write_summary(group, asked.generation, "recent", "- Ann: the heron stone.", 6, said.pos,
                                        said.pos, [], covered_pos=said.pos)
    await store.people.forget_person(ann, "2027-01-15")
    again = await store.summaries.rebuild(group)
    assert (again.generation, again.progress_pos, again.person_id) == (asked.generation + 1, 0, bob)
    assert await store.summaries.summaries(group, again.generation) == []
    with pytest.raises(SummaryStartedAgain):
        await store.summaries.write_summary(group, asked.generation, "recent", "- the heron stone.", 4, said.pos,
                                            said.pos, [], covered_pos=said.pos)
    with pytest.raises(SummaryStartedAgain):
        await store.summaries.finish_rebuild(group, asked.generation)
    await store.summaries.finish_rebuild(group, again.generation)
    assert await store.summaries.rebuild(group) is None and await store.summaries.summaries(group) == []


async def test_a_forgotten_persons_id_and_their_chats_are_never_given_to_anyone_again(store: Store, ann, mira, chat):
    """Work for a forgotten person may still hold their ids (a memory tool's write, a summary
    being written): nobody who comes after is given them."""
    await store.conversations.add_user_message(chat, ann, "Ann", "hello", 1, None)
    await store.people.forget_person(ann, "2027-01-15")
    assert await store.conversations.conversation_by_id(chat) is None
    bob = await store.people.person_for_identity("telegram", "502")
    bobs = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    assert bob > ann and bobs > chat


async def test_a_removed_characters_id_is_never_given_to_another_character(store: Store, mira):
    """A removed character's lines in a scene still name it by id (SPEC 22): a character added
    later never gets that id, so it never takes those lines for its own."""
    assert await store.characters.remove_character("Mira") == 0
    assert await store.characters.ensure_character("Noor") > mira


async def test_removing_a_character_turns_its_memories_global(store: Store, ann, mira):
    await store.memories.add_memory(ann, mira, "character", "only Mira knows", 2, False, "person")
    assert await store.characters.character_memory_counts() == {"Mira": 1}
    assert await store.characters.remove_character("Mira") == 1
    assert await store.characters.remove_character("Mira") is None
    assert await store.memories.count_memories(ann, 0, "global", pinned=False) == 1


async def test_removing_a_character_unpins_only_the_pins_past_each_persons_own_20(store: Store, ann, mira):
    bob = await store.people.person_for_identity("telegram", "502")
    for i in range(20):
        await store.memories.add_memory(ann, mira, "global", f"Ann's pin {i}", 2, True, "person")
    await store.memories.add_memory(ann, mira, "character", "Ann's pin with Mira", 2, True, "person")
    await store.memories.add_memory(bob, mira, "character", "Bob's pin with Mira", 2, True, "person")
    assert await store.characters.remove_character("Mira") == 2
    assert await store.memories.count_memories(ann, 0, "global", pinned=False) == 1  # past her 20
    assert await store.memories.count_memories(bob, 0, "global", pinned=True) == 1  # his has room
