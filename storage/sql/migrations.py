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

# Hardening III (SPEC 14, 15): when a person last wrote in a shared chat addressing no character
# (not stored, but it ends a scene's chain); and whether a turn's reply (or a check-in) reached the
# chat: a reply is stored unshown and marked shown when its platform confirms it, and one whose
# process died before that is withdrawn (found through the partial index).
HARDENING_III = """
    ALTER TABLE turns ADD COLUMN shown BOOLEAN NOT NULL DEFAULT true;
    CREATE INDEX turns_unshown ON turns(id) WHERE NOT shown;
"""

# Personas and budgets (SPEC 17): a person's persona (with its tokens, counted once as it is
# written) on their row; the tokens, turns and check-ins spent on their behalf by day (the day in
# [limits] timezone) and character; and the days they were told they are past their allowance.
PERSONAS_AND_BUDGETS = """
    ALTER TABLE persons ADD COLUMN persona TEXT;
    ALTER TABLE persons ADD COLUMN persona_tokens INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE usage_days (
        person_id     BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        day           TEXT NOT NULL,
        character_id  BIGINT NOT NULL,
        turns         INTEGER NOT NULL DEFAULT 0,
        tokens_in     BIGINT NOT NULL DEFAULT 0,
        tokens_out    BIGINT NOT NULL DEFAULT 0,
        checkins      INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (person_id, day, character_id)
    );
    CREATE INDEX usage_days_by_day ON usage_days(day);
    CREATE TABLE budget_notices (
        person_id  BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        day        TEXT NOT NULL,
        PRIMARY KEY (person_id, day)
    );
"""

# Hardening IV (SPEC 17). A running turn holds what it may still spend (its prompt and
# max_reply_tokens) against its person's allowance until it is spent, so a burst is judged
# against what is spent plus what running turns may spend; the running turns are found by
# person. `/forgetme` keeps the day's spend as a count against each platform id, nothing else,
# so the allowance does not start afresh on any of them; /stats counts it once (`counted`).
HARDENING_IV = """
    ALTER TABLE turns ADD COLUMN hold_tokens BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX turns_running_by_person ON turns(person_id) WHERE status = 'running';
    CREATE TABLE forgotten_spend (
        platform      TEXT NOT NULL,
        user_id       TEXT NOT NULL,
        day           TEXT NOT NULL,
        character_id  BIGINT NOT NULL,
        turns         INTEGER NOT NULL DEFAULT 0,
        tokens_in     BIGINT NOT NULL DEFAULT 0,
        tokens_out    BIGINT NOT NULL DEFAULT 0,
        counted       BOOLEAN NOT NULL DEFAULT false,   -- /stats counts one identity of a person
        PRIMARY KEY (platform, user_id, day, character_id)
    );
"""

# Who said it, by id (#49): a character's message names its character by id, not only by the
# name a prompt and a scene would match. Old rows: a reply or check-in from its turn; what no turn
# wrote (a greeting) from the character of that name, else from its conversation's character.
WHO_SAID_IT = """
    ALTER TABLE messages ADD COLUMN character_id BIGINT;
    UPDATE messages SET character_id = (SELECT t.character_id FROM turns t WHERE t.reply_message_id = messages.id)
        WHERE role = 'assistant';
    UPDATE messages SET character_id = (SELECT c.id FROM characters c WHERE c.name = messages.speaker_name)
        WHERE role = 'assistant' AND character_id IS NULL;
    UPDATE messages SET character_id = (SELECT v.character_id FROM conversations v WHERE v.id = messages.conversation_id)
        WHERE role = 'assistant' AND character_id IS NULL;
"""

# Spoken, as a column (#49): whether a person's message was a voice note is its own column, no
# longer a "🎤 " before its text; the old rows lose the mark and gain the column (shown as before).
SPOKEN_COLUMN = """
    ALTER TABLE messages ADD COLUMN spoken BOOLEAN NOT NULL DEFAULT false;
    UPDATE messages SET spoken = true, content = substr(content, 3) WHERE role = 'user' AND content LIKE '🎤 %';
"""

# Reminders (SPEC 19): a person's time zone on their row (None: `[limits] timezone`); each
# pending reminder — its moment in UTC with the zone and the words it was set with, the turn that
# set it (Regenerate takes it back), the chat it goes to. `sending`: the turn of the letter being
# sent for it (not due again meanwhile); `next_due_at`: where a daily or weekly one moves once that
# letter is shown (a one-off one goes). The due ones are found through a partial index.
def reminders(id_column: str) -> str:
    return f"""
    ALTER TABLE persons ADD COLUMN time_zone TEXT;
    CREATE TABLE reminders (
        id               {id_column},
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
        next_due_at      DOUBLE PRECISION
    );
    CREATE INDEX reminders_due ON reminders(character_id, due_at) WHERE sending IS NULL;
    CREATE INDEX reminders_of_person ON reminders(person_id, due_at);
    CREATE INDEX reminders_of_turn ON reminders(turn_id);
    """


# Pictures (SPEC 20): how many pictures each person got, by day and character, beside their tokens.
PICTURES = """
    ALTER TABLE usage_days ADD COLUMN pictures INTEGER NOT NULL DEFAULT 0;
"""

# Scenes (SPEC 15). A turn names the character that answers (a scene's characters share one
# conversation); the turns stored before say their conversation's character. Then every chat
# keeps one shared conversation — its scene: where characters of the deployment had a
# conversation each in one chat, the most recently active one becomes the scene and the others
# are joined into it. Every message is kept, in the order it was written, at even places, a
# reply at the odd place right after the message it answers (as new messages are placed); a
# person's message both characters stored stays once; the summaries of a joined chat are
# written again from its messages (summarized_pos back to 0).
# Between SCENES_JOIN, SCENES_MOVE and SCENES_FINISH each backend moves its own index entries.
SCENES_JOIN = """
    ALTER TABLE turns ADD COLUMN character_id BIGINT;
    UPDATE turns SET character_id = (SELECT c.character_id FROM conversations c WHERE c.id = turns.conversation_id);
    ALTER TABLE turn_queue ADD COLUMN character_id BIGINT;
    UPDATE turn_queue SET character_id = (SELECT c.character_id FROM conversations c WHERE c.id = turn_queue.conversation_id);

    CREATE TABLE scene_joins AS
        SELECT c.id AS old_id, (
            SELECT s.id FROM conversations s
            WHERE s.platform = c.platform AND s.chat_id = c.chat_id AND s.thread_id = c.thread_id AND s.is_shared
            ORDER BY (SELECT MAX(m.created_at) FROM messages m WHERE m.conversation_id = s.id) DESC NULLS LAST, s.id
            LIMIT 1) AS scene_id
        FROM conversations c WHERE c.is_shared;
    DELETE FROM scene_joins WHERE old_id = scene_id;  -- left: the conversations joined into another

    -- every message of a joined chat, its scene, and the message it answers when it is the reply
    -- right after it (a pair that stays together)
    CREATE TABLE scene_messages AS
        SELECT m.id, j.scene_id, m.role, m.platform_message_id, m.created_at, m.conversation_id AS was_in,
               m.pos AS was_at, (SELECT u.id FROM messages u WHERE u.conversation_id = m.conversation_id
                                 AND u.pos = m.pos - 1 AND u.role = 'user' AND m.role = 'assistant') AS answers
        FROM messages m JOIN (SELECT old_id AS id, scene_id FROM scene_joins
                              UNION SELECT scene_id, scene_id FROM scene_joins) j ON j.id = m.conversation_id;
    CREATE TABLE scene_duplicates AS
        SELECT d.id AS duplicate_id, (
            SELECT MIN(k.id) FROM scene_messages k WHERE k.scene_id = d.scene_id AND k.role = 'user'
            AND k.platform_message_id = d.platform_message_id) AS kept_id
        FROM scene_messages d WHERE d.role = 'user' AND d.platform_message_id IS NOT NULL;
    DELETE FROM scene_duplicates WHERE duplicate_id = kept_id;
    UPDATE turns SET user_message_id = (SELECT kept_id FROM scene_duplicates WHERE duplicate_id = turns.user_message_id)
        WHERE user_message_id IN (SELECT duplicate_id FROM scene_duplicates);
    UPDATE turn_queue SET user_message_id = (SELECT kept_id FROM scene_duplicates WHERE duplicate_id = turn_queue.user_message_id)
        WHERE user_message_id IN (SELECT duplicate_id FROM scene_duplicates);
    UPDATE scene_messages SET answers = (SELECT kept_id FROM scene_duplicates WHERE duplicate_id = answers)
        WHERE answers IN (SELECT duplicate_id FROM scene_duplicates);
    DELETE FROM messages WHERE id IN (SELECT duplicate_id FROM scene_duplicates);
    DELETE FROM scene_messages WHERE id IN (SELECT duplicate_id FROM scene_duplicates);
    -- a message both characters answered keeps the first reply right after it; the other follows in time
    UPDATE scene_messages SET answers = NULL WHERE answers IS NOT NULL
        AND id <> (SELECT MIN(r.id) FROM scene_messages r WHERE r.answers = scene_messages.answers);
    -- the places: every message not such a reply, in the order written; a reply right after its message
    CREATE TABLE scene_places AS
        SELECT id, ROW_NUMBER() OVER (PARTITION BY scene_id ORDER BY created_at, was_in, was_at) AS place
        FROM scene_messages WHERE answers IS NULL;
"""

SCENES_MOVE = """
    UPDATE messages SET conversation_id = (SELECT scene_id FROM scene_messages s WHERE s.id = messages.id),
                        pos = COALESCE(2 * (SELECT place FROM scene_places p WHERE p.id = messages.id),
                                       2 * (SELECT p.place FROM scene_places p JOIN scene_messages s ON s.answers = p.id
                                            WHERE s.id = messages.id) + 1)
        WHERE id IN (SELECT id FROM scene_messages);
"""

SCENES_FINISH = """
    UPDATE conversations SET last_pos = COALESCE((SELECT MAX(pos) FROM messages WHERE conversation_id = conversations.id), 0),
                             summarized_pos = 0, summary_failures = 0, summary_retry_at = NULL
        WHERE id IN (SELECT scene_id FROM scene_joins);
    DELETE FROM summaries WHERE conversation_id IN (SELECT scene_id FROM scene_joins UNION SELECT old_id FROM scene_joins);
    DELETE FROM rebuilds WHERE conversation_id IN (SELECT scene_id FROM scene_joins UNION SELECT old_id FROM scene_joins);
    UPDATE turns SET conversation_id = (SELECT scene_id FROM scene_joins WHERE old_id = turns.conversation_id)
        WHERE conversation_id IN (SELECT old_id FROM scene_joins);
    UPDATE turn_queue SET conversation_id = (SELECT scene_id FROM scene_joins WHERE old_id = turn_queue.conversation_id)
        WHERE conversation_id IN (SELECT old_id FROM scene_joins);
    UPDATE message_parts SET conversation_id = (SELECT scene_id FROM scene_joins WHERE old_id = message_parts.conversation_id)
        WHERE conversation_id IN (SELECT old_id FROM scene_joins);
    UPDATE answer_origins SET conversation_id = (SELECT scene_id FROM scene_joins WHERE old_id = answer_origins.conversation_id)
        WHERE conversation_id IN (SELECT old_id FROM scene_joins);
    DELETE FROM conversations WHERE id IN (SELECT old_id FROM scene_joins);
    DROP TABLE scene_places;
    DROP TABLE scene_duplicates;
    DROP TABLE scene_messages;
    DROP TABLE scene_joins;
    CREATE UNIQUE INDEX conversations_scene ON conversations(platform, chat_id, thread_id) WHERE is_shared;
    CREATE INDEX turns_character ON turns(conversation_id, character_id, status, id);
"""

# The memory page (SPEC 21): a one-time link's code and a session's token are kept only as their
# SHA-256, so a copy of the database opens no page; `characters` are the ids of the characters
# `[access]` let the person reach when the link was made (as their platform described them), the
# ones the page shows. A session's CSRF token is kept beside it. `page_failures`: wrong codes by
# address, for the rate limit every process shares. Each goes with its person (/forgetme).
PAGES = """
    CREATE TABLE page_links (
        code_hash   TEXT PRIMARY KEY,
        person_id   BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        characters  TEXT NOT NULL,
        expires_at  DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX page_links_person ON page_links(person_id);
    CREATE TABLE page_sessions (
        token_hash  TEXT PRIMARY KEY,
        person_id   BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        characters  TEXT NOT NULL,
        csrf        TEXT NOT NULL,
        expires_at  DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX page_sessions_person ON page_sessions(person_id);
    CREATE TABLE page_failures (
        address  TEXT NOT NULL,
        at       DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX page_failures_by_address ON page_failures(address, at);
"""


# Hardening VI (SPEC 19 "A letter that cannot be delivered is not written again", "A repeating
# reminder keeps the time the person asked for", "In a group the letter always names the
# person"): a reminder keeps its letter once composed (and the letter's receipt), how often
# sending it failed and when it is tried again; the local time of day a repeating one was asked
# for ("HH:MM"); and the name of the person who asked, as they went by in that chat. And the day's
# pictures of a person who used /forgetme are kept against their platform ids, as their tokens are
# (#69: the allowance does not start afresh).
HARDENING_VI = """
    ALTER TABLE forgotten_spend ADD COLUMN pictures INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE reminders ADD COLUMN letter TEXT;
    ALTER TABLE reminders ADD COLUMN letter_receipt TEXT;
    ALTER TABLE reminders ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE reminders ADD COLUMN retry_at DOUBLE PRECISION;
    ALTER TABLE reminders ADD COLUMN at_clock TEXT;
    ALTER TABLE reminders ADD COLUMN asked_by TEXT NOT NULL DEFAULT '';
"""


# Who knows what (SPEC 22): who is present in each scene (a shared conversation), and for each
# message stored there the characters that witnessed it (storage/sql/presence.py). A character
# that missed a message keeps its own summary (`own_sight`, with its state beside it; its entries
# name it in `summaries.seen_by`). Scenes from before: every message counts as witnessed by the
# characters of its conversation — the one its row names and every one that spoke there — all
# present, none with a summary of its own.
WITNESSES = """
    CREATE TABLE presence (
        conversation_id   BIGINT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        character_id      BIGINT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
        present           BOOLEAN NOT NULL,
        own_sight         BOOLEAN NOT NULL,            -- it missed a message: it reads its own summary
        summarized_pos    BIGINT NOT NULL DEFAULT 0,   -- its own summary's state, as the conversation's
        summary_failures  INTEGER NOT NULL DEFAULT 0,
        summary_retry_at  DOUBLE PRECISION,
        PRIMARY KEY (conversation_id, character_id)
    );
    CREATE INDEX presence_retry ON presence(summary_retry_at) WHERE summary_retry_at IS NOT NULL;
    CREATE TABLE witnesses (
        message_id    BIGINT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        character_id  BIGINT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
        PRIMARY KEY (message_id, character_id)
    );
    ALTER TABLE summaries ADD COLUMN seen_by BIGINT;
    INSERT INTO presence (conversation_id, character_id, present, own_sight)
        SELECT id, character_id, true, false FROM conversations WHERE is_shared
        UNION SELECT m.conversation_id, m.character_id, true, false FROM messages m
            JOIN conversations c ON c.id = m.conversation_id JOIN characters k ON k.id = m.character_id
            WHERE c.is_shared;
    INSERT INTO witnesses (message_id, character_id)
        SELECT m.id, p.character_id FROM messages m JOIN presence p ON p.conversation_id = m.conversation_id;
"""


# Every memory with its story (SPEC 21 "History and undo"): every change to a memory — add, update,
# pin, unpin, delete; by the person (no turn) or by a character mid-reply (its turn) — in one record,
# kept 30 days (the daily upkeep), each with the memory as it was and as it became. A turn's own
# rows are what Regenerate and a failed turn undo (formerly `memory_journal`, moved in here); a
# person's row marks the turns' rows of that memory done, so no undo reverts what the person did
# since. The person undoes a change from the memory page. Each row goes with its person.
def memory_history_table(name: str, id_column: str) -> str:
    """The table of every change to a memory, called `name` (a table made anew takes a name of its
    own first), its ids made by `id_column`."""
    return f"""
    CREATE TABLE {name} (
        id         {id_column},
        person_id  BIGINT NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
        memory_id  BIGINT NOT NULL,
        turn_id    BIGINT REFERENCES turns(id) ON DELETE CASCADE,  -- a character's change; NULL: the person's
        conversation_id  BIGINT REFERENCES conversations(id) ON DELETE SET NULL,  -- the chat it was made in
        action     TEXT NOT NULL,            -- add | update | delete | pin | unpin
        before     TEXT,                     -- the memory as it was (its columns, JSON); NULL: added
        after      TEXT,                     -- as it became; NULL: deleted
        at         DOUBLE PRECISION NOT NULL,
        undone     BOOLEAN NOT NULL DEFAULT false  -- taken back, or (a turn's) overtaken by the person
    );"""


MEMORY_HISTORY_INDEXES = """
    CREATE INDEX memory_history_person ON memory_history(person_id, at);
    CREATE INDEX memory_history_turn ON memory_history(turn_id) WHERE turn_id IS NOT NULL;
    CREATE INDEX memory_history_memory ON memory_history(memory_id);"""


def memory_history(id_column: str) -> str:
    return memory_history_table("memory_history", id_column) + MEMORY_HISTORY_INDEXES + """
    INSERT INTO memory_history (person_id, memory_id, turn_id, conversation_id, action, before, at, undone)
        SELECT t.person_id, j.memory_id, j.turn_id, t.conversation_id, j.action, j.before, t.created_at, j.undone
        FROM memory_journal j JOIN turns t ON t.id = j.turn_id WHERE t.person_id IS NOT NULL ORDER BY j.id;
    DROP TABLE memory_journal;
"""


# Who witnessed a streamed reply (SPEC 22: "those present when it was posted"). A streamed reply
# shows before it is stored, so the characters present when its first part showed are kept with
# its turn (storage/sql/presence.py `take_witnesses`) and become the stored reply's witnesses.
STREAMED_WITNESSES = """
    CREATE TABLE turn_witnesses (
        turn_id       BIGINT NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
        character_id  BIGINT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
        PRIMARY KEY (turn_id, character_id)
    );
"""

# 27 — a turn found without reading every turn: a reply ends its turn, and the turn it replaces,
# by the person's message (`finish_turn`); a reply is shown, or taken back, by its message; a
# message deleted (taken back, purged, forgotten) finds the turns, and the waiting line's tickets,
# that point at it; and a message arriving asks whether its conversation holds a reply still
# unshown, or a turn cut off lately (`FREE` in storage/sql/turns.py). Each of them read every turn
# ever answered, or every turn of the conversation.
TURNS_INDEXED = """
    CREATE INDEX turns_user_message ON turns(user_message_id);
    CREATE INDEX turns_reply_message ON turns(reply_message_id);
    CREATE INDEX turn_queue_message ON turn_queue(user_message_id);
    CREATE INDEX turns_unshown_here ON turns(conversation_id) WHERE NOT shown;
    CREATE INDEX turns_lately ON turns(conversation_id, created_at);
"""


# 28 — the line finds a conversation's interrupted turns by index: each keeps its turn's
# conversation. An arrival asks whether an earlier message of its conversation was cut off lately
# (`FREE` in storage/sql/turns.py); found through the turns, that read every turn of the
# conversation of the last five minutes — hundreds in a busy one — on every message, when the
# interrupted turns are a handful at most, and usually none. Migration 27's index for that read
# goes: nothing else reads a conversation's turns by time, and every turn written paid for it.
INTERRUPTED_BY_CONVERSATION = """
    ALTER TABLE interrupted_turns ADD COLUMN conversation_id BIGINT;
    UPDATE interrupted_turns SET conversation_id = (SELECT conversation_id FROM turns WHERE id = turn_id);
    CREATE INDEX interrupted_turns_conversation ON interrupted_turns(conversation_id);
    DROP INDEX turns_lately;
"""


# 29 (PostgreSQL: 22) — one index for one question. A turn enters each partial index of turns
# as it starts and leaves it as it ends, so every such index costs every turn two writes.
# Migration 27's `turns_unshown_here` answers what `turns_unshown` did (a start-up's scan of the
# replies not yet shown): that one goes. SQLite's `turns_running` goes the same way
# (storage/sqlite/migrations.py); on SQLite the two were 4 of the 46 pages a turn wrote to the log.
ONE_INDEX_A_QUESTION = """
    DROP INDEX turns_unshown;
"""

# A character's own summary (SPEC 22) starts again when its conversation is rebuilt (after
# /forgetme): each start is a generation of its own, so a pass that read messages before the
# start writes nothing after it (storage/sql/summaries.py: SummaryStartedAgain).
OWN_SUMMARY_GENERATIONS = """
    ALTER TABLE presence ADD COLUMN summary_generation BIGINT NOT NULL DEFAULT 0;
"""


# 33 (PostgreSQL: 24) — albums, item by item (SPEC 7, 12). An album is stored as one message,
# and each item is kept as the adapter reads it back, so an item's caption edited later is read
# with the others again. Telegram posts an album's items to a webhook one by one, each once the
# one before is acknowledged, and behind a load balancer each may reach another process: such an
# album is gathered here, found by its key in its conversation, until its turn takes it (`taken`).
# Its rows go with its message (/forgetme, a deletion, the retention period).
ALBUMS = """
    CREATE TABLE albums (
        message_id       BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        conversation_id  BIGINT NOT NULL,
        album            TEXT NOT NULL,
        taken            BOOLEAN NOT NULL
    );
    CREATE INDEX albums_by_key ON albums(conversation_id, album);
    CREATE TABLE album_items (
        message_id           BIGINT NOT NULL REFERENCES albums(message_id) ON DELETE CASCADE,
        platform_message_id  TEXT NOT NULL,
        item                 TEXT NOT NULL,
        PRIMARY KEY (message_id, platform_message_id)
    );
"""
