"""Conversations and their messages (the Conversations port).

A message's place in its conversation (`pos`) comes from a counter on the conversation's row,
advanced in the transaction that stores the message: the database serializes writes to one
row, so messages stored at once by several processes each take their own place. A person's
message takes the next even place, the reply to it the odd place right after it, so a reply
written after a later message arrived still follows the message it answers.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from storage.ports import ConversationRow, Conversations, MessageRow, MessageSize, NewAlbum, StoredAlbum
from storage.rows import CONVERSATION_COLUMNS, MESSAGE_COLUMNS, columns, conversation, in_sent_order, message, messages
from storage.sql.database import Connection, Database
from storage.sql.presence import come_in, record_witnesses, seen, seen_args


class Place(NamedTuple):
    """Where a message goes: its conversation, its place there, whether the conversation is a
    scene (its messages record their witnesses) and the conversation's own character."""

    conversation_id: int
    pos: int
    scene: bool
    character_id: int


async def next_place(tx: Connection, conversation_id: int) -> Place:
    """Take the conversation's next even place (the row stays held until the transaction ends)."""
    row = await tx.one("UPDATE conversations SET last_pos = last_pos / 2 * 2 + 2 WHERE id = $1 "
                       "RETURNING last_pos, is_shared, character_id", conversation_id)
    return Place(conversation_id, row["last_pos"], bool(row["is_shared"]), row["character_id"])


async def insert_message(tx: Connection, place: Place, role: str, person_id: int | None,
                         speaker_name: str, content: str, tokens: int, platform_message_id: str | None,
                         now: float, character_id: int | None = None, turn_id: int | None = None,
                         named: Sequence[int] = ()) -> MessageRow | None:
    """Store one message at `place` (a character's names its `character_id`); None when its
    platform id is in the conversation already. In a scene it records its witnesses (SPEC 22): a
    character that speaks there is brought in first. A turn's reply (`turn_id`) that showed as it
    streamed was witnessed by those present then, its speaker and the characters it `named`."""
    if place.scene and character_id is not None:
        await come_in(tx, place.conversation_id, character_id)
    row = await tx.one(
        "INSERT INTO messages (conversation_id, pos, role, person_id, speaker_name, content, tokens, "
        "platform_message_id, created_at, character_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
        f"ON CONFLICT DO NOTHING RETURNING {MESSAGE_COLUMNS}",
        place.conversation_id, place.pos, role, person_id, speaker_name, content, tokens, platform_message_id, now,
        character_id)
    if row is None:
        return None
    if place.scene:
        speakers = [*named, character_id] if character_id is not None else named
        await record_witnesses(tx, row["id"], place.conversation_id, turn_id, speakers)
    return message(row)



async def set_platform_ids(tx: Connection, conversation_id: int, message_id: int,
                           platform_message_ids: list[str]) -> None:
    """Inside a transaction: the platform messages a stored message shows as (the first, then
    its later parts)."""
    first, *parts = platform_message_ids
    await tx.execute("UPDATE messages SET platform_message_id = $1 WHERE id = $2", first, message_id)
    for part in parts:
        await tx.execute(
            "INSERT INTO message_parts (conversation_id, platform_message_id, message_id) VALUES ($1, $2, $3) "
            "ON CONFLICT (conversation_id, platform_message_id) DO UPDATE SET message_id = excluded.message_id",
            conversation_id, part, message_id)


def platform_ids_of(message: str) -> str:
    """The platform ids of the message whose id `message` gives (a parameter or a subquery): its
    own, marked first, then its later parts (read back with `read_platform_ids`)."""
    return (f"SELECT platform_message_id, true AS first FROM messages WHERE id = {message} "
            f"AND platform_message_id IS NOT NULL UNION ALL "
            f"SELECT platform_message_id, false FROM message_parts WHERE message_id = {message}")


def read_platform_ids(rows: list) -> list[str]:
    return in_sent_order([r["platform_message_id"] for r in rows if r["first"]],
                         [r["platform_message_id"] for r in rows if not r["first"]])


async def keep_album(tx: Connection, message_id: int, conversation_id: int, album: NewAlbum) -> None:
    """Inside the transaction that stores an album as a message: its items, kept with it (one
    still gathered: `SQLConversations.join_album`)."""
    await tx.execute("INSERT INTO albums (message_id, conversation_id, album, taken) VALUES ($1, $2, $3, $4)",
                     message_id, conversation_id, album.album, not album.gathering)
    for platform_message_id, item in album.items:
        await tx.execute("INSERT INTO album_items (message_id, platform_message_id, item) VALUES ($1, $2, $3)",
                         message_id, platform_message_id, item)


async def messages_at(db: Database, conversation_id: int, positions: list[int],
                      seen_by: int | None = None) -> list[MessageRow]:
    """The conversation's messages at these places, oldest first (for recall's passages)."""
    if not positions:
        return []
    rows = await db.short.all(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 "
                              f"AND pos {db.dialect.in_ids(2)}{seen(seen_by, 3)} ORDER BY pos",
                              conversation_id, db.dialect.ids(positions), *seen_args(seen_by))
    return messages(rows)


class SQLConversations(Conversations):
    def __init__(self, db: Database):
        self.db = db

    async def conversation(
        self, platform: str, chat_id: str, thread_id: str | None, character_id: int, is_shared: bool
    ) -> ConversationRow:
        if is_shared:
            return await self._scene(platform, chat_id, thread_id or "", character_id)
        key = (platform, chat_id, thread_id or "", character_id)
        row = await self.db.short.one(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE platform = $1 "
                                      "AND chat_id = $2 AND thread_id = $3 AND character_id = $4", *key)
        if row is None or bool(row["is_shared"]) != is_shared:
            async with self.db.transaction(short=True) as tx:
                row = await tx.one(
                    "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at) "
                    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (platform, chat_id, thread_id, character_id) "
                    f"DO UPDATE SET is_shared = excluded.is_shared RETURNING {CONVERSATION_COLUMNS}",
                    *key, is_shared, self.db.clock())
        return conversation(row)

    async def _scene(self, platform: str, chat_id: str, thread_id: str, character_id: int) -> ConversationRow:
        """A shared chat's one conversation, whichever character asks (SPEC 15: a scene); made
        by the first to ask (its row names that character). One per chat: a unique index."""
        find = (f"SELECT {CONVERSATION_COLUMNS} FROM conversations "
                "WHERE platform = $1 AND chat_id = $2 AND thread_id = $3 AND is_shared")
        row = await self.db.one(find, platform, chat_id, thread_id)
        if row is None:
            async with self.db.transaction(short=True) as tx:
                # a one-to-one row of this character here (a chat that became shared) becomes the
                # scene; its character witnessed all of it (SPEC 22)
                became = await tx.value(
                    "UPDATE conversations SET is_shared = true WHERE platform = $1 AND chat_id = $2 "
                    "AND thread_id = $3 AND character_id = $4 AND NOT EXISTS (SELECT 1 FROM conversations "
                    "WHERE platform = $1 AND chat_id = $2 AND thread_id = $3 AND is_shared) RETURNING id",
                    platform, chat_id, thread_id, character_id)
                if became is not None:
                    await tx.execute("INSERT INTO presence (conversation_id, character_id, present, own_sight) "
                                     "VALUES ($1, $2, true, false)", became, character_id)
                    await tx.execute("INSERT INTO witnesses (message_id, character_id) SELECT id, $2 FROM messages "
                                     "WHERE conversation_id = $1", became, character_id)
                await tx.execute(
                    "INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at) "
                    "VALUES ($1, $2, $3, $4, true, $5) ON CONFLICT DO NOTHING",
                    platform, chat_id, thread_id, character_id, self.db.clock())
                row = await tx.one(find, platform, chat_id, thread_id)
        return conversation(row)

    async def conversation_by_id(self, conversation_id: int) -> ConversationRow | None:
        row = await self.db.short.one(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = $1",
                                      conversation_id)
        return conversation(row) if row else None

    async def private_of(self, person_id: int) -> list[ConversationRow]:
        rows = await self.db.all(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE NOT is_shared AND id IN "
                                 "(SELECT conversation_id FROM messages WHERE person_id = $1) ORDER BY id", person_id)
        return [conversation(row) for row in rows]

    async def add_greeting(self, conversation_id: int, character_name: str, content: str, tokens: int) -> bool:
        async with self.db.transaction(short=True) as tx:
            # the conversation's row held: "no message yet" stays true until the greeting is in
            await tx.execute(f"SELECT 1 FROM conversations WHERE id = $1{self.db.dialect.for_update}", conversation_id)
            if await tx.value("SELECT COUNT(*) FROM messages WHERE conversation_id = $1", conversation_id):
                return False
            place = await next_place(tx, conversation_id)
            await insert_message(tx, place, "assistant", None, character_name, content, tokens, None, self.db.clock(),
                                 place.character_id)
        return True

    async def add_user_message(
        self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
        tokens: int, platform_message_id: str | None, album: NewAlbum | None = None,
    ) -> MessageRow | None:
        async with self.db.transaction(short=True) as tx:
            stored = await insert_message(tx, await next_place(tx, conversation_id), "user", person_id, speaker_name,
                                          content, tokens, platform_message_id, self.db.clock())
            if stored is not None and album is not None:
                await keep_album(tx, stored.id, conversation_id, album)
            return stored

    async def recent_messages(self, conversation_id: int, limit: int, up_to_pos: int | None = None,
                              seen_by: int | None = None) -> list[MessageRow]:
        rows = await self.db.short.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 "
            f"AND (CAST($2 AS BIGINT) IS NULL OR pos <= $2){seen(seen_by, 4)} ORDER BY pos DESC LIMIT $3",
            conversation_id, up_to_pos, limit, *seen_args(seen_by))
        return messages(rows)

    async def count_back(self, conversation_id: int, up_to_pos: int | None, at_most: int,
                         replies_of: int | None = None, seen_by: int | None = None, after_pos: int | None = None
                         ) -> int:
        return await self.db.short.value(
            "SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE conversation_id = $1 "
            "AND (CAST($2 AS BIGINT) IS NULL OR pos <= $2) AND (CAST($5 AS BIGINT) IS NULL OR pos > $5) "
            f"AND (CAST($4 AS BIGINT) IS NULL OR (role = 'assistant' AND character_id = $4)){seen(seen_by, 6)} "
            "ORDER BY pos DESC LIMIT $3) AS back",
            conversation_id, up_to_pos, at_most, replies_of, after_pos, *seen_args(seen_by))

    async def recent_sizes(self, conversation_id: int, limit: int, seen_by: int | None = None) -> list[MessageSize]:
        rows = await self.db.short.all(
            f"SELECT pos, tokens FROM messages WHERE conversation_id = $1{seen(seen_by, 3)} ORDER BY pos DESC LIMIT $2",
            conversation_id, limit, *seen_args(seen_by))
        return [MessageSize(row["pos"], row["tokens"]) for row in rows]

    async def messages_between(self, conversation_id: int, after_pos: int, before_pos: int | None,
                               limit: int, seen_by: int | None = None) -> list[MessageRow]:
        rows = await self.db.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 AND pos > $2 "
            f"AND (CAST($3 AS BIGINT) IS NULL OR pos < $3){seen(seen_by, 5)} ORDER BY pos LIMIT $4",
            conversation_id, after_pos, before_pos, limit, *seen_args(seen_by))
        return messages(rows)

    async def count_messages(self, conversation_id: int, after_pos: int, up_to_pos: int | None = None,
                             seen_by: int | None = None) -> int:
        return await self.db.value(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = $1 AND pos > $2 "
            f"AND (CAST($3 AS BIGINT) IS NULL OR pos <= $3){seen(seen_by, 4)}",
            conversation_id, after_pos, up_to_pos, *seen_args(seen_by))

    async def message_numbers(self, conversation_id: int, positions: Sequence[int]) -> dict[int, int]:
        if not positions:
            return {}
        # one pass over the conversation's places, counting those at or before each wanted one
        counts = ", ".join(f"COUNT(CASE WHEN pos <= ${i + 2} THEN 1 END) AS n{i}" for i in range(len(positions)))
        row = await self.db.one(f"SELECT {counts} FROM messages WHERE conversation_id = $1",
                                conversation_id, *positions)
        return {pos: row[f"n{i}"] for i, pos in enumerate(positions)}

    async def message(self, message_id: int) -> MessageRow | None:
        row = await self.db.one(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1", message_id)
        return message(row) if row else None

    async def message_by_platform_id(self, conversation_id: int, platform_message_id: str) -> MessageRow | None:
        row = await self.db.one(  # the message itself, or a reply one of whose later parts it is
            f"SELECT * FROM (SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 "
            f"AND platform_message_id = $2) AS own UNION ALL SELECT * FROM (SELECT {MESSAGE_COLUMNS} FROM messages "
            "WHERE id = (SELECT message_id FROM message_parts WHERE conversation_id = $1 AND platform_message_id = $2)) "
            "AS part LIMIT 1", conversation_id, platform_message_id)
        return message(row) if row else None

    async def messages_by_id(self, conversation_id: int, message_ids: list[int]) -> list[MessageRow]:
        rows = await self.db.all(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = $1 "
                                 f"AND id {self.db.dialect.in_ids(2)} ORDER BY pos",
                                 conversation_id, self.db.dialect.ids(message_ids))
        return messages(rows)

    async def edit_platform_message(
        self, conversation_id: int, platform_message_id: str, content: str, tokens: int
    ) -> bool:
        return await self.db.execute(
            "UPDATE messages SET content = $1, tokens = $2 WHERE conversation_id = $3 "
            "AND platform_message_id = $4 AND role = 'user'", content, tokens, conversation_id, platform_message_id) > 0

    async def fill_in(self, message_id: int, content: str, tokens: int, spoken: bool = False) -> MessageRow | None:
        if not await self.db.execute(
                "UPDATE messages SET content = $1, tokens = $2, spoken = $3 WHERE id = $4 AND role = 'user'",
                content, tokens, spoken, message_id):
            return None
        return await self.message(message_id)

    async def delete_platform_message(self, conversation_id: int, platform_message_id: str) -> bool:
        return await self.db.execute("DELETE FROM messages WHERE conversation_id = $1 AND platform_message_id = $2",
                                     conversation_id, platform_message_id) > 0

    async def set_platform_message_ids(
        self, conversation_id: int, message_id: int, platform_message_ids: list[str]
    ) -> None:
        async with self.db.transaction(short=True) as tx:
            await set_platform_ids(tx, conversation_id, message_id, platform_message_ids)

    async def platform_message_ids(self, message_id: int) -> list[str]:
        return read_platform_ids(await self.db.all(platform_ids_of("$1"), message_id))

    async def heard(self, platform: str, chat_id: str, thread_id: str | None) -> None:
        await self.db.execute("UPDATE conversations SET heard_at = $1 WHERE platform = $2 AND chat_id = $3 "
                              "AND thread_id = $4 AND is_shared", self.db.clock(), platform, chat_id, thread_id or "")

    async def written_since(self, message: MessageRow, heard_since: float | None = None) -> bool:
        return bool(await self.db.value(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1 AND pos > $2) "
            "OR EXISTS (SELECT 1 FROM conversations WHERE id = $1 AND heard_at >= $3)",
            message.conversation_id, message.pos, message.created_at if heard_since is None else heard_since))

    async def set_answer_origin(self, platform: str, chat_id: str, platform_message_ids: list[str],
                                conversation_id: int) -> None:
        async with self.db.transaction(short=True) as tx:
            for sent in platform_message_ids:
                await tx.execute(
                    "INSERT INTO answer_origins (platform, chat_id, platform_message_id, conversation_id, created_at) "
                    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (platform, chat_id, platform_message_id) "
                    "DO UPDATE SET conversation_id = excluded.conversation_id",
                    platform, chat_id, sent, conversation_id, self.db.clock())

    async def answer_origin(self, platform: str, chat_id: str, platform_message_id: str) -> ConversationRow | None:
        row = await self.db.one(
            f"SELECT {columns(CONVERSATION_COLUMNS, 'c')} FROM answer_origins o JOIN conversations c "
            "ON c.id = o.conversation_id WHERE o.platform = $1 AND o.chat_id = $2 AND o.platform_message_id = $3",
            platform, chat_id, platform_message_id)
        return conversation(row, "c_") if row else None

    # -- albums, item by item (SPEC 7, 12) ------------------------------------------------
    async def join_album(self, conversation_id: int, album: str, platform_message_id: str,
                         item: str) -> StoredAlbum | None:
        async with self.db.transaction(short=True) as tx:
            # held, so the album's turn taking it (`end_album`) waits for this item, and takes it too
            message_id = await _album_held(self.db, tx, conversation_id, album)
            if message_id is None:
                return None
            await tx.execute("INSERT INTO album_items (message_id, platform_message_id, item) VALUES ($1, $2, $3) "
                             "ON CONFLICT DO NOTHING", message_id, platform_message_id, item)
            return await _stored_album(tx, message_id)

    async def album_size(self, conversation_id: int, album: str) -> int:
        return await self.db.value(
            "SELECT COUNT(*) FROM album_items WHERE message_id IN "
            "(SELECT message_id FROM albums WHERE conversation_id = $1 AND album = $2 AND NOT taken)",
            conversation_id, album)

    async def end_album(self, conversation_id: int, album: str) -> list[str]:
        async with self.db.transaction(short=True) as tx:
            message_id = await _album_held(self.db, tx, conversation_id, album)
            if message_id is None:
                return []
            await tx.execute("UPDATE albums SET taken = true WHERE message_id = $1", message_id)
            # read after the hold: an item joining meanwhile was waited for, and is here
            return (await _stored_album(tx, message_id)).items

    async def edit_album_item(self, conversation_id: int, album: str, platform_message_id: str,
                              item: str) -> StoredAlbum | None:
        async with self.db.transaction(short=True) as tx:
            message_id = await tx.value(  # the album holding the item (an item late for its album began another)
                "UPDATE album_items SET item = $1 WHERE platform_message_id = $2 AND message_id IN "
                "(SELECT message_id FROM albums WHERE conversation_id = $3 AND album = $4) RETURNING message_id",
                item, platform_message_id, conversation_id, album)
            return await _stored_album(tx, message_id) if message_id is not None else None


async def _album_held(db: Database, tx: Connection, conversation_id: int, album: str) -> int | None:
    """Inside a transaction: the message an album being gathered is stored as, its row held
    until the end."""
    return await tx.value(f"SELECT message_id FROM albums WHERE conversation_id = $1 AND album = $2 AND NOT taken"
                          f"{db.dialect.for_update}", conversation_id, album)


async def _stored_album(tx: Connection, message_id: int) -> StoredAlbum:
    stored_as = await tx.value("SELECT platform_message_id FROM messages WHERE id = $1", message_id)
    return StoredAlbum(stored_as, [row["item"] for row in await tx.all(
        "SELECT item FROM album_items WHERE message_id = $1", message_id)])
