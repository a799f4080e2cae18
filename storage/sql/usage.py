"""What is spent on each person's behalf, by day and character (the Usage port, SPEC 17):
one row a person, day and character, added to as turns and check-ins happen, so a turn's budget
check reads a few rows by the primary key, never the history."""

from __future__ import annotations

from storage.ports import DayTotals, Spend, Usage
from storage.sql.database import Connection, Database

# Nothing for a person forgotten meanwhile: /forgetme kept the day's spend by their platform ids.
# Their row is held as it is found (`for_key_share`, as the reference to it would hold it): a
# /forgetme under way is waited for, and then there is no one to add to, where the reference
# alone would have failed once it committed.
_ADD = ("INSERT INTO usage_days (person_id, day, character_id, turns, tokens_in, tokens_out, checkins) "
        "SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM persons WHERE id = $1{held}) "
        "ON CONFLICT (person_id, day, character_id) DO UPDATE SET "
        "turns = usage_days.turns + excluded.turns, tokens_in = usage_days.tokens_in + excluded.tokens_in, "
        "tokens_out = usage_days.tokens_out + excluded.tokens_out, checkins = usage_days.checkins + excluded.checkins")
# what people spent, with what forgotten people spent on the day they left (counted, nobody named)
_SPENDING = ("(SELECT person_id, day, character_id, turns, tokens_in, tokens_out, checkins FROM usage_days "
             "UNION ALL SELECT NULL, day, character_id, turns, tokens_in, tokens_out, 0 FROM forgotten_spend WHERE counted)")
_TOTALS = ("SELECT {name} AS name, COALESCE(SUM(u.turns), 0) AS turns, COALESCE(SUM(u.tokens_in), 0) AS tokens_in, "
           "COALESCE(SUM(u.tokens_out), 0) AS tokens_out, COUNT(DISTINCT CASE WHEN u.turns > 0 THEN u.person_id END) "
           "AS people, COALESCE(SUM(u.checkins), 0) AS checkins FROM " + _SPENDING + " u {join} "
           "WHERE u.day BETWEEN $1 AND $2 {group}")
_SPENT = ("SELECT (SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM usage_days "
          "WHERE person_id = $1 AND day BETWEEN $2 AND $3) + (SELECT COALESCE(SUM(f.tokens_in + f.tokens_out), 0) "
          "FROM forgotten_spend f JOIN identities i ON i.platform = f.platform AND i.user_id = f.user_id "
          "WHERE i.person_id = $1 AND f.day BETWEEN $2 AND $3)")


# the day's pictures of a person, with those of a forgotten person on any of their platform ids (#69)
_PICTURES = ("SELECT (SELECT COALESCE(SUM(pictures), 0) FROM usage_days WHERE person_id = $1 AND day = $2) + "
             "(SELECT COALESCE(SUM(f.pictures), 0) FROM forgotten_spend f JOIN identities i ON i.platform = f.platform "
             "AND i.user_id = f.user_id WHERE i.person_id = $1 AND f.day = $2)")


def _add(db: Database) -> str:
    return _ADD.format(held=db.dialect.for_key_share)


async def add_spend(db: Database, tx: Connection, spend: Spend) -> None:
    """Add what a model call cost to the person's day (`tx`: a transaction of `db`, or `db` itself
    for a statement of its own)."""
    await tx.execute(_add(db), spend.person_id, spend.day, spend.character_id, spend.turns, spend.tokens_in,
                     spend.tokens_out, 0)


class SQLUsage(Usage):
    def __init__(self, db: Database):
        self.db = db

    async def add_turn(self, person_id: int, character_id: int, day: str, tokens_in: int, tokens_out: int,
                       turns: int = 1) -> None:
        await add_spend(self.db, self.db, Spend(person_id, character_id, day, tokens_in, tokens_out, turns))

    async def add_checkin(self, person_id: int, character_id: int, day: str) -> None:
        await self.db.execute(_add(self.db), person_id, day, character_id, 0, 0, 0, 1)

    async def take_picture(self, person_id: int, character_id: int, day: str, per_day: int, tokens: int) -> bool:
        async with self.db.transaction(short=True) as tx:
            await self.db.dialect.serialize(tx, f"pictures:{person_id}")
            if await tx.value(_PICTURES, person_id, day) >= per_day:
                return False
            await tx.execute(_add(self.db), person_id, day, character_id, 0, 0, tokens, 0)
            await tx.execute("UPDATE usage_days SET pictures = pictures + 1 "
                             "WHERE person_id = $1 AND day = $2 AND character_id = $3", person_id, day, character_id)
        return True

    async def pictures(self, person_id: int, day: str) -> int:
        return await self.db.value(_PICTURES, person_id, day)

    async def give_back_picture(self, person_id: int, character_id: int, day: str, tokens: int) -> None:
        await self.db.execute("UPDATE usage_days SET pictures = pictures - 1, tokens_out = tokens_out - $4 "
                              "WHERE person_id = $1 AND day = $2 AND character_id = $3 AND pictures > 0",
                              person_id, day, character_id, tokens)

    async def spent(self, person_id: int, first_day: str, last_day: str) -> int:
        return await self.db.value(_SPENT, person_id, first_day, last_day)

    async def hold(self, turn_id: int, person_id: int, day: str, tokens: int, allowance: int) -> bool:
        async with self.db.transaction(short=True) as tx:
            await self.db.dialect.serialize(tx, f"allowance:{person_id}")
            spent = await tx.value(_SPENT, person_id, day, day)
            held = await tx.value("SELECT COALESCE(SUM(hold_tokens), 0) FROM turns "
                                  "WHERE person_id = $1 AND status = 'running' AND id <> $2", person_id, turn_id)
            if spent + held >= allowance:
                return False
            await tx.execute("UPDATE turns SET hold_tokens = $2 WHERE id = $1", turn_id, tokens)
            return True

    async def notice_once(self, person_id: int, day: str) -> bool:
        told = await self.db.value("INSERT INTO budget_notices (person_id, day) VALUES ($1, $2) "
                                   "ON CONFLICT DO NOTHING RETURNING person_id", person_id, day)
        return told is not None

    async def totals(self, first_day: str, last_day: str) -> dict[str | None, DayTotals]:
        everyone = await self.db.one(_TOTALS.format(name="NULL", join="", group=""), first_day, last_day)
        by_character = await self.db.all(_TOTALS.format(
            name="c.name", join="JOIN characters c ON c.id = u.character_id", group="GROUP BY c.name ORDER BY c.name"),
            first_day, last_day)
        return {row["name"]: DayTotals(row["turns"], row["tokens_in"], row["tokens_out"], row["people"],
                                       row["checkins"]) for row in [everyone, *by_character]}

    async def top_spenders(self, first_day: str, last_day: str, limit: int) -> list[tuple[str, int]]:
        rows = await self.db.all(
            "SELECT u.person_id, SUM(u.tokens_in + u.tokens_out) AS spent, (SELECT m.speaker_name FROM messages m "
            "WHERE m.person_id = u.person_id ORDER BY m.id DESC LIMIT 1) AS name FROM usage_days u "
            "WHERE u.day BETWEEN $1 AND $2 GROUP BY u.person_id ORDER BY spent DESC, u.person_id LIMIT $3",
            first_day, last_day, limit)
        return [(row["name"] or f"person {row['person_id']}", row["spent"]) for row in rows]

    async def daily(self, first_day: str, last_day: str) -> dict[str, tuple[int, int]]:
        rows = await self.db.all("SELECT u.day, SUM(u.tokens_in) AS tokens_in, SUM(u.tokens_out) AS tokens_out FROM "
                                 + _SPENDING + " u WHERE u.day BETWEEN $1 AND $2 GROUP BY u.day ORDER BY u.day",
                                 first_day, last_day)
        return {row["day"]: (row["tokens_in"], row["tokens_out"]) for row in rows}
