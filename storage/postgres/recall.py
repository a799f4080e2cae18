"""Recall in PostgreSQL (the Recall port): each message's tsvector (migration 2), searched
inside one conversation and ranked by BM25 over that conversation, as on SQLite
(storage/sql/ranking.py; `ts_rank` knows nothing of how rare a word is in the conversation).

A word with more hits in the conversation than `common_above` points at nothing. Telling so
takes reading `common_above + 1` of its hits, so a word found common is kept in `common_words`
(migration 19) and not counted again: while messages are only added a word only grows more
common, and deleting or editing a message of the conversation forgets what was kept."""

from __future__ import annotations

from storage.ports import MessageRow, Recall
from storage.postgres.database import Database
from storage.rows import MESSAGE_COLUMNS, columns, messages
from storage.sql.conversations import messages_at
from storage.sql.presence import seen, seen_args
from storage.sql.ranking import ranked, rarity, searched

WORDS = "to_tsquery('english', $2)"  # the terms are words only (see bot/memory/recall.py): no query syntax
KNOWN_COMMON = -1  # a word kept in common_words: not counted


class PostgresRecall(Recall):
    def __init__(self, db: Database):
        self.db = db

    async def search(self, conversation_id: int, terms: list[str], before_pos: int, limit: int,
                     common_above: int, seen_by: int | None = None) -> list[MessageRow]:
        # each term's hits, up to one past common_above ($3); KNOWN_COMMON for a word kept as
        # common at a limit at least as high
        counts = ", ".join(
            f"CASE WHEN EXISTS (SELECT 1 FROM common_words WHERE conversation_id = $1 AND word = ${i + 4} "
            f"AND more_than >= $3) THEN {KNOWN_COMMON} ELSE (SELECT COUNT(*) FROM (SELECT 1 FROM messages "
            f"WHERE conversation_id = $1 AND search @@ to_tsquery('english', ${i + 4}) LIMIT $2) AS hits) END"
            for i in range(len(terms)))
        found = await self.db.one(f"SELECT {counts}", conversation_id, common_above + 1, common_above, *terms)
        if found_common := [term for term, hits in zip(terms, found) if hits > common_above]:
            await self.db.execute(
                "INSERT INTO common_words (conversation_id, word, more_than) SELECT $1, word, $3 "
                "FROM unnest(CAST($2 AS TEXT[])) AS word ON CONFLICT (conversation_id, word) "
                "DO UPDATE SET more_than = GREATEST(common_words.more_than, excluded.more_than)",
                conversation_id, found_common, common_above)
        telling = [(term, hits) for term, hits in zip(terms, found) if 0 < hits <= common_above]
        if not telling:
            return []
        among = searched(before_pos, [hits for _, hits in telling])
        # each message hit, its words' rarities summed (each word's query made once, not for every hit)
        each = range(5, 2 * len(telling) + 5, 2)  # each word's parameter, its rarity's the next
        words = ", ".join(f"to_tsquery('english', ${n}) AS word{n}" for n in each)
        weights = " + ".join(f"CASE WHEN search @@ word{n} THEN CAST(${n + 1} AS DOUBLE PRECISION) ELSE 0 END"
                             for n in each)
        weighed = [v for term, hits in telling for v in (term, rarity(hits, among))]
        hit = (f"WITH words AS MATERIALIZED (SELECT {words}) SELECT id, pos, tokens, {weights} AS weight "
               f"FROM messages, words WHERE conversation_id = $1 AND search @@ {WORDS} AND pos < $3"
               f"{seen(seen_by, len(weighed) + 5)}")
        rows = await self.db.all(ranked(hit, columns(MESSAGE_COLUMNS, "m"), "$4"),
                                 conversation_id, " | ".join(term for term, _ in telling), before_pos, limit, *weighed,
                                 *seen_args(seen_by))
        return messages(rows, "m_")

    async def messages_at(self, conversation_id: int, positions: list[int],
                          seen_by: int | None = None) -> list[MessageRow]:
        return await messages_at(self.db, conversation_id, positions, seen_by)

    async def index_older_messages(self, batch: int) -> int:
        await self.db.execute(
            "UPDATE messages SET search = to_tsvector('english', content) WHERE id IN "
            "(SELECT id FROM messages WHERE search IS NULL ORDER BY id LIMIT $1)", batch)
        return await self.db.value("SELECT COUNT(*) FROM messages WHERE search IS NULL")
