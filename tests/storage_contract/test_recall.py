"""The Recall port: words of older messages found inside one conversation, the index kept in
step with edits and deletions, and messages stored before the index came backfilled."""

from storage.ports import Store


async def say(store: Store, chat: int, person: int, *texts: str):
    return [await store.conversations.add_user_message(chat, person, "Ann", t, 5, f"p{i}-{t[:8]}")
            for i, t in enumerate(texts)]


async def test_a_search_finds_stemmed_words_of_older_messages_of_this_conversation_only(store: Store, ann, chat, mira):
    other = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    await say(store, other, ann, "my cousin Ola was born in Bergen")
    born, _, window = await say(store, chat, ann, "my cousin Ola was born in Bergen", "the ferries were late",
                                "tell me about cousins")
    found = await store.recall.search(chat, ["cousins", "bergen"], window.pos, 5, common_above=100)
    assert [m.id for m in found] == [born.id]  # "cousins" finds "cousin"; the other conversation stays out
    assert await store.recall.search(chat, ["cousins"], born.pos, 5, common_above=100) == []  # older only


async def test_a_message_holding_more_of_the_words_ranks_first(store: Store, ann, chat):
    one_word, *_, both_words, window = await say(
        store, chat, ann, "Lars came by", *[f"small talk {n}" for n in range(20)],
        "Lars owes me for the boat", "anyway")
    found = await store.recall.search(chat, ["lars", "boat"], window.pos, 5, common_above=100)
    assert [m.id for m in found] == [both_words.id, one_word.id]


async def test_a_message_holding_a_rarer_word_ranks_above_one_holding_a_commoner_one(store: Store, ann, chat):
    # BM25 (storage/sql/ranking.py): a word in fewer of the conversation's messages weighs more,
    # so the one message about the boat passes six older ones about Lars
    *lars, boat, window = await say(store, chat, ann, *[f"Lars came by on day {n}" for n in range(6)],
                                    "the old boat sank off Lofoten", "anyway")
    found = await store.recall.search(chat, ["lars", "boat"], window.pos, 3, common_above=100)
    assert [m.id for m in found] == [boat.id, lars[0].id, lars[1].id]


async def test_among_equal_matches_the_older_message_comes_first(store: Store, ann, chat):
    # The summary kept less of an older message than of a newer one.
    older, newer, window = await say(store, chat, ann, "Lars came by", "Lars came by", "anyway")
    found = await store.recall.search(chat, ["lars"], window.pos, 5, common_above=100)
    assert [m.id for m in found] == [older.id, newer.id]


async def test_quotes_and_query_syntax_in_peoples_words_are_only_words(store: Store, ann, chat):
    said, window = await say(store, chat, ann, 'she said "NEAR(lighthouse keeper)" OR* twice', "hi")
    found = await store.recall.search(chat, ['"NEAR', "OR*", "lighthouse"], window.pos, 5, common_above=100)
    assert [m.id for m in found] == [said.id]


async def test_a_word_in_more_messages_than_common_above_points_at_nothing(store: Store, ann, chat):
    *_, window = await say(store, chat, ann, *[f"the lamp burned on night {n}" for n in range(6)], "now")
    assert await store.recall.search(chat, ["lamp"], window.pos, 5, common_above=5) == []
    assert len(await store.recall.search(chat, ["lamp"], window.pos, 5, common_above=6)) == 5


async def test_a_word_made_rare_again_by_a_deletion_or_an_edit_points_at_its_messages_again(store: Store, ann, chat):
    """A word found common once is not counted again while messages are only added (PostgreSQL
    keeps it): deleting or editing one of the conversation's messages counts it afresh."""
    lamps = await say(store, chat, ann, *[f"the lamp burned on night {n}" for n in range(7)])
    *_, window = await say(store, chat, ann, "now")
    assert await store.recall.search(chat, ["lamp"], window.pos, 5, common_above=5) == []  # 7 hits
    for lamp in lamps[:2]:
        await store.conversations.delete_platform_message(chat, lamp.platform_message_id)
    found = await store.recall.search(chat, ["lamp"], window.pos, 5, common_above=5)  # 5: they tell again
    assert [m.id for m in found] == [m.id for m in lamps[2:]]
    await say(store, chat, ann, "one more lamp")
    assert await store.recall.search(chat, ["lamp"], window.pos, 5, common_above=5) == []  # 6
    await store.conversations.edit_platform_message(chat, lamps[2].platform_message_id, "the candle burned", 5)
    found = await store.recall.search(chat, ["lamp"], window.pos, 5, common_above=5)  # 5 again
    assert [m.id for m in found] == [m.id for m in lamps[3:]]


async def test_edited_and_deleted_messages_are_searched_as_they_are_now(store: Store, ann, chat):
    edited, deleted, window = await say(store, chat, ann, "I live in Oslo", "I work at the bakery", "ok")
    await store.conversations.edit_platform_message(chat, edited.platform_message_id, "I live in Tromsø", 5)
    await store.conversations.delete_platform_message(chat, deleted.platform_message_id)
    assert await store.recall.search(chat, ["oslo"], window.pos, 5, common_above=100) == []
    assert [m.content for m in await store.recall.search(chat, ["tromsø"], window.pos, 5, common_above=100)] == \
        ["I live in Tromsø"]
    assert await store.recall.search(chat, ["bakery"], window.pos, 5, common_above=100) == []


async def test_messages_at_places_come_oldest_first(store: Store, ann, chat):
    one, two, three = await say(store, chat, ann, "one", "two", "three")
    assert [m.content for m in await store.recall.messages_at(chat, [three.pos, one.pos, 999])] == ["one", "three"]
    assert await store.recall.index_older_messages(100) == 0  # a new database has nothing to backfill


async def test_a_deleted_message_leaves_the_index_so_its_words_never_find_a_later_message(store: Store, ann, chat):
    """SQLite reuses the id of the newest row once it is deleted: an index entry the deletion
    left behind would make the deleted words find whatever message takes the id next."""
    (gone,) = await say(store, chat, ann, "my secret quokka plan")
    await store.conversations.delete_platform_message(chat, gone.platform_message_id)
    later, window = await say(store, chat, ann, "hello there", "ok")
    assert later.id == gone.id or later.id > gone.id  # (PostgreSQL never reuses an id: nothing to find either)
    assert await store.recall.search(chat, ["quokka"], window.pos, 5, common_above=100) == []
    assert await store.recall.search(chat, ["secret", "plan"], window.pos, 5, common_above=100) == []


async def test_a_placeholder_filled_in_is_searched_by_its_new_words(store: Store, ann, chat):
    """SPEC 16: a voice note takes its place as a placeholder; its transcript fills it in."""
    note, window = await say(store, chat, ann, "(a voice note that could not be transcribed)", "ok")
    heard = await store.conversations.fill_in(note.id, "the ferry leaves at noon", 8, spoken=True)
    assert heard is not None and heard.pos == note.pos and heard.spoken
    assert heard.said == "🎤 the ferry leaves at noon" and heard.content == "the ferry leaves at noon"
    assert [m.id for m in await store.recall.search(chat, ["ferry"], window.pos, 5, common_above=100)] == [note.id]
    await store.conversations.delete_platform_message(chat, note.platform_message_id)
    assert await store.conversations.fill_in(note.id, "again", 3, spoken=True) is None
