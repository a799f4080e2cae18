"""The line of turns of one conversation, the same on every backend (the waiting half of the
Turns port): a ticket is queued when a message is stored, and `start_turn` waits until the
ticket is first in line and no turn of the conversation runs, in any process sharing the
database. The backend supplies the two steps that touch the database.

A waiting ticket looks again every POLL_S, or at once when a turn of this process ends. A turn
or a ticket that holds the line but whose process is gone is interrupted by the waiter, which
then wakes this process's recovery (`stray_found`): the interrupted turn is queued again at its
message's place, so it is answered first, in order, at once — not at the next recovery pass.
A running turn of this very process that no caller is answering any more (left behind by a
failure) is interrupted too.
"""

from __future__ import annotations

import abc
import asyncio

from storage.ports import Turns

POLL_S = 0.02


class TurnLine(Turns):
    def __init__(self, holder: str):
        self.holder = holder  # this process, as the database knows it
        self.answering: set[int] = set()  # running turns this process is answering now
        self._starting = 0  # turns of this process between their start in the database and `answering`
        self._ended = asyncio.Event()
        self._strays = asyncio.Event()  # set when this process interrupted a gone process's turn

    @abc.abstractmethod
    async def _try_start(self, ticket: int) -> int | None:
        """Atomically: if the ticket is first in its line and no turn of the conversation runs,
        turn it into a running turn and return the turn id; else None."""

    @abc.abstractmethod
    async def _withdraw(self, ticket: int) -> None:
        """Take a ticket nobody waits for any more out of its line."""

    @abc.abstractmethod
    async def _running_in_line(self, ticket: int) -> tuple[int, str | None] | None:
        """(turn id, holder) of the running turn of the ticket's conversation, if one runs."""

    @abc.abstractmethod
    async def _first_in_line(self, ticket: int) -> tuple[int, str] | None:
        """(ticket, holder) of the first ticket of the ticket's conversation."""

    @abc.abstractmethod
    async def _stranded(self) -> tuple[list[tuple[int, str | None]], list[tuple[int, str]]]:
        """Every running turn and every queued ticket, with their holders."""

    @abc.abstractmethod
    async def _alive(self, holder: str) -> bool:
        """Whether the process a holder names is still there."""

    @abc.abstractmethod
    async def _interrupt(self, turn_id: int) -> bool:
        """In one transaction, if the turn still runs: mark it failed, undo its memory writes and
        leave it for its adapter to answer again or mark (interrupted_turns). Whether it did."""

    @abc.abstractmethod
    async def _abandon(self, ticket: int) -> bool:
        """In one transaction, if the ticket is still queued: turn it into a failed turn left for
        its adapter to answer again, like a turn cut off mid-reply. Whether it did."""

    async def _gone(self, holder: str | None) -> bool:
        return not holder or not await self._alive(holder)

    async def _clear_the_way(self, ticket: int) -> None:
        """Interrupt what holds the ticket's line up when nobody will see to it: the running turn
        of a process that is gone, or of this one when no caller answers it (left behind by a
        failure; one starting right now may not be in `answering` yet); or the first ticket, of
        a process that is gone (this process's own tickets all have a waiter)."""
        running = await self._running_in_line(ticket)
        if running is not None:
            turn_id, holder = running
            if holder == self.holder:
                left_behind = turn_id not in self.answering and not self._starting
            else:
                left_behind = await self._gone(holder)
            if left_behind and await self._interrupt(turn_id):
                self._strays.set()
            return
        first = await self._first_in_line(ticket)
        if first is not None and first[0] != ticket and first[1] != self.holder and await self._gone(first[1]):
            if await self._abandon(first[0]):
                self._strays.set()

    async def stray_found(self, timeout_s: float) -> None:
        strays = self._strays
        try:
            await asyncio.wait_for(strays.wait(), timeout_s)
        except asyncio.TimeoutError:
            return
        if strays is self._strays:
            self._strays = asyncio.Event()

    async def recover_interrupted_turns(self) -> int:
        running, queued = await self._stranded()
        recovered = 0
        for turn_id, holder in running:
            if holder != self.holder and await self._gone(holder) and await self._interrupt(turn_id):
                recovered += 1
        for ticket, holder in queued:
            if holder != self.holder and await self._gone(holder) and await self._abandon(ticket):
                recovered += 1
        return recovered

    async def start_turn(self, ticket: int) -> int:
        try:
            while True:
                ended = self._ended
                self._starting += 1
                try:
                    turn_id = await self._try_start(ticket)
                finally:
                    self._starting -= 1
                if turn_id is not None:
                    self.answering.add(turn_id)
                    return turn_id
                await self._clear_the_way(ticket)
                try:
                    await asyncio.wait_for(ended.wait(), POLL_S)
                except asyncio.TimeoutError:
                    pass
        except BaseException:
            await asyncio.shield(self._withdraw(ticket))
            raise

    def ended(self, turn_id: int) -> None:
        """A turn of this process was finished or failed: wake this process's waiters."""
        self.answering.discard(turn_id)
        self._ended.set()
        self._ended = asyncio.Event()
