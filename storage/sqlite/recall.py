"""Recall in SQLite (the Recall port): the FTS5 index of messages (migration 9), searched
inside one conversation and ranked by BM25 over that conversation.

FTS5's own `bm25()` is not used: it weighs every phrase of the query by its rarity in the whole
index, and the phrase that keeps a search inside one conversation matches every message of it,
so ranking would read the conversation's whole list of messages on every turn (3 ms at 100k
messages). Each word's hits in the conversation are few (at most `common_above`, or the word
is left out), and they are all ranking needs: BM25 with each word counted once (a chat message
seldom repeats one), its rarity taken in this conversation, and the message's length in
tokens against the hits' average. The ranking is done in the query (`BM25`), so only the best
`limit` messages are read out of it, not every hit (262 a turn in bench.turn_overhead).

Its two reads go to the reading connection's thread, not inline as a turn's reads by key (`db.short`),
though they are bounded (each word counts at most `common_above` + 1 hits): inline, a lone turn
took 1-2 ms less at p50, but with 200 conversations at once one process made 12 % fewer turns a
second and their p99 rose by 60 % (docs/processes.md section 8): on the thread, SQLite searches
beside the event loop's own work."""

from __future__ import annotations

import math

from storage.ports import MessageRow, Recall
from storage.rows import MESSAGE_COLUMNS, columns, messages
from storage.sql.conversations import messages_at
from storage.sql.presence import seen, seen_args
from storage.sqlite.database import Database

K1 = 1.2  # BM25's usual constant: how soon a word's weight saturates
B = 0.5  # how much a long message is discounted: less than BM25's usual 0.75, which cost evidence
# on real chats (LoCoMo in bench.dialogues, #39)


def phrase(term: str) -> str:
    """A term as an FTS5 string: quoted, so nothing in people's text is read as query syntax."""
    return '"' + term.replace('"', '""') + '"'


def rarity(hits: int, searched: int) -> float:
    """BM25's inverse document frequency (the form that never goes below zero)."""
    return math.log(1 + (searched - hits + 0.5) / (hits + 0.5))


# A hit's BM25 score, each of its words counted once: the sum of their rarities (`weight`),
# discounted for a message longer than the hits' average (`average`; 1 if every hit is empty).
BM25 = f"weight * {K1 + 1!r} / (1 + {K1!r} * ({1 - B!r} + {B!r} * tokens / average))"


class SQLiteRecall(Recall):
    def __init__(self, db: Database):
        self.db = db

    async def search(self, conversation_id: int, terms: list[str], before_pos: int, limit: int,
                     common_above: int, seen_by: int | None = None) -> list[MessageRow]:
        # conversation_id is an indexed column of the FTS table: the match stays in the conversation.
        inside = f'conversation_id : "{int(conversation_id)}"'
        queries = [f"{inside} AND content : {phrase(term)}" for term in terms]
        count = "(SELECT COUNT(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ${} LIMIT $1))"
        found = await self.db.one(f"SELECT {', '.join(count.format(n) for n in range(2, len(terms) + 2))}",
                                  common_above + 1, *queries)
        telling = [(query, hits) for query, hits in zip(queries, found) if 0 < hits <= common_above]
        if not telling:
            return []
        # Every place before before_pos holds at most one message: the number searched, near enough.
        searched = max(before_pos, max(hits for _, hits in telling))
        hits_of = " UNION ALL ".join(f"SELECT rowid AS id, ${n} AS weight FROM messages_fts WHERE messages_fts MATCH ${n + 1}"
                                     for n in range(2, 2 * len(telling) + 2, 2))
        weighed = [v for query, hits in telling for v in (rarity(hits, searched), query)]
        last = len(weighed) + 2  # the parameters after the hits' own
        # Each message hit, its words' rarities summed; then scored against the hits' average.
        # Among equal matches the older goes first: the summary kept less of it than of a newer one.
        rows = await self.db.all(
            f"WITH hit AS (SELECT m.id, m.tokens, SUM(h.weight) AS weight FROM ({hits_of}) h "
            f"JOIN messages m ON m.id = h.id WHERE m.pos < $1{seen(seen_by, last + 1, 'm.id')} GROUP BY m.id), "
            f"scored AS (SELECT id, {BM25} AS score FROM hit, "
            f"(SELECT COALESCE(NULLIF(AVG(tokens), 0), 1) AS average FROM hit)) "
            f"SELECT {columns(MESSAGE_COLUMNS, 'm')} FROM scored s JOIN messages m ON m.id = s.id "
            f"ORDER BY s.score DESC, m.id LIMIT ${last}",
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
