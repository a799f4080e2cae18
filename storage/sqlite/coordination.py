"""Coordination in SQLite: leases in the file (storage/leases.py), so several processes sharing
it agree on who runs a piece of background work, and shared settings (meta).

A holder is `host:pid:nonce`, made when the store opens. Every process sharing an SQLite file
runs on one machine, so whether a holder is gone is asked of the operating system.
"""

from __future__ import annotations

import math
import os
import socket
import uuid

import aiosqlite

from storage.leases import Leases
from storage.ports import CallLimit
from storage.sqlite.database import Database, fetch_all


def new_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_alive(holder: str) -> bool:
    """False only when the holder is a process of this machine that is gone (or no process of
    this backend's making: a holder copied from another database)."""
    host, pid, _ = (holder.split(":", 2) + ["", ""])[:3]
    if not pid.isdigit():
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


async def take_call(db: aiosqlite.Connection, limit: CallLimit, now: float) -> int | None:
    """Inside a write transaction (SQLite has one writer at a time, so count and insert are
    atomic): take a model call for `limit.who`, or the seconds until one is free."""
    taken = await fetch_all(db, "SELECT at FROM model_calls WHERE who = ? AND at > ? ORDER BY at",
                            (limit.who, now - limit.window_s))
    if len(taken) >= limit.calls:
        return max(1, math.ceil(taken[len(taken) - limit.calls][0] + limit.window_s - now))
    await db.execute("INSERT INTO model_calls (who, at) VALUES (?, ?)", (limit.who, now))
    return None


class SQLiteCoordination(Leases):
    def __init__(self, db: Database, holder: str):
        super().__init__(holder)
        self.db = db

    async def _take(self, name: str, lease_s: float) -> bool:
        """Free, lapsed or ours: one statement; else taken over only from a holder that is gone."""
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

    async def _extend(self, name: str, lease_s: float) -> None:
        await self.db.execute("UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?",
                              (self.db.clock() + lease_s, name, self.holder))

    async def _release(self, name: str) -> None:
        await self.db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, self.holder))

    async def take_call(self, limit: CallLimit) -> int | None:
        async with self.db.write() as db:
            return await take_call(db, limit, self.db.clock())

    async def first_delivery(self, key: str) -> bool:
        return await self.db.returning("INSERT INTO deliveries (key, seen_at) VALUES (?, ?) ON CONFLICT DO NOTHING "
                                       "RETURNING 1", (key, self.db.clock())) is not None

    async def get_meta(self, key: str) -> str | None:
        row = await self.db.one("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0] if row else None

    async def set_meta(self, key: str, value: str) -> None:
        await self.db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
