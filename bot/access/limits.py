"""`[limits] turns_per_minute` (SPEC 13): every model call made on someone's behalf — a turn,
Regenerate, `/memory generate`, Draft with AI — takes a call from their allowance, counted in
the database atomically with taking it, across chats and processes. A person is counted as a
person (every platform linked to them); nobody in particular (SPEC 2) is counted per chat.
Past the limit the person is told when to write again, and a message is still kept."""

from __future__ import annotations

from bot.contract import ConversationKey
from storage.ports import CallLimit, Coordination

WINDOW_S = 60.0
TOO_FAST = ("You're writing faster than I can answer: at most {limit} replies a minute. I've kept your "
            "message; write again in {seconds} seconds and I'll answer.")
TOO_FAST_FOR_CALLS = "That's more than I can do in a minute (at most {limit}). Try again in {seconds} seconds."


class CallLimits:
    def __init__(self, coordination: Coordination, per_minute: int | None):
        self.coordination = coordination
        self.per_minute = per_minute  # None: no limit

    def limit_for(self, person_id: int | None, conversation: ConversationKey) -> CallLimit | None:
        if self.per_minute is None:
            return None
        who = f"person:{person_id}" if person_id is not None else f"chat:{conversation.platform}:{conversation.chat_id}"
        return CallLimit(who, self.per_minute, WINDOW_S)

    async def take(self, person_id: int | None, conversation: ConversationKey) -> int | None:
        """Take a call: None when taken (or no limit), else the seconds until one is free."""
        limit = self.limit_for(person_id, conversation)
        return None if limit is None else await self.coordination.take_call(limit)
