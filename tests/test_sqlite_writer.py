"""SQLite's one writer is held for a short transaction's SQL only (storage/sqlite/database.py):
its statements and commit run inline, never waiting behind the event loop, while taking the file
(which may wait for another process) and every long transaction stay off the event loop. Short
reads run inline too, on a connection that only reads and never waits."""

import asyncio
import contextlib
import sqlite3

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.sqlite.database import Database


@contextlib.asynccontextmanager
async def opened(path):
    db = Database(path)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def loop_turns():
    """Counts the event loop's turns while the block runs: how often other work got to run."""
    turns = [0]

    async def spin() -> None:
        while True:
            turns[0] += 1
            await asyncio.sleep(0)

    spinning = asyncio.create_task(spin())
    await asyncio.sleep(0)
    try:
        yield turns
    finally:
        spinning.cancel()
        await asyncio.gather(spinning, return_exceptions=True)


async def meta(db: Database, key: str):
    return await db.value("SELECT value FROM meta WHERE key = $1", key)


async def write(db: Database, key: str, short: bool = True) -> None:
    async with db.transaction(short=short) as tx:
        await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", key, "written")


async def test_a_short_transaction_holds_the_writer_for_its_sql_never_across_the_event_loop(tmp_path):
    async with opened(tmp_path / "keepsake.sqlite3") as db, loop_turns() as turns:
        before = turns[0]
        async with db.transaction(short=True) as tx:  # its begin, statements and commit
            for n in range(20):
                await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", f"k{n}", "v")
            assert await tx.value("SELECT COUNT(*) FROM meta WHERE key LIKE 'k%'") == 20
        assert turns[0] == before  # nothing else ran from its begin to its commit
        assert await meta(db, "k19") == "v"


async def test_a_long_transaction_lets_the_event_loop_run_between_its_statements(tmp_path):
    async with opened(tmp_path / "keepsake.sqlite3") as db, loop_turns() as turns:
        async with db.transaction() as tx:  # /forgetme, an import, the upkeep: on the writer's thread
            begun = turns[0]
            for n in range(20):
                await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", f"k{n}", "v")
            assert turns[0] > begun


async def test_a_short_transaction_that_fails_leaves_nothing_and_the_next_one_writes(tmp_path):
    async with opened(tmp_path / "keepsake.sqlite3") as db:
        with pytest.raises(ValueError):
            async with db.transaction(short=True) as tx:
                await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", "half", "written")
                raise ValueError("a failure halfway")
        assert await meta(db, "half") is None
        await write(db, "next")
        assert await meta(db, "next") == "written"


async def holding_the_file(db: Database) -> tuple[asyncio.Task, asyncio.Event]:
    """`db` (another process: another connection to the file) takes the writer and holds it until
    the event is set; its task."""
    held, release = asyncio.Event(), asyncio.Event()

    async def holding() -> None:
        async with db.transaction() as tx:
            await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", "theirs", "written")
            held.set()
            await release.wait()

    task = asyncio.create_task(holding())
    await held.wait()
    return task, release


async def test_a_short_transaction_waits_for_another_processs_writer_off_the_event_loop(tmp_path):
    """Another process holds the writer: the short transaction waits for it on the writer's
    thread, and the event loop keeps running meanwhile."""
    path = tmp_path / "keepsake.sqlite3"
    async with opened(path) as ours, opened(path) as theirs, loop_turns() as turns:
        holder, release = await holding_the_file(theirs)
        writing = asyncio.create_task(write(ours, "ours"))
        waited_from = turns[0]
        await asyncio.sleep(0.2)
        assert not writing.done() and turns[0] > waited_from + 10  # it waits; the loop runs
        release.set()
        await asyncio.gather(holder, writing)
        assert await meta(ours, "ours") == "written" and await meta(ours, "theirs") == "written"


@pytest.mark.parametrize("short", [True, False])
async def test_a_write_cancelled_while_another_process_holds_the_file_leaves_the_writer_free(tmp_path, short):
    """A turn stopped while its write waits for another process's writer: the wait still ends on
    the writer's thread, and what it began is undone, so this process writes on afterwards and
    the other process is not locked out."""
    path = tmp_path / "keepsake.sqlite3"
    async with opened(path) as ours, opened(path) as theirs:
        holder, release = await holding_the_file(theirs)
        waiting = asyncio.create_task(write(ours, "cancelled", short))
        await asyncio.sleep(0.1)  # waiting for the file, on the writer's thread
        waiting.cancel()
        release.set()  # the file is free: the cancelled write's wait ends, having begun
        await holder
        await asyncio.gather(waiting, return_exceptions=True)
        await asyncio.wait_for(write(ours, "ours after", short), 5)
        await asyncio.wait_for(write(theirs, "theirs after", short), 5)
        assert [await meta(ours, key) for key in ("cancelled", "ours after", "theirs after")] == [
            None, "written", "written"]


async def test_a_short_read_runs_inline_and_sees_what_another_process_committed(tmp_path):
    path = tmp_path / "keepsake.sqlite3"
    async with opened(path) as ours, opened(path) as theirs, loop_turns() as turns:
        await write(theirs, "theirs")
        before = turns[0]
        assert await ours.short.value("SELECT value FROM meta WHERE key = $1", "theirs") == "written"
        assert turns[0] == before  # read inline: nothing else ran meanwhile


async def test_a_short_read_cannot_write(tmp_path):
    async with opened(tmp_path / "keepsake.sqlite3") as db:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await db.short.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", "short", "written")
        assert await meta(db, "short") is None


async def test_recall_searches_inline_for_a_lone_turn_and_on_the_readers_thread_beside_others(tmp_path):
    """storage/sqlite/recall.py: with no other turn of the process running, a search's reads
    run inline (the hop to a thread only adds its wait); with two running, on the reader's
    thread, the loop free for their work meanwhile. Either way it finds the same."""
    store = await open_store("sqlite:///keepsake.sqlite3", CAPS, tmp_path)
    try:
        mira = await store.characters.ensure_character("Mira")
        ann = await store.people.person_for_identity("telegram", "501")
        chats = [(await store.conversations.conversation("telegram", chat, None, mira, False)).id
                 for chat in ("501", "502")]
        for n in range(30):
            await store.conversations.add_user_message(chats[0], ann, "Ann", f"goat {n} ate the {n % 7} roses", 6,
                                                       f"m{n}")
        async def turn_starts(chat: int) -> None:
            assert (await store.turns.store_and_queue(chat, ann, "Ann", "the goat?", 2, None, None)).turn_id

        async with loop_turns() as turns:
            await turn_starts(chats[0])  # the turn that searches
            before = turns[0]
            alone = await store.recall.search(chats[0], ["goat", "roses"], 10**9, 10, 100)
            assert turns[0] == before and len(alone) == 10
            await turn_starts(chats[1])  # another turn of this process
            before = turns[0]
            assert await store.recall.search(chats[0], ["goat", "roses"], 10**9, 10, 100) == alone
            assert turns[0] > before
    finally:
        await store.close()


class Busy:
    """An sqlite3 connection SQLite answers busy (another connection holds the file, or recovers
    its log after a crash): a real busy needs another process's exclusive lock on the file."""

    def execute(self, sql, params):
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
        raise busy


async def test_a_short_read_sqlite_answers_busy_is_read_on_the_readers_thread(tmp_path):
    async with opened(tmp_path / "keepsake.sqlite3") as db, loop_turns() as turns:
        await write(db, "key")
        db.short.connection = Busy()
        before = turns[0]
        assert await db.short.value("SELECT value FROM meta WHERE key = $1", "key") == "written"
        assert turns[0] > before  # waited for on the reader's thread, the loop running meanwhile


async def test_closing_the_store_waits_for_a_short_transaction_under_way(tmp_path):
    """A turn's failure is written as the process stops: the writer's connection is closed only
    once that transaction is done (closed beneath it, on its thread, it crashed the process)."""
    path = tmp_path / "keepsake.sqlite3"
    db = Database(path)
    await db.open()
    inside, go_on = asyncio.Event(), asyncio.Event()

    async def writing() -> None:
        async with db.transaction(short=True) as tx:
            await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", "first", "written")
            inside.set()
            await go_on.wait()  # its caller awaits something else meanwhile
            await tx.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", "second", "written")

    writer = asyncio.create_task(writing())
    await inside.wait()
    closing = asyncio.create_task(db.close())
    await asyncio.sleep(0.1)
    assert not closing.done()
    go_on.set()
    await asyncio.gather(writer, closing)
    async with opened(path) as again:
        assert [await meta(again, key) for key in ("first", "second")] == ["written", "written"]
