"""People, identities, linking, forgetting and characters in PostgreSQL (the People and
Characters ports). Rules that count a person's memories lock the person's row first."""

from __future__ import annotations


from storage.ports import CHARACTER, GLOBAL, CapReached, Characters, MemoryCaps, MergeReport, People
from storage.postgres.database import Database, changed
from storage.postgres.memories import count_memories, lock_people


class _Taken(Exception):
    """Another process created the identity first: roll back and read theirs."""


class PostgresPeople(People):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def person_for_identity(self, platform: str, user_id: str) -> int:
        select = "SELECT person_id FROM identities WHERE platform = $1 AND user_id = $2"
        found = await self.db.value(select, platform, user_id)
        if found is not None:
            return found
        try:
            async with self.db.transaction() as db:
                person_id = await db.fetchval(
                    "WITH person AS (INSERT INTO persons (created_at) VALUES ($3) RETURNING id) "
                    "INSERT INTO identities (platform, user_id, person_id) SELECT $1, $2, id FROM person "
                    "ON CONFLICT DO NOTHING RETURNING person_id", platform, user_id, self.db.clock())
                if person_id is None:
                    raise _Taken
                return person_id
        except _Taken:
            return await self.db.value(select, platform, user_id)

    async def identities_of(self, person_id: int) -> list[tuple[str, str]]:
        rows = await self.db.all(
            "SELECT platform, user_id FROM identities WHERE person_id = $1 ORDER BY platform, user_id", person_id)
        return [(r[0], r[1]) for r in rows]

    async def create_link_code(self, person_id: int, platform: str, code: str, expires_at: float) -> None:
        async with self.db.transaction() as db:
            await db.execute("DELETE FROM link_codes WHERE person_id = $1 OR expires_at < $2",
                             person_id, self.db.clock())
            await db.execute("INSERT INTO link_codes (code, person_id, platform, expires_at) VALUES ($1, $2, $3, $4)",
                             code, person_id, platform, expires_at)

    async def link_code(self, code: str, now: float) -> tuple[int, str] | None:
        row = await self.db.one("SELECT person_id, platform FROM link_codes WHERE code = $1 AND expires_at >= $2",
                                code, now)
        return (row[0], row[1]) if row else None

    async def add_link_failure(self, person_id: int, at: float) -> None:
        await self.db.execute("INSERT INTO link_failures (person_id, at) VALUES ($1, $2)", person_id, at)

    async def link_failures_since(self, person_id: int, since: float) -> int:
        return await self.db.value("SELECT COUNT(*) FROM link_failures WHERE person_id = $1 AND at >= $2",
                                   person_id, since)

    async def merge_persons(self, keep: int, absorb: int) -> MergeReport:
        async with self.db.transaction() as db:
            await lock_people(db, keep, absorb)
            scopes = await db.fetch("SELECT DISTINCT character_id FROM memories WHERE person_id IN ($1, $2)",
                                    keep, absorb)
            to_unpin: list[int] = []
            for (character,) in scopes:
                scope = GLOBAL if character is None else CHARACTER
                pins = await db.fetch(
                    "SELECT id FROM memories WHERE person_id IN ($1, $2) AND character_id IS NOT DISTINCT FROM $3 "
                    "AND pinned ORDER BY person_id = $1 DESC, updated_at DESC, id DESC", keep, absorb, character)
                over = [memory_id for (memory_id,) in pins[self.caps.pinned:]]
                unpinned = sum([await count_memories(db, p, character, False) for p in (keep, absorb)])
                if unpinned + len(over) > self.caps.unpinned:
                    raise CapReached("unpinned", self.caps.unpinned, scope, unpinned + len(over))
                to_unpin += over
            await db.execute("UPDATE memories SET pinned = false WHERE id = ANY($1::bigint[])", to_unpin)
            for table in ("memories", "identities", "messages", "turns", "turn_queue", "link_failures"):
                await db.execute(f"UPDATE {table} SET person_id = $1 WHERE person_id = $2", keep, absorb)
            # Learn from chat: where the two differ, off wins (the more private choice).
            await db.execute(
                "INSERT INTO person_settings (person_id, character_id, learn) "
                "SELECT $1, character_id, learn FROM person_settings WHERE person_id = $2 "
                "ON CONFLICT (person_id, character_id) DO UPDATE "
                "SET learn = person_settings.learn AND excluded.learn", keep, absorb)
            await db.execute("DELETE FROM persons WHERE id = $1", absorb)
            await db.execute("DELETE FROM link_codes WHERE person_id = $1", keep)  # a code works once
            return MergeReport(unpinned_pins=len(to_unpin))

    async def forget_person(self, person_id: int) -> list[int]:
        async with self.db.transaction() as db:
            shared = [row[0] for row in await db.fetch(
                "SELECT DISTINCT m.conversation_id FROM messages m JOIN conversations c "
                "ON c.id = m.conversation_id WHERE m.person_id = $1 AND c.is_shared", person_id)]
            # One-to-one conversations are all about the person: they go whole.
            await db.execute(
                "DELETE FROM conversations WHERE NOT is_shared AND id IN "
                "(SELECT conversation_id FROM messages WHERE person_id = $1)", person_id)
            # In shared ones, their messages and the character's replies to them.
            await db.execute(
                "DELETE FROM messages WHERE id IN (SELECT reply_message_id FROM turns "
                "WHERE person_id = $1 AND reply_message_id IS NOT NULL)", person_id)
            await db.execute("DELETE FROM messages WHERE person_id = $1", person_id)
            await db.execute("DELETE FROM persons WHERE id = $1", person_id)
        return shared


class PostgresCharacters(Characters):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def ensure_character(self, name: str) -> int:
        select = "SELECT id FROM characters WHERE lower(name) = lower($1)"
        found = await self.db.value(select, name)
        if found is not None:
            return found
        await self.db.execute("INSERT INTO characters (name, created_at) VALUES ($1, $2) "
                              "ON CONFLICT ((lower(name))) DO NOTHING", name, self.db.clock())
        return await self.db.value(select, name)

    async def character_memory_counts(self) -> dict[str, int]:
        rows = await self.db.all("SELECT c.name, COUNT(m.id) FROM characters c LEFT JOIN memories m "
                                 "ON m.character_id = c.id GROUP BY c.id ORDER BY c.name")
        return {name: count for name, count in rows}

    async def remove_character(self, name: str) -> int | None:
        async with self.db.transaction() as db:
            character_id = await db.fetchval("SELECT id FROM characters WHERE lower(name) = lower($1) FOR UPDATE",
                                             name)
            if character_id is None:
                return None
            people = [p for (p,) in await db.fetch(
                "SELECT DISTINCT person_id FROM memories WHERE character_id = $1", character_id)]
            await lock_people(db, *people)
            # Pins that would exceed a person's global pin budget become unpinned, newest kept.
            for person_id in people:
                global_pins = await count_memories(db, person_id, None, True)
                moving = await db.fetch(
                    "SELECT id FROM memories WHERE person_id = $1 AND character_id = $2 AND pinned "
                    "ORDER BY updated_at DESC, id DESC", person_id, character_id)
                room = max(0, self.caps.pinned - global_pins)
                await db.execute("UPDATE memories SET pinned = false WHERE id = ANY($1::bigint[])",
                                 [memory_id for (memory_id,) in moving[room:]])
            moved = changed(await db.execute("UPDATE memories SET character_id = NULL WHERE character_id = $1",
                                             character_id))
            await db.execute("DELETE FROM characters WHERE id = $1", character_id)
            return moved


