"""The SQLite store: one file, every port on it (storage/sql/), FTS5 recall, numpy vectors, and
SQLite's own upkeep."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import aiosqlite

from storage.ports import MemoryCaps
from storage.sql.people import SQLPeople
from storage.sql.store import SQLStore
from storage.sqlite.database import Database, new_holder
from storage.sqlite.recall import SQLiteRecall
from storage.sqlite.vectors import SQLiteVectors

BACKUPS_KEPT = 7
BACKUP_STEP_PAGES = 1024  # 4 MB a step: a stop waits for one step, not for the whole copy


class SQLitePeople(SQLPeople):
    """Forgetting a person leaves none of their words in the file: deleted pages are overwritten
    (`secure_delete`), the full-text index is merged without their entries, and the write-ahead
    log that still holds them is checkpointed and truncated."""

    db: Database

    async def forget_person(self, person_id: int, day: str) -> list[int]:
        shared = await super().forget_person(person_id, day)
        async with self.db.transaction() as tx:
            await tx.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
        await self.db.empty_the_log()
        return shared


class SQLiteStore(SQLStore):
    db: Database

    def __init__(self, db: Database, caps: MemoryCaps, holder: str, recall: SQLiteRecall, vectors: SQLiteVectors):
        super().__init__(db, caps, holder, recall, vectors)
        self.people = SQLitePeople(db, caps)

    @classmethod
    async def open(cls, path: Path, caps: MemoryCaps, options: dict[str, str] | None = None,
                   clock: Callable[[], float] = time.time) -> "SQLiteStore":
        db = Database(path, options, clock)
        await db.open()
        return cls(db, caps, new_holder(), SQLiteRecall(db), SQLiteVectors(db))

    async def maintain(self, now: float, retention_days: int | None, backup_dir: Path | None) -> str:
        await self.db.empty_the_log()
        folder = backup_dir or self.db.path.parent / "backups"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"keepsake-{datetime.fromtimestamp(now, timezone.utc):%Y%m%d-%H%M%S}.sqlite3"
        for left in folder.glob("keepsake-*.sqlite3.part"):  # a copy a killed process left half done
            left.unlink(missing_ok=True)
        await self._back_up_to(target)
        for old in sorted(folder.glob("keepsake-*.sqlite3"))[:-BACKUPS_KEPT]:
            old.unlink(missing_ok=True)
        purged = await self.purge(now, retention_days)
        return f"backup {target.name}, {purged} old messages purged"

    async def _back_up_to(self, target: Path) -> None:
        """SQLite's online backup of the file into `target`, in steps on the reader's thread.
        Cancelled (the process is stopping), the copy ends after the step under way, and only then
        is the file it writes closed (closed beneath SQLite's backup, it hung the process) and
        removed: a half-made copy is never named as a backup, nor counted among the ones kept."""
        partial = target.with_name(target.name + ".part")
        stop = threading.Event()

        def stop_when_asked(status: int, remaining: int, total: int) -> None:
            if stop.is_set():
                raise _BackupStopped

        try:
            async with aiosqlite.connect(partial) as destination:
                copy = asyncio.ensure_future(
                    self.db.reader.backup(destination, pages=BACKUP_STEP_PAGES, progress=stop_when_asked))
                try:
                    await asyncio.shield(copy)
                except asyncio.CancelledError:
                    stop.set()
                    with contextlib.suppress(_BackupStopped):
                        await copy
                    raise
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)


class _BackupStopped(Exception):
    """Raised in the backup's progress callback: SQLite ends the copy at the step under way."""
