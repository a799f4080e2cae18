"""The Presence port (SPEC 22): who is present in a scene, stored so every process agrees, and
every message of a scene recording the characters that witnessed it — read back through one
sight by the window, the summary, recall by words and by meaning."""

import pytest

from storage.ports import Store, SummaryStartedAgain


@pytest.fixture
async def aki(store: Store) -> int:
    return await store.characters.ensure_character("Aki")


@pytest.fixture
async def scene(store: Store, mira: int) -> int:
    return (await store.conversations.conversation("telegram", "-100", None, mira, True)).id


async def say(store: Store, scene: int, person: int, text: str):
    return await store.conversations.add_user_message(scene, person, "Ann", text, 5, None)


async def reply(store: Store, scene: int, person: int, asked, character: int, name: str, text: str):
    turn = await store.turns.begin_turn(scene, person, asked.id, character)
    return await store.turns.finish_turn(turn, asked, name, text, 5, {}, character_id=character)


async def test_a_scenes_message_is_witnessed_by_the_characters_present_when_it_was_stored(
        store: Store, scene, ann, mira, aki):
    assert await store.presence.bring_in(scene, [mira]) == [mira]
    before = await say(store, scene, ann, "Mira alone hears this")
    assert await store.presence.bring_in(scene, [mira, aki]) == [aki]  # Mira was in already
    after = await say(store, scene, ann, "both hear this")
    assert [m.id for m in await store.conversations.recent_messages(scene, 10, seen_by=aki)] == [after.id]
    assert [m.id for m in await store.conversations.recent_messages(scene, 10, seen_by=mira)] == [after.id, before.id]
    assert await store.presence.present(scene) == sorted([mira, aki])
    assert await store.presence.witnessed(scene, aki) == (1, 2)


async def test_the_sizes_of_the_newest_messages_come_newest_first_and_only_as_witnessed(
        store: Store, scene, ann, mira, aki):
    """What the summary queue weighs after each reply: places and token counts, no words."""
    await store.presence.bring_in(scene, [mira])
    before = await store.conversations.add_user_message(scene, ann, "Ann", "Mira alone hears this", 7, None)
    await store.presence.bring_in(scene, [aki])
    after = await store.conversations.add_user_message(scene, ann, "Ann", "both hear this", 4, None)
    assert await store.conversations.recent_sizes(scene, 10) == [(after.pos, 4), (before.pos, 7)]
    assert await store.conversations.recent_sizes(scene, 1) == [(after.pos, 4)]
    assert await store.conversations.recent_sizes(scene, 10, seen_by=aki) == [(after.pos, 4)]
    assert await store.conversations.recent_sizes(scene, 10, seen_by=mira) == [(after.pos, 4), (before.pos, 7)]


async def test_a_lorebooks_count_of_messages_back_counts_only_what_the_character_witnessed(
        store: Store, scene, ann, mira, aki):
    """An entry that waits for N messages (or N of the character's replies) counts the chat as
    the character saw it: Aki, brought in later, has seen fewer."""
    await store.presence.bring_in(scene, [mira])
    for n in range(3):
        await say(store, scene, ann, f"Mira alone hears this {n}")
    await store.presence.bring_in(scene, [aki])
    last = await say(store, scene, ann, "both hear this")
    assert await store.conversations.count_back(scene, last.pos, 100, seen_by=mira) == 4
    assert await store.conversations.count_back(scene, last.pos, 100, seen_by=aki) == 1


async def test_a_character_that_speaks_in_a_scene_is_brought_in_and_witnesses_its_own_message(
        store: Store, scene, ann, mira, aki):
    await store.presence.bring_in(scene, [mira])
    asked = await say(store, scene, ann, "hello Mira")
    said = await reply(store, scene, ann, asked, aki, "Aki", "Aki here, uninvited")
    assert await store.presence.present(scene) == sorted([mira, aki])
    assert [m.id for m in await store.conversations.recent_messages(scene, 10, seen_by=aki)] == [said.id]
    assert await store.presence.missed_any(scene, aki) and not await store.presence.missed_any(scene, mira)


async def test_a_dismissed_character_witnesses_nothing_until_it_is_brought_in_again(store: Store, scene, ann, mira, aki):
    await store.presence.bring_in(scene, [mira, aki])
    first = await say(store, scene, ann, "both hear this")
    assert await store.presence.dismiss(scene, aki)
    assert not await store.presence.dismiss(scene, aki)  # not present any more
    await say(store, scene, ann, "the secret: the key is under the heron stone")
    await store.presence.bring_in(scene, [aki])
    last = await say(store, scene, ann, "Aki is back")
    assert [m.id for m in await store.conversations.messages_between(scene, 0, None, 10, seen_by=aki)] == [
        first.id, last.id]
    assert await store.conversations.count_messages(scene, 0, seen_by=aki) == 2
    assert await store.conversations.count_messages(scene, 0) == 3
    assert await store.presence.missed_any(scene, aki)


async def test_a_character_never_brought_in_reads_nothing_of_a_scene_and_one_here_from_the_start_reads_it_all(
        store: Store, scene, ann, mira, aki):
    await store.presence.bring_in(scene, [mira])
    await say(store, scene, ann, "hello")
    assert await store.presence.missed_any(scene, aki)  # no row: it missed every message
    assert await store.conversations.recent_messages(scene, 10, seen_by=aki) == []
    assert not await store.presence.missed_any(scene, mira)


async def test_recall_by_words_finds_only_what_the_character_witnessed(store: Store, scene, ann, mira, aki):
    await store.presence.bring_in(scene, [mira])
    secret = await say(store, scene, ann, "the key is under the heron stone")
    await store.presence.bring_in(scene, [aki])
    seen = await say(store, scene, ann, "I saw a heron at the harbour")
    now = await say(store, scene, ann, "anyway")
    assert [m.id for m in await store.recall.search(scene, ["heron"], now.pos, 5, 100, seen_by=aki)] == [seen.id]
    assert {m.id for m in await store.recall.search(scene, ["heron"], now.pos, 5, 100, seen_by=mira)} == {
        secret.id, seen.id}
    assert [m.id for m in await store.recall.messages_at(scene, [secret.pos, seen.pos], seen_by=aki)] == [seen.id]


async def test_a_dismissed_characters_own_summary_starts_as_the_scenes_and_grows_apart(
        store: Store, scene, ann, mira, aki):
    await store.presence.bring_in(scene, [mira, aki])
    said = await say(store, scene, ann, "both hear this")
    await store.summaries.write_summary(scene, 0, "recent", "Ann said hello to both.", 5, said.pos, said.pos, [],
                                        covered_pos=said.pos)
    await store.presence.dismiss(scene, aki)
    assert [seen_by for seen_by, _ in await store.summaries.summary_states(scene)] == [None, aki]
    own = await store.summaries.summaries(scene, seen_by=aki)
    assert [e.content for e in own] == ["Ann said hello to both."]
    assert (await store.summaries.summary_state(scene, aki)).summarized_pos == said.pos
    secret = await say(store, scene, ann, "the heron stone")
    await store.summaries.write_summary(scene, 0, "recent", "The key is under the heron stone.", 5, secret.pos,
                                        secret.pos, [], covered_pos=secret.pos)
    assert [e.content for e in await store.summaries.summaries(scene, seen_by=aki)] == ["Ann said hello to both."]
    assert len(await store.summaries.summaries(scene)) == 2  # the scene's, which Mira reads
    assert (await store.summaries.summary_state(scene, aki)).summarized_pos == said.pos


async def test_the_summaries_to_keep_up_are_read_at_once_the_scenes_first_then_each_own_by_character(
        store: Store, scene, ann, mira, aki):
    zed = await store.characters.ensure_character("Zed")
    await store.presence.bring_in(scene, [mira, zed, aki])
    said = await say(store, scene, ann, "all three hear this")
    await store.summaries.write_summary(scene, 0, "recent", "Ann greeted them.", 5, said.pos, said.pos, [],
                                        covered_pos=said.pos)
    await store.presence.dismiss(scene, zed)
    await store.presence.dismiss(scene, aki)
    await store.summaries.set_summary_retry(scene, 2, 500.0, aki)
    states = await store.summaries.summary_states(scene)
    assert [seen_by for seen_by, _ in states] == [None, *sorted([aki, zed])]
    assert [state for _, state in states] == [await store.summaries.summary_state(scene, seen_by)
                                              for seen_by, _ in states]
    assert dict(states)[aki].failures == 2 and dict(states)[zed].summarized_pos == said.pos
    assert await store.summaries.summary_states(scene + 1000) == []  # no such conversation


async def test_a_rebuild_starts_every_characters_own_summary_again(store: Store, scene, ann, mira, aki):
    await store.presence.bring_in(scene, [mira, aki])
    said = await say(store, scene, ann, "hello")
    await store.presence.dismiss(scene, aki)
    await store.summaries.write_summary(scene, 0, "recent", "Aki's view.", 5, said.pos, said.pos, [],
                                        covered_pos=said.pos, seen_by=aki)
    assert await store.summaries.start_rebuild(scene, ann) is not None
    assert await store.summaries.summaries(scene, seen_by=aki) == []
    assert (await store.summaries.summary_state(scene, aki)).summarized_pos == 0


async def test_an_own_summary_read_before_a_rebuild_began_is_not_written_after_it(store: Store, scene, ann, mira,
                                                                                  aki):
    """/forgetme starts a scene's summaries again: a pass of a character's own summary that read the
    forgotten person's words before then writes nothing of them after."""
    await store.presence.bring_in(scene, [mira, aki])
    await store.presence.dismiss(scene, aki)
    said = await say(store, scene, ann, "the key is under the heron stone")
    read = await store.summaries.summary_state(scene, aki)  # a pass begins: its batch is read, the model writes
    assert await store.summaries.start_rebuild(scene, None) is not None  # meanwhile: a rebuild begins
    with pytest.raises(SummaryStartedAgain):
        await store.summaries.write_summary(scene, read.generation, "recent", "Ann: the heron stone.", 5, said.pos,
                                            said.pos, [], covered_pos=said.pos, seen_by=aki)
    assert await store.summaries.summaries(scene, seen_by=aki) == []
    assert (await store.summaries.summary_state(scene, aki)).summarized_pos == 0
    again = await store.summaries.summary_state(scene, aki)  # the next pass, of what is stored now
    await store.summaries.write_summary(scene, again.generation, "recent", "Ann spoke.", 5, said.pos, said.pos, [],
                                        covered_pos=said.pos, seen_by=aki)
    assert [e.content for e in await store.summaries.summaries(scene, seen_by=aki)] == ["Ann spoke."]


async def test_leaving_a_chat_dismisses_the_character_from_every_scene_of_it(store: Store, mira, aki):
    topics = [(await store.conversations.conversation("telegram", "-100", topic, mira, True)).id
              for topic in ("1", "2")]
    for topic in topics:
        await store.presence.bring_in(topic, [mira, aki])
    assert await store.presence.leave_chat("telegram", "-100", aki) == 2
    assert [await store.presence.present(topic) for topic in topics] == [[mira], [mira]]


async def test_presence_is_shared_by_every_process(open_backend, mira, aki, ann):
    first, second = await open_backend(), await open_backend()
    scene = (await first.conversations.conversation("telegram", "-100", None, mira, True)).id
    await first.presence.bring_in(scene, [mira, aki])
    await second.presence.dismiss(scene, aki)
    said = await first.conversations.add_user_message(scene, ann, "Ann", "only Mira hears", 5, None)
    assert await second.conversations.recent_messages(scene, 5, seen_by=aki) == []
    assert [m.id for m in await second.conversations.recent_messages(scene, 5, seen_by=mira)] == [said.id]


async def test_forgetting_a_person_takes_a_characters_own_summary_back_only_to_before_their_first_words(
        store: Store, scene, ann, mira, aki):
    """SPEC 22 with SPEC 6: what a character's own summary wrote before the forgotten person
    first spoke never read them, and stays; from there on it goes, and the summary goes on from
    where what is left ends (a pass that read before writes nothing)."""
    await store.presence.bring_in(scene, [mira, aki])
    await store.presence.dismiss(scene, aki)
    bob = await store.people.person_for_identity("telegram", "502")
    before = [await say(store, scene, bob, f"Bob's line {n}") for n in range(3)]
    secret = await say(store, scene, ann, "the key is under the heron stone")
    after = await say(store, scene, bob, "Bob again")
    generation = (await store.summaries.summary_state(scene, aki)).generation
    for text, first, last in [("Bob talked.", before[0], before[-1]), ("Ann: the heron stone.", secret, after)]:
        await store.summaries.write_summary(scene, generation, "recent", text, 3, first.pos, last.pos, [],
                                            covered_pos=last.pos, seen_by=aki)
    await store.people.forget_person(ann, "2027-01-15")
    assert [e.content for e in await store.summaries.summaries(scene, seen_by=aki)] == ["Bob talked."]
    state = await store.summaries.summary_state(scene, aki)
    assert state.summarized_pos == before[-1].pos  # written again from there: Bob's later line
    with pytest.raises(SummaryStartedAgain):  # a pass that read Ann before
        await store.summaries.write_summary(scene, generation, "recent", "Ann: the heron.", 3, secret.pos,
                                            secret.pos, [], covered_pos=secret.pos, seen_by=aki)
    await store.summaries.write_summary(scene, state.generation, "recent", "Bob again.", 3, after.pos, after.pos,
                                        [], covered_pos=after.pos, seen_by=aki)
    assert [e.content for e in await store.summaries.summaries(scene, seen_by=aki)] == ["Bob talked.", "Bob again."]
