"""The line of turns of one conversation, the same on every backend (the waiting half of the
Turns port): a ticket is queued when a message is stored, and `start_turn` waits until the
ticket is first in line and no turn of the conversation runs, in any process sharing the
database. The backend supplies the two steps that touch the database.

A waiting ticket looks again every POLL_S, or at once when a turn of this process ends. A turn
or a ticket that holds the line but whose process is gone is interrupted by the waiter (it is
answered again by its adapter, see `Turns.recover_interrupted_turns`); so is a running turn of
this very process that no caller is answering any more (left behind by a failure).
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

    @abc.abstractmethod
    async def _try_start(self, ticket: int) -> int | None:
        """Atomically: if the ticket is first in its line and no turn of the conversation runs,
        turn it into a running turn and return the turn id; else None."""

    @abc.abstractmethod
    async def _clear_the_way(self, ticket: int) -> None:
        """Interrupt what holds the ticket's line up (the running turn, or the first ticket)
        when `left_behind` says nobody will see to it."""

    @abc.abstractmethod
    async def _withdraw(self, ticket: int) -> None:
        """Take a ticket nobody waits for any more out of its line."""

    def left_behind(self, holder: str | None, turn_id: int | None, holder_alive: bool) -> bool:
        """Nobody will finish this running turn (turn_id None: this queued ticket) of `holder`,
        whose liveness the backend checked."""
        if holder == self.holder:  # (one starting right now may not be in `answering` yet)
            return turn_id is not None and turn_id not in self.answering and not self._starting
        return not holder or not holder_alive

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
