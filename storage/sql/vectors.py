"""The half of the Vectors port both backends share: the messages waiting to be embedded (kept
by triggers of each backend's migrations)."""

from __future__ import annotations

from storage.ports import Vectors
from storage.sql.database import Database


class WaitingVectors(Vectors):
    def __init__(self, db: Database):
        self.db = db

    async def waiting(self, limit: int) -> list[tuple[int, str]]:
        rows = await self.db.all("SELECT m.id, m.content FROM vectors_waiting w JOIN messages m ON m.id = w.message_id "
                                 "ORDER BY w.message_id DESC LIMIT $1", limit)
        return [(row["id"], row["content"]) for row in rows]

    async def count_waiting(self) -> int:
        return await self.db.value("SELECT COUNT(*) FROM vectors_waiting")
