"""The PostgreSQL store: one database shared by any number of processes, every port on it
(storage/sql/), tsvector recall, pgvector vectors, and PostgreSQL's own upkeep."""

from __future__ import annotations

import time
from typing import Callable

from storage.ports import MemoryCaps
from storage.postgres.database import Database
from storage.postgres.recall import PostgresRecall
from storage.postgres.vectors import PostgresVectors
from storage.sql.store import SQLStore


class PostgresStore(SQLStore):
    db: Database

    @classmethod
    async def open(cls, dsn: str, schema: str | None, caps: MemoryCaps,
                   clock: Callable[[], float] = time.time) -> "PostgresStore":
        db = Database(dsn, schema, clock)
        await db.open()
        return cls(db, caps, str(db.process_id), PostgresRecall(db), PostgresVectors(db))

    async def maintain(self, now: float, retention_days: int | None) -> str:
        """The retention purge, forgetting gone processes and fresh planner statistics. Backups of
        a PostgreSQL database are its operator's (pg_dump or the server's own), so none is made."""
        purged = await self.purge(now, retention_days)
        await self.db.execute("ANALYZE")  # fresh planner statistics (autovacuum's too, but not timed)
        gone = [row["id"] for row in await self.db.all("SELECT id FROM processes WHERE id <> $1", self.db.process_id)
                if not await self.db.process_alive(str(row["id"]))]
        await self.db.execute("DELETE FROM processes WHERE id = ANY($1::bigint[])", gone)
        return f"{purged} old messages purged, {len(gone)} gone processes forgotten (back up PostgreSQL with pg_dump)"
