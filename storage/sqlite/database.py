"""One SQLite file, opened for the store: WAL, foreign keys, a busy timeout, migrations.

Writes go through one connection, one transaction at a time (`BEGIN IMMEDIATE`, which SQLite
also serializes across processes), so every multi-row change is atomic and a check-then-write (a
memory cap) cannot race. Reads use a second connection, which in WAL mode sees every committed
write (of any process) and never waits for a writer.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiosqlite

from storage.sqlite.migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 10_000


class Database:
    def __init__(self, path: Path, options: dict[str, str] | None = None, clock: Callable[[], float] = time.time):
        self.path = path
        self.options = options or {}  # SQLite URI parameters, e.g. mode=ro
        self.clock = clock
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()  # one transaction at a time on the one writer connection

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = await self._connect()
        if self.options.get("mode") != "ro":
            await self._use_wal()
            await self._migrate()
        self._reader = await self._connect()

    async def _use_wal(self) -> None:
        """Switch a new file to WAL. The switch takes the file for itself and does not wait
        behind the busy timeout: a process starting at the same moment retries until it is done."""
        assert self._writer is not None
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                await self._writer.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as busy:
                if "locked" not in str(busy) or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.02)

    async def _connect(self) -> aiosqlite.Connection:
        query = "&".join(f"{k}={v}" for k, v in self.options.items())
        target = f"file:{self.path}{'?' + query if query else ''}"
        db = await aiosqlite.connect(target, uri=True, isolation_level=None)
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA foreign_keys = ON")
        await db.execute("PRAGMA synchronous = NORMAL")
        return db

    async def _migrate(self) -> None:
        db = self._writer
        assert db is not None
        await db.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then see it done
        try:
            (version,) = await (await db.execute("PRAGMA user_version")).fetchone()
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in _statements(script):
                    await db.execute(statement)
                await db.execute(f"PRAGMA user_version = {number}")
        except BaseException:
            await db.execute("ROLLBACK")
            raise
        await db.execute("COMMIT")

    async def close(self) -> None:
        for db in (self._reader, self._writer):
            if db is not None:
                await db.close()
        self._reader = self._writer = None

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction; rolled back on any error."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            db = self._writer
            await db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            await db.execute("COMMIT")

    async def execute(self, sql: str, params: tuple = ()) -> aiosqlite.Cursor:
        """One write statement, atomic on its own."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            return await self._writer.execute(sql, params)

    async def returning(self, sql: str, params: tuple = ()) -> Any:
        """One write statement with a RETURNING clause: its first row (None if it wrote none)."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            rows = await self._writer.execute_fetchall(sql, params)
        return rows[0] if rows else None

    async def one(self, sql: str, params: tuple = ()) -> Any:
        assert self._reader is not None, "store is not open"
        rows = await self._reader.execute_fetchall(sql, params)
        return rows[0] if rows else None

    async def all(self, sql: str, params: tuple = ()) -> list[Any]:
        assert self._reader is not None, "store is not open"
        return list(await self._reader.execute_fetchall(sql, params))

    @property
    def reader(self) -> aiosqlite.Connection:
        assert self._reader is not None, "store is not open"
        return self._reader

    @asynccontextmanager
    async def locked_writer(self) -> AsyncIterator[aiosqlite.Connection]:
        """The writer connection outside a transaction (a WAL checkpoint)."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            yield self._writer


async def fetch_one(db: aiosqlite.Connection, sql: str, params: tuple = ()) -> Any:
    rows = await db.execute_fetchall(sql, params)
    return rows[0] if rows else None


async def fetch_all(db: aiosqlite.Connection, sql: str, params: tuple = ()) -> list[Any]:
    return list(await db.execute_fetchall(sql, params))


def _statements(script: str) -> list[str]:
    """A migration script's statements, split where SQLite says a statement is complete (so a
    trigger's body, whose statements end in `;` too, stays whole)."""
    statements, current = [], ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n;"):
                statements.append(current.strip())
            current = ""
    return statements
