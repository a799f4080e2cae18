"""One PostgreSQL database, opened for the store: an asyncpg pool, the schema to use, the
migrations, and this process's presence.

Transactions are short and never span a model call. Where a check must hold until its write
commits, the transaction locks the row the rule is about: the person (memory caps), the
conversation (a message's place, the start of a turn). Every process registers itself in
`processes` and holds a session advisory lock on its row for as long as it lives, on a
connection of its own: another process finds out that it is gone when that lock is free
(PostgreSQL lets it go the moment the connection drops).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import asyncpg

from storage.postgres.migrations import KEY_WORD_INDEX, MIGRATIONS, WORD_INDEX_KEYED
from storage.sql.database import Connection, Dialect

log = logging.getLogger(__name__)
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Advisory lock keys are (namespace, number), the namespace a hash of the schema's name, so
# deployments in different schemas of one database never share a lock.
MIGRATION_LOCK = 0  # number 0: migrating; process rows (ids from 1) are their presence locks


class Database:
    """The store's database (storage/sql/database.py) on PostgreSQL."""

    def __init__(self, dsn: str, schema: str | None, clock: Callable[[], float] = time.time):
        self.dialect = PostgresDialect()
        if schema is not None and not SCHEMA_NAME.match(schema):
            raise ValueError(f"schema {schema!r}: use lower-case letters, digits and _")
        self.dsn = dsn
        self.schema = schema
        self.clock = clock
        self.short = self  # short reads (storage/sql/database.py): a round trip each, as any other
        self.pool: asyncpg.Pool | None = None
        self._presence: asyncpg.Connection | None = None
        self.process_id: int | None = None
        self.namespace = 0  # of this schema's advisory locks

    async def open(self, pool_size: int = 10) -> None:
        settings = {"search_path": self.schema} if self.schema else {}
        first = await asyncpg.connect(self.dsn, server_settings=settings)
        try:
            self.namespace = await first.fetchval("SELECT hashtext(COALESCE($1, current_schema()))", self.schema)
            await self._migrate(first)
        finally:
            await first.close()
        self.pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=pool_size, server_settings=settings,
                                              reset=_nothing_to_reset)
        self._presence = await asyncpg.connect(self.dsn, server_settings=settings)
        self.process_id = await self._presence.fetchval(
            "INSERT INTO processes (host, pid, started_at) VALUES ($1, $2, $3) RETURNING id",
            socket.gethostname(), os.getpid(), self.clock())
        await self._presence.execute("SELECT pg_advisory_lock($1, $2)", self.namespace, self.process_id)

    async def _migrate(self, db: asyncpg.Connection) -> None:
        """Apply what is missing, each migration in its own transaction, under an advisory lock:
        processes starting together take turns, and the later ones find the work done."""
        await db.execute("SELECT pg_advisory_lock($1, $2)", self.namespace, MIGRATION_LOCK)
        try:
            if self.schema and not await db.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", self.schema):
                # only when missing: a role may own its schema without CREATE on the database
                await db.execute(f'CREATE SCHEMA "{self.schema}"')
            await db.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                             "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            applied = await db.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
            for number, script in enumerate(MIGRATIONS[applied:], start=applied + 1):
                async with db.transaction():
                    await db.execute(script)
                    await db.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                                     number, self.clock())
            if not await db.fetchval(WORD_INDEX_KEYED):
                await db.execute(KEY_WORD_INDEX)
            if not await db.fetchval(WORD_INDEX_KEYED):
                log.info("recall reads each word's hits in every conversation of this database, then keeps its own: "
                         "PostgreSQL's btree_gin extension (contrib) is not installed, and this role may not install "
                         "it (that takes CREATE on the database). Installed, the next start keys the index by "
                         "conversation")
        finally:
            await db.execute("SELECT pg_advisory_unlock($1, $2)", self.namespace, MIGRATION_LOCK)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        if self._presence is not None:
            await self._presence.close()  # our presence lock goes with it
        self.pool = self._presence = None

    async def process_alive(self, holder: str | None) -> bool:
        """Whether the process a holder names still holds its presence lock (a holder that is no
        process id, e.g. copied from an SQLite file, is gone)."""
        if not holder or not holder.isdigit():
            return False
        async with self.transaction() as tx:
            free = await tx.value("SELECT pg_try_advisory_xact_lock($1, $2)", self.namespace, int(holder))
        return not free

    @asynccontextmanager
    async def transaction(self, short: bool = False) -> AsyncIterator[Connection]:
        """One transaction on a pooled connection; rolled back on any error (`short` or not:
        each statement is a round trip to the server either way)."""
        assert self.pool is not None, "store is not open"
        async with self.pool.acquire() as connection:
            async with connection.transaction():
                yield _On(connection)

    async def execute(self, sql: str, *params: Any) -> int:
        """One statement, atomic on its own: how many rows it changed."""
        return await _On(self._pool()).execute(sql, *params)

    async def one(self, sql: str, *params: Any) -> asyncpg.Record | None:
        return await self._pool().fetchrow(sql, *params)

    async def value(self, sql: str, *params: Any) -> Any:
        return await self._pool().fetchval(sql, *params)

    async def all(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        return await self._pool().fetch(sql, *params)

    def _pool(self) -> asyncpg.Pool:
        assert self.pool is not None, "store is not open"
        return self.pool


class _On:
    """Statements on one connection (or the pool), in the store's interface."""

    def __init__(self, connection: asyncpg.Connection | asyncpg.Pool):
        self.connection = connection

    async def execute(self, sql: str, *params: Any) -> int:
        return changed(await self.connection.execute(sql, *params))

    async def one(self, sql: str, *params: Any) -> asyncpg.Record | None:
        return await self.connection.fetchrow(sql, *params)

    async def all(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        return await self.connection.fetch(sql, *params)

    async def value(self, sql: str, *params: Any) -> Any:
        return await self.connection.fetchval(sql, *params)


class PostgresDialect(Dialect):
    for_update = " FOR UPDATE"
    for_key_share = " FOR KEY SHARE"
    unique_violation = (asyncpg.UniqueViolationError,)
    deadlock = (asyncpg.DeadlockDetectedError,)

    def in_ids(self, number: int) -> str:
        return f"= ANY(${number}::bigint[])"

    def ids(self, values) -> list[int]:
        return list(values)

    async def serialize(self, tx: Connection, key: str) -> None:
        # A one-key advisory lock: never the same as the two-key (schema, number) locks above.
        await tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' ' || $1, 0))", key)


async def _nothing_to_reset(connection: asyncpg.Connection) -> None:
    """A pooled connection goes back as it is: the store never leaves session state on one (its
    locks are transaction locks), so asyncpg's reset (a round trip on every release) is skipped."""


def changed(status: str) -> int:
    """Rows a command changed, from its status ("DELETE 3", "INSERT 0 1")."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0
