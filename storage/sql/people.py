"""People, identities, linking, forgetting and characters (the People and Characters ports).
Rules that count a person's memories hold the person's row first."""

from __future__ import annotations

from storage.ports import (CHARACTER, GLOBAL, CapReached, Characters, MemoryCaps, MergeReport, People, Persona,
                          Profile)
from storage.sql.database import Connection, Database, in_transaction
from storage.sql.memories import LEARNS, count_memories, hold_people, keep_once
from storage.sql.summaries import start_over


class _Taken(Exception):
    """Another process stored the same thing first: roll back and read theirs."""


_PERSON_OF_IDENTITY = "SELECT person_id FROM identities WHERE platform = $1 AND user_id = $2"


class SQLPeople(People):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def person_of_identity(self, platform: str, user_id: str) -> int | None:
        """The person of this identity, if there is one (none is made)."""
        return await self.db.short.value(_PERSON_OF_IDENTITY, platform, user_id)

    async def person_for_identity(self, platform: str, user_id: str) -> int:
        found = await self.person_of_identity(platform, user_id)
        if found is not None:
            return found
        try:
            async with self.db.transaction(short=True) as tx:
                person_id = await tx.value("INSERT INTO persons (created_at) VALUES ($1) RETURNING id", self.db.clock())
                if await tx.value("INSERT INTO identities (platform, user_id, person_id) VALUES ($1, $2, $3) "
                                  "ON CONFLICT DO NOTHING RETURNING person_id", platform, user_id, person_id) is None:
                    raise _Taken
                return person_id
        except _Taken:
            return await self.db.value(_PERSON_OF_IDENTITY, platform, user_id)

    async def identities_of(self, person_id: int) -> list[tuple[str, str]]:
        rows = await self.db.all(
            "SELECT platform, user_id FROM identities WHERE person_id = $1 ORDER BY platform, user_id", person_id)
        return [(r["platform"], r["user_id"]) for r in rows]

    async def create_link_code(self, person_id: int, platform: str, code: str, expires_at: float) -> None:
        async with self.db.transaction() as tx:
            await tx.execute("DELETE FROM link_codes WHERE person_id = $1 OR expires_at < $2", person_id, self.db.clock())
            await tx.execute("INSERT INTO link_codes (code, person_id, platform, expires_at) VALUES ($1, $2, $3, $4)",
                             code, person_id, platform, expires_at)

    async def link_code(self, code: str, now: float) -> tuple[int, str] | None:
        row = await self.db.one("SELECT person_id, platform FROM link_codes WHERE code = $1 AND expires_at >= $2",
                                code, now)
        return (row["person_id"], row["platform"]) if row else None

    async def add_link_failure(self, person_id: int, at: float) -> None:
        await self.db.execute("INSERT INTO link_failures (person_id, at) VALUES ($1, $2)", person_id, at)

    async def link_failures_since(self, person_id: int, since: float) -> int:
        return await self.db.value("SELECT COUNT(*) FROM link_failures WHERE person_id = $1 AND at >= $2",
                                   person_id, since)

    async def merge_persons(self, keep: int, absorb: int) -> MergeReport:
        async with self.db.transaction() as tx:
            await hold_people(self.db, tx, keep, absorb)
            kept_once = await keep_once(tx, keep, absorb, self.db.clock())
            scopes = await tx.all("SELECT DISTINCT character_id FROM memories WHERE person_id IN ($1, $2)", keep, absorb)
            to_unpin: list[int] = []
            for row in scopes:
                character = row["character_id"]
                scope = GLOBAL if character is None else CHARACTER
                pins = await tx.all(
                    "SELECT id FROM memories WHERE person_id IN ($1, $2) AND character_id IS NOT DISTINCT FROM $3 "
                    "AND pinned ORDER BY person_id = $1 DESC, updated_at DESC, id DESC", keep, absorb, character)
                over = [pin["id"] for pin in pins[self.caps.pinned:]]
                unpinned = sum([await count_memories(tx, p, character, False) for p in (keep, absorb)])
                if unpinned + len(over) > self.caps.unpinned:
                    raise CapReached("unpinned", self.caps.unpinned, scope, unpinned + len(over))
                to_unpin += over
            await tx.execute(f"UPDATE memories SET pinned = false WHERE id {self.db.dialect.in_ids(1)}",
                             self.db.dialect.ids(to_unpin))
            for table in ("memories", "memory_history", "identities", "messages", "turns", "turn_queue",
                          "link_failures", "checkins", "reminders", "page_links", "page_sessions"):
                await tx.execute(f"UPDATE {table} SET person_id = $1 WHERE person_id = $2", keep, absorb)
            # One persona and time zone a person: the one kept, else the other's. What each spent adds up.
            await tx.execute("UPDATE persons SET time_zone = COALESCE(time_zone, (SELECT time_zone FROM persons "
                             "WHERE id = $2)) WHERE id = $1", keep, absorb)
            await tx.execute("UPDATE persons SET persona = COALESCE(persona, (SELECT persona FROM persons WHERE id = $2)), "
                             "persona_tokens = CASE WHEN persona IS NULL THEN (SELECT persona_tokens FROM persons "
                             "WHERE id = $2) ELSE persona_tokens END WHERE id = $1", keep, absorb)
            await tx.execute(
                "INSERT INTO usage_days (person_id, day, character_id, turns, tokens_in, tokens_out, checkins) "
                "SELECT $1, day, character_id, turns, tokens_in, tokens_out, checkins FROM usage_days WHERE person_id = $2 "
                "ON CONFLICT (person_id, day, character_id) DO UPDATE SET turns = usage_days.turns + excluded.turns, "
                "tokens_in = usage_days.tokens_in + excluded.tokens_in, "
                "tokens_out = usage_days.tokens_out + excluded.tokens_out, "
                "checkins = usage_days.checkins + excluded.checkins", keep, absorb)
            await tx.execute("INSERT INTO budget_notices (person_id, day) SELECT $1, day FROM budget_notices "
                             "WHERE person_id = $2 ON CONFLICT DO NOTHING", keep, absorb)
            # Learn from chat and check-ins: where the two differ, off wins (the more private choice).
            await tx.execute(
                "INSERT INTO person_settings (person_id, character_id, learn, checkins) "
                "SELECT $1, character_id, learn, checkins FROM person_settings WHERE person_id = $2 "
                "ON CONFLICT (person_id, character_id) DO UPDATE SET learn = person_settings.learn AND excluded.learn, "
                "checkins = person_settings.checkins AND excluded.checkins",
                keep, absorb)
            await tx.execute("DELETE FROM persons WHERE id = $1", absorb)
            await tx.execute("DELETE FROM link_codes WHERE person_id = $1", keep)  # a code works once
            return MergeReport(unpinned_pins=len(to_unpin), kept_once=kept_once)

    async def persona(self, person_id: int) -> Persona | None:
        return (await self.profile(person_id)).persona

    async def profile(self, person_id: int, character_id: int | None = None) -> Profile:
        row = await self.db.short.one(f"SELECT persona, persona_tokens, time_zone, {LEARNS} AS learns FROM persons "
                                      "WHERE id = $1", person_id, character_id)
        if row is None:
            return Profile(None, None)
        return Profile(Persona(row["persona"], row["persona_tokens"]) if row["persona"] else None, row["time_zone"],
                       bool(row["learns"]))

    async def set_time_zone(self, person_id: int, zone: str | None) -> None:
        await self.db.execute("UPDATE persons SET time_zone = $2 WHERE id = $1", person_id, zone)

    async def set_persona(self, person_id: int, persona: Persona | None) -> None:
        await self.db.execute("UPDATE persons SET persona = $2, persona_tokens = $3 WHERE id = $1", person_id,
                              persona.text if persona else None, persona.tokens if persona else 0)

    async def forget_person(self, person_id: int, day: str) -> list[int] | None:
        async def forget(tx: Connection) -> list[int] | None:
            # Their turns are held first, as a reply being kept holds its turn first: one under way
            # is waited for, and what it kept then goes too. Then their row, before anything of
            # theirs is read: a message of theirs being stored holds it (its reference does), so
            # it is waited for and goes too, or it is stored after and finds no one to belong to
            # (tests/test_postgres_lock_order.py).
            await tx.execute(f"SELECT id FROM turns WHERE person_id = $1 ORDER BY id{self.db.dialect.for_update}",
                             person_id)
            if not await hold_people(self.db, tx, person_id):
                return None  # linked into another just now (or already forgotten): nothing of theirs is here
            await tx.execute("DELETE FROM forgotten_spend WHERE day < $1", day)  # kept only until the day ends
            await tx.execute(
                # against every platform id (the allowance), counted once in /stats (the first id)
                "INSERT INTO forgotten_spend (platform, user_id, day, character_id, turns, tokens_in, tokens_out, "
                "pictures, counted) SELECT i.platform, i.user_id, u.day, u.character_id, u.turns, u.tokens_in, "
                "u.tokens_out, u.pictures, "
                "i.platform || ':' || i.user_id = (SELECT MIN(platform || ':' || user_id) FROM identities "
                "WHERE person_id = $1) FROM identities i JOIN usage_days u ON u.person_id = i.person_id "
                "WHERE i.person_id = $1 AND u.day = $2 "
                "ON CONFLICT (platform, user_id, day, character_id) DO UPDATE SET "
                "turns = forgotten_spend.turns + excluded.turns, "
                "tokens_in = forgotten_spend.tokens_in + excluded.tokens_in, "
                "tokens_out = forgotten_spend.tokens_out + excluded.tokens_out, "
                "pictures = forgotten_spend.pictures + excluded.pictures, "
                "counted = forgotten_spend.counted OR excluded.counted", person_id, day)
            # The places in shared conversations of what goes: their messages and the replies to them
            gone: dict[int, list[int]] = {}
            for row in await tx.all(
                    "SELECT m.conversation_id, m.pos FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                    "WHERE c.is_shared AND (m.person_id = $1 OR m.id IN (SELECT reply_message_id FROM turns "
                    "WHERE person_id = $1))", person_id):
                gone.setdefault(row["conversation_id"], []).append(row["pos"])
            # One-to-one conversations are all about the person: they go whole.
            await tx.execute("DELETE FROM conversations WHERE NOT is_shared AND id IN "
                             "(SELECT conversation_id FROM messages WHERE person_id = $1)", person_id)
            # In shared ones, their messages and the character's replies to them.
            await tx.execute("DELETE FROM messages WHERE id IN (SELECT reply_message_id FROM turns "
                             "WHERE person_id = $1 AND reply_message_id IS NOT NULL)", person_id)
            await tx.execute("DELETE FROM messages WHERE person_id = $1", person_id)
            await tx.execute("DELETE FROM persons WHERE id = $1", person_id)
            for conversation_id, places in gone.items():  # their words leave the summaries at once
                await start_over(self.db, tx, conversation_id, places)
            return sorted(gone)

        return await in_transaction(self.db, forget)


class SQLCharacters(Characters):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def ensure_character(self, name: str) -> int:
        select = "SELECT id FROM characters WHERE lower(name) = lower($1)"
        found = await self.db.value(select, name)
        if found is not None:
            return found
        await self.db.execute("INSERT INTO characters (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                              name, self.db.clock())
        return await self.db.value(select, name)

    async def character_memory_counts(self) -> dict[str, int]:
        rows = await self.db.all("SELECT c.name, COUNT(m.id) AS memories FROM characters c LEFT JOIN memories m "
                                 "ON m.character_id = c.id GROUP BY c.id, c.name ORDER BY c.name")
        return {row["name"]: row["memories"] for row in rows}

    async def remove_character(self, name: str) -> int | None:
        async with self.db.transaction() as tx:
            character_id = await tx.value(
                f"SELECT id FROM characters WHERE lower(name) = lower($1){self.db.dialect.for_update}", name)
            if character_id is None:
                return None
            people = [row["person_id"] for row in await tx.all(
                "SELECT DISTINCT person_id FROM memories WHERE character_id = $1", character_id)]
            await hold_people(self.db, tx, *people)
            # Pins that would exceed a person's global pin budget become unpinned, newest kept.
            for person_id in people:
                room = max(0, self.caps.pinned - await count_memories(tx, person_id, None, True))
                moving = await tx.all("SELECT id FROM memories WHERE person_id = $1 AND character_id = $2 AND pinned "
                                      "ORDER BY updated_at DESC, id DESC", person_id, character_id)
                await tx.execute(f"UPDATE memories SET pinned = false WHERE id {self.db.dialect.in_ids(1)}",
                                 self.db.dialect.ids([row["id"] for row in moving[room:]]))
            moved = await tx.execute("UPDATE memories SET character_id = NULL WHERE character_id = $1", character_id)
            await tx.execute("DELETE FROM summaries WHERE seen_by = $1", character_id)  # its own, in scenes (SPEC 22)
            await tx.execute("DELETE FROM characters WHERE id = $1", character_id)
            return moved
