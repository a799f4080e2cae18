"""One contract suite for every storage backend: each test runs once per backend, through the
ports only (never a backend's own connection). SQLite always; PostgreSQL where
KEEPSAKE_TEST_POSTGRES_URL names a server (CI sets it)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import pytest

from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.ports import Store
from tests.conftest import FakeClock
from tests.postgres import emptied_schema_url

BACKENDS = ["sqlite", "postgresql"]

OpenStore = Callable[[], Awaitable[Store]]


@pytest.fixture(params=BACKENDS)
async def open_backend(request, tmp_path: Path, clock: FakeClock, migrated_store: Path) -> AsyncIterator[OpenStore]:
    """Opens a store on one database; called twice, two stores (two "processes") share it."""
    opened: list[Store] = []
    schemas = emptied_schema_url() if request.param == "postgresql" else None
    url = await anext(schemas) if schemas else "sqlite:///keepsake.sqlite3"
    if not schemas:
        shutil.copyfile(migrated_store, tmp_path / "keepsake.sqlite3")  # a new store, migrated (tests/conftest.py)

    async def open_one() -> Store:
        store = await open_store(url, CAPS, tmp_path, clock)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()
    if schemas:
        await anext(schemas, None)


@pytest.fixture
async def store(open_backend: OpenStore) -> Store:
    return await open_backend()


@pytest.fixture
async def mira(store: Store) -> int:
    return await store.characters.ensure_character("Mira")


@pytest.fixture
async def ann(store: Store) -> int:
    return await store.people.person_for_identity("telegram", "501")


@pytest.fixture
async def chat(store: Store, mira: int) -> int:
    return (await store.conversations.conversation("telegram", "501", None, mira, False)).id
