"""The conversation summary in SQLite (the Summaries port): tiers by generation, and the rebuild
that writes the next generation and swaps it in at once."""

from __future__ import annotations

from storage.ports import RebuildRow, Summaries, SummaryRow, SummaryState
from storage.sqlite.database import Database, fetch_one
from storage.rows import REBUILD_COLUMNS, SUMMARY_COLUMNS, TIER_RANK, summary

REBUILD_GENERATION = "(SELECT generation FROM rebuilds WHERE conversation_id = ?)"


class SQLiteSummaries(Summaries):
    def __init__(self, db: Database):
        self.db = db

    async def summary_state(self, conversation_id: int) -> SummaryState:
        row = await self.db.one(
            "SELECT summarized_pos, summary_generation, summary_failures, summary_retry_at, "
            "EXISTS (SELECT 1 FROM rebuilds WHERE conversation_id = c.id) FROM conversations c WHERE id = ?",
            (conversation_id,))
        return SummaryState(row[0], row[1], row[2], row[3], bool(row[4]))

    async def summaries(self, conversation_id: int, generation: int | None = None) -> list[SummaryRow]:
        if generation is None:
            generation_sql, params = "(SELECT summary_generation FROM conversations WHERE id = ?)", (conversation_id,)
        else:
            generation_sql, params = "?", (generation,)
        rows = await self.db.all(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE conversation_id = ? AND generation = {generation_sql} "
            f"ORDER BY {TIER_RANK}, first_pos", (conversation_id, *params))
        return [summary(r) for r in rows]

    async def write_summary(
        self, conversation_id: int, generation: int, tier: str, content: str, tokens: int,
        first_pos: int, last_pos: int, replaces: list[int], covered_pos: int | None = None,
        edited: bool = False,
    ) -> SummaryRow:
        async with self.db.write() as db:
            row = await fetch_one(
                db, "INSERT INTO summaries (conversation_id, generation, tier, content, tokens, first_pos, last_pos, "
                f"edited, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING {SUMMARY_COLUMNS}",
                (conversation_id, generation, tier, content, tokens, first_pos, last_pos, int(edited), self.db.clock()))
            for old in replaces:
                await db.execute("DELETE FROM summaries WHERE id = ? AND conversation_id = ?", (old, conversation_id))
            if covered_pos is not None:
                await db.execute(
                    "UPDATE conversations SET summarized_pos = MAX(summarized_pos, ?), summary_failures = 0, "
                    "summary_retry_at = NULL WHERE id = ? AND summary_generation = ?",
                    (covered_pos, conversation_id, generation))
                await db.execute(
                    "UPDATE rebuilds SET progress_pos = MAX(progress_pos, ?) WHERE conversation_id = ? "
                    "AND generation = ?", (covered_pos, conversation_id, generation))
        return summary(row)

    async def edit_summary(self, conversation_id: int, summary_id: int, content: str, tokens: int) -> bool:
        cursor = await self.db.execute(
            "UPDATE summaries SET content = ?, tokens = ?, edited = 1 WHERE id = ? AND conversation_id = ? "
            "AND generation = (SELECT summary_generation FROM conversations WHERE id = ?)",
            (content, tokens, summary_id, conversation_id, conversation_id))
        return cursor.rowcount > 0

    async def set_summary_retry(self, conversation_id: int, failures: int, retry_at: float | None) -> None:
        await self.db.execute("UPDATE conversations SET summary_failures = ?, summary_retry_at = ? WHERE id = ?",
                              (failures, retry_at, conversation_id))

    async def due_summary_retries(self, now: float) -> list[int]:
        rows = await self.db.all(
            "SELECT id FROM conversations WHERE summary_retry_at IS NOT NULL AND summary_retry_at <= ?", (now,))
        return [r[0] for r in rows]

    async def start_rebuild(self, conversation_id: int, person_id: int | None) -> RebuildRow | None:
        async with self.db.write() as db:
            if await fetch_one(db, "SELECT 1 FROM rebuilds WHERE conversation_id = ?", (conversation_id,)):
                return None
            (generation,) = await fetch_one(
                db, "SELECT summary_generation + 1 FROM conversations WHERE id = ?", (conversation_id,))
            await db.execute(
                "INSERT INTO rebuilds (conversation_id, person_id, generation, progress_pos, status, started_at) "
                "VALUES (?, ?, ?, 0, 'running', ?)", (conversation_id, person_id, generation, self.db.clock()))
            # Anything a crashed earlier attempt wrote for that generation goes.
            await db.execute("DELETE FROM summaries WHERE conversation_id = ? AND generation = ?",
                             (conversation_id, generation))
        return RebuildRow(conversation_id, person_id, generation, 0, "running", None)

    async def rebuild(self, conversation_id: int) -> RebuildRow | None:
        row = await self.db.one(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE conversation_id = ?",
                                (conversation_id,))
        return RebuildRow(*row) if row else None

    async def rebuilds(self, status: str) -> list[RebuildRow]:
        rows = await self.db.all(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE status = ?", (status,))
        return [RebuildRow(*r) for r in rows]

    async def set_rebuild_status(self, conversation_id: int, status: str, error: str | None = None) -> None:
        await self.db.execute("UPDATE rebuilds SET status = ?, error = ? WHERE conversation_id = ?",
                              (status, error, conversation_id))

    async def restart_rebuild(self, conversation_id: int) -> None:
        async with self.db.write() as db:
            await db.execute(f"DELETE FROM summaries WHERE conversation_id = ? AND generation = {REBUILD_GENERATION}",
                             (conversation_id, conversation_id))
            await db.execute("UPDATE rebuilds SET progress_pos = 0, status = 'running', error = NULL "
                             "WHERE conversation_id = ?", (conversation_id,))

    async def cancel_rebuild(self, conversation_id: int) -> None:
        async with self.db.write() as db:
            await db.execute(f"DELETE FROM summaries WHERE conversation_id = ? AND generation = {REBUILD_GENERATION}",
                             (conversation_id, conversation_id))
            await db.execute("DELETE FROM rebuilds WHERE conversation_id = ?", (conversation_id,))

    async def finish_rebuild(self, conversation_id: int) -> None:
        async with self.db.write() as db:
            generation, progress = await fetch_one(
                db, "SELECT generation, progress_pos FROM rebuilds WHERE conversation_id = ?", (conversation_id,))
            await db.execute("DELETE FROM summaries WHERE conversation_id = ? AND generation <> ?",
                             (conversation_id, generation))
            await db.execute(
                "UPDATE conversations SET summary_generation = ?, summarized_pos = ?, summary_failures = 0, "
                "summary_retry_at = NULL WHERE id = ?", (generation, progress, conversation_id))
            await db.execute("DELETE FROM rebuilds WHERE conversation_id = ?", (conversation_id,))
