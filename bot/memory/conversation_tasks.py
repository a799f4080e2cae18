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

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, conversation_id: int, work: Callable[[], Awaitable[Any]]) -> bool:
        """Run `work()` for this conversation, unless a task runs for it already (False)."""
        if conversation_id in self._tasks:
            return False
        task = asyncio.create_task(self._run(conversation_id, work), name=f"{self.name}-{conversation_id}")
        self._tasks[conversation_id] = task
        # A task cancelled before it ever ran never reaches its own `finally`: it leaves here.
        task.add_done_callback(lambda done: self._leave(conversation_id, done))
        return True

    def _leave(self, conversation_id: int, task: asyncio.Task) -> None:
        if self._tasks.get(conversation_id) is task:
            del self._tasks[conversation_id]

    async def _run(self, conversation_id: int, work: Callable[[], Awaitable[Any]]) -> None:
        try:
            await work()
        finally:  # in the task itself: whoever next finds it gone may start another
            self._leave(conversation_id, asyncio.current_task())

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
