"""The foundation of the SQLite store: connections, transactions, read caches, row helpers.

Writes go through one connection, one transaction at a time (`BEGIN IMMEDIATE`), so every
multi-row change is atomic and a check-then-write (a memory cap) cannot race. Reads use a second
connection, which in WAL mode sees only committed data and never waits for the writer. Every
call to aiosqlite is a round-trip to its thread, so the helpers here keep those few.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiosqlite

from storage.base import GLOBAL, ConversationRow, MemoryRow, MessageRow, SummaryRow, TurnRow
from storage.migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 10_000
MEMORY_COLUMNS = "id, person_id, character_id, content, tokens, pinned, source, created_at, updated_at"
MESSAGE_COLUMNS = (
    "id, conversation_id, pos, role, person_id, speaker_name, content, tokens, "
    "platform_message_id, created_at"
)
TURN_COLUMNS = "id, conversation_id, person_id, user_message_id, reply_message_id, status, receipt, created_at"
SUMMARY_COLUMNS = "id, conversation_id, tier, content, tokens, first_pos, last_pos, edited"
REBUILD_COLUMNS = "conversation_id, person_id, generation, progress_pos, status, error"
TIER_RANK = "CASE tier WHEN 'long_term' THEN 0 WHEN 'merged' THEN 1 ELSE 2 END"


def _memory(row: Any) -> MemoryRow:
    return MemoryRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6], row[7], row[8])


def _message(row: Any) -> MessageRow:
    return MessageRow(*row)


def _turn(row: Any) -> TurnRow:
    receipt = json.loads(row[6]) if row[6] else None
    return TurnRow(row[0], row[1], row[2], row[3], row[4], row[5], receipt, row[7])


class _ReadCache:
    """Cached reads of what every turn needs and rarely changes: saved memories, summaries, the
    Learn-from-chat switch. Each write transaction names what it touches and empties that part
    when it ends; a read stores its result only if no such write ended while it ran."""

    KINDS = ("memories", "summaries", "learning")

    def __init__(self) -> None:
        self.versions = dict.fromkeys(self.KINDS, 0)
        self.entries: dict[str, dict[Any, Any]] = {kind: {} for kind in self.KINDS}

    def invalidate(self, kinds: tuple[str, ...]) -> None:
        for kind in kinds:
            self.versions[kind] += 1
            self.entries[kind].clear()

    async def read(self, kind: str, key: Any, load) -> Any:
        if key in self.entries[kind]:
            return self.entries[kind][key]
        version = self.versions[kind]
        value = await load()
        if self.versions[kind] == version:
            self.entries[kind][key] = value
        return value


ALL = _ReadCache.KINDS


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"CAST(X'{value.encode('utf-8').hex()}' AS TEXT)"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def _inline(sql: str, params: tuple) -> str:
    """`sql` with each ? replaced by its parameter as a literal (see SQLiteBase._script)."""
    pieces = sql.split("?")
    assert len(pieces) == len(params) + 1, "one parameter per placeholder"
    return pieces[0] + "".join(_literal(v) + piece for v, piece in zip(params, pieces[1:]))


def _summary(row: Any) -> SummaryRow:
    return SummaryRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]))


def _scope_character(scope: str, character_id: int) -> int | None:
    return None if scope == GLOBAL else character_id



class SQLiteBase:
    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        # Lookups every turn makes, cached: only this store's own writes change them
        # (link merges identities, forgetting or removing a character drops conversations).
        self._persons: dict[tuple[str, str], int] = {}
        self._conversations: dict[tuple, ConversationRow] = {}
        self._cache = _ReadCache()

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = await self._connect()
        await self._writer.execute("PRAGMA journal_mode = WAL")
        await self._migrate()
        self._reader = await self._connect()

    async def _connect(self) -> aiosqlite.Connection:
        db = await aiosqlite.connect(self.path, isolation_level=None)
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA foreign_keys = ON")
        await db.execute("PRAGMA synchronous = NORMAL")
        return db

    async def _migrate(self) -> None:
        db = self._writer
        assert db is not None
        (version,) = await (await db.execute("PRAGMA user_version")).fetchone()
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            # executescript commits on its own, so the version bump is part of the script.
            await db.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")

    async def close(self) -> None:
        for db in (self._reader, self._writer):
            if db is not None:
                await db.close()
        self._reader = self._writer = None

    @asynccontextmanager
    async def _write(self, *touches: str) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction at a time; rolled back on any error. `touches` names the
        cached reads it changes ("memories", "summaries", "learning")."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            db = self._writer
            await db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            finally:
                self._cache.invalidate(touches)
            await db.execute("COMMIT")
            self._cache.invalidate(touches)

    # Every call to aiosqlite is a round-trip to its thread, so reads fetch in one
    # (execute_fetchall) and single-statement writes skip BEGIN/COMMIT (each is atomic anyway).
    async def _one(self, sql: str, params: tuple = ()) -> Any:
        assert self._reader is not None, "store is not open"
        rows = await self._reader.execute_fetchall(sql, params)
        return rows[0] if rows else None

    async def _all(self, sql: str, params: tuple = ()) -> list[Any]:
        assert self._reader is not None, "store is not open"
        return list(await self._reader.execute_fetchall(sql, params))

    @staticmethod
    async def _fetch_one(db: aiosqlite.Connection, sql: str, params: tuple = ()) -> Any:
        rows = await db.execute_fetchall(sql, params)
        return rows[0] if rows else None

    @staticmethod
    async def _fetch_all(db: aiosqlite.Connection, sql: str, params: tuple = ()) -> list[Any]:
        return list(await db.execute_fetchall(sql, params))

    async def _script(self, statements: list[tuple[str, tuple]], *touches: str) -> int:
        """A whole write transaction in one round-trip to aiosqlite's thread: the statements run
        as one script between BEGIN IMMEDIATE and COMMIT. Scripts take no parameters, so values
        are inlined as literals — numbers as numbers, text as hex (CAST(X'…' AS TEXT)), which no
        value can break out of. Returns the rowid of the last INSERT."""
        assert self._writer is not None, "store is not open"
        body = "\n".join(_inline(sql, params) + ";" for sql, params in statements)
        async with self._write_lock:
            try:
                await self._writer.executescript(f"BEGIN IMMEDIATE;\n{body}\nCOMMIT;")
            except BaseException:
                if self._writer.in_transaction:
                    await self._writer.execute("ROLLBACK")
                raise
            finally:
                self._cache.invalidate(touches)
            (rowid,) = (await self._writer.execute_fetchall("SELECT last_insert_rowid()"))[0]
            return rowid

    async def _single(self, sql: str, params: tuple = ()) -> aiosqlite.Cursor:
        """One write statement, atomic on its own: no BEGIN/COMMIT round-trips."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            return await self._writer.execute(sql, params)
