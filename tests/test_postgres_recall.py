"""Recall on PostgreSQL reads what the one conversation holds (#67: a turn reads only what it
needs): a word's hits in everyone else's conversations are not read, where the server has the
btree_gin extension (storage/postgres/migrations.py, KEY_WORD_INDEX); where it has not, recall
works as before and the start says so."""

import asyncio
import json
import logging
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from tests.postgres import fresh_schema_url, server_url

OURS, OTHERS = 3, 77  # messages with the word in the conversation searched, and without it there
THEIRS = 100  # other conversations, of 40 messages each, 4 of them with the word (400 in all)


async def conversations_with_the_word(store) -> int:
    """A database of 100 other people's conversations, with 400 messages about the lighthouse
    among their 4,000, and ours: 80 messages, 3 of them about it."""
    mira = await store.characters.ensure_character("Mira")
    ann = await store.people.person_for_identity("telegram", "501")
    await store.db.execute(  # theirs, written at once (what they say is not what is tested)
        "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at) "
        "SELECT 'telegram', 'other-' || g, '', $1, false, 0 FROM generate_series(1, $2) g", mira, THEIRS)
    await store.db.execute(
        "INSERT INTO messages (conversation_id, pos, role, speaker_name, content, tokens, created_at) "
        "SELECT c.id, 2 * g, 'user', 'Bob', CASE WHEN g % 10 = 0 THEN 'the lighthouse again' "
        "ELSE 'the harbour market again' END, 4, 0 FROM conversations c, generate_series(1, 40) g "
        "WHERE c.chat_id LIKE 'other-%'")
    ours = (await store.conversations.conversation("telegram", "501", None, mira, False)).id
    for n in range(OURS):
        await store.conversations.add_user_message(ours, ann, "Ann", f"I saw the lighthouse from the ferry {n}", 8,
                                                   None)
    for n in range(OTHERS):
        await store.conversations.add_user_message(ours, ann, "Ann", f"and the harbour market, {n}", 6, None)
    await store.db.execute("ANALYZE messages")
    return ours


def index_rows(plan: dict, index: str) -> int:
    """The rows every scan of `index` in an explained plan read."""
    own = plan["Actual Rows"] * plan.get("Actual Loops", 1) if plan.get("Index Name") == index else 0
    return own + sum(index_rows(child, index) for child in plan.get("Plans", []))


async def test_recall_on_postgresql_reads_one_conversations_hits_of_a_word_not_everyones():
    """The statements recall sends, explained with their own arguments: the words' index gives
    up the searched conversation's 3 hits of "lighthouse", never the others' 400."""
    schemas = fresh_schema_url()
    url = await anext(schemas)
    store = await open_store(url, CAPS)
    try:
        if not await store.db.value("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'btree_gin')"):
            pytest.skip("this PostgreSQL server has no btree_gin (its contrib is not installed)")
        ours = await conversations_with_the_word(store)
        sent = []
        for name in ("one", "all"):  # what recall asks of the database, noted as it asks it
            def noting(method):
                async def noted(sql, *args):
                    sent.append((sql, args))
                    return await method(sql, *args)
                return noted
            setattr(store.db, name, noting(getattr(store.db, name)))
        found = await store.recall.search(ours, ["lighthouse"], before_pos=100, limit=8, common_above=100)
        assert len(found) == OURS
        read = 0
        async with store.db.pool.acquire() as connection:
            for sql, args in sent:
                (plan,) = json.loads(await connection.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args))
                read += index_rows(plan["Plan"], "messages_search")
        assert len(sent) == 2 and read <= 2 * OURS  # the count, then the search: each the 3 hits at most
    finally:
        await store.close()
        await anext(schemas, None)


async def test_without_btree_gin_recall_reads_every_conversations_hits_as_before_and_the_start_says_so(caplog):
    """A database without the extension and a role that may not install it (no CREATE on the
    database: it was given its schema and nothing more): the store opens, recall finds the same
    messages, and one line says what the operator may do. The words' index, gone (as when the
    extension is dropped with everything that used it), is made again at the next start."""
    admin = await asyncpg.connect(server_url())
    nonce = uuid.uuid4().hex[:8]
    role, database = f"keepsake_plain_{nonce}", f"keepsake_nobtree_{nonce}"
    await admin.execute(f'CREATE ROLE "{role}" LOGIN')
    await admin.execute(f'CREATE DATABASE "{database}"')
    parts = urlsplit(server_url())
    owner = await asyncpg.connect(urlunsplit(parts._replace(path=f"/{database}")))
    await owner.execute(f'CREATE SCHEMA keepsake AUTHORIZATION "{role}"')
    await owner.close()
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}", path=f"/{database}",
                                    query="schema=keepsake"))
    try:
        with caplog.at_level(logging.INFO, "storage.postgres.database"):
            store = await open_store(url, CAPS)
        try:
            assert "btree_gin" in caplog.text
            assert not await store.db.value("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin')")
            ours = await conversations_with_the_word(store)
            found = await store.recall.search(ours, ["lighthouse"], before_pos=100, limit=8, common_above=100)
            assert [m.content for m in found] == [f"I saw the lighthouse from the ferry {n}" for n in range(OURS)]
        finally:
            await store.close()
        owner = await asyncpg.connect(urlunsplit(parts._replace(path=f"/{database}")))
        await owner.execute("DROP INDEX keepsake.messages_search")  # as an extension dropped with what used it
        await owner.close()
        store = await open_store(url, CAPS)  # the next start makes it again
        try:
            assert await store.db.value("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_search'") == (
                "CREATE INDEX messages_search ON keepsake.messages USING gin (search) WITH (fastupdate=off)")
        finally:
            await store.close()
    finally:
        await admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE "{role}"')
        await admin.close()


async def test_deployments_starting_together_on_a_server_without_btree_gin_all_start_with_the_keyed_index():
    """The extension is the database's, not a schema's: deployments (each its own schema) starting
    at the same moment on a database without it each find it missing. Installing it takes turns,
    so every one of them starts, with the index keyed by conversation."""
    admin = await asyncpg.connect(server_url())
    database = f"keepsake_together_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{database}"')
    parts = urlsplit(server_url())
    try:
        if not await admin.fetchval("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'btree_gin')"):
            pytest.skip("this PostgreSQL server has no btree_gin (its contrib is not installed)")
        urls = [urlunsplit(parts._replace(path=f"/{database}", query=f"schema=deployment_{n}")) for n in range(6)]
        started = await asyncio.gather(*(open_store(url, CAPS) for url in urls), return_exceptions=True)
        try:
            assert [repr(s) for s in started if isinstance(s, BaseException)] == []
            for store in started:
                assert "conversation_id" in await store.db.value(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'messages_search'")
        finally:
            for store in started:
                if not isinstance(store, BaseException):
                    await store.close()
    finally:
        await admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
        await admin.close()
