"""PostgreSQL for tests: KEEPSAKE_TEST_POSTGRES_URL names the server (CI sets it, and `.ci/run`
fails when the server does not answer). Each test gets a schema of its own, so test runs (and
tests) never see each other's rows: a new one, dropped after it (`fresh_schema_url`), or, for
the fixtures most tests share, one an earlier test of this run left, every row deleted and every
id counter back at 1 (`emptied_schema_url`), which costs a tenth of migrating a new one. Without
the variable, PostgreSQL tests skip with one line saying so.

Semantic recall on PostgreSQL needs the pgvector extension, which the CI server lacks:
KEEPSAKE_TEST_PGVECTOR_URL names a server that has it (`.ci/run` starts a private one where it
can: .ci/pgvector_server.sh); its tests skip, saying so, where there is none."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import AsyncIterator

import asyncpg
import pytest

from bench.common import drop_schema, schema_url, throwaway_schema

ENV = "KEEPSAKE_TEST_POSTGRES_URL"
PGVECTOR_ENV = "KEEPSAKE_TEST_PGVECTOR_URL"
SKIP_REASONS = {
    ENV: f"PostgreSQL tests need {ENV} (e.g. postgresql://postgres@127.0.0.1:5432/test)",
    PGVECTOR_ENV: f"pgvector tests need {PGVECTOR_ENV}: a PostgreSQL server with the pgvector extension",
}


def server_url(env: str = ENV) -> str:
    url = os.environ.get(env)
    if not url:
        pytest.skip(SKIP_REASONS[env])
    return url


async def fresh_schema_url(env: str = ENV) -> AsyncIterator[str]:
    """A store URL on the test server (or the pgvector one) with a new, empty schema; the schema
    is dropped after."""
    async with throwaway_schema(server_url(env)) as url:
        yield url


_emptied: list[str] = []  # schemas of this run that a test used, emptied for the next

# Every row of the schema deleted (foreign keys and triggers not fired: everything goes), every id
# counter back at 1; the migrations applied stay, so a store opened on it finds every table.
EMPTY = """
DO $$ DECLARE t record; BEGIN
    SET LOCAL session_replication_role = replica;
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'schema_migrations'
    LOOP EXECUTE format('DELETE FROM %I', t.tablename); END LOOP;
    PERFORM setval(format('%I', sequencename), 1, false) FROM pg_sequences WHERE schemaname = current_schema();
END $$"""
# A lock of the schema's advisory namespace (storage/postgres/database.py): a process still on it.
HELD = ("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
        "AND classid = CAST(CAST(hashtext($1) AS BIGINT) & 4294967295 AS oid))")


async def emptied_schema_url() -> AsyncIterator[str]:
    """A store URL on the test server with a schema of its own for one test, holding no row: one
    an earlier test used and emptied, else a new one. After the test it is emptied for the next,
    or dropped when anything still holds it."""
    url = server_url()
    schema = _emptied.pop() if _emptied else f"keepsake_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield schema_url(url, schema)
    connection = await asyncpg.connect(url, server_settings={"search_path": schema})
    try:
        if await connection.fetchval(HELD, schema):
            await drop_schema(connection, schema)
        else:
            await connection.execute(EMPTY)
            _emptied.append(schema)
    finally:
        await connection.close()


def drop_emptied() -> None:
    """At the end of the run: the schemas kept for reuse are dropped."""
    async def drop() -> None:
        connection = await asyncpg.connect(os.environ[ENV])
        try:
            for schema in _emptied:
                await drop_schema(connection, schema)
        finally:
            await connection.close()
    if _emptied:
        asyncio.run(drop())
        _emptied.clear()
