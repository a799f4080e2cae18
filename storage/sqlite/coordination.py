"""Coordination in SQLite: leases in the database, so several processes sharing the file agree
on who runs a piece of background work.

A lease names its holder (`host:pid:nonce`, made when the store opens) and lapses at
`expires_at`; the holder renews it while it works. Every process sharing an SQLite file runs on
one machine, so a lease whose holder process is gone (killed) is free at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from typing import AsyncIterator

from storage.ports import Coordination
from storage.sqlite.database import Database


def new_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_alive(holder: str) -> bool:
    """False only when the holder is a process of this machine that is gone."""
    host, pid, _ = holder.split(":", 2)
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class SQLiteCoordination(Coordination):
    def __init__(self, db: Database, holder: str):
        self.db = db
        self.holder = holder

    async def _take(self, name: str, lease_s: float) -> bool:
        """Take the lease if it is free, lapsed or ours (one statement); else take it over only
        from a holder process that is gone."""
        now = self.db.clock()
        taken = await self.db.returning(
            "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
            "SET holder = excluded.holder, expires_at = excluded.expires_at "
            "WHERE leases.expires_at <= ? OR leases.holder = excluded.holder RETURNING 1",
            (name, self.holder, now + lease_s, now))
        if taken:
            return True
        row = await self.db.one("SELECT holder FROM leases WHERE name = ?", (name,))
        if row is None or holder_alive(row[0]):
            return False
        cursor = await self.db.execute("UPDATE leases SET holder = ?, expires_at = ? WHERE name = ? AND holder = ?",
                                       (self.holder, now + lease_s, name, row[0]))
        return cursor.rowcount == 1

    async def _renew(self, name: str, lease_s: float) -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            await self.db.execute("UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?",
                                  (self.db.clock() + lease_s, name, self.holder))

    @contextlib.asynccontextmanager
    async def _held(self, name: str, lease_s: float) -> AsyncIterator[None]:
        renewing = asyncio.create_task(self._renew(name, lease_s))
        try:
            yield
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            await asyncio.shield(self.db.execute("DELETE FROM leases WHERE name = ? AND holder = ?",
                                                 (name, self.holder)))

    @contextlib.asynccontextmanager
    async def claim(self, job: str, lease_s: float) -> AsyncIterator[bool]:
        if not await self._take(f"job:{job}", lease_s):
            yield False
            return
        async with self._held(f"job:{job}", lease_s):
            yield True

    async def get_meta(self, key: str) -> str | None:
        row = await self.db.one("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0] if row else None

    async def set_meta(self, key: str, value: str) -> None:
        await self.db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
