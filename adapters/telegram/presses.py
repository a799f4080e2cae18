"""Answering a button press in time: Telegram forgets a press not answered within seconds (its
answer then fails: "query is too old"), and the person watches a spinner meanwhile. A press
still at work after PRESS_ANSWERED_WITHIN_S is answered at once, and its result shown when done
(a /forgetme with a week of backups takes that long)."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

PRESS_ANSWERED_WITHIN_S = 2.0
Result = TypeVar("Result")


async def in_time(work: Awaitable[Result], answer: Callable[[], Awaitable[None]]) -> tuple[Result, bool]:
    """What the press's `work` gives, and whether `answer` was called meanwhile (it took long)."""
    pressed = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({pressed}, timeout=PRESS_ANSWERED_WITHIN_S)
        if not done:
            await answer()
        return await pressed, not done
    finally:
        pressed.cancel()  # when this was cancelled meanwhile; done, it changes nothing
