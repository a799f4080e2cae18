"""The character's memory tools (SPEC section 5.1): save_memory, update_memory, delete_memory.

Whose memories a tool touches is fixed by the code — the speaker of the live turn, taken from
the platform event — never by model output. The model may change only the speaker's unpinned
entries; a pinned or unknown id, a full budget or malformed arguments give an error result the
model can read, never an exception. At most 5 writes a turn (saves, updates and deletes
together); further calls get an error result. Every write is journaled under the turn, so
regenerate (or a failed turn) can undo it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bot.memory.saved_memories import MAX_MEMORY_CHARS, cap_text, memory_number, memory_text_error, scope_error
from bot.model.tokens import TokenCounter
from storage.ports import CHARACTER, GLOBAL, CapReached, PinnedMemory, Store

log = logging.getLogger(__name__)
MAX_TOOL_ROUNDS = 3
MAX_WRITES_PER_TURN = 5  # saves, updates and deletes together: one message cannot flood memory

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


def _result(**fields: Any) -> str:
    return json.dumps(fields)


class MemoryTools:
    """Runs one turn's tool calls against the speaker's memories."""

    def __init__(self, store: Store, counter: TokenCounter, person_id: int, character_id: int, turn_id: int):
        self.store = store
        self.counter = counter
        self.person_id = person_id
        self.character_id = character_id
        self.turn_id = turn_id  # every write is journaled under it
        self.writes = 0

    async def run(self, name: str, raw_arguments: str | None) -> str:
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            return _result(error=f"arguments are not valid JSON ({exc.msg}); call {name} again "
                           "with a JSON object")
        if not isinstance(arguments, dict):
            return _result(error="arguments must be a JSON object")
        handler = {
            "save_memory": self.save_memory,
            "update_memory": self.update_memory,
            "delete_memory": self.delete_memory,
        }.get(name)
        if handler is None:
            return _result(error=f"unknown tool {name!r}")
        if self.writes >= MAX_WRITES_PER_TURN:
            return _result(error=f"at most {MAX_WRITES_PER_TURN} memory changes are allowed per reply, and "
                           "they are used up; do not call memory tools again this turn")
        try:
            result = await handler(arguments)
        except Exception:  # the reply goes on; the model reads that the tool failed
            log.exception("memory tool %s failed", name)
            return _result(error=f"{name} failed on our side; do not retry it this turn")
        if json.loads(result).get("ok"):
            self.writes += 1
        return result

    def _content(self, arguments: dict[str, Any]) -> tuple[str | None, str | None]:
        content = arguments.get("content")
        if not isinstance(content, str):
            return None, _result(error="content must be a string")
        error = memory_text_error(content)
        return content.strip(), (_result(error=error) if error else None)

    async def save_memory(self, arguments: dict[str, Any]) -> str:
        content, error = self._content(arguments)
        if error:
            return error
        scope = arguments.get("scope") or CHARACTER
        if error := scope_error(scope):
            return _result(error=error)
        try:
            row = await self.store.memories.add_memory(
                self.person_id, self.character_id, scope, content, self.counter.count(content),
                pinned=False, source="ai", turn_id=self.turn_id,
            )
        except CapReached as full:
            return _result(error=cap_text(full))
        return _result(ok=True, id=row.id, saved=f"#{row.id}")

    async def update_memory(self, arguments: dict[str, Any]) -> str:
        memory_id = memory_number(arguments.get("id"))
        if memory_id is None:
            return _result(error="id must be a memory number such as 12")
        content, error = self._content(arguments)
        if error:
            return error
        try:
            row = await self.store.memories.update_memory(
                self.person_id, self.character_id, memory_id, content, self.counter.count(content),
                turn_id=self.turn_id,
            )
        except PinnedMemory:
            return _result(error=f"#{memory_id} is pinned by the person; only they can change it")
        if row is None:
            return _result(error=f"there is no memory #{memory_id}")
        return _result(ok=True, id=memory_id)

    async def delete_memory(self, arguments: dict[str, Any]) -> str:
        memory_id = memory_number(arguments.get("id"))
        if memory_id is None:
            return _result(error="id must be a memory number such as 12")
        try:
            row = await self.store.memories.delete_memory(
                self.person_id, self.character_id, memory_id, turn_id=self.turn_id
            )
        except PinnedMemory:
            return _result(error=f"#{memory_id} is pinned by the person; only they can delete it")
        if row is None:
            return _result(error=f"there is no memory #{memory_id}")
        return _result(ok=True, id=memory_id)
