"""Conversations and their messages in PostgreSQL (the Conversations port).

A message's place in its conversation (`pos`) comes from a counter on the conversation's row,
advanced by the statement that stores the message: PostgreSQL serializes updates of one row, so
messages stored at once by several processes each take their own place. A person's message
takes the next even place, the reply to it the odd place right after it.
"""

from __future__ import annotations

import asyncpg

from storage.ports import ConversationRow, Conversations, MessageRow
from storage.postgres.database import Database
from storage.rows import CONVERSATION_COLUMNS, MESSAGE_COLUMNS, conversation, in_sent_order, message, prefixed

# Takes the next even place; the INSERT that follows it stores the message there.
NEXT_PLACE = ("WITH place AS (UPDATE conversations SET last_pos = last_pos / 2 * 2 + 2 WHERE id = $1 "
              "RETURNING last_pos) ")
NEW_MESSAGE = ("INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
               "platform_message_id, created_at) ")


async def lock_conversation(db: asyncpg.Connection, conversation_id: int) -> None:
    """Hold the conversation's row until the transaction ends."""
    await db.execute("SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE", conversation_id)


class PostgresConversations(Conversations):
    def __init__(self, db: Database):
        self.db = db

    async def conversation(
        self, platform: str, chat_id: str, thread_id: str | None, character_id: int, is_shared: bool
    ) -> ConversationRow:
        key = (platform, chat_id, thread_id or "", character_id)
        row = await self.db.one(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations "
            "WHERE platform = $1 AND chat_id = $2 AND thread_id = $3 AND character_id = $4", *key)
        if row is None or row[5] != is_shared:
            row = await self.db.one(
                "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at) "
                "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (platform, chat_id, thread_id, character_id) "
                f"DO UPDATE SET is_shared = excluded.is_shared RETURNING {CONVERSATION_COLUMNS}",
                *key, is_shared, self.db.clock())
        return conversation(row)

    async def conversation_by_id(self, conversation_id: int) -> ConversationRow | None:
        row = await self.db.one(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = $1", conversation_id)
        return conversation(row) if row else None

    async def add_greeting(self, conversation_id: int, character_name: str, content: str, tokens: int) -> bool:
        async with self.db.transaction() as db:
            await lock_conversation(db, conversation_id)  # "none yet" holds until the greeting is in
            if await db.fetchval("SELECT EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1)", conversation_id):
                return False
            await db.execute(
                NEXT_PLACE + NEW_MESSAGE + "SELECT $1, last_pos, 'assistant', NULL, $2, $3, $4, NULL, $5 FROM place",
                conversation_id, character_name, content, tokens, self.db.clock())
        return True

    async def add_user_message(
        self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
        tokens: int, platform_message_id: str | None,
    ) -> MessageRow:
        row = await self.db.one(
            NEXT_PLACE + NEW_MESSAGE + "SELECT $1, last_pos, 'user', $2, $3, $4, $5, $6, $7 FROM place "
            f"RETURNING {MESSAGE_COLUMNS}",
            conversation_id, person_id, speaker_name, content, tokens, platform_message_id, self.db.clock())
        return message(row)

    async def recent_messages(self, conversation_id: int, limit: int, up_to_pos: int | None = None
                              ) -> list[MessageRow]:
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 AND ($2::bigint IS NULL OR pos <= $2) "
            "ORDER BY pos DESC LIMIT $3", conversation_id, up_to_pos, limit)
        return [message(r) for r in rows]

    async def messages_between(self, conversation_id: int, after_pos: int, before_pos: int | None,
                               limit: int) -> list[MessageRow]:
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 AND pos > $2 "
            "AND ($3::bigint IS NULL OR pos < $3) ORDER BY pos LIMIT $4",
            conversation_id, after_pos, before_pos, limit)
        return [message(r) for r in rows]

    async def count_messages(self, conversation_id: int, after_pos: int, up_to_pos: int | None = None) -> int:
        return await self.db.value(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = $1 AND pos > $2 "
            "AND ($3::bigint IS NULL OR pos <= $3)", conversation_id, after_pos, up_to_pos)

    async def message(self, message_id: int) -> MessageRow | None:
        row = await self.db.one(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1", message_id)
        return message(row) if row else None

    async def message_by_platform_id(self, conversation_id: int, platform_message_id: str) -> MessageRow | None:
        row = await self.db.one(  # the message itself, or a reply one of whose later parts it is
            f"(SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 AND platform_message_id = $2) "
            f"UNION ALL (SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = (SELECT message_id FROM message_parts "
            "WHERE conversation_id = $1 AND platform_message_id = $2)) LIMIT 1",
            conversation_id, platform_message_id)
        return message(row) if row else None

    async def messages_by_id(self, conversation_id: int, message_ids: list[int]) -> list[MessageRow]:
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 AND id = ANY($2::bigint[]) "
            "ORDER BY pos", conversation_id, message_ids)
        return [message(r) for r in rows]

    async def edit_platform_message(
        self, conversation_id: int, platform_message_id: str, content: str, tokens: int
    ) -> bool:
        return await self.db.execute(
            "UPDATE messages SET content = $1, tokens = $2 WHERE conversation_id = $3 "
            "AND platform_message_id = $4 AND role = 'user'",
            content, tokens, conversation_id, platform_message_id) > 0

    async def delete_platform_message(self, conversation_id: int, platform_message_id: str) -> bool:
        return await self.db.execute(
            "DELETE FROM messages WHERE conversation_id = $1 AND platform_message_id = $2",
            conversation_id, platform_message_id) > 0

    async def set_platform_message_ids(
        self, conversation_id: int, message_id: int, platform_message_ids: list[str]
    ) -> None:
        first, *parts = platform_message_ids
        async with self.db.transaction() as db:
            await db.execute("UPDATE messages SET platform_message_id = $1 WHERE id = $2", first, message_id)
            await db.execute(
                "INSERT INTO message_parts (conversation_id, platform_message_id, message_id) "
                "SELECT $1, part, $2 FROM unnest($3::text[]) AS part "
                "ON CONFLICT (conversation_id, platform_message_id) DO UPDATE SET message_id = excluded.message_id",
                conversation_id, message_id, parts)

    async def platform_message_ids(self, message_id: int) -> list[str]:
        first = await self.db.value("SELECT platform_message_id FROM messages WHERE id = $1", message_id)
        parts = await self.db.all("SELECT platform_message_id FROM message_parts WHERE message_id = $1", message_id)
        return in_sent_order([first] if first else [], [r[0] for r in parts])

    async def set_answer_origin(self, platform: str, chat_id: str, platform_message_ids: list[str],
                                conversation_id: int) -> None:
        await self.db.execute(
            "INSERT INTO answer_origins (platform, chat_id, platform_message_id, conversation_id, created_at) "
            "SELECT $1, $2, sent, $3, $4 FROM unnest($5::text[]) AS sent "
            "ON CONFLICT (platform, chat_id, platform_message_id) DO UPDATE SET conversation_id = excluded.conversation_id",
            platform, chat_id, conversation_id, self.db.clock(), platform_message_ids)

    async def answer_origin(self, platform: str, chat_id: str, platform_message_id: str) -> ConversationRow | None:
        row = await self.db.one(
            f"SELECT {prefixed(CONVERSATION_COLUMNS, 'c')} FROM answer_origins o JOIN conversations c "
            "ON c.id = o.conversation_id WHERE o.platform = $1 AND o.chat_id = $2 AND o.platform_message_id = $3",
            platform, chat_id, platform_message_id)
        return conversation(row) if row else None
