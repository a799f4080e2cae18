"""PostgreSQL for tests: KEEPSAKE_TEST_POSTGRES_URL names the server (CI sets it, and `.ci/run`
fails when the server does not answer). Each test gets a schema of its own, dropped after it,
so test runs (and tests) never see each other's rows. Without the variable, PostgreSQL tests
skip with one line saying so."""

from __future__ import annotations

import os
from typing import AsyncIterator

import pytest

from bench.common import throwaway_schema

ENV = "KEEPSAKE_TEST_POSTGRES_URL"
SKIP_REASON = f"PostgreSQL tests need {ENV} (e.g. postgresql://postgres@127.0.0.1:5432/test)"


def server_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        pytest.skip(SKIP_REASON)
    return url


async def fresh_schema_url() -> AsyncIterator[str]:
    """A store URL on the test server with a new, empty schema; the schema is dropped after."""
    async with throwaway_schema(server_url()) as url:
        yield url
