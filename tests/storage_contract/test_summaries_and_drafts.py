"""The Summaries and Drafts ports: tiers by generation, what is covered, the rebuild swap."""

from storage.ports import Store


async def test_a_recent_summary_advances_what_is_covered_and_replaces_what_it_merges(store: Store, chat):
    first = await store.summaries.write_summary(chat, 0, "recent", "- one", 2, 2, 10, [], covered_pos=10)
    second = await store.summaries.write_summary(chat, 0, "recent", "- two", 2, 12, 20, [], covered_pos=20)
    assert (await store.summaries.summary_state(chat)).summarized_pos == 20
    await store.summaries.write_summary(chat, 0, "merged", "- one and two", 3, 2, 20, [first.id, second.id])
    assert [(s.tier, s.content) for s in await store.summaries.summaries(chat)] == [("merged", "- one and two")]


async def test_an_edit_marks_the_entry_as_the_persons(store: Store, chat):
    entry = await store.summaries.write_summary(chat, 0, "recent", "- Thomas", 2, 2, 10, [], covered_pos=10)
    assert await store.summaries.edit_summary(chat, entry.id, "- Tomas", 2)
    assert (await store.summaries.summaries(chat))[0].edited
    assert not await store.summaries.edit_summary(chat + 1, entry.id, "- elsewhere", 2)


async def test_a_rebuild_writes_the_next_generation_and_swaps_it_in_at_once(store: Store, chat):
    await store.summaries.write_summary(chat, 0, "recent", "- old", 2, 2, 10, [], covered_pos=10)
    rebuild = await store.summaries.start_rebuild(chat, None)
    assert rebuild.generation == 1 and await store.summaries.start_rebuild(chat, None) is None
    assert (await store.summaries.summary_state(chat)).rebuilding
    await store.summaries.write_summary(chat, 1, "recent", "- new", 2, 2, 10, [], covered_pos=10)
    assert [s.content for s in await store.summaries.summaries(chat)] == ["- old"]  # still serving
    await store.summaries.finish_rebuild(chat, rebuild.generation)
    assert [s.content for s in await store.summaries.summaries(chat)] == ["- new"]
    assert await store.summaries.rebuild(chat) is None


async def test_the_id_of_a_deleted_newest_summary_entry_is_never_given_again(store: Store, chat):
    """`/memory summary edit <id>` names an entry by the id a person was shown: an entry written
    after a cancelled rebuild took the newest ones away never gets one of theirs."""
    rebuild = await store.summaries.start_rebuild(chat, None)
    cancelled = await store.summaries.write_summary(chat, rebuild.generation, "recent", "- soon gone", 2, 2, 10, [],
                                                    covered_pos=10)
    await store.summaries.cancel_rebuild(chat)
    entry = await store.summaries.write_summary(chat, 0, "recent", "- kept", 2, 2, 10, [], covered_pos=10)
    assert entry.id > cancelled.id
    assert not await store.summaries.edit_summary(chat, cancelled.id, "- a stale edit", 3)


async def test_a_failed_summary_is_retried_when_due(store: Store, chat, clock):
    await store.summaries.set_summary_retry(chat, 2, clock.now + 60)
    assert await store.summaries.due_summary_retries(clock.now) == []
    assert await store.summaries.due_summary_retries(clock.now + 60) == [chat]


async def test_newer_drafts_supersede_older_ones_and_selections_clear(store: Store, ann, chat):
    old = await store.drafts.save_drafts(ann, "generate", ["a"])
    new = await store.drafts.save_drafts(ann, "generate", ["b", "c"])
    assert await store.drafts.drafts(ann, old) is None
    assert await store.drafts.drafts(ann, new) == ("generate", ["b", "c"])
    await store.drafts.set_selection(ann, chat, [3, 1])
    assert await store.drafts.selection(ann, chat) == [3, 1]
    await store.drafts.set_selection(ann, chat, [])
    assert await store.drafts.selection(ann, chat) == []


async def test_another_persons_drafts_and_selection_are_out_of_reach(store: Store, ann, chat):
    bob = await store.people.person_for_identity("telegram", "502")
    anns = await store.drafts.save_drafts(ann, "generate", ["Ann's draft"])
    await store.drafts.set_selection(ann, chat, [3, 1])
    assert await store.drafts.drafts(bob, anns) is None  # a button of Ann's pressed by Bob
    await store.drafts.delete_drafts(bob, anns)
    await store.drafts.save_drafts(bob, "generate", ["Bob's draft"])  # supersedes only his own
    assert await store.drafts.drafts(ann, anns) == ("generate", ["Ann's draft"])
    assert await store.drafts.selection(bob, chat) == []
    await store.drafts.set_selection(bob, chat, [])
    assert await store.drafts.selection(ann, chat) == [3, 1]
