"""SPEC 9, a turn cut off by a crash is answered again before what came after it: a turn left
interrupted by a version from before migration 28 (interrupted turns kept with their
conversation) still holds its conversation's line after the upgrade. On SQLite and PostgreSQL."""

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sql.migrations import INTERRUPTED_BY_CONVERSATION
from tests.migrating import BACKENDS, empty_database, opened_before


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_turn_interrupted_before_the_upgrade_still_holds_its_conversations_line(
        backend, tmp_path, monkeypatch):
    async with empty_database(backend) as url:
        async with opened_before(url, INTERRUPTED_BY_CONVERSATION, tmp_path, monkeypatch) as old:
            mira = await old.characters.ensure_character("Mira")
            ann = await old.people.person_for_identity("telegram", "501")
            chat = (await old.conversations.conversation("telegram", "501", None, mira, False)).id
            other = (await old.conversations.conversation("telegram", "502", None, mira, False)).id
            asked = await old.conversations.add_user_message(chat, ann, "Ann", "are you there?", 3, "m1")
            cut_off = await old.db.value(  # as that version left a turn cut off, in its own SQL
                "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder, character_id) "
                "VALUES ($1, $2, $3, 'failed', $4, 'gone', $5) RETURNING id", chat, ann, asked.id, old.db.clock(), mira)
            await old.db.execute("INSERT INTO interrupted_turns (turn_id) VALUES ($1)", cut_off)
        store = await open_store(url, CAPS, tmp_path)
        try:
            later = await store.turns.store_and_queue(chat, ann, "Ann", "hello?", 2, "m2", None)
            assert later.turn_id is None and later.ticket is not None  # waits for the message cut off before it
            elsewhere = await store.turns.store_and_queue(other, ann, "Ann", "hi", 1, "m3", None)
            assert elsewhere.turn_id is not None  # another conversation's line is free
            [waiting] = await store.turns.interrupted_turns("telegram", mira)
            assert (waiting.turn.id, waiting.user_message.content) == (cut_off, "are you there?")
        finally:
            await store.close()
