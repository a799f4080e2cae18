"""Claims of background work by leases in the database, the same on every backend (the
Coordination port's `claim`): the backend supplies the three statements.

A lease names its holder (the process, as the database knows it) and lapses at `expires_at`;
the holder renews it every third of the lease while it works and lets it go when done. A lease
whose holder process is gone is free at once; one whose holder only stopped renewing (a hung or
partitioned process) is free when it lapses.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from typing import AsyncIterator

from storage.ports import Coordination


class Leases(Coordination):
    def __init__(self, holder: str):
        self.holder = holder

    @abc.abstractmethod
    async def _take(self, name: str, lease_s: float) -> bool:
        """Take the lease if it is free, lapsed, ours, or its holder's process is gone."""

    @abc.abstractmethod
    async def _extend(self, name: str, lease_s: float) -> None: ...

    @abc.abstractmethod
    async def _release(self, name: str) -> None: ...

    async def _renew(self, name: str, lease_s: float) -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            await self._extend(name, lease_s)

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
            await asyncio.shield(self._release(name))
