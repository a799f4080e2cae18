"""How many requests the model server answers at once, and who goes first (SPEC 8, model servers
as they really are).

Some servers answer one request at a time. llama-cpp-python's server holds one lock: a second
request waits on the server, its timeout running, and with its default `interrupt_requests` it
even ends the running stream the moment another request comes — two people at once then cut each
other's answers over and over, and a summary written in the background cuts a person's reply.
llama.cpp's own server answers as many at once as it has slots (`/props` `total_slots`).

Where the number is known — said by the server at start-up, or learned when the server ended a
stream of ours early while another of ours ran — requests wait here, in this process, until the
server has room: the timeout of a request starts when it is sent, not while it waits behind
another, and a stream is never sent to cut one of ours. Whoever a person is waiting on (a reply,
`/memory generate`, the recall of a turn) goes before background work (summaries, letters,
embeddings of stored messages). Where nothing is known, nothing waits.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

log = logging.getLogger(__name__)
FIRST, BACKGROUND = 0, 1  # who goes first when both wait


class Lanes:
    def __init__(self) -> None:
        self.slots: int | None = None  # requests the server answers at once; None: not known, nothing waits
        self.in_flight = 0  # requests sent and not yet answered: a stream the server ended among others was cut
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def learn(self, slots: int, why: str) -> None:
        """The server answers `slots` requests at once (said once, at INFO: nothing is wrong)."""
        if self.slots is not None and self.slots <= slots:
            return
        self.slots = slots
        log.info("the model server answers %d request(s) at once (%s): Keepsake sends no more than that, a "
                 "person's reply first", slots, why)
        self._admit()

    @asynccontextmanager
    async def taken(self, background: bool = False) -> AsyncIterator[None]:
        """Room for one request, held while it runs; background work after anyone a person waits on."""
        if self._waiting or (self.slots is not None and self.in_flight >= self.slots):
            waiter = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (BACKGROUND if background else FIRST, next(self._order), waiter))
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # given room just as it was cancelled
                    self._release()
                raise
        else:
            self.in_flight += 1
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self.in_flight -= 1
        self._admit()

    def _admit(self) -> None:
        while self._waiting and (self.slots is None or self.in_flight < self.slots):
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
