"""Semantic recall (SPEC section 11): with `[recall] embedding_model` set, messages are embedded
in the background through the model server's /v1/embeddings (batched, newest first), each turn
fuses the full-text and the vector rankings, and a slow or failing embedding server never fails
a turn or holds it up for long. The embeddings come from the scripted server's crude trigram
embedder, which knows nothing of what the tests ask."""

import asyncio
import logging
import time

import pytest

from bot.config import parse_config
from bot.runtime import build_runtime
from tests.conftest import Chat, config_dict
from tests.postgres import PGVECTOR_ENV, fresh_schema_url
from tests.test_recall import history, recall_block

PLANTED = "we buried the old tin box under the oak by the pier"
ASKED = "where did we hide that tinbox?"  # no word in common with PLANTED that full text can use


def lines(count: int) -> list[str]:
    return [f"gulls over the harbour again, day {n}" for n in range(count)]


@pytest.fixture
async def closing(llm, tmp_path, clock):
    """Builds runtimes on one database (SQLite, or `url`), with `model` as [recall]
    embedding_model; closes them after the test."""
    runtimes = []

    async def make(model: str | None = "text-embedding-3-small", url: str | None = None, **recall):
        raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
        raw["recall"] = ({"embedding_model": model} if model else {}) | recall
        if url:
            raw["storage"] = {"url": url}
        runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
        runtimes.append(runtime)
        return runtime
    yield make
    for runtime in runtimes:
        await runtime.close()


async def test_a_message_is_recalled_by_meaning_where_full_text_finds_nothing(closing, llm, clock):
    runtime = await closing()
    ann = Chat(runtime)
    await history(ann, clock, [PLANTED] + lines(70))
    await runtime.jobs.embed_waiting()
    await ann.say(ASKED)
    assert f"Ann: {PLANTED}" in recall_block(llm)

    plain = await closing(model=None)  # the same database, recall by words only
    await Chat(plain).say(ASKED)
    assert PLANTED not in llm.prompt_text()


async def test_on_postgresql_with_pgvector_a_message_is_recalled_by_meaning(closing, llm, clock):
    schemas = fresh_schema_url(PGVECTOR_ENV)
    url = await anext(schemas)
    try:
        runtime = await closing(url=url)
        assert runtime.semantic is not None
        ann = Chat(runtime)
        await history(ann, clock, [PLANTED] + lines(70))
        await runtime.jobs.embed_waiting()
        assert await runtime.store.vectors.count_waiting() == 0
        await ann.say(ASKED)
        assert f"Ann: {PLANTED}" in recall_block(llm)
    finally:
        await anext(schemas, None)


async def test_messages_are_embedded_in_the_background_in_batches_newest_first(closing, llm, clock):
    runtime = await closing()
    ann = Chat(runtime)
    await history(ann, clock, [f"line {n}" for n in range(150)])
    assert await runtime.store.vectors.count_waiting() == 150
    await runtime.jobs.embed_waiting()
    assert await runtime.store.vectors.count_waiting() == 0
    sizes = [len(r["input"]) for r in llm.embedding_requests]
    assert sizes == [8] * 18 + [6]  # batches of 8: short, so a turn's own request never waits long
    assert llm.embedding_requests[0]["input"][0] == "line 149"
    assert {r["dimensions"] for r in llm.embedding_requests} == {256}  # text-embedding-3 vectors, shortened


async def test_a_turns_own_message_is_embedded_for_it_and_kept(closing, llm, clock):
    runtime = await closing()
    await Chat(runtime).say("hello there")
    assert [r["input"] for r in llm.embedding_requests] == [["hello there"]]
    assert [text for _, text in await runtime.store.vectors.waiting(10)] == ["Okay."]  # the reply waits for the job


async def test_a_failing_embedding_server_never_fails_a_turn_and_is_left_alone_for_a_minute(closing, llm, clock,
                                                                                          caplog):
    runtime = await closing()
    runtime.semantic.clock = clock  # the pause is measured on the test's clock
    ann = Chat(runtime)
    await history(ann, clock, ["my cousin Ingrid keeps three goats"] + lines(70))
    llm.embeddings_status = 500
    with caplog.at_level(logging.WARNING):
        reply = await ann.say("how are Ingrid's goats?")
    assert not reply.is_error
    assert "Ann: my cousin Ingrid keeps three goats" in recall_block(llm)  # full text alone
    assert "semantic recall: the embedding server failed" in caplog.text
    asked = len(llm.embedding_requests)
    clock.now += 59
    await ann.say("and the goats' names?")
    await runtime.jobs.embed_waiting()
    assert len(llm.embedding_requests) == asked  # left alone for a minute
    llm.embeddings_status = 200
    clock.now += 2
    await runtime.jobs.embed_waiting()
    assert len(llm.embedding_requests) > asked  # and asked again after it


@pytest.mark.parametrize("body, content_type", [
    ('{"object": "list", "data": [{"index": 0, "embedding": "0.1,0.2,0.3"}]}', "application/json"),
    ('{"object": "list", "data": [{"index": 0, "embedding": [[0.1, 0.2], [0.3, 0.4]]}]}', "application/json"),
    ('{"object": "list", "model": "x"}', "application/json"),
    ('{"object": "list", "data": null}', "application/json"),
    ("<html><body>Welcome to nginx!</body></html>", "text/html"),
], ids=["vectors as text", "nested lists", "no data", "data null", "an HTML page"])
async def test_a_malformed_embedding_answer_means_full_text_alone_and_one_warning(closing, llm, clock, caplog,
                                                                                  body, content_type):
    from aiohttp import web

    runtime = await closing()
    ann = Chat(runtime)
    await history(ann, clock, ["my cousin Ingrid keeps three goats"] + lines(70))
    llm.embeddings_answer = web.Response(text=body, content_type=content_type)
    with caplog.at_level(logging.WARNING):
        reply = await ann.say("how are Ingrid's goats?")
        assert not reply.is_error
        assert "Ann: my cousin Ingrid keeps three goats" in recall_block(llm)  # full text alone
        await ann.say("and the goats' names?")
        await runtime.jobs.embed_waiting()
    warnings = [r for r in caplog.records if r.name == "bot.memory.semantic"]
    assert len(warnings) == 1 and "semantic recall" in warnings[0].getMessage()
    assert not any(r.levelname == "ERROR" for r in caplog.records)


async def test_a_slow_embedding_server_holds_one_turn_up_at_most_a_second_and_the_next_not_at_all(
        closing, llm, clock):
    runtime = await closing()
    ann = Chat(runtime)
    await history(ann, clock, ["my cousin Ingrid keeps three goats"] + lines(70))
    llm.embeddings_delay_s = 5.0
    started = time.monotonic()
    reply = await ann.say("how are Ingrid's goats?")
    assert not reply.is_error and time.monotonic() - started < 1.5  # at most 1 s of waiting, and the turn
    assert "Ann: my cousin Ingrid keeps three goats" in recall_block(llm)
    started = time.monotonic()
    reply = await ann.say("and Ingrid's goats' names?")  # within PAUSE_AFTER_FAILURE_S of the slow one
    assert not reply.is_error and time.monotonic() - started < 0.5
    assert "Ann: my cousin Ingrid keeps three goats" in recall_block(llm)


async def test_changing_the_embedding_model_embeds_every_message_again(closing, llm, clock):
    first = await closing(model="text-embedding-3-small")
    await history(Chat(first), clock, lines(20))
    await first.jobs.embed_waiting()
    assert await first.store.vectors.count_waiting() == 0
    await first.close()
    second = await closing(model="nomic-embed-text")
    assert await second.store.vectors.count_waiting() == 20
    await second.jobs.embed_waiting()
    assert "dimensions" not in llm.embedding_requests[-1]  # only text-embedding-3 models take it


async def test_on_postgresql_without_pgvector_recall_stays_full_text_and_says_so_once(closing, llm, clock, caplog):
    schemas = fresh_schema_url()
    url = await anext(schemas)
    try:
        with caplog.at_level(logging.WARNING):
            runtime = await closing(url=url)
        if runtime.semantic is not None:
            pytest.skip("this PostgreSQL server has pgvector (the test wants one without)")
        assert caplog.text.count("cannot keep vectors") == 1
        ann = Chat(runtime)
        await history(ann, clock, ["my cousin Ingrid keeps three goats"] + lines(70))
        reply = await ann.say("how are Ingrid's goats?")
        assert not reply.is_error and "Ann: my cousin Ingrid keeps three goats" in recall_block(llm)
        assert llm.embedding_requests == []
    finally:
        await anext(schemas, None)


async def test_embeddings_go_to_their_own_server_when_recall_names_one(closing, llm, clock, monkeypatch):
    from tests.fakes.llm_server import ScriptedLLM

    embedder = ScriptedLLM()
    await embedder.start()
    try:
        monkeypatch.setenv("KEEPSAKE_TEST_EMBEDDING_KEY", "sk-embeddings")
        runtime = await closing(embedding_base_url=embedder.base_url, embedding_api_key_env="KEEPSAKE_TEST_EMBEDDING_KEY")
        ann = Chat(runtime)
        await history(ann, clock, ["my cousin Ingrid keeps three goats"] + lines(70))
        await runtime.jobs.embed_waiting()
        await ann.say("how are Ingrid's goats?")
        assert embedder.embedding_requests and llm.embedding_requests == []  # vectors from the embedding server
        assert llm.requests and embedder.requests == []  # the reply from the chat server
        assert embedder.embedding_headers.get("Authorization") == "Bearer sk-embeddings"
    finally:
        await embedder.stop()


async def test_a_turns_message_is_embedded_before_the_next_background_batch_is_asked(closing, llm, clock):
    """A server answering one request at a time must never make a turn wait behind a backfill:
    while a turn's message is being embedded, no batch is sent."""
    runtime = await closing()
    ann = Chat(runtime)
    await history(ann, clock, lines(40))  # a backlog for the background job: five batches
    llm.embeddings_delay_s = 0.3
    stored = await runtime.store.conversations.add_user_message(
        (await runtime.cast.conversation_for(ann.key)).id, await ann.person_id(), "Ann", "the turn's own message", 5, None)
    turn = runtime.semantic.embed_message(stored)  # the turn asks first ...
    backfill = asyncio.create_task(runtime.jobs.embed_waiting())  # ... while the background job wants to go on
    await turn
    first_batch_at = len(llm.embedding_requests)
    await backfill
    assert llm.embedding_requests[0]["input"] == ["the turn's own message"]
    assert first_batch_at == 1  # no batch was sent while the turn's request was out
    assert all(len(r["input"]) <= 8 for r in llm.embedding_requests[1:])  # short batches
