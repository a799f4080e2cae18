"""Versioned schema migrations for the SQLite store, applied in order at start-up (in one
transaction, so processes starting together are safe).

`PRAGMA user_version` holds the number of migrations applied. A migration is never edited once
released: a change to the schema is a new entry at the end of MIGRATIONS.
"""

from __future__ import annotations

from storage.sql.migrations import (
    ALBUMS,
    CHECKINS,
    HARDENING_II,
    HARDENING_III,
    HARDENING_IV,
    HARDENING_VI,
    INTERRUPTED_BY_CONVERSATION,
    ONE_INDEX_A_QUESTION,
    OWN_SUMMARY_GENERATIONS,
    PAGES,
    PERSONAS_AND_BUDGETS,
    PICTURES,
    SCENES_FINISH,
    SCENES_JOIN,
    SCENES_MOVE,
    SPOKEN_COLUMN,
    STREAMED_WITNESSES,
    TURNS_INDEXED,
    WHO_SAID_IT,
    WITNESSES,
    MEMORY_HISTORY_INDEXES,
    memory_history,
    memory_history_table,
    reminders,
)

# The triggers that keep the full-text index (migration 9) and the messages waiting for a vector
# (migration 10) in step with the messages table; made again with it (migration 30).
MESSAGES_FTS_TRIGGERS = """
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, conversation_id, content) VALUES (new.id, new.conversation_id, new.content);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
    WHEN old.id >= (SELECT older_than_id FROM recall_backfill) OR old.id <= (SELECT done_up_to_id FROM recall_backfill)
    BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, conversation_id, content)
        VALUES ('delete', old.id, old.conversation_id, old.content);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages
    WHEN old.id >= (SELECT older_than_id FROM recall_backfill) OR old.id <= (SELECT done_up_to_id FROM recall_backfill)
    BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, conversation_id, content)
        VALUES ('delete', old.id, old.conversation_id, old.content);
        INSERT INTO messages_fts (rowid, conversation_id, content) VALUES (new.id, new.conversation_id, new.content);
    END;
"""
MESSAGE_VECTOR_TRIGGERS = """
    CREATE TRIGGER vectors_new AFTER INSERT ON messages WHEN EXISTS (SELECT 1 FROM vector_model) BEGIN
        INSERT OR IGNORE INTO vectors_waiting (message_id) VALUES (new.id);
    END;
    CREATE TRIGGER vectors_edited AFTER UPDATE OF content ON messages WHEN EXISTS (SELECT 1 FROM vector_model)
    BEGIN
        DELETE FROM message_vectors WHERE message_id = new.id;
        INSERT OR IGNORE INTO vectors_waiting (message_id) VALUES (new.id);
    END;
"""

# A migration that rebuilds a table starts so: it runs in a transaction of its own with foreign
# keys off, as SQLite's procedure for it asks (sqlite.org/lang_altertable.html: make the new
# table, copy, drop the old, rename the new), and they are checked before it commits.
REBUILD = "-- rebuilds a table: foreign keys off\n"

# SQLite gives a new row the largest id plus one, so once the newest message or turn is deleted
# (a message deleted on the platform takes its turn along; a reply that never showed goes), the
# next one got its id again, while a reply in progress still held it: that reply was stored as
# the new turn's. A reminder sent or cancelled gave its id to the next one, which the first's
# stale Cancel button then cancelled. A person or a one-to-one conversation gone with /forgetme
# gave its id to the next one made, maybe someone else's, while work for the forgotten one
# (a memory tool's write, a summary being written) still held it. AUTOINCREMENT never gives an
# id twice, as PostgreSQL's identity columns never do. These tables are made anew so, with
# their indexes and triggers.
MESSAGE_COLUMNS = ("id, conversation_id, pos, role, person_id, speaker_name, content, tokens, platform_message_id, "
                   "created_at, character_id, spoken")
TURN_COLUMNS = ("id, conversation_id, person_id, user_message_id, reply_message_id, status, receipt, created_at, "
                "partial_message_id, holder, kind, character_id, shown, hold_tokens")
PERSON_COLUMNS = "id, created_at, persona, persona_tokens, time_zone"
CONVERSATION_COLUMNS = ("id, platform, chat_id, thread_id, character_id, is_shared, created_at, summarized_pos, "
                        "summary_generation, summary_failures, summary_retry_at, last_pos, heard_at")
REMINDER_COLUMNS = ("id, person_id, character_id, conversation_id, turn_id, due_at, zone, words, repeat, created_at, "
                    "sending, next_due_at, letter, letter_receipt, attempts, retry_at, at_clock, asked_by")
ONE_ID_ONCE = REBUILD + f"""
    CREATE TABLE persons_once (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at      REAL NOT NULL,
        persona         TEXT,
        persona_tokens  INTEGER NOT NULL DEFAULT 0,
        time_zone       TEXT
    );
    INSERT INTO persons_once ({PERSON_COLUMNS}) SELECT {PERSON_COLUMNS} FROM persons;
    DROP TABLE persons;
    ALTER TABLE persons_once RENAME TO persons;
    CREATE TABLE conversations_once (
        id                  INTEGER PRIMARY KEY AUTOINCREMENT,
        platform            TEXT NOT NULL,
        chat_id             TEXT NOT NULL,
        thread_id           TEXT NOT NULL DEFAULT '',
        character_id        INTEGER NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
        is_shared           INTEGER NOT NULL,
        created_at          REAL NOT NULL,
        summarized_pos      INTEGER NOT NULL DEFAULT 0,
        summary_generation  INTEGER NOT NULL DEFAULT 0,
        summary_failures    INTEGER NOT NULL DEFAULT 0,
        summary_retry_at    REAL,
        last_pos            INTEGER NOT NULL DEFAULT 0,
        heard_at            REAL,
        UNIQUE (platform, chat_id, thread_id, character_id)
    );
    INSERT INTO conversations_once ({CONVERSATION_COLUMNS}) SELECT {CONVERSATION_COLUMNS} FROM conversations;
    DROP TABLE conversations;
    ALTER TABLE conversations_once RENAME TO conversations;
    CREATE INDEX conversations_summary_retry ON conversations(summary_retry_at) WHERE summary_retry_at IS NOT NULL;
    CREATE UNIQUE INDEX conversations_scene ON conversations(platform, chat_id, thread_id) WHERE is_shared;
    CREATE TABLE messages_once (
        id                   INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id      INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        pos                  INTEGER NOT NULL,
        role                 TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        person_id            INTEGER REFERENCES persons(id) ON DELETE SET NULL,
        speaker_name         TEXT NOT NULL,
        content              TEXT NOT NULL,
        tokens               INTEGER NOT NULL,
        platform_message_id  TEXT,
        created_at           REAL NOT NULL,
        character_id         BIGINT,
        spoken               BOOLEAN NOT NULL DEFAULT false
    );
    INSERT INTO messages_once ({MESSAGE_COLUMNS}) SELECT {MESSAGE_COLUMNS} FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_once RENAME TO messages;
    CREATE INDEX messages_window ON messages(conversation_id, pos);
    CREATE INDEX messages_platform ON messages(conversation_id, platform_message_id);
    CREATE INDEX messages_person ON messages(person_id);
    CREATE UNIQUE INDEX messages_user_platform ON messages(conversation_id, platform_message_id)
        WHERE role = 'user' AND platform_message_id IS NOT NULL;
{MESSAGES_FTS_TRIGGERS}{MESSAGE_VECTOR_TRIGGERS}    CREATE TABLE turns_once (
        id                  INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id     INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        person_id           INTEGER REFERENCES persons(id) ON DELETE CASCADE,
        user_message_id     INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        reply_message_id    INTEGER REFERENCES messages(id) ON DELETE SET NULL,
        status              TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'replaced')),
        receipt             TEXT,
        created_at          REAL NOT NULL,
        partial_message_id  TEXT,
        holder              TEXT,
        kind                TEXT NOT NULL DEFAULT 'reply',
        character_id        BIGINT,
        shown               BOOLEAN NOT NULL DEFAULT true,
        hold_tokens         BIGINT NOT NULL DEFAULT 0
    );
    INSERT INTO turns_once ({TURN_COLUMNS}) SELECT {TURN_COLUMNS} FROM turns;
    DROP TABLE turns;
    ALTER TABLE turns_once RENAME TO turns;
    CREATE INDEX turns_conversation ON turns(conversation_id, status, id);
    CREATE INDEX turns_person ON turns(person_id);
    CREATE INDEX turns_character ON turns(conversation_id, character_id, status, id);
    CREATE INDEX turns_running_by_person ON turns(person_id) WHERE status = 'running';
    CREATE INDEX turns_user_message ON turns(user_message_id);
    CREATE INDEX turns_reply_message ON turns(reply_message_id);
    CREATE INDEX turns_unshown_here ON turns(conversation_id) WHERE NOT shown;
    CREATE TABLE reminders_once (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        person_id        BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        character_id     BIGINT NOT NULL,
        conversation_id  BIGINT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn_id          BIGINT,
        due_at           DOUBLE PRECISION NOT NULL,
        zone             TEXT NOT NULL,
        words            TEXT NOT NULL,
        repeat           TEXT NOT NULL,      -- once | daily | weekly
        created_at       DOUBLE PRECISION NOT NULL,
        sending          BIGINT,
        next_due_at      DOUBLE PRECISION,
        letter           TEXT,
        letter_receipt   TEXT,
        attempts         INTEGER NOT NULL DEFAULT 0,
        retry_at         DOUBLE PRECISION,
        at_clock         TEXT,
        asked_by         TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO reminders_once ({REMINDER_COLUMNS}) SELECT {REMINDER_COLUMNS} FROM reminders;
    DROP TABLE reminders;
    ALTER TABLE reminders_once RENAME TO reminders;
    CREATE INDEX reminders_due ON reminders(character_id, due_at) WHERE sending IS NULL;
    CREATE INDEX reminders_of_person ON reminders(person_id, due_at);
    CREATE INDEX reminders_of_turn ON reminders(turn_id);
"""

# Migration 30 left three tables that give an id again once their newest row is deleted. A
# character removed from the config gave its id to the next one added, which then took the
# removed one's lines in a scene (they name their character by id) for its own. A summary entry
# that a cancelled rebuild or a /forgetme took away gave its id to the next entry, which a stale
# `/memory summary edit <id>` then changed. A change to a memory that the upkeep forgot, or that
# went with its turn, gave its id to the next change, which a page still open could then undo.
# They are made anew with AUTOINCREMENT, as ONE_ID_ONCE made the others.
CHARACTER_COLUMNS = "id, name, created_at"
SUMMARY_COLUMNS = "id, conversation_id, generation, tier, content, tokens, first_pos, last_pos, edited, created_at, seen_by"
CHANGE_COLUMNS = "id, person_id, memory_id, turn_id, conversation_id, action, before, after, at, undone"
THE_REST_ONCE = REBUILD + f"""
    CREATE TABLE characters_once (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        name        TEXT NOT NULL UNIQUE COLLATE NOCASE,
        created_at  REAL NOT NULL
    );
    INSERT INTO characters_once ({CHARACTER_COLUMNS}) SELECT {CHARACTER_COLUMNS} FROM characters;
    DROP TABLE characters;
    ALTER TABLE characters_once RENAME TO characters;
    CREATE TABLE summaries_once (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id  INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        generation       INTEGER NOT NULL,
        tier             TEXT NOT NULL CHECK (tier IN ('recent', 'merged', 'long_term')),
        content          TEXT NOT NULL,
        tokens           INTEGER NOT NULL,
        first_pos        INTEGER NOT NULL,
        last_pos         INTEGER NOT NULL,
        edited           INTEGER NOT NULL DEFAULT 0,
        created_at       REAL NOT NULL,
        seen_by          BIGINT
    );
    INSERT INTO summaries_once ({SUMMARY_COLUMNS}) SELECT {SUMMARY_COLUMNS} FROM summaries;
    DROP TABLE summaries;
    ALTER TABLE summaries_once RENAME TO summaries;
    CREATE INDEX summaries_conversation ON summaries(conversation_id, generation, tier, first_pos);
{memory_history_table("memory_history_once", "INTEGER PRIMARY KEY AUTOINCREMENT")}
    INSERT INTO memory_history_once ({CHANGE_COLUMNS}) SELECT {CHANGE_COLUMNS} FROM memory_history;
    DROP TABLE memory_history;
    ALTER TABLE memory_history_once RENAME TO memory_history;{MEMORY_HISTORY_INDEXES}
"""

# a message the full-text index holds: stored since the index, or reached by its backfill
INDEXED = ("(m.id >= (SELECT older_than_id FROM recall_backfill) "
           "OR m.id <= (SELECT done_up_to_id FROM recall_backfill))")

MIGRATIONS: list[str] = [
    # 1 — people, characters, conversations, messages, turns, saved memories and their journal.
    """
    CREATE TABLE persons (
        id          INTEGER PRIMARY KEY,
        created_at  REAL NOT NULL
    );
    CREATE TABLE identities (
        platform    TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        person_id   INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        PRIMARY KEY (platform, user_id)
    );
    CREATE INDEX identities_person ON identities(person_id);

    CREATE TABLE characters (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL UNIQUE COLLATE NOCASE,
        created_at  REAL NOT NULL
    );

    CREATE TABLE conversations (
        id            INTEGER PRIMARY KEY,
        platform      TEXT NOT NULL,
        chat_id       TEXT NOT NULL,
        thread_id     TEXT NOT NULL DEFAULT '',
        character_id  INTEGER NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
        is_shared     INTEGER NOT NULL,
        created_at    REAL NOT NULL,
        UNIQUE (platform, chat_id, thread_id, character_id)
    );

    -- pos orders a conversation: a person's message at 2*id, the reply to it at 2*id + 1,
    -- so a reply written after a later message arrived still follows the message it answers.
    CREATE TABLE messages (
        id                   INTEGER PRIMARY KEY,
        conversation_id      INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        pos                  INTEGER NOT NULL,
        role                 TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        person_id            INTEGER REFERENCES persons(id) ON DELETE SET NULL,
        speaker_name         TEXT NOT NULL,
        content              TEXT NOT NULL,
        tokens               INTEGER NOT NULL,
        platform_message_id  TEXT,
        created_at           REAL NOT NULL
    );
    CREATE INDEX messages_window ON messages(conversation_id, pos);
    CREATE INDEX messages_platform ON messages(conversation_id, platform_message_id);
    CREATE INDEX messages_person ON messages(person_id);

    CREATE TABLE turns (
        id                INTEGER PRIMARY KEY,
        conversation_id   INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        person_id         INTEGER REFERENCES persons(id) ON DELETE CASCADE,
        user_message_id   INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        reply_message_id  INTEGER REFERENCES messages(id) ON DELETE SET NULL,
        status            TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'replaced')),
        receipt           TEXT,
        created_at        REAL NOT NULL
    );
    CREATE INDEX turns_conversation ON turns(conversation_id, status, id);
    CREATE INDEX turns_person ON turns(person_id);

    -- character_id NULL is the global scope; otherwise the character scope of that character.
    CREATE TABLE memories (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        person_id     INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        character_id  INTEGER REFERENCES characters(id),
        content       TEXT NOT NULL,
        tokens        INTEGER NOT NULL,
        pinned        INTEGER NOT NULL DEFAULT 0,
        source        TEXT NOT NULL,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL
    );
    CREATE INDEX memories_owner ON memories(person_id, character_id, pinned, updated_at);

    -- What each turn's tools changed, so regenerate (or a failed turn) can undo it.
    CREATE TABLE memory_journal (
        id         INTEGER PRIMARY KEY,
        turn_id    INTEGER NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
        memory_id  INTEGER NOT NULL,
        action     TEXT NOT NULL CHECK (action IN ('add', 'update', 'delete')),
        before     TEXT,
        undone     INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX memory_journal_turn ON memory_journal(turn_id);

    CREATE TABLE person_settings (
        person_id     INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        character_id  INTEGER NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
        learn         INTEGER NOT NULL,
        PRIMARY KEY (person_id, character_id)
    );

    CREATE TABLE link_codes (
        code        TEXT PRIMARY KEY,
        person_id   INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        expires_at  REAL NOT NULL
    );
    CREATE INDEX link_codes_person ON link_codes(person_id);
    """,
    # 2 — the conversation summary in three tiers, rebuilds, drafts, selections, maintenance.
    """
    -- Messages at or below summarized_pos are covered by the live summary generation.
    ALTER TABLE conversations ADD COLUMN summarized_pos INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN summary_generation INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN summary_failures INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN summary_retry_at REAL;
    CREATE INDEX conversations_summary_retry ON conversations(summary_retry_at)
        WHERE summary_retry_at IS NOT NULL;

    -- tier: recent | merged | long_term. A rebuild writes the next generation, which is
    -- invisible until it is swapped in.
    CREATE TABLE summaries (
        id               INTEGER PRIMARY KEY,
        conversation_id  INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        generation       INTEGER NOT NULL,
        tier             TEXT NOT NULL CHECK (tier IN ('recent', 'merged', 'long_term')),
        content          TEXT NOT NULL,
        tokens           INTEGER NOT NULL,
        first_pos        INTEGER NOT NULL,
        last_pos         INTEGER NOT NULL,
        edited           INTEGER NOT NULL DEFAULT 0,
        created_at       REAL NOT NULL
    );
    CREATE INDEX summaries_conversation ON summaries(conversation_id, generation, tier, first_pos);

    CREATE TABLE rebuilds (
        conversation_id  INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        person_id        INTEGER REFERENCES persons(id) ON DELETE SET NULL,
        generation       INTEGER NOT NULL,
        progress_pos     INTEGER NOT NULL DEFAULT 0,
        status           TEXT NOT NULL CHECK (status IN ('running', 'failed')),
        error            TEXT,
        started_at       REAL NOT NULL
    );

    -- Memories drafted by the AI, waiting for the person to keep some.
    CREATE TABLE drafts (
        id          INTEGER PRIMARY KEY,
        person_id   INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        kind        TEXT NOT NULL CHECK (kind IN ('generate', 'save')),
        items       TEXT NOT NULL,
        created_at  REAL NOT NULL
    );
    CREATE INDEX drafts_person ON drafts(person_id);

    -- Messages a person picked for Save from conversation.
    CREATE TABLE selections (
        person_id        INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        conversation_id  INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        message_ids      TEXT NOT NULL,
        PRIMARY KEY (person_id, conversation_id)
    );

    CREATE TABLE meta (
        key    TEXT PRIMARY KEY,
        value  TEXT NOT NULL
    );
    """,
    # 3 — a reply split over several platform messages: the ids of its parts after the first
    # (the first is messages.platform_message_id), so "Remember this" works on any part.
    """
    CREATE TABLE message_parts (
        conversation_id      INTEGER NOT NULL,
        platform_message_id  TEXT NOT NULL,
        message_id           INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        PRIMARY KEY (conversation_id, platform_message_id)
    ) WITHOUT ROWID;
    CREATE INDEX message_parts_message ON message_parts(message_id);
    """,
    # 4 — crash recovery and safer linking: where a running turn's reply shows while it streams,
    # the turns a crash cut off (waiting for their adapter), the platform a link code was made
    # on, and wrong link codes (5 in 10 minutes pause /link).
    """
    ALTER TABLE turns ADD COLUMN partial_message_id TEXT;
    CREATE TABLE interrupted_turns (
        turn_id  INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE
    );
    ALTER TABLE link_codes ADD COLUMN platform TEXT NOT NULL DEFAULT '';
    CREATE TABLE link_failures (
        person_id  INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        at         REAL NOT NULL
    );
    CREATE INDEX link_failures_person ON link_failures(person_id, at);
    """,
    # 5 — correctness in the database, not in one process: leases that say who answers a
    # conversation now and who runs a piece of background work, and which process runs a turn
    # (so a start-up recovers only the turns of processes that are gone).
    """
    CREATE TABLE leases (
        name        TEXT PRIMARY KEY,
        holder      TEXT NOT NULL,
        expires_at  REAL NOT NULL
    );
    ALTER TABLE turns ADD COLUMN holder TEXT;
    CREATE INDEX turns_running ON turns(status) WHERE status = 'running';
    """,
    # 6 — draft ids are never used twice: a stale "Keep" button must not keep a newer draft.
    # (Drafts wait minutes for a person; the few pending at the upgrade are dropped.)
    """
    DROP TABLE drafts;
    CREATE TABLE drafts (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        person_id   INTEGER NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        kind        TEXT NOT NULL CHECK (kind IN ('generate', 'save')),
        items       TEXT NOT NULL,
        created_at  REAL NOT NULL
    );
    CREATE INDEX drafts_person ON drafts(person_id);
    """,
    # 7 — the line of a conversation's waiting turns: turns start in the order their messages were
    # queued, in every process sharing the file.
    """
    CREATE TABLE turn_queue (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id  INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        person_id        INTEGER REFERENCES persons(id) ON DELETE CASCADE,
        user_message_id  INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        holder           TEXT NOT NULL,
        queued_at        REAL NOT NULL
    );
    CREATE INDEX turn_queue_conversation ON turn_queue(conversation_id, id);
    """,
    # 8 — where a private answer's buttons act: a /memory answer sent to a person's DM from a
    # group acts in the group's conversation, whichever process the press reaches.
    """
    CREATE TABLE answer_origins (
        platform             TEXT NOT NULL,
        chat_id              TEXT NOT NULL,
        platform_message_id  TEXT NOT NULL,
        conversation_id      INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        created_at           REAL NOT NULL,
        PRIMARY KEY (platform, chat_id, platform_message_id)
    ) WITHOUT ROWID;
    """,
    # 9 — recall: a full-text index of every message (FTS5, Porter stemming over unicode61),
    # whose content is the messages table itself, kept in step by triggers in the transactions
    # that write. conversation_id is indexed too, so a search stays inside one conversation.
    # Messages stored before this migration are indexed by a resumable backfill
    # (Recall.index_older_messages): `recall_backfill` says how far it got; until a message is
    # indexed, its edits and deletions leave the index alone.
    """
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        conversation_id, content, content='messages', content_rowid='id', tokenize='porter unicode61'
    );
    CREATE TABLE recall_backfill (
        older_than_id  INTEGER NOT NULL,  -- messages with a smaller id predate the index
        done_up_to_id  INTEGER NOT NULL   -- those up to this id are indexed
    );
    INSERT INTO recall_backfill SELECT COALESCE(MAX(id), 0) + 1, 0 FROM messages;
    """ + MESSAGES_FTS_TRIGGERS,
    # 10 — semantic recall: the embedding model in use (`vector_model`: one row, once a model is
    # set), message vectors from it, and the messages waiting to be embedded, filled by
    # triggers while a model is in use (a new message; an edited one, which loses its vector).
    """
    CREATE TABLE vector_model (model TEXT NOT NULL);
    CREATE TABLE message_vectors (
        message_id       INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        conversation_id  INTEGER NOT NULL,
        pos              INTEGER NOT NULL,
        vector           BLOB NOT NULL     -- float16, unit length
    );
    CREATE INDEX message_vectors_place ON message_vectors(conversation_id, pos);
    CREATE TABLE vectors_waiting (
        message_id  INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE
    );
    """ + MESSAGE_VECTOR_TRIGGERS,
    # 11 — hardening II (SPEC 9, 13). A person's platform message is stored once per
    # conversation (a redelivered update finds it there; older duplicates keep their text but
    # lose the platform id). `deliveries`: platform updates already taken, by any process.
    # `model_calls`: the model calls made on someone's behalf ([limits] turns_per_minute), by
    # who (a person, or a chat for nobody in particular). The undo journal is found by memory,
    # for a person's own write to overtake it. Receipts name recalled passages by message id
    # only: the openings older receipts copied are dropped.
    HARDENING_II + """
    UPDATE turns SET receipt = json_set(receipt, '$.recall', json('[]')) WHERE receipt LIKE '%"opening"%';
    """,
    # 12 — a message's place comes from a counter on its conversation's row, as on PostgreSQL
    # (every port's SQL is written once, storage/sql/): the counter starts at the last place used.
    """
    ALTER TABLE conversations ADD COLUMN last_pos INTEGER NOT NULL DEFAULT 0;
    UPDATE conversations SET last_pos = COALESCE((SELECT MAX(pos) FROM messages WHERE conversation_id = conversations.id), 0);
    """,
    # 13 — writing first after an absence (SPEC 14): each one-to-one conversation's absence, the
    # person's choice per character, and turns that answer no message (a check-in's receipt).
    CHECKINS,
    # 14 — scenes (SPEC 15): one conversation per shared chat, a turn names its character
    # (storage/sql/migrations.py says how chats with several characters are joined). The moved
    # messages leave the full-text index under their old conversation and enter it under the
    # scene (those the index holds); their vectors follow them.
    SCENES_JOIN + f"""
    INSERT INTO messages_fts (messages_fts, rowid, conversation_id, content)
        SELECT 'delete', m.id, m.conversation_id, m.content FROM messages m
        WHERE m.id IN (SELECT id FROM scene_messages) AND {INDEXED};
    """ + SCENES_MOVE + f"""
    INSERT INTO messages_fts (rowid, conversation_id, content)
        SELECT m.id, m.conversation_id, m.content FROM messages m
        WHERE m.id IN (SELECT id FROM scene_messages) AND {INDEXED};
    UPDATE message_vectors SET conversation_id = (SELECT conversation_id FROM messages WHERE id = message_id),
                               pos = (SELECT pos FROM messages WHERE id = message_id)
        WHERE message_id IN (SELECT id FROM scene_messages);
    """ + SCENES_FINISH,
    # 15 — hardening III (SPEC 14, 15; storage/sql/migrations.py)
    "ALTER TABLE conversations ADD COLUMN heard_at REAL;" + HARDENING_III,
    # 16 — personas and budgets (SPEC 17; storage/sql/migrations.py)
    PERSONAS_AND_BUDGETS,
    # 17 — hardening IV (SPEC 17; storage/sql/migrations.py)
    HARDENING_IV,
    # 18 — who said it, by id (#49; storage/sql/migrations.py)
    WHO_SAID_IT,
    # 19 — spoken, as a column (#49; storage/sql/migrations.py)
    SPOKEN_COLUMN,
    # 20 — reminders (SPEC 19; storage/sql/migrations.py)
    reminders("INTEGER PRIMARY KEY"),
    # 21 — pictures (SPEC 20; storage/sql/migrations.py)
    PICTURES,
    # 22 — the memory page (SPEC 21; storage/sql/migrations.py)
    PAGES,
    # 23 — hardening VI: a reminder's letter kept (SPEC 19; storage/sql/migrations.py)
    HARDENING_VI,
    # 24 — who knows what: presence and witnesses (SPEC 22; storage/sql/migrations.py)
    WITNESSES,
    # 25 — every memory with its story: one history of changes (SPEC 21; storage/sql/migrations.py)
    memory_history("INTEGER PRIMARY KEY"),
    # 26 — who witnessed a streamed reply: those present when it first showed (SPEC 22; storage/sql/migrations.py)
    STREAMED_WITNESSES,
    # 27 — a turn found without reading every turn (storage/sql/migrations.py)
    TURNS_INDEXED,
    # 28 — the line finds a conversation's interrupted turns by index (storage/sql/migrations.py)
    INTERRUPTED_BY_CONVERSATION,
    # 29 — one index for one question (storage/sql/migrations.py); and `turns_running` (migration 5)
    # goes: `turns_running_by_person` holds the same running turns, and a scan of them reads it
    ONE_INDEX_A_QUESTION + "DROP INDEX turns_running;",
    # 30 — an id of a person, a conversation, a message, a turn or a reminder is never given again (ONE_ID_ONCE)
    ONE_ID_ONCE,
    # 31 — a character's own summary counts its starts (storage/sql/migrations.py)
    OWN_SUMMARY_GENERATIONS,
    # 32 — an id of a character, a summary entry or a memory's change is never given again (THE_REST_ONCE)
    THE_REST_ONCE,
    # 33 — albums, item by item: an edited caption, an item reaching another process (SPEC 7, 12; storage/sql/migrations.py)
    ALBUMS,
]
