"""Saved memories (the Memories port): a write that checks a budget holds the person's row
first, so concurrent writers in any process see each other's counts; the journal of what each
turn's tools wrote (so Regenerate, a failed turn or a crash can undo it), which a person's own
write overtakes; and the Learn-from-chat switch."""

from __future__ import annotations

import json
from typing import Any

from storage.ports import (CHARACTER, GLOBAL, AlreadySaved, ChangeRow, ConversationRow, Memories, MemoriesInPlay,
                           MemoryCaps, MemoryRow, MessageRow, PinnedMemory, same_words)
from storage.rows import (CONVERSATION_COLUMNS, MEMORY_COLUMNS, MESSAGE_COLUMNS, columns, conversation, in_play,
                          memories, memory, messages, names, person_export, scope_character)
from storage.sql.database import Connection, Database

# Learn from chat for person $1 with character $2: on unless they turned it off
LEARNS = "COALESCE((SELECT learn FROM person_settings WHERE person_id = $1 AND character_id = $2), true)"

FIELDS = names(MEMORY_COLUMNS)
NEWEST_FIRST = "ORDER BY updated_at DESC, id DESC"


def _of(scope: str, pinned: bool) -> str:
    """The WHERE of a person's ($1) memories of one scope (character $2, or global), pinned or
    not: equal on every column of the owner index but its last, so the index is read in order
    (`NOT pinned`, or both scopes at once, would read more and sort)."""
    owner = "= $2" if scope == CHARACTER else "IS NULL"
    return f"person_id = $1 AND character_id {owner} AND pinned = {'true' if pinned else 'false'}"


def _share(other: str) -> str:
    """The most unpinned memories of one scope that an even split of $3 between it and `other`
    gives it (SPEC 5: a share one scope does not use goes to the other): $3 less what `other`
    takes of its half (counted in the owner index alone, up to that half)."""
    whole = "CAST($3 AS BIGINT)"  # one type for PostgreSQL to take it as
    half_taken = f"SELECT COUNT(*) FROM (SELECT 1 FROM memories WHERE {_of(other, False)} LIMIT {whole} / 2) AS half"
    return f"{whole} - ({half_taken})"


# What a turn reads (SPEC 5): every pinned memory of both scopes, and the newest unpinned ones of
# each, as many as its share of $3 can take (bot/memory/saved_memories.py splits them; in_play
# sorts the pinned ones).
IN_PLAY = " UNION ALL ".join(
    [f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {_of(scope, True)}" for scope in (CHARACTER, GLOBAL)]
    + [f"SELECT * FROM (SELECT {MEMORY_COLUMNS} FROM memories WHERE {_of(scope, False)} {NEWEST_FIRST} "
       f"LIMIT {_share(other)}) AS newest_{scope}" for scope, other in ((CHARACTER, GLOBAL), (GLOBAL, CHARACTER))])


async def hold_people(db: Database, tx: Connection, *person_ids: int) -> list[int]:
    """Hold the people's rows until the transaction ends (in id order: no deadlock); the ids of
    those that are there."""
    rows = await tx.all(f"SELECT id FROM persons WHERE id {db.dialect.in_ids(1)} ORDER BY id{db.dialect.for_update}",
                        db.dialect.ids(person_ids))
    return [row["id"] for row in rows]


async def count_memories(tx: Connection, person_id: int, character: int | None, pinned: bool) -> int:
    return await tx.value("SELECT COUNT(*) FROM memories WHERE person_id = $1 AND character_id IS NOT DISTINCT FROM $2 "
                          "AND pinned = $3", person_id, character, pinned)


# A change with the character that made it (its turn's; None: the person's) and whether it is its
# memory's latest.
CHANGES = ("SELECT h.id, h.memory_id, COALESCE(t.character_id, c.character_id) AS character_id, h.action, h.before, "
           "h.after, h.at, h.undone, NOT EXISTS (SELECT 1 FROM memory_history later WHERE later.memory_id = h.memory_id "
           "AND later.id > h.id) AS latest FROM memory_history h LEFT JOIN turns t ON t.id = h.turn_id "
           "LEFT JOIN conversations c ON c.id = t.conversation_id")


def kept(snapshot: str | None) -> MemoryRow | None:
    """A memory as a history row kept it (`snapshot`); None: there was none."""
    if not snapshot:
        return None
    fields = json.loads(snapshot)
    return MemoryRow(*(bool(fields[f]) if f == "pinned" else fields[f] for f in FIELDS))


async def put_back(tx: Connection, row: MemoryRow) -> MemoryRow:
    """Inside a transaction: a deleted memory back as `row` holds it, its id and pin too."""
    marks = ", ".join(f"${i}" for i in range(1, len(FIELDS) + 1))
    back = await tx.one(f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES ({marks}) RETURNING {MEMORY_COLUMNS}",
                        *(getattr(row, f) for f in FIELDS))
    return memory(back)


def change(row: Any) -> ChangeRow:
    return ChangeRow(row["id"], row["memory_id"], row["character_id"], row["action"], kept(row["before"]),
                     kept(row["after"]), row["at"], bool(row["undone"]), bool(row["latest"]))


def snapshot(row: MemoryRow | None) -> str | None:
    """A memory as a history row keeps it (its columns, JSON); None: there is none."""
    return json.dumps({f: getattr(row, f) for f in FIELDS}) if row is not None else None


async def kept_already(tx: Connection, person_id: int, character: int | None, content: str,
                       other_than: int | None = None) -> MemoryRow | None:
    """The person's memory of this scope (`character`: None for global) with the same words
    (`same_words`), but `other_than`: a memory is kept once a scope (AlreadySaved). Read with the
    person's row held, so no other process adds the same words meanwhile."""
    rows = await tx.all(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE person_id = $1 "
                        "AND character_id IS NOT DISTINCT FROM $2", person_id, character)
    return next((kept for kept in memories(rows)
                 if kept.id != other_than and same_words(kept.content) == same_words(content)), None)


async def keep_once(tx: Connection, keep: int, absorb: int, now: float) -> int:
    """Before two linked accounts' memories become one person's (both rows held): each of
    `absorb`'s whose words `keep` keeps in the same scope goes, its pin carried over to the one
    kept, so that a memory is kept once a scope there too. How many went."""
    kept = {(m.character_id, same_words(m.content)): m for m in memories(
        await tx.all(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE person_id = $1", keep))}
    gone = 0
    for twin in memories(await tx.all(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE person_id = $1", absorb)):
        key = (twin.character_id, same_words(twin.content))
        if (first := kept.get(key)) is None:
            continue
        if twin.pinned and not first.pinned:
            pinned = await tx.one(f"UPDATE memories SET pinned = true WHERE id = $1 RETURNING {MEMORY_COLUMNS}", first.id)
            kept[key] = memory(pinned)
            await journal(tx, None, "pin", first, kept[key], now)
        await tx.execute("DELETE FROM memories WHERE id = $1", twin.id)
        await journal(tx, None, "delete", twin, None, now)
        gone += 1
    return gone


async def journal(tx: Connection, turn_id: int | None, action: str, before: MemoryRow | None,
                  after: MemoryRow | None, at: float, written_in: int | None = None) -> None:
    """Every change to a memory goes into its history (SPEC 21): a character's, mid-reply (its
    turn: what Regenerate and a failed turn undo), or the person's (no turn) — which outranks every
    undo still pending for that memory: they are marked done, so Regenerate never reverts what the
    person did since (SPEC 5)."""
    changed = after if after is not None else before
    assert changed is not None, "a change has a memory before or after it"
    if turn_id is None:
        await tx.execute("UPDATE memory_history SET undone = true WHERE memory_id = $1 AND turn_id IS NOT NULL "
                         "AND NOT undone", changed.id)
    await tx.execute(  # the chat it was made in: the one named, else the turn's
        "INSERT INTO memory_history (person_id, memory_id, turn_id, conversation_id, action, before, after, at) "
        "VALUES ($1, $2, $3, COALESCE(CAST($8 AS BIGINT), (SELECT conversation_id FROM turns WHERE id = $3)), "
        "$4, $5, $6, $7)", changed.person_id, changed.id, turn_id, action, snapshot(before), snapshot(after), at,
        written_in)


async def undo_journal(tx: Connection, turn_id: int) -> None:
    """Undo what a turn's tools wrote, newest first. Entries pinned since are left alone: only
    the person changes pinned memories."""
    entries = await tx.all("SELECT id, memory_id, action, before FROM memory_history WHERE turn_id = $1 "
                           "AND NOT undone ORDER BY id DESC", turn_id)
    for entry in entries:
        memory_id, action = entry["memory_id"], entry["action"]
        current = await tx.one("SELECT pinned FROM memories WHERE id = $1", memory_id)
        old = kept(entry["before"])
        if current is not None and current["pinned"]:
            pass  # pinned by the person since: left alone
        elif action == "add" and current is not None:
            await tx.execute("DELETE FROM memories WHERE id = $1", memory_id)
        elif action == "update" and current is not None and old is not None:
            await tx.execute("UPDATE memories SET content = $1, tokens = $2, updated_at = $3 WHERE id = $4",
                             old.content, old.tokens, old.updated_at, memory_id)
        elif action == "delete" and current is None and old is not None:
            await put_back(tx, old)
        await tx.execute("UPDATE memory_history SET undone = true WHERE id = $1", entry["id"])


def visible(person_id: int, character_id: int, scope: str | None = None) -> tuple[str, tuple]:
    """WHERE clause (parameters from $1) and its parameters: the person's memories this
    character can see (both scopes, or only `scope`)."""
    if scope == GLOBAL:
        return "person_id = $1 AND character_id IS NULL", (person_id,)
    if scope == CHARACTER:
        return "person_id = $1 AND character_id = $2", (person_id, character_id)
    return "person_id = $1 AND (character_id = $2 OR character_id IS NULL)", (person_id, character_id)


class SQLMemories(Memories):
    def __init__(self, db: Database, caps: MemoryCaps):
        self.db = db
        self.caps = caps

    async def memories_in_play(self, person_id: int, character_id: int, unpinned_limit: int) -> MemoriesInPlay:
        return in_play(memories(await self.db.short.all(IN_PLAY, person_id, character_id, unpinned_limit)))

    async def list_memories(
        self, person_id: int, character_id: int, scope: str | None, offset: int, limit: int
    ) -> tuple[list[MemoryRow], int]:
        where, params = visible(person_id, character_id, scope)
        total = await self.db.value(f"SELECT COUNT(*) FROM memories WHERE {where}", *params)
        n = len(params)
        rows = await self.db.all(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} ORDER BY pinned DESC, "
                                 f"updated_at DESC, id DESC LIMIT ${n + 1} OFFSET ${n + 2}", *params, limit, offset)
        return memories(rows), total

    async def _changeable(self, tx: Connection, person_id: int, character_id: int, memory_id: int,
                          by_ai: bool) -> MemoryRow | None:
        """The memory if it is the person's and in play (the person's row held); the AI (a
        turn's tool) may not change a pinned one: PinnedMemory."""
        await hold_people(self.db, tx, person_id)
        where, params = visible(person_id, character_id)
        row = await tx.one(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} AND id = ${len(params) + 1}",
                           *params, memory_id)
        found = memory(row) if row else None
        if found is not None and by_ai and found.pinned:
            raise PinnedMemory(memory_id)
        return found

    async def add_memory(
        self, person_id: int, character_id: int, scope: str, content: str, tokens: int,
        pinned: bool, source: str, turn_id: int | None = None, written_in: int | None = None,
    ) -> MemoryRow:
        character = scope_character(scope, character_id)
        now = self.db.clock()
        async with self.db.transaction(short=True) as tx:
            await hold_people(self.db, tx, person_id)  # a person's writes one at a time, in every process
            if kept := await kept_already(tx, person_id, character, content):
                raise AlreadySaved(kept)
            self.caps.check(pinned, scope, await count_memories(tx, person_id, character, pinned))
            row = await tx.one(
                "INSERT INTO memories (person_id, character_id, content, tokens, pinned, source, created_at, "
                f"updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING {MEMORY_COLUMNS}",
                person_id, character, content, tokens, pinned, source, now)
            await journal(tx, turn_id, "add", None, memory(row), now, written_in)
        return memory(row)

    async def update_memory(
        self, person_id: int, character_id: int, memory_id: int, content: str, tokens: int,
        turn_id: int | None = None,
    ) -> MemoryRow | None:
        async with self.db.transaction(short=True) as tx:
            before = await self._changeable(tx, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            if kept := await kept_already(tx, person_id, before.character_id, content, other_than=memory_id):
                raise AlreadySaved(kept)
            now = self.db.clock()
            row = await tx.one(f"UPDATE memories SET content = $1, tokens = $2, updated_at = $3 WHERE id = $4 "
                               f"RETURNING {MEMORY_COLUMNS}", content, tokens, now, memory_id)
            await journal(tx, turn_id, "update", before, memory(row), now)
        return memory(row)

    async def delete_memory(
        self, person_id: int, character_id: int, memory_id: int, turn_id: int | None = None
    ) -> MemoryRow | None:
        async with self.db.transaction(short=True) as tx:
            before = await self._changeable(tx, person_id, character_id, memory_id, by_ai=turn_id is not None)
            if before is None:
                return None
            await tx.execute("DELETE FROM memories WHERE id = $1", memory_id)
            await journal(tx, turn_id, "delete", before, None, self.db.clock())
        return before

    async def set_pinned(self, person_id: int, character_id: int, memory_id: int, pinned: bool) -> MemoryRow | None:
        async with self.db.transaction(short=True) as tx:
            row = await self._changeable(tx, person_id, character_id, memory_id, by_ai=False)
            if row is None or row.pinned == pinned:
                return row
            self.caps.check(pinned, row.scope, await count_memories(tx, person_id, row.character_id, pinned))
            changed = await tx.one(f"UPDATE memories SET pinned = $1 WHERE id = $2 RETURNING {MEMORY_COLUMNS}",
                                   pinned, memory_id)
            await journal(tx, None, "pin" if pinned else "unpin", row, memory(changed), self.db.clock())
        return row

    async def count_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        return await count_memories(self.db, person_id, scope_character(scope, character_id), pinned)

    async def clear_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int:
        where = "person_id = $1 AND character_id IS NOT DISTINCT FROM $2 AND pinned = $3"
        async with self.db.transaction() as tx:
            cleared = memories(await tx.all(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where}",
                                            person_id, scope_character(scope, character_id), pinned))
            now = self.db.clock()
            for row in cleared:  # each a change of its own, in the history (SPEC 21)
                await journal(tx, None, "delete", row, None, now)
            await tx.execute(f"DELETE FROM memories WHERE {where}", person_id, scope_character(scope, character_id),
                             pinned)
        return len(cleared)

    async def export_person(self, person_id: int) -> dict[str, Any]:
        identities = await self.db.all(
            "SELECT platform, user_id FROM identities WHERE person_id = $1 ORDER BY platform, user_id", person_id)
        rows = await self.db.all(
            f"SELECT {', '.join('m.' + f for f in FIELDS)}, c.name FROM memories m "
            "LEFT JOIN characters c ON c.id = m.character_id WHERE m.person_id = $1 ORDER BY m.id", person_id)
        settings = await self.db.all(
            "SELECT c.name, s.learn FROM person_settings s JOIN characters c ON c.id = s.character_id "
            "WHERE s.person_id = $1 ORDER BY c.name", person_id)
        persona = await self.db.value("SELECT persona FROM persons WHERE id = $1", person_id)
        return person_export(identities, rows, settings, persona)

    async def history(self, person_id: int, since: float) -> list[ChangeRow]:
        rows = await self.db.all(f"{CHANGES} WHERE h.person_id = $1 AND h.at >= $2 ORDER BY h.id DESC", person_id, since)
        return [change(row) for row in rows]

    async def undo_change(self, person_id: int, change_id: int, since: float) -> ChangeRow | None:
        async with self.db.transaction(short=True) as tx:
            await hold_people(self.db, tx, person_id)
            row = await tx.one(f"{CHANGES} WHERE h.person_id = $1 AND h.id = $2 AND h.at >= $3", person_id,
                               change_id, since)
            undoing = change(row) if row else None
            if undoing is None or undoing.undone or not undoing.latest:
                return None
            current = await tx.one(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1 AND person_id = $2",
                                   undoing.memory_id, person_id)
            now = self.db.clock()
            inverse = await self._inverse(tx, undoing, memory(current) if current else None, now)
            if inverse is None:
                return None
            await tx.execute("UPDATE memory_history SET undone = true WHERE id = $1", undoing.id)
            action, before, after = inverse
            await journal(tx, None, action, before, after, now)
            done = await tx.one(f"{CHANGES} WHERE h.person_id = $1 AND h.memory_id = $2 ORDER BY h.id DESC LIMIT 1",
                                person_id, undoing.memory_id)
        return change(done)

    async def _inverse(self, tx: Connection, undoing: ChangeRow, current: MemoryRow | None,
                       now: float) -> tuple[str, MemoryRow | None, MemoryRow | None] | None:
        """Inside the undo's transaction: the memory put back as it was before `undoing`; the
        change that is (action, before, after), or None when the memory is not as it left it."""
        before = undoing.before
        if undoing.action == "add" and current is not None:
            await tx.execute("DELETE FROM memories WHERE id = $1", current.id)
            return "delete", current, None
        if undoing.action == "delete" and current is None and before is not None:
            if await kept_already(tx, before.person_id, before.character_id, before.content):
                return None  # its words are kept again meanwhile: put back, it would be there twice
            self.caps.check(before.pinned, before.scope,
                            await count_memories(tx, before.person_id, before.character_id, before.pinned))
            return "add", None, await put_back(tx, before._replace(updated_at=now))
        if undoing.action == "update" and current is not None and before is not None:
            if await kept_already(tx, current.person_id, current.character_id, before.content, other_than=current.id):
                return None  # another memory holds its earlier words now
            row = await tx.one(f"UPDATE memories SET content = $1, tokens = $2, updated_at = $3 WHERE id = $4 "
                               f"RETURNING {MEMORY_COLUMNS}", before.content, before.tokens, now, current.id)
            return "update", current, memory(row)
        if undoing.action in ("pin", "unpin") and current is not None:
            pinned = undoing.action == "unpin"
            self.caps.check(pinned, current.scope,
                            await count_memories(tx, current.person_id, current.character_id, pinned))
            row = await tx.one(f"UPDATE memories SET pinned = $1 WHERE id = $2 RETURNING {MEMORY_COLUMNS}",
                               pinned, current.id)
            return ("pin" if pinned else "unpin"), current, memory(row)
        return None

    async def written_in(self, person_id: int) -> dict[int, ConversationRow]:
        rows = await self.db.all(
            f"SELECT h.memory_id, {columns(CONVERSATION_COLUMNS, 'c')} FROM memory_history h "
            "JOIN memories k ON k.id = h.memory_id JOIN conversations c ON c.id = h.conversation_id "
            "WHERE k.person_id = $1 AND h.action = 'add'", person_id)
        return {row["memory_id"]: conversation(row, "c_") for row in rows}

    async def written_from(self, person_id: int) -> dict[int, MessageRow]:
        rows = await self.db.all(
            f"SELECT j.memory_id, {columns(MESSAGE_COLUMNS, 'm')} FROM memory_history j "
            "JOIN memories k ON k.id = j.memory_id JOIN turns t ON t.id = j.turn_id "
            "JOIN messages m ON m.id = t.user_message_id "
            "WHERE k.person_id = $1 AND j.action = 'add' AND m.person_id = $1", person_id)
        return dict(zip((row["memory_id"] for row in rows), messages(rows, "m_")))

    async def learning_enabled(self, person_id: int, character_id: int) -> bool:
        return bool(await self.db.value(f"SELECT {LEARNS}", person_id, character_id))

    async def set_learning(self, person_id: int, character_id: int, enabled: bool) -> None:
        await self.db.execute(
            "INSERT INTO person_settings (person_id, character_id, learn) VALUES ($1, $2, $3) "
            "ON CONFLICT (person_id, character_id) DO UPDATE SET learn = excluded.learn",
            person_id, character_id, enabled)
