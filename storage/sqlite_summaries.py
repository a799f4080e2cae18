"""The conversation summary in SQLite: tiers by generation, the rebuild that writes the next
generation and swaps it in at once, AI drafts and message selections waiting for a person."""

from __future__ import annotations

import json

from storage.base import MessageRow, RebuildRow, SummaryRow, SummaryState
from storage.sqlite_base import (
    MESSAGE_COLUMNS,
    REBUILD_COLUMNS,
    SUMMARY_COLUMNS,
    TIER_RANK,
    SQLiteBase,
    _message,
    _summary,
)


class SQLiteSummaries(SQLiteBase):
    # -- the conversation summary ----------------------------------------------------------
    async def summary_state(self, conversation_id: int) -> SummaryState:
        return await self._cache.read("summaries", ("state", conversation_id),
                                      lambda: self._summary_state(conversation_id))

    async def _summary_state(self, conversation_id: int) -> SummaryState:
        row = await self._one(
            "SELECT summarized_pos, summary_generation, summary_failures, summary_retry_at, "
            "EXISTS (SELECT 1 FROM rebuilds WHERE conversation_id = c.id) FROM conversations c WHERE id = ?",
            (conversation_id,),
        )
        return SummaryState(row[0], row[1], row[2], row[3], bool(row[4]))

    async def summaries(self, conversation_id: int, generation: int | None = None) -> list[SummaryRow]:
        if generation is None:  # the live summary: read every turn, cached
            return await self._cache.read("summaries", conversation_id,
                                          lambda: self._summaries(conversation_id, None))
        return await self._summaries(conversation_id, generation)

    async def _summaries(self, conversation_id: int, generation: int | None) -> list[SummaryRow]:
        if generation is None:
            generation_sql, params = "(SELECT summary_generation FROM conversations WHERE id = ?)", (conversation_id,)
        else:
            generation_sql, params = "?", (generation,)
        rows = await self._all(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE conversation_id = ? AND generation = "
            f"{generation_sql} ORDER BY {TIER_RANK}, first_pos", (conversation_id, *params),
        )
        return [_summary(r) for r in rows]

    async def messages_between(
        self, conversation_id: int, after_pos: int, before_pos: int, limit: int
    ) -> list[MessageRow]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos > ? AND pos < ? "
            "ORDER BY pos LIMIT ?", (conversation_id, after_pos, before_pos, limit),
        )
        return [_message(r) for r in rows]

    async def count_messages_between(
        self, conversation_id: int, after_pos: int, before_pos: int
    ) -> int:
        (count,) = await self._one(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = ? AND pos > ? AND pos < ?",
            (conversation_id, after_pos, before_pos),
        )
        return count

    async def write_summary(
        self, conversation_id: int, generation: int, tier: str, content: str, tokens: int,
        first_pos: int, last_pos: int, replaces: list[int], covered_pos: int | None = None,
        edited: bool = False,
    ) -> SummaryRow:
        async with self._write("summaries") as db:
            cursor = await db.execute(
                "INSERT INTO summaries (conversation_id, generation, tier, content, tokens, first_pos, "
                "last_pos, edited, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, generation, tier, content, tokens, first_pos, last_pos, int(edited),
                 self.clock()),
            )
            summary_id = cursor.lastrowid
            for old in replaces:
                await db.execute("DELETE FROM summaries WHERE id = ? AND conversation_id = ?",
                                 (old, conversation_id))
            if covered_pos is not None:
                await db.execute(
                    "UPDATE conversations SET summarized_pos = MAX(summarized_pos, ?), summary_failures = 0, "
                    "summary_retry_at = NULL WHERE id = ? AND summary_generation = ?",
                    (covered_pos, conversation_id, generation),
                )
                await db.execute(
                    "UPDATE rebuilds SET progress_pos = MAX(progress_pos, ?) WHERE conversation_id = ? "
                    "AND generation = ?", (covered_pos, conversation_id, generation),
                )
        return SummaryRow(summary_id, conversation_id, tier, content, tokens, first_pos, last_pos, edited)

    async def edit_summary(self, conversation_id: int, summary_id: int, content: str, tokens: int) -> bool:
        async with self._write("summaries") as db:
            cursor = await db.execute(
                "UPDATE summaries SET content = ?, tokens = ?, edited = 1 WHERE id = ? AND conversation_id = ? "
                "AND generation = (SELECT summary_generation FROM conversations WHERE id = ?)",
                (content, tokens, summary_id, conversation_id, conversation_id),
            )
            return cursor.rowcount > 0

    async def set_summary_retry(self, conversation_id: int, failures: int, retry_at: float | None) -> None:
        async with self._write("summaries") as db:
            await db.execute(
                "UPDATE conversations SET summary_failures = ?, summary_retry_at = ? WHERE id = ?",
                (failures, retry_at, conversation_id),
            )

    async def due_summary_retries(self, now: float) -> list[int]:
        rows = await self._all(
            "SELECT id FROM conversations WHERE summary_retry_at IS NOT NULL AND summary_retry_at <= ?", (now,)
        )
        return [r[0] for r in rows]

    async def start_rebuild(self, conversation_id: int, person_id: int | None) -> RebuildRow | None:
        async with self._write("summaries") as db:
            if await self._fetch_one(db, "SELECT 1 FROM rebuilds WHERE conversation_id = ?", (conversation_id,)):
                return None
            (generation,) = await self._fetch_one(
                db, "SELECT summary_generation + 1 FROM conversations WHERE id = ?", (conversation_id,)
            )
            await db.execute(
                "INSERT INTO rebuilds (conversation_id, person_id, generation, progress_pos, status, "
                "started_at) VALUES (?, ?, ?, 0, 'running', ?)",
                (conversation_id, person_id, generation, self.clock()),
            )
            # Anything a crashed earlier attempt wrote for that generation goes.
            await db.execute("DELETE FROM summaries WHERE conversation_id = ? AND generation = ?",
                             (conversation_id, generation))
        return RebuildRow(conversation_id, person_id, generation, 0, "running", None)

    async def rebuild(self, conversation_id: int) -> RebuildRow | None:
        row = await self._one(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE conversation_id = ?",
                              (conversation_id,))
        return RebuildRow(*row) if row else None

    async def rebuilds(self, status: str) -> list[RebuildRow]:
        rows = await self._all(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE status = ?", (status,))
        return [RebuildRow(*r) for r in rows]

    async def set_rebuild_status(self, conversation_id: int, status: str, error: str | None = None) -> None:
        async with self._write("summaries") as db:
            await db.execute("UPDATE rebuilds SET status = ?, error = ? WHERE conversation_id = ?",
                             (status, error, conversation_id))

    async def restart_rebuild(self, conversation_id: int) -> None:
        async with self._write("summaries") as db:
            await db.execute(
                "DELETE FROM summaries WHERE conversation_id = ? AND generation = "
                "(SELECT generation FROM rebuilds WHERE conversation_id = ?)", (conversation_id, conversation_id),
            )
            await db.execute("UPDATE rebuilds SET progress_pos = 0, status = 'running', error = NULL "
                             "WHERE conversation_id = ?", (conversation_id,))

    async def cancel_rebuild(self, conversation_id: int) -> None:
        async with self._write("summaries") as db:
            await db.execute(
                "DELETE FROM summaries WHERE conversation_id = ? AND generation = "
                "(SELECT generation FROM rebuilds WHERE conversation_id = ?)", (conversation_id, conversation_id),
            )
            await db.execute("DELETE FROM rebuilds WHERE conversation_id = ?", (conversation_id,))

    async def finish_rebuild(self, conversation_id: int) -> None:
        async with self._write("summaries") as db:
            generation, progress = await self._fetch_one(
                db, "SELECT generation, progress_pos FROM rebuilds WHERE conversation_id = ?", (conversation_id,)
            )
            await db.execute("DELETE FROM summaries WHERE conversation_id = ? AND generation <> ?",
                             (conversation_id, generation))
            await db.execute(
                "UPDATE conversations SET summary_generation = ?, summarized_pos = ?, summary_failures = 0, "
                "summary_retry_at = NULL WHERE id = ?", (generation, progress, conversation_id),
            )
            await db.execute("DELETE FROM rebuilds WHERE conversation_id = ?", (conversation_id,))

    # -- drafts and selections -------------------------------------------------------------
    async def save_drafts(self, person_id: int, kind: str, items: list[str]) -> int:
        async with self._write() as db:
            # Older drafts of the same kind are superseded.
            await db.execute("DELETE FROM drafts WHERE person_id = ? AND kind = ?", (person_id, kind))
            cursor = await db.execute(
                "INSERT INTO drafts (person_id, kind, items, created_at) VALUES (?, ?, ?, ?)",
                (person_id, kind, json.dumps(items), self.clock()),
            )
            return cursor.lastrowid

    async def drafts(self, person_id: int, draft_id: int) -> tuple[str, list[str]] | None:
        row = await self._one("SELECT kind, items FROM drafts WHERE id = ? AND person_id = ?",
                              (draft_id, person_id))
        return (row[0], json.loads(row[1])) if row else None

    async def delete_drafts(self, person_id: int, draft_id: int) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM drafts WHERE id = ? AND person_id = ?", (draft_id, person_id))

    async def selection(self, person_id: int, conversation_id: int) -> list[int]:
        row = await self._one(
            "SELECT message_ids FROM selections WHERE person_id = ? AND conversation_id = ?",
            (person_id, conversation_id),
        )
        return json.loads(row[0]) if row else []

    async def set_selection(self, person_id: int, conversation_id: int, message_ids: list[int]) -> None:
        async with self._write() as db:
            if message_ids:
                await db.execute(
                    "INSERT INTO selections (person_id, conversation_id, message_ids) VALUES (?, ?, ?) "
                    "ON CONFLICT (person_id, conversation_id) DO UPDATE SET message_ids = excluded.message_ids",
                    (person_id, conversation_id, json.dumps(message_ids)),
                )
            else:
                await db.execute("DELETE FROM selections WHERE person_id = ? AND conversation_id = ?",
                                 (person_id, conversation_id))

    async def message_by_platform_id(self, conversation_id: int, platform_message_id: str) -> MessageRow | None:
        row = await self._one(  # the message itself, or a reply one of whose later parts it is
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND platform_message_id = ? "
            f"UNION ALL SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = (SELECT message_id FROM message_parts "
            "WHERE conversation_id = ? AND platform_message_id = ?) LIMIT 1",
            (conversation_id, platform_message_id, conversation_id, platform_message_id),
        )
        return _message(row) if row else None

    async def messages_by_id(self, conversation_id: int, message_ids: list[int]) -> list[MessageRow]:
        if not message_ids:
            return []
        marks = ", ".join("?" * len(message_ids))
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND id IN ({marks}) ORDER BY pos",
            (conversation_id, *message_ids),
        )
        return [_message(r) for r in rows]
