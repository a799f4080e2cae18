"""What processes sharing the database agree on (the Coordination port): claims of background
work by leases, the model calls taken under `[limits]`, the platform updates already taken,
and shared settings (meta).

A lease names its holder (the process, as the database knows it) and lapses at `expires_at`;
the holder renews it every third of the lease while it works and lets it go when done. A lease
whose holder process is gone is free at once; one whose holder only stopped renewing (a hung or
partitioned process) is free when it lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import AsyncIterator

from storage.ports import CallLimit, Coordination
from storage.sql.database import Connection, Database


async def take_call(db: Database, tx: Connection, limit: CallLimit, now: float) -> int | None:
    """Inside a transaction, writers on `limit.who` taking turns: take a model call, or the
    seconds until one is free (nothing is counted then)."""
    await db.dialect.serialize(tx, f"model_calls {limit.who}")
    taken = await tx.all("SELECT at FROM model_calls WHERE who = $1 AND at > $2 ORDER BY at",
                         limit.who, now - limit.window_s)
    if len(taken) >= limit.calls:
        return max(1, math.ceil(taken[len(taken) - limit.calls]["at"] + limit.window_s - now))
    await tx.execute("INSERT INTO model_calls (who, at) VALUES ($1, $2)", limit.who, now)
    return None


class SQLCoordination(Coordination):
    def __init__(self, db: Database, holder: str):
        self.db = db
        self.holder = holder  # this process, as the database knows it

    @contextlib.asynccontextmanager
    async def claim(self, job: str, lease_s: float) -> AsyncIterator[bool]:
        name = f"job:{job}"
        if not await self._take(name, lease_s):
            yield False
            return
        renewing = asyncio.create_task(self._renew(name, lease_s))
        try:
            yield True
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            await asyncio.shield(self.db.execute("DELETE FROM leases WHERE name = $1 AND holder = $2",
                                                 name, self.holder))

    async def _take(self, name: str, lease_s: float) -> bool:
        """Free, lapsed or ours: one statement; else taken over only from a holder that is gone."""
        now = self.db.clock()
        taken = await self.db.execute(  # a row inserted, or updated where the WHERE lets it: 1
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE "
            "SET holder = excluded.holder, expires_at = excluded.expires_at "
            "WHERE leases.expires_at <= $4 OR leases.holder = excluded.holder",
            name, self.holder, now + lease_s, now)
        if taken == 1:
            return True
        holder = await self.db.value("SELECT holder FROM leases WHERE name = $1", name)
        if holder is None or await self.db.process_alive(holder):
            return False
        return await self.db.execute("UPDATE leases SET holder = $1, expires_at = $2 WHERE name = $3 AND holder = $4",
                                     self.holder, now + lease_s, name, holder) == 1

    async def _renew(self, name: str, lease_s: float) -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            await self.db.execute("UPDATE leases SET expires_at = $1 WHERE name = $2 AND holder = $3",
                                  self.db.clock() + lease_s, name, self.holder)

    async def take_call(self, limit: CallLimit) -> int | None:
        async with self.db.transaction(short=True) as tx:
            return await take_call(self.db, tx, limit, self.db.clock())

    async def past_limit(self, limit: CallLimit) -> bool:
        taken = await self.db.value("SELECT COUNT(*) FROM model_calls WHERE who = $1 AND at > $2",
                                    limit.who, self.db.clock() - limit.window_s)
        return taken >= limit.calls

    async def first_delivery(self, key: str) -> bool:
        return await self.db.execute("INSERT INTO deliveries (key, seen_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                                     key, self.db.clock()) == 1

    async def get_meta(self, key: str) -> str | None:
        return await self.db.value("SELECT value FROM meta WHERE key = $1", key)

    async def set_meta(self, key: str, value: str) -> None:
        await self.db.execute("INSERT INTO meta (key, value) VALUES ($1, $2) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, value)
