"""Recall in SQLite (the Recall port): the FTS5 index of messages (migration 9), searched
inside one conversation, ranked by BM25."""

from __future__ import annotations

from storage.ports import MessageRow, Recall
from storage.rows import MESSAGE_COLUMNS, message, prefixed
from storage.sqlite.database import Database, fetch_one


def phrase(term: str) -> str:
    """A term as an FTS5 string: quoted, so nothing in people's text is read as query syntax."""
    return '"' + term.replace('"', '""') + '"'


class SQLiteRecall(Recall):
    def __init__(self, db: Database):
        self.db = db

    async def search(self, conversation_id: int, terms: list[str], before_pos: int, limit: int,
                     common_above: int) -> list[MessageRow]:
        # conversation_id is an indexed column of the FTS table: the match stays in the conversation.
        inside = f'conversation_id : "{int(conversation_id)}"'
        count = "(SELECT COUNT(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT ?))"
        found = await self.db.one(f"SELECT {', '.join([count] * len(terms))}", tuple(
            value for term in terms for value in (f"{inside} AND content : {phrase(term)}", common_above + 1)))
        telling = [term for term, hits in zip(terms, found) if 0 < hits <= common_above]
        if not telling:
            return []
        rows = await self.db.all(
            f"SELECT {prefixed(MESSAGE_COLUMNS, 'm')} FROM messages_fts f JOIN messages m ON m.id = f.rowid "
            "WHERE messages_fts MATCH ? AND m.pos < ? ORDER BY f.rank LIMIT ?",
            (f"{inside} AND content : ({' OR '.join(phrase(t) for t in telling)})", before_pos, limit))
        return [message(r) for r in rows]

    async def messages_at(self, conversation_id: int, positions: list[int]) -> list[MessageRow]:
        if not positions:
            return []
        marks = ", ".join("?" * len(positions))
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND pos IN ({marks}) ORDER BY pos",
            (conversation_id, *positions))
        return [message(r) for r in rows]

    async def index_older_messages(self, batch: int) -> int:
        async with self.db.write() as db:
            older_than, done = await fetch_one(db, "SELECT older_than_id, done_up_to_id FROM recall_backfill")
            last = await fetch_one(
                db, "SELECT MAX(id) FROM (SELECT id FROM messages WHERE id > ? AND id < ? ORDER BY id LIMIT ?)",
                (done, older_than, batch))
            if last[0] is not None:
                await db.execute(
                    "INSERT INTO messages_fts (rowid, conversation_id, content) "
                    "SELECT id, conversation_id, content FROM messages WHERE id > ? AND id <= ?", (done, last[0]))
                done = last[0]
            else:
                done = older_than - 1  # nothing older is left (the rest was deleted)
            await db.execute("UPDATE recall_backfill SET done_up_to_id = ?", (done,))
            (waiting,) = await fetch_one(db, "SELECT COUNT(*) FROM messages WHERE id > ? AND id < ?",
                                         (done, older_than))
        return waiting
