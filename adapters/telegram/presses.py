"""Answering a button press in time: Telegram forgets a press not answered within seconds (its
answer then fails: "query is too old"), and the person watches a spinner meanwhile. A press
still at work after PRESS_ANSWERED_WITHIN_S is answered at once, and its result shown when done
(a /forgetme with a week of backups takes that long)."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, TypeVar

from telegram import CallbackQuery
from telegram.error import TelegramError

log = logging.getLogger(__name__)
PRESS_ANSWERED_WITHIN_S = 2.0
Result = TypeVar("Result")


async def in_time(query: CallbackQuery, work: Awaitable[Result]) -> tuple[Result, bool]:
    """What the press's `work` gives, and whether `query` was answered meanwhile (it took long)."""
    pressed = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({pressed}, timeout=PRESS_ANSWERED_WITHIN_S)
        if not done:
            try:
                await query.answer()
            except TelegramError as failure:  # the result still shows
                log.debug("ignored Telegram error answering a press: %s", failure)
        return await pressed, not done
    finally:
        pressed.cancel()  # when this was cancelled meanwhile; done, it changes nothing
