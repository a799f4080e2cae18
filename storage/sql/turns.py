"""Turns (the Turns port): a message stored, its model call taken and its turn queued in one
transaction; the conversation's line of waiting turns; a running turn row from the start of
every turn; its reply and receipt in one transaction; the undo of its memory writes; recovery.

The line: a ticket is queued when a message is stored, and `start_turn` waits until the
ticket is the first of its conversation's line (by message position) and no turn of the
conversation runs, nor waits to be answered again for an earlier message — in every process
sharing the database. A running turn is its conversation's lock (on PostgreSQL a unique index
allows one); no transaction stays open while the model answers.

Waiting costs nothing (SPEC 9): of this process's tickets in one conversation only the first
looks at the database — at once when a turn of this process ends or a waiter leaves, else after
POLL_S, doubling up to MAX_POLL_S (another process's turn, a gone process) — and the others
wait, without a timer, until the line moves. A process told to stop (`leave_lines`) takes its
waiting turns out at once; their tickets stay queued for the restart or another process.

A turn or a ticket that holds the line but whose process is gone is interrupted by the waiter,
which then wakes this process's recovery (`stray_found`): the interrupted turn is queued again
at its message's place, so it is answered first, in order, at once. A running turn of this
very process that no caller is answering any more (left behind by a failure) is interrupted too.
"""

from __future__ import annotations

import asyncio
import bisect
import json
from typing import Any, Sequence

from storage.ports import (RECOVER_WITHIN_S, SHOWING_S, Arrival, CallLimit, InterruptedTurn, LeftTheLine, MessageRow,
                           NewAlbum, OutOfLine, ReplyReceipt, ShownReply, Spend, TurnRow, Turns)
from storage.rows import CONVERSATION_COLUMNS, MESSAGE_COLUMNS, TURN_COLUMNS, columns, conversation, message, turn
from storage.sql.checkins import checkin_cut_off, count_person_message
from storage.sql.conversations import (
    Place,
    insert_message,
    keep_album,
    next_place,
    platform_ids_of,
    read_platform_ids,
    set_platform_ids,
)
from storage.sql.coordination import take_call
from storage.sql.database import Connection, Database, in_transaction
from storage.sql.memories import undo_journal
from storage.sql.presence import take_witnesses
from storage.sql.reminders import reminder_cut_off, reminder_shown, undo_reminders
from storage.sql.usage import add_spend

POLL_S = 0.02  # the first look again after a turn of another process was seen running
MAX_POLL_S = 0.5  # looks again at least this often (another process's turn may end meanwhile)
async def undo_effects(tx: Connection, turn_id: int) -> None:
    """Inside a transaction: take back everything a turn's tools did — the one place a turn is
    taken back (Regenerate, a failed or withdrawn reply, a crash): its memory writes (pinned ones
    since are left alone) and the reminders it set; the witnesses its reply was posted before (a
    reply never stored has none)."""
    await undo_journal(tx, turn_id)
    await undo_reminders(tx, turn_id)
    await tx.execute("DELETE FROM turn_witnesses WHERE turn_id = $1", turn_id)


async def leave_interrupted(tx: Connection, turn_id: int) -> None:
    """Inside a transaction: the turn waits for its adapter to answer it again or mark it
    (`interrupted_turns`, kept with its conversation: the line finds it by index)."""
    await tx.execute("INSERT INTO interrupted_turns (turn_id, conversation_id) "
                     "SELECT id, conversation_id FROM turns WHERE id = $1", turn_id)


async def mark_shown(tx: Connection, which: str, key: int, platform_message_ids: list[str]) -> Any | None:
    """Inside a transaction: the turn `which` picks (`$1` is `key`) has its reply shown as these
    platform messages — a reminder's goes or moves on, a reply it regenerated goes now; the
    turn's row as `TURN_COLUMNS` reads it, or None when no turn is picked (its reply was
    withdrawn meanwhile: its process was taken for gone)."""
    answered = await tx.one(
        f"UPDATE turns SET shown = true WHERE {which} RETURNING {TURN_COLUMNS}, kind, EXISTS (SELECT 1 FROM turns r "
        "WHERE r.conversation_id = turns.conversation_id AND r.status = 'replaced' "
        "AND r.user_message_id = turns.user_message_id) AS regenerated", key)
    if answered is None:
        return None
    if answered["kind"] == "reminder":  # its reminder goes, or moves to its next time
        await reminder_shown(tx, answered["id"])
    if platform_message_ids:
        await set_platform_ids(tx, answered["conversation_id"], answered["reply_message_id"], platform_message_ids)
    if answered["regenerated"]:
        await tx.execute(  # after Regenerate: the reply it replaced goes now
            "DELETE FROM messages WHERE id IN (SELECT reply_message_id FROM turns WHERE conversation_id = $1 "
            "AND status = 'replaced' AND user_message_id = $2)",
            answered["conversation_id"], answered["user_message_id"])
    return answered


QUEUE = "INSERT INTO turn_queue (conversation_id, person_id, user_message_id, holder, queued_at, character_id) "
# the character whose turn it is: the one given ($6), else the conversation's own
QUEUED_CHARACTER = "COALESCE(CAST($6 AS BIGINT), (SELECT character_id FROM conversations WHERE id = $1))"
LINE = ("FROM turn_queue q JOIN messages m ON m.id = q.user_message_id "
        "WHERE q.conversation_id = $1 ORDER BY m.pos, q.id LIMIT 1")
FIRST_IN_LINE = f"SELECT q.id, q.holder {LINE}"
# Nothing of the conversation ($1) holds a turn for its message at place $2 back: no turn runs,
# no earlier message was cut off since $3 (waiting to be answered again), no reply is still
# being sent (stored since $5, not yet shown or taken back).
FREE = ("NOT EXISTS (SELECT 1 FROM turns WHERE conversation_id = $1 AND status = 'running') "
        "AND NOT EXISTS (SELECT 1 FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
        "JOIN messages m ON m.id = t.user_message_id "
        "WHERE i.conversation_id = $1 AND m.pos < $2 AND t.created_at >= $3) "
        "AND NOT EXISTS (SELECT 1 FROM turns t JOIN messages r ON r.id = t.reply_message_id "
        "WHERE t.conversation_id = $1 AND NOT t.shown AND r.created_at >= $5)")


async def withdraw_unshown(tx: Connection, reply_message_id: int, interrupted: bool = False) -> int:
    """Inside a transaction: take back a reply (or a check-in) that never reached the chat, if
    still unshown (SPEC 15, "What was not shown was not said"): its message goes (and with it its
    place in recall); a reply's turn fails with its memory writes undone, and the reply it was
    to replace is the conversation's again; a check-in's absence waits for one again. With
    `interrupted` (its process died mid-send) the turn is left for its adapter to answer again
    or mark, like a reply cut off mid-way. How many it took back (0 or 1)."""
    turn = await tx.one("SELECT id, conversation_id, user_message_id, kind FROM turns "
                        "WHERE reply_message_id = $1 AND NOT shown", reply_message_id)
    if turn is None:
        return 0
    if turn["kind"] == "checkin":
        await checkin_cut_off(tx, turn["conversation_id"], reply_message_id)
        return 1
    if turn["kind"] == "reminder":
        await reminder_cut_off(tx, turn["id"], reply_message_id)
        return 1
    await tx.execute("DELETE FROM messages WHERE id = $1", reply_message_id)
    await undo_effects(tx, turn["id"])
    await tx.execute("UPDATE turns SET status = 'failed', shown = true, reply_message_id = NULL WHERE id = $1",
                     turn["id"])
    await tx.execute("UPDATE turns SET status = 'done' WHERE id = (SELECT MAX(id) FROM turns WHERE "
                     "conversation_id = $1 AND user_message_id = $2 AND status = 'replaced' AND reply_message_id IN "
                     "(SELECT id FROM messages WHERE conversation_id = $1))",
                     turn["conversation_id"], turn["user_message_id"])
    if interrupted:
        await leave_interrupted(tx, turn["id"])
    return 1


class _Line:
    """This process's waiting tickets of one conversation, in line order; `moved` is set (and
    replaced) whenever the line may have moved."""

    def __init__(self) -> None:
        self.waiting: list[tuple[int, int]] = []  # (message position, ticket)
        self.moved = asyncio.Event()

    def wake(self) -> None:
        self.moved.set()
        self.moved = asyncio.Event()


class SQLTurns(Turns):
    def __init__(self, db: Database, holder: str):
        self.db = db
        self.holder = holder  # this process, as the database knows it
        self.answering: set[int] = set()  # running turns this process is answering now
        self._starting = 0  # turns of this process between their start in the database and `answering`
        self._lines: dict[int, _Line] = {}  # this process's waiting tickets, by conversation
        self._leaving = False  # the process is stopping: no turn waits any more
        self._strays = asyncio.Event()  # set when this process interrupted a gone process's turn

    # -- arriving and waiting --------------------------------------------------------------
    async def store_and_queue(self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
                              tokens: int, platform_message_id: str | None, limit: CallLimit | None,
                              checkin_from: int | None = None, character_id: int | None = None,
                              album: NewAlbum | None = None) -> Arrival:
        now = self.db.clock()
        async with self.db.transaction(short=True) as tx:
            stored = await insert_message(tx, await next_place(tx, conversation_id), "user", person_id, speaker_name,
                                          content, tokens, platform_message_id, now)
            if stored is None:
                return Arrival(None)
            if album is not None:
                await keep_album(tx, stored.id, conversation_id, album)
            if checkin_from is not None and person_id is not None:
                await count_person_message(tx, conversation_id, person_id, now, checkin_from)
            if limit is not None and (wait := await take_call(self.db, tx, limit, now)) is not None:
                return Arrival(stored, wait_s=wait)
            self._starting += 1  # a turn started here is this process's before `answering` says so
            try:
                # Nobody waits in its line and nothing holds the conversation: its turn starts now.
                turn_id = await tx.value(
                    "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder, "
                    f"character_id) SELECT $1, $7, $8, 'running', $4, $9, {QUEUED_CHARACTER} "
                    f"WHERE NOT EXISTS (SELECT 1 FROM turn_queue WHERE conversation_id = $1) AND {FREE} "
                    "ON CONFLICT DO NOTHING RETURNING id",  # another process started one just now: it queues
                    conversation_id, stored.pos, now - RECOVER_WITHIN_S, now, now - SHOWING_S, character_id,
                    person_id, stored.id, self.holder)
                if turn_id is None:
                    ticket = await tx.value(QUEUE + f"VALUES ($1, $2, $3, $4, $5, {QUEUED_CHARACTER}) RETURNING id",
                                            conversation_id, person_id, stored.id, self.holder, now, character_id)
            finally:
                self._starting -= 1
        if turn_id is not None:
            self.answering.add(turn_id)
            return Arrival(stored, turn_id=turn_id)
        return Arrival(stored, ticket)

    async def queue_turn(self, conversation_id: int, person_id: int | None, user_message_id: int,
                         character_id: int | None = None) -> int:
        async with self.db.transaction(short=True) as tx:
            return await tx.value(QUEUE + f"VALUES ($1, $2, $3, $4, $5, {QUEUED_CHARACTER}) RETURNING id",
                                  conversation_id, person_id, user_message_id, self.holder, self.db.clock(),
                                  character_id)

    async def start_turn(self, ticket: int) -> int:
        place = await self.db.one("SELECT q.conversation_id, m.pos FROM turn_queue q "
                                  "JOIN messages m ON m.id = q.user_message_id WHERE q.id = $1", ticket)
        if place is None:
            raise OutOfLine(f"turn ticket {ticket} was taken out of its line")
        line = self._lines.setdefault(place["conversation_id"], _Line())
        me = (place["pos"], ticket)
        bisect.insort(line.waiting, me)
        try:
            delay = POLL_S
            while True:
                if self._leaving:
                    raise LeftTheLine()
                moved, timeout = line.moved, None  # behind another waiter of this process: no timer
                if line.waiting[0] == me:  # this process's first: it looks
                    self._starting += 1
                    try:
                        turn_id = await self._try_start(ticket)
                    finally:
                        self._starting -= 1
                    if turn_id is not None:
                        self.answering.add(turn_id)
                        return turn_id
                    await self._clear_the_way(ticket)
                    timeout, delay = delay, min(delay * 2, MAX_POLL_S)
                try:
                    await asyncio.wait_for(moved.wait(), timeout)
                    delay = POLL_S
                except asyncio.TimeoutError:
                    pass
        except LeftTheLine:
            raise  # the ticket stays queued: answered after the restart, or by another process
        except BaseException:
            await asyncio.shield(self.withdraw(ticket))
            raise
        finally:
            line.waiting.remove(me)
            if not line.waiting:
                self._lines.pop(place["conversation_id"], None)
            line.wake()  # the next waiter of this process may be first now

    def leave_lines(self) -> None:
        self._leaving = True
        for line in list(self._lines.values()):
            line.wake()

    async def withdraw(self, ticket: int) -> None:
        await self.db.execute("DELETE FROM turn_queue WHERE id = $1", ticket)

    async def _try_start(self, ticket: int) -> int | None:
        """In one transaction: if the ticket is first in its line and nothing of its
        conversation runs or waits to be answered again before it, turn it into a running turn."""
        try:
            async with self.db.transaction(short=True) as tx:
                queued = await tx.one("SELECT q.conversation_id, q.person_id, q.user_message_id, q.character_id, m.pos "
                                      "FROM turn_queue q "
                                      f"JOIN messages m ON m.id = q.user_message_id WHERE q.id = $1{self.db.dialect.for_update}",
                                      ticket)
                if queued is None:
                    raise OutOfLine(f"turn ticket {ticket} was taken out of its line")
                conversation_id = queued["conversation_id"]
                # One statement, so one snapshot: read apart, an earlier message moving from "cut
                # off" back into the line (requeue_interrupted_turn) could be missed by both reads.
                if not await tx.value(
                        f"SELECT (SELECT q.id {LINE}) = $4 AND {FREE}",
                        conversation_id, queued["pos"], self.db.clock() - RECOVER_WITHIN_S, ticket,
                        self.db.clock() - SHOWING_S):
                    return None
                await tx.execute("DELETE FROM turn_queue WHERE id = $1", ticket)
                return await tx.value(
                    "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder, "
                    "character_id) VALUES ($1, $2, $3, 'running', $4, $5, $6) RETURNING id",
                    conversation_id, queued["person_id"], queued["user_message_id"], self.db.clock(), self.holder,
                    queued["character_id"])
        except self.db.dialect.unique_violation:  # another process started one of this conversation just now
            return None

    async def _gone(self, holder: str | None) -> bool:
        return not holder or not await self.db.process_alive(holder)

    async def _clear_the_way(self, ticket: int) -> None:
        """Interrupt what holds the ticket's line up when nobody will see to it: the running turn
        of a process that is gone, or of this one when no caller answers it (left behind by a
        failure; one starting right now may not be in `answering` yet); or the first ticket, of
        a process that is gone (this process's own tickets all have a waiter)."""
        conversation_id = await self.db.value("SELECT conversation_id FROM turn_queue WHERE id = $1", ticket)
        if conversation_id is None:
            return
        running = await self.db.one("SELECT id, holder FROM turns WHERE conversation_id = $1 AND status = 'running'",
                                    conversation_id)
        if running is not None:
            if running["holder"] == self.holder:
                left_behind = running["id"] not in self.answering and not self._starting
            else:
                left_behind = await self._gone(running["holder"])
            if left_behind and await self._interrupt(running["id"]):
                self._strays.set()
            return
        unshown = await self.db.one("SELECT reply_message_id, holder FROM turns WHERE conversation_id = $1 AND NOT shown "
                                    "AND holder <> $2", conversation_id, self.holder)
        if unshown is not None and await self._gone(unshown["holder"]):  # its sender died: taken back
            async with self.db.transaction(short=True) as tx:
                if await withdraw_unshown(tx, unshown["reply_message_id"], interrupted=True):
                    self._strays.set()
            return
        first = await self.db.one(FIRST_IN_LINE, conversation_id)
        if (first is not None and first["id"] != ticket and first["holder"] != self.holder
                and await self._gone(first["holder"]) and await self._abandon(first["id"])):
            self._strays.set()

    async def _interrupt(self, turn_id: int) -> bool:
        """In one transaction, if the turn still runs: mark it failed, undo its memory writes and
        leave it for its adapter to answer again or mark (interrupted_turns). Whether it did."""
        async with self.db.transaction(short=True) as tx:
            if not await tx.execute("UPDATE turns SET status = 'failed' WHERE id = $1 AND status = 'running'", turn_id):
                return False
            await undo_effects(tx, turn_id)
            await leave_interrupted(tx, turn_id)
        return True

    async def _abandon(self, ticket: int) -> bool:
        """In one transaction, if the ticket is still queued: turn it into a failed turn left for
        its adapter to answer again, like a turn cut off mid-reply. Whether it did."""
        async with self.db.transaction(short=True) as tx:
            turn_id = await tx.value(
                "INSERT INTO turns (conversation_id, person_id, user_message_id, status, created_at, holder, "
                "character_id) SELECT conversation_id, person_id, user_message_id, 'failed', $1, holder, "
                "character_id FROM turn_queue "
                "WHERE id = $2 RETURNING id", self.db.clock(), ticket)
            if turn_id is None:
                return False
            await leave_interrupted(tx, turn_id)
            await tx.execute("DELETE FROM turn_queue WHERE id = $1", ticket)
        return True

    async def stray_found(self, timeout_s: float) -> None:
        strays = self._strays
        try:
            await asyncio.wait_for(strays.wait(), timeout_s)
        except asyncio.TimeoutError:
            return
        if strays is self._strays:
            self._strays = asyncio.Event()

    def others_running(self) -> bool:
        """Whether this process answers more than one turn now (the turn that asks is one)."""
        return len(self.answering) > 1

    def ended(self, turn_id: int) -> None:
        """A turn of this process was finished or failed: the first waiters of this process look."""
        self.answering.discard(turn_id)
        self._wake_lines()

    def _wake_lines(self) -> None:
        for line in list(self._lines.values()):
            line.wake()

    # -- a running turn ----------------------------------------------------------------------
    async def set_turn_partial(self, turn_id: int, platform_message_id: str) -> None:
        scene = await self.db.value(
            "UPDATE turns SET partial_message_id = $1 WHERE id = $2 "
            "RETURNING (SELECT is_shared FROM conversations WHERE id = turns.conversation_id)", platform_message_id, turn_id)
        if scene:  # the reply is posted now: those present witness it
            await take_witnesses(self.db, turn_id)

    async def finish_turn(
        self, turn_id: int, user_message: MessageRow, speaker_name: str,
        content: str, tokens: int, receipt: dict[str, Any], character_id: int | None = None,
        named: Sequence[int] = (), spend: Spend | None = None,
    ) -> MessageRow | None:
        async def keep(tx: Connection) -> MessageRow | None:
            # The turn, held until its reply is kept: first, as /forgetme holds its person's turns
            # first (tests/test_postgres_lock_order.py). Gone (its message was deleted meanwhile,
            # or its person forgotten: the turn went with them), nothing is kept.
            held = await tx.one(
                "SELECT character_id, (SELECT is_shared FROM conversations WHERE id = turns.conversation_id) "
                "AS scene, (SELECT character_id FROM conversations WHERE id = turns.conversation_id) AS own "
                f"FROM turns WHERE id = $1{self.db.dialect.for_update}", turn_id)
            if spend is not None:  # spent all the same
                await add_spend(self.db, tx, spend)
            if held is None:
                return None
            # a reply to a person's message takes the place right after it; a character answering
            # another character's reply (a scene's chain) takes the next place
            place = (Place(user_message.conversation_id, user_message.pos + 1, bool(held["scene"]), held["own"])
                     if user_message.role == "user" else await next_place(tx, user_message.conversation_id))
            reply = await insert_message(tx, place, "assistant", None, speaker_name, content, tokens, None,
                                         self.db.clock(), held["character_id"] if character_id is None
                                         else character_id, turn_id, named)
            assert reply is not None  # a reply has no platform id yet: nothing to conflict with
            # This turn becomes 'done' with its reply, not yet shown; a turn it regenerates (the
            # same message's earlier 'done' turn) becomes 'replaced' in the same statement. The
            # replaced reply goes once the new one is shown (`shown`), and stays if it never is.
            await tx.execute(
                "UPDATE turns SET status = CASE WHEN id = $1 THEN 'done' ELSE 'replaced' END, "
                "reply_message_id = CASE WHEN id = $1 THEN $2 ELSE reply_message_id END, "
                "receipt = CASE WHEN id = $1 THEN $3 ELSE receipt END, shown = (id <> $1) "
                "WHERE id = $1 OR (user_message_id = $4 AND status = 'done' AND kind = 'reply')",
                turn_id, reply.id, json.dumps(receipt), user_message.id)
            return reply

        try:
            return await in_transaction(self.db, keep, short=True)
        finally:
            self.ended(turn_id)

    async def shown(self, reply_message_id: int, platform_message_ids: list[str]) -> None:
        async with self.db.transaction(short=True) as tx:
            await mark_shown(tx, "reply_message_id = $1", reply_message_id, platform_message_ids)
        self._wake_lines()  # the reply is said: the next turn of its conversation may start

    async def reply_shown(self, turn_id: int, platform_message_ids: list[str]) -> ShownReply | None:
        previous = ("(SELECT p.reply_message_id FROM turns t JOIN turns p ON p.conversation_id = t.conversation_id "
                    "WHERE t.id = $1 AND p.id < t.id AND p.status = 'done' "
                    "AND (t.character_id IS NULL OR p.character_id = t.character_id) ORDER BY p.id DESC LIMIT 1)")
        async with self.db.transaction(short=True) as tx:
            answered = await mark_shown(tx, "id = $1 AND reply_message_id IS NOT NULL", turn_id, platform_message_ids)
        self._wake_lines()
        if answered is None:
            return None
        # read after the commit: a write transaction holds no longer than its writes need (on
        # SQLite every write of the process waits for it: docs/processes.md)
        return ShownReply(turn(answered), read_platform_ids(await self.db.short.all(platform_ids_of(previous),
                                                                                   turn_id)))

    async def withdraw_reply(self, reply_message_id: int) -> None:
        async with self.db.transaction(short=True) as tx:
            await withdraw_unshown(tx, reply_message_id)
        self._wake_lines()

    async def fail_turn(self, turn_id: int, spend: Spend | None = None) -> None:
        async with self.db.transaction(short=True) as tx:
            if spend is not None:
                await add_spend(self.db, tx, spend)
            await undo_effects(tx, turn_id)
            await tx.execute("UPDATE turns SET status = 'failed' WHERE id = $1", turn_id)
        self.ended(turn_id)

    async def turn(self, turn_id: int) -> TurnRow | None:
        row = await self.db.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = $1", turn_id)
        return turn(row) if row else None

    async def latest_turn(self, conversation_id: int, character_id: int | None = None) -> TurnRow | None:
        row = await self.db.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = $1 AND status = 'done' "
                                "AND (CAST($2 AS BIGINT) IS NULL OR character_id = $2) ORDER BY id DESC LIMIT 1",
                                conversation_id, character_id)
        return turn(row) if row else None

    async def last_receipt(self, conversation_id: int, person_id: int,
                           character_id: int | None = None) -> TurnRow | None:
        row = await self.db.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = $1 AND person_id = $2 "
                                "AND status = 'done' AND (CAST($3 AS BIGINT) IS NULL OR character_id = $3) "
                                "ORDER BY id DESC LIMIT 1", conversation_id, person_id, character_id)
        return turn(row) if row else None

    async def receipts_before(self, conversation_id: int, character_id: int, before_pos: int | None,
                              limit: int) -> list[tuple[int, dict[str, Any]]]:
        rows = await self.db.short.all(
            "SELECT m.pos, t.receipt FROM turns t JOIN messages m ON m.id = t.user_message_id "
            "WHERE t.conversation_id = $1 AND t.character_id = $2 AND t.status = 'done' AND t.receipt IS NOT NULL "
            "AND (CAST($3 AS BIGINT) IS NULL OR m.pos < $3) ORDER BY t.id DESC LIMIT $4",
            conversation_id, character_id, before_pos, limit)
        return [(row["pos"], json.loads(row["receipt"])) for row in rows]

    async def receipts(self, person_id: int, limit: int) -> list[ReplyReceipt]:
        rows = await self.db.all(
            "SELECT t.id, COALESCE(t.character_id, c.character_id) AS character_id, t.created_at, t.receipt, "
            "m.content FROM turns t JOIN conversations c ON c.id = t.conversation_id "
            "LEFT JOIN messages m ON m.id = t.reply_message_id "
            "WHERE t.person_id = $1 AND t.status = 'done' AND t.shown AND t.receipt IS NOT NULL "
            "ORDER BY t.id DESC LIMIT $2", person_id, limit)
        return [ReplyReceipt(row["id"], row["character_id"], row["created_at"], row["content"],
                             json.loads(row["receipt"]))
                for row in rows]

    async def begin_regenerate(self, turn_id: int) -> int | None:
        old = await self.db.one("SELECT conversation_id, person_id, user_message_id, character_id FROM turns "
                                "WHERE id = $1", turn_id)
        new_turn = await self.begin_turn(old["conversation_id"], old["person_id"], old["user_message_id"],
                                         old["character_id"])
        async with self.db.transaction(short=True) as tx:  # running now: no other turn can end meanwhile
            if await tx.value("SELECT MAX(id) FROM turns WHERE conversation_id = $1 AND status = 'done' "
                              "AND character_id = $2", old["conversation_id"], old["character_id"]) == turn_id:
                await undo_effects(tx, turn_id)
                return new_turn
            await tx.execute("DELETE FROM turns WHERE id = $1", new_turn)  # a newer reply came first
        self.ended(new_turn)
        return None

    # -- after a crash -----------------------------------------------------------------------
    async def recover_interrupted_turns(self) -> int:
        recovered = 0
        # replies (and check-ins) a gone process stored but never saw reach the chat
        for row in await self.db.all("SELECT reply_message_id, holder FROM turns WHERE NOT shown"):
            if row["holder"] != self.holder and await self._gone(row["holder"]):
                async with self.db.transaction(short=True) as tx:
                    recovered += await withdraw_unshown(tx, row["reply_message_id"], interrupted=True)
        for row in await self.db.all("SELECT id, holder FROM turns WHERE status = 'running'"):
            if row["holder"] != self.holder and await self._gone(row["holder"]) and await self._interrupt(row["id"]):
                recovered += 1
        for row in await self.db.all("SELECT id, holder FROM turn_queue"):
            if row["holder"] != self.holder and await self._gone(row["holder"]) and await self._abandon(row["id"]):
                recovered += 1
        return recovered

    async def interrupted_turns(self, platform: str, character_id: int) -> list[InterruptedTurn]:
        rows = await self.db.all(
            f"SELECT {columns(TURN_COLUMNS, 't')}, {columns(CONVERSATION_COLUMNS, 'c')}, "
            f"{columns(MESSAGE_COLUMNS, 'm')} FROM interrupted_turns i JOIN turns t ON t.id = i.turn_id "
            "JOIN conversations c ON c.id = t.conversation_id JOIN messages m ON m.id = t.user_message_id "
            "WHERE c.platform = $1 AND t.character_id = $2 ORDER BY t.conversation_id, m.pos", platform, character_id)
        return [InterruptedTurn(turn(r, "t_"), conversation(r, "c_"), message(r, "m_")) for r in rows]

    async def claim_interrupted_turn(self, turn_id: int) -> bool:
        return await self.db.execute("DELETE FROM interrupted_turns WHERE turn_id = $1", turn_id) == 1

    async def requeue_interrupted_turn(self, turn_id: int) -> int | None:
        async with self.db.transaction(short=True) as tx:
            if await tx.execute("DELETE FROM interrupted_turns WHERE turn_id = $1", turn_id) != 1:
                return None
            return await tx.value(QUEUE + "SELECT conversation_id, person_id, user_message_id, $1, $2, character_id "
                                  "FROM turns WHERE id = $3 RETURNING id", self.holder, self.db.clock(), turn_id)
