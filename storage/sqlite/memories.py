"""Saved memories in SQLite (the Memories port): budgets checked and written in one
transaction, the journal of what each turn's tools wrote (so regenerate, a failed turn or a
crash can undo it), and the Learn-from-chat switch."""

from __future__ import annotations

import json
from typing import Any

import aiosqlite

from storage.ports import (
    CHARACTER,
    GLOBAL,
    Memories,
    MemoriesInPlay,
    MemoryCaps,
    MemoryRow,
    PinnedMemory,
)
from storage.sqlite.database import Database, fetch_all, fetch_one
from storage.rows import MEMORY_COLUMNS, in_play, memory, person_export, prefixed, scope_character

FIELDS = [c.strip() for c in MEMORY_COLUMNS.split(",")]


async def count_memories(db: aiosqlite.Connection, person_id: int, character: int | None, pinned: bool) -> int:
    (count,) = await fetch_one(
        db, "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
        (person_id, character, int(pinned)),
    )
    return count


async def journal(db: aiosqlite.Connection, turn_id: int | None, memory_id: int, action: str,
                  before: MemoryRow | None) -> None:
    """Note what a turn's tool wrote, so it can be undone. A person's own write (no turn: an
    edit, a pin, an unpin, a delete) outranks every undo still pending for that memory: they
    are marked done, so Regenerate never reverts what the person did since (SPEC 5)."""
    if turn_id is None:
        await db.execute("UPDATE memory_journal SET undone = 1 WHERE memory_id = ? AND undone = 0", (memory_id,))
        return
    snapshot = json.dumps({f: getattr(before, f) for f in FIELDS}) if before is not None else None
    await db.execute("INSERT INTO memory_journal (turn_id, memory_id, action, before) VALUES (?, ?, ?, ?)",
                     (turn_id, memory_id, action, snapshot))


async def undo_journal(db: aiosqlite.Connection, turn_id: int) -> None:
    """Undo what a turn's tools wrote, newest first. Entries pinned since are left alone: only
    the person changes pinned memories."""
    entries = await fetch_all(
        db, "SELECT id, memory_id, action, before FROM memory_journal WHERE turn_id = ? AND undone = 0 "
        "ORDER BY id DESC", (turn_id,),
    )
    for entry_id, memory_id, action, before in entries:
        current = await fetch_one(db, "SELECT pinned FROM memories WHERE id = ?", (memory_id,))
        if current is not None and current[0]:
            pass  # pinned by the person since: left alone
        elif action == "add" and current is not None:
            await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        elif action == "update" and current is not None:
            old = json.loads(before)
            await db.execute("UPDATE memories SET content = ?, tokens = ?, updated_at = ? WHERE id = ?",
                             (old["content"], old["tokens"], old["updated_at"], memory_id))
        elif action == "delete" and current is None:
            old = json.loads(before)
            await db.execute(f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES ({', '.join('?' * len(FIELDS))})",
                             tuple(old[f] for f in FIELDS))
        await db.execute("UPDATE memory_journal SET undone = 1 WHERE id = ?", (entry_id,))


def visible(person_id: int, character_id: int, scope: str | None = None) -> tuple[str, tuple]:
    """WHERE clause and parameters: the person's memories this character can see (both scopes,
    or only `scope`)."""
    if scope == GLOBAL:
        return "person_id = ? AND character_id IS NULL", (person_id,)
    if scope == CHARACTER:
        return "person_id = ? AND character_id = ?", (person_id, character_id)
    return "person_id = ? AND (character_id = ? OR character_id IS NULL)", (person_id, character_id)


class SQLiteMemories(Memories):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def memories_in_play(self, person_id: int, character_id: int, unpinned_limit: int) -> MemoriesInPlay:
        part = (f"SELECT * FROM (SELECT {MEMORY_COLUMNS} FROM memories WHERE person_id = ? "
                "AND character_id IS ? AND pinned = ? ORDER BY updated_at DESC, id DESC LIMIT ?)")
        rows = await self.db.all(
            " UNION ALL ".join([part] * 4),
            (person_id, character_id, 1, -1, person_id, None, 1, -1,
             person_id, character_id, 0, unpinned_limit, person_id, None, 0, unpinned_limit),
        )
        return in_play([memory(r) for r in rows])

    async def list_memories(
        self, person_id: int, character_id: int, scope: str | None, offset: int, limit: int
    ) -> tuple[list[MemoryRow], int]:
        where, params = visible(person_id, character_id, scope)
        (total,) = await self.db.one(f"SELECT COUNT(*) FROM memories WHERE {where}", params)
        rows = await self.db.all(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} "
            "ORDER BY pinned DESC, updated_at DESC, id DESC LIMIT ? OFFSET ?", (*params, limit, offset))
        return [memory(r) for r in rows], total

    @staticmethod
    async def _changeable(db: aiosqlite.Connection, person_id: int, character_id: int, memory_id: int,
                          by_ai: bool) -> MemoryRow | None:
        """The memory if it is the person's and in play; the AI (a turn's tool) may not change a
        pinned one: PinnedMemory."""
        where, params = visible(person_id, character_id)
        row = await fetch_one(db, f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND {where}",
                              (memory_id, *params))
        found = memory(row) if row else None
        if found is not None and by_ai and found.pinned:
            raise PinnedMemory(memory_id)
        return found

    async def add_memory(
        self, person_id: int, character_id: int, scope: str, content: str, tokens: int,
        pinned: bool, source: str, turn_id: int | None = None,
    ) -> MemoryRow:
        character = scope_character(scope, character_id)
        now = self.db.clock()
        async with self.db.write() as db:
            count = await count_memories(db, person_id, character, pinned)
            self.caps.check(pinned, scope, count)
            row = await fetch_one(
                db, "INSERT INTO memories (person_id, character_id, content, tokens, pinned, source, created_at, "
                f"updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING {MEMORY_COLUMNS}",
                (person_id, character, content, tokens, int(pinned), source, now, now),
            )
            await journal(db, turn_id, row[0], "add", None)
        return memory(row)

    async def update_memory(
        self, person_id: int, character_id: int, memory_id: int, content: str, tokens: int,
        turn_id: int | None = None,
    ) -> MemoryRow | None:
        async with self.db.write() as db:
            before = await self._changeable(db, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            row = await fetch_one(
                db, f"UPDATE memories SET content = ?, tokens = ?, updated_at = ? WHERE id = ? RETURNING {MEMORY_COLUMNS}",
                (content, tokens, self.db.clock(), memory_id))
            await journal(db, turn_id, memory_id, "update", before)
        return memory(row)

    async def delete_memory(
        self, person_id: int, character_id: int, memory_id: int, turn_id: int | None = None
    ) -> MemoryRow | None:
        async with self.db.write() as db:
            before = await self._changeable(db, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            await journal(db, turn_id, memory_id, "delete", before)
        return before

    async def set_pinned(self, person_id: int, character_id: int, memory_id: int, pinned: bool) -> MemoryRow | None:
        async with self.db.write() as db:
            row = await self._changeable(db, person_id, character_id, memory_id, by_ai=False)
            if row is None or row.pinned == pinned:
                return row
            count = await count_memories(db, person_id, row.character_id, pinned)
            self.caps.check(pinned, row.scope, count)
            changed = await fetch_one(db, f"UPDATE memories SET pinned = ? WHERE id = ? RETURNING {MEMORY_COLUMNS}",
                                      (int(pinned), memory_id))
            await journal(db, None, memory_id, "pin" if pinned else "unpin", row)
        return memory(changed)

    async def count_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        (count,) = await self.db.one(
            "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
            (person_id, scope_character(scope, character_id), int(pinned)))
        return count

    async def clear_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        cursor = await self.db.execute(
            "DELETE FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
            (person_id, scope_character(scope, character_id), int(pinned)))
        return cursor.rowcount

    async def export_person(self, person_id: int) -> dict[str, Any]:
        identities = await self.db.all(
            "SELECT platform, user_id FROM identities WHERE person_id = ? ORDER BY platform, user_id", (person_id,))
        rows = await self.db.all(
            f"SELECT {prefixed(MEMORY_COLUMNS, 'm')}, c.name FROM memories m "
            "LEFT JOIN characters c ON c.id = m.character_id WHERE m.person_id = ? ORDER BY m.id", (person_id,))
        settings = await self.db.all(
            "SELECT c.name, s.learn FROM person_settings s JOIN characters c ON c.id = s.character_id "
            "WHERE s.person_id = ? ORDER BY c.name", (person_id,))
        return person_export(identities, rows, settings)

    async def learning_enabled(self, person_id: int, character_id: int) -> bool:
        row = await self.db.one("SELECT learn FROM person_settings WHERE person_id = ? AND character_id = ?",
                                (person_id, character_id))
        return True if row is None else bool(row[0])

    async def set_learning(self, person_id: int, character_id: int, enabled: bool) -> None:
        await self.db.execute(
            "INSERT INTO person_settings (person_id, character_id, learn) VALUES (?, ?, ?) "
            "ON CONFLICT (person_id, character_id) DO UPDATE SET learn = excluded.learn",
            (person_id, character_id, int(enabled)))
