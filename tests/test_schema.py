"""Each backend keeps its own migrations (its released history is never edited), so the table
definitions stand once per backend. What keeps them from drifting apart: after every migration,
both schemas hold the same tables with the same columns, but for what truly differs."""

from pathlib import Path

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from tests.postgres import fresh_schema_url

# What truly differs between the backends (storage/sqlite, storage/postgres).
SQLITE_ONLY = {
    "messages_fts", "messages_fts_config", "messages_fts_data", "messages_fts_docsize", "messages_fts_idx",
    "recall_backfill",  # full-text recall: FTS5 and the backfill of messages from before it
    "message_vectors",  # vectors: numpy over a table here; pgvector's table where the extension is
    "sqlite_sequence",  # SQLite's own AUTOINCREMENT counters
}
POSTGRES_ONLY = {"processes", "schema_migrations", "common_words"}  # liveness (advisory locks), the
# migrations applied, the words recall found common (SQLite's full-text index counts them cheaply)
POSTGRES_ONLY_COLUMNS = {"messages": {"search"}}  # full-text recall: each message's tsvector


async def _sqlite_schema(folder: Path) -> dict[str, set[str]]:
    store = await open_store("sqlite:///schema.sqlite3", CAPS, folder)
    try:
        tables = [row["name"] for row in await store.db.all("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: {row["name"] for row in await store.db.all(f"PRAGMA table_info({table})")} for table in tables}
    finally:
        await store.close()


async def _postgres_schema(folder: Path) -> dict[str, set[str]]:
    schemas = fresh_schema_url()
    store = await open_store(await anext(schemas), CAPS, folder)
    try:
        schema: dict[str, set[str]] = {}
        for row in await store.db.all("SELECT table_name, column_name FROM information_schema.columns "
                                      "WHERE table_schema = current_schema()"):
            schema.setdefault(row["table_name"], set()).add(row["column_name"])
        return schema
    finally:
        await store.close()
        await anext(schemas, None)


async def test_both_backends_migrate_to_the_same_tables_and_columns_but_recall_vectors_and_liveness(tmp_path):
    postgres = await _postgres_schema(tmp_path)
    sqlite = await _sqlite_schema(tmp_path)
    assert set(sqlite) - set(postgres) - SQLITE_ONLY == set()
    assert set(postgres) - set(sqlite) == POSTGRES_ONLY
    for table in set(sqlite) & set(postgres):
        assert postgres[table] - sqlite[table] == POSTGRES_ONLY_COLUMNS.get(table, set()), table
        assert sqlite[table] - postgres[table] == set(), table
