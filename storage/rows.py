"""Column lists and the rows built from them, shared by every backend (a row comes back from
SQLite or PostgreSQL as a sequence in the order of these lists)."""

from __future__ import annotations

import json
from typing import Any

from storage.ports import CHARACTER, GLOBAL, ConversationRow, MemoriesInPlay, MemoryRow, MessageRow, SummaryRow, TurnRow

MEMORY_COLUMNS = "id, person_id, character_id, content, tokens, pinned, source, created_at, updated_at"
MESSAGE_COLUMNS = (
    "id, conversation_id, pos, role, person_id, speaker_name, content, tokens, platform_message_id, created_at"
)
TURN_COLUMNS = (
    "id, conversation_id, person_id, user_message_id, reply_message_id, status, receipt, created_at, "
    "partial_message_id"
)
CONVERSATION_COLUMNS = "id, platform, chat_id, thread_id, character_id, is_shared"
SUMMARY_COLUMNS = "id, conversation_id, tier, content, tokens, first_pos, last_pos, edited"
REBUILD_COLUMNS = "conversation_id, person_id, generation, progress_pos, status, error"
TIER_RANK = "CASE tier WHEN 'long_term' THEN 0 WHEN 'merged' THEN 1 ELSE 2 END"


def prefixed(columns: str, alias: str) -> str:
    """`a, b` → `m.a, m.b`."""
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def width(columns: str) -> int:
    return len(columns.split(","))


def memory(row: Any) -> MemoryRow:
    return MemoryRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6], row[7], row[8])


def message(row: Any) -> MessageRow:
    return MessageRow(*row)


def turn(row: Any) -> TurnRow:
    receipt = json.loads(row[6]) if row[6] else None
    return TurnRow(row[0], row[1], row[2], row[3], row[4], row[5], receipt, row[7], row[8])


def conversation(row: Any) -> ConversationRow:
    return ConversationRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]))


def summary(row: Any) -> SummaryRow:
    return SummaryRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]))


def scope_character(scope: str, character_id: int) -> int | None:
    """The character_id column of a scope: NULL for global."""
    return None if scope == GLOBAL else character_id


def in_sent_order(first: list[str], parts: list[str]) -> list[str]:
    """A reply's platform ids: its first message, then the later parts in the order they were
    sent (platform ids grow with time: Telegram message ids, Discord snowflakes)."""
    return first + sorted(parts, key=lambda part: (len(part), part))


def in_play(memories: list[MemoryRow]) -> MemoriesInPlay:
    """Memories read for a turn, sorted: pinned ones of both scopes newest first, and the
    unpinned ones of each scope as read (newest first)."""
    pinned = sorted((m for m in memories if m.pinned), key=lambda m: (m.updated_at, m.id), reverse=True)
    unpinned = {scope: [m for m in memories if not m.pinned and m.scope == scope] for scope in (CHARACTER, GLOBAL)}
    return MemoriesInPlay(pinned=pinned, unpinned=unpinned)


def person_export(identities: list[Any], memories: list[Any], settings: list[Any]) -> dict[str, Any]:
    """What /memory export hands a person: identities (platform, user), memory rows (the memory
    columns, then the character's name) and Learn-from-chat settings (name, on)."""
    return {
        "identities": [f"{p}:{u}" for p, u in identities],
        "memories": [
            {"id": r[0], "scope": GLOBAL if r[2] is None else CHARACTER, "character": r[9], "content": r[3],
             "pinned": bool(r[5]), "source": r[6], "created_at": r[7], "updated_at": r[8]}
            for r in memories
        ],
        "learn_from_chat": {name: bool(learn) for name, learn in settings},
    }
