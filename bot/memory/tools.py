"""The character's memory tools (SPEC section 5.1): save_memory, update_memory, delete_memory —
the toolbox's first residents (bot/tools/toolbox.py).

Whose memories a tool touches is fixed by the code — the speaker of the live turn, taken from
the platform event (`TurnScope.person_id`) — never by model output. They are offered only to a
person who lets the character learn. The model may change only the speaker's unpinned entries;
a pinned or unknown id, a full budget or malformed arguments give an error result the model can
read, never an exception. At most 5 writes a turn (saves, updates and deletes together); further
calls get an error result; none once outside text entered the turn (SPEC 18: they `store`, and the
toolbox refuses them then). Every write is
journaled under the turn, so regenerate (or a failed turn) can undo it.
"""

from __future__ import annotations

import abc

from typing import Any

from bot.memory.saved_memories import MAX_MEMORY_CHARS, cap_text, memory_number, memory_text_error, scope_error
from bot.model.tokens import TokenCounter
from bot.tools.toolbox import TurnScope, result
from storage.ports import CHARACTER, GLOBAL, AlreadySaved, CapReached, Memories, PinnedMemory

MAX_WRITES_PER_TURN = 5  # saves, updates and deletes together: one message cannot flood memory
GUIDANCE = """\
When the person tells you such a fact, save_memory it (scope "global" if it concerns them in \
general); update_memory or delete_memory it when it changes or stops being true. Save only what the \
person said in this conversation, never twice, never text from your memories, the summary or these \
instructions. Use the tools quietly, then answer in character."""

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "save_memory",
            "description": "Save a lasting fact the person told you (name, birthday, allergy, promise; "
            f"not plot or mood), at most {MAX_MEMORY_CHARS} characters.",
            "parameters": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "scope": {"type": "string", "enum": [CHARACTER, GLOBAL],
                              "description": "global: every character may use it; default character"},
                },
                "required": ["content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "update_memory",
            "description": "Rewrite a saved memory by id (12 for #12) when the fact changed; not a pinned one.",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "content": {"type": "string"}},
                "required": ["id", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "delete_memory",
            "description": "Delete a saved memory by id when it stopped being true; not a pinned one.",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
            },
        },
    },
]


WRITES = "memory writes"  # the turn's count of them (TurnScope.counts)


def _content(arguments: dict[str, Any]) -> tuple[str | None, str | None]:
    content = arguments.get("content")
    if not isinstance(content, str):
        return None, result(error="content must be a string")
    error = memory_text_error(content)
    return content.strip(), (result(error=error) if error else None)


class _MemoryTool(abc.ABC):
    """What the three memory tools share: offered to a person who lets the character learn, at
    most MAX_WRITES_PER_TURN writes a turn, each counted when it succeeded."""

    name: str
    spec: dict[str, Any]
    guidance = GUIDANCE
    local = True  # it answers with our own words
    stores = True  # it keeps what the model wrote: refused once outside text entered (bot/tools/toolbox.py)

    def __init__(self, memories: Memories, counter: TokenCounter):
        self.memories = memories
        self.counter = counter

    def offered(self, scope: TurnScope) -> bool:
        return scope.person_id is not None and scope.learning

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str:
        if scope.counts.get(WRITES, 0) >= MAX_WRITES_PER_TURN:
            return result(error=f"at most {MAX_WRITES_PER_TURN} memory changes are allowed per reply, and "
                          "they are used up; do not call memory tools again this turn")
        answer, wrote = await self.write(scope, arguments)
        if wrote:
            scope.counts[WRITES] = scope.counts.get(WRITES, 0) + 1
        return answer

    @abc.abstractmethod
    async def write(self, scope: TurnScope, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Make the change; what the model reads, and whether it was written."""


class SaveMemory(_MemoryTool):
    name, spec = "save_memory", TOOL_SPECS[0]

    async def write(self, scope: TurnScope, arguments: dict[str, Any]) -> tuple[str, bool]:
        content, error = _content(arguments)
        if error:
            return error, False
        scope_name = arguments.get("scope") or CHARACTER
        if error := scope_error(scope_name):
            return result(error=error), False
        assert scope.person_id is not None  # offered to a person only
        try:
            row = await self.memories.add_memory(
                scope.person_id, scope.character_id, scope_name, content, self.counter.count(content),
                pinned=False, source="ai", turn_id=scope.turn_id,
            )
        except AlreadySaved as same:
            return result(ok=True, id=same.memory.id, saved=f"#{same.memory.id}",
                          note="it was already saved; nothing new was written"), False
        except CapReached as full:
            return result(error=cap_text(full)), False
        return result(ok=True, id=row.id, saved=f"#{row.id}"), True


class UpdateMemory(_MemoryTool):
    name, spec = "update_memory", TOOL_SPECS[1]

    async def write(self, scope: TurnScope, arguments: dict[str, Any]) -> tuple[str, bool]:
        memory_id = memory_number(arguments.get("id"))
        if memory_id is None:
            return result(error="id must be a memory number such as 12"), False
        content, error = _content(arguments)
        if error:
            return error, False
        assert scope.person_id is not None
        try:
            row = await self.memories.update_memory(
                scope.person_id, scope.character_id, memory_id, content, self.counter.count(content),
                turn_id=scope.turn_id,
            )
        except PinnedMemory:
            return result(error=f"#{memory_id} is pinned by the person; only they can change it"), False
        except AlreadySaved as same:
            return result(error=f"#{same.memory.id} already says that; #{memory_id} was not changed"), False
        if row is None:
            return result(error=f"there is no memory #{memory_id}"), False
        return result(ok=True, id=memory_id), True


class DeleteMemory(_MemoryTool):
    name, spec = "delete_memory", TOOL_SPECS[2]

    async def write(self, scope: TurnScope, arguments: dict[str, Any]) -> tuple[str, bool]:
        memory_id = memory_number(arguments.get("id"))
        if memory_id is None:
            return result(error="id must be a memory number such as 12"), False
        assert scope.person_id is not None
        try:
            row = await self.memories.delete_memory(
                scope.person_id, scope.character_id, memory_id, turn_id=scope.turn_id
            )
        except PinnedMemory:
            return result(error=f"#{memory_id} is pinned by the person; only they can delete it"), False
        if row is None:
            return result(error=f"there is no memory #{memory_id}"), False
        return result(ok=True, id=memory_id), True


def memory_tools(memories: Memories, counter: TokenCounter) -> list[_MemoryTool]:
    """The memory tools, in the order they are offered."""
    return [SaveMemory(memories, counter), UpdateMemory(memories, counter), DeleteMemory(memories, counter)]
