"""Message vectors in PostgreSQL (the Vectors port), with the pgvector extension: a `vector`
column, searched by cosine distance inside one conversation. Without the extension (it must be
installed on the server, and creatable by this role) `use_model` says no and recall stays
full-text. The table is made on first use, under the migration lock, since it needs the
extension's type; the type and operator are named with the extension's schema, wherever it
was created."""

from __future__ import annotations

import logging

import asyncpg

from storage.postgres.database import MIGRATION_LOCK, Database
from storage.sql.presence import seen, seen_args
from storage.sql.vectors import WaitingVectors

log = logging.getLogger(__name__)


def _literal(vector: list[float]) -> str:
    """pgvector's text form of a vector: '[0.1,0.2,…]'."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PostgresVectors(WaitingVectors):
    def __init__(self, db: Database):
        super().__init__(db)
        self.extension_schema: str | None = None  # where pgvector lives, once it is in use

    async def _ready(self) -> bool:
        """Create pgvector and the vectors' table if they are missing; False when it cannot."""
        if self.extension_schema is not None:
            return True
        if not await self.db.value("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"):
            return False
        assert self.db.pool is not None
        async with self.db.pool.acquire() as db:
            await db.execute("SELECT pg_advisory_lock($1, $2)", self.db.namespace, MIGRATION_LOCK)
            try:
                await db.execute("CREATE EXTENSION IF NOT EXISTS vector")
                schema = await db.fetchval("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                                           "ON n.oid = e.extnamespace WHERE e.extname = 'vector'")
                await db.execute(
                    "CREATE TABLE IF NOT EXISTS message_vectors ("
                    " message_id BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,"
                    " conversation_id BIGINT NOT NULL, pos BIGINT NOT NULL,"
                    f' embedding "{schema}".vector NOT NULL);'
                    "CREATE INDEX IF NOT EXISTS message_vectors_place ON message_vectors (conversation_id, pos)")
            except asyncpg.PostgresError as refused:  # no privilege to create it, most often
                log.info("pgvector could not be set up: %s", refused)
                return False
            finally:
                await db.execute("SELECT pg_advisory_unlock($1, $2)", self.db.namespace, MIGRATION_LOCK)
        self.extension_schema = schema
        return True

    async def save(self, model: str, vectors: list[tuple[int, str, list[float]]]) -> None:
        schema = self.extension_schema
        async with self.db.transaction() as tx:
            if not await tx.value("SELECT 1 FROM vector_model WHERE model = $1", model):
                return
            for message_id, text, vector in vectors:
                saved = await tx.execute(
                    "INSERT INTO message_vectors (message_id, conversation_id, pos, embedding) "
                    f'SELECT id, conversation_id, pos, $3::"{schema}".vector FROM messages WHERE id = $1 AND content = $2 '
                    "ON CONFLICT (message_id) DO UPDATE SET embedding = excluded.embedding",
                    message_id, text, _literal(vector))
                if saved:
                    await tx.execute("DELETE FROM vectors_waiting WHERE message_id = $1", message_id)

    async def nearest(self, conversation_id: int, vector: list[float], before_pos: int, limit: int,
                      seen_by: int | None = None) -> list[int]:
        schema = self.extension_schema
        rows = await self.db.all(
            f"SELECT pos FROM message_vectors WHERE conversation_id = $1 AND pos < $2"
            f"{seen(seen_by, 5, 'message_vectors.message_id')} "
            f'ORDER BY embedding OPERATOR("{schema}".<=>) $3::"{schema}".vector LIMIT $4',
            conversation_id, before_pos, _literal(vector), limit, *seen_args(seen_by))
        return [row["pos"] for row in rows]
