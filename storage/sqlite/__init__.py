"""The SQLite backend (aiosqlite): the embedded default, one file, nothing to install."""

from storage.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
