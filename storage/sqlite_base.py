"""The foundation of the SQLite store: connections, transactions, read caches, row helpers.

Writes go through one connection, one transaction at a time (`BEGIN IMMEDIATE`), so every
multi-row change is atomic and a check-then-write (a memory cap) cannot race. Reads use a second
connection, which in WAL mode sees only committed data and never waits for the writer. Every
call to aiosqlite is a round-trip to its thread, so the helpers here keep those few.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from bisect import bisect_right, insort
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

import aiosqlite

from storage.base import GLOBAL, ConversationRow, MemoryRow, MessageRow, SummaryRow, TurnRow
from storage.migrations import MIGRATIONS

T = TypeVar("T")
BUSY_TIMEOUT_MS = 10_000
MEMORY_COLUMNS = "id, person_id, character_id, content, tokens, pinned, source, created_at, updated_at"
MESSAGE_COLUMNS = (
    "id, conversation_id, pos, role, person_id, speaker_name, content, tokens, "
    "platform_message_id, created_at"
)
TURN_COLUMNS = (
    "id, conversation_id, person_id, user_message_id, reply_message_id, status, receipt, created_at, "
    "partial_message_id"
)
SUMMARY_COLUMNS = "id, conversation_id, tier, content, tokens, first_pos, last_pos, edited"
REBUILD_COLUMNS = "conversation_id, person_id, generation, progress_pos, status, error"
TIER_RANK = "CASE tier WHEN 'long_term' THEN 0 WHEN 'merged' THEN 1 ELSE 2 END"


def _memory(row: Any) -> MemoryRow:
    return MemoryRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6], row[7], row[8])


def _message(row: Any) -> MessageRow:
    # Roles and speaker names repeat on every row: one copy each (rows are held in bulk).
    return MessageRow(row[0], row[1], row[2], sys.intern(row[3]), row[4], sys.intern(row[5]), *row[6:])


def _turn(row: Any) -> TurnRow:
    receipt = json.loads(row[6]) if row[6] else None
    return TurnRow(row[0], row[1], row[2], row[3], row[4], row[5], receipt, row[7], row[8])


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


def _pos(row: MessageRow) -> int:
    return row.pos


class _Tail:
    """The newest messages of one conversation, oldest first: every message from `rows[0]` on,
    and when `whole`, every message of the conversation."""

    __slots__ = ("rows", "whole", "chars")

    def __init__(self, rows: list[MessageRow], whole: bool):
        self.rows = rows
        self.whole = whole
        self.chars = sum(len(r.content) for r in rows)


class _RecentMessages:
    """The newest messages of the conversations turns ran in, so a turn and a summary step read
    them without a query. It is filled, and changed, only under the write lock, by the writes
    themselves: a new message or reply goes in, any other change to a conversation's messages
    drops that conversation. So it never lags the database."""

    KEEP = 64  # rows held per conversation: more than a turn (50) or a summary step (60) reads
    SLACK = 16  # rows added before the oldest are let go again
    MAX_CHARS = 10_000_000  # text held in all; the least recently used conversations leave first

    def __init__(self) -> None:
        self._tails: OrderedDict[int, _Tail] = OrderedDict()
        self._chars = 0

    def newest(self, conversation_id: int, up_to_pos: int, limit: int) -> list[MessageRow] | None:
        """The last `limit` rows at or before `up_to_pos`, newest first; None if not held."""
        tail = self._tails.get(conversation_id)
        if tail is None:
            return None
        self._tails.move_to_end(conversation_id)
        end = bisect_right(tail.rows, up_to_pos, key=_pos)
        if end < limit and not tail.whole:
            return None
        return tail.rows[max(0, end - limit):end][::-1]

    def fill(self, conversation_id: int, newest_first: list[MessageRow]) -> None:
        """Hold the newest `KEEP` rows read for this conversation (fewer: the whole of it)."""
        self.drop(conversation_id)
        tail = self._tails[conversation_id] = _Tail(newest_first[::-1], whole=len(newest_first) < self.KEEP)
        self._chars += tail.chars
        self._evict()

    def add(self, row: MessageRow) -> None:
        tail = self._tails.get(row.conversation_id)
        if tail is None or (not tail.whole and tail.rows and row.pos < tail.rows[0].pos):
            return  # not held, or older than what is held
        insort(tail.rows, row, key=_pos)
        tail.chars += len(row.content)
        self._chars += len(row.content)
        if len(tail.rows) > self.KEEP + self.SLACK:
            gone = sum(len(r.content) for r in tail.rows[:-self.KEEP])
            del tail.rows[:-self.KEEP]
            tail.whole = False
            tail.chars -= gone
            self._chars -= gone
        self._evict()

    def set_platform_message_id(self, conversation_id: int, message_id: int, platform_message_id: str) -> None:
        tail = self._tails.get(conversation_id)
        for i in range(len(tail.rows) - 1, -1, -1) if tail else ():  # a reply just sent: near the end
            if tail.rows[i].id == message_id:
                tail.rows[i] = replace(tail.rows[i], platform_message_id=platform_message_id)
                return

    def drop(self, conversation_id: int) -> None:
        tail = self._tails.pop(conversation_id, None)
        if tail is not None:
            self._chars -= tail.chars

    def clear(self) -> None:
        self._tails.clear()
        self._chars = 0

    def _evict(self) -> None:
        while self._chars > self.MAX_CHARS and len(self._tails) > 1:
            _, oldest = self._tails.popitem(last=False)
            self._chars -= oldest.chars


MESSAGES = "messages"  # a write that changes or deletes stored messages in bulk
ALL = (*_ReadCache.KINDS, MESSAGES)


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
        self._recent = _RecentMessages()
        # The next free id of each table whose ids this process hands out: a turn's reply and
        # its turn row are written in one trip, which then needs no trip back to learn its ids.
        self._last_ids = {"messages": 0, "turns": 0}

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = await self._connect()
        await self._writer.execute("PRAGMA journal_mode = WAL")
        await self._migrate()
        self._reader = await self._connect()
        await self._read_last_ids()

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

    async def _read_last_ids(self) -> None:
        for table in self._last_ids:
            (self._last_ids[table],) = await self._one(f"SELECT COALESCE(MAX(id), 0) FROM {table}")

    def _new_id(self, table: str) -> int:
        self._last_ids[table] += 1
        return self._last_ids[table]

    async def _with_new_ids(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run `write`, which takes ids from `_new_id`. Should another process have taken one of
        them (a console on the same file), read the last ids again and run it once more."""
        try:
            return await write()
        except sqlite3.IntegrityError as exc:
            if not any(f"{table}.id" in str(exc) for table in self._last_ids):
                raise
            await self._read_last_ids()
            return await write()

    def _invalidate(self, touches: tuple[str, ...]) -> None:
        self._cache.invalidate(tuple(t for t in touches if t != MESSAGES))
        if MESSAGES in touches:
            self._recent.clear()

    async def close(self) -> None:
        for db in (self._reader, self._writer):
            if db is not None:
                await db.close()
        self._reader = self._writer = None

    @asynccontextmanager
    async def _write(self, *touches: str, after: Callable[[], None] | None = None
                     ) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction at a time; rolled back on any error. `touches` names the
        cached reads it changes ("memories", "summaries", "learning"); `after` updates the caches
        once it committed, under the lock."""
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
                self._invalidate(touches)
            await db.execute("COMMIT")
            self._invalidate(touches)
            if after is not None:
                after()

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

    async def _script(self, statements: list[tuple[str, tuple]], after: Callable[[], None]) -> None:
        """A whole write transaction in one round-trip to aiosqlite's thread: the statements run
        as one script between BEGIN IMMEDIATE and COMMIT. Scripts take no parameters, so values
        are inlined as literals — numbers as numbers, text as hex (CAST(X'…' AS TEXT)), which no
        value can break out of. `after` updates the caches once it committed, under the lock."""
        assert self._writer is not None, "store is not open"
        body = "\n".join(_inline(sql, params) + ";" for sql, params in statements)
        async with self._write_lock:
            try:
                await self._writer.executescript(f"BEGIN IMMEDIATE;\n{body}\nCOMMIT;")
            except BaseException:
                if self._writer.in_transaction:
                    await self._writer.execute("ROLLBACK")
                raise
            after()

    async def _single(
        self, sql: str, params: tuple = (), after: Callable[[aiosqlite.Cursor], None] | None = None
    ) -> aiosqlite.Cursor:
        """One write statement, atomic on its own: no BEGIN/COMMIT round-trips. `after` updates
        the caches once it succeeded, under the lock; it gets the cursor (its rowcount)."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            cursor = await self._writer.execute(sql, params)
            if after is not None:
                after(cursor)
            return cursor
