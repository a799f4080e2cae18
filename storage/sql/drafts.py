"""AI drafts and message selections waiting for a person (the Drafts port)."""

from __future__ import annotations

import json

from storage.ports import Drafts
from storage.sql.database import Database


class SQLDrafts(Drafts):
    def __init__(self, db: Database):
        self.db = db

    async def save_drafts(self, person_id: int, kind: str, items: list[str]) -> int:
        async with self.db.transaction() as tx:
            # Older drafts of the same kind are superseded.
            await tx.execute("DELETE FROM drafts WHERE person_id = $1 AND kind = $2", person_id, kind)
            return await tx.value(
                "INSERT INTO drafts (person_id, kind, items, created_at) VALUES ($1, $2, $3, $4) RETURNING id",
                person_id, kind, json.dumps(items), self.db.clock())

    async def drafts(self, person_id: int, draft_id: int) -> tuple[str, list[str]] | None:
        row = await self.db.one("SELECT kind, items FROM drafts WHERE id = $1 AND person_id = $2", draft_id, person_id)
        return (row["kind"], json.loads(row["items"])) if row else None

    async def delete_drafts(self, person_id: int, draft_id: int) -> None:
        await self.db.execute("DELETE FROM drafts WHERE id = $1 AND person_id = $2", draft_id, person_id)

    async def selection(self, person_id: int, conversation_id: int) -> list[int]:
        found = await self.db.value("SELECT message_ids FROM selections WHERE person_id = $1 AND conversation_id = $2",
                                    person_id, conversation_id)
        return json.loads(found) if found else []

    async def set_selection(self, person_id: int, conversation_id: int, message_ids: list[int]) -> None:
        if message_ids:
            await self.db.execute(
                "INSERT INTO selections (person_id, conversation_id, message_ids) VALUES ($1, $2, $3) "
                "ON CONFLICT (person_id, conversation_id) DO UPDATE SET message_ids = excluded.message_ids",
                person_id, conversation_id, json.dumps(message_ids))
        else:
            await self.db.execute("DELETE FROM selections WHERE person_id = $1 AND conversation_id = $2",
                                  person_id, conversation_id)
