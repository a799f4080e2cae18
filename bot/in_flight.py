"""Work in flight in this process that waits on a server someone else runs: audio (SPEC 16
"Bounded", "A slow transcription holds nobody else") and every outside call of the tools (SPEC 18
"Every outside call is bounded the same way"). At most a few at once (memory stays flat under a
flood: the others wait, holding nothing), and on stop everything in flight is abandoned at once —
a hanging server never holds up an exit."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")


class Abandoned(Exception):
    """The process is stopping: the work was given up (what it was for is answered after the restart)."""


class InFlight:
    def __init__(self, most: int):
        self._slots = asyncio.Semaphore(most)
        self._tasks: set[asyncio.Task] = set()
        self.stopping = False

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """`work()` once a slot is free; Abandoned when the process stops first."""
        if self.stopping:
            raise Abandoned()
        task = asyncio.ensure_future(self._in_a_slot(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return await task
        except asyncio.CancelledError:
            if self.stopping and task.cancelled():
                raise Abandoned() from None
            raise

    async def _in_a_slot(self, work: Callable[[], Awaitable[T]]) -> T:
        async with self._slots:
            return await work()

    def abandon(self) -> None:
        """Stop: cancel what is in flight, and take nothing more."""
        self.stopping = True
        for task in list(self._tasks):
            task.cancel()
