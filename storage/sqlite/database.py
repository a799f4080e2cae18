"""One SQLite file, opened for the store: WAL, foreign keys, a busy timeout, migrations.

Writes go through one connection, one transaction at a time (`BEGIN IMMEDIATE`, which SQLite
also serializes across processes), so every multi-row change is atomic and a check-then-write (a
memory cap) cannot race. Reads use a second connection, which in WAL mode sees every committed
write (of any process) and never waits for a writer.

Each statement is a hop to a connection's thread and back to the event loop, and a write
transaction holds the one writer across its hops: under load each hop waits behind everything
else ready on the loop, and the writer was held 93 % of the time (docs/processes.md section 8).
So a *short* transaction (`transaction(short=True)`: a few statements on rows found by key, as a
turn's) runs whole inline, on the event loop's thread: its `BEGIN IMMEDIATE` — unless another
process holds the file, then it waits for it on the writer's thread, as waiting may take up to
the busy timeout — its statements and its commit. Holding the file, nothing in them waits on
another connection (WAL readers never block, and a commit copies nothing back: see below), and
nothing else of the process runs meanwhile: the writer is held for their SQL only. Every other
write (/forgetme, an import, the upkeep: work that may take long) runs on the writer's thread,
and the event loop never stops for it.

Short reads (`short`: a few rows found by key, as a turn's) run inline too, on a connection of
their own that never waits: a WAL reader waits for nothing but another connection resetting the
log, and then SQLite says busy at once and the read goes to the reader's thread. Every other read
(recall, an export, the page) runs on the reader's thread.

The write-ahead log is copied back into the file (checkpointed) by a third connection, in the
background, every CHECKPOINT_EVERY_S: never by a commit. SQLite's own way checkpoints in the
commit that takes the log past 1,000 pages, and that commit waits for the file to reach the
disk (3 ms at p99 and up to 11 on this project's machine, against 0.08 ms for a commit at p50),
which every turn waiting on the one writer then waits for too (docs/benchmarks.md).

SQLite starts the log over only when a write begins while every page of it is copied back and
no reader still needs it. At a bot's pace the background copy finds such moments. With writes
back to back (a saturated bot, a bulk fill) it never does: pages arrive while it copies, and the
log grew by 84 MB every 500 turns. So once the log passes LOG_RESTART_PAGES, the copy takes this
process's writes for its last pages (those of the last second: 5 to 9 ms) and starts the log
over; a reader or another process's writer in the way makes it try again a second later. A log
started over cuts its file back to LOG_FILE_KEPT_BYTES (`journal_size_limit`), so a burst leaves
no large file behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from contextlib import asynccontextmanager
from itertools import takewhile
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiosqlite

from storage.sql.database import Connection, Dialect
from storage.sqlite.migrations import MIGRATIONS, REBUILD

log = logging.getLogger(__name__)
BUSY_TIMEOUT_MS = 10_000
BACKUP_STEP_PAGES = 1024  # 4 MB a step: a stop waits for one step, not for the whole copy
CHECKPOINT_EVERY_S = 1.0  # the log holds about a second of writes (PASSIVE: never waits on a reader or writer)
LOG_RESTART_PAGES = 16_384  # 64 MB: past it, the log is started over with this process's writes held (see above)
LOG_FILE_KEPT_BYTES = 4 * 2**20  # a log started over cuts its file back to this (a second or so of a bot's writes)


class Database:
    """The store's database (storage/sql/database.py) on one SQLite file."""

    def __init__(self, path: Path, options: dict[str, str] | None = None, clock: Callable[[], float] = time.time,
                 checkpoint_every_s: float = CHECKPOINT_EVERY_S):
        self.dialect = SQLiteDialect()
        self.path = path
        self.options = options or {}  # SQLite URI parameters, e.g. mode=ro
        self.clock = clock
        self.checkpoint_every_s = checkpoint_every_s
        self._writer: aiosqlite.Connection | None = None
        self._inline: sqlite3.Connection | None = None  # the writer's own connection, for short transactions
        self._reader: aiosqlite.Connection | None = None
        self._short_reads: sqlite3.Connection | None = None  # their own connection, on the event loop's thread
        self.short: _Short | None = None  # short reads (see above)
        self._write_lock = asyncio.Lock()  # one transaction at a time on the one writer connection
        self._checkpointer: aiosqlite.Connection | None = None  # the background copy's connection
        self._checkpoints: asyncio.Task | None = None

    async def open(self) -> None:
        """Connect and migrate; on any failure what was connected is closed again (its threads
        would keep the process from exiting on the error)."""
        try:
            await self._open()
        except BaseException:
            await self.close()
            raise

    async def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer, self._inline = await self._connect()
        writes = self.options.get("mode") != "ro"
        if writes:
            await self._use_wal()
            await self._migrate()
            await self._writer.execute("PRAGMA wal_autocheckpoint = 0")  # no commit checkpoints: see above
        self._reader, _ = await self._connect()
        self._short_reads = self._sqlite_connection(busy_timeout_ms=0, check_same_thread=True)
        self._short_reads.execute("PRAGMA query_only = ON")  # it reads: every write takes the writer
        self.short = _Short(self._short_reads, self._reader)
        if writes:
            self._checkpointer, _ = await self._connect()
            await self._checkpointer.execute("PRAGMA busy_timeout = 0")  # a reader or another writer: try again later
            self._checkpoints = asyncio.create_task(self._checkpointing(self._checkpointer))

    async def _checkpointing(self, connection: aiosqlite.Connection) -> None:
        """Copy the log back into the file every `checkpoint_every_s`, beside the writes, until
        cancelled (`close` closes its connection: a task cancelled before it ever ran runs no
        `finally`)."""
        failing = False
        while True:
            await asyncio.sleep(self.checkpoint_every_s)
            try:
                _, pages, _ = await (await connection.execute("PRAGMA wal_checkpoint(PASSIVE)")).fetchone()
                if pages > LOG_RESTART_PAGES:
                    async with self._write_lock:
                        await connection.execute("PRAGMA wal_checkpoint(RESTART)")
                failing = False
            except sqlite3.Error as failed:  # the disk full, say: the log grows and the next one tries
                if not failing:
                    log.warning("the SQLite log could not be copied back into %s: %s", self.path.name, failed)
                failing = True

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

    async def _connect(self) -> tuple[aiosqlite.Connection, sqlite3.Connection]:
        """A connection with its own thread, and the sqlite3 connection it wraps (the writer's runs
        short transactions inline; the writer's lock keeps its two users apart)."""
        connection = self._sqlite_connection(BUSY_TIMEOUT_MS, check_same_thread=False)
        return await aiosqlite.Connection(lambda: connection, iter_chunk_size=64), connection

    def _sqlite_connection(self, busy_timeout_ms: int, check_same_thread: bool) -> sqlite3.Connection:
        """A connection to the file; no statement has read it yet."""
        query = "&".join(f"{k}={v}" for k, v in self.options.items())
        target = f"file:{self.path}{'?' + query if query else ''}"
        connection = sqlite3.connect(target, uri=True, isolation_level=None, check_same_thread=check_same_thread)
        connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute(f"PRAGMA journal_size_limit = {LOG_FILE_KEPT_BYTES}")
        connection.execute("PRAGMA secure_delete = ON")  # deleted content is overwritten (SPEC 6: /forgetme)
        connection.row_factory = sqlite3.Row  # rows read by column name
        return connection

    async def _migrate(self) -> None:
        """Apply what is missing, in one transaction (one process migrates; the others wait, then
        see it done). A migration that rebuilds a table (REBUILD) runs in a transaction of its own
        with foreign keys off, since they cannot change within one, and they are checked before it
        commits."""
        db = self._writer
        assert db is not None
        (started_at,) = await (await db.execute("PRAGMA user_version")).fetchone()  # 0: a file made now
        try:
            while True:
                await db.execute("BEGIN IMMEDIATE")
                try:
                    (version,) = await (await db.execute("PRAGMA user_version")).fetchone()
                    pending = MIGRATIONS[version:]
                    rebuild = bool(pending) and pending[0].startswith(REBUILD)
                    (keys_on,) = await (await db.execute("PRAGMA foreign_keys")).fetchone()
                    if pending and rebuild == bool(keys_on):  # off for a rebuild, on for every other migration
                        await db.execute("ROLLBACK")
                        await db.execute(f"PRAGMA foreign_keys = {'OFF' if rebuild else 'ON'}")
                        continue
                    batch = pending[:1] if rebuild else list(takewhile(lambda s: not s.startswith(REBUILD), pending))
                    if rebuild and started_at:  # a file made now has nothing to copy, nothing to say
                        log.info("upgrading %s: its tables are copied anew once (a large file takes a while)",
                                 self.path.name)
                    for number, script in enumerate(batch, start=version + 1):
                        for statement in _statements(script):
                            await db.execute(statement)
                        await db.execute(f"PRAGMA user_version = {number}")
                    if rebuild and (broken := await (await db.execute("PRAGMA foreign_key_check")).fetchall()):
                        raise RuntimeError(f"a rebuilt table breaks {len(broken)} references, e.g. {broken[0]}")
                except BaseException:
                    await db.execute("ROLLBACK")
                    raise
                await db.execute("COMMIT")
                if not pending:
                    return
        finally:
            await db.execute("PRAGMA foreign_keys = ON")

    async def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.cancel()
            await asyncio.gather(self._checkpoints, return_exceptions=True)
            self._checkpoints = None
        # Taken from any transaction first: a short one runs on the writer's connection on this
        # thread, between its caller's awaits (a turn's failure written as the process stops), and
        # the connection closed on its thread beneath it would crash the process.
        async with self._write_lock:
            for db in (self._checkpointer, self._reader, self._writer):
                if db is not None:
                    await db.close()
            if self._short_reads is not None:
                self._short_reads.close()
            self._checkpointer = self._reader = self._writer = self._inline = self._short_reads = self.short = None

    @asynccontextmanager
    async def transaction(self, short: bool = False) -> AsyncIterator[Connection]:
        """One write transaction (`BEGIN IMMEDIATE`: one at a time, in every process); rolled
        back on any error. `short`: its statements and commit run inline (see above)."""
        async with self._write_lock:
            assert self._writer is not None and self._inline is not None, "store is not open"
            if not (short and self._begun_at_once()):
                await self._begin_on_thread()
            tx = _Inline(self._inline) if short else _On(self._writer)
            try:
                yield tx
            except BaseException:
                await tx.execute("ROLLBACK")
                raise
            await tx.execute("COMMIT")

    async def _begin_on_thread(self) -> None:
        """`BEGIN IMMEDIATE` on the writer's thread, where it may wait for another process's writer.
        Cancelled meanwhile, the statement still ends there: what it began is rolled back before
        the cancellation goes on, never left holding the file (every later write would fail)."""
        assert self._writer is not None
        begin = asyncio.ensure_future(self._writer.execute("BEGIN IMMEDIATE"))
        try:
            await asyncio.shield(begin)
        except asyncio.CancelledError:
            with contextlib.suppress(sqlite3.Error):  # it failed: nothing was begun
                await begin
                await self._writer.execute("ROLLBACK")
            raise

    def _begun_at_once(self) -> bool:
        """`BEGIN IMMEDIATE` inline, unless another process holds the file (then False, at once:
        SQLite's wait for it would stop the event loop)."""
        assert self._inline is not None
        self._inline.execute("PRAGMA busy_timeout = 0")
        try:
            self._inline.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as busy:
            if not _busy(busy):
                raise
            return False
        finally:
            self._inline.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    async def execute(self, sql: str, *params: Any) -> int:
        """One write statement, atomic on its own, on the writer's thread: how many rows it changed."""
        assert self._writer is not None, "store is not open"
        async with self._write_lock:
            return await _On(self._writer).execute(sql, *params)

    async def one(self, sql: str, *params: Any) -> Any | None:
        return await _On(self.reader).one(sql, *params)

    async def all(self, sql: str, *params: Any) -> list[Any]:
        return await _On(self.reader).all(sql, *params)

    async def value(self, sql: str, *params: Any) -> Any:
        return await _On(self.reader).value(sql, *params)

    async def process_alive(self, holder: str | None) -> bool:
        return holder_alive(holder)

    @property
    def reader(self) -> aiosqlite.Connection:
        assert self._reader is not None, "store is not open"
        return self._reader

    async def empty_the_log(self) -> None:
        """Copy the whole log back into the file and empty it (the daily upkeep; /forgetme, so that
        no deleted word stays in it). A checkpoint of another connection under way (the one in the
        background, another process's) makes SQLite say busy and do nothing: it is asked again."""
        assert self._writer is not None, "store is not open"
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        async with self._write_lock:
            while True:
                busy, _, _ = await (await self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")).fetchone()
                if not busy:
                    return
                if time.monotonic() > deadline:
                    log.warning("the SQLite log of %s could not be emptied in %d s: another connection kept it busy",
                                self.path.name, BUSY_TIMEOUT_MS // 1000)
                    return
                await asyncio.sleep(0.01)

    async def back_up(self, target: Path) -> None:
        """SQLite's online backup of the file into `target`: the file as it was at one moment,
        copied in steps by a connection of its own (the reader's reads go on meanwhile) that holds
        its read transaction throughout. Stepping without one, each write between two steps starts
        the copy over, and under a steady flow of turns it never ends.

        Cancelled (the process is stopping), the copy ends after the step under way, and only then
        is the file it writes closed (closed beneath SQLite's copy, it hung the process) and
        removed: `target` is named only when whole, so a half-made copy is never kept as a backup."""
        partial = target.with_name(target.name + ".part")
        stop = threading.Event()

        def stop_when_asked(status: int, remaining: int, total: int) -> None:
            if stop.is_set():
                raise _BackupStopped

        source, _ = await self._connect()
        try:
            await source.execute("BEGIN")
            await source.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # its first read fixes the moment
            async with aiosqlite.connect(partial) as destination:
                copy = asyncio.ensure_future(
                    source.backup(destination, pages=BACKUP_STEP_PAGES, progress=stop_when_asked))
                try:
                    await asyncio.shield(copy)
                except asyncio.CancelledError:
                    stop.set()
                    with contextlib.suppress(_BackupStopped):
                        await copy
                    raise
            partial.replace(target)
        finally:
            await source.close()
            partial.unlink(missing_ok=True)


class _BackupStopped(Exception):
    """Raised in the backup's progress callback: SQLite ends the copy at the step under way."""


class _On:
    """Statements on one connection, on its thread, `$1, $2, …` bound by number (SQLite reads
    `$1` as a named parameter called "1")."""

    __slots__ = ("connection",)

    def __init__(self, connection: aiosqlite.Connection):
        self.connection = connection

    async def execute(self, sql: str, *params: Any) -> int:
        return (await self.connection.execute(sql, _numbered(params))).rowcount

    async def all(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        return await self.connection.execute_fetchall(sql, _numbered(params))  # a list (cursor.fetchall)

    async def one(self, sql: str, *params: Any) -> sqlite3.Row | None:
        rows = await self.all(sql, *params)
        return rows[0] if rows else None

    async def value(self, sql: str, *params: Any) -> Any:
        rows = await self.all(sql, *params)
        return rows[0][0] if rows else None


class _Inline(_On):
    """A short transaction's statements on the writer's own sqlite3 connection (`connection`),
    run on the calling thread, the event loop's; bound, and read by `one` and `value`, as `_On`'s."""

    __slots__ = ()

    async def execute(self, sql: str, *params: Any) -> int:
        return self.connection.execute(sql, _numbered(params)).rowcount

    async def all(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        return self.connection.execute(sql, _numbered(params)).fetchall()


class _Short(_Inline):
    """Short reads, inline as `_Inline`'s statements, on a connection of their own that only
    reads (`connection`: a write there is SQLite's error); when SQLite says busy, on the reader's
    thread (`reader`)."""

    __slots__ = ("reader",)

    def __init__(self, connection: sqlite3.Connection, reader: aiosqlite.Connection):
        super().__init__(connection)
        self.reader = reader

    async def all(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        try:
            return await super().all(sql, *params)
        except sqlite3.OperationalError as busy:
            if not _busy(busy):
                raise
        return await _On(self.reader).all(sql, *params)


def _busy(error: sqlite3.OperationalError) -> bool:
    """SQLite said busy (SQLITE_BUSY, or one of its extended codes)."""
    return error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


NUMBERS = tuple(str(number) for number in range(1, 1000))  # "1" … "999": more than any statement binds


def _numbered(params: tuple) -> dict[str, Any]:
    if len(params) > len(NUMBERS):  # a list of ids is one parameter (Dialect.ids): never this many
        raise ValueError(f"a statement with {len(params)} parameters")
    return dict(zip(NUMBERS, params))


class SQLiteDialect(Dialect):
    for_update = for_key_share = ""  # a write transaction holds the whole file
    unique_violation = (sqlite3.IntegrityError,)
    deadlock = ()  # one writer at a time: nothing to wait for in a cycle

    def in_ids(self, number: int) -> str:
        return f"IN (SELECT value FROM json_each(${number}))"

    def ids(self, values) -> str:
        return json.dumps(list(values))

    async def serialize(self, tx: Connection, key: str) -> None:
        """Nothing to do: SQLite has one writer at a time, in every process."""


def new_holder() -> str:
    """This process, as the database knows it: `host:pid:nonce`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_alive(holder: str | None) -> bool:
    """False only when the holder is a process of this machine that is gone (or no process of
    this backend's making: a holder copied from another database). Every process sharing an
    SQLite file runs on one machine, so this is asked of the operating system."""
    host, pid, _ = ((holder or "").split(":", 2) + ["", ""])[:3]
    if not pid.isdigit():
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


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
