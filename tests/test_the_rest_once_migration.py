"""SQLite migration 32 (THE_REST_ONCE): characters, summary entries and memory changes are made
anew so that an id is never given twice. A database written before it keeps every row and every
reference to them; from then on a removed newest character's id is not given again.
(PostgreSQL's identity columns never gave one twice: nothing to migrate there.)"""

import sqlite3

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sqlite.migrations import MIGRATIONS, THE_REST_ONCE
from tests.migrating import SQLITE_URL, opened_before


async def test_characters_summaries_and_changes_written_before_keep_their_rows_and_references(tmp_path, monkeypatch):
    async with opened_before(SQLITE_URL, THE_REST_ONCE, tmp_path, monkeypatch) as old:
        mira = await old.characters.ensure_character("Mira")
        noor = await old.characters.ensure_character("Noor")
        ann = await old.people.person_for_identity("telegram", "501")
        chat = (await old.conversations.conversation("telegram", "501", None, noor, False)).id
        entry = await old.summaries.write_summary(chat, 0, "recent", "- Ann keeps bees", 5, 2, 10, [], covered_pos=10)
        saved = await old.memories.add_memory(ann, mira, "character", "Ann keeps bees", 4, False, "person")
        [change] = await old.memories.history(ann, 0)
    store = await open_store(SQLITE_URL, CAPS, tmp_path)
    try:
        assert (await store.conversations.conversation_by_id(chat)).character_id == noor
        assert [(s.id, s.content) for s in await store.summaries.summaries(chat)] == [(entry.id, "- Ann keeps bees")]
        assert await store.summaries.edit_summary(chat, entry.id, "- Ann keeps two hives", 6)
        undone = await store.memories.undo_change(ann, change.id, 0)
        assert undone.action == "delete" and undone.before.id == saved.id
        assert await store.characters.remove_character("Noor") == 0  # its conversation goes with it, as before
        assert await store.conversations.conversation_by_id(chat) is None
        assert await store.characters.ensure_character("Sol") > noor > mira
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "keepsake.sqlite3") as file:
        assert file.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
        assert file.execute("PRAGMA foreign_key_check").fetchall() == []
        assert file.execute("SELECT COUNT(*) FROM sqlite_master WHERE instr(sql, '_once') > 0").fetchone() == (0,)
