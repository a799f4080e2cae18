"""Turns in SQLite (the Turns port): a running turn row from the start of every turn, its
reply and receipt in one transaction, the undo of its memory writes, and recovery after a crash.

A conversation's running turn is also its lock: a turn starts only when no other turn of the
conversation runs, in any process sharing the file, and the lock is let go when the turn is
finished or failed. A running turn whose process is gone no longer holds anyone up.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiosqlite

from storage.ports import InterruptedTurn, MessageRow, TurnRow, Turns
from storage.sqlite.coordination import holder_alive
from storage.sqlite.database import Database, fetch_all, fetch_one
from storage.sqlite.memories import undo_journal
from storage.sqlite.rows import (
    CONVERSATION_COLUMNS,
    MESSAGE_COLUMNS,
    TURN_COLUMNS,
    conversation,
    message,
    prefixed,
    turn,
    width,
)


POLL_S = 0.02  # how often a turn waiting for the conversation looks again


async def interrupt(db: aiosqlite.Connection, turn_id: int) -> None:
    """A running turn whose process is gone: its memory writes undone, marked failed, and left
    for its adapter to answer again or mark (interrupted_turns)."""
    await undo_journal(db, turn_id)
    await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))
    await db.execute("INSERT OR IGNORE INTO interrupted_turns (turn_id) VALUES (?)", (turn_id,))


class SQLiteTurns(Turns):
    def __init__(self, db: Database, holder: str):
        self.db = db
        self.holder = holder  # this process: a crash leaves its running turns to recover

    async def begin_turn(self, conversation_id: int, person_id: int | None, user_message_id: int) -> int:
        while True:
            started = await self.db.returning(
                "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder) "
                "SELECT ?, ?, ?, 'running', ?, ? WHERE NOT EXISTS (SELECT 1 FROM turns WHERE conversation_id = ? "
                "AND status = 'running') RETURNING id",
                (conversation_id, person_id, user_message_id, self.db.clock(), self.holder, conversation_id))
            if started is not None:
                return started[0]
            await self._wait_for_running_turn(conversation_id)

    async def _wait_for_running_turn(self, conversation_id: int) -> None:
        """Another turn of the conversation runs: give it time, or recover it if its process is
        gone. (This process runs one turn of a conversation at a time: one of its own still
        running here was left behind by a failure, and is recovered too.)"""
        row = await self.db.one("SELECT id, holder FROM turns WHERE conversation_id = ? AND status = 'running'",
                                (conversation_id,))
        if row is not None and (row[1] == self.holder or not row[1] or not holder_alive(row[1])):
            async with self.db.write() as db:
                await interrupt(db, row[0])
        else:
            await asyncio.sleep(POLL_S)

    async def set_turn_partial(self, turn_id: int, platform_message_id: str) -> None:
        await self.db.execute("UPDATE turns SET partial_message_id = ? WHERE id = ?", (platform_message_id, turn_id))

    async def finish_turn(
        self, turn_id: int, user_message: MessageRow, speaker_name: str,
        content: str, tokens: int, receipt: dict[str, Any],
    ) -> MessageRow:
        async with self.db.write() as db:
            reply = await fetch_one(
                db, "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
                f"platform_message_id, created_at) VALUES (?, ?, 'assistant', NULL, ?, ?, ?, NULL, ?) "
                f"RETURNING {MESSAGE_COLUMNS}",
                (user_message.conversation_id, user_message.pos + 1, speaker_name, content, tokens, self.db.clock()))
            # This turn becomes 'done' with its reply; a turn it regenerates (the same message's
            # earlier 'done' turn) becomes 'replaced' in the same statement, and its reply goes.
            old_replies = await fetch_all(
                db, "UPDATE turns SET status = CASE WHEN id = ? THEN 'done' ELSE 'replaced' END, "
                "reply_message_id = CASE WHEN id = ? THEN ? ELSE reply_message_id END, "
                "receipt = CASE WHEN id = ? THEN ? ELSE receipt END "
                "WHERE id = ? OR (user_message_id = ? AND status = 'done') RETURNING id, reply_message_id",
                (turn_id, turn_id, reply[0], turn_id, json.dumps(receipt), turn_id, user_message.id))
            for replaced, old_reply in old_replies:
                if replaced != turn_id and old_reply is not None:
                    await db.execute("DELETE FROM messages WHERE id = ?", (old_reply,))
        return message(reply)

    async def fail_turn(self, turn_id: int) -> None:
        async with self.db.write() as db:
            await undo_journal(db, turn_id)
            await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))

    async def turn(self, turn_id: int) -> TurnRow | None:
        row = await self.db.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return turn(row) if row else None

    async def latest_turn(self, conversation_id: int) -> TurnRow | None:
        row = await self.db.one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND status = 'done' ORDER BY id DESC LIMIT 1",
            (conversation_id,))
        return turn(row) if row else None

    async def last_receipt(self, conversation_id: int, person_id: int) -> TurnRow | None:
        row = await self.db.one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND person_id = ? AND status = 'done' "
            "ORDER BY id DESC LIMIT 1", (conversation_id, person_id))
        return turn(row) if row else None

    async def begin_regenerate(self, turn_id: int) -> int | None:
        while True:
            async with self.db.write() as db:
                conversation_id, person_id, user_message_id = await fetch_one(
                    db, "SELECT conversation_id, person_id, user_message_id FROM turns WHERE id = ?", (turn_id,))
                if not await fetch_one(db, "SELECT 1 FROM turns WHERE conversation_id = ? AND status = 'running'",
                                       (conversation_id,)):
                    latest = await fetch_one(db, "SELECT MAX(id) FROM turns WHERE conversation_id = ? "
                                             "AND status = 'done'", (conversation_id,))
                    if latest[0] != turn_id:
                        return None  # a newer reply came first
                    await undo_journal(db, turn_id)
                    (new_turn,) = await fetch_one(
                        db, "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, "
                        "holder) VALUES (?, ?, ?, 'running', ?, ?) RETURNING id",
                        (conversation_id, person_id, user_message_id, self.db.clock(), self.holder))
                    return new_turn
            await self._wait_for_running_turn(conversation_id)

    async def recover_interrupted_turns(self) -> int:
        if not await self.db.one("SELECT 1 FROM turns WHERE status = 'running' LIMIT 1"):
            return 0
        async with self.db.write() as db:
            running = await fetch_all(db, "SELECT id, holder FROM turns WHERE status = 'running'")
            gone = [turn_id for turn_id, holder in running if not holder or not holder_alive(holder)]
            for turn_id in gone:
                await interrupt(db, turn_id)
            return len(gone)

    async def interrupted_turns(self, platform: str, character_id: int) -> list[InterruptedTurn]:
        rows = await self.db.all(
            f"SELECT {prefixed(TURN_COLUMNS, 't')}, {prefixed(CONVERSATION_COLUMNS, 'c')}, "
            f"{prefixed(MESSAGE_COLUMNS, 'm')} FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
            "JOIN conversations c ON c.id = t.conversation_id JOIN messages m ON m.id = t.user_message_id "
            "WHERE c.platform = ? AND c.character_id = ? ORDER BY t.id", (platform, character_id))
        t, c = width(TURN_COLUMNS), width(CONVERSATION_COLUMNS)
        return [InterruptedTurn(turn(r[:t]), conversation(r[t:t + c]), message(r[t + c:])) for r in rows]

    async def claim_interrupted_turn(self, turn_id: int) -> bool:
        cursor = await self.db.execute("DELETE FROM interrupted_turns WHERE turn_id = ?", (turn_id,))
        return cursor.rowcount == 1
