"""Column lists and the rows built from them, read by column name (an SQLite row and an asyncpg
record both answer `row["name"]`). Where one query reads several tables, `columns(…, "t")`
names each column `t_<name>`, and the builders take that prefix."""

from __future__ import annotations

import functools
import json
import operator
from typing import Any, Iterator, Sequence

from storage.ports import (
    CHARACTER,
    GLOBAL,
    ConversationRow,
    MemoriesInPlay,
    MemoryRow,
    MessageRow,
    RebuildRow,
    SummaryRow,
    TurnRow,
)

MEMORY_COLUMNS = "id, person_id, character_id, content, tokens, pinned, source, created_at, updated_at"
MESSAGE_COLUMNS = (
    "id, conversation_id, pos, role, person_id, speaker_name, content, tokens, platform_message_id, created_at, "
    "character_id, spoken"
)
TURN_COLUMNS = (
    "id, conversation_id, person_id, user_message_id, reply_message_id, status, receipt, created_at, "
    "partial_message_id, character_id"
)
CONVERSATION_COLUMNS = "id, platform, chat_id, thread_id, character_id, is_shared"
SUMMARY_COLUMNS = "id, conversation_id, tier, content, tokens, first_pos, last_pos, edited"
REBUILD_COLUMNS = "conversation_id, person_id, generation, progress_pos, status, error"
TIER_RANK = "CASE tier WHEN 'long_term' THEN 0 WHEN 'merged' THEN 1 ELSE 2 END"


@functools.cache  # split each column list once
def names(columns: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in columns.split(","))


def columns(listed: str, alias: str) -> str:
    """`a, b` of table alias `m` → `m.a AS m_a, m.b AS m_b` (read back with prefix "m_")."""
    return ", ".join(f"{alias}.{c} AS {alias}_{c}" for c in names(listed))


@functools.cache
def _reader(keys: tuple[str, ...], listed: str, prefix: str) -> operator.itemgetter:
    """Reads the listed columns (named `prefix + name`) out of a row whose columns are `keys`,
    in the order listed: each name is looked up once per result shape, then read by place."""
    place = {key: number for number, key in enumerate(keys)}
    return operator.itemgetter(*(place[prefix + c] for c in names(listed)))


def _read(rows: Sequence[Any], listed: str, prefix: str) -> Iterator[tuple]:
    """Each row's listed columns, read by name, in the order listed: each column list names its
    row type's fields in their order (tests/test_rows.py). The names are found among the
    result's own columns once (an SQLite row and an asyncpg record both list them in `keys()`),
    not looked up again in every row of a result of hundreds."""
    if not rows:
        return iter(())
    return map(_reader(tuple(rows[0].keys()), listed, prefix), rows)


def memories(rows: Sequence[Any], prefix: str = "") -> list[MemoryRow]:
    return [MemoryRow(id_, person_id, character_id, content, tokens, bool(pinned), source, created_at, updated_at)
            for id_, person_id, character_id, content, tokens, pinned, source, created_at, updated_at
            in _read(rows, MEMORY_COLUMNS, prefix)]


def messages(rows: Sequence[Any], prefix: str = "") -> list[MessageRow]:
    return [MessageRow(*values[:-1], bool(values[-1])) for values in _read(rows, MESSAGE_COLUMNS, prefix)]


def memory(row: Any, prefix: str = "") -> MemoryRow:
    return memories([row], prefix)[0]


def message(row: Any, prefix: str = "") -> MessageRow:
    return messages([row], prefix)[0]


def turn(row: Any, prefix: str = "") -> TurnRow:
    ((id_, conversation_id, person_id, user_message_id, reply_message_id, status, receipt, created_at,
      partial_message_id, character_id),) = _read([row], TURN_COLUMNS, prefix)
    return TurnRow(id_, conversation_id, person_id, user_message_id, reply_message_id, status,
                   json.loads(receipt) if receipt else None, created_at, partial_message_id, character_id)


def conversation(row: Any, prefix: str = "") -> ConversationRow:
    ((id_, platform, chat_id, thread_id, character_id, is_shared),) = _read([row], CONVERSATION_COLUMNS, prefix)
    return ConversationRow(id_, platform, chat_id, thread_id, character_id, bool(is_shared))


def summaries(rows: Sequence[Any]) -> list[SummaryRow]:
    return [SummaryRow(id_, conversation_id, tier, content, tokens, first_pos, last_pos, bool(edited))
            for id_, conversation_id, tier, content, tokens, first_pos, last_pos, edited
            in _read(rows, SUMMARY_COLUMNS, "")]


def summary(row: Any) -> SummaryRow:
    return summaries([row])[0]


def rebuild(row: Any) -> RebuildRow:
    (values,) = _read([row], REBUILD_COLUMNS, "")
    return RebuildRow(*values)


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


def person_export(identities: list[Any], memories: list[Any], settings: list[Any],
                  persona: str | None = None) -> dict[str, Any]:
    """What /memory export hands a person: identities (platform, user_id), their persona, memories
    (the memory columns and the character's `name`) and Learn-from-chat settings (name, learn)."""
    return {
        "identities": [f"{r['platform']}:{r['user_id']}" for r in identities],
        "persona": persona,
        "memories": [
            {"id": r["id"], "scope": GLOBAL if r["character_id"] is None else CHARACTER, "character": r["name"],
             "content": r["content"], "pinned": bool(r["pinned"]), "source": r["source"],
             "created_at": r["created_at"], "updated_at": r["updated_at"]}
            for r in memories
        ],
        "learn_from_chat": {r["name"]: bool(r["learn"]) for r in settings},
    }
