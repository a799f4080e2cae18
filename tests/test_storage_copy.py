"""`python -m bot storage copy` moves a whole SQLite deployment into PostgreSQL: the bot on
PostgreSQL then builds exactly the prompt the bot on SQLite builds (same memories, summary and
window); copying again changes nothing; a database holding another deployment is refused."""

import asyncio
import os
import sqlite3
import sys
from contextlib import closing

import pytest

from bot.contract import AlbumItem, IncomingMessage
from bot.memory.saved_memories import CAPS
from bot.runtime import build_runtime
from storage.copy import COPY_MARK, NOT_COPIED, TABLES
from storage.factory import open_store
from tests.conftest import ROOT, Chat, shown
from tests.fakes.llm_server import text, tool_calls
from tests.fakes.summarizer import kind_of
from tests.postgres import fresh_schema_url


@pytest.fixture
async def postgres_url():
    schemas = fresh_schema_url()
    yield await anext(schemas)
    await anext(schemas, None)


async def copy(source: str, target: str, *extra: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "storage", "copy", "--from", source, "--to", target, *extra,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out.decode() + err.decode()


async def populate(runtime, llm) -> None:
    """A deployment with history: memories (one pinned, one written by the AI), a summary of old
    messages, a draft, a setting, a persona, what was spent and a scene."""
    ann, bob = Chat(runtime), Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")
    await ann.memory("/memory add I keep bees on the roof")
    pinned = await ann.memory("/memory add My sister is called Ines")
    await ann.memory(f"/memory pin {pinned.text.split('#')[1].split()[0].rstrip('.:,')}")
    llm.add(tool_calls(("save_memory", {"content": "Ann's bees are called the Buzzers", "scope": "global"})),
            text("What lovely names."))
    await ann.say("my bees are called the Buzzers")
    llm.responder = lambda body: text("- Ann talked about the harbour.") if kind_of(body) != "chat" else None
    for n in range(60):
        await ann.say(f"the harbour was busy on day {n}")
    conversation = (await runtime.cast.conversation_for(ann.key)).id
    runtime.summarizer.schedule(conversation)
    await runtime.summarizer.idle()
    assert await runtime.store.summaries.summaries(conversation)
    await bob.memory("/memory learning off")
    llm.responder = None
    llm.add(text('["Ann keeps bees"]'))
    await ann.memory("/memory generate I keep bees and my sister is Ines")  # drafts waiting for Ann
    await ann.memory("/memory save 2")  # a selection
    await bob.memory("/link")  # a link code
    await runtime.store.conversations.set_answer_origin("telegram", "501", ["77"], conversation)
    await runtime.store.conversations.set_platform_message_ids(conversation, 1, ["42", "43"])
    cai = Chat(runtime, user="601", name="Cai", chat_id="601", platform="telegram")
    for n in range(4):
        await cai.say(f"a message in Cai's DM, number {n}")  # a check-in mark
    await cai.memory("/checkins off")
    await cai.run("timezone", zone="Europe/Paris")  # a time zone (SPEC 19)
    llm.add(tool_calls(("remind", {"what": "feed the bees", "day": "tomorrow", "time": "09:00"})), text("I will."))
    await cai.say("remind me tomorrow at nine to feed the bees")  # a reminder waiting
    photos = tuple(AlbumItem("trip", str(n), f'{{"message_id": {n}}}') for n in (901, 902))  # an album, item by item
    await shown(runtime, await runtime.core.conversation.handle(IncomingMessage(
        cai.key, cai.identity, cai.name, "[2 photos] from my trip", platform_message_id="901", album=photos,
        asker=cai.asker)))
    await ann.memory("/persona set I'm Ann, a beekeeper")  # a persona (SPEC 17); usage_days has every turn
    await runtime.store.usage.notice_once(await ann.person_id(), "2027-01-15")  # told she was past her tokens
    group = Chat(runtime, user="603", name="Eve", chat_id="-100603", shared=True, platform="telegram")
    await group.say("@Mira hello, group")  # a scene: who is present, who witnessed what (SPEC 22)
    dee = Chat(runtime, user="602", name="Dee", chat_id="602", platform="telegram")
    await dee.say("hello, and goodbye")
    await runtime.store.people.forget_person(await dee.person_id(), runtime.gate.budgets.today())  # her day's spend stays


@pytest.mark.timeout(120)
async def test_a_copied_deployment_answers_on_postgresql_with_the_same_memories_summary_and_window(
        make_config, clock, llm, tmp_path, postgres_url):
    sqlite_config = make_config()
    runtime = await build_runtime(sqlite_config, clock=clock)
    await populate(runtime, llm)
    await runtime.close()
    source = f"sqlite:///{tmp_path / 'keepsake.sqlite3'}"

    status, output = await copy(source, postgres_url)
    assert status == 0, output
    assert "messages" in output and "#" * 30 in output  # the progress bar, filled
    assert "Copied and checked" in output

    status, again = await copy(source, postgres_url)  # resumed or repeated: nothing changes
    assert status == 0, again
    assert again.splitlines()[-1] == output.splitlines()[-1]
    await every_table_is_the_same(tmp_path / "keepsake.sqlite3", postgres_url, tmp_path)

    postgres_config = sqlite_config.changed("storage", url=postgres_url)
    prompts = []
    for config in (postgres_config, sqlite_config):
        runtime = await build_runtime(config, clock=clock)
        try:
            await Chat(runtime).say("what do you remember about me?")
            prompts.append(llm.requests[-1]["messages"])
            bob_learns = await runtime.store.memories.learning_enabled(
                await Chat(runtime, user="bob").person_id(), runtime.cast.character("Mira").id)
            assert bob_learns is False
        finally:
            await runtime.close()
    on_postgres, on_sqlite = prompts
    assert on_postgres == on_sqlite
    everything = str(on_postgres)
    for kept in ("I keep bees on the roof", "My sister is called Ines", "the Buzzers",  # memories
                 "Ann talked about the harbour", "the harbour was busy on day 59"):  # summary, window
        assert kept in everything


async def every_table_is_the_same(sqlite_file, postgres_url: str, base) -> None:
    """Each table of the SQLite schema is copied or named in NOT_COPIED; each copied one holds the
    same rows on both sides, column by column."""
    with closing(sqlite3.connect(sqlite_file)) as source:
        tables = {name for (name,) in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if not name.startswith(("sqlite_", "messages_fts"))}
        assert tables == {table for table, _ in TABLES} | set(NOT_COPIED)
        target = await open_store(postgres_url, CAPS, base)
        try:
            for table, key in TABLES:
                target_columns = {row["column_name"] for row in await target.db.all(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                    "AND table_name = $1", table)}
                columns = [row[1] for row in source.execute(f"PRAGMA table_info({table})") if row[1] in target_columns]
                select = f"SELECT {', '.join(columns)} FROM {table} ORDER BY {', '.join(key)}"
                in_file = [tuple(row) for row in source.execute(select)]
                copied = [tuple(int(v) if isinstance(v, bool) else v for v in row) for row in await target.db.all(select)
                          if table != "meta" or row["key"] != COPY_MARK]  # the copy's own note of its source
                assert copied == in_file, table
                assert in_file or table in EMPTY_HERE, f"{table}: the test deployment should have rows here"
        finally:
            await target.close()


# nothing waits or broke in this deployment, and no streamed reply is being written (its witnesses)
EMPTY_HERE = {"turn_queue", "interrupted_turns", "rebuilds", "meta", "turn_witnesses"}


async def test_a_database_holding_a_deployment_is_refused_unless_told_it_is_this_one(make_config, clock, llm,
                                                                                     tmp_path, postgres_url):
    for name in ("first", "second"):
        config = make_config()
        config = config.changed("storage", url=f"sqlite:///{tmp_path / name}.sqlite3")
        runtime = await build_runtime(config, clock=clock)
        await Chat(runtime, user=name).memory(f"/memory add I am the {name} deployment")
        await runtime.close()
    status, copied = await copy(f"sqlite:///{tmp_path}/first.sqlite3", postgres_url)
    assert status == 0, copied
    status, output = await copy(f"sqlite:///{tmp_path}/second.sqlite3", postgres_url)
    assert status == 1 and "already holds people or conversations" in output
    (tmp_path / "first.sqlite3").rename(tmp_path / "moved.sqlite3")  # the same deployment, elsewhere
    status, output = await copy(f"sqlite:///{tmp_path}/moved.sqlite3", postgres_url)
    assert status == 1
    status, output = await copy(f"sqlite:///{tmp_path}/moved.sqlite3", postgres_url, "--allow-non-empty")
    assert status == 0 and output.splitlines()[-1] == copied.splitlines()[-1]
