"""Answering a button press in time: Telegram forgets a press not answered within seconds (its
answer then fails: "query is too old"), and the person watches a spinner meanwhile. A press
still at work after PRESS_ANSWERED_WITHIN_S is answered at once, and its result shown when done
(a /forgetme with a week of backups takes that long). A press is answered once: one that fails
after its answer says so in the chat."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

from telegram import CallbackQuery, Message

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


async def say_it_failed(query: CallbackQuery, text: str, failures: tuple[type[BaseException], ...]) -> None:
    """A press that failed says so: as an alert, or, when Telegram takes no answer any more (the
    press was answered while at work, or is too old), as a reply to the pressed message."""
    try:
        await query.answer(text, show_alert=True)
    except failures:
        if isinstance(query.message, Message):
            await query.message.reply_text(text, do_quote=True)
