"""Who is present in a scene and what each character witnessed (the Presence port, SPEC 22).

A message stored in a shared conversation records its witnesses in the transaction that stores
it (`record_witnesses`, called by `insert_message`): the characters present then. A streamed
reply is posted before it is stored: the characters present when its first part showed are
taken then (`take_witnesses`) and are its witnesses, with its speaker and those it names. Presence
changes and messages take the conversation's row first (`next_place` advances its counter; here
it is held), so every message's witnesses agree with the order of its scene's comings and goings,
in every process.
"""

from __future__ import annotations

from typing import Sequence

from storage.ports import Presence
from storage.sql.database import Connection, Database

MISSED_ANY = "EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1)"  # one brought in now missed these


def witnessed_by(message: str, character: str) -> str:
    """An SQL condition: the message (a column such as `messages.id`) was witnessed by the
    character (a parameter)."""
    return f"EXISTS (SELECT 1 FROM witnesses w WHERE w.message_id = {message} AND w.character_id = {character})"


def seen(seen_by: int | None, number: int, message: str = "messages.id") -> str:
    """` AND` the message was witnessed by the character in parameter `$number`; nothing for None
    (every message: a one-to-one conversation, or a character that witnessed all of it)."""
    return "" if seen_by is None else f" AND {witnessed_by(message, f'${number}')}"


def seen_args(seen_by: int | None) -> tuple[int, ...]:
    """The parameter `seen` names, if any."""
    return () if seen_by is None else (seen_by,)


async def come_in(tx: Connection, conversation_id: int, character_id: int) -> bool:
    """Inside a transaction holding the conversation's row: the character is present from now on.
    One that was never here and finds messages already missed them: it keeps its own summary.
    True when it was not present."""
    was = await tx.value("SELECT present FROM presence WHERE conversation_id = $1 AND character_id = $2",
                         conversation_id, character_id)
    if was:
        return False
    await tx.execute(
        "INSERT INTO presence (conversation_id, character_id, present, own_sight) "
        f"VALUES ($1, $2, true, {MISSED_ANY}) "
        "ON CONFLICT (conversation_id, character_id) DO UPDATE SET present = true", conversation_id, character_id)
    return True


async def take_witnesses(db: Connection, turn_id: int) -> None:
    """As a scene's streamed reply first shows (is posted): the characters present now are kept
    with its turn, to witness the reply once it is stored."""
    await db.execute("INSERT INTO turn_witnesses (turn_id, character_id) SELECT t.id, p.character_id FROM turns t "
                     "JOIN presence p ON p.conversation_id = t.conversation_id AND p.present WHERE t.id = $1 "
                     "ON CONFLICT DO NOTHING", turn_id)


async def record_witnesses(tx: Connection, message_id: int, conversation_id: int, turn_id: int | None = None,
                           speakers: Sequence[int] = ()) -> None:
    """Inside the transaction storing a scene's message: the characters present witnessed it.
    A turn's reply whose witnesses were taken as it first showed (`take_witnesses`) has those,
    and of the present only its `speakers` (the character saying it, those it names)."""
    speaking = ", ".join(f"${n}" for n in range(4, len(speakers) + 4)) or "NULL"
    await tx.execute(
        "INSERT INTO witnesses (message_id, character_id) SELECT CAST($1 AS BIGINT), character_id FROM turn_witnesses "
        "WHERE turn_id = $3 UNION SELECT $1, character_id FROM presence WHERE conversation_id = $2 AND present "
        f"AND (character_id IN ({speaking}) OR NOT EXISTS (SELECT 1 FROM turn_witnesses WHERE turn_id = $3))",
        message_id, conversation_id, turn_id, *speakers)
    if turn_id is not None:
        await tx.execute("DELETE FROM turn_witnesses WHERE turn_id = $1", turn_id)


class SQLPresence(Presence):
    def __init__(self, db: Database):
        self.db = db

    async def _hold(self, tx: Connection, conversation_id: int) -> None:
        """Take the conversation's row, as storing a message does (the order of both is its)."""
        await tx.execute(f"SELECT 1 FROM conversations WHERE id = $1{self.db.dialect.for_update}", conversation_id)

    async def bring_in(self, conversation_id: int, character_ids: Sequence[int]) -> list[int]:
        came: list[int] = []
        async with self.db.transaction(short=True) as tx:
            await self._hold(tx, conversation_id)
            for character_id in dict.fromkeys(character_ids):
                if await come_in(tx, conversation_id, character_id):
                    came.append(character_id)
        return came

    async def dismiss(self, conversation_id: int, character_id: int) -> bool:
        async with self.db.transaction(short=True) as tx:
            await self._hold(tx, conversation_id)
            row = await tx.one("SELECT present, own_sight FROM presence WHERE conversation_id = $1 "
                               "AND character_id = $2", conversation_id, character_id)
            if row is None or not row["present"]:
                return False
            if not row["own_sight"]:
                # From now on it misses messages: its own summary starts as the scene's, which
                # holds only what it witnessed so far (it witnessed everything until now).
                await tx.execute(
                    "INSERT INTO summaries (conversation_id, generation, tier, content, tokens, first_pos, last_pos, "
                    "edited, created_at, seen_by) SELECT conversation_id, 0, tier, content, tokens, first_pos, "
                    "last_pos, edited, created_at, $2 FROM summaries WHERE conversation_id = $1 AND seen_by IS NULL "
                    "AND generation = (SELECT summary_generation FROM conversations WHERE id = $1)",
                    conversation_id, character_id)
                await tx.execute(
                    "UPDATE presence SET own_sight = true, summarized_pos = "
                    "(SELECT summarized_pos FROM conversations WHERE id = $1) "
                    "WHERE conversation_id = $1 AND character_id = $2", conversation_id, character_id)
            await tx.execute("UPDATE presence SET present = false WHERE conversation_id = $1 AND character_id = $2",
                             conversation_id, character_id)
        return True

    async def leave_chat(self, platform: str, chat_id: str, character_id: int) -> int:
        scenes = await self.db.all("SELECT id FROM conversations WHERE platform = $1 AND chat_id = $2 AND is_shared",
                                   platform, chat_id)
        return sum([await self.dismiss(row["id"], character_id) for row in scenes])

    async def present(self, conversation_id: int) -> list[int]:
        rows = await self.db.all("SELECT character_id FROM presence WHERE conversation_id = $1 AND present "
                                 "ORDER BY character_id", conversation_id)
        return [row["character_id"] for row in rows]

    async def missed_any(self, conversation_id: int, character_id: int) -> bool:
        return bool(await self.db.value(
            "SELECT COALESCE((SELECT own_sight FROM presence WHERE conversation_id = $1 AND character_id = $2), "
            f"{MISSED_ANY})", conversation_id, character_id))

    async def witnessed(self, conversation_id: int, character_id: int) -> tuple[int, int]:
        row = await self.db.one(
            f"SELECT COUNT(CASE WHEN {witnessed_by('m.id', '$2')} THEN 1 END) AS seen, COUNT(*) AS held "
            "FROM messages m WHERE m.conversation_id = $1", conversation_id, character_id)
        return row["seen"], row["held"]
