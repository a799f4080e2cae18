"""The Vectors port (semantic recall, SPEC section 11): which messages wait to be embedded, vectors
kept per model, searched by meaning inside one conversation, and dropped when their message's
text changes or it goes. Run on SQLite and on a PostgreSQL server with pgvector
(KEEPSAKE_TEST_PGVECTOR_URL; `.ci/run` starts one where it can); on the test PostgreSQL server,
which has no pgvector, `use_model` must say so (recall stays full-text there)."""

import math
from pathlib import Path

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.ports import Store
from tests.conftest import FakeClock
from tests.postgres import ENV, PGVECTOR_ENV, fresh_schema_url
from tests.storage_contract.test_recall import say

SERVERS = {"postgresql": ENV, "pgvector": PGVECTOR_ENV}


async def opened(kind: str, tmp_path: Path, clock: FakeClock):
    schemas = fresh_schema_url(SERVERS[kind]) if kind in SERVERS else None
    url = await anext(schemas) if schemas else "sqlite:///keepsake.sqlite3"
    store = await open_store(url, CAPS, tmp_path, clock)
    yield store
    await store.close()
    if schemas:
        await anext(schemas, None)


@pytest.fixture(params=["sqlite", "pgvector"])  # the databases that keep vectors
async def store(request, tmp_path: Path, clock: FakeClock):
    async for each in opened(request.param, tmp_path, clock):
        yield each


@pytest.fixture
async def postgres_store(tmp_path: Path, clock: FakeClock):
    async for each in opened("postgresql", tmp_path, clock):
        yield each


def direction(*weights: float) -> list[float]:
    norm = math.sqrt(sum(w * w for w in weights))
    return [w / norm for w in weights]


NORTH, EAST, NORTHEAST = direction(1, 0, 0), direction(0, 1, 0), direction(1, 1, 0)


@pytest.fixture
async def keeps_vectors(store: Store) -> None:
    assert await store.vectors.use_model("embedder-1")


async def test_without_pgvector_postgresql_says_it_cannot_keep_vectors_and_queues_nothing(postgres_store: Store):
    store = postgres_store
    assert not await store.vectors.use_model("embedder-1")
    character = await store.characters.ensure_character("Mira")
    person = await store.people.person_for_identity("telegram", "501")
    chat = (await store.conversations.conversation("telegram", "501", None, character, False)).id
    await say(store, chat, person, "hello")
    assert await store.vectors.count_waiting() == 0  # no model in use: nothing piles up


async def test_the_first_model_queues_every_message_newest_first_and_new_ones_join(store: Store, ann, chat):
    old = await say(store, chat, ann, "one", "two")
    assert await store.vectors.use_model("embedder-1")
    (new,) = await say(store, chat, ann, "three")
    assert [text for _, text in await store.vectors.waiting(10)] == ["three", "two", "one"]
    assert await store.vectors.count_waiting() == 3
    await store.vectors.save("embedder-1", [(new.id, "three", NORTH), (old[0].id, "one", EAST)])
    assert [text for _, text in await store.vectors.waiting(10)] == ["two"]


async def test_nearest_ranks_by_meaning_inside_one_conversation_before_the_window(store: Store, keeps_vectors,
                                                                                  ann, chat, mira):
    other = (await store.conversations.conversation("telegram", "502", None, mira, False)).id
    (elsewhere,) = await say(store, other, ann, "north elsewhere")
    north, east, northeast, window = await say(store, chat, ann, "north", "east", "northeast", "now")
    await store.vectors.save("embedder-1", [(m.id, m.content, v) for m, v in (
        (elsewhere, NORTH), (north, NORTH), (east, EAST), (northeast, NORTHEAST), (window, NORTH))])
    assert await store.vectors.nearest(chat, NORTH, window.pos, 2) == [north.pos, northeast.pos]
    assert await store.vectors.nearest(chat, EAST, window.pos, 5) == [east.pos, northeast.pos, north.pos]


async def test_an_edited_message_loses_its_vector_and_waits_again_a_deleted_one_goes(store: Store, keeps_vectors,
                                                                                     ann, chat):
    edited, deleted, window = await say(store, chat, ann, "I live in Oslo", "I bake", "now")
    await store.vectors.save("embedder-1", [(edited.id, edited.content, NORTH), (deleted.id, deleted.content, EAST),
                                            (window.id, window.content, EAST)])
    await store.conversations.edit_platform_message(chat, edited.platform_message_id, "I live in Tromsø", 5)
    await store.conversations.delete_platform_message(chat, deleted.platform_message_id)
    assert await store.vectors.nearest(chat, NORTH, window.pos, 5) == []
    assert await store.vectors.waiting(10) == [(edited.id, "I live in Tromsø")]


async def test_a_vector_of_text_edited_meanwhile_or_of_another_model_is_not_kept(store: Store, keeps_vectors,
                                                                                ann, chat):
    first, window = await say(store, chat, ann, "I live in Oslo", "now")
    await store.conversations.edit_platform_message(chat, first.platform_message_id, "I live in Bodø", 5)
    await store.vectors.save("embedder-1", [(first.id, "I live in Oslo", NORTH)])  # embedded before the edit
    await store.vectors.save("embedder-0", [(window.id, "now", NORTH)])  # a model no longer in use
    assert await store.vectors.nearest(chat, NORTH, window.pos + 1, 5) == []
    assert await store.vectors.count_waiting() == 2


async def test_a_new_model_drops_the_old_vectors_and_embeds_everything_again(store: Store, keeps_vectors, ann, chat):
    first, window = await say(store, chat, ann, "north", "now")
    await store.vectors.save("embedder-1", [(first.id, "north", NORTH), (window.id, "now", EAST)])
    assert await store.vectors.count_waiting() == 0
    assert await store.vectors.use_model("embedder-1")  # the same model again: nothing changes
    assert await store.vectors.count_waiting() == 0
    assert await store.vectors.use_model("embedder-2")
    assert await store.vectors.count_waiting() == 2
    assert await store.vectors.nearest(chat, NORTH, window.pos, 5) == []


async def test_nearest_in_a_scene_finds_only_what_the_character_witnessed(store: Store, keeps_vectors, ann, mira):
    aki = await store.characters.ensure_character("Aki")
    scene = (await store.conversations.conversation("telegram", "-100", None, mira, True)).id
    await store.presence.bring_in(scene, [mira])
    (secret,) = await say(store, scene, ann, "the key is under the heron stone")
    await store.presence.bring_in(scene, [aki])
    seen, window = await say(store, scene, ann, "a heron flew by", "now")
    await store.vectors.save("embedder-1", [(m.id, m.content, v) for m, v in ((secret, NORTH), (seen, NORTHEAST))])
    assert await store.vectors.nearest(scene, NORTH, window.pos, 5, seen_by=aki) == [seen.pos]  # SPEC 22
    assert await store.vectors.nearest(scene, NORTH, window.pos, 5, seen_by=mira) == [secret.pos, seen.pos]
