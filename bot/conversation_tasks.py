"""Background work kept to one task per conversation (summaries, rebuilds)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable


class ConversationTasks:
    """At most one running task per conversation id; a finished task leaves on its own."""

    def __init__(self, name: str):
        self.name = name
        self._tasks: dict[int, asyncio.Task] = {}

    def __contains__(self, conversation_id: int) -> bool:
        return conversation_id in self._tasks

    def start(self, conversation_id: int, work: Callable[[], Awaitable[Any]]) -> bool:
        """Run `work()` for this conversation, unless a task runs for it already (False)."""
        if conversation_id in self._tasks:
            return False
        self._tasks[conversation_id] = asyncio.create_task(
            self._run(conversation_id, work), name=f"{self.name}-{conversation_id}"
        )
        return True

    async def _run(self, conversation_id: int, work: Callable[[], Awaitable[Any]]) -> None:
        try:
            await work()
        finally:  # in the task itself: whoever next finds it gone may start another
            self._tasks.pop(conversation_id, None)

    async def cancel(self, conversation_id: int) -> None:
        task = self._tasks.get(conversation_id)
        if task:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def idle(self) -> None:
        """Wait until none runs (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await self.idle()
