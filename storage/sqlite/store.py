"""The SQLite store: one file, every port on it (storage/sql/), FTS5 recall, numpy vectors, and
SQLite's own upkeep."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import AsyncIterator, Callable

from storage.ports import Coordination, MemoryCaps
from storage.sql.people import SQLPeople
from storage.sql.store import SQLStore
from storage.sqlite.database import Database, new_holder
from storage.sqlite.recall import SQLiteRecall
from storage.sqlite.vectors import SQLiteVectors

log = logging.getLogger(__name__)
BACKUPS_KEPT = 7
BACKUPS_LEASE_S = 60.0  # renewed while held; lapses this long after a holder hangs


class BackupFolder:
    """The folder of the daily backups, taken by one backup or one `/forgetme` at a time: a
    backup made while `/forgetme` went through the folder would copy the person from the live
    file after their backups were cleaned. Taken in every process by a lease in the database, and
    in this one by a lock too (a lease is its holder's, however many of the process's tasks ask)."""

    def __init__(self, path: Path, coordination: Coordination):
        self.path = path
        self.coordination = coordination
        self._in_this_process = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Path]:
        """The folder, once no other backup or `/forgetme` holds it (waits its turn). A half-made
        copy found then is one a killed process left (no copy is under way): it goes, as it
        may hold the words of a person since forgotten."""
        async with self._in_this_process:
            while True:
                async with self.coordination.claim("backups", BACKUPS_LEASE_S) as mine:
                    if mine:
                        for left in self.path.glob("keepsake-*.sqlite3.part"):
                            left.unlink(missing_ok=True)
                        yield self.path
                        return
                await asyncio.sleep(0.1)


class SQLitePeople(SQLPeople):
    """Forgetting a person leaves none of their words in the file: deleted pages are overwritten
    (`secure_delete`), the full-text index is merged without their entries, and the write-ahead
    log that still holds them is checkpointed and truncated. Nor in the daily backups (`backups`,
    the folder; None: a backup's own store): each is forgotten in the same way first, so a stop
    in between leaves the person not yet forgotten, able to ask again. No backup is made meanwhile
    (`BackupFolder`): until the live file is forgotten too, it would copy the person anew."""

    db: Database

    def __init__(self, db: Database, caps: MemoryCaps, backups: BackupFolder | None):
        super().__init__(db, caps)
        self.backups = backups

    async def forget_person(self, person_id: int, day: str) -> list[int]:
        if self.backups is None:  # a backup's own store
            return await self._forget_here(person_id, day)
        async with self.backups.held() as folder:
            identities = await self.identities_of(person_id)
            for backup in sorted(folder.glob("keepsake-*.sqlite3")):
                try:
                    await _forget_in_backup(backup, identities, day, self.caps)
                except sqlite3.DatabaseError as broken:  # no backup to restore, and it may hold them
                    log.warning("the backup %s could not be opened to forget a person in it (%s): it is deleted",
                                backup.name, broken)
                    backup.unlink(missing_ok=True)
            return await self._forget_here(person_id, day)

    async def _forget_here(self, person_id: int, day: str) -> list[int]:
        shared = await super().forget_person(person_id, day)
        async with self.db.transaction() as tx:
            await tx.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
        await self.db.empty_the_log()
        return shared


class SQLiteStore(SQLStore):
    db: Database

    def __init__(self, db: Database, caps: MemoryCaps, holder: str, recall: SQLiteRecall, vectors: SQLiteVectors,
                 backups: Path | None):
        super().__init__(db, caps, holder, recall, vectors)
        recall.crowded = self.turns.others_running  # a lone turn searches inline (storage/sqlite/recall.py)
        self.backups = BackupFolder(backups, self.coordination) if backups is not None else None
        self.people = SQLitePeople(db, caps, self.backups)

    @classmethod
    async def open(cls, path: Path, caps: MemoryCaps, options: dict[str, str] | None = None,
                   clock: Callable[[], float] = time.time, backup_dir: Path | None = None) -> "SQLiteStore":
        """The store of the file at `path`; its daily backups go to `backup_dir` (by default the
        folder `backups` beside it)."""
        db = Database(path, options, clock)
        await db.open()
        return cls.on(db, caps, backup_dir or path.parent / "backups")

    @classmethod
    def on(cls, db: Database, caps: MemoryCaps, backups: Path | None) -> "SQLiteStore":
        """The store of an open database (`backups`: its backup folder; None: it is a backup)."""
        return cls(db, caps, new_holder(), SQLiteRecall(db), SQLiteVectors(db), backups)

    async def maintain(self, now: float, retention_days: int | None) -> str:
        await self.db.empty_the_log()
        assert self.backups is not None, "a backup's own store makes no backups"
        async with self.backups.held() as folder:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"keepsake-{datetime.fromtimestamp(now, timezone.utc):%Y%m%d-%H%M%S}.sqlite3"
            await self.db.back_up(target)
            for old in sorted(folder.glob("keepsake-*.sqlite3"))[:-BACKUPS_KEPT]:
                old.unlink(missing_ok=True)
        purged = await self.purge(now, retention_days)
        return f"backup {target.name}, {purged} old messages purged"


async def _forget_in_backup(path: Path, identities: list[tuple[str, str]], day: str, caps: MemoryCaps) -> None:
    """Forget the person of `identities` in the backup at `path` (found by each identity: a backup
    from before a `/link` holds two persons). Their words leave the summaries too (`forget_person`),
    and a restored backup summarizes them again from what is left."""
    db = Database(path)
    try:
        await db.open()  # closed after, even when it fails half-way
        backup = SQLiteStore.on(db, caps, backups=None)
        persons = {await backup.people.person_of_identity(platform, user_id) for platform, user_id in identities}
        for person_id in sorted(persons - {None}):
            await backup.people.forget_person(person_id, day)
        for platform, user_id in identities:  # nor their platform ids, kept live for the day's allowance
            await db.execute("DELETE FROM forgotten_spend WHERE platform = $1 AND user_id = $2", platform, user_id)
    finally:
        await db.close()
