"""The SQLite store: one file, every port on it, and SQLite's own upkeep."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import aiosqlite

from storage.ports import ANSWER_ORIGINS_KEPT_S, DELIVERIES_KEPT_S, MemoryCaps, Store
from storage.sqlite.coordination import SQLiteCoordination, new_holder
from storage.sqlite.conversations import SQLiteConversations
from storage.sqlite.database import Database
from storage.sqlite.drafts import SQLiteDrafts
from storage.sqlite.memories import SQLiteMemories
from storage.sqlite.people import SQLiteCharacters, SQLitePeople
from storage.sqlite.recall import SQLiteRecall
from storage.sqlite.summaries import SQLiteSummaries
from storage.sqlite.turns import SQLiteTurns
from storage.sqlite.vectors import SQLiteVectors

BACKUPS_KEPT = 7


class SQLiteStore(Store):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        holder = new_holder()
        self.people = SQLitePeople(db, caps)
        self.characters = SQLiteCharacters(db, caps)
        self.conversations = SQLiteConversations(db)
        self.turns = SQLiteTurns(db, holder)
        self.memories = SQLiteMemories(db, caps)
        self.summaries = SQLiteSummaries(db)
        self.drafts = SQLiteDrafts(db)
        self.recall = SQLiteRecall(db)
        self.vectors = SQLiteVectors(db)
        self.coordination = SQLiteCoordination(db, holder)

    @classmethod
    async def open(cls, path: Path, caps: MemoryCaps, options: dict[str, str] | None = None,
                   clock: Callable[[], float] = time.time) -> "SQLiteStore":
        db = Database(path, options, clock)
        await db.open()
        return cls(db, caps)

    async def close(self) -> None:
        await self.db.close()

    async def maintain(self, now: float, retention_days: int | None, backup_dir: Path | None) -> str:
        async with self.db.locked_writer() as writer:
            await writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        folder = backup_dir or self.db.path.parent / "backups"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"keepsake-{datetime.fromtimestamp(now, timezone.utc):%Y%m%d-%H%M%S}.sqlite3"
        async with aiosqlite.connect(target) as destination:
            await self.db.reader.backup(destination)
        for old in sorted(folder.glob("keepsake-*.sqlite3"))[:-BACKUPS_KEPT]:
            old.unlink(missing_ok=True)
        await self.db.execute("DELETE FROM answer_origins WHERE created_at < ?", (now - ANSWER_ORIGINS_KEPT_S,))
        await self.db.execute("DELETE FROM deliveries WHERE seen_at < ?", (now - DELIVERIES_KEPT_S,))
        await self.db.execute("DELETE FROM model_calls WHERE at < ?", (now - 86_400,))
        purged = 0
        if retention_days:
            cursor = await self.db.execute(
                "DELETE FROM messages WHERE created_at < ? AND pos <= "
                "(SELECT summarized_pos FROM conversations c WHERE c.id = messages.conversation_id) "
                "AND id NOT IN (SELECT user_message_id FROM turns WHERE status = 'running') "
                "AND id NOT IN (SELECT user_message_id FROM turn_queue)",
                (now - retention_days * 86_400,))
            purged = cursor.rowcount
        return f"backup {target.name}, {purged} old messages purged"
