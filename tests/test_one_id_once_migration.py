"""SQLite migration 30 (ONE_ID_ONCE): persons, conversations, messages, turns and reminders are
made anew so that an id is never given twice. A database written before it keeps every row, every reference to them, its
full-text index and its cascades; from then on a deleted newest message's id is not given again.
(PostgreSQL's identity columns never gave one twice: nothing to migrate there.)"""

import logging
import sqlite3

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sqlite.migrations import MIGRATIONS, ONE_ID_ONCE
from tests.migrating import SQLITE_URL, opened_before


async def test_messages_and_turns_written_before_keep_their_rows_references_and_search(tmp_path, monkeypatch,
                                                                                       caplog):
    async with opened_before(SQLITE_URL, ONE_ID_ONCE, tmp_path, monkeypatch) as old:
        mira = await old.characters.ensure_character("Mira")
        ann = await old.people.person_for_identity("telegram", "501")
        chat = (await old.conversations.conversation("telegram", "501", None, mira, False)).id
        asked = await old.conversations.add_user_message(chat, ann, "Ann", "the lighthouse lamp is green", 6, "m1")
        turn = await old.turns.begin_turn(chat, ann, asked.id)
        reply = await old.turns.finish_turn(turn, asked, "Mira", "Green, like the harbour buoy.", 7, {"n": 1})
        await old.turns.shown(reply.id, ["r1", "r2"])  # a reply in two parts: its second in message_parts
        newest = await old.conversations.add_user_message(chat, ann, "Ann", "soon deleted", 2, "m2")
        await old.turns.begin_turn(chat, ann, newest.id)
        reminder = await old.reminders.add(ann, mira, chat, turn, 1_800_000_000.0, "UTC", "tea", "daily", 25)
    with caplog.at_level(logging.INFO, logger="storage.sqlite.database"):
        store = await open_store(SQLITE_URL, CAPS, tmp_path)
    assert "upgrading keepsake.sqlite3: its tables are copied anew once" in caplog.text
    try:
        assert [(m.id, m.content) for m in reversed(await store.conversations.recent_messages(chat, 10))] == [
            (asked.id, "the lighthouse lamp is green"), (reply.id, "Green, like the harbour buoy."),
            (newest.id, "soon deleted")]
        assert (await store.turns.turn(turn)).receipt == {"n": 1}
        assert await store.reminders.pending(ann) == [reminder]
        assert await store.people.person_of_identity("telegram", "501") == ann
        assert (await store.conversations.conversation("telegram", "501", None, mira, False)).id == chat
        assert (await store.conversations.message_by_platform_id(chat, "r2")).id == reply.id
        assert [m.id for m in await store.recall.search(chat, ["lighthouse"], newest.pos, 5, 200)] == [asked.id]
        assert await store.conversations.delete_platform_message(chat, "m2")  # its turn goes with it, as before
        again = await store.conversations.add_user_message(chat, ann, "Ann", "next", 1, "m3")
        assert again.id > newest.id
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "keepsake.sqlite3") as file:
        assert file.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
        assert file.execute("PRAGMA foreign_key_check").fetchall() == []
        assert file.execute("SELECT COUNT(*) FROM turns").fetchone() == (1,)  # the deleted message's went
        assert file.execute("SELECT COUNT(*) FROM sqlite_master WHERE sql LIKE '%messages_once%' "
                            "OR sql LIKE '%turns_once%'").fetchone() == (0,)


async def test_a_new_file_says_nothing_of_copying_tables(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="storage.sqlite.database"):
        store = await open_store("sqlite:///new.sqlite3", CAPS, tmp_path)
    await store.close()
    assert "copied anew" not in caplog.text

