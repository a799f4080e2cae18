"""Message vectors in SQLite (the Vectors port, migration 10): float16 blobs (half the bytes a
turn reads; plenty for ranking by cosine), scored with numpy against the turn's vector — the
conversation's newest NEAREST_SCAN_LIMIT before the window."""

from __future__ import annotations

import numpy as np

from storage.ports import NEAREST_SCAN_LIMIT, Vectors
from storage.sqlite.database import Database, fetch_one


class SQLiteVectors(Vectors):
    def __init__(self, db: Database):
        self.db = db

    async def use_model(self, model: str) -> bool:
        async with self.db.write() as db:
            current = await fetch_one(db, "SELECT model FROM vector_model")
            if current is not None and current[0] == model:
                return True
            await db.execute("DELETE FROM vector_model")
            await db.execute("INSERT INTO vector_model (model) VALUES (?)", (model,))
            await db.execute("DELETE FROM message_vectors")
            await db.execute("INSERT OR IGNORE INTO vectors_waiting (message_id) SELECT id FROM messages")
        return True

    async def waiting(self, limit: int) -> list[tuple[int, str]]:
        rows = await self.db.all("SELECT m.id, m.content FROM vectors_waiting w JOIN messages m ON m.id = w.message_id "
                                 "ORDER BY w.message_id DESC LIMIT ?", (limit,))
        return [(row[0], row[1]) for row in rows]

    async def count_waiting(self) -> int:
        return (await self.db.one("SELECT COUNT(*) FROM vectors_waiting"))[0]

    async def save(self, model: str, vectors: list[tuple[int, str, list[float]]]) -> None:
        async with self.db.write() as db:
            if await fetch_one(db, "SELECT 1 FROM vector_model WHERE model = ?", (model,)) is None:
                return
            for message_id, text, vector in vectors:
                cursor = await db.execute(
                    "INSERT OR REPLACE INTO message_vectors (message_id, conversation_id, pos, vector) "
                    "SELECT id, conversation_id, pos, ? FROM messages WHERE id = ? AND content = ?",
                    (np.asarray(vector, dtype=np.float16).tobytes(), message_id, text))
                if cursor.rowcount:
                    await db.execute("DELETE FROM vectors_waiting WHERE message_id = ?", (message_id,))

    async def nearest(self, conversation_id: int, vector: list[float], before_pos: int, limit: int) -> list[int]:
        rows = await self.db.all("SELECT pos, vector FROM message_vectors WHERE conversation_id = ? AND pos < ? "
                                 "ORDER BY pos DESC LIMIT ?", (conversation_id, before_pos, NEAREST_SCAN_LIMIT))
        query = np.asarray(vector, dtype=np.float16)
        rows = [row for row in rows if len(row[1]) == query.nbytes]  # a vector of another size: not comparable
        if not rows:
            return []
        matrix = np.frombuffer(b"".join([row[1] for row in rows]), dtype=np.float16).reshape(len(rows), -1)
        scores = matrix.astype(np.float32) @ query.astype(np.float32)
        best = np.argsort(-scores, kind="stable")[:limit]
        return [rows[i][0] for i in best]
