"""The Conversations port: conversations by key, messages in arrival order, platform ids."""

from storage.ports import NewAlbum, Store


async def test_a_conversation_is_created_once_and_its_shared_flag_follows_the_event(store: Store, mira):
    first = await store.conversations.conversation("discord", "42", None, mira, is_shared=False)
    again = await store.conversations.conversation("discord", "42", None, mira, is_shared=True)
    assert again.id == first.id and again.is_shared  # the event, not the first row, says so
    assert (await store.conversations.conversation_by_id(first.id)).is_shared
    other = await store.conversations.conversation("discord", "42", "7", mira, is_shared=True)
    assert other.id != first.id  # a thread is a conversation of its own


async def test_messages_take_their_place_in_arrival_order_and_a_reply_follows_what_it_answers(store: Store, ann,
                                                                                           chat):
    one = await store.conversations.add_user_message(chat, ann, "Ann", "one", 1, "p1")
    two = await store.conversations.add_user_message(chat, ann, "Ann", "two", 1, "p2")
    turn = await store.turns.begin_turn(chat, ann, one.id)
    reply = await store.turns.finish_turn(turn, one, "Mira", "reply to one", 3, {})
    three = await store.conversations.add_user_message(chat, ann, "Ann", "three", 1, "p3")
    assert one.pos < reply.pos < two.pos < three.pos
    newest = await store.conversations.recent_messages(chat, 10)
    assert [m.content for m in newest] == ["three", "two", "reply to one", "one"]
    assert [m.content for m in await store.conversations.recent_messages(chat, 2, up_to_pos=two.pos)] == \
        ["two", "reply to one"]
    assert [m.content for m in await store.conversations.messages_between(chat, one.pos, three.pos, 10)] == \
        ["reply to one", "two"]
    assert await store.conversations.count_messages(chat, one.pos) == 3
    assert await store.conversations.count_messages(chat, -1, up_to_pos=two.pos) == 3


async def test_counting_back_goes_no_further_than_asked_and_counts_a_characters_replies(store: Store, ann, mira,
                                                                                     chat):
    """What a lorebook entry waits for (SillyTavern's `delay`, V3's @@activate_only_after)."""
    assert await store.conversations.add_greeting(chat, "Mira", "Hello!", 2)
    for n in range(3):
        asked = await store.conversations.add_user_message(chat, ann, "Ann", f"message {n}", 1, f"p{n}")
        reply = await store.turns.finish_turn(await store.turns.begin_turn(chat, ann, asked.id), asked, "Mira",
                                              f"reply {n}", 1, {}, character_id=mira)
        await store.turns.shown(reply.id, [f"r{n}"])
    last = await store.conversations.add_user_message(chat, ann, "Ann", "the newest", 1, "p9")
    count_back = store.conversations.count_back
    assert await count_back(chat, None, 100) == 8  # the greeting, three messages, three replies, the newest
    assert await count_back(chat, asked.pos, 100) == 6
    assert await count_back(chat, None, 5) == 5
    assert await count_back(chat, last.pos, 100, replies_of=mira) == 4  # the greeting is hers too
    assert await count_back(chat, last.pos, 2, replies_of=mira) == 2
    other = await store.characters.ensure_character("Aki")
    assert await count_back(chat, None, 100, replies_of=other) == 0


async def test_the_id_of_a_deleted_newest_message_or_turn_is_never_given_again(store: Store, ann, chat):
    """A reply in progress holds its message's and its turn's ids while the person may delete
    what they wrote: the next message and turn never get those ids."""
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "soon deleted", 1, "p1")
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    assert await store.conversations.delete_platform_message(chat, "p1")  # its turn goes with it
    again = await store.conversations.add_user_message(chat, ann, "Ann", "next", 1, "p2")
    assert again.id > asked.id and await store.turns.begin_turn(chat, ann, again.id) > turn


async def test_a_greeting_is_stored_only_as_a_conversations_first_message(store: Store, ann, chat):
    assert await store.conversations.add_greeting(chat, "Mira", "Hello!", 2) is True
    assert await store.conversations.add_greeting(chat, "Mira", "Hello!", 2) is False
    await store.conversations.add_user_message(chat, ann, "Ann", "hi", 1, None)
    assert [m.role for m in await store.conversations.recent_messages(chat, 10)] == ["user", "assistant"]


async def test_platform_ids_find_a_message_and_every_part_of_a_split_reply(store: Store, ann, chat):
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "tell me a long story", 5, "u1")
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    reply = await store.turns.finish_turn(turn, asked, "Mira", "a long story", 3, {})
    await store.conversations.set_platform_message_ids(chat, reply.id, ["r1", "r2", "r3"])
    for part in ("r1", "r2", "r3"):
        assert (await store.conversations.message_by_platform_id(chat, part)).id == reply.id
    assert (await store.conversations.message_by_platform_id(chat, "u1")).id == asked.id
    assert [m.id for m in await store.conversations.messages_by_id(chat, [reply.id, asked.id])] == \
        [asked.id, reply.id]


async def test_an_edit_or_deletion_on_the_platform_changes_the_stored_message(store: Store, ann, chat):
    await store.conversations.add_user_message(chat, ann, "Ann", "I live in Bergen", 4, "m1")
    assert await store.conversations.edit_platform_message(chat, "m1", "I live in Oslo", 4)
    assert (await store.conversations.recent_messages(chat, 1))[0].content == "I live in Oslo"
    assert await store.conversations.delete_platform_message(chat, "m1")
    assert await store.conversations.recent_messages(chat, 1) == []
    assert not await store.conversations.edit_platform_message(chat, "gone", "x", 1)


async def test_a_reply_split_in_parts_shows_as_its_platform_ids_in_the_order_sent(store: Store, ann, chat):
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "a long story please", 4, "p1")
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    reply = await store.turns.finish_turn(turn, asked, "Mira", "a very long story", 4, {})
    shown = await store.turns.reply_shown(turn, ["98", "99", "100", "101"])
    assert await store.conversations.platform_message_ids(reply.id) == ["98", "99", "100", "101"]
    assert shown.turn == await store.turns.latest_turn(chat) and shown.turn.reply_message_id == reply.id
    assert shown.shown_before == []
    asked_again = await store.conversations.add_user_message(chat, ann, "Ann", "and another", 2, "p2")
    later = await store.turns.begin_turn(chat, ann, asked_again.id)
    await store.turns.finish_turn(later, asked_again, "Mira", "another story", 2, {})
    assert (await store.turns.reply_shown(later, ["102"])).shown_before == ["98", "99", "100", "101"]


async def test_a_reply_taken_back_before_it_showed_is_not_marked_shown(store: Store, ann, chat):
    """SPEC 15 "What was not shown was not said": a reply withdrawn meanwhile (its process
    taken for gone) is no reply to mark shown, and no turn's next step follows it."""
    asked = await store.conversations.add_user_message(chat, ann, "Ann", "a story please", 4, "p1")
    turn = await store.turns.begin_turn(chat, ann, asked.id)
    reply = await store.turns.finish_turn(turn, asked, "Mira", "a story", 2, {})
    await store.turns.withdraw_reply(reply.id)
    assert await store.turns.reply_shown(turn, ["98"]) is None
    assert await store.conversations.recent_messages(chat, 5) == [asked]


async def test_a_private_answers_buttons_act_where_it_was_asked_in_every_process(open_backend):
    first, second = await open_backend(), await open_backend()
    mira = await first.characters.ensure_character("Mira")
    group = await first.conversations.conversation("telegram", "-100", None, mira, True)
    await first.conversations.set_answer_origin("telegram", "501", ["7001", "7002"], group.id)
    assert (await second.conversations.answer_origin("telegram", "501", "7002")).id == group.id
    assert await second.conversations.answer_origin("telegram", "502", "7002") is None  # another DM


async def test_in_a_scene_the_reply_before_is_the_same_characters(store: Store, ann, mira):
    aki = await store.characters.ensure_character("Aki")
    scene = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    shown = {}
    for character, sent in ((mira, "m1"), (aki, "a1"), (mira, "m2")):
        asked = await store.conversations.add_user_message(scene, ann, "Ann", f"hello {sent}", 2, f"q-{sent}")
        turn = await store.turns.begin_turn(scene, ann, asked.id, character)
        await store.turns.finish_turn(turn, asked, "someone", f"reply {sent}", 2, {})
        shown[sent] = (await store.turns.reply_shown(turn, [sent])).shown_before
    assert shown == {"m1": [], "a1": [], "m2": ["m1"]}


async def test_message_numbers_are_counted_for_many_places_in_one_statement(store, chat, ann):
    """/memory summary names the messages an entry covers: the nth of the conversation."""
    rows = [await store.conversations.add_user_message(chat, ann, "Ann", f"message {n}", 2, None) for n in range(5)]
    numbers = await store.conversations.message_numbers(chat, [rows[0].pos, rows[2].pos, rows[4].pos])
    assert numbers == {rows[0].pos: 1, rows[2].pos: 3, rows[4].pos: 5}
    assert await store.conversations.message_numbers(chat, []) == {}


async def test_a_persons_private_conversations_are_their_dms_only(store: Store, ann, mira, chat):
    bob = await store.people.person_for_identity("telegram", "502")
    group = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    bobs = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    await store.conversations.add_user_message(chat, ann, "Ann", "hi", 1, "p1")
    await store.conversations.add_user_message(group, ann, "Ann", "hi all", 2, "p2")
    await store.conversations.add_user_message(bobs, bob, "Bob", "hi", 1, "p3")
    assert [c.id for c in await store.conversations.private_of(ann)] == [chat]



async def test_an_album_is_gathered_from_any_store_until_its_turn_takes_it(open_backend, ann, chat):
    """SPEC 12: Telegram posts an album's items one by one, and behind a load balancer each may
    reach another process. The first is stored with its album; a later one, in any process,
    joins it (once) until the album's turn takes every item; then a later one is its own message."""
    first_process, second_process = await open_backend(), await open_backend()
    arrival = await first_process.turns.store_and_queue(chat, ann, "Ann", "[a photo] the harbour", 5, "11", None,
                                                        album=NewAlbum("album-7", [("11", "item 11")], gathering=True))
    assert await second_process.conversations.album_size(chat, "album-7") == 1
    joined = await second_process.conversations.join_album(chat, "album-7", "12", "item 12")
    assert joined.stored_as == "11" and sorted(joined.items) == ["item 11", "item 12"]
    again = await first_process.conversations.join_album(chat, "album-7", "12", "item 12")  # posted again
    assert sorted(again.items) == ["item 11", "item 12"]
    assert await second_process.conversations.join_album(chat, "album-8", "13", "item 13") is None  # never begun
    assert sorted(await first_process.conversations.end_album(chat, "album-7")) == ["item 11", "item 12"]
    assert await second_process.conversations.join_album(chat, "album-7", "14", "item 14") is None  # taken: too late
    assert await second_process.conversations.album_size(chat, "album-7") == 0
    assert await first_process.conversations.end_album(chat, "album-7") == []
    assert arrival.message.platform_message_id == "11"
    # the late item, a message of its own, begins an album of its own under the same key
    await second_process.turns.store_and_queue(chat, ann, "Ann", "[a photo]", 3, "14", None,
                                               album=NewAlbum("album-7", [("14", "item 14")], gathering=True))
    assert (await first_process.conversations.join_album(chat, "album-7", "15", "item 15")).stored_as == "14"
    late = await first_process.conversations.edit_album_item(chat, "album-7", "14", "item 14, edited")
    assert late.stored_as == "14" and sorted(late.items) == ["item 14, edited", "item 15"]
    assert (await first_process.conversations.edit_album_item(chat, "album-7", "12", "item 12, edited")).stored_as == "11"


async def test_an_albums_item_edited_later_is_read_with_the_others_again(store: Store, ann, chat):
    """SPEC 7: a person editing their message updates it in the store; an album is one message,
    so its edited item comes back with every other, to store the message again."""
    await store.turns.store_and_queue(chat, ann, "Ann", "[2 photos] the harbour", 5, "21", None,
                                      album=NewAlbum("album-2", [("21", "item 21"), ("22", "item 22")], False))
    assert await store.conversations.join_album(chat, "album-2", "23", "item 23") is None  # stored whole
    edited = await store.conversations.edit_album_item(chat, "album-2", "22", "item 22, edited")
    assert edited.stored_as == "21" and sorted(edited.items) == ["item 21", "item 22, edited"]
    assert await store.conversations.edit_album_item(chat, "album-2", "29", "not of it") is None
    assert await store.conversations.edit_album_item(chat, "album-5", "21", "no such album") is None


async def test_an_album_kept_without_a_turn_is_gathered_all_the_same(store: Store, ann, chat):
    """A message kept and not answered now (past today's tokens, or a voice note to hear first)
    keeps its album: a later item joins it."""
    kept = await store.conversations.add_user_message(chat, ann, "Ann", "[a photo]", 3, "41",
                                                      NewAlbum("album-4", [("41", "item 41")], gathering=True))
    joined = await store.conversations.join_album(chat, "album-4", "42", "item 42")
    assert kept.platform_message_id == joined.stored_as == "41" and sorted(joined.items) == ["item 41", "item 42"]


async def test_an_albums_items_go_with_its_message(store: Store, ann, chat):
    """A deleted message (or a person forgotten: their messages go) takes what is kept of its album."""
    await store.turns.store_and_queue(chat, ann, "Ann", "[a photo]", 3, "31", None,
                                      album=NewAlbum("album-9", [("31", "item 31")], gathering=True))
    assert await store.conversations.delete_platform_message(chat, "31")
    assert await store.conversations.album_size(chat, "album-9") == 0
    assert await store.conversations.join_album(chat, "album-9", "32", "item 32") is None
    assert await store.conversations.edit_album_item(chat, "album-9", "31", "item 31, edited") is None
