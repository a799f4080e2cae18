"""A turn reads only what it needs, never the whole history: no statement of a turn — its arrival,
its reply, the reply shown, the summaries after it — reads every row of a table, on SQLite and
PostgreSQL. Each statement is caught on its way to the database and its plan asked of the same
database."""

from __future__ import annotations

import contextlib
import re
import sqlite3

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from tests.conftest import Chat, FakeClock, config_dict, runtimes_on

READS = ("execute", "one", "all", "value")


@contextlib.contextmanager
def caught(db):
    """Every statement the store sends while the block runs, inside transactions too."""
    statements: list[tuple[str, tuple]] = []

    def catching(run):
        async def catch(sql, *params):
            statements.append((sql, params))
            return await run(sql, *params)
        return catch

    class Caught:
        def __init__(self, tx):
            for name in READS:
                setattr(self, name, catching(getattr(tx, name)))

    original = {name: getattr(db, name) for name in (*READS, "transaction", "short")}

    @contextlib.asynccontextmanager
    async def transaction(short: bool = False):
        async with original["transaction"](short) as tx:
            yield Caught(tx)

    for name in READS:
        setattr(db, name, catching(original[name]))
    db.transaction = transaction
    if original["short"] is not db:  # SQLite's short reads, on a connection of their own
        db.short = Caught(original["short"])
    try:
        yield statements
    finally:
        for name, method in original.items():
            setattr(db, name, method)


@pytest.fixture(params=["sqlite", "postgresql"])
async def start(request, llm, tmp_path):
    async with runtimes_on(request.param, tmp_path) as start_on:
        yield lambda: start_on(config_dict(llm.base_url, tmp_path / "keepsake.sqlite3"), FakeClock())


async def whole_table_reads_on_sqlite(db, statements) -> list[str]:
    """Each table a statement's plan reads every row of (`SCAN t`), with the statement."""
    tables = {row[0] for row in await db.all("SELECT name FROM sqlite_master WHERE type = 'table'")}
    found = []
    for sql, params in statements:
        plan = [str(row["detail"]) for row in await db.all("EXPLAIN QUERY PLAN " + sql, *params)]
        found += [f"{m[1]}: {sql}" for line in plan if (m := re.match(r"SCAN (\w+)$", line)) and m[1] in tables]
    return found


async def whole_table_reads_on_postgres(db, statements) -> list[str]:
    """Each table a statement's plan reads every row of (`Seq Scan on t`), with sequential scans
    priced out: the plan shows whether an index can serve it at all, whatever the tables' sizes."""
    found = []
    async with db.transaction() as tx:
        await tx.execute("SET LOCAL enable_seqscan = off")
        tables = {row[0] for row in await tx.all(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
        for sql, params in statements:
            plan = [row["QUERY PLAN"] for row in await tx.all("EXPLAIN " + sql, *params)]
            found += [f"{m[1]}: {sql}" for line in plan
                      if (m := re.search(r"Seq Scan on (\w+)", line)) and m[1] in tables]
    return found


async def statements_of_a_turn(runtime, person: Chat, text: str) -> list[tuple[str, tuple]]:
    """What a turn sends the database: its arrival, its reply, the reply shown, the summaries after."""
    with caught(runtime.store.db) as statements:
        await person.say(text)
        await runtime.summarizer.idle()
    return statements


async def test_no_statement_of_a_turn_reads_a_whole_table(start, llm):
    """Every statement of a turn — its arrival, its reply, the reply shown, the summaries after it
    — finds its rows through an index, never by reading every row of a table (every turn ever
    answered, every message)."""
    runtime = await start()
    ann = Chat(runtime)
    for n in range(60):  # past the live window of 50: recall and the summaries run
        await ann.say(f"message {n}: the lighthouse lamp and the harbour tide")
    await runtime.summarizer.idle()
    statements = await statements_of_a_turn(runtime, ann, "what did I say about the lighthouse lamp?")
    assert len(statements) > 10
    reads = whole_table_reads_on_sqlite if runtime.config.storage.url.startswith("sqlite") else \
        whole_table_reads_on_postgres
    assert await reads(runtime.store.db, statements) == []


async def test_a_start_up_finds_the_running_turns_and_unshown_replies_without_reading_every_turn(start, llm):
    """A process starting looks for what a gone process left: turns still running, replies stored
    but never shown. Each is found by the partial index that holds only those turns (migration 29
    left one index for each question), never by reading every turn ever answered."""
    runtime = await start()
    ann = Chat(runtime)
    for n in range(5):
        await ann.say(f"message {n}")
    with caught(runtime.store.db) as statements:
        await runtime.store.turns.recover_interrupted_turns()
    assert any("NOT shown" in sql for sql, _ in statements) and any("'running'" in sql for sql, _ in statements)
    reads = whole_table_reads_on_sqlite if runtime.config.storage.url.startswith("sqlite") else \
        whole_table_reads_on_postgres
    # (the waiting line is read whole: every ticket in it is one waiting now)
    assert [read for read in await reads(runtime.store.db, statements) if read.startswith("turns:")] == []


@contextlib.contextmanager
def sqlite_steps(monkeypatch):
    """SQLite's own count of the steps its statements run, on every connection a store opens while
    the block runs (a figure of the work done, whatever the machine): `counting` switches it on."""
    steps = {"counting": False, "steps": 0}
    connect = sqlite3.connect

    def counted(*args, **kwargs):
        connection = connect(*args, **kwargs)

        def step() -> int:
            steps["steps"] += steps["counting"]
            return 0  # go on
        connection.set_progress_handler(step, 1)
        return connection

    monkeypatch.setattr(sqlite3, "connect", counted)
    yield steps


async def test_a_turn_reads_no_more_after_hundreds_of_turns_of_the_last_five_minutes(tmp_path, monkeypatch):
    """A busy conversation: a turn's statements (its message stored, the line asked, the turn
    started, its reply, the reply shown; SPEC 9) run as many steps after 400 turns of the last five
    minutes (RECOVER_WITHIN_S) as after 20: the line finds the few turns cut off lately by index,
    never by reading every recent turn of the conversation."""
    with sqlite_steps(monkeypatch) as steps:
        store = await open_store("sqlite:///keepsake.sqlite3", CAPS, tmp_path)
        try:
            mira = await store.characters.ensure_character("Mira")
            ann = await store.people.person_for_identity("telegram", "501")
            chat = (await store.conversations.conversation("telegram", "501", None, mira, False)).id

            async def answered(count: int) -> None:
                for n in range(count):
                    arrival = await store.turns.store_and_queue(chat, ann, "Ann", f"message {n}", 2, None, None)
                    assert arrival.message is not None and arrival.turn_id is not None
                    await store.turns.finish_turn(arrival.turn_id, arrival.message, "Mira", "Aye.", 2, {})
                    await store.turns.reply_shown(arrival.turn_id, [])

            async def turn_steps() -> int:
                steps["counting"], steps["steps"] = True, 0
                await answered(1)
                steps["counting"] = False
                return steps["steps"]

            await answered(20)
            after_20 = await turn_steps()
            await answered(400)
            after_420 = await turn_steps()
        finally:
            await store.close()
    assert after_420 < after_20 * 1.2, (after_20, after_420)
