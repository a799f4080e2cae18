"""The PostgreSQL backend (asyncpg): one database shared by many processes."""

from storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
