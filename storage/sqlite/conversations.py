"""Conversations and their messages in SQLite (the Conversations port).

A message's place in its conversation (`pos`) is assigned in the INSERT itself, inside SQLite's
write lock: a person's message takes the next even position after everything stored, and the
reply to it takes the odd position right after it, so a reply written after a later message
arrived still follows the message it answers.
"""

from __future__ import annotations

from storage.ports import ConversationRow, Conversations, MessageRow
from storage.sqlite.database import Database
from storage.rows import CONVERSATION_COLUMNS, MESSAGE_COLUMNS, conversation, in_sent_order, message, prefixed

NEXT_POS = "(SELECT COALESCE(MAX(pos), 0) / 2 * 2 + 2 FROM messages WHERE conversation_id = ?)"
NEW_MESSAGE = ("INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
               "platform_message_id, created_at) ")


class SQLiteConversations(Conversations):
    def __init__(self, db: Database):
        self.db = db

    async def conversation(
        self, platform: str, chat_id: str, thread_id: str | None, character_id: int, is_shared: bool
    ) -> ConversationRow:
        key = (platform, chat_id, thread_id or "", character_id)
        select = (f"SELECT {CONVERSATION_COLUMNS} FROM conversations "
                  "WHERE platform = ? AND chat_id = ? AND thread_id = ? AND character_id = ?")
        row = await self.db.one(select, key)
        if row is None or bool(row[5]) != is_shared:
            row = await self.db.returning(
                "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (platform, chat_id, thread_id, character_id) "
                f"DO UPDATE SET is_shared = excluded.is_shared RETURNING {CONVERSATION_COLUMNS}",
                (*key, int(is_shared), self.db.clock()),
            )
        return conversation(row)

    async def conversation_by_id(self, conversation_id: int) -> ConversationRow | None:
        row = await self.db.one(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,))
        return conversation(row) if row else None

    async def add_greeting(self, conversation_id: int, character_name: str, content: str, tokens: int) -> bool:
        row = await self.db.returning(
            NEW_MESSAGE + f"SELECT ?, {NEXT_POS}, 'assistant', NULL, ?, ?, ?, NULL, ? "
            "WHERE NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = ?) RETURNING id",
            (conversation_id, conversation_id, character_name, content, tokens, self.db.clock(), conversation_id),
        )
        return row is not None

    async def add_user_message(
        self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
        tokens: int, platform_message_id: str | None,
    ) -> MessageRow:
        row = await self.db.returning(
            NEW_MESSAGE + f"VALUES (?, {NEXT_POS}, 'user', ?, ?, ?, ?, ?, ?) RETURNING {MESSAGE_COLUMNS}",
            (conversation_id, conversation_id, person_id, speaker_name, content, tokens, platform_message_id,
             self.db.clock()),
        )
        return message(row)

    async def recent_messages(self, conversation_id: int, limit: int, up_to_pos: int | None = None
                              ) -> list[MessageRow]:
        if up_to_pos is None:
            rows = await self.db.all(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY pos DESC LIMIT ?",
                (conversation_id, limit))
        else:
            rows = await self.db.all(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos <= ? "
                "ORDER BY pos DESC LIMIT ?", (conversation_id, up_to_pos, limit))
        return [message(r) for r in rows]

    async def messages_between(self, conversation_id: int, after_pos: int, before_pos: int | None,
                               limit: int) -> list[MessageRow]:
        before = "" if before_pos is None else "AND pos < ? "
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos > ? {before}"
            "ORDER BY pos LIMIT ?",
            (conversation_id, after_pos, *(() if before_pos is None else (before_pos,)), limit))
        return [message(r) for r in rows]

    async def count_messages(self, conversation_id: int, after_pos: int, up_to_pos: int | None = None) -> int:
        up_to = "" if up_to_pos is None else " AND pos <= ?"
        (count,) = await self.db.one(
            f"SELECT COUNT(*) FROM messages WHERE conversation_id = ? AND pos > ?{up_to}",
            (conversation_id, after_pos, *(() if up_to_pos is None else (up_to_pos,))))
        return count

    async def message(self, message_id: int) -> MessageRow | None:
        row = await self.db.one(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,))
        return message(row) if row else None

    async def message_by_platform_id(self, conversation_id: int, platform_message_id: str) -> MessageRow | None:
        row = await self.db.one(  # the message itself, or a reply one of whose later parts it is
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND platform_message_id = ? "
            f"UNION ALL SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = (SELECT message_id FROM message_parts "
            "WHERE conversation_id = ? AND platform_message_id = ?) LIMIT 1",
            (conversation_id, platform_message_id, conversation_id, platform_message_id),
        )
        return message(row) if row else None

    async def messages_by_id(self, conversation_id: int, message_ids: list[int]) -> list[MessageRow]:
        if not message_ids:
            return []
        marks = ", ".join("?" * len(message_ids))
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND id IN ({marks}) ORDER BY pos",
            (conversation_id, *message_ids),
        )
        return [message(r) for r in rows]

    async def edit_platform_message(
        self, conversation_id: int, platform_message_id: str, content: str, tokens: int
    ) -> bool:
        cursor = await self.db.execute(
            "UPDATE messages SET content = ?, tokens = ? WHERE conversation_id = ? "
            "AND platform_message_id = ? AND role = 'user'",
            (content, tokens, conversation_id, platform_message_id),
        )
        return cursor.rowcount > 0

    async def delete_platform_message(self, conversation_id: int, platform_message_id: str) -> bool:
        cursor = await self.db.execute(
            "DELETE FROM messages WHERE conversation_id = ? AND platform_message_id = ?",
            (conversation_id, platform_message_id),
        )
        return cursor.rowcount > 0

    async def set_platform_message_ids(
        self, conversation_id: int, message_id: int, platform_message_ids: list[str]
    ) -> None:
        first, *parts = platform_message_ids
        async with self.db.write() as db:
            await db.execute("UPDATE messages SET platform_message_id = ? WHERE id = ?", (first, message_id))
            for part in parts:
                await db.execute(
                    "INSERT OR REPLACE INTO message_parts (conversation_id, platform_message_id, message_id) "
                    "VALUES (?, ?, ?)", (conversation_id, part, message_id))

    async def platform_message_ids(self, message_id: int) -> list[str]:
        first = await self.db.one("SELECT platform_message_id FROM messages WHERE id = ?", (message_id,))
        parts = await self.db.all("SELECT platform_message_id FROM message_parts WHERE message_id = ?", (message_id,))
        return in_sent_order([first[0]] if first and first[0] else [], [r[0] for r in parts])

    async def set_answer_origin(self, platform: str, chat_id: str, platform_message_ids: list[str],
                                conversation_id: int) -> None:
        async with self.db.write() as db:
            for platform_message_id in platform_message_ids:
                await db.execute(
                    "INSERT OR REPLACE INTO answer_origins (platform, chat_id, platform_message_id, conversation_id, "
                    "created_at) VALUES (?, ?, ?, ?, ?)",
                    (platform, chat_id, platform_message_id, conversation_id, self.db.clock()))

    async def answer_origin(self, platform: str, chat_id: str, platform_message_id: str) -> ConversationRow | None:
        row = await self.db.one(
            f"SELECT {prefixed(CONVERSATION_COLUMNS, 'c')} FROM answer_origins o JOIN conversations c "
            "ON c.id = o.conversation_id WHERE o.platform = ? AND o.chat_id = ? AND o.platform_message_id = ?",
            (platform, chat_id, platform_message_id))
        return conversation(row) if row else None
