"""Check-ins (the Checkins port, SPEC 14): each one-to-one conversation's absence, counted as the
person's messages are stored; the due ones found through the partial index `checkins_due`; a
check-in and its "sent" mark stored in one transaction, so it is sent once with many processes."""

from __future__ import annotations

import json
from typing import Any

from storage.ports import Absence, Checkins, MessageRow
from storage.sql.conversations import insert_message, next_place
from storage.sql.database import Connection, Database

# Whether the person wants check-ins from the conversation's character (on unless they said off).
WANTED = ("COALESCE((SELECT s.checkins FROM person_settings s WHERE s.person_id = checkins.person_id "
          "AND s.character_id = checkins.character_id), true)")


async def count_person_message(tx: Connection, conversation_id: int, person_id: int, at: float,
                               from_messages: int) -> None:
    """The person wrote in their one-to-one conversation: a new absence starts, and waits for a
    check-in once they have written `from_messages` messages (and want check-ins)."""
    await tx.execute(
        "INSERT INTO checkins (conversation_id, character_id, platform, person_id, messages, last_at, waiting) "
        "SELECT id, character_id, platform, CAST($2 AS BIGINT), 0, CAST($3 AS DOUBLE PRECISION), false "
        "FROM conversations WHERE id = $1 "
        "ON CONFLICT (conversation_id) DO NOTHING", conversation_id, person_id, at)
    await tx.execute(
        f"UPDATE checkins SET person_id = $2, messages = messages + 1, last_at = $3, "
        f"waiting = messages + 1 >= $4 AND {WANTED} WHERE conversation_id = $1",
        conversation_id, person_id, at, from_messages)


async def drop_checkin(tx: Connection, message_id: int) -> None:
    """Inside a transaction: a check-in that never reached the person goes, message and turn."""
    await tx.execute("DELETE FROM turns WHERE reply_message_id = $1 AND kind = 'checkin'", message_id)
    await tx.execute("DELETE FROM messages WHERE id = $1", message_id)


async def checkin_cut_off(tx: Connection, conversation_id: int, message_id: int) -> None:
    """Inside a transaction: a check-in whose process died before it was shown goes, and the
    absence waits for one again (if the person still wants them): it is sent once, or not at all."""
    await drop_checkin(tx, message_id)
    await tx.execute(f"UPDATE checkins SET waiting = {WANTED}, sent_at = NULL WHERE conversation_id = $1",
                     conversation_id)


class SQLCheckins(Checkins):
    def __init__(self, db: Database, holder: str):
        self.db = db
        self.holder = holder  # this process, as the database knows it: a check-in it never sent is taken back

    async def due(self, character_id: int, platform: str, absent_since: float, limit: int) -> list[Absence]:
        rows = await self.db.all(
            "SELECT conversation_id, person_id, last_at FROM checkins "
            "WHERE character_id = $1 AND platform = $2 AND waiting AND last_at <= $3 ORDER BY last_at LIMIT $4",
            character_id, platform, absent_since, limit)
        return [Absence(row["conversation_id"], row["person_id"], row["last_at"]) for row in rows]

    async def still_waiting(self, absence: Absence) -> bool:
        return await self.db.value("SELECT 1 FROM checkins WHERE conversation_id = $1 AND waiting AND last_at = $2",
                                   absence.conversation_id, absence.last_at) is not None

    async def store(self, absence: Absence, speaker_name: str, content: str, tokens: int,
                    receipt: dict[str, Any]) -> MessageRow | None:
        now = self.db.clock()
        async with self.db.transaction(short=True) as tx:
            sent = await tx.value(
                "UPDATE checkins SET waiting = false, sent_at = $3 "
                "WHERE conversation_id = $1 AND waiting AND last_at = $2 RETURNING person_id",
                absence.conversation_id, absence.last_at, now)
            if sent is None:
                return None
            place = await next_place(tx, absence.conversation_id)
            row = await insert_message(tx, place, "assistant", None, speaker_name, content, tokens, None, now,
                                       place.character_id)
            assert row is not None  # no platform id yet: nothing to conflict with
            # Its turn answers the person's last message, or, when they deleted what they wrote,
            # the check-in itself.
            await tx.execute(  # not shown until the platform took it (Turns.shown)
                "INSERT INTO turns (conversation_id, person_id, user_message_id, reply_message_id, status, receipt, "
                "created_at, kind, character_id, holder, shown) VALUES ($1, $2, COALESCE((SELECT id FROM messages "
                "WHERE conversation_id = $1 AND role = 'user' ORDER BY pos DESC LIMIT 1), $3), $3, 'done', $4, $5, "
                "'checkin', $6, $7, false)",
                absence.conversation_id, absence.person_id, row.id, json.dumps(receipt), now, place.character_id,
                self.holder)
        return row

    async def withdraw(self, absence: Absence, message_id: int, wait_again: bool) -> None:
        async with self.db.transaction(short=True) as tx:
            await drop_checkin(tx, message_id)
            if wait_again:
                await tx.execute("UPDATE checkins SET waiting = true, sent_at = NULL "
                                 "WHERE conversation_id = $1 AND last_at = $2", absence.conversation_id, absence.last_at)

    async def pass_over(self, absence: Absence) -> None:
        await self.db.execute("UPDATE checkins SET waiting = false WHERE conversation_id = $1 AND last_at = $2",
                              absence.conversation_id, absence.last_at)

    async def set_wanted(self, person_id: int, character_id: int, wanted: bool, from_messages: int) -> None:
        async with self.db.transaction(short=True) as tx:
            await tx.execute(
                "INSERT INTO person_settings (person_id, character_id, learn, checkins) VALUES ($1, $2, true, $3) "
                "ON CONFLICT (person_id, character_id) DO UPDATE SET checkins = excluded.checkins",
                person_id, character_id, wanted)
            # switched on: the next check-in waits from now, as if they had written (it is not them writing)
            await tx.execute(
                "UPDATE checkins SET waiting = $3 AND messages >= $4 AND (sent_at IS NULL OR sent_at < last_at), "
                "last_at = CASE WHEN $3 AND last_at < $5 THEN $5 ELSE last_at END "
                "WHERE person_id = $1 AND character_id = $2",
                person_id, character_id, wanted, from_messages, self.db.clock())
