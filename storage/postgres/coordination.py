"""Coordination in PostgreSQL: leases in the database (storage/leases.py), so processes on any
machine agree on who runs a piece of background work, and shared settings (meta).

A holder is the process's row in `processes`; whether it is gone is asked of PostgreSQL (its
presence lock, see database.py), so a killed process's claims are free at once, on any machine.
"""

from __future__ import annotations

import math

import asyncpg

from storage.leases import Leases
from storage.ports import CallLimit
from storage.postgres.database import Database


async def take_call(db: asyncpg.Connection, limit: CallLimit, now: float) -> int | None:
    """Inside a transaction, holding a lock on `limit.who` until it ends (so processes count
    one at a time): take a model call for `limit.who`, or the seconds until one is free."""
    # a one-key lock: never the same as the two-key (schema, number) locks of database.py
    await db.execute("SELECT pg_advisory_xact_lock(hashtextextended('model_calls ' || current_schema() || ' ' || $1, 0))",
                     limit.who)
    taken = await db.fetch("SELECT at FROM model_calls WHERE who = $1 AND at > $2 ORDER BY at",
                           limit.who, now - limit.window_s)
    if len(taken) >= limit.calls:
        return max(1, math.ceil(taken[len(taken) - limit.calls][0] + limit.window_s - now))
    await db.execute("INSERT INTO model_calls (who, at) VALUES ($1, $2)", limit.who, now)
    return None


class PostgresCoordination(Leases):
    def __init__(self, db: Database, holder: str):
        super().__init__(holder)
        self.db = db

    async def _take(self, name: str, lease_s: float) -> bool:
        """Free, lapsed or ours: one statement; else taken over only from a holder that is gone."""
        now = self.db.clock()
        if await self.db.value(
                "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE "
                "SET holder = excluded.holder, expires_at = excluded.expires_at "
                "WHERE leases.expires_at <= $4 OR leases.holder = excluded.holder RETURNING true",
                name, self.holder, now + lease_s, now):
            return True
        holder = await self.db.value("SELECT holder FROM leases WHERE name = $1", name)
        if holder is None or await self.db.process_alive(holder):
            return False
        return await self.db.execute("UPDATE leases SET holder = $1, expires_at = $2 WHERE name = $3 AND holder = $4",
                                     self.holder, now + lease_s, name, holder) == 1

    async def _extend(self, name: str, lease_s: float) -> None:
        await self.db.execute("UPDATE leases SET expires_at = $1 WHERE name = $2 AND holder = $3",
                              self.db.clock() + lease_s, name, self.holder)

    async def _release(self, name: str) -> None:
        await self.db.execute("DELETE FROM leases WHERE name = $1 AND holder = $2", name, self.holder)

    async def take_call(self, limit: CallLimit) -> int | None:
        async with self.db.transaction() as db:
            return await take_call(db, limit, self.db.clock())

    async def first_delivery(self, key: str) -> bool:
        return bool(await self.db.value("INSERT INTO deliveries (key, seen_at) VALUES ($1, $2) ON CONFLICT DO NOTHING "
                                        "RETURNING true", key, self.db.clock()))

    async def get_meta(self, key: str) -> str | None:
        return await self.db.value("SELECT value FROM meta WHERE key = $1", key)

    async def set_meta(self, key: str, value: str) -> None:
        await self.db.execute("INSERT INTO meta (key, value) VALUES ($1, $2) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, value)
