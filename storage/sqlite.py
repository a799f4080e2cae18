"""The SQLite store on aiosqlite: one file, WAL, foreign keys, busy timeout, migrations.

`SQLiteStore` is the `Store` the core uses. Its parts: `sqlite_base.py` (connections,
transactions, caches), `sqlite_memories.py` (saved memories, their journal, Learn from chat),
`sqlite_summaries.py` (summaries, rebuilds, drafts); here: people, characters, conversations,
messages, turns, linking, forgetting and maintenance.
"""

from __future__ import annotations

import json
from dataclasses import astuple
from typing import Any

import aiosqlite

from storage.base import (
    CHARACTER,
    GLOBAL,
    CapReached,
    ConversationRow,
    InterruptedTurn,
    MemoryCaps,
    MergeReport,
    MessageRow,
    Store,
    TurnRow,
)
from storage.sqlite_base import ALL, MESSAGE_COLUMNS, TURN_COLUMNS, _message, _RecentMessages, _turn
from storage.sqlite_memories import SQLiteMemories
from storage.sqlite_summaries import SQLiteSummaries

INSERT_MESSAGE = f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # a MessageRow
INSERT_RUNNING_TURN = (
    "INSERT INTO turns (id, conversation_id, person_id, user_message_id, status, created_at) "
    "VALUES (?, ?, ?, ?, 'running', ?)"
)


class SQLiteStore(SQLiteMemories, SQLiteSummaries, Store):
    # -- people and characters -------------------------------------------------------------
    def _forget_cached(self) -> None:
        self._persons.clear()
        self._conversations.clear()

    async def person_for_identity(self, platform: str, user_id: str) -> int:
        cached = self._persons.get((platform, user_id))
        if cached is not None:
            return cached
        person_id = await self._person_for_identity(platform, user_id)
        self._persons[(platform, user_id)] = person_id
        return person_id

    async def _person_for_identity(self, platform: str, user_id: str) -> int:
        row = await self._one(
            "SELECT person_id FROM identities WHERE platform = ? AND user_id = ?", (platform, user_id)
        )
        if row:
            return row[0]
        async with self._write() as db:
            row = await self._fetch_one(
                db, "SELECT person_id FROM identities WHERE platform = ? AND user_id = ?",
                (platform, user_id),
            )
            if row:
                return row[0]
            cursor = await db.execute("INSERT INTO persons (created_at) VALUES (?)", (self.clock(),))
            person_id = cursor.lastrowid
            await db.execute(
                "INSERT INTO identities (platform, user_id, person_id) VALUES (?, ?, ?)",
                (platform, user_id, person_id),
            )
            return person_id

    async def identities_of(self, person_id: int) -> list[tuple[str, str]]:
        rows = await self._all(
            "SELECT platform, user_id FROM identities WHERE person_id = ? ORDER BY platform, user_id",
            (person_id,),
        )
        return [(r[0], r[1]) for r in rows]

    async def ensure_character(self, name: str) -> int:
        row = await self._one("SELECT id FROM characters WHERE name = ?", (name,))
        if row:
            return row[0]
        async with self._write() as db:
            await db.execute(
                "INSERT OR IGNORE INTO characters (name, created_at) VALUES (?, ?)", (name, self.clock())
            )
            row = await self._fetch_one(db, "SELECT id FROM characters WHERE name = ?", (name,))
            return row[0]

    async def character_memory_counts(self) -> dict[str, int]:
        rows = await self._all("SELECT c.name, COUNT(m.id) FROM characters c LEFT JOIN memories m "
                               "ON m.character_id = c.id GROUP BY c.id ORDER BY c.name")
        return {name: count for name, count in rows}

    async def remove_character(self, name: str, pinned_cap: int) -> int | None:
        async with self._write(*ALL) as db:
            row = await self._fetch_one(db, "SELECT id FROM characters WHERE name = ?", (name,))
            if row is None:
                return None
            character_id = row[0]
            # Pins that would exceed a person's global pin budget become unpinned, newest kept.
            people = await self._fetch_all(
                db, "SELECT DISTINCT person_id FROM memories WHERE character_id = ?", (character_id,)
            )
            for (person_id,) in people:
                (global_pins,) = await self._fetch_one(
                    db, "SELECT COUNT(*) FROM memories WHERE person_id = ? AND character_id IS NULL "
                    "AND pinned = 1", (person_id,),
                )
                moving = await self._fetch_all(
                    db, "SELECT id FROM memories WHERE person_id = ? AND character_id = ? AND pinned = 1 "
                    "ORDER BY updated_at DESC, id DESC", (person_id, character_id),
                )
                room = max(0, pinned_cap - global_pins)
                for (memory_id,) in moving[room:]:
                    await db.execute("UPDATE memories SET pinned = 0 WHERE id = ?", (memory_id,))
            cursor = await db.execute(
                "UPDATE memories SET character_id = NULL WHERE character_id = ?", (character_id,)
            )
            moved = cursor.rowcount
            await db.execute("DELETE FROM characters WHERE id = ?", (character_id,))
            self._forget_cached()
            return moved

    # -- conversations and messages ----------------------------------------------------------
    async def conversation(
        self, platform: str, chat_id: str, thread_id: str | None, character_id: int, is_shared: bool
    ) -> ConversationRow:
        key = (platform, chat_id, thread_id or "", character_id)
        cached = self._conversations.get(key)
        if cached is not None and cached.is_shared == is_shared:
            return cached
        sql = (
            "SELECT id, platform, chat_id, thread_id, character_id, is_shared FROM conversations "
            "WHERE platform = ? AND chat_id = ? AND thread_id = ? AND character_id = ?"
        )
        row = await self._one(sql, key)
        if row is None or bool(row[5]) != is_shared:
            async with self._write() as db:
                await db.execute(
                    "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (platform, chat_id, thread_id, "
                    "character_id) DO UPDATE SET is_shared = excluded.is_shared",
                    (*key, int(is_shared), self.clock()),
                )
                row = await self._fetch_one(db, sql, key)
        self._conversations[key] = ConversationRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]))
        return self._conversations[key]

    async def conversation_by_id(self, conversation_id: int) -> ConversationRow | None:
        row = await self._one(
            "SELECT id, platform, chat_id, thread_id, character_id, is_shared FROM conversations "
            "WHERE id = ?", (conversation_id,),
        )
        return ConversationRow(row[0], row[1], row[2], row[3], row[4], bool(row[5])) if row else None

    async def add_user_message(
        self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
        tokens: int, platform_message_id: str | None,
    ) -> MessageRow:
        async def insert() -> MessageRow:
            message_id = self._new_id("messages")
            row = MessageRow(message_id, conversation_id, 2 * message_id, "user", person_id, speaker_name,
                             content, tokens, platform_message_id, self.clock())
            await self._single(INSERT_MESSAGE, astuple(row), after=lambda _: self._recent.add(row))
            return row

        return await self._with_new_ids(insert)

    async def add_greeting(self, conversation_id: int, character_name: str, content: str, tokens: int) -> bool:
        async def insert() -> bool:
            message_id = self._new_id("messages")
            row = MessageRow(message_id, conversation_id, 2 * message_id, "assistant", None, character_name,
                             content, tokens, None, self.clock())

            def hold(cursor: aiosqlite.Cursor) -> None:
                if cursor.rowcount == 1:
                    self._recent.add(row)

            cursor = await self._single(
                f"INSERT INTO messages ({MESSAGE_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = ?)",
                (*astuple(row), conversation_id), after=hold,
            )
            return cursor.rowcount == 1

        return await self._with_new_ids(insert)

    async def recent_messages(self, conversation_id: int, up_to_pos: int, limit: int) -> list[MessageRow]:
        held = self._recent.newest(conversation_id, up_to_pos, limit)
        if held is not None:
            return held
        newest = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY pos DESC LIMIT ?"
        async with self._write_lock:  # no write can slip in between the read and filling the cache
            assert self._writer is not None, "store is not open"
            rows = await self._fetch_all(self._writer, newest, (conversation_id, _RecentMessages.KEEP))
            self._recent.fill(conversation_id, [_message(r) for r in rows])
        held = self._recent.newest(conversation_id, up_to_pos, limit)
        if held is not None:
            return held
        rows = await self._all(  # further back than the cache holds
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos <= ? "
            "ORDER BY pos DESC LIMIT ?",
            (conversation_id, up_to_pos, limit),
        )
        return [_message(r) for r in rows]

    async def message(self, message_id: int) -> MessageRow | None:
        row = await self._one(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,))
        return _message(row) if row else None

    async def edit_platform_message(
        self, conversation_id: int, platform_message_id: str, content: str, tokens: int
    ) -> bool:
        cursor = await self._single(
            "UPDATE messages SET content = ?, tokens = ? WHERE conversation_id = ? "
            "AND platform_message_id = ? AND role = 'user'",
            (content, tokens, conversation_id, platform_message_id),
            after=lambda _: self._recent.drop(conversation_id),
        )
        return cursor.rowcount > 0

    async def delete_platform_message(self, conversation_id: int, platform_message_id: str) -> bool:
        cursor = await self._single(
            "DELETE FROM messages WHERE conversation_id = ? AND platform_message_id = ?",
            (conversation_id, platform_message_id),
            after=lambda _: self._recent.drop(conversation_id),
        )
        return cursor.rowcount > 0

    async def set_platform_message_ids(
        self, conversation_id: int, message_id: int, platform_message_ids: list[str]
    ) -> None:
        first, *parts = platform_message_ids
        statements = [("UPDATE messages SET platform_message_id = ? WHERE id = ?", (first, message_id))]
        statements += [("INSERT OR REPLACE INTO message_parts (conversation_id, platform_message_id, message_id) "
                        "VALUES (?, ?, ?)", (conversation_id, part, message_id)) for part in parts]
        await self._script(
            statements, after=lambda: self._recent.set_platform_message_id(conversation_id, message_id, first)
        )

    # -- turns -----------------------------------------------------------------------------
    async def begin_turn(self, conversation_id: int, person_id: int | None, user_message_id: int) -> int:
        async def insert() -> int:
            turn_id = self._new_id("turns")
            await self._single(INSERT_RUNNING_TURN,
                               (turn_id, conversation_id, person_id, user_message_id, self.clock()))
            return turn_id

        return await self._with_new_ids(insert)

    async def set_turn_partial(self, turn_id: int, platform_message_id: str) -> None:
        await self._single("UPDATE turns SET partial_message_id = ? WHERE id = ?", (platform_message_id, turn_id))

    async def finish_turn(
        self, turn_id: int, user_message: MessageRow, speaker_name: str,
        content: str, tokens: int, receipt: dict[str, Any],
    ) -> MessageRow:
        async def write() -> MessageRow:
            reply = MessageRow(self._new_id("messages"), user_message.conversation_id, user_message.pos + 1,
                               "assistant", None, speaker_name, content, tokens, None, self.clock())
            replaced = False

            def hold() -> None:  # a replaced reply: the held rows are read again
                if replaced:
                    self._recent.drop(reply.conversation_id)
                else:
                    self._recent.add(reply)

            async with self._write(after=hold) as db:
                old = await self._fetch_all(  # a regenerated turn replaces the old reply
                    db, "SELECT id, reply_message_id FROM turns WHERE user_message_id = ? AND status = 'done'",
                    (user_message.id,),
                )
                for old_turn, old_reply in old:
                    await db.execute("UPDATE turns SET status = 'replaced' WHERE id = ?", (old_turn,))
                    await db.execute("DELETE FROM messages WHERE id = ?", (old_reply,))
                    replaced = True
                await db.execute(INSERT_MESSAGE, astuple(reply))
                await db.execute(
                    "UPDATE turns SET status = 'done', reply_message_id = ?, receipt = ? WHERE id = ?",
                    (reply.id, json.dumps(receipt), turn_id),
                )
            return reply

        return await self._with_new_ids(write)

    async def fail_turn(self, turn_id: int) -> None:
        async with self._write("memories") as db:
            await self._undo_journal(db, turn_id)
            await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))

    async def turn(self, turn_id: int) -> TurnRow | None:
        row = await self._one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return _turn(row) if row else None

    async def latest_turn(self, conversation_id: int) -> TurnRow | None:
        row = await self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND status = 'done' "
            "ORDER BY id DESC LIMIT 1", (conversation_id,),
        )
        return _turn(row) if row else None

    async def last_receipt(self, conversation_id: int, person_id: int) -> TurnRow | None:
        row = await self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND person_id = ? "
            "AND status = 'done' ORDER BY id DESC LIMIT 1", (conversation_id, person_id),
        )
        return _turn(row) if row else None

    async def begin_regenerate(self, turn_id: int) -> int:
        return await self._with_new_ids(lambda: self._begin_regenerate(turn_id))

    async def _begin_regenerate(self, turn_id: int) -> int:
        async with self._write("memories") as db:
            conversation_id, person_id, user_message_id = await self._fetch_one(
                db, "SELECT conversation_id, person_id, user_message_id FROM turns WHERE id = ?",
                (turn_id,),
            )
            await self._undo_journal(db, turn_id)
            new_turn = self._new_id("turns")
            await db.execute(INSERT_RUNNING_TURN, (new_turn, conversation_id, person_id, user_message_id, self.clock()))
            return new_turn

    async def recover_interrupted_turns(self) -> int:
        async with self._write("memories") as db:
            running = await self._fetch_all(db, "SELECT id FROM turns WHERE status = 'running'")
            for (turn_id,) in running:
                await self._undo_journal(db, turn_id)
                await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))
                await db.execute("INSERT OR IGNORE INTO interrupted_turns (turn_id) VALUES (?)", (turn_id,))
            return len(running)

    async def interrupted_turns(self, platform: str, character_id: int) -> list[InterruptedTurn]:
        turn_columns = ", ".join(f"t.{c}" for c in TURN_COLUMNS.split(", "))
        message_columns = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS.split(", "))
        rows = await self._all(
            f"SELECT {turn_columns}, c.id, c.platform, c.chat_id, c.thread_id, c.character_id, c.is_shared, "
            f"{message_columns} FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
            "JOIN conversations c ON c.id = t.conversation_id JOIN messages m ON m.id = t.user_message_id "
            "WHERE c.platform = ? AND c.character_id = ? ORDER BY t.id", (platform, character_id),
        )
        width = len(TURN_COLUMNS.split(", "))
        return [InterruptedTurn(_turn(r[:width]), ConversationRow(*r[width:width + 5], bool(r[width + 5])),
                                _message(r[width + 6:])) for r in rows]

    async def claim_interrupted_turn(self, turn_id: int) -> bool:
        cursor = await self._single("DELETE FROM interrupted_turns WHERE turn_id = ?", (turn_id,))
        return cursor.rowcount == 1

    async def create_link_code(self, person_id: int, platform: str, code: str, expires_at: float) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM link_codes WHERE person_id = ? OR expires_at < ?",
                             (person_id, self.clock()))
            await db.execute(
                "INSERT INTO link_codes (code, person_id, platform, expires_at) VALUES (?, ?, ?, ?)",
                (code, person_id, platform, expires_at),
            )

    async def link_code(self, code: str, now: float) -> tuple[int, str] | None:
        row = await self._one(
            "SELECT person_id, platform FROM link_codes WHERE code = ? AND expires_at >= ?", (code, now)
        )
        return (row[0], row[1]) if row else None

    async def add_link_failure(self, person_id: int, at: float) -> None:
        await self._single("INSERT INTO link_failures (person_id, at) VALUES (?, ?)", (person_id, at))

    async def link_failures_since(self, person_id: int, since: float) -> int:
        (count,) = await self._one("SELECT COUNT(*) FROM link_failures WHERE person_id = ? AND at >= ?",
                                   (person_id, since))
        return count

    async def merge_persons(self, keep: int, absorb: int, caps: MemoryCaps) -> MergeReport:
        async with self._write(*ALL) as db:
            scopes = await self._fetch_all(
                db, "SELECT DISTINCT character_id FROM memories WHERE person_id IN (?, ?)", (keep, absorb)
            )
            to_unpin: list[int] = []
            for (character,) in scopes:
                scope = GLOBAL if character is None else CHARACTER
                pins = await self._fetch_all(
                    db, "SELECT id FROM memories WHERE person_id IN (?, ?) AND character_id IS ? "
                    "AND pinned = 1 ORDER BY person_id = ? DESC, updated_at DESC, id DESC",
                    (keep, absorb, character, keep),
                )
                over = [memory_id for (memory_id,) in pins[caps.pinned:]]
                unpinned = sum([await self._count(db, p, character, False) for p in (keep, absorb)])
                if unpinned + len(over) > caps.unpinned:
                    raise CapReached("unpinned", caps.unpinned, scope, unpinned + len(over))
                to_unpin += over
            for memory_id in to_unpin:
                await db.execute("UPDATE memories SET pinned = 0 WHERE id = ?", (memory_id,))
            await db.execute("UPDATE memories SET person_id = ? WHERE person_id = ?", (keep, absorb))
            await db.execute("UPDATE identities SET person_id = ? WHERE person_id = ?", (keep, absorb))
            await db.execute("UPDATE messages SET person_id = ? WHERE person_id = ?", (keep, absorb))
            await db.execute("UPDATE turns SET person_id = ? WHERE person_id = ?", (keep, absorb))
            # Learn from chat: where the two differ, off wins (the more private choice).
            await db.execute(
                "INSERT INTO person_settings (person_id, character_id, learn) "
                "SELECT ?, character_id, learn FROM person_settings WHERE person_id = ? "
                "ON CONFLICT (person_id, character_id) DO UPDATE "
                "SET learn = MIN(learn, excluded.learn)",
                (keep, absorb),
            )
            await db.execute("DELETE FROM persons WHERE id = ?", (absorb,))
            await db.execute("DELETE FROM link_codes WHERE person_id = ?", (keep,))
            self._forget_cached()
            return MergeReport(unpinned_pins=len(to_unpin))

    async def forget_person(self, person_id: int) -> list[int]:
        async with self._write(*ALL) as db:
            shared = [row[0] for row in await self._fetch_all(
                db, "SELECT DISTINCT m.conversation_id FROM messages m JOIN conversations c "
                "ON c.id = m.conversation_id WHERE m.person_id = ? AND c.is_shared = 1", (person_id,),
            )]
            # One-to-one conversations are all about the person: they go whole.
            await db.execute(
                "DELETE FROM conversations WHERE is_shared = 0 AND id IN "
                "(SELECT DISTINCT conversation_id FROM messages WHERE person_id = ?)", (person_id,),
            )
            # In shared ones, their messages and the character's replies to them.
            await db.execute(
                "DELETE FROM messages WHERE id IN (SELECT reply_message_id FROM turns "
                "WHERE person_id = ? AND reply_message_id IS NOT NULL)", (person_id,),
            )
            await db.execute("DELETE FROM messages WHERE person_id = ?", (person_id,))
            await db.execute("DELETE FROM persons WHERE id = ?", (person_id,))
            self._forget_cached()
        return shared

    # -- maintenance -----------------------------------------------------------------------
    async def get_meta(self, key: str) -> str | None:
        row = await self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0] if row else None

    async def set_meta(self, key: str, value: str) -> None:
        async with self._write() as db:
            await db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    async def checkpoint(self) -> None:
        assert self._writer is not None
        async with self._write_lock:
            await self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def backup(self, target: str) -> None:
        assert self._reader is not None
        async with aiosqlite.connect(target) as destination:
            await self._reader.backup(destination)

    async def purge_messages(self, older_than: float) -> int:
        async with self._write(*ALL) as db:
            cursor = await db.execute(
                "DELETE FROM messages WHERE created_at < ? AND pos <= "
                "(SELECT summarized_pos FROM conversations c WHERE c.id = messages.conversation_id) "
                "AND id NOT IN (SELECT user_message_id FROM turns WHERE status = 'running')",
                (older_than,),
            )
            return cursor.rowcount
