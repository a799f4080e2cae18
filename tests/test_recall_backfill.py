"""Messages stored before the recall index existed are indexed by a resumable backfill, with
progress in the log; until then their edits and deletions leave the index alone."""

import logging
import sqlite3
from contextlib import closing

import storage.sqlite.database as sqlite_database
from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sqlite.migrations import MIGRATIONS
from tests.postgres import fresh_schema_url


async def an_old_conversation(store, count: int):
    mira = await store.characters.ensure_character("Mira")
    ann = await store.people.person_for_identity("telegram", "501")
    chat = (await store.conversations.conversation("telegram", "501", None, mira, False)).id
    rows = [await store.conversations.add_user_message(chat, ann, "Ann", f"the goat number {n} escaped", 6, f"m{n}")
            for n in range(count)]
    return chat, rows


async def test_an_sqlite_file_from_before_recall_is_indexed_in_batches_and_stays_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_database, "MIGRATIONS", MIGRATIONS[:8])  # the version before recall
    await (await open_store("sqlite:///keepsake.sqlite3", CAPS, tmp_path)).close()
    with closing(sqlite3.connect(tmp_path / "keepsake.sqlite3")) as old:  # written as that version wrote
        old.execute("INSERT INTO persons (id, created_at) VALUES (1, 0)")
        old.execute("INSERT INTO characters (id, name, created_at) VALUES (1, 'Mira', 0)")
        old.execute("INSERT INTO conversations (id, platform, chat_id, thread_id, character_id, is_shared, "
                    "created_at) VALUES (1, 'telegram', '501', '', 1, 0, 0)")
        old.executemany("INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
                        "platform_message_id, created_at) VALUES (1, ?, 'user', 1, 'Ann', ?, 6, ?, 0)",
                        [(2 * n + 2, f"the goat number {n} escaped", f"m{n}") for n in range(5_000)])
        old.commit()
    chat = 1
    monkeypatch.setattr(sqlite_database, "MIGRATIONS", MIGRATIONS)

    store = await open_store("sqlite:///keepsake.sqlite3", CAPS, tmp_path)
    try:
        now = await store.conversations.add_user_message(chat, None, "Ann", "a goat again", 3, None)
        assert [m.id for m in await store.recall.search(chat, ["goat"], now.pos + 1, 10, 10_000)] == [now.id]
        # Edits and deletions before the backfill reach them are fine.
        await store.conversations.edit_platform_message(chat, "m1", "the sheep escaped", 3)
        await store.conversations.delete_platform_message(chat, "m2")
        assert await store.recall.index_older_messages(2_000) == 2_999  # m2 is gone: 4,999 - 2,000
        assert await store.recall.index_older_messages(2_000) == 999
        assert await store.recall.index_older_messages(2_000) == 0
        found = await store.recall.search(chat, ["goat", "sheep"], now.pos, 10_000, 10_000)
        assert len(found) == 4_999 and "the sheep escaped" in {m.content for m in found}
    finally:
        await store.close()
    with closing(sqlite3.connect(tmp_path / "keepsake.sqlite3")) as db:
        db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")  # raises if corrupt


async def test_the_backfill_job_logs_its_progress_and_runs_once_everything_is_indexed(runtime, caplog,
                                                                                     monkeypatch):
    monkeypatch.setattr("bot.scheduler.BACKFILL_BATCH", 2)
    store = runtime.store
    chat, rows = await an_old_conversation(store, 5)
    async with store.db.transaction() as tx:  # as if they predated the index
        await tx.execute("INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')")
        await tx.execute("UPDATE recall_backfill SET older_than_id = $1, done_up_to_id = 0", rows[-1].id + 1)
    with caplog.at_level(logging.INFO, logger="bot.scheduler"):
        await runtime.jobs.index_older_messages()
    assert "recall: indexed older messages, 3 to go" in caplog.text
    assert "recall: every older message is indexed" in caplog.text
    assert len(await store.recall.search(chat, ["goat"], 10**9, 10, 100)) == 5


async def test_a_postgresql_database_from_before_recall_is_indexed_in_batches(tmp_path):
    schemas = fresh_schema_url()
    url = await anext(schemas)
    store = await open_store(url, CAPS, tmp_path)
    try:
        chat, rows = await an_old_conversation(store, 50)
        await store.db.execute("UPDATE messages SET search = NULL")  # as if they predated the index
        assert await store.recall.search(chat, ["goat"], 10**9, 100, 100) == []
        assert await store.recall.index_older_messages(30) == 20
        assert await store.recall.index_older_messages(30) == 0
        assert len(await store.recall.search(chat, ["goat"], 10**9, 100, 100)) == 50
    finally:
        await store.close()
        await anext(schemas, None)
