"""The memory page's links and sessions (the Pages port, SPEC 21), written once for every
backend. A link is spent by deleting it inside the transaction that opens the session, so two
processes opening the same link cannot both get a session."""

from __future__ import annotations

from storage.ports import PageSession, Pages
from storage.sql.database import Database


def _ids(characters: tuple[int, ...]) -> str:
    return ",".join(str(character) for character in characters)


def _characters(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


class SQLPages(Pages):
    def __init__(self, db: Database):
        self.db = db

    async def add_link(self, code_hash: str, person_id: int, characters: tuple[int, ...], expires_at: float) -> None:
        async with self.db.transaction(short=True) as tx:
            await tx.execute("DELETE FROM page_links WHERE person_id = $1 OR expires_at < $2", person_id,
                             self.db.clock())
            await tx.execute("INSERT INTO page_links (code_hash, person_id, characters, expires_at) "
                             "VALUES ($1, $2, $3, $4)", code_hash, person_id, _ids(characters), expires_at)

    async def exchange(self, code_hash: str, now: float, token_hash: str, csrf: str,
                       session_expires_at: float) -> PageSession | None:
        async with self.db.transaction(short=True) as tx:
            link = await tx.one("DELETE FROM page_links WHERE code_hash = $1 RETURNING person_id, characters, "
                                "expires_at", code_hash)
            if link is None or link["expires_at"] < now:
                return None
            await tx.execute("DELETE FROM page_sessions WHERE expires_at < $1", now)
            await tx.execute("INSERT INTO page_sessions (token_hash, person_id, characters, csrf, expires_at) "
                             "VALUES ($1, $2, $3, $4, $5)", token_hash, link["person_id"], link["characters"], csrf,
                             session_expires_at)
            return PageSession(link["person_id"], _characters(link["characters"]), csrf, session_expires_at)

    async def session(self, token_hash: str, now: float) -> PageSession | None:
        row = await self.db.one("SELECT person_id, characters, csrf, expires_at FROM page_sessions "
                                "WHERE token_hash = $1 AND expires_at >= $2", token_hash, now)
        if row is None:
            return None
        return PageSession(row["person_id"], _characters(row["characters"]), row["csrf"], row["expires_at"])

    async def end_session(self, token_hash: str) -> None:
        await self.db.execute("DELETE FROM page_sessions WHERE token_hash = $1", token_hash)

    async def add_failure(self, address: str, at: float, since: float) -> int:
        async with self.db.transaction(short=True) as tx:
            await self.db.dialect.serialize(tx, f"page-failures:{address}")
            await tx.execute("INSERT INTO page_failures (address, at) VALUES ($1, $2)", address, at)
            return await tx.value("SELECT COUNT(*) FROM page_failures WHERE address = $1 AND at >= $2",
                                  address, since)
