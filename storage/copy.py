"""`python -m bot storage copy --from sqlite:///… --to postgresql://…`: a whole deployment moved
from its SQLite file into PostgreSQL — people, identities, characters, conversations, messages
(an album's with its items), who was present in each scene and witnessed each message, turns,
memories with their history, summaries, rebuilds, drafts, selections, settings, check-in marks,
personas, what was spent on each person's behalf and link codes — keeping every id, so buttons
and references made before the move keep working.

Rows are copied table by table in key order, in batches, with `ON CONFLICT DO NOTHING`: a copy
that stopped half-way is resumed by running the command again, and running it twice changes
nothing. A target that already holds a deployment is refused, unless it is this same copy being
resumed (recorded in its meta), or the caller says it holds this deployment already (the file
was moved since an earlier copy): rows with the same ids are then taken to be the same rows, so
never merge two deployments this way. At the end every table is counted on both
sides; a difference is an error. What is not copied, and why, is `NOT_COPIED`: counters and
claims minutes long that belong to the old deployment's processes, and semantic recall's vectors
(PostgreSQL keeps them only with pgvector, and there the embedding job makes them again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import aiosqlite

from storage.factory import check_url, open_store, sqlite_path
from storage.ports import MemoryCaps

# In the order foreign keys need them, each with its key (what orders and identifies a row).
TABLES: list[tuple[str, tuple[str, ...]]] = [
    ("persons", ("id",)),
    ("identities", ("platform", "user_id")),
    ("characters", ("id",)),
    ("conversations", ("id",)),
    ("messages", ("id",)),
    ("albums", ("message_id",)),
    ("album_items", ("message_id", "platform_message_id")),
    ("presence", ("conversation_id", "character_id")),
    ("witnesses", ("message_id", "character_id")),
    ("message_parts", ("conversation_id", "platform_message_id")),
    ("turns", ("id",)),
    ("turn_witnesses", ("turn_id", "character_id")),
    ("turn_queue", ("id",)),
    ("interrupted_turns", ("turn_id",)),
    ("memories", ("id",)),
    ("memory_history", ("id",)),
    ("person_settings", ("person_id", "character_id")),
    ("checkins", ("conversation_id",)),
    ("reminders", ("id",)),
    ("usage_days", ("person_id", "day", "character_id")),
    ("budget_notices", ("person_id", "day")),
    ("forgotten_spend", ("platform", "user_id", "day", "character_id")),
    ("link_codes", ("code",)),
    ("summaries", ("id",)),
    ("rebuilds", ("conversation_id",)),
    ("drafts", ("id",)),
    ("selections", ("person_id", "conversation_id")),
    ("meta", ("key",)),
    ("answer_origins", ("platform", "chat_id", "platform_message_id")),
]
# Every other table, and why it stays behind (tests/test_storage_copy.py checks that each table of
# the schema is in one list or the other).
NOT_COPIED = {
    "leases": "job claims of the old deployment's processes, minutes long",
    "link_failures": "wrong-code counts, 10 minutes long",
    "page_links": "memory page links, 10 minutes long: a new one is one /memory page away",
    "page_sessions": "memory page sessions, hours long: opened again by a new link",
    "page_failures": "wrong memory page codes by address, 10 minutes long",
    "model_calls": "[limits] counts, a minute long",
    "deliveries": "platform update ids already taken, a day long; the platforms do not resend old ones",
    "recall_backfill": "SQLite's full-text backfill progress; PostgreSQL indexes every row it stores",
    "message_vectors": "vectors: PostgreSQL keeps them only with pgvector, where the embedding job makes them again",
    "vectors_waiting": "the embedding job's queue, rebuilt by PostgreSQL's own triggers",
    "vector_model": "the embedding model in use: set again by the first embedding job",
}
BATCH = 1_000
COPY_MARK = "storage_copy_from"  # meta key naming the source a copy into this database came from
UNCHECKED_CAPS = MemoryCaps(unpinned=10**9, pinned=10**9)  # the copy keeps what the source holds

Progress = Callable[[str, int, int], None]  # table, rows done, rows in all


class CopyError(Exception):
    """A copy that cannot start or did not come out whole; the message says why."""


@dataclass(frozen=True)
class CopyReport:
    counts: dict[str, int]  # rows of each table, equal on both sides


async def copy_store(source_url: str, target_url: str, base: Path, allow_non_empty: bool = False,
                     progress: Progress | None = None) -> CopyReport:
    for url in (source_url, target_url):
        check_url(url)
    if urlsplit(source_url).scheme != "sqlite" or urlsplit(target_url).scheme == "sqlite":
        raise CopyError("storage copy moves an SQLite file into PostgreSQL: --from sqlite:///… --to postgresql://…")
    path, _ = sqlite_path(source_url, base)
    if not path.is_file():
        raise CopyError(f"{path}: no such SQLite file")
    await (await open_store(source_url, UNCHECKED_CAPS, base)).close()  # brought up to this version's schema
    target = await open_store(target_url, UNCHECKED_CAPS, base)  # created and migrated if new
    db = target.db  # type: ignore[attr-defined]  # the PostgreSQL store's database
    try:
        async with aiosqlite.connect(f"file:{path}?mode=ro", uri=True) as source:
            await _refuse_a_foreign_target(db, source_url, allow_non_empty)
            await db.execute("INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                             COPY_MARK, source_url)
            for table, key in TABLES:
                await _copy_table(source, db, table, key, progress)
            await _advance_counters(db)
            await db.execute("ANALYZE")  # the planner's statistics for the tables just filled
            counts = await _check_counts(source, db)
    finally:
        await target.close()
    return CopyReport(counts)


async def _refuse_a_foreign_target(db, source_url: str, allow_non_empty: bool) -> None:
    if allow_non_empty or not await db.value("SELECT EXISTS (SELECT 1 FROM persons) OR "
                                             "EXISTS (SELECT 1 FROM conversations)"):
        return
    if await db.value("SELECT value FROM meta WHERE key = $1", COPY_MARK) == source_url:
        return  # this copy, resumed
    raise CopyError("the target database already holds people or conversations; copy into an empty one. "
                    "If it holds this very deployment (an earlier copy of this file, since moved), add "
                    "--allow-non-empty: rows with the same ids are then taken to be the same rows")


async def _columns(db, table: str) -> dict[str, str]:
    rows = await db.all("SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = current_schema() AND table_name = $1", table)
    return {name: kind for name, kind in rows}


def _converter(kind: str) -> Callable:
    """SQLite keeps booleans as 0/1 and may keep a whole number in a REAL column."""
    if kind == "boolean":
        return lambda value: None if value is None else bool(value)
    if kind == "double precision":
        return lambda value: None if value is None else float(value)
    return lambda value: value


async def _copy_table(source: aiosqlite.Connection, db, table: str, key: tuple[str, ...],
                      progress: Progress | None) -> None:
    target_columns = await _columns(db, table)
    source_columns = [row[1] for row in await source.execute_fetchall(f"PRAGMA table_info({table})")]
    columns = [c for c in source_columns if c in target_columns]
    if not columns:
        return
    convert = [_converter(target_columns[c]) for c in columns]
    (total,) = (await source.execute_fetchall(f"SELECT COUNT(*) FROM {table}"))[0]
    marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    insert = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
              f"ON CONFLICT ({', '.join(key)}) DO NOTHING")
    done = 0
    if progress:
        progress(table, done, total)
    cursor = await source.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {', '.join(key)}")
    while batch := await cursor.fetchmany(BATCH):
        async with db.pool.acquire() as connection, connection.transaction():  # asyncpg's own batch insert
            await connection.executemany(insert, [[f(v) for f, v in zip(convert, row)] for row in batch])
        done += len(batch)
        if progress:
            progress(table, done, total)
    await cursor.close()


async def _advance_counters(db) -> None:
    """New rows in PostgreSQL take ids after the copied ones (a message's place counter,
    `conversations.last_pos`, is copied with its conversation)."""
    for table, key in TABLES:
        if key == ("id",):
            await db.value(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                           f"GREATEST((SELECT MAX(id) FROM {table}), 1))")


async def _check_counts(source: aiosqlite.Connection, db) -> dict[str, int]:
    counts, differences = {}, []
    for table, key in TABLES:
        (expected,) = (await source.execute_fetchall(f"SELECT COUNT(*) FROM {table}"))[0]
        copied = await db.value(f"SELECT COUNT(*) FROM {table}")
        if copied < expected:
            differences.append(f"{table}: {expected} in the file, {copied} in PostgreSQL")
        counts[table] = expected
    if differences:
        raise CopyError("the copy is not whole: " + "; ".join(differences))
    return counts

