"""Recall in SQLite (the Recall port): the FTS5 index of messages (migration 9), searched
inside one conversation and ranked by BM25 over that conversation.

FTS5's own `bm25()` is not used: it weighs every phrase of the query by its rarity in the whole
index, and the phrase that keeps a search inside one conversation matches every message of it,
so ranking would read the conversation's whole list of messages on every turn (3 ms at 100k
messages). Each word's hits in the conversation are few (at most `common_above`, or the word
is left out), and they are all ranking needs (storage/sql/ranking.py, as on PostgreSQL).

Its two reads are bounded (each word counts at most `common_above` + 1 hits). They run inline, as
a turn's reads by key (`db.short`), when the turn searching is the only one this process answers
(`crowded` says whether others run), and on the reading connection's thread when others do: inline,
a lone turn takes 1.3-2.4 ms less at p50 (measured turn by turn, the two ways interleaved), but
with 200 conversations at once one process made 12 % fewer turns a second and their p99 rose by
60 % (docs/processes.md section 8): on the thread, SQLite searches beside the event loop's work
for the other turns."""

from __future__ import annotations

from typing import Callable

from storage.ports import MessageRow, Recall
from storage.rows import MESSAGE_COLUMNS, columns, messages
from storage.sql.conversations import messages_at
from storage.sql.presence import seen, seen_args
from storage.sql.ranking import ranked, rarity, searched
from storage.sqlite.database import Database


def phrase(term: str) -> str:
    """A term as an FTS5 string: quoted, so nothing in people's text is read as query syntax."""
    return '"' + term.replace('"', '""') + '"'


class SQLiteRecall(Recall):
    def __init__(self, db: Database, crowded: Callable[[], bool] = lambda: True):
        self.db = db
        self.crowded = crowded  # whether other turns of this process run now (unknown: they may)

    async def search(self, conversation_id: int, terms: list[str], before_pos: int, limit: int,
                     common_above: int, seen_by: int | None = None) -> list[MessageRow]:
        # conversation_id is an indexed column of the FTS table: the match stays in the conversation.
        inside = f'conversation_id : "{int(conversation_id)}"'
        queries = [f"{inside} AND content : {phrase(term)}" for term in terms]
        count = "(SELECT COUNT(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ${} LIMIT $1))"
        reads = self.db if self.crowded() else self.db.short
        found = await reads.one(f"SELECT {', '.join(count.format(n) for n in range(2, len(terms) + 2))}",
                               common_above + 1, *queries)
        telling = [(query, hits) for query, hits in zip(queries, found) if 0 < hits <= common_above]
        if not telling:
            return []
        among = searched(before_pos, [hits for _, hits in telling])
        hits_of = " UNION ALL ".join(f"SELECT rowid AS id, ${n} AS weight FROM messages_fts WHERE messages_fts MATCH ${n + 1}"
                                     for n in range(2, 2 * len(telling) + 2, 2))
        weighed = [v for query, hits in telling for v in (rarity(hits, among), query)]
        last = len(weighed) + 2  # the parameters after the hits' own
        # each message hit, its words' rarities summed
        hit = (f"SELECT m.id, m.pos, m.tokens, SUM(h.weight) AS weight FROM ({hits_of}) h JOIN messages m ON m.id = h.id "
               f"WHERE m.pos < $1{seen(seen_by, last + 1, 'm.id')} GROUP BY m.id")
        rows = await reads.all(ranked(hit, columns(MESSAGE_COLUMNS, "m"), f"${last}"),
                               before_pos, *weighed, limit, *seen_args(seen_by))
        return messages(rows, "m_")

    async def messages_at(self, conversation_id: int, positions: list[int],
                          seen_by: int | None = None) -> list[MessageRow]:
        return await messages_at(self.db, conversation_id, positions, seen_by)

    async def index_older_messages(self, batch: int) -> int:
        async with self.db.transaction() as tx:
            older_than, done = await tx.one("SELECT older_than_id, done_up_to_id FROM recall_backfill")
            last = await tx.value("SELECT MAX(id) FROM (SELECT id FROM messages WHERE id > $1 AND id < $2 "
                                  "ORDER BY id LIMIT $3)", done, older_than, batch)
            if last is not None:
                await tx.execute("INSERT INTO messages_fts (rowid, conversation_id, content) "
                                 "SELECT id, conversation_id, content FROM messages WHERE id > $1 AND id <= $2", done, last)
                done = last
            else:
                done = older_than - 1  # nothing older is left (the rest was deleted)
            await tx.execute("UPDATE recall_backfill SET done_up_to_id = $1", done)
            return await tx.value("SELECT COUNT(*) FROM messages WHERE id > $1 AND id < $2", done, older_than)
