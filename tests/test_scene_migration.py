"""SPEC 15: a database from before scenes, where two characters each had their own conversation
in one group, comes out of the migration with one scene per chat holding every message, in the
order they were written, once each; on SQLite and PostgreSQL."""

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sql.migrations import SCENES_JOIN
from tests.migrating import BACKENDS, empty_database, opened_before

MESSAGES = "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, " \
           "platform_message_id, created_at) VALUES ($1, $2, $3, $4, $5, $6, 3, $7, $8) RETURNING id"
TURNS = "INSERT INTO turns (conversation_id, person_id, user_message_id, reply_message_id, status, receipt, " \
        "created_at) VALUES ($1, 1, $2, $3, 'done', '{}', $4) RETURNING id"


async def written_before_scenes(db) -> dict[str, int]:
    """Mira and Aki each answered Ann in the group -100; Ann's last message reached both, and both
    answered it."""
    await db.execute("INSERT INTO persons (id, created_at) VALUES (1, 0)")
    await db.execute("INSERT INTO characters (id, name, created_at) VALUES (1, 'Mira', 0), (2, 'Aki', 0)")
    await db.execute("INSERT INTO conversations (id, platform, chat_id, thread_id, character_id, is_shared, created_at, "
                     "last_pos) VALUES (1, 'telegram', '-100', '', 1, true, 0, 4), (2, 'telegram', '-100', '', 2, "
                     "true, 0, 4), (3, 'telegram', '501', '', 1, false, 0, 2)")
    ids = {
        "hi mira": await db.value(MESSAGES, 1, 2, "user", 1, "Ann", "hi Mira, the goat escaped", "m10", 10.0),
        "mira's reply": await db.value(MESSAGES, 1, 3, "assistant", None, "Mira", "Oh no, the goat!", None, 14.0),
        "hi aki": await db.value(MESSAGES, 2, 2, "user", 1, "Ann", "hi Aki, seen a llama?", "m12", 12.0),
        "aki's reply": await db.value(MESSAGES, 2, 3, "assistant", None, "Aki", "A llama, at the harbour.", None, 13.0),
        "both": await db.value(MESSAGES, 1, 4, "user", 1, "Ann", "both of you, dinner?", "m30", 30.0),
        "both again": await db.value(MESSAGES, 2, 4, "user", 1, "Ann", "both of you, dinner?", "m30", 30.0),
        "mira on both": await db.value(MESSAGES, 1, 5, "assistant", None, "Mira", "Dinner, yes.", None, 31.0),
        "aki on both": await db.value(MESSAGES, 2, 5, "assistant", None, "Aki", "Fish again?", None, 32.0),
        "dm": await db.value(MESSAGES, 3, 2, "user", 1, "Ann", "just us", "m1", 5.0),
    }
    ids["mira's turn"] = await db.value(TURNS, 1, ids["hi mira"], ids["mira's reply"], 10.0)
    ids["aki's turn"] = await db.value(TURNS, 2, ids["both again"], None, 30.0)
    await db.execute("INSERT INTO summaries (conversation_id, generation, tier, content, tokens, first_pos, last_pos, "
                     "created_at) VALUES (1, 0, 'recent', 'Ann lost a goat.', 4, 2, 3, 0)")
    await db.execute("UPDATE conversations SET summarized_pos = 3 WHERE id = 1")
    return ids


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_migration_joins_a_chats_character_conversations_into_one_scene_keeping_every_message(
        backend, tmp_path, monkeypatch):
    async with empty_database(backend) as url:
        async with opened_before(url, SCENES_JOIN, tmp_path, monkeypatch) as old:
            ids = await written_before_scenes(old.db)
            if backend == "postgresql":  # pgvector's table, as PostgresVectors makes it (its vector column aside)
                await old.db.execute("CREATE TABLE message_vectors (message_id BIGINT PRIMARY KEY REFERENCES "
                                     "messages(id) ON DELETE CASCADE, conversation_id BIGINT NOT NULL, "
                                     "pos BIGINT NOT NULL, embedding REAL[])")
            await old.db.execute("INSERT INTO message_vectors (message_id, conversation_id, pos) VALUES ($1, 2, 2)"
                                 if backend == "postgresql" else
                                 "INSERT INTO message_vectors (message_id, conversation_id, pos, vector) "
                                 "VALUES ($1, 2, 2, x'00')", ids["hi aki"])
        store = await open_store(url, CAPS, tmp_path)
        try:
            scene = await store.conversations.conversation("telegram", "-100", None, 2, is_shared=True)
            assert scene.id == (await store.conversations.conversation("telegram", "-100", None, 1, is_shared=True)).id
            messages = list(reversed(await store.conversations.recent_messages(scene.id, 50)))
            assert [(m.speaker_name, m.content) for m in messages] == [
                ("Ann", "hi Mira, the goat escaped"),
                ("Mira", "Oh no, the goat!"),  # written at 14, yet right after the message it answers (10)
                ("Ann", "hi Aki, seen a llama?"), ("Aki", "A llama, at the harbour."),  # at 12 and 13
                ("Ann", "both of you, dinner?"),  # at 30, stored by both characters: kept once
                ("Mira", "Dinner, yes."), ("Aki", "Fish again?")]  # both answered it: the second follows in time
            assert sorted({m.pos for m in messages}) == [m.pos for m in messages]
            # a reply keeps the place right after the message it answers (recall takes them together)
            assert [m.pos % 2 for m in messages] == [0, 1, 0, 1, 0, 1, 0] and messages[1].pos == messages[0].pos + 1
            # the turn of the copy that went now answers the message that stayed, and names Aki
            aki_turn = await store.turns.turn(ids["aki's turn"])
            assert (aki_turn.conversation_id, aki_turn.user_message_id, aki_turn.character_id) == \
                (scene.id, ids["both"], 2)
            assert (await store.turns.turn(ids["mira's turn"])).character_id == 1
            # the summary is written again from every message of the scene
            assert await store.summaries.summaries(scene.id) == []
            # the words index follows the moved messages into the scene
            found = await store.recall.search(scene.id, ["llama"], messages[-1].pos + 1, 10, 10_000)
            assert [m.id for m in found] == [ids["hi aki"], ids["aki's reply"]]
            # so do the vectors (recall by meaning finds them in the scene, at their new place)
            moved = await store.db.one("SELECT conversation_id, pos FROM message_vectors WHERE message_id = $1",
                                       ids["hi aki"])
            assert (moved["conversation_id"], moved["pos"]) == (scene.id, messages[2].pos)
            # a one-to-one conversation is not a scene
            dm = await store.conversations.conversation("telegram", "501", None, 1, is_shared=False)
            assert [m.content for m in await store.conversations.recent_messages(dm.id, 50)] == ["just us"]
            # the next message takes a place after all of them
            later = await store.conversations.add_user_message(scene.id, 1, "Ann", "and dessert", 2, "m40")
            assert later.pos > messages[-1].pos
        finally:
            await store.close()
