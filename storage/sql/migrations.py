"""Migration text both backends run as it is (each backend's list, storage/*/migrations.py,
includes it at its place). Types are written so both read them: `DOUBLE PRECISION` is REAL to
SQLite, and `NOT undone` is a boolean test on either."""

HARDENING_II = """
    UPDATE messages SET platform_message_id = NULL
    WHERE role = 'user' AND platform_message_id IS NOT NULL AND id NOT IN (
        SELECT MIN(id) FROM messages WHERE role = 'user' AND platform_message_id IS NOT NULL
        GROUP BY conversation_id, platform_message_id);
    CREATE UNIQUE INDEX messages_user_platform ON messages(conversation_id, platform_message_id)
        WHERE role = 'user' AND platform_message_id IS NOT NULL;
    CREATE TABLE deliveries (
        key      TEXT PRIMARY KEY,           -- platform:bot:update id
        seen_at  DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE model_calls (
        who  TEXT NOT NULL,                  -- person:<id> or chat:<platform>:<chat id>
        at   DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX model_calls_who ON model_calls(who, at);
    CREATE INDEX memory_journal_memory ON memory_journal(memory_id) WHERE NOT undone;
"""

CHECKINS = """
    ALTER TABLE person_settings ADD COLUMN checkins BOOLEAN NOT NULL DEFAULT true;
    ALTER TABLE turns ADD COLUMN kind TEXT NOT NULL DEFAULT 'reply';
    CREATE TABLE checkins (
        conversation_id  BIGINT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        character_id     BIGINT NOT NULL,
        platform         TEXT NOT NULL,
        person_id        BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        messages         INTEGER NOT NULL,           -- the person's messages here
        last_at          DOUBLE PRECISION NOT NULL,  -- when the person last wrote
        waiting          BOOLEAN NOT NULL,           -- a check-in may follow this absence
        sent_at          DOUBLE PRECISION            -- the last check-in
    );
    CREATE INDEX checkins_due ON checkins(character_id, platform, last_at) WHERE waiting;
"""
