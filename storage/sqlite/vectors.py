"""Message vectors in SQLite (the Vectors port, migration 10): float16 blobs (half the bytes a
turn reads; plenty for ranking by cosine), scored with numpy against the turn's vector — the
conversation's newest NEAREST_SCAN_LIMIT before the window. numpy loads with the first vector:
a bot without recall by meaning never pays its start-up."""

from __future__ import annotations

from storage.ports import NEAREST_SCAN_LIMIT
from storage.sql.presence import seen, seen_args
from storage.sql.vectors import WaitingVectors


class SQLiteVectors(WaitingVectors):
    async def save(self, model: str, vectors: list[tuple[int, str, list[float]]]) -> None:
        import numpy as np

        async with self.db.transaction() as tx:
            if await tx.value("SELECT 1 FROM vector_model WHERE model = $1", model) is None:
                return
            for message_id, text, vector in vectors:
                if await tx.execute(
                        "INSERT OR REPLACE INTO message_vectors (message_id, conversation_id, pos, vector) "
                        "SELECT id, conversation_id, pos, $1 FROM messages WHERE id = $2 AND content = $3",
                        np.asarray(vector, dtype=np.float16).tobytes(), message_id, text):
                    await tx.execute("DELETE FROM vectors_waiting WHERE message_id = $1", message_id)

    async def nearest(self, conversation_id: int, vector: list[float], before_pos: int, limit: int,
                      seen_by: int | None = None) -> list[int]:
        import numpy as np

        rows = await self.db.all(
            "SELECT pos, vector FROM message_vectors WHERE conversation_id = $1 AND pos < $2"
            f"{seen(seen_by, 4, 'message_vectors.message_id')} ORDER BY pos DESC LIMIT $3",
            conversation_id, before_pos, NEAREST_SCAN_LIMIT, *seen_args(seen_by))
        query = np.asarray(vector, dtype=np.float16)
        rows = [row for row in rows if len(row[1]) == query.nbytes]  # a vector of another size: not comparable
        if not rows:
            return []
        matrix = np.frombuffer(b"".join([row[1] for row in rows]), dtype=np.float16).reshape(len(rows), -1)
        scores = matrix.astype(np.float32) @ query.astype(np.float32)
        best = np.argsort(-scores, kind="stable")[:limit]
        return [rows[i][0] for i in best]
