"""A store on one database: every port written once (storage/sql/), the backend's own recall and
vectors, and the upkeep every backend shares."""

from __future__ import annotations

from storage.ports import ANSWER_ORIGINS_KEPT_S, DELIVERIES_KEPT_S, HISTORY_KEPT_S, MemoryCaps, Recall, Store, Vectors
from storage.sql.reminders import SQLReminders
from storage.sql.checkins import SQLCheckins
from storage.sql.conversations import SQLConversations
from storage.sql.coordination import SQLCoordination
from storage.sql.database import Database
from storage.sql.drafts import SQLDrafts
from storage.sql.memories import SQLMemories
from storage.sql.pages import SQLPages
from storage.sql.people import SQLCharacters, SQLPeople
from storage.sql.presence import SQLPresence
from storage.sql.summaries import SQLSummaries
from storage.sql.turns import SQLTurns
from storage.sql.usage import SQLUsage

MODEL_CALLS_KEPT_S = 86_400  # far past any [limits] window
PAGE_ROWS_KEPT_S = 86_400  # past any link's, session's or rate limit's time (SPEC 21)


class SQLStore(Store):
    def __init__(self, db: Database, caps: MemoryCaps, holder: str, recall: Recall, vectors: Vectors):
        self.db = db
        self.people = SQLPeople(db, caps)
        self.characters = SQLCharacters(db, caps)
        self.conversations = SQLConversations(db)
        self.turns = SQLTurns(db, holder)
        self.memories = SQLMemories(db, caps)
        self.summaries = SQLSummaries(db)
        self.drafts = SQLDrafts(db)
        self.recall = recall
        self.vectors = vectors
        self.coordination = SQLCoordination(db, holder)
        self.checkins = SQLCheckins(db, holder)
        self.usage = SQLUsage(db)
        self.reminders = SQLReminders(db, holder)
        self.pages = SQLPages(db)
        self.presence = SQLPresence(db)

    async def close(self) -> None:
        await self.db.close()

    async def purge(self, now: float, retention_days: int | None) -> int:
        """What every backend's daily upkeep forgets: old answer origins, update ids and model
        calls; with a retention period, old summarized messages (never one a turn still needs).
        How many messages went."""
        await self.db.execute("DELETE FROM answer_origins WHERE created_at < $1", now - ANSWER_ORIGINS_KEPT_S)
        await self.db.execute("DELETE FROM deliveries WHERE seen_at < $1", now - DELIVERIES_KEPT_S)
        await self.db.execute("DELETE FROM model_calls WHERE at < $1", now - MODEL_CALLS_KEPT_S)
        for table, column in (("page_links", "expires_at"), ("page_sessions", "expires_at"), ("page_failures", "at")):
            await self.db.execute(f"DELETE FROM {table} WHERE {column} < $1", now - PAGE_ROWS_KEPT_S)
        # a turn's changes stay while Regenerate may still undo them (its latest reply, however old)
        await self.db.execute("DELETE FROM memory_history WHERE at < $1 AND (turn_id IS NULL OR undone)",
                              now - HISTORY_KEPT_S)
        if not retention_days:
            return 0
        # summarized by the conversation's summary, and by every own summary of a character that
        # witnessed it (SPEC 22)
        return await self.db.execute(
            "DELETE FROM messages WHERE created_at < $1 AND pos <= "
            "(SELECT summarized_pos FROM conversations c WHERE c.id = messages.conversation_id) "
            "AND NOT EXISTS (SELECT 1 FROM presence p JOIN witnesses w ON w.character_id = p.character_id "
            "AND w.message_id = messages.id WHERE p.conversation_id = messages.conversation_id AND p.own_sight "
            "AND p.summarized_pos < messages.pos) "
            "AND id NOT IN (SELECT user_message_id FROM turns WHERE status = 'running') "
            "AND id NOT IN (SELECT user_message_id FROM turn_queue)", now - retention_days * 86_400)
