"""Reminders (SPEC 19), written once for every backend. A reminder's letter is a turn of kind
'reminder' whose message is stored unshown; while it is being sent the reminder is not due
(`sending`); once the platform shows it (`Turns.shown` → `reminder_shown`) a one-off reminder
goes and a repeating one moves to its next moment; a letter that never reached the chat is taken
back (`reminder_cut_off`) and the reminder is due again. A turn taken back (Regenerate, a failed
or withdrawn reply) takes the reminders it set with it (`undo_reminders`)."""

from __future__ import annotations

import json
from typing import Any

from storage.ports import MessageRow, ReminderRow, Reminders, TooManyReminders
from storage.sql.conversations import insert_message, next_place
from storage.sql.database import Connection, Database

COLUMNS = ("id, person_id, character_id, conversation_id, due_at, zone, words, repeat, created_at, asked_by, "
           "at_clock, letter, letter_receipt, attempts, retry_at")
AFRESH = "letter = NULL, letter_receipt = NULL, attempts = 0, retry_at = NULL"  # a reminder at its next time


def _rows(rows) -> list[ReminderRow]:
    return [ReminderRow(*(row[name] for name in ReminderRow._fields)) for row in rows]


async def undo_reminders(tx: Connection, turn_id: int) -> None:
    """Inside a transaction: the reminders a turn set go with the turn."""
    await tx.execute("DELETE FROM reminders WHERE turn_id = $1", turn_id)


async def reminder_shown(tx: Connection, turn_id: int) -> None:
    """Inside a transaction: the letter of turn `turn_id` was shown: its reminder goes, or moves on."""
    await tx.execute("DELETE FROM reminders WHERE sending = $1 AND next_due_at IS NULL", turn_id)
    await tx.execute(f"UPDATE reminders SET due_at = next_due_at, next_due_at = NULL, sending = NULL, {AFRESH} "
                     "WHERE sending = $1", turn_id)


async def reminder_cut_off(tx: Connection, turn_id: int, message_id: int) -> None:
    """Inside a transaction: a letter that never reached the chat goes, message and turn; its
    reminder is due again (it is sent once, or tried again — never lost)."""
    await tx.execute("UPDATE reminders SET sending = NULL, next_due_at = NULL WHERE sending = $1", turn_id)
    await tx.execute("DELETE FROM turns WHERE id = $1", turn_id)
    await tx.execute("DELETE FROM messages WHERE id = $1", message_id)


class SQLReminders(Reminders):
    def __init__(self, db: Database, holder: str):
        self.db = db
        self.holder = holder  # this process, as the database knows it: a letter it never sent is taken back

    async def add(self, person_id: int, character_id: int, conversation_id: int, turn_id: int, due_at: float,
                  zone: str, words: str, repeat: str, cap: int, asked_by: str = "",
                  at_clock: str | None = None) -> ReminderRow:
        async with self.db.transaction(short=True) as tx:
            # the person's row held: their reminders are counted one write at a time
            await tx.one("SELECT id FROM persons WHERE id = $1" + self.db.dialect.for_update, person_id)
            if await tx.value("SELECT COUNT(*) FROM reminders WHERE person_id = $1", person_id) >= cap:
                raise TooManyReminders()
            row = await tx.one(
                "INSERT INTO reminders (person_id, character_id, conversation_id, turn_id, due_at, zone, words, "
                "repeat, created_at, asked_by, at_clock) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) "
                f"RETURNING {COLUMNS}",
                person_id, character_id, conversation_id, turn_id, due_at, zone, words, repeat, self.db.clock(),
                asked_by, at_clock)
        return _rows([row])[0]

    async def pending(self, person_id: int) -> list[ReminderRow]:
        return _rows(await self.db.all(f"SELECT {COLUMNS} FROM reminders WHERE person_id = $1 ORDER BY due_at, id",
                                       person_id))

    async def cancel(self, person_id: int, reminder_id: int) -> bool:
        return await self.db.execute("DELETE FROM reminders WHERE id = $1 AND person_id = $2",
                                     reminder_id, person_id) > 0

    async def due(self, character_id: int, platform: str, now: float, limit: int) -> list[ReminderRow]:
        return _rows(await self.db.all(
            f"SELECT {', '.join('r.' + c.strip() for c in COLUMNS.split(','))} FROM reminders r "
            "JOIN conversations c ON c.id = r.conversation_id "
            "WHERE r.character_id = $1 AND r.sending IS NULL AND r.due_at <= $2 AND c.platform = $3 "
            "AND (r.retry_at IS NULL OR r.retry_at <= $2) "
            "ORDER BY r.due_at LIMIT $4", character_id, now, platform, limit))

    async def still_due(self, reminder: ReminderRow) -> bool:
        return await self.db.value("SELECT 1 FROM reminders WHERE id = $1 AND sending IS NULL AND due_at = $2",
                                   reminder.id, reminder.due_at) is not None

    async def keep(self, reminder: ReminderRow, next_due_at: float | None, speaker_name: str, content: str,
                   tokens: int, receipt: dict[str, Any]) -> MessageRow | None:
        now = self.db.clock()
        async with self.db.transaction(short=True) as tx:
            # still due, and held so until the letter is kept (it is sent once; a forgotten
            # person's reminders went with them, and a one-to-one chat's conversation too)
            if await tx.value("SELECT id FROM reminders WHERE id = $1 AND sending IS NULL AND due_at = $2"
                              f"{self.db.dialect.for_update}", reminder.id, reminder.due_at) is None:
                return None
            row = await insert_message(tx, await next_place(tx, reminder.conversation_id), "assistant", None,
                                       speaker_name, content, tokens, None, now, reminder.character_id)
            assert row is not None  # no platform id yet: nothing to conflict with
            # The letter's turn answers the person's last message there, or, when none is left
            # (deleted on the platform, or past retention), the letter itself: a reminder
            # outlives the words that asked for it.
            turn_id = await tx.value(  # not shown until the platform took it (Turns.shown)
                "INSERT INTO turns (conversation_id, person_id, user_message_id, reply_message_id, status, "
                "receipt, created_at, kind, character_id, holder, shown) VALUES ($1, $2, COALESCE((SELECT MAX(id) "
                "FROM messages WHERE conversation_id = $1 AND role = 'user' AND person_id = $2), $3), $3, 'done', "
                "$4, $5, 'reminder', $6, $7, false) RETURNING id",
                reminder.conversation_id, reminder.person_id, row.id, json.dumps(receipt), now,
                reminder.character_id, self.holder)
            await tx.execute("UPDATE reminders SET sending = $1, next_due_at = $2 WHERE id = $3",
                             turn_id, next_due_at, reminder.id)
        return row

    async def take_back(self, message_id: int) -> None:
        async with self.db.transaction(short=True) as tx:
            turn_id = await tx.value("SELECT id FROM turns WHERE reply_message_id = $1 AND kind = 'reminder' "
                                     "AND NOT shown", message_id)
            if turn_id is not None:
                await reminder_cut_off(tx, turn_id, message_id)

    async def put_off(self, reminder: ReminderRow, letter: str, receipt: dict[str, Any], retry_at: float) -> None:
        await self.db.execute("UPDATE reminders SET letter = $2, letter_receipt = $3, attempts = attempts + 1, "
                              "retry_at = $4 WHERE id = $1 AND sending IS NULL", reminder.id, letter,
                              json.dumps(receipt), retry_at)

    async def move_on(self, reminder: ReminderRow, next_due_at: float | None) -> None:
        if next_due_at is None:
            await self.drop(reminder.id)
        else:
            await self.db.execute(f"UPDATE reminders SET due_at = $2, {AFRESH} WHERE id = $1 AND sending IS NULL",
                                  reminder.id, next_due_at)

    async def drop(self, reminder_id: int) -> None:
        await self.db.execute("DELETE FROM reminders WHERE id = $1", reminder_id)

    async def sent_since(self, since: float) -> int:
        return await self.db.value("SELECT COUNT(*) FROM turns WHERE kind = 'reminder' AND shown AND created_at >= $1",
                                   since)
