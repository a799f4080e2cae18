"""`open_store(url)`: the backend a `[storage] url` names, opened and migrated.

- `sqlite:///relative/path.sqlite3`, `sqlite:////absolute/path.sqlite3` — the embedded default.
  Query parameters are SQLite URI parameters (`?mode=ro` opens the file read-only).
- `postgresql://user:password@host:5432/database` — one database for any number of processes.
  `?schema=name` keeps Keepsake's tables in that schema (created if missing); other query
  parameters are asyncpg's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from storage.ports import MemoryCaps, Store

SCHEMES = ("sqlite", "postgresql", "postgres")


class StorageURLError(ValueError):
    """A storage URL this program cannot open."""


def sqlite_path(url: str, base: Path) -> tuple[Path, dict[str, str]]:
    parts = urlsplit(url)
    path = Path(parts.path[1:] if parts.path.startswith("/") else parts.path)  # sqlite:///rel, sqlite:////abs
    if not str(path):
        raise StorageURLError(f"{url!r} names no file: use sqlite:///data/keepsake.sqlite3")
    return (path if path.is_absolute() else base / path), dict(parse_qsl(parts.query))


def postgres_dsn(url: str) -> tuple[str, str | None]:
    """The asyncpg DSN, and the schema `?schema=` names (None: the server's default)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    schema = next((value for key, value in query if key == "schema"), None)
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def check_url(url: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise StorageURLError(f"{url!r}: expected a URL starting with {' or '.join(s + '://' for s in SCHEMES)}")


async def open_store(url: str, caps: MemoryCaps, base: Path = Path("."),
                     clock: Callable[[], float] = time.time) -> Store:
    """Open (and migrate) the store the URL names; relative SQLite paths are from `base`."""
    check_url(url)
    if urlsplit(url).scheme != "sqlite":
        from storage.postgres import PostgresStore

        dsn, schema = postgres_dsn(url)
        return await PostgresStore.open(dsn, schema, caps, clock)
    from storage.sqlite import SQLiteStore

    path, options = sqlite_path(url, base)
    return await SQLiteStore.open(path, caps, options, clock)
