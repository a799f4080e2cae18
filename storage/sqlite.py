"""The SQLite store on aiosqlite: one file, WAL, foreign keys, busy timeout, migrations.

Writes go through one connection, one transaction at a time (`BEGIN IMMEDIATE`), so every
multi-row change is atomic and a check-then-write (a memory cap) cannot race. Reads use a second
connection, which in WAL mode sees only committed data and never waits for the writer.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiosqlite

from storage.base import (
    CHARACTER,
    GLOBAL,
    CapReached,
    ConversationRow,
    MemoriesInPlay,
    MemoryCaps,
    MemoryRow,
    MergeReport,
    MessageRow,
    PinnedMemory,
    RebuildRow,
    Store,
    SummaryRow,
    SummaryState,
    TurnRow,
)
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
    """`sql` with each ? replaced by its parameter as a literal (see SQLiteStore._script)."""
    pieces = sql.split("?")
    assert len(pieces) == len(params) + 1, "one parameter per placeholder"
    return pieces[0] + "".join(_literal(v) + piece for v, piece in zip(params, pieces[1:]))


def _summary(row: Any) -> SummaryRow:
    return SummaryRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]))


def _scope_character(scope: str, character_id: int) -> int | None:
    return None if scope == GLOBAL else character_id


class SQLiteStore(Store):
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

    # -- people and characters -------------------------------------------------------------
    def _forget_cached(self) -> None:
        self._persons.clear()
        self._conversations.clear()

    async def person_for_identity(self, platform: str, user_id: str) -> int:
        cached = self._persons.get((platform, user_id))
        if cached is not None:
            return cached
        person_id = await self._person_for_identity(platform, user_id)
        self._persons[(platform, user_id)] = person_id
        return person_id

    async def _person_for_identity(self, platform: str, user_id: str) -> int:
        row = await self._one(
            "SELECT person_id FROM identities WHERE platform = ? AND user_id = ?", (platform, user_id)
        )
        if row:
            return row[0]
        async with self._write() as db:
            row = await self._fetch_one(
                db, "SELECT person_id FROM identities WHERE platform = ? AND user_id = ?",
                (platform, user_id),
            )
            if row:
                return row[0]
            cursor = await db.execute("INSERT INTO persons (created_at) VALUES (?)", (self.clock(),))
            person_id = cursor.lastrowid
            await db.execute(
                "INSERT INTO identities (platform, user_id, person_id) VALUES (?, ?, ?)",
                (platform, user_id, person_id),
            )
            return person_id

    async def identities_of(self, person_id: int) -> list[tuple[str, str]]:
        rows = await self._all(
            "SELECT platform, user_id FROM identities WHERE person_id = ? ORDER BY platform, user_id",
            (person_id,),
        )
        return [(r[0], r[1]) for r in rows]

    async def ensure_character(self, name: str) -> int:
        row = await self._one("SELECT id FROM characters WHERE name = ?", (name,))
        if row:
            return row[0]
        async with self._write() as db:
            await db.execute(
                "INSERT OR IGNORE INTO characters (name, created_at) VALUES (?, ?)", (name, self.clock())
            )
            row = await self._fetch_one(db, "SELECT id FROM characters WHERE name = ?", (name,))
            return row[0]

    async def remove_character(self, name: str, pinned_cap: int) -> int | None:
        async with self._write(*ALL) as db:
            row = await self._fetch_one(db, "SELECT id FROM characters WHERE name = ?", (name,))
            if row is None:
                return None
            character_id = row[0]
            # Pins that would exceed a person's global pin budget become unpinned, newest kept.
            people = await self._fetch_all(
                db, "SELECT DISTINCT person_id FROM memories WHERE character_id = ?", (character_id,)
            )
            for (person_id,) in people:
                (global_pins,) = await self._fetch_one(
                    db, "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS NULL "
                    "AND pinned = 1", (person_id,),
                )
                moving = await self._fetch_all(
                    db, "SELECT id FROM memories WHERE person_id = ? AND character_id = ? AND pinned = 1 "
                    "ORDER BY updated_at DESC, id DESC", (person_id, character_id),
                )
                room = max(0, pinned_cap - global_pins)
                for (memory_id,) in moving[room:]:
                    await db.execute("UPDATE memories SET pinned = 0 WHERE id = ?", (memory_id,))
            cursor = await db.execute(
                "UPDATE memories SET character_id = NULL WHERE character_id = ?", (character_id,)
            )
            moved = cursor.rowcount
            await db.execute("DELETE FROM characters WHERE id = ?", (character_id,))
            self._forget_cached()
            return moved

    # -- conversations and messages ----------------------------------------------------------
    async def conversation(
        self, platform: str, chat_id: str, thread_id: str | None, character_id: int, is_shared: bool
    ) -> ConversationRow:
        key = (platform, chat_id, thread_id or "", character_id)
        cached = self._conversations.get(key)
        if cached is not None:
            return cached
        sql = (
            "SELECT id, platform, chat_id, thread_id, character_id, is_shared FROM conversations "
            "WHERE platform = ? AND chat_id = ? AND thread_id = ? AND character_id = ?"
        )
        row = await self._one(sql, key)
        if row is None:
            async with self._write() as db:
                await db.execute(
                    "INSERT OR IGNORE INTO conversations (platform, chat_id, thread_id, character_id, "
                    "is_shared, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (*key, int(is_shared), self.clock()),
                )
                row = await self._fetch_one(db, sql, key)
        self._conversations[key] = ConversationRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]))
        return self._conversations[key]

    async def conversation_by_id(self, conversation_id: int) -> ConversationRow | None:
        row = await self._one(
            "SELECT id, platform, chat_id, thread_id, character_id, is_shared FROM conversations "
            "WHERE id = ?", (conversation_id,),
        )
        return ConversationRow(row[0], row[1], row[2], row[3], row[4], bool(row[5])) if row else None

    async def add_user_message(
        self, conversation_id: int, person_id: int, speaker_name: str, content: str,
        tokens: int, platform_message_id: str | None,
    ) -> MessageRow:
        now = self.clock()
        # The next rowid and its pos (2 × id) in one atomic statement.
        cursor = await self._single(
            "INSERT INTO messages (id, conversation_id, pos, role, person_id, speaker_name, content, "
            "tokens, platform_message_id, created_at) SELECT next, ?, 2 * next, 'user', ?, ?, ?, ?, ?, ? "
            "FROM (SELECT COALESCE(MAX(id), 0) + 1 AS next FROM messages)",
            (conversation_id, person_id, speaker_name, content, tokens, platform_message_id, now),
        )
        message_id = cursor.lastrowid
        return MessageRow(message_id, conversation_id, 2 * message_id, "user", person_id,
                          speaker_name, content, tokens, platform_message_id, now)

    async def recent_messages(self, conversation_id: int, up_to_pos: int, limit: int) -> list[MessageRow]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos <= ? "
            "ORDER BY pos DESC LIMIT ?",
            (conversation_id, up_to_pos, limit),
        )
        return [_message(r) for r in rows]

    async def message(self, message_id: int) -> MessageRow | None:
        row = await self._one(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,))
        return _message(row) if row else None

    async def edit_platform_message(
        self, conversation_id: int, platform_message_id: str, content: str, tokens: int
    ) -> bool:
        async with self._write() as db:
            cursor = await db.execute(
                "UPDATE messages SET content = ?, tokens = ? WHERE conversation_id = ? "
                "AND platform_message_id = ? AND role = 'user'",
                (content, tokens, conversation_id, platform_message_id),
            )
            return cursor.rowcount > 0

    async def delete_platform_message(self, conversation_id: int, platform_message_id: str) -> bool:
        async with self._write() as db:
            cursor = await db.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND platform_message_id = ?",
                (conversation_id, platform_message_id),
            )
            return cursor.rowcount > 0

    async def set_platform_message_id(self, message_id: int, platform_message_id: str) -> None:
        async with self._write() as db:
            await db.execute(
                "UPDATE messages SET platform_message_id = ? WHERE id = ?", (platform_message_id, message_id)
            )

    # -- turns -----------------------------------------------------------------------------
    async def begin_turn(self, conversation_id: int, person_id: int, user_message_id: int) -> int:
        cursor = await self._single(
            "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at) "
            "VALUES (?, ?, ?, 'running', ?)",
            (conversation_id, person_id, user_message_id, self.clock()),
        )
        return cursor.lastrowid

    async def finish_turn(
        self, turn_id: int | None, user_message: MessageRow, person_id: int, speaker_name: str,
        content: str, tokens: int, receipt: dict[str, Any],
    ) -> int:
        now = self.clock()
        conversation_id, pos = user_message.conversation_id, user_message.pos + 1
        if turn_id is None:  # a plain turn (no tool ran): its row comes with its reply, in one trip
            return await self._script([
                ("INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
                 "created_at) VALUES (?, ?, 'assistant', NULL, ?, ?, ?, ?)",
                 (conversation_id, pos, speaker_name, content, tokens, now)),
                ("INSERT INTO turns (conversation_id, person_id, user_message_id, reply_message_id, status, "
                 "receipt, created_at) VALUES (?, ?, ?, last_insert_rowid(), 'done', ?, ?)",
                 (conversation_id, person_id, user_message.id, json.dumps(receipt), now)),
            ])
        async with self._write() as db:  # a tool or regenerated turn: its row exists
            for old_turn, old_reply in await self._fetch_all(  # a regenerated turn replaces the old reply
                db, "SELECT id, reply_message_id FROM turns WHERE user_message_id = ? AND status = 'done'",
                (user_message.id,),
            ):
                await db.execute("UPDATE turns SET status = 'replaced' WHERE id = ?", (old_turn,))
                if old_reply is not None:
                    await db.execute("DELETE FROM messages WHERE id = ?", (old_reply,))
            cursor = await db.execute(
                "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, "
                "tokens, created_at) VALUES (?, ?, 'assistant', NULL, ?, ?, ?, ?)",
                (conversation_id, pos, speaker_name, content, tokens, now),
            )
            reply_id = cursor.lastrowid
            await db.execute(
                "UPDATE turns SET status = 'done', reply_message_id = ?, receipt = ? WHERE id = ?",
                (reply_id, json.dumps(receipt), turn_id),
            )
            return turn_id

    async def fail_turn(self, turn_id: int) -> None:
        async with self._write("memories") as db:
            await self._undo_journal(db, turn_id)
            await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))

    async def turn(self, turn_id: int) -> TurnRow | None:
        row = await self._one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return _turn(row) if row else None

    async def latest_turn(self, conversation_id: int) -> TurnRow | None:
        row = await self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND status = 'done' "
            "ORDER BY id DESC LIMIT 1", (conversation_id,),
        )
        return _turn(row) if row else None

    async def last_receipt(self, conversation_id: int, person_id: int) -> TurnRow | None:
        row = await self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND person_id = ? "
            "AND status = 'done' ORDER BY id DESC LIMIT 1", (conversation_id, person_id),
        )
        return _turn(row) if row else None

    async def begin_regenerate(self, turn_id: int) -> int:
        async with self._write("memories") as db:
            conversation_id, person_id, user_message_id = await self._fetch_one(
                db, "SELECT conversation_id, person_id, user_message_id FROM turns WHERE id = ?",
                (turn_id,),
            )
            await self._undo_journal(db, turn_id)
            cursor = await db.execute(
                "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at) "
                "VALUES (?, ?, ?, 'running', ?)",
                (conversation_id, person_id, user_message_id, self.clock()),
            )
            return cursor.lastrowid

    async def recover_interrupted_turns(self) -> int:
        async with self._write("memories") as db:
            running = await self._fetch_all(db, "SELECT id FROM turns WHERE status = 'running'")
            for (turn_id,) in running:
                await self._undo_journal(db, turn_id)
                await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))
            return len(running)

    async def _undo_journal(self, db: aiosqlite.Connection, turn_id: int) -> None:
        """Undo what a turn's tools wrote, newest first. Entries pinned since are left alone:
        only the person changes pinned memories."""
        entries = await self._fetch_all(
            db, "SELECT id, memory_id, action, before FROM memory_journal "
            "WHERE turn_id = ? AND undone = 0 ORDER BY id DESC", (turn_id,),
        )
        for entry_id, memory_id, action, before in entries:
            current = await self._fetch_one(db, "SELECT pinned FROM memories WHERE id = ?", (memory_id,))
            if current is not None and current[0]:
                pass  # pinned by the person since: left alone
            elif action == "add" and current is not None:
                await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            elif action == "update" and current is not None:
                old = json.loads(before)
                await db.execute(
                    "UPDATE memories SET content = ?, tokens = ?, updated_at = ? WHERE id = ?",
                    (old["content"], old["tokens"], old["updated_at"], memory_id),
                )
            elif action == "delete" and current is None:
                old = json.loads(before)
                await db.execute(
                    f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    tuple(old[c.strip()] for c in MEMORY_COLUMNS.split(",")),
                )
            await db.execute("UPDATE memory_journal SET undone = 1 WHERE id = ?", (entry_id,))

    async def _journal(
        self, db: aiosqlite.Connection, turn_id: int | None, memory_id: int, action: str,
        before: MemoryRow | None,
    ) -> None:
        if turn_id is None:
            return
        snapshot = None
        if before is not None:
            snapshot = json.dumps({c.strip(): getattr(before, c.strip()) for c in MEMORY_COLUMNS.split(",")})
        await db.execute(
            "INSERT INTO memory_journal (turn_id, memory_id, action, before) VALUES (?, ?, ?, ?)",
            (turn_id, memory_id, action, snapshot),
        )

    # -- saved memories ---------------------------------------------------------------------
    async def memories_in_play(
        self, person_id: int, character_id: int, unpinned_limit: int
    ) -> MemoriesInPlay:
        return await self._cache.read("memories", (person_id, character_id, unpinned_limit),
                                      lambda: self._memories_in_play(person_id, character_id, unpinned_limit))

    async def _memories_in_play(self, person_id: int, character_id: int, unpinned_limit: int) -> MemoriesInPlay:
        part = (f"SELECT * FROM (SELECT {MEMORY_COLUMNS} FROM memories WHERE person_id = ? "
                "AND character_id IS ? AND pinned = ? ORDER BY updated_at DESC, id DESC LIMIT ?)")
        rows = await self._all(
            " UNION ALL ".join([part] * 4),
            (person_id, character_id, 1, -1, person_id, None, 1, -1,
             person_id, character_id, 0, unpinned_limit, person_id, None, 0, unpinned_limit),
        )
        memories = [_memory(r) for r in rows]
        pinned = sorted((m for m in memories if m.pinned), key=lambda m: (m.updated_at, m.id), reverse=True)
        unpinned = {scope: [m for m in memories if not m.pinned and m.scope == scope] for scope in (CHARACTER, GLOBAL)}
        return MemoriesInPlay(pinned=pinned, unpinned=unpinned)

    @staticmethod
    def _visible(scope: str | None) -> str:
        if scope == GLOBAL:
            return "character_id IS NULL AND ? IS NOT NULL"
        if scope == CHARACTER:
            return "character_id = ?"
        return "(character_id = ? OR character_id IS NULL)"

    async def list_memories(
        self, person_id: int, character_id: int, scope: str | None, offset: int, limit: int
    ) -> tuple[list[MemoryRow], int]:
        where = f"person_id = ? AND {self._visible(scope)}"
        (total,) = await self._one(f"SELECT COUNT(*) FROM memories WHERE {where}", (person_id, character_id))
        rows = await self._all(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} "
            "ORDER BY pinned DESC, updated_at DESC, id DESC LIMIT ? OFFSET ?",
            (person_id, character_id, limit, offset),
        )
        return [_memory(r) for r in rows], total

    async def get_memory(self, person_id: int, character_id: int, memory_id: int) -> MemoryRow | None:
        row = await self._one(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND person_id = ? "
            f"AND {self._visible(None)}", (memory_id, person_id, character_id),
        )
        return _memory(row) if row else None

    async def _get_for_write(
        self, db: aiosqlite.Connection, person_id: int, character_id: int, memory_id: int
    ) -> MemoryRow | None:
        row = await self._fetch_one(
            db, f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND person_id = ? "
            f"AND {self._visible(None)}", (memory_id, person_id, character_id),
        )
        return _memory(row) if row else None

    async def _changeable(
        self, db: aiosqlite.Connection, person_id: int, character_id: int, memory_id: int, by_ai: bool
    ) -> MemoryRow | None:
        """The memory if it is the person's and in play; the AI (a turn's tool) may not change a
        pinned one: PinnedMemory."""
        row = await self._get_for_write(db, person_id, character_id, memory_id)
        if row is not None and by_ai and row.pinned:
            raise PinnedMemory(memory_id)
        return row

    async def _count(
        self, db: aiosqlite.Connection, person_id: int, character: int | None, pinned: bool
    ) -> int:
        (count,) = await self._fetch_one(
            db, "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
            (person_id, character, int(pinned)),
        )
        return count

    async def add_memory(
        self, person_id: int, character_id: int, scope: str, content: str, tokens: int,
        pinned: bool, source: str, caps: MemoryCaps, turn_id: int | None = None,
    ) -> MemoryRow:
        character = _scope_character(scope, character_id)
        limit = caps.pinned if pinned else caps.unpinned
        now = self.clock()
        async with self._write("memories") as db:
            count = await self._count(db, person_id, character, pinned)
            if count >= limit:
                raise CapReached("pinned" if pinned else "unpinned", limit, scope, count)
            cursor = await db.execute(
                "INSERT INTO memories (person_id, character_id, content, tokens, pinned, source, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (person_id, character, content, tokens, int(pinned), source, now, now),
            )
            memory_id = cursor.lastrowid
            await self._journal(db, turn_id, memory_id, "add", None)
        return MemoryRow(memory_id, person_id, character, content, tokens, pinned, source, now, now)

    async def update_memory(
        self, person_id: int, character_id: int, memory_id: int, content: str, tokens: int,
        turn_id: int | None = None,
    ) -> MemoryRow | None:
        now = self.clock()
        async with self._write("memories") as db:
            before = await self._changeable(db, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            await db.execute(
                "UPDATE memories SET content = ?, tokens = ?, updated_at = ? WHERE id = ?",
                (content, tokens, now, memory_id),
            )
            await self._journal(db, turn_id, memory_id, "update", before)
        return MemoryRow(memory_id, person_id, before.character_id, content, tokens, before.pinned,
                         before.source, before.created_at, now)

    async def delete_memory(
        self, person_id: int, character_id: int, memory_id: int, turn_id: int | None = None
    ) -> MemoryRow | None:
        async with self._write("memories") as db:
            before = await self._changeable(db, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            await self._journal(db, turn_id, memory_id, "delete", before)
        return before

    async def set_pinned(
        self, person_id: int, character_id: int, memory_id: int, pinned: bool, caps: MemoryCaps
    ) -> MemoryRow | None:
        async with self._write("memories") as db:
            row = await self._get_for_write(db, person_id, character_id, memory_id)
            if row is None:
                return None
            if row.pinned != pinned:
                limit = caps.pinned if pinned else caps.unpinned
                count = await self._count(db, person_id, row.character_id, pinned)
                if count >= limit:
                    raise CapReached("pinned" if pinned else "unpinned", limit, row.scope, count)
                await db.execute("UPDATE memories SET pinned = ? WHERE id = ?", (int(pinned), memory_id))
        return MemoryRow(row.id, row.person_id, row.character_id, row.content, row.tokens, pinned,
                         row.source, row.created_at, row.updated_at)

    async def count_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        (count,) = await self._one(
            "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
            (person_id, _scope_character(scope, character_id), int(pinned)),
        )
        return count

    async def clear_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        async with self._write("memories") as db:
            cursor = await db.execute(
                "DELETE FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
                (person_id, _scope_character(scope, character_id), int(pinned)),
            )
            return cursor.rowcount

    async def export_person(self, person_id: int) -> dict[str, Any]:
        identities = await self.identities_of(person_id)
        rows = await self._all(
            f"SELECT {', '.join('m.' + c.strip() for c in MEMORY_COLUMNS.split(','))}, c.name "
            "FROM memories m LEFT JOIN characters c ON c.id = m.character_id "
            "WHERE m.person_id = ? ORDER BY m.id", (person_id,),
        )
        settings = await self._all(
            "SELECT c.name, s.learn FROM person_settings s JOIN characters c ON c.id = s.character_id "
            "WHERE s.person_id = ? ORDER BY c.name", (person_id,),
        )
        return {
            "identities": [f"{p}:{u}" for p, u in identities],
            "memories": [
                {
                    "id": r[0],
                    "scope": GLOBAL if r[2] is None else CHARACTER,
                    "character": r[9],
                    "content": r[3],
                    "pinned": bool(r[5]),
                    "source": r[6],
                    "created_at": r[7],
                    "updated_at": r[8],
                }
                for r in rows
            ],
            "learn_from_chat": {name: bool(learn) for name, learn in settings},
        }

    # -- settings, linking, forgetting -----------------------------------------------------
    async def learning_enabled(self, person_id: int, character_id: int) -> bool:
        async def load() -> bool:
            row = await self._one(
                "SELECT learn FROM person_settings WHERE person_id = ? AND character_id = ?",
                (person_id, character_id),
            )
            return True if row is None else bool(row[0])
        return await self._cache.read("learning", (person_id, character_id), load)

    async def set_learning(self, person_id: int, character_id: int, enabled: bool) -> None:
        async with self._write("learning") as db:
            await db.execute(
                "INSERT INTO person_settings (person_id, character_id, learn) VALUES (?, ?, ?) "
                "ON CONFLICT (person_id, character_id) DO UPDATE SET learn = excluded.learn",
                (person_id, character_id, int(enabled)),
            )

    async def create_link_code(self, person_id: int, code: str, expires_at: float) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM link_codes WHERE person_id = ? OR expires_at < ?",
                             (person_id, self.clock()))
            await db.execute(
                "INSERT INTO link_codes (code, person_id, expires_at) VALUES (?, ?, ?)",
                (code, person_id, expires_at),
            )

    async def link_code_owner(self, code: str, now: float) -> int | None:
        row = await self._one(
            "SELECT person_id FROM link_codes WHERE code = ? AND expires_at >= ?", (code, now)
        )
        return row[0] if row else None

    async def merge_persons(self, keep: int, absorb: int, caps: MemoryCaps) -> MergeReport:
        async with self._write(*ALL) as db:
            scopes = await self._fetch_all(
                db, "SELECT DISTINCT character_id FROM memories WHERE person_id IN (?, ?)", (keep, absorb)
            )
            to_unpin: list[int] = []
            for (character,) in scopes:
                scope = GLOBAL if character is None else CHARACTER
                pins = await self._fetch_all(
                    db, "SELECT id FROM memories WHERE person_id IN (?, ?) AND character_id IS ? "
                    "AND pinned = 1 ORDER BY person_id = ? DESC, updated_at DESC, id DESC",
                    (keep, absorb, character, keep),
                )
                over = [memory_id for (memory_id,) in pins[caps.pinned:]]
                unpinned = sum([await self._count(db, p, character, False) for p in (keep, absorb)])
                if unpinned + len(over) > caps.unpinned:
                    raise CapReached("unpinned", caps.unpinned, scope, unpinned + len(over))
                to_unpin += over
            for memory_id in to_unpin:
                await db.execute("UPDATE memories SET pinned = 0 WHERE id = ?", (memory_id,))
            await db.execute("UPDATE memories SET person_id = ? WHERE person_id = ?", (keep, absorb))
            await db.execute("UPDATE identities SET person_id = ? WHERE person_id = ?", (keep, absorb))
            await db.execute("UPDATE messages SET person_id = ? WHERE person_id = ?", (keep, absorb))
            await db.execute("UPDATE turns SET person_id = ? WHERE person_id = ?", (keep, absorb))
            # Learn from chat: where the two differ, off wins (the more private choice).
            await db.execute(
                "INSERT INTO person_settings (person_id, character_id, learn) "
                "SELECT ?, character_id, learn FROM person_settings WHERE person_id = ? "
                "ON CONFLICT (person_id, character_id) DO UPDATE "
                "SET learn = MIN(learn, excluded.learn)",
                (keep, absorb),
            )
            await db.execute("DELETE FROM persons WHERE id = ?", (absorb,))
            await db.execute("DELETE FROM link_codes WHERE person_id = ?", (keep,))
            self._forget_cached()
            return MergeReport(unpinned_pins=len(to_unpin))

    async def forget_person(self, person_id: int) -> None:
        async with self._write(*ALL) as db:
            # One-to-one conversations are all about the person: they go whole.
            await db.execute(
                "DELETE FROM conversations WHERE is_shared = 0 AND id IN "
                "(SELECT DISTINCT conversation_id FROM messages WHERE person_id = ?)", (person_id,),
            )
            # In shared ones, their messages and the character's replies to them.
            await db.execute(
                "DELETE FROM messages WHERE id IN (SELECT reply_message_id FROM turns "
                "WHERE person_id = ? AND reply_message_id IS NOT NULL)", (person_id,),
            )
            await db.execute("DELETE FROM messages WHERE person_id = ?", (person_id,))
            await db.execute("DELETE FROM persons WHERE id = ?", (person_id,))
            self._forget_cached()

    # -- the conversation summary ----------------------------------------------------------
    async def summary_state(self, conversation_id: int) -> SummaryState:
        return await self._cache.read("summaries", ("state", conversation_id),
                                      lambda: self._summary_state(conversation_id))

    async def _summary_state(self, conversation_id: int) -> SummaryState:
        row = await self._one(
            "SELECT summarized_pos, summary_generation, summary_failures, summary_retry_at, "
            "EXISTS (SELECT 1 FROM rebuilds WHERE conversation_id = c.id) FROM conversations c WHERE id = ?",
            (conversation_id,),
        )
        return SummaryState(row[0], row[1], row[2], row[3], bool(row[4]))

    async def summaries(self, conversation_id: int, generation: int | None = None) -> list[SummaryRow]:
        if generation is None:  # the live summary: read every turn, cached
            return await self._cache.read("summaries", conversation_id,
                                          lambda: self._summaries(conversation_id, None))
        return await self._summaries(conversation_id, generation)

    async def _summaries(self, conversation_id: int, generation: int | None) -> list[SummaryRow]:
        if generation is None:
            generation_sql, params = "(SELECT summary_generation FROM conversations WHERE id = ?)", (conversation_id,)
        else:
            generation_sql, params = "?", (generation,)
        rows = await self._all(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE conversation_id = ? AND generation = "
            f"{generation_sql} ORDER BY {TIER_RANK}, first_pos", (conversation_id, *params),
        )
        return [_summary(r) for r in rows]

    async def messages_between(
        self, conversation_id: int, after_pos: int, before_pos: int, limit: int
    ) -> list[MessageRow]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos > ? AND pos < ? "
            "ORDER BY pos LIMIT ?", (conversation_id, after_pos, before_pos, limit),
        )
        return [_message(r) for r in rows]

    async def count_messages_between(
        self, conversation_id: int, after_pos: int, before_pos: int
    ) -> tuple[int, int]:
        count, tokens = await self._one(
            "SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM messages WHERE conversation_id = ? "
            "AND pos > ? AND pos < ?", (conversation_id, after_pos, before_pos),
        )
        return count, tokens

    async def write_summary(
        self, conversation_id: int, generation: int, tier: str, content: str, tokens: int,
        first_pos: int, last_pos: int, replaces: list[int], covered_pos: int | None = None,
        edited: bool = False,
    ) -> SummaryRow:
        async with self._write("summaries") as db:
            cursor = await db.execute(
                "INSERT INTO summaries (conversation_id, generation, tier, content, tokens, first_pos, "
                "last_pos, edited, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, generation, tier, content, tokens, first_pos, last_pos, int(edited),
                 self.clock()),
            )
            summary_id = cursor.lastrowid
            for old in replaces:
                await db.execute("DELETE FROM summaries WHERE id = ? AND conversation_id = ?",
                                 (old, conversation_id))
            if covered_pos is not None:
                await db.execute(
                    "UPDATE conversations SET summarized_pos = MAX(summarized_pos, ?), summary_failures = 0, "
                    "summary_retry_at = NULL WHERE id = ? AND summary_generation = ?",
                    (covered_pos, conversation_id, generation),
                )
                await db.execute(
                    "UPDATE rebuilds SET progress_pos = MAX(progress_pos, ?) WHERE conversation_id = ? "
                    "AND generation = ?", (covered_pos, conversation_id, generation),
                )
        return SummaryRow(summary_id, conversation_id, tier, content, tokens, first_pos, last_pos, edited)

    async def edit_summary(self, conversation_id: int, summary_id: int, content: str, tokens: int) -> bool:
        async with self._write("summaries") as db:
            cursor = await db.execute(
                "UPDATE summaries SET content = ?, tokens = ?, edited = 1 WHERE id = ? AND conversation_id = ? "
                "AND generation = (SELECT summary_generation FROM conversations WHERE id = ?)",
                (content, tokens, summary_id, conversation_id, conversation_id),
            )
            return cursor.rowcount > 0

    async def set_summary_retry(self, conversation_id: int, failures: int, retry_at: float | None) -> None:
        async with self._write("summaries") as db:
            await db.execute(
                "UPDATE conversations SET summary_failures = ?, summary_retry_at = ? WHERE id = ?",
                (failures, retry_at, conversation_id),
            )

    async def due_summary_retries(self, now: float) -> list[int]:
        rows = await self._all(
            "SELECT id FROM conversations WHERE summary_retry_at IS NOT NULL AND summary_retry_at <= ?", (now,)
        )
        return [r[0] for r in rows]

    async def start_rebuild(self, conversation_id: int, person_id: int) -> RebuildRow | None:
        async with self._write("summaries") as db:
            if await self._fetch_one(db, "SELECT 1 FROM rebuilds WHERE conversation_id = ?", (conversation_id,)):
                return None
            (generation,) = await self._fetch_one(
                db, "SELECT summary_generation + 1 FROM conversations WHERE id = ?", (conversation_id,)
            )
            await db.execute(
                "INSERT INTO rebuilds (conversation_id, person_id, generation, progress_pos, status, "
                "started_at) VALUES (?, ?, ?, 0, 'running', ?)",
                (conversation_id, person_id, generation, self.clock()),
            )
            # Anything a crashed earlier attempt wrote for that generation goes.
            await db.execute("DELETE FROM summaries WHERE conversation_id = ? AND generation = ?",
                             (conversation_id, generation))
        return RebuildRow(conversation_id, person_id, generation, 0, "running", None)

    async def rebuild(self, conversation_id: int) -> RebuildRow | None:
        row = await self._one(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE conversation_id = ?",
                              (conversation_id,))
        return RebuildRow(*row) if row else None

    async def rebuilds(self, status: str) -> list[RebuildRow]:
        rows = await self._all(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE status = ?", (status,))
        return [RebuildRow(*r) for r in rows]

    async def set_rebuild_status(self, conversation_id: int, status: str, error: str | None = None) -> None:
        async with self._write("summaries") as db:
            await db.execute("UPDATE rebuilds SET status = ?, error = ? WHERE conversation_id = ?",
                             (status, error, conversation_id))

    async def restart_rebuild(self, conversation_id: int) -> None:
        async with self._write("summaries") as db:
            await db.execute(
                "DELETE FROM summaries WHERE conversation_id = ? AND generation = "
                "(SELECT generation FROM rebuilds WHERE conversation_id = ?)", (conversation_id, conversation_id),
            )
            await db.execute("UPDATE rebuilds SET progress_pos = 0, status = 'running', error = NULL "
                             "WHERE conversation_id = ?", (conversation_id,))

    async def cancel_rebuild(self, conversation_id: int) -> None:
        async with self._write("summaries") as db:
            await db.execute(
                "DELETE FROM summaries WHERE conversation_id = ? AND generation = "
                "(SELECT generation FROM rebuilds WHERE conversation_id = ?)", (conversation_id, conversation_id),
            )
            await db.execute("DELETE FROM rebuilds WHERE conversation_id = ?", (conversation_id,))

    async def finish_rebuild(self, conversation_id: int) -> None:
        async with self._write("summaries") as db:
            generation, progress = await self._fetch_one(
                db, "SELECT generation, progress_pos FROM rebuilds WHERE conversation_id = ?", (conversation_id,)
            )
            await db.execute("DELETE FROM summaries WHERE conversation_id = ? AND generation <> ?",
                             (conversation_id, generation))
            await db.execute(
                "UPDATE conversations SET summary_generation = ?, summarized_pos = ?, summary_failures = 0, "
                "summary_retry_at = NULL WHERE id = ?", (generation, progress, conversation_id),
            )
            await db.execute("DELETE FROM rebuilds WHERE conversation_id = ?", (conversation_id,))

    # -- drafts and selections -------------------------------------------------------------
    async def save_drafts(self, person_id: int, kind: str, items: list[str]) -> int:
        async with self._write() as db:
            # Older drafts of the same kind are superseded.
            await db.execute("DELETE FROM drafts WHERE person_id = ? AND kind = ?", (person_id, kind))
            cursor = await db.execute(
                "INSERT INTO drafts (person_id, kind, items, created_at) VALUES (?, ?, ?, ?)",
                (person_id, kind, json.dumps(items), self.clock()),
            )
            return cursor.lastrowid

    async def drafts(self, person_id: int, draft_id: int) -> tuple[str, list[str]] | None:
        row = await self._one("SELECT kind, items FROM drafts WHERE id = ? AND person_id = ?",
                              (draft_id, person_id))
        return (row[0], json.loads(row[1])) if row else None

    async def delete_drafts(self, person_id: int, draft_id: int) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM drafts WHERE id = ? AND person_id = ?", (draft_id, person_id))

    async def selection(self, person_id: int, conversation_id: int) -> list[int]:
        row = await self._one(
            "SELECT message_ids FROM selections WHERE person_id = ? AND conversation_id = ?",
            (person_id, conversation_id),
        )
        return json.loads(row[0]) if row else []

    async def set_selection(self, person_id: int, conversation_id: int, message_ids: list[int]) -> None:
        async with self._write() as db:
            if message_ids:
                await db.execute(
                    "INSERT INTO selections (person_id, conversation_id, message_ids) VALUES (?, ?, ?) "
                    "ON CONFLICT (person_id, conversation_id) DO UPDATE SET message_ids = excluded.message_ids",
                    (person_id, conversation_id, json.dumps(message_ids)),
                )
            else:
                await db.execute("DELETE FROM selections WHERE person_id = ? AND conversation_id = ?",
                                 (person_id, conversation_id))

    async def message_by_platform_id(self, conversation_id: int, platform_message_id: str) -> MessageRow | None:
        row = await self._one(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND platform_message_id = ?",
            (conversation_id, platform_message_id),
        )
        return _message(row) if row else None

    async def messages_by_id(self, conversation_id: int, message_ids: list[int]) -> list[MessageRow]:
        if not message_ids:
            return []
        marks = ", ".join("?" * len(message_ids))
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND id IN ({marks}) ORDER BY pos",
            (conversation_id, *message_ids),
        )
        return [_message(r) for r in rows]

    # -- maintenance -----------------------------------------------------------------------
    async def get_meta(self, key: str) -> str | None:
        row = await self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0] if row else None

    async def set_meta(self, key: str, value: str) -> None:
        async with self._write() as db:
            await db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    async def checkpoint(self) -> None:
        assert self._writer is not None
        async with self._write_lock:
            await self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def backup(self, target: str) -> None:
        assert self._reader is not None
        async with aiosqlite.connect(target) as destination:
            await self._reader.backup(destination)

    async def purge_messages(self, older_than: float) -> int:
        async with self._write(*ALL) as db:
            cursor = await db.execute(
                "DELETE FROM messages WHERE created_at < ? AND pos <= "
                "(SELECT summarized_pos FROM conversations c WHERE c.id = messages.conversation_id) "
                "AND id NOT IN (SELECT user_message_id FROM turns WHERE status = 'running')",
                (older_than,),
            )
            return cursor.rowcount
