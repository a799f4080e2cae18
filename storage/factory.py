"""`open_store(url)`: the backend a `[storage] url` names, opened and migrated.

- `sqlite:///relative/path.sqlite3`, `sqlite:////absolute/path.sqlite3` — the embedded default.
  Query parameters are SQLite URI parameters (`?mode=ro` opens the file read-only).
- `postgresql://user:password@host:5432/database` — one database for any number of processes.
  `?schema=name` keeps Keepsake's tables in that schema (created if missing); other query
  parameters are asyncpg's. The password may come apart from the URL (`[storage] password_env`).

A URL is printed only through `masked` (SPEC 9: secrets never appear in output), and a database
that cannot be reached is one line naming it, never a traceback.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from storage.ports import MemoryCaps, Store

SCHEMES = ("sqlite", "postgresql", "postgres")


class StorageURLError(ValueError):
    """A storage URL this program cannot open."""


def masked(url: str) -> str:
    """The URL with its password shown as `***`: the only way a storage URL is printed."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    user_info, host = parts.netloc.rsplit("@", 1)
    if ":" not in user_info:
        return url
    return urlunsplit(parts._replace(netloc=f"{user_info.split(':', 1)[0]}:***@{host}"))


def with_password(url: str, password: str | None) -> str:
    """The URL with `password` in it (from `[storage] password_env`); unchanged without one."""
    if not password:
        return url
    parts = urlsplit(url)
    user_info, _, host = parts.netloc.rpartition("@")
    user = user_info.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


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
        raise StorageURLError(f"{masked(url)!r}: expected a URL starting with {' or '.join(s + '://' for s in SCHEMES)}")


async def open_store(url: str, caps: MemoryCaps, base: Path = Path("."),
                     clock: Callable[[], float] = time.time, password: str | None = None,
                     backup_dir: Path | None = None) -> Store:
    """Open (and migrate) the store the URL names; relative SQLite paths are from `base`, and an
    SQLite store's daily backups go to `backup_dir` (by default beside the file). A PostgreSQL
    server that cannot be reached or refuses, or an SQLite file that cannot be opened or stays
    locked by another program past the busy timeout, raises StorageURLError (one line)."""
    check_url(url)
    if urlsplit(url).scheme != "sqlite":
        import asyncpg

        from storage.postgres import PostgresStore

        dsn, schema = postgres_dsn(with_password(url, password))
        try:
            return await PostgresStore.open(dsn, schema, caps, clock)
        except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as problem:
            reason = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
            raise StorageURLError(f"cannot open the database at {masked(url)}: {reason}") from None
    from storage.sqlite import SQLiteStore

    path, options = sqlite_path(url, base)
    try:
        return await SQLiteStore.open(path, caps, options, clock, backup_dir)
    except (OSError, sqlite3.Error) as problem:
        raise StorageURLError(f"cannot open the database at {masked(url)}: {problem}") from None
