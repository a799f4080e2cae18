"""The half of the Vectors port both backends share: the model in use, and the messages waiting
to be embedded (kept by triggers of each backend's migrations). A backend keeps the vectors."""

from __future__ import annotations

from storage.ports import Vectors
from storage.sql.database import Database


class WaitingVectors(Vectors):
    def __init__(self, db: Database):
        self.db = db

    async def _ready(self) -> bool:
        """Whether this database can keep vectors (made ready if it can)."""
        return True

    async def use_model(self, model: str) -> bool:
        if not await self._ready():
            return False
        async with self.db.transaction() as tx:
            await self.db.dialect.serialize(tx, "vector_model")
            if await tx.value("SELECT model FROM vector_model") == model:
                return True
            await tx.execute("DELETE FROM vector_model")
            await tx.execute("INSERT INTO vector_model (model) VALUES ($1)", model)
            await tx.execute("DELETE FROM message_vectors")  # another model's vectors compare with nothing
            await tx.execute("INSERT INTO vectors_waiting (message_id) SELECT id FROM messages WHERE true "
                             "ON CONFLICT DO NOTHING")
        return True

    async def waiting(self, limit: int) -> list[tuple[int, str]]:
        rows = await self.db.all("SELECT m.id, m.content FROM vectors_waiting w JOIN messages m ON m.id = w.message_id "
                                 "ORDER BY w.message_id DESC LIMIT $1", limit)
        return [(row["id"], row["content"]) for row in rows]

    async def count_waiting(self) -> int:
        return await self.db.value("SELECT COUNT(*) FROM vectors_waiting")
