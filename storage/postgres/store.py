"""The PostgreSQL store: one database shared by any number of processes, every port on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from storage.ports import ANSWER_ORIGINS_KEPT_S, DELIVERIES_KEPT_S, MemoryCaps, Store
from storage.postgres.conversations import PostgresConversations
from storage.postgres.coordination import PostgresCoordination
from storage.postgres.database import Database
from storage.postgres.drafts import PostgresDrafts
from storage.postgres.memories import PostgresMemories
from storage.postgres.people import PostgresCharacters, PostgresPeople
from storage.postgres.recall import PostgresRecall
from storage.postgres.summaries import PostgresSummaries
from storage.postgres.turns import PostgresTurns
from storage.postgres.vectors import PostgresVectors


class PostgresStore(Store):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        holder = str(db.process_id)
        self.people = PostgresPeople(db, caps)
        self.characters = PostgresCharacters(db, caps)
        self.conversations = PostgresConversations(db)
        self.turns = PostgresTurns(db, holder)
        self.memories = PostgresMemories(db, caps)
        self.summaries = PostgresSummaries(db)
        self.drafts = PostgresDrafts(db)
        self.recall = PostgresRecall(db)
        self.vectors = PostgresVectors(db)
        self.coordination = PostgresCoordination(db, holder)

    @classmethod
    async def open(cls, dsn: str, schema: str | None, caps: MemoryCaps,
                   clock: Callable[[], float] = time.time) -> "PostgresStore":
        db = Database(dsn, schema, clock)
        await db.open()
        return cls(db, caps)

    async def close(self) -> None:
        await self.db.close()

    async def maintain(self, now: float, retention_days: int | None, backup_dir: Path | None) -> str:
        """The retention purge, forgetting gone processes and fresh planner statistics. Backups of
        a PostgreSQL database are its operator's (pg_dump or the server's own), so none is made."""
        await self.db.execute("DELETE FROM answer_origins WHERE created_at < $1", now - ANSWER_ORIGINS_KEPT_S)
        await self.db.execute("DELETE FROM deliveries WHERE seen_at < $1", now - DELIVERIES_KEPT_S)
        await self.db.execute("DELETE FROM model_calls WHERE at < $1", now - 86_400)
        await self.db.execute("ANALYZE")  # fresh planner statistics (autovacuum's too, but not timed)
        gone = [pid for (pid,) in await self.db.all("SELECT id FROM processes WHERE id <> $1", self.db.process_id)
                if not await self.db.process_alive(str(pid))]
        await self.db.execute("DELETE FROM processes WHERE id = ANY($1::bigint[])", gone)
        purged = 0
        if retention_days:
            purged = await self.db.execute(
                "DELETE FROM messages m USING conversations c WHERE c.id = m.conversation_id "
                "AND m.created_at < $1 AND m.pos <= c.summarized_pos "
                "AND m.id NOT IN (SELECT user_message_id FROM turns WHERE status = 'running') "
                "AND m.id NOT IN (SELECT user_message_id FROM turn_queue)",
                now - retention_days * 86_400)
        return f"{purged} old messages purged, {len(gone)} gone processes forgotten (back up PostgreSQL with pg_dump)"
