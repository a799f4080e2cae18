"""The SQLite store: one file, every port on it (storage/sql/), FTS5 recall, numpy vectors, and
SQLite's own upkeep."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from storage.ports import MemoryCaps
from storage.sql.people import SQLPeople
from storage.sql.store import SQLStore
from storage.sqlite.database import Database, new_holder
from storage.sqlite.recall import SQLiteRecall
from storage.sqlite.vectors import SQLiteVectors

BACKUPS_KEPT = 7


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
        await self.db.back_up(target)
        for old in sorted(folder.glob("keepsake-*.sqlite3"))[:-BACKUPS_KEPT]:
            old.unlink(missing_ok=True)
        purged = await self.purge(now, retention_days)
        return f"backup {target.name}, {purged} old messages purged"
