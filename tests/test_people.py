"""SPEC sections 2 and 6 — /link joins identities into one person, /forgetme deletes every row
about a person, and removing a character turns its memories global."""

import asyncio
import json
import sqlite3

import pytest

import storage.sqlite.store
from bot.cli import remove_character
from bot.contract import NOTHING_FORGOTTEN, AlbumItem, IncomingMessage
from bot.memory.rebuild import DONE
from bot.runtime import build_runtime
from tests.conftest import DAY, Chat, shown
from tests.fakes.llm_server import status, text
from tests.fakes.summarizer import kind_of


def link_code(result) -> str:
    return result.text.split("Your link code is ")[1].split(".")[0]


async def link(maker: Chat, enterer: Chat):
    """/link on one account, the code entered on the other, and the merge confirmed there."""
    question = await enterer.memory(f"/link {link_code(await maker.memory('/link'))}")
    assert question.buttons, question.text
    return await enterer.press(question.buttons[0][0].action)


async def fill(chat: Chat, scope: str, count: int, pinned: bool = False) -> None:
    person = await chat.person_id()
    character = chat.runtime.cast.character("Mira").id
    for i in range(count):
        await chat.runtime.store.memories.add_memory(person, character, scope, f"{chat.name} {scope} {i}", 3,
                                            pinned, "person")


async def test_link_joins_a_discord_and_a_telegram_identity_into_one_person(runtime, llm):
    on_discord = Chat(runtime, user="111", chat_id="dm-d", platform="discord")
    on_telegram = Chat(runtime, user="222", chat_id="dm-t", platform="telegram")
    await on_discord.memory("/memory add pin:yes I am allergic to peanuts")
    await on_telegram.memory("/memory add I prefer to be called Annie")
    linked = await link(on_discord, on_telegram)
    assert "Linked: discord, telegram" in linked.text
    assert await on_discord.person_id() == await on_telegram.person_id()
    await on_telegram.say("what should I avoid eating?")
    prompt = llm.prompt_text()
    assert "allergic to peanuts" in prompt and "called Annie" in prompt


async def test_link_merges_pins_over_20_as_unpinned_and_says_so(runtime):
    first = Chat(runtime, user="111", name="D", platform="discord")
    second = Chat(runtime, user="222", name="T", platform="telegram")
    await fill(first, "character", 15, pinned=True)
    await fill(second, "character", 10, pinned=True)
    linked = await link(first, second)
    assert "5 pinned memories went over the limit of 20 pinned per scope and are now unpinned" in linked.text
    person, character = await first.person_id(), runtime.cast.character("Mira").id
    assert await runtime.store.memories.count_memories(person, character, "character", pinned=True) == 20
    assert await runtime.store.memories.count_memories(person, character, "character", pinned=False) == 5


async def test_link_keeps_a_memory_both_accounts_kept_once_pinned_if_either_pinned_it(runtime):
    first = Chat(runtime, user="111", name="D", platform="discord")
    second = Chat(runtime, user="222", name="T", platform="telegram")
    await first.memory("/memory add I am allergic to peanuts")
    await second.memory("/memory add pin:yes i am allergic to peanuts")
    await second.memory("/memory add I have a cat")
    linked = await link(first, second)
    assert "1 memory that both accounts kept is now kept once." in linked.text
    rows, total = await runtime.store.memories.list_memories(await first.person_id(), runtime.cast.character("Mira").id,
                                                             None, 0, 10)
    assert total == 2 and [(m.content, m.pinned) for m in rows] == [("I am allergic to peanuts", True),
                                                                      ("I have a cat", False)]


async def test_link_refuses_to_exceed_100_unpinned_and_loses_nothing(runtime):
    first = Chat(runtime, user="111", name="D", platform="discord")
    second = Chat(runtime, user="222", name="T", platform="telegram")
    await fill(first, "global", 60)
    await fill(second, "global", 60)
    refused = await link(first, second)
    assert not refused.ok
    assert "120 unpinned global memories; the limit is 100" in refused.text
    assert await first.person_id() != await second.person_id()


async def test_a_link_code_expires_after_10_minutes(runtime, clock):
    first = Chat(runtime, user="111", platform="discord")
    second = Chat(runtime, user="222", platform="telegram")
    code = link_code(await first.memory("/link"))
    clock.now += 10 * 60 + 1
    expired = await second.memory(f"/link {code}")
    assert not expired.ok and "unknown or has expired" in expired.text


async def test_link_asks_before_anything_merges_and_says_what_will_be_shared(runtime):
    bob = Chat(runtime, user="111", name="Bob", platform="discord")
    ann = Chat(runtime, user="222", name="Ann", platform="telegram")
    await ann.memory("/memory add my salary is 99000 dollars")
    question = await ann.memory(f"/link {link_code(await bob.memory('/link'))}")
    assert "whoever holds either account sees them all" in question.text
    assert await bob.person_id() != await ann.person_id()  # nothing merged yet
    assert "99000" not in (await bob.memory("/memory view")).text
    cancelled = await ann.press(question.buttons[0][1].action)
    assert "nothing was changed" in cancelled.text
    assert await bob.person_id() != await ann.person_id()


async def test_a_link_code_entered_on_the_platform_that_made_it_is_refused(runtime):
    first = Chat(runtime, user="111", platform="telegram")
    second = Chat(runtime, user="222", chat_id="dm-2", platform="telegram")
    refused = await second.memory(f"/link {link_code(await first.memory('/link'))}")
    assert not refused.ok and not refused.buttons
    assert "Enter it from your account on the other platform" in refused.text
    assert await first.person_id() != await second.person_id()


async def test_a_link_code_works_once(runtime):
    maker = Chat(runtime, user="111", platform="discord")
    first = Chat(runtime, user="222", platform="telegram")
    second = Chat(runtime, user="333", chat_id="dm-3", platform="telegram")
    code = link_code(await maker.memory("/link"))
    question = await first.memory(f"/link {code}")
    assert "Linked" in (await first.press(question.buttons[0][0].action)).text
    again = await second.memory(f"/link {code}")
    assert not again.ok and "unknown or has expired" in again.text
    assert await second.person_id() != await maker.person_id()


async def test_5_wrong_link_codes_in_10_minutes_pause_link(runtime, clock):
    maker = Chat(runtime, user="111", platform="discord")
    guesser = Chat(runtime, user="222", platform="telegram")
    code = link_code(await maker.memory("/link"))
    for guess in ("AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE"):
        assert "unknown or has expired" in (await guesser.memory(f"/link {guess}")).text
    paused = await guesser.memory(f"/link {code}")  # even the right code, now
    assert not paused.ok and "/link is paused" in paused.text
    clock.now += 10 * 60 + 1
    after = await guesser.memory(f"/link {code}")  # the pause is over (and the code expired meanwhile)
    assert "paused" not in after.text and "unknown or has expired" in after.text
    assert "Your link code is" in (await guesser.memory("/link")).text


async def test_forgetme_asks_first_then_leaves_no_row_about_the_person(runtime, llm, tmp_path):
    ann = Chat(runtime, user="ann", name="Ann")
    bob_in_group = Chat(runtime, user="bob", name="Bob", chat_id="group", shared=True)
    ann_in_group = Chat(runtime, user="ann", name="Ann", chat_id="group", shared=True)
    await ann.memory("/memory add pin:yes Ann's pinned fact")
    await ann.memory("/memory add scope:global Ann's global fact")
    await ann.memory("/memory learning off")
    await ann.memory("/link")
    await ann.say("a private chat with Mira")
    await ann_in_group.say("Ann in the group")
    await bob_in_group.say("Bob in the group")
    ann_id = await ann.person_id()
    group = (await runtime.cast.conversation_for(ann_in_group.key)).id
    await runtime.store.summaries.write_summary(group, 0, "recent", "- Ann said: Ann in the group.", 9, 2, 2, [])

    question = await ann.memory("/forgetme")
    assert "cannot be undone" in question.text
    done = await ann.press(question.buttons[0][0].action)
    assert "Everything stored about you is deleted" in done.text
    await runtime.rebuilds.idle()  # the group's summary is rebuilt without Ann's messages

    store = runtime.store
    export = await store.memories.export_person(ann_id)
    assert export == {"identities": [], "persona": None, "memories": [], "learn_from_chat": {}}
    assert await store.people.identities_of(ann_id) == []
    assert await store.turns.last_receipt(group, ann_id) is None
    dm = (await runtime.cast.conversation_for(ann.key)).id  # the one-to-one conversation went whole
    assert await store.conversations.recent_messages(dm, 10) == []
    in_group = [m.content for m in await store.conversations.recent_messages(group, 10)]
    summary = "\n".join(s.content for s in await store.summaries.summaries(group))
    assert in_group == ["Okay.", "Bob in the group"]  # other people's messages stay
    assert "Ann" not in summary and "a private chat" not in summary


async def test_forgetme_confirmed_as_the_accounts_are_linked_deletes_nothing_and_says_to_ask_again(runtime):
    """Ann confirms /forgetme on Telegram just as her Telegram account is linked into her Discord
    one (staged: the link lands between her press and its delete). The person she confirmed for
    is no longer there: nothing is deleted, and she is told so, never that everything went.
    Asked again, everything of the person she now is goes, both accounts."""
    on_discord = Chat(runtime, user="111", chat_id="dm-d", platform="discord")
    on_telegram = Chat(runtime, user="222", chat_id="dm-t", platform="telegram")
    await on_telegram.memory("/memory add I prefer to be called Annie")
    question = await on_telegram.memory("/forgetme")
    forget_person = runtime.store.people.forget_person

    async def after_the_link(person_id, day):
        await link(on_discord, on_telegram)  # Discord's code entered on Telegram: Telegram's person is absorbed
        return await forget_person(person_id, day)

    runtime.store.people.forget_person = after_the_link
    answer = await on_telegram.press(question.buttons[0][0].action)
    runtime.store.people.forget_person = forget_person
    assert answer.text == NOTHING_FORGOTTEN
    kept = await on_telegram.person_id()
    assert kept == await on_discord.person_id()
    assert await runtime.store.people.identities_of(kept) == [("discord", "111"), ("telegram", "222")]
    assert "called Annie" in (await on_discord.memory("/memory view")).text

    again = await on_telegram.press((await on_telegram.memory("/forgetme")).buttons[0][0].action)
    assert "Everything stored about you is deleted" in again.text
    assert await runtime.store.people.identities_of(kept) == []


async def a_group_where_ann_told_a_secret(runtime) -> tuple[Chat, Chat, int]:
    """Ann tells the group where the key is, then Bob talks past the window (a rebuild has
    something to summarize): Ann's and Bob's chats there, and the group's conversation."""
    ann_in_group = Chat(runtime, user="ann", name="Ann", chat_id="group", shared=True)
    bob_in_group = Chat(runtime, user="bob", name="Bob", chat_id="group", shared=True)
    await ann_in_group.say("the key is under the heron stone")
    group = (await runtime.cast.conversation_for(bob_in_group.key)).id
    bob = await bob_in_group.person_id()
    for i in range(90):
        await runtime.store.conversations.add_user_message(group, bob, "Bob", f"Bob's line {i}", 5, None)
    return ann_in_group, bob_in_group, group


async def test_forgetme_in_a_group_leaves_none_of_the_persons_words_in_the_next_prompt_while_the_model_is_down(
        runtime, llm):
    """SPEC 6: "Everything stored about you is deleted" is true when it is said — the group's
    summary, which held Ann's words, serves no other prompt while its rebuild cannot run (the
    model is down for summaries); the rebuild nobody asked for is tried again until it succeeds."""
    ann_in_group, bob_in_group, group = await a_group_where_ann_told_a_secret(runtime)
    await runtime.store.summaries.write_summary(group, 0, "recent", "- Ann: the key is under the heron stone.", 9,
                                                1, 2, [], covered_pos=2)
    llm.responder = lambda body: status(500) if kind_of(body) != "chat" else None  # summaries fail

    question = await ann_in_group.memory("/forgetme")
    done = await ann_in_group.press(question.buttons[0][0].action)
    assert "Everything stored about you is deleted" in done.text
    await runtime.rebuilds.idle()
    assert (await runtime.store.summaries.rebuild(group)).status == "running"  # failed, to be tried again
    await bob_in_group.say("where is the key?")
    assert "heron" not in json.dumps(llm.requests[-1]["messages"])

    llm.responder = lambda body: text("- Bob spoke at length.") if kind_of(body) != "chat" else None
    await runtime.rebuilds.resume_interrupted()  # the scheduler's next check
    await runtime.rebuilds.idle()
    assert await runtime.store.summaries.rebuild(group) is None
    summary = [entry.content for entry in await runtime.store.summaries.summaries(group)]
    assert summary and "heron" not in "".join(summary)


async def test_forgetme_in_a_group_leaves_the_summary_of_the_others_words_serving_while_it_is_rebuilt(runtime, llm):
    """SPEC 4: the current summary keeps serving until the rebuilt one is complete. After Ann's
    /forgetme only the entries that read her words go: Bob's group still has the summary of
    what he said while its rebuild waits for the model."""
    ann_in_group, bob_in_group, group = await a_group_where_ann_told_a_secret(runtime)
    ann_and_reply, bobs = await runtime.store.conversations.messages_between(group, -1, None, 100), []
    ann_and_reply, bobs = ann_and_reply[:2], ann_and_reply[2:]
    assert [m.speaker_name for m in ann_and_reply] == ["Ann", "Mira"] and {m.speaker_name for m in bobs} == {"Bob"}
    await runtime.store.summaries.write_summary(group, 0, "recent", "- Ann: the key is under the heron stone.", 9,
                                                ann_and_reply[0].pos, ann_and_reply[1].pos, [])
    await runtime.store.summaries.write_summary(group, 0, "recent", "- Bob: his boat is called the Gannet.", 9,
                                                bobs[0].pos, bobs[20].pos, [], covered_pos=bobs[20].pos)
    llm.responder = lambda body: status(500) if kind_of(body) != "chat" else None  # summaries fail
    await ann_in_group.press((await ann_in_group.memory("/forgetme")).buttons[0][0].action)
    await runtime.rebuilds.idle()
    assert (await runtime.store.summaries.rebuild(group)).status == "running"
    await bob_in_group.say("what is my boat called?")
    prompt = json.dumps(llm.requests[-1]["messages"])
    assert "the Gannet" in prompt and "heron" not in prompt


async def test_forgetme_while_a_rebuild_runs_starts_it_over_without_the_persons_words_and_it_ends_at_once(
        runtime, llm):
    """A rebuild Bob asked for is writing when Ann is forgotten: what it read held her words, so
    it goes again from the start, at once, in the same process; Bob is told when it ends."""
    ann_in_group, bob_in_group, group = await a_group_where_ann_told_a_secret(runtime)
    told: list[str] = []

    async def notifier(conversation, message):
        told.append(message)

    def summarizing(body):  # slowly, so that /forgetme comes while the model writes
        if kind_of(body) == "chat":
            return None
        heard = "heron" if "heron" in json.dumps(body["messages"]) else "no key"
        return text(f"- the group talked ({heard}).", delay=0.3)
    llm.responder = summarizing
    with runtime.core.presence.listening(notifier):
        await bob_in_group.memory("/memory rebuild")
        while not any(kind_of(request) != "chat" for request in llm.requests):
            await asyncio.sleep(0.01)
        question = await ann_in_group.memory("/forgetme")
        await ann_in_group.press(question.buttons[0][0].action)
        await runtime.rebuilds.idle()
        assert await runtime.store.summaries.rebuild(group) is None and told == [DONE]
    summary = "".join(entry.content for entry in await runtime.store.summaries.summaries(group))
    assert "no key" in summary and "heron" not in summary


async def test_removing_a_character_turns_its_memories_global(make_config, clock):
    config = make_config()
    runtime = await build_runtime(config, clock=clock)
    ann = Chat(runtime)
    await ann.memory("/memory add only Mira knows this")
    await ann.memory("/memory add pin:yes a pinned one")
    person = await ann.person_id()
    await runtime.close()
    assert await remove_character(config, "Mira") == 0
    runtime = await build_runtime(config, clock=clock)  # Mira is still configured: she comes back, anew
    try:
        rows, _ = await runtime.store.memories.list_memories(person, 0, "global", 0, 10)
        assert [(m.scope, m.pinned, m.content) for m in rows] == [
            ("global", True, "a pinned one"), ("global", False, "only Mira knows this")]
    finally:
        await runtime.close()


async def test_a_link_code_entered_on_the_platform_that_made_it_says_where_to_enter_it(runtime):
    maker = Chat(runtime, user="111", platform="discord")
    code = link_code(await maker.memory("/link"))
    own = await maker.memory(f"/link {code}")
    assert not own.ok and "That is your own code: enter it from your account on the other platform (Telegram)" in own.text


async def test_forgetme_leaves_none_of_the_persons_words_in_the_sqlite_file(runtime, llm, tmp_path):
    """#46: the deleted words are overwritten — the file, its full-text index and its write-ahead
    log hold no copy of a rare word the person said (kept, edited, recalled; an album's items as
    Telegram sent them, in her chat and in a group)."""
    ann = Chat(runtime, user="ann", name="Ann", platform="telegram")
    for n in range(7):
        await ann.say(f"my boat is called Quillowmere, the {n}th time I say it")
    ann_in_group = Chat(runtime, user="ann", name="Ann", chat_id="-100", shared=True, platform="telegram")
    for chat, first in ((ann, 901), (ann_in_group, 911)):
        photos = tuple(AlbumItem("boat", str(n), json.dumps({"message_id": n, "caption": "Quillowmere at sea"}))
                       for n in (first, first + 1))
        await shown(runtime, await runtime.core.conversation.handle(IncomingMessage(
            chat.key, chat.identity, "Ann", "@Mira [2 photos] Quillowmere at sea", platform_message_id=str(first),
            album=photos, asker=chat.asker)))
    on_disk = b"".join(path.read_bytes() for path in tmp_path.glob("keepsake.sqlite3*"))
    assert on_disk.count(b"Quillowmere") >= 7  # in the file before
    question = await ann.memory("/forgetme")
    await ann.press(question.buttons[0][0].action)
    await runtime.rebuilds.idle()
    on_disk = b"".join(path.read_bytes() for path in tmp_path.glob("keepsake.sqlite3*"))
    assert on_disk.count(b"Quillowmere") == 0 and on_disk.count(b"quillowmer") == 0


async def test_forgetme_leaves_none_of_the_persons_words_in_the_backups_made_before_it(runtime, llm, clock, tmp_path):
    """SPEC 6, everything stored: the daily backups (the last 7, SPEC 9) made before `/forgetme`
    hold no copy of the person's words after it, in their own chat or a group's messages and
    summary, and stay whole backups of everyone else's, whose group summary a restore rebuilds."""
    ann = Chat(runtime, user="ann", name="Ann", platform="telegram")
    ann_in_group = Chat(runtime, user="ann", name="Ann", chat_id="group", shared=True, platform="telegram")
    bob_in_group = Chat(runtime, user="bob", name="Bob", chat_id="group", shared=True, platform="telegram")
    for n in range(3):
        await ann.say(f"my boat is called Quillowmere, the {n}th time I say it")
    await ann_in_group.say("the Quillowmere sails at dawn")
    await bob_in_group.say("Bob's kettle is whistling")
    group = (await runtime.cast.conversation_for(ann_in_group.key)).id
    await runtime.store.summaries.write_summary(group, 0, "recent", "- Ann: the Quillowmere sails.", 9, 2, 2, [])
    await runtime.jobs.maintenance()  # two days' backups, the second of the day of /forgetme,
    clock.now += DAY
    await ann.say("good morning")  # holding that day's spend of Ann's
    await runtime.jobs.maintenance()
    made = sorted((tmp_path / "backups").glob("keepsake-*.sqlite3"))
    assert len(made) == 2 and all(b"Quillowmere" in path.read_bytes() for path in made)

    question = await ann.memory("/forgetme")
    await ann.press(question.buttons[0][0].action)
    await runtime.rebuilds.idle()
    assert sorted((tmp_path / "backups").iterdir()) == made  # the same backups, none removed or added
    for path in made:
        on_disk = b"".join(part.read_bytes() for part in path.parent.glob(path.name + "*"))
        assert on_disk.count(b"Quillowmere") == 0 and on_disk.count(b"quillowmer") == 0
        backup = sqlite3.connect(path)
        assert backup.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert backup.execute("SELECT COUNT(*) FROM identities WHERE user_id = 'ann'").fetchone() == (0,)
        assert backup.execute("SELECT COUNT(*) FROM forgotten_spend").fetchone() == (0,)  # a backup counts no day
        assert backup.execute("SELECT content FROM messages WHERE speaker_name = 'Bob'").fetchall() == [
            ("Bob's kettle is whistling",)]
        assert backup.execute("SELECT status FROM rebuilds WHERE conversation_id = ?", (group,)).fetchall() == [
            ("running",)]
        backup.close()


async def test_forgetme_reaches_both_accounts_in_a_backup_made_before_they_were_linked(runtime, llm, tmp_path):
    """A backup from before `/link` holds the Discord and the Telegram account as two persons:
    `/forgetme` of the one linked person forgets both there."""
    on_discord = Chat(runtime, user="111", chat_id="dm-d", platform="discord")
    on_telegram = Chat(runtime, user="222", chat_id="dm-t", platform="telegram")
    await on_discord.say("my boat is called Quillowmere")
    await on_telegram.say("the Quillowmere needs paint")
    await runtime.jobs.maintenance()
    assert "Linked" in (await link(on_discord, on_telegram)).text
    await on_telegram.press((await on_telegram.memory("/forgetme")).buttons[0][0].action)
    [made] = (tmp_path / "backups").glob("keepsake-*.sqlite3")
    assert made.read_bytes().count(b"Quillowmere") == 0
    backup = sqlite3.connect(made)
    assert backup.execute("SELECT COUNT(*) FROM persons").fetchone() == (0,)
    backup.close()


@pytest.mark.parametrize("made_by", ["the same process", "another process"])
async def test_no_backup_is_made_while_forgetme_goes_through_the_backups(runtime, make_config, clock, tmp_path,
                                                                         monkeypatch, made_by):
    """SPEC 6 with SPEC 9's backups: a daily backup started while `/forgetme` cleans the backups
    (by the scheduler of the same process, or of another on the same file) would copy the person
    from the live file, not yet forgotten. It waits until the person is forgotten there too, and
    holds none of their words."""
    ann = Chat(runtime, user="ann", name="Ann", platform="telegram")
    await ann.say("my boat is called Quillowmere")
    await runtime.jobs.maintenance()
    other = await build_runtime(make_config(), clock=clock) if made_by == "another process" else runtime
    clock.now += DAY
    forget_in_backup, started = storage.sqlite.store._forget_in_backup, []

    async def backup_started_meanwhile(*args) -> None:
        await forget_in_backup(*args)
        started.append(asyncio.create_task(other.jobs.maintenance()))
        await asyncio.wait(started, timeout=0.5)  # a backup of this small file is made in far less
    monkeypatch.setattr(storage.sqlite.store, "_forget_in_backup", backup_started_meanwhile)
    try:
        await ann.press((await ann.memory("/forgetme")).buttons[0][0].action)
        await started[0]
    finally:
        if other is not runtime:
            await other.close()
    made = sorted((tmp_path / "backups").glob("keepsake-*.sqlite3"))
    assert len(made) == 2
    assert [path.read_bytes().count(b"Quillowmere") for path in made] == [0, 0]


async def test_forgetme_deletes_a_half_made_backup_a_killed_process_left(runtime, llm, tmp_path):
    """A copy cut off by a kill stays as `keepsake-….sqlite3.part`, never a backup to restore, and
    holds the words of the moment it was made: `/forgetme` deletes it with the backups."""
    ann = Chat(runtime, user="ann", name="Ann", platform="telegram")
    await ann.say("my boat is called Quillowmere")
    await runtime.jobs.maintenance()
    [made] = (tmp_path / "backups").glob("keepsake-*.sqlite3")
    left = made.with_name("keepsake-20261101-000000.sqlite3.part")
    left.write_bytes(made.read_bytes()[:8192])
    await ann.press((await ann.memory("/forgetme")).buttons[0][0].action)
    assert not left.exists()


async def test_forgetme_deletes_a_backup_that_cannot_be_opened_instead_of_failing(runtime, llm, tmp_path, caplog):
    """A backup SQLite cannot open is no backup to restore, and may still hold the person's words:
    it goes, with a warning, and the person is forgotten all the same."""
    ann = Chat(runtime, user="ann", name="Ann", platform="telegram")
    await ann.say("my boat is called Quillowmere")
    await runtime.jobs.maintenance()
    broken = tmp_path / "backups" / "keepsake-20261101-000000.sqlite3"
    broken.write_bytes(b"not a database, but Quillowmere " * 512)
    done = await ann.press((await ann.memory("/forgetme")).buttons[0][0].action)
    assert "Everything stored about you is deleted" in done.text
    assert not broken.exists() and "could not be opened to forget a person in it" in caplog.text
    [kept] = (tmp_path / "backups").glob("keepsake-*.sqlite3")
    assert kept.read_bytes().count(b"Quillowmere") == 0
