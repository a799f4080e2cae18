"""A migration's test on both backends: a database with nothing in it (`empty_database`), opened
first as the version before the migration opened it (`opened_before`), written as that version
wrote, then opened by this one."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import AsyncIterator

import pytest

import storage.postgres.database as postgres_database
import storage.sqlite.database as sqlite_database
from bot.memory.saved_memories import CAPS
from storage.factory import open_store
from storage.ports import Store
from tests.postgres import fresh_schema_url

BACKENDS = {"sqlite": sqlite_database, "postgresql": postgres_database}
SQLITE_URL = "sqlite:///keepsake.sqlite3"  # in the test's own folder


@contextlib.asynccontextmanager
async def empty_database(backend: str) -> AsyncIterator[str]:
    """A store URL on `backend` with nothing in it: an SQLite file in the test's folder, or a
    PostgreSQL schema of its own, dropped after."""
    if backend == "sqlite":
        yield SQLITE_URL
        return
    schemas = fresh_schema_url()
    try:
        yield await anext(schemas)
    finally:
        await anext(schemas, None)


@contextlib.asynccontextmanager
async def opened_before(url: str, migration: str, tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    """The store at `url` as the version before `migration` opened it: every migration before
    that one applied; closed after. Opened again with `open_store`, it is this version's."""
    module = sqlite_database if url == SQLITE_URL else postgres_database
    every = module.MIGRATIONS
    monkeypatch.setattr(module, "MIGRATIONS", every[:next(n for n, sql in enumerate(every) if migration in sql)])
    try:
        store = await open_store(url, CAPS, tmp_path)
    finally:
        monkeypatch.setattr(module, "MIGRATIONS", every)
    try:
        yield store
    finally:
        await store.close()
