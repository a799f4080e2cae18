"""PostgreSQL for tests: KEEPSAKE_TEST_POSTGRES_URL names the server (CI sets it, and `.ci/run`
fails when the server does not answer). Each test gets a schema of its own, dropped after it,
so test runs (and tests) never see each other's rows. Without the variable, PostgreSQL tests
skip with one line saying so.

Semantic recall on PostgreSQL needs the pgvector extension, which the CI server lacks:
KEEPSAKE_TEST_PGVECTOR_URL names a server that has it (`.ci/run` starts a private one where it
can: .ci/pgvector_server.sh); its tests skip, saying so, where there is none."""

from __future__ import annotations

import os
from typing import AsyncIterator

import pytest

from bench.common import throwaway_schema

ENV = "KEEPSAKE_TEST_POSTGRES_URL"
PGVECTOR_ENV = "KEEPSAKE_TEST_PGVECTOR_URL"
SKIP_REASONS = {
    ENV: f"PostgreSQL tests need {ENV} (e.g. postgresql://postgres@127.0.0.1:5432/test)",
    PGVECTOR_ENV: f"pgvector tests need {PGVECTOR_ENV}: a PostgreSQL server with the pgvector extension",
}


def server_url(env: str = ENV) -> str:
    url = os.environ.get(env)
    if not url:
        pytest.skip(SKIP_REASONS[env])
    return url


async def fresh_schema_url(env: str = ENV) -> AsyncIterator[str]:
    """A store URL on the test server (or the pgvector one) with a new, empty schema; the schema
    is dropped after."""
    async with throwaway_schema(server_url(env)) as url:
        yield url
