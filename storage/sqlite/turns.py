"""Turns in SQLite (the Turns port): a running turn row from the start of every turn, its
reply and receipt in one transaction, the undo of its memory writes, and recovery after a crash.

A conversation's running turn is also its lock, and its waiting turns are a line
(`turn_queue`, see storage/turn_line.py): a turn starts when its ticket is first in line and no
other turn of the conversation runs, in any process sharing the file; the lock is let go when
the turn is finished or failed. A turn or ticket whose process is gone holds no one up.
"""

from __future__ import annotations

import json
from typing import Any

from storage.ports import RECOVER_WITHIN_S, Arrival, CallLimit, InterruptedTurn, MessageRow, TurnRow
from storage.sqlite.conversations import NEW_MESSAGE, NEXT_POS
from storage.sqlite.coordination import holder_alive, take_call
from storage.sqlite.database import Database, fetch_all, fetch_one
from storage.sqlite.memories import undo_journal
from storage.rows import (
    CONVERSATION_COLUMNS,
    MESSAGE_COLUMNS,
    TURN_COLUMNS,
    conversation,
    message,
    prefixed,
    turn,
    width,
)
from storage.turn_line import TurnLine


# The ticket first in a conversation's line: the one of the earliest message.
FIRST_IN_LINE = ("SELECT q.id, q.holder FROM turn_queue q JOIN messages m ON m.id = q.user_message_id "
                 "WHERE q.conversation_id = ? ORDER BY m.pos, q.id LIMIT 1")


class SQLiteTurns(TurnLine):
    def __init__(self, db: Database, holder: str):
        super().__init__(holder)
        self.db = db

    async def store_and_queue(self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
                              tokens: int, platform_message_id: str | None, limit: CallLimit | None) -> Arrival:
        now = self.db.clock()
        async with self.db.write() as db:
            row = await fetch_one(
                db, NEW_MESSAGE + f"VALUES (?, {NEXT_POS}, 'user', ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING "
                f"RETURNING {MESSAGE_COLUMNS}",
                (conversation_id, conversation_id, person_id, speaker_name, content, tokens, platform_message_id, now))
            if row is None:
                return Arrival(None)
            stored = message(row)
            if limit is not None and (wait := await take_call(db, limit, now)) is not None:
                return Arrival(stored, wait_s=wait)
            (ticket,) = await fetch_one(
                db, "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id", (conversation_id, person_id, stored.id, self.holder, now))
        return Arrival(stored, ticket)

    async def queue_turn(self, conversation_id: int, person_id: int | None, user_message_id: int) -> int:
        (ticket,) = await self.db.returning(
            "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at) "
            "VALUES (?, ?, ?, ?, ?) RETURNING id",
            (conversation_id, person_id, user_message_id, self.holder, self.db.clock()))
        return ticket

    async def _try_start(self, ticket: int) -> int | None:
        async with self.db.write() as db:
            queued = await fetch_one(
                db, "SELECT q.conversation_id, q.person_id, q.user_message_id, m.pos FROM turn_queue q "
                "JOIN messages m ON m.id = q.user_message_id WHERE q.id = ?", (ticket,))
            if queued is None:
                raise LookupError(f"turn ticket {ticket} was taken out of its line")
            conversation_id, person_id, user_message_id, pos = queued
            first = await fetch_one(db, FIRST_IN_LINE, (conversation_id,))
            if first[0] != ticket or await fetch_one(
                    db, "SELECT 1 FROM turns WHERE conversation_id = ? AND status = 'running' UNION ALL "
                    "SELECT 1 FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id JOIN messages m "
                    "ON m.id = t.user_message_id WHERE t.conversation_id = ? AND m.pos < ? AND t.created_at >= ?",
                    (conversation_id, conversation_id, pos, self.db.clock() - RECOVER_WITHIN_S)):
                return None
            await db.execute("DELETE FROM turn_queue WHERE id = ?", (ticket,))
            (turn_id,) = await fetch_one(
                db, "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder) "
                "VALUES (?, ?, ?, 'running', ?, ?) RETURNING id",
                (conversation_id, person_id, user_message_id, self.db.clock(), self.holder))
            return turn_id

    async def _withdraw(self, ticket: int) -> None:
        await self.db.execute("DELETE FROM turn_queue WHERE id = ?", (ticket,))

    async def _running_in_line(self, ticket: int) -> tuple[int, str | None] | None:
        return await self.db.one(
            "SELECT t.id, t.holder FROM turns t JOIN turn_queue q ON q.conversation_id = t.conversation_id "
            "WHERE q.id = ? AND t.status = 'running'", (ticket,))

    async def _first_in_line(self, ticket: int) -> tuple[int, str] | None:
        queued = await self.db.one("SELECT conversation_id FROM turn_queue WHERE id = ?", (ticket,))
        return None if queued is None else await self.db.one(FIRST_IN_LINE, (queued[0],))

    async def _stranded(self) -> tuple[list[tuple[int, str | None]], list[tuple[int, str]]]:
        return (await self.db.all("SELECT id, holder FROM turns WHERE status = 'running'"),
                await self.db.all("SELECT id, holder FROM turn_queue"))

    async def _alive(self, holder: str) -> bool:
        return holder_alive(holder)

    async def _interrupt(self, turn_id: int) -> bool:
        async with self.db.write() as db:
            cursor = await db.execute("UPDATE turns SET status = 'failed' WHERE id = ? AND status = 'running'",
                                      (turn_id,))
            if cursor.rowcount == 0:
                return False
            await undo_journal(db, turn_id)
            await db.execute("INSERT INTO interrupted_turns (turn_id) VALUES (?)", (turn_id,))
        return True

    async def _abandon(self, ticket: int) -> bool:
        async with self.db.write() as db:
            row = await fetch_one(
                db, "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder) "
                "SELECT conversation_id, person_id, user_message_id, 'failed', ?, holder FROM turn_queue WHERE id = ? "
                "RETURNING id", (self.db.clock(), ticket))
            if row is None:
                return False
            await db.execute("INSERT INTO interrupted_turns (turn_id) VALUES (?)", (row[0],))
            await db.execute("DELETE FROM turn_queue WHERE id = ?", (ticket,))
        return True


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
        self.ended(turn_id)
        return message(reply)

    async def fail_turn(self, turn_id: int) -> None:
        async with self.db.write() as db:
            await undo_journal(db, turn_id)
            await db.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (turn_id,))
        self.ended(turn_id)

    async def turn(self, turn_id: int) -> TurnRow | None:
        row = await self.db.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return turn(row) if row else None

    async def latest_turn(self, conversation_id: int, before: int | None = None) -> TurnRow | None:
        row = await self.db.one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND status = 'done' AND id < ? "
            "ORDER BY id DESC LIMIT 1", (conversation_id, before if before is not None else 2**63 - 1))
        return turn(row) if row else None

    async def last_receipt(self, conversation_id: int, person_id: int) -> TurnRow | None:
        row = await self.db.one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? AND person_id = ? AND status = 'done' "
            "ORDER BY id DESC LIMIT 1", (conversation_id, person_id))
        return turn(row) if row else None

    async def begin_regenerate(self, turn_id: int) -> int | None:
        conversation_id, person_id, user_message_id = await self.db.one(
            "SELECT conversation_id, person_id, user_message_id FROM turns WHERE id = ?", (turn_id,))
        new_turn = await self.begin_turn(conversation_id, person_id, user_message_id)
        async with self.db.write() as db:  # running now: no other turn can end meanwhile
            (latest,) = await fetch_one(db, "SELECT MAX(id) FROM turns WHERE conversation_id = ? AND status = 'done'",
                                        (conversation_id,))
            if latest == turn_id:
                await undo_journal(db, turn_id)
                return new_turn
            await db.execute("DELETE FROM turns WHERE id = ?", (new_turn,))  # a newer reply came first
        self.ended(new_turn)
        return None

    async def interrupted_turns(self, platform: str, character_id: int) -> list[InterruptedTurn]:
        rows = await self.db.all(
            f"SELECT {prefixed(TURN_COLUMNS, 't')}, {prefixed(CONVERSATION_COLUMNS, 'c')}, "
            f"{prefixed(MESSAGE_COLUMNS, 'm')} FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
            "JOIN conversations c ON c.id = t.conversation_id JOIN messages m ON m.id = t.user_message_id "
            "WHERE c.platform = ? AND c.character_id = ? ORDER BY t.conversation_id, m.pos", (platform, character_id))
        t, c = width(TURN_COLUMNS), width(CONVERSATION_COLUMNS)
        return [InterruptedTurn(turn(r[:t]), conversation(r[t:t + c]), message(r[t + c:])) for r in rows]

    async def claim_interrupted_turn(self, turn_id: int) -> bool:
        cursor = await self.db.execute("DELETE FROM interrupted_turns WHERE turn_id = ?", (turn_id,))
        return cursor.rowcount == 1

    async def requeue_interrupted_turn(self, turn_id: int) -> int | None:
        async with self.db.write() as db:
            if await fetch_one(db, "DELETE FROM interrupted_turns WHERE turn_id = ? RETURNING 1", (turn_id,)) is None:
                return None
            (ticket,) = await fetch_one(
                db, "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at) "
                "SELECT conversation_id, person_id, user_message_id, ?, ? FROM turns WHERE id = ? RETURNING id",
                (self.holder, self.db.clock(), turn_id))
        return ticket
