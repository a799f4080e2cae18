"""Streaming helpers shared by the chat adapters: a throttled live edit, and the typing
indicator kept alive while the character thinks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)
EDIT_EVERY_S = 1.0  # at most about one edit a second
TYPING_EVERY_S = 4.0  # typing indicators fade after ~5 s on both platforms


class ThrottledStream:
    """Receives the whole text so far; shows it with `show` at most once per interval, and
    passes on what `show` returns (the platform id of a message it created)."""

    def __init__(self, show: Callable[[str], Awaitable[str | None]], interval: float = EDIT_EVERY_S):
        self.show = show
        self.interval = interval
        self.text = ""
        self.shown = ""
        self._last = 0.0

    @property
    def started(self) -> bool:
        return bool(self.shown)

    async def __call__(self, text: str) -> str | None:
        self.text = text
        now = time.monotonic()
        if text.strip() and text != self.shown and now - self._last >= self.interval:
            self._last = now
            self.shown = text
            try:
                return await self.show(text)
            except Exception:  # a live edit is a nicety; the final delivery still happens
                log.warning("live edit failed", exc_info=True)
        return None


@contextlib.asynccontextmanager
async def typing(send_action: Callable[[], Awaitable[object]]) -> AsyncIterator[None]:
    """Keep the platform's typing indicator on until the block ends."""

    async def keep_typing() -> None:
        while True:
            try:
                await send_action()
            except Exception:
                log.debug("typing indicator failed", exc_info=True)
            await asyncio.sleep(TYPING_EVERY_S)

    task = asyncio.create_task(keep_typing())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
