"""Turns in PostgreSQL (the Turns port): the same rules as the SQLite store's.

A conversation's running turn is its lock: a unique index allows one, so of two processes
starting a turn of one conversation at once, one gets it and the other waits its turn. Its
waiting turns are a line (`turn_queue`, see storage/turn_line.py). No transaction stays open
while the model answers: the lock is the running row. A turn or ticket whose process is gone
(its presence lock is free, see database.py) holds no one up.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from storage.ports import RECOVER_WITHIN_S, Arrival, CallLimit, InterruptedTurn, MessageRow, TurnRow
from storage.postgres.conversations import NEW_MESSAGE, NEXT_PLACE
from storage.postgres.coordination import take_call
from storage.postgres.database import Database, changed
from storage.postgres.memories import undo_journal
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
FIRST_IN_LINE = ("SELECT {columns} FROM turn_queue q2 JOIN messages m2 ON m2.id = q2.user_message_id "
                 "WHERE q2.conversation_id = {conversation} ORDER BY m2.pos, q2.id LIMIT 1")


class PostgresTurns(TurnLine):
    def __init__(self, db: Database, holder: str):
        super().__init__(holder)
        self.db = db

    async def store_and_queue(self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
                              tokens: int, platform_message_id: str | None, limit: CallLimit | None) -> Arrival:
        now = self.db.clock()
        async with self.db.transaction() as db:
            row = await db.fetchrow(
                NEXT_PLACE + NEW_MESSAGE + "SELECT $1, last_pos, 'user', $2, $3, $4, $5, $6, $7 FROM place "
                f"ON CONFLICT DO NOTHING RETURNING {MESSAGE_COLUMNS}",
                conversation_id, person_id, speaker_name, content, tokens, platform_message_id, now)
            if row is None:
                return Arrival(None)
            stored = message(row)
            if limit is not None and (wait := await take_call(db, limit, now)) is not None:
                return Arrival(stored, wait_s=wait)
            ticket = await db.fetchval(
                "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at) "
                "VALUES ($1, $2, $3, $4, $5) RETURNING id", conversation_id, person_id, stored.id, self.holder, now)
        return Arrival(stored, ticket)

    async def queue_turn(self, conversation_id: int, person_id: int | None, user_message_id: int) -> int:
        return await self.db.value(
            "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at) "
            "VALUES ($1, $2, $3, $4, $5) RETURNING id",
            conversation_id, person_id, user_message_id, self.holder, self.db.clock())

    async def _try_start(self, ticket: int) -> int | None:
        try:
            turn_id = await self.db.value(
                "WITH first AS (DELETE FROM turn_queue q WHERE q.id = $1 "
                f"AND q.id = ({FIRST_IN_LINE.format(conversation='q.conversation_id', columns='q2.id')}) "
                "AND NOT EXISTS (SELECT 1 FROM turns WHERE conversation_id = q.conversation_id AND status = 'running') "
                "AND NOT EXISTS (SELECT 1 FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
                "JOIN messages m ON m.id = t.user_message_id WHERE t.conversation_id = q.conversation_id "
                "AND t.created_at >= $4 AND m.pos < (SELECT pos FROM messages WHERE id = q.user_message_id)) "
                "RETURNING conversation_id, person_id, user_message_id) "
                "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder) "
                "SELECT conversation_id, person_id, user_message_id, 'running', $2, $3 FROM first RETURNING id",
                ticket, self.db.clock(), self.holder, self.db.clock() - RECOVER_WITHIN_S)
        except asyncpg.UniqueViolationError:  # another process started one of this conversation just now
            return None
        if turn_id is not None:
            return turn_id
        if not await self.db.value("SELECT EXISTS (SELECT 1 FROM turn_queue WHERE id = $1)", ticket):
            raise LookupError(f"turn ticket {ticket} was taken out of its line")
        return None

    async def _withdraw(self, ticket: int) -> None:
        await self.db.execute("DELETE FROM turn_queue WHERE id = $1", ticket)

    async def _running_in_line(self, ticket: int) -> tuple[int, str | None] | None:
        return await self.db.one(
            "SELECT t.id, t.holder FROM turns t JOIN turn_queue q ON q.conversation_id = t.conversation_id "
            "WHERE q.id = $1 AND t.status = 'running'", ticket)

    async def _first_in_line(self, ticket: int) -> tuple[int, str] | None:
        return await self.db.one(FIRST_IN_LINE.format(
            conversation="(SELECT conversation_id FROM turn_queue WHERE id = $1)", columns="q2.id, q2.holder"), ticket)

    async def _stranded(self) -> tuple[list[tuple[int, str | None]], list[tuple[int, str]]]:
        return (await self.db.all("SELECT id, holder FROM turns WHERE status = 'running'"),
                await self.db.all("SELECT id, holder FROM turn_queue"))

    async def _alive(self, holder: str) -> bool:
        return await self.db.process_alive(holder)

    async def _interrupt(self, turn_id: int) -> bool:
        async with self.db.transaction() as db:
            if changed(await db.execute("UPDATE turns SET status = 'failed' WHERE id = $1 AND status = 'running'",
                                        turn_id)) == 0:
                return False
            await undo_journal(db, turn_id)
            await db.execute("INSERT INTO interrupted_turns (turn_id) VALUES ($1)", turn_id)
        return True

    async def _abandon(self, ticket: int) -> bool:
        async with self.db.transaction() as db:
            turn_id = await db.fetchval(
                "WITH gone AS (DELETE FROM turn_queue WHERE id = $1 RETURNING conversation_id, person_id, "
                "user_message_id, holder) INSERT INTO turns (conversation_id, person_id, user_message_id, status, "
                "created_at, holder) SELECT conversation_id, person_id, user_message_id, 'failed', $2, holder FROM gone "
                "RETURNING id", ticket, self.db.clock())
            if turn_id is None:
                return False
            await db.execute("INSERT INTO interrupted_turns (turn_id) VALUES ($1)", turn_id)
        return True


    async def set_turn_partial(self, turn_id: int, platform_message_id: str) -> None:
        await self.db.execute("UPDATE turns SET partial_message_id = $1 WHERE id = $2", platform_message_id, turn_id)

    async def finish_turn(
        self, turn_id: int, user_message: MessageRow, speaker_name: str,
        content: str, tokens: int, receipt: dict[str, Any],
    ) -> MessageRow:
        async with self.db.transaction() as db:
            reply = await db.fetchrow(
                "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
                "platform_message_id, created_at) VALUES ($1, $2, 'assistant', NULL, $3, $4, $5, NULL, $6) "
                f"RETURNING {MESSAGE_COLUMNS}",
                user_message.conversation_id, user_message.pos + 1, speaker_name, content, tokens, self.db.clock())
            # This turn becomes 'done' with its reply; a turn it regenerates (the same message's
            # earlier 'done' turn) becomes 'replaced' in the same statement, and its reply goes.
            old_replies = await db.fetch(
                "UPDATE turns SET status = CASE WHEN id = $1 THEN 'done' ELSE 'replaced' END, "
                "reply_message_id = CASE WHEN id = $1 THEN $2 ELSE reply_message_id END, "
                "receipt = CASE WHEN id = $1 THEN $3 ELSE receipt END "
                "WHERE id = $1 OR (user_message_id = $4 AND status = 'done') RETURNING id, reply_message_id",
                turn_id, reply[0], json.dumps(receipt), user_message.id)
            replaced = [old for earlier, old in old_replies if earlier != turn_id and old is not None]
            if replaced:
                await db.execute("DELETE FROM messages WHERE id = ANY($1::bigint[])", replaced)
        self.ended(turn_id)
        return message(reply)

    async def fail_turn(self, turn_id: int) -> None:
        async with self.db.transaction() as db:
            await undo_journal(db, turn_id)
            await db.execute("UPDATE turns SET status = 'failed' WHERE id = $1", turn_id)
        self.ended(turn_id)

    async def turn(self, turn_id: int) -> TurnRow | None:
        row = await self.db.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = $1", turn_id)
        return turn(row) if row else None

    async def latest_turn(self, conversation_id: int, before: int | None = None) -> TurnRow | None:
        row = await self.db.one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = $1 AND status = 'done' "
            "AND ($2::bigint IS NULL OR id < $2) ORDER BY id DESC LIMIT 1", conversation_id, before)
        return turn(row) if row else None

    async def last_receipt(self, conversation_id: int, person_id: int) -> TurnRow | None:
        row = await self.db.one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = $1 AND person_id = $2 AND status = 'done' "
            "ORDER BY id DESC LIMIT 1", conversation_id, person_id)
        return turn(row) if row else None

    async def begin_regenerate(self, turn_id: int) -> int | None:
        conversation_id, person_id, user_message_id = await self.db.one(
            "SELECT conversation_id, person_id, user_message_id FROM turns WHERE id = $1", turn_id)
        new_turn = await self.begin_turn(conversation_id, person_id, user_message_id)
        async with self.db.transaction() as db:  # running now: no other turn can end meanwhile
            latest = await db.fetchval("SELECT MAX(id) FROM turns WHERE conversation_id = $1 AND status = 'done'",
                                       conversation_id)
            if latest == turn_id:
                await undo_journal(db, turn_id)
                return new_turn
            await db.execute("DELETE FROM turns WHERE id = $1", new_turn)  # a newer reply came first
        self.ended(new_turn)
        return None

    async def interrupted_turns(self, platform: str, character_id: int) -> list[InterruptedTurn]:
        rows = await self.db.all(
            f"SELECT {prefixed(TURN_COLUMNS, 't')}, {prefixed(CONVERSATION_COLUMNS, 'c')}, "
            f"{prefixed(MESSAGE_COLUMNS, 'm')} FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
            "JOIN conversations c ON c.id = t.conversation_id JOIN messages m ON m.id = t.user_message_id "
            "WHERE c.platform = $1 AND c.character_id = $2 ORDER BY t.conversation_id, m.pos", platform, character_id)
        t, c = width(TURN_COLUMNS), width(CONVERSATION_COLUMNS)
        return [InterruptedTurn(turn(r[:t]), conversation(r[t:t + c]), message(r[t + c:])) for r in map(tuple, rows)]

    async def claim_interrupted_turn(self, turn_id: int) -> bool:
        return await self.db.execute("DELETE FROM interrupted_turns WHERE turn_id = $1", turn_id) == 1

    async def requeue_interrupted_turn(self, turn_id: int) -> int | None:
        async with self.db.transaction() as db:
            if changed(await db.execute("DELETE FROM interrupted_turns WHERE turn_id = $1", turn_id)) != 1:
                return None
            return await db.fetchval(
                "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at) "
                "SELECT conversation_id, person_id, user_message_id, $1, $2 FROM turns WHERE id = $3 RETURNING id",
                self.holder, self.db.clock(), turn_id)
