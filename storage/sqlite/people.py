"""People, identities, linking, forgetting and characters in SQLite (the People and
Characters ports)."""

from __future__ import annotations

from storage.ports import CHARACTER, GLOBAL, CapReached, Characters, MemoryCaps, MergeReport, People
from storage.sqlite.database import Database, fetch_all, fetch_one
from storage.sqlite.memories import count_memories


class SQLitePeople(People):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def person_for_identity(self, platform: str, user_id: str) -> int:
        select = "SELECT person_id FROM identities WHERE platform = ? AND user_id = ?"
        row = await self.db.one(select, (platform, user_id))
        if row:
            return row[0]
        async with self.db.write() as db:
            row = await fetch_one(db, select, (platform, user_id))  # another process may have been first
            if row:
                return row[0]
            (person_id,) = await fetch_one(db, "INSERT INTO persons (created_at) VALUES (?) RETURNING id",
                                           (self.db.clock(),))
            await db.execute("INSERT INTO identities (platform, user_id, person_id) VALUES (?, ?, ?)",
                             (platform, user_id, person_id))
            return person_id

    async def identities_of(self, person_id: int) -> list[tuple[str, str]]:
        rows = await self.db.all(
            "SELECT platform, user_id FROM identities WHERE person_id = ? ORDER BY platform, user_id", (person_id,))
        return [(r[0], r[1]) for r in rows]

    async def create_link_code(self, person_id: int, platform: str, code: str, expires_at: float) -> None:
        async with self.db.write() as db:
            await db.execute("DELETE FROM link_codes WHERE person_id = ? OR expires_at < ?",
                             (person_id, self.db.clock()))
            await db.execute("INSERT INTO link_codes (code, person_id, platform, expires_at) VALUES (?, ?, ?, ?)",
                             (code, person_id, platform, expires_at))

    async def link_code(self, code: str, now: float) -> tuple[int, str] | None:
        row = await self.db.one("SELECT person_id, platform FROM link_codes WHERE code = ? AND expires_at >= ?",
                                (code, now))
        return (row[0], row[1]) if row else None

    async def add_link_failure(self, person_id: int, at: float) -> None:
        await self.db.execute("INSERT INTO link_failures (person_id, at) VALUES (?, ?)", (person_id, at))

    async def link_failures_since(self, person_id: int, since: float) -> int:
        (count,) = await self.db.one("SELECT COUNT(*) FROM link_failures WHERE person_id = ? AND at >= ?",
                                     (person_id, since))
        return count

    async def merge_persons(self, keep: int, absorb: int) -> MergeReport:
        async with self.db.write() as db:
            scopes = await fetch_all(db, "SELECT DISTINCT character_id FROM memories WHERE person_id IN (?, ?)",
                                     (keep, absorb))
            to_unpin: list[int] = []
            for (character,) in scopes:
                scope = GLOBAL if character is None else CHARACTER
                pins = await fetch_all(
                    db, "SELECT id FROM memories WHERE person_id IN (?, ?) AND character_id IS ? AND pinned = 1 "
                    "ORDER BY person_id = ? DESC, updated_at DESC, id DESC", (keep, absorb, character, keep))
                over = [memory_id for (memory_id,) in pins[self.caps.pinned:]]
                unpinned = sum([await count_memories(db, p, character, False) for p in (keep, absorb)])
                if unpinned + len(over) > self.caps.unpinned:
                    raise CapReached("unpinned", self.caps.unpinned, scope, unpinned + len(over))
                to_unpin += over
            for memory_id in to_unpin:
                await db.execute("UPDATE memories SET pinned = 0 WHERE id = ?", (memory_id,))
            for table in ("memories", "identities", "messages", "turns", "link_failures"):
                await db.execute(f"UPDATE {table} SET person_id = ? WHERE person_id = ?", (keep, absorb))
            # Learn from chat: where the two differ, off wins (the more private choice).
            await db.execute(
                "INSERT INTO person_settings (person_id, character_id, learn) "
                "SELECT ?, character_id, learn FROM person_settings WHERE person_id = ? "
                "ON CONFLICT (person_id, character_id) DO UPDATE SET learn = MIN(learn, excluded.learn)",
                (keep, absorb))
            await db.execute("DELETE FROM persons WHERE id = ?", (absorb,))
            await db.execute("DELETE FROM link_codes WHERE person_id = ?", (keep,))  # a code works once
            return MergeReport(unpinned_pins=len(to_unpin))

    async def forget_person(self, person_id: int) -> list[int]:
        async with self.db.write() as db:
            shared = [row[0] for row in await fetch_all(
                db, "SELECT DISTINCT m.conversation_id FROM messages m JOIN conversations c "
                "ON c.id = m.conversation_id WHERE m.person_id = ? AND c.is_shared = 1", (person_id,))]
            # One-to-one conversations are all about the person: they go whole.
            await db.execute(
                "DELETE FROM conversations WHERE is_shared = 0 AND id IN "
                "(SELECT DISTINCT conversation_id FROM messages WHERE person_id = ?)", (person_id,))
            # In shared ones, their messages and the character's replies to them.
            await db.execute(
                "DELETE FROM messages WHERE id IN (SELECT reply_message_id FROM turns "
                "WHERE person_id = ? AND reply_message_id IS NOT NULL)", (person_id,))
            await db.execute("DELETE FROM messages WHERE person_id = ?", (person_id,))
            await db.execute("DELETE FROM persons WHERE id = ?", (person_id,))
        return shared


class SQLiteCharacters(Characters):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def ensure_character(self, name: str) -> int:
        row = await self.db.one("SELECT id FROM characters WHERE name = ?", (name,))
        if row:
            return row[0]
        async with self.db.write() as db:
            await db.execute("INSERT OR IGNORE INTO characters (name, created_at) VALUES (?, ?)",
                             (name, self.db.clock()))
            (character_id,) = await fetch_one(db, "SELECT id FROM characters WHERE name = ?", (name,))
            return character_id

    async def character_memory_counts(self) -> dict[str, int]:
        rows = await self.db.all("SELECT c.name, COUNT(m.id) FROM characters c LEFT JOIN memories m "
                                 "ON m.character_id = c.id GROUP BY c.id ORDER BY c.name")
        return {name: count for name, count in rows}

    async def remove_character(self, name: str) -> int | None:
        async with self.db.write() as db:
            row = await fetch_one(db, "SELECT id FROM characters WHERE name = ?", (name,))
            if row is None:
                return None
            character_id = row[0]
            # Pins that would exceed a person's global pin budget become unpinned, newest kept.
            people = await fetch_all(db, "SELECT DISTINCT person_id FROM memories WHERE character_id = ?",
                                     (character_id,))
            for (person_id,) in people:
                global_pins = await count_memories(db, person_id, None, True)
                moving = await fetch_all(
                    db, "SELECT id FROM memories WHERE person_id = ? AND character_id = ? AND pinned = 1 "
                    "ORDER BY updated_at DESC, id DESC", (person_id, character_id))
                room = max(0, self.caps.pinned - global_pins)
                for (memory_id,) in moving[room:]:
                    await db.execute("UPDATE memories SET pinned = 0 WHERE id = ?", (memory_id,))
            cursor = await db.execute("UPDATE memories SET character_id = NULL WHERE character_id = ?",
                                      (character_id,))
            moved = cursor.rowcount
            await db.execute("DELETE FROM characters WHERE id = ?", (character_id,))
            return moved
