"""Saved memories in SQLite: budgets checked and written in one transaction, the journal of what
each turn's tools wrote (so regenerate, a failed turn or a crash can undo it), and the
Learn-from-chat switch."""

from __future__ import annotations

import json
from typing import Any

import aiosqlite

from storage.base import CHARACTER, GLOBAL, CapReached, MemoriesInPlay, MemoryCaps, MemoryRow, PinnedMemory
from storage.sqlite_base import MEMORY_COLUMNS, SQLiteBase, _memory, _scope_character


class SQLiteMemories(SQLiteBase):
    async def _undo_journal(self, db: aiosqlite.Connection, turn_id: int) -> None:
        """Undo what a turn's tools wrote, newest first. Entries pinned since are left alone:
        only the person changes pinned memories."""
        entries = await self._fetch_all(
            db, "SELECT id, memory_id, action, before FROM memory_journal "
            "WHERE turn_id = ? AND undone = 0 ORDER BY id DESC", (turn_id,),
        )
        for entry_id, memory_id, action, before in entries:
            current = await self._fetch_one(db, "SELECT pinned FROM memories WHERE id = ?", (memory_id,))
            if current is not None and current[0]:
                pass  # pinned by the person since: left alone
            elif action == "add" and current is not None:
                await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            elif action == "update" and current is not None:
                old = json.loads(before)
                await db.execute(
                    "UPDATE memories SET content = ?, tokens = ?, updated_at = ? WHERE id = ?",
                    (old["content"], old["tokens"], old["updated_at"], memory_id),
                )
            elif action == "delete" and current is None:
                old = json.loads(before)
                await db.execute(
                    f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    tuple(old[c.strip()] for c in MEMORY_COLUMNS.split(",")),
                )
            await db.execute("UPDATE memory_journal SET undone = 1 WHERE id = ?", (entry_id,))

    async def _journal(
        self, db: aiosqlite.Connection, turn_id: int | None, memory_id: int, action: str,
        before: MemoryRow | None,
    ) -> None:
        if turn_id is None:
            return
        snapshot = None
        if before is not None:
            snapshot = json.dumps({c.strip(): getattr(before, c.strip()) for c in MEMORY_COLUMNS.split(",")})
        await db.execute(
            "INSERT INTO memory_journal (turn_id, memory_id, action, before) VALUES (?, ?, ?, ?)",
            (turn_id, memory_id, action, snapshot),
        )

    # -- saved memories ---------------------------------------------------------------------
    async def memories_in_play(
        self, person_id: int, character_id: int, unpinned_limit: int
    ) -> MemoriesInPlay:
        return await self._cache.read("memories", (person_id, character_id, unpinned_limit),
                                      lambda: self._memories_in_play(person_id, character_id, unpinned_limit))

    async def _memories_in_play(self, person_id: int, character_id: int, unpinned_limit: int) -> MemoriesInPlay:
        part = (f"SELECT * FROM (SELECT {MEMORY_COLUMNS} FROM memories WHERE person_id = ? "
                "AND character_id IS ? AND pinned = ? ORDER BY updated_at DESC, id DESC LIMIT ?)")
        rows = await self._all(
            " UNION ALL ".join([part] * 4),
            (person_id, character_id, 1, -1, person_id, None, 1, -1,
             person_id, character_id, 0, unpinned_limit, person_id, None, 0, unpinned_limit),
        )
        memories = [_memory(r) for r in rows]
        pinned = sorted((m for m in memories if m.pinned), key=lambda m: (m.updated_at, m.id), reverse=True)
        unpinned = {scope: [m for m in memories if not m.pinned and m.scope == scope] for scope in (CHARACTER, GLOBAL)}
        return MemoriesInPlay(pinned=pinned, unpinned=unpinned)

    @staticmethod
    def _visible(person_id: int, character_id: int, scope: str | None = None) -> tuple[str, tuple]:
        """WHERE clause and parameters: the person's memories this character can see (both
        scopes, or only `scope`)."""
        if scope == GLOBAL:
            return "person_id = ? AND character_id IS NULL", (person_id,)
        if scope == CHARACTER:
            return "person_id = ? AND character_id = ?", (person_id, character_id)
        return "person_id = ? AND (character_id = ? OR character_id IS NULL)", (person_id, character_id)

    async def list_memories(
        self, person_id: int, character_id: int, scope: str | None, offset: int, limit: int
    ) -> tuple[list[MemoryRow], int]:
        where, params = self._visible(person_id, character_id, scope)
        (total,) = await self._one(f"SELECT COUNT(*) FROM memories WHERE {where}", params)
        rows = await self._all(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} "
            "ORDER BY pinned DESC, updated_at DESC, id DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [_memory(r) for r in rows], total

    async def _get_for_write(
        self, db: aiosqlite.Connection, person_id: int, character_id: int, memory_id: int
    ) -> MemoryRow | None:
        where, params = self._visible(person_id, character_id)
        row = await self._fetch_one(db, f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND {where}",
                                    (memory_id, *params))
        return _memory(row) if row else None

    async def _changeable(
        self, db: aiosqlite.Connection, person_id: int, character_id: int, memory_id: int, by_ai: bool
    ) -> MemoryRow | None:
        """The memory if it is the person's and in play; the AI (a turn's tool) may not change a
        pinned one: PinnedMemory."""
        row = await self._get_for_write(db, person_id, character_id, memory_id)
        if row is not None and by_ai and row.pinned:
            raise PinnedMemory(memory_id)
        return row

    async def _count(
        self, db: aiosqlite.Connection, person_id: int, character: int | None, pinned: bool
    ) -> int:
        (count,) = await self._fetch_one(
            db, "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
            (person_id, character, int(pinned)),
        )
        return count

    async def add_memory(
        self, person_id: int, character_id: int, scope: str, content: str, tokens: int,
        pinned: bool, source: str, caps: MemoryCaps, turn_id: int | None = None,
    ) -> MemoryRow:
        character = _scope_character(scope, character_id)
        limit = caps.pinned if pinned else caps.unpinned
        now = self.clock()
        async with self._write("memories") as db:
            count = await self._count(db, person_id, character, pinned)
            if count >= limit:
                raise CapReached("pinned" if pinned else "unpinned", limit, scope, count)
            cursor = await db.execute(
                "INSERT INTO memories (person_id, character_id, content, tokens, pinned, source, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (person_id, character, content, tokens, int(pinned), source, now, now),
            )
            memory_id = cursor.lastrowid
            await self._journal(db, turn_id, memory_id, "add", None)
        return MemoryRow(memory_id, person_id, character, content, tokens, pinned, source, now, now)

    async def update_memory(
        self, person_id: int, character_id: int, memory_id: int, content: str, tokens: int,
        turn_id: int | None = None,
    ) -> MemoryRow | None:
        now = self.clock()
        async with self._write("memories") as db:
            before = await self._changeable(db, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            await db.execute(
                "UPDATE memories SET content = ?, tokens = ?, updated_at = ? WHERE id = ?",
                (content, tokens, now, memory_id),
            )
            await self._journal(db, turn_id, memory_id, "update", before)
        return MemoryRow(memory_id, person_id, before.character_id, content, tokens, before.pinned,
                         before.source, before.created_at, now)

    async def delete_memory(
        self, person_id: int, character_id: int, memory_id: int, turn_id: int | None = None
    ) -> MemoryRow | None:
        async with self._write("memories") as db:
            before = await self._changeable(db, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            await self._journal(db, turn_id, memory_id, "delete", before)
        return before

    async def set_pinned(
        self, person_id: int, character_id: int, memory_id: int, pinned: bool, caps: MemoryCaps
    ) -> MemoryRow | None:
        async with self._write("memories") as db:
            row = await self._get_for_write(db, person_id, character_id, memory_id)
            if row is None:
                return None
            if row.pinned != pinned:
                limit = caps.pinned if pinned else caps.unpinned
                count = await self._count(db, person_id, row.character_id, pinned)
                if count >= limit:
                    raise CapReached("pinned" if pinned else "unpinned", limit, row.scope, count)
                await db.execute("UPDATE memories SET pinned = ? WHERE id = ?", (int(pinned), memory_id))
        return MemoryRow(row.id, row.person_id, row.character_id, row.content, row.tokens, pinned,
                         row.source, row.created_at, row.updated_at)

    async def count_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        (count,) = await self._one(
            "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
            (person_id, _scope_character(scope, character_id), int(pinned)),
        )
        return count

    async def clear_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        async with self._write("memories") as db:
            cursor = await db.execute(
                "DELETE FROM memories WHERE person_id = ? AND character_id IS ? AND pinned = ?",
                (person_id, _scope_character(scope, character_id), int(pinned)),
            )
            return cursor.rowcount

    async def export_person(self, person_id: int) -> dict[str, Any]:
        identities = await self.identities_of(person_id)
        rows = await self._all(
            f"SELECT {', '.join('m.' + c.strip() for c in MEMORY_COLUMNS.split(','))}, c.name "
            "FROM memories m LEFT JOIN characters c ON c.id = m.character_id "
            "WHERE m.person_id = ? ORDER BY m.id", (person_id,),
        )
        settings = await self._all(
            "SELECT c.name, s.learn FROM person_settings s JOIN characters c ON c.id = s.character_id "
            "WHERE s.person_id = ? ORDER BY c.name", (person_id,),
        )
        return {
            "identities": [f"{p}:{u}" for p, u in identities],
            "memories": [
                {
                    "id": r[0],
                    "scope": GLOBAL if r[2] is None else CHARACTER,
                    "character": r[9],
                    "content": r[3],
                    "pinned": bool(r[5]),
                    "source": r[6],
                    "created_at": r[7],
                    "updated_at": r[8],
                }
                for r in rows
            ],
            "learn_from_chat": {name: bool(learn) for name, learn in settings},
        }

    # -- settings, linking, forgetting -----------------------------------------------------
    async def learning_enabled(self, person_id: int, character_id: int) -> bool:
        async def load() -> bool:
            row = await self._one(
                "SELECT learn FROM person_settings WHERE person_id = ? AND character_id = ?",
                (person_id, character_id),
            )
            return True if row is None else bool(row[0])
        return await self._cache.read("learning", (person_id, character_id), load)

    async def set_learning(self, person_id: int, character_id: int, enabled: bool) -> None:
        async with self._write("learning") as db:
            await db.execute(
                "INSERT INTO person_settings (person_id, character_id, learn) VALUES (?, ?, ?) "
                "ON CONFLICT (person_id, character_id) DO UPDATE SET learn = excluded.learn",
                (person_id, character_id, int(enabled)),
            )
