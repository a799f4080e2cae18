"""The house IV's migrations (#49), on both backends, each from rows the version before wrote:
- "Who said it, by id": a character's message names its character by id (`messages.character_id`);
  old rows are filled in — a reply or check-in from its turn, a greeting from the character of
  its name, else from its conversation's character.
- "Spoken, as a column": a voice note is `messages.spoken`, no longer a "🎤 " before its text;
  old rows lose the mark and read as before."""

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sql.migrations import SPOKEN_COLUMN, WHO_SAID_IT
from tests.migrating import BACKENDS, empty_database, opened_before

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


SPOKEN_ROWS = OLD_ROWS + [  # and a voice note Ann sent, marked as that version marked it
    "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, created_at) "
    "SELECT c.id, 6, 'user', (SELECT MIN(id) FROM persons), 'Ann', '🎤 the ferry leaves at noon', 8, 0 "
    "FROM conversations c",
]


@pytest.fixture(params=BACKENDS)
async def backend(request):
    """A store URL with nothing in it, on each backend."""
    async with empty_database(request.param) as url:
        yield url


async def stored_before(url: str, migration: str, rows: list[str], tmp_path, monkeypatch) -> str:
    """The database at `url` at the version before `migration`, holding `rows`; its URL."""
    async with opened_before(url, migration, tmp_path, monkeypatch) as old:
        for statement in rows:
            await old.db.execute(statement)
    return url


async def test_old_messages_are_filled_in_with_the_character_that_said_them(backend, tmp_path, monkeypatch):
    store = await open_store(await stored_before(backend, WHO_SAID_IT, OLD_ROWS, tmp_path, monkeypatch),
                             CAPS, tmp_path)
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


async def test_an_old_voice_note_loses_its_mark_and_is_stored_as_spoken(backend, tmp_path, monkeypatch):
    store = await open_store(await stored_before(backend, SPOKEN_COLUMN, SPOKEN_ROWS, tmp_path, monkeypatch),
                             CAPS, tmp_path)
    try:
        scene = await store.db.value("SELECT id FROM conversations")
        said = {m.pos: m for m in await store.conversations.recent_messages(scene, 10)}
        assert (said[6].content, said[6].spoken) == ("the ferry leaves at noon", True)
        assert said[6].said == "🎤 the ferry leaves at noon"  # read as before
        assert (said[2].content, said[2].spoken, said[2].said) == ("hello Aki", False, "hello Aki")
        assert not await store.db.value("SELECT COUNT(*) FROM messages WHERE content LIKE '🎤%'")
        # the full-text index follows the text
        assert [m.pos for m in await store.recall.search(scene, ["ferry"], 7, 5, common_above=100)] == [6]
    finally:
        await store.close()
