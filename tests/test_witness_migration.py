"""SPEC 22, old scenes keep working: in a database from before witnesses, every message of a scene
counts, after the migration, as witnessed by the characters of that conversation — the one its
row names and every one that spoke there — all of them present; a character that never spoke
there witnessed none of it; a one-to-one conversation is no scene. On SQLite and PostgreSQL."""

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sql.migrations import WITNESSES
from tests.migrating import BACKENDS, empty_database, opened_before


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_scene_from_before_witnesses_is_witnessed_whole_by_the_characters_that_were_in_it(
        backend, tmp_path, monkeypatch):
    async with empty_database(backend) as url:
        async with opened_before(url, WITNESSES, tmp_path, monkeypatch) as old:  # written as that version wrote, in its own SQL
            mira, aki, ren = [await old.characters.ensure_character(name) for name in ("Mira", "Aki", "Ren")]
            ann = await old.people.person_for_identity("telegram", "501")
            scene = (await old.conversations.conversation("telegram", "-100", None, mira, True)).id
            dm = (await old.conversations.conversation("telegram", "501", None, mira, False)).id
            for conversation, pos, role, person, speaker, text, character in (
                    (scene, 2, "user", ann, "Ann", "the key is under the heron stone", None),
                    (scene, 3, "assistant", None, "Aki", "Noted, Ann.", aki),
                    (dm, 2, "user", ann, "Ann", "just us", None)):
                await old.db.execute("INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, "
                                     "tokens, created_at, character_id) VALUES ($1, $2, $3, $4, $5, $6, 3, 0, $7)",
                                     conversation, pos, role, person, speaker, text, character)
                await old.db.execute("UPDATE conversations SET last_pos = $1 WHERE id = $2", pos, conversation)
        store = await open_store(url, CAPS, tmp_path)
        try:
            assert await store.presence.present(scene) == sorted([mira, aki])
            for character in (mira, aki):  # Mira's conversation; Aki spoke there
                assert not await store.presence.missed_any(scene, character)
                assert await store.presence.witnessed(scene, character) == (2, 2)
            assert await store.presence.missed_any(scene, ren)  # never there
            assert await store.conversations.recent_messages(scene, 10, seen_by=ren) == []
            assert await store.presence.present(dm) == []
            assert [m.content for m in await store.conversations.recent_messages(dm, 10)] == ["just us"]
            later = await store.conversations.add_user_message(scene, ann, "Ann", "and now?", 2, "m3")
            assert [m.id for m in await store.conversations.recent_messages(scene, 1, seen_by=aki)] == [later.id]
        finally:
            await store.close()
