"""#49 "Who said it, by id": a character's message names its character by id
(`messages.character_id`), on both backends; the rows stored before are filled in by the
migration — a reply or check-in from its turn, a greeting from the character of its name, else
from its conversation's character."""

import pytest

import storage.postgres.database as postgres_database
import storage.sqlite.database as sqlite_database
from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.postgres.migrations import MIGRATIONS as POSTGRES_MIGRATIONS
from storage.sqlite.migrations import MIGRATIONS as SQLITE_MIGRATIONS
from tests.postgres import fresh_schema_url

CHARACTER = "(SELECT id FROM characters WHERE name = '{}')"
MESSAGE = "(SELECT id FROM messages WHERE pos = {})"
OLD_ROWS = [  # as the version before wrote them: a scene where Mira greeted, Ann spoke, Aki replied
    "INSERT INTO persons (created_at) VALUES (0)",
    "INSERT INTO characters (name, created_at) VALUES ('Mira', 0), ('Aki', 0)",
    "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at, last_pos) "
    f"VALUES ('telegram', '-100', '', {CHARACTER.format('Mira')}, true, 0, 4)",
    "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, created_at) "
    "SELECT c.id, n.pos, n.role, CASE WHEN n.role = 'user' THEN (SELECT MIN(id) FROM persons) END, n.speaker, n.said, "
    "2, 0 FROM conversations c, (SELECT 1 AS pos, 'assistant' AS role, 'Mira' AS speaker, 'Welcome aboard.' AS said "
    "UNION ALL SELECT 2, 'user', 'Ann', 'hello Aki' UNION ALL SELECT 3, 'assistant', 'aki (the pilot)', 'Aye.' "
    "UNION ALL SELECT 4, 'assistant', 'Nobody we know', 'Hm.') n",
    "INSERT INTO turns (conversation_id, person_id, user_message_id, reply_message_id, status, created_at, "
    f"character_id) SELECT c.id, (SELECT MIN(id) FROM persons), {MESSAGE.format(2)}, {MESSAGE.format(3)}, 'done', 0, "
    f"{CHARACTER.format('Aki')} FROM conversations c",
]


@pytest.fixture(params=["sqlite", "postgresql"])
async def old_store_url(request, tmp_path, monkeypatch):
    """A database at the version before `messages.character_id`, holding OLD_ROWS."""
    if request.param == "sqlite":
        module, migrations, url = sqlite_database, SQLITE_MIGRATIONS, "sqlite:///keepsake.sqlite3"
    else:
        module, migrations = postgres_database, POSTGRES_MIGRATIONS
        schemas = fresh_schema_url()
        url = await anext(schemas)
    monkeypatch.setattr(module, "MIGRATIONS", migrations[:-1])
    old = await open_store(url, CAPS, tmp_path)
    for statement in OLD_ROWS:
        await old.db.execute(statement)
    await old.close()
    monkeypatch.setattr(module, "MIGRATIONS", migrations)
    yield url
    if request.param == "postgresql":
        await anext(schemas, None)


async def test_old_messages_are_filled_in_with_the_character_that_said_them(old_store_url, tmp_path):
    store = await open_store(old_store_url, CAPS, tmp_path)
    try:
        mira, aki = [await store.characters.ensure_character(name) for name in ("Mira", "Aki")]
        scene = await store.db.value("SELECT id FROM conversations")
        ann = await store.db.value("SELECT id FROM persons")
        said = {m.pos: m.character_id for m in await store.conversations.recent_messages(scene, 10)}
        assert said[1] == mira  # a greeting: the character of that name
        assert said[2] is None  # a person's message
        assert said[3] == aki  # a reply: its turn's character, whatever name it showed
        assert said[4] == mira  # no turn, no such name: the conversation's character
        asked = await store.conversations.add_user_message(scene, ann, "Ann", "and now?", 2, None)
        turn = await store.turns.begin_turn(scene, ann, asked.id)
        reply = await store.turns.finish_turn(turn, asked, "Mira", "Now, tea.", 3, {})
        assert reply.character_id == mira  # new ones are written with it
    finally:
        await store.close()
