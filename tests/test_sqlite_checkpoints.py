"""SQLite's write-ahead log is copied back into the file by a connection of its own, beside the
writes, never by a commit (storage/sqlite/database.py): SQLite's own way copies it in the commit
that takes the log past 1,000 pages, and that commit waits for the disk while every turn waits
on the one writer."""

import asyncio
import contextlib
import gc
import sqlite3
import time
import warnings
from typing import AsyncIterator

from storage.sqlite.database import LOG_FILE_KEPT_BYTES, Database

PAGE = 4096  # SQLite's page size


async def write_megabytes(db: Database, megabytes: int, name: str = "filler") -> None:
    """Rows of 4 KB in one transaction: about 256 pages of the log a megabyte."""
    async with db.transaction() as tx:
        for n in range(megabytes * 256):
            await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", f"{name} {n}", "x" * (PAGE - 200))


async def test_a_commit_never_copies_the_log_back_into_the_file(tmp_path):
    db = Database(tmp_path / "keepsake.sqlite3", checkpoint_every_s=3600)  # the background copy far off
    await db.open()
    try:
        before = db.path.stat().st_size
        await write_megabytes(db, 6)  # 1,536 pages: past SQLite's own 1,000
        assert db.path.stat().st_size == before
        assert (tmp_path / "keepsake.sqlite3-wal").stat().st_size > 6 * 2**20
    finally:
        await db.close()


async def test_a_store_closed_as_soon_as_it_opened_closes_the_background_copys_connection_too(tmp_path):
    """As a start-up that fails right after the store opened closes it: the copy's task never
    ran, and its connection is closed with the others, not left to the garbage collector (whose
    stopping its thread once the event loop is closed was an error on that thread)."""
    gc.collect()  # what earlier tests left is not this one's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        db = Database(tmp_path / "keepsake.sqlite3")
        await db.open()
        await db.close()
        del db
        gc.collect()
    assert [str(w.message) for w in caught if "aiosqlite" in str(w.message)] == []  # "… deleted before being closed"


async def test_the_log_is_copied_back_into_the_file_in_the_background(tmp_path):
    db = Database(tmp_path / "keepsake.sqlite3", checkpoint_every_s=0.05)
    await db.open()
    try:
        before = db.path.stat().st_size
        await write_megabytes(db, 2)  # 512 pages: SQLite's own way would leave them in the log
        deadline = time.monotonic() + 10
        while db.path.stat().st_size < before + 2 * 2**20 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert db.path.stat().st_size >= before + 2 * 2**20
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def a_reader_holding_the_log(tmp_path, checkpoint_every_s: float = 3600,
                                   ) -> AsyncIterator[tuple[Database, sqlite3.Connection]]:
    """The store, with 2 MB in its log, half of it written after another process's reader began:
    that reader's snapshot holds the log until it commits."""
    db = Database(tmp_path / "keepsake.sqlite3", checkpoint_every_s=checkpoint_every_s)
    await db.open()
    reader = sqlite3.connect(db.path, isolation_level=None)  # another process, reading
    try:
        await write_megabytes(db, 1)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM meta").fetchone()
        await write_megabytes(db, 1, "later")
        yield db, reader
    finally:
        reader.close()
        await db.close()


def log_size(db: Database) -> int:
    return db.path.with_name(db.path.name + "-wal").stat().st_size


async def test_the_log_is_emptied_for_forgetme_once_another_processs_reader_lets_go(tmp_path):
    """SPEC 6, /forgetme leaves no deleted word in the log: emptying it waits for a reader of
    another process (which still sees the log) and the log is empty afterwards."""
    async with a_reader_holding_the_log(tmp_path) as (db, reader):
        emptying = asyncio.create_task(db.empty_the_log())
        await asyncio.sleep(0.3)
        assert not emptying.done()  # the reader still sees the log
        reader.execute("COMMIT")
        await asyncio.wait_for(emptying, 10)
        assert log_size(db) == 0


async def test_the_log_is_emptied_for_forgetme_after_another_processs_checkpoint_under_way(tmp_path):
    """SPEC 6, /forgetme leaves no deleted word in the log: while another process's checkpoint is
    under way (it waits for a reader), SQLite answers the emptying busy at once; it is asked
    again until that checkpoint is done, and the log is empty afterwards."""
    async with a_reader_holding_the_log(tmp_path) as (db, reader):
        other = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)  # another process's upkeep
        other.execute("PRAGMA busy_timeout = 10000")
        checkpoint = asyncio.create_task(asyncio.to_thread(other.execute, "PRAGMA wal_checkpoint(TRUNCATE)"))
        try:
            await asyncio.sleep(0.2)  # it holds the checkpoint's lock, waiting for the reader
            emptying = asyncio.create_task(db.empty_the_log())
            await asyncio.sleep(0.3)
            assert not emptying.done()  # busy: asked again
            reader.execute("COMMIT")
            await asyncio.wait_for(emptying, 10)
            assert log_size(db) == 0
        finally:
            if reader.in_transaction:
                reader.execute("COMMIT")
            await checkpoint  # done on its thread before its connection closes
            other.close()


async def test_the_log_starts_over_while_writes_come_back_to_back(tmp_path, monkeypatch):
    """A log copied back only beside the writes is never wholly copied at the moment a write
    begins, and SQLite starts it over only then: with writes back to back (a saturated bot) it
    grew by 84 MB every 500 turns. Past LOG_RESTART_PAGES the copy holds this process's writes
    for its last pages, and the log starts over."""
    monkeypatch.setattr("storage.sqlite.database.LOG_RESTART_PAGES", 256)  # 1 MB, for a short test
    db = Database(tmp_path / "keepsake.sqlite3", checkpoint_every_s=0.02)
    await db.open()
    try:
        largest = 0
        for n in range(5_000):  # rows of 4 KB, each in a transaction of its own: 80 MB of the log
            async with db.transaction(short=True) as tx:
                await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", f"row {n}", "x" * (PAGE - 200))
            largest = max(largest, log_size(db))
            await asyncio.sleep(0)  # the background copy runs between the writes, as a turn's awaits let it
        # the log starts over every few MB: 10-13 MB at most here, more when other work shares the
        # disk (17 MB once in CI); without it, 84 MB and growing
        assert largest < 32 * 2**20
    finally:
        await db.close()


async def test_a_log_that_grew_while_a_reader_held_it_is_cut_back_once_it_starts_over(tmp_path, monkeypatch):
    """A reader of another process holds the log (it cannot start over beneath its snapshot), so
    the log grows past LOG_RESTART_PAGES; once it lets go, the log starts over and its file is
    cut back to LOG_FILE_KEPT_BYTES (4 MB), not kept at the largest it ever was."""
    monkeypatch.setattr("storage.sqlite.database.LOG_RESTART_PAGES", 256)  # 1 MB
    async with a_reader_holding_the_log(tmp_path, checkpoint_every_s=0.02) as (db, reader):
        await write_megabytes(db, 8, "while held")
        await asyncio.sleep(0.1)  # copies tried meanwhile: the reader holds the log
        assert log_size(db) > 10 * 2**20
        reader.execute("COMMIT")
        deadline = time.monotonic() + 10
        while log_size(db) > LOG_FILE_KEPT_BYTES and time.monotonic() < deadline:  # a bot writing on
            async with db.transaction(short=True) as tx:
                await tx.execute("INSERT INTO meta (key, value) VALUES ('after', $1) "
                                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value", str(time.monotonic()))
            await asyncio.sleep(0.01)
        assert log_size(db) <= LOG_FILE_KEPT_BYTES
