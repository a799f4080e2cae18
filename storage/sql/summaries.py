"""The conversation summary (the Summaries port): tiers by generation, and the rebuild that
writes the next generation and swaps it in at once."""

from __future__ import annotations

from storage.ports import RebuildRow, Summaries, SummaryRow, SummaryStartedAgain, SummaryState
from storage.rows import REBUILD_COLUMNS, SUMMARY_COLUMNS, TIER_RANK, rebuild, summaries, summary
from storage.sql.database import Connection, Database

REBUILD_GENERATION = "(SELECT generation FROM rebuilds WHERE conversation_id = $1)"
# A character's own summary (SPEC 22) is never rebuilt: it starts again instead, as a new generation
OWN_GENERATION = 0  # the first
# What a summary's state is read from (`summary_state`): the conversation's, and a character's own
LIVE_STATE = ("summarized_pos, summary_generation AS generation, summary_failures, summary_retry_at, "
              "EXISTS (SELECT 1 FROM rebuilds WHERE conversation_id = c.id) AS rebuilding "
              "FROM conversations c WHERE id = $1")
OWN_STATE = ("summarized_pos, summary_generation AS generation, summary_failures, summary_retry_at, "
             "false AS rebuilding FROM presence WHERE conversation_id = $1")
# Where an entry of generation $2 is written (the row held: a start waits for the write to end): the
# conversation ($1) while $2 is its summary's written now, a rebuild's while one runs, else the
# live one; or the presence of the character ($10) whose own summary $2 is now
WRITTEN_NOW = ("FROM conversations WHERE id = $1 AND COALESCE((SELECT generation FROM rebuilds "
               "WHERE conversation_id = $1), summary_generation) = $2")
OWN_NOW = ("FROM presence WHERE conversation_id = $1 AND character_id = $10 "
           "AND summary_generation = CAST($2 AS INTEGER)")  # a BIGINT column: $2 is the entry's INTEGER
# Every character's own summary of the conversation ($1) starts again from its first message (SPEC 22)
OWN_START_AGAIN = ("UPDATE presence SET summarized_pos = 0, summary_generation = summary_generation + 1, "
                   "summary_failures = 0, summary_retry_at = NULL WHERE conversation_id = $1")
# ... or from the end of what is left of it, as a new generation (its entries tile its messages)
OWN_GO_ON_FROM_WHAT_IS_LEFT = (
    "UPDATE presence SET summarized_pos = COALESCE((SELECT MAX(last_pos) FROM summaries s WHERE "
    "s.conversation_id = presence.conversation_id AND s.seen_by = presence.character_id), 0), "
    "summary_generation = summary_generation + 1, summary_failures = 0, summary_retry_at = NULL "
    "WHERE conversation_id = $1")
# A rebuild of the conversation ($1) for the person ($2, or nobody) set running from its first
# message, as the generation after the live one; what a rebuild already there does follows
NEW_REBUILD = ("INSERT INTO rebuilds (conversation_id, person_id, generation, progress_pos, status, started_at) "
               "SELECT id, $2, summary_generation + 1, 0, 'running', $3 FROM conversations WHERE id = $1 "
               "ON CONFLICT (conversation_id) ")


async def start_over(db: Database, tx: Connection, conversation_id: int, gone: list[int]) -> None:
    """Inside /forgetme's transaction, once the person's messages went (`gone`: the places they
    and the replies to them held): every summary of the conversation that read them goes at
    once — of the live one, each entry over one of those places (an entry of any tier read only
    the messages of its own stretch), what a rebuild wrote so far, of each character's own
    everything from the first of those places on — and is written again: the live one by a
    rebuild of a new generation from the first message (one running starts over as that), each
    own one as a new generation from the end of what is left of it (SPEC 22). So no summary that
    read the forgotten person's words serves another prompt, and a pass that read them before is
    refused when it writes (`write_summary`, `finish_rebuild`). The live entries over none of
    those places stay and serve, as the live summary does during any rebuild, until the rebuilt
    one is swapped in (SPEC 4): the group is not left without a summary meanwhile; those among
    them people edited are corrections the rebuild carries word for word.

    The conversation's row is held first, as a summary's write holds it, and after the messages
    (a turn that ends holds its own row, then the conversation's): no two take them crosswise."""
    await tx.execute("UPDATE conversations SET summarized_pos = 0, summary_failures = 0, summary_retry_at = NULL "
                     "WHERE id = $1", conversation_id)
    live = await tx.all("SELECT id, first_pos, last_pos FROM summaries WHERE conversation_id = $1 "
                        "AND seen_by IS NULL AND generation = (SELECT summary_generation FROM conversations "
                        "WHERE id = $1)", conversation_id)
    kept = [e["id"] for e in live if not any(e["first_pos"] <= pos <= e["last_pos"] for pos in gone)]
    await tx.execute(f"DELETE FROM summaries WHERE conversation_id = $1 AND seen_by IS NULL "
                     f"AND NOT (id {db.dialect.in_ids(2)})", conversation_id, db.dialect.ids(kept))
    # an own summary is written forward from where it ends: what lies before the first place that
    # goes never read those places, and stays
    await tx.execute("DELETE FROM summaries WHERE conversation_id = $1 AND seen_by IS NOT NULL AND last_pos >= $2",
                     conversation_id, min(gone))
    await tx.execute(OWN_GO_ON_FROM_WHAT_IS_LEFT, conversation_id)
    await tx.execute(  # one running starts over (whoever asked for it is told when this one ends)
        f"{NEW_REBUILD}DO UPDATE SET generation = rebuilds.generation + 1, progress_pos = 0, status = 'running', "
        "error = NULL", conversation_id, None, db.clock())


def summary_state(row) -> SummaryState:
    return SummaryState(row["summarized_pos"], row["generation"], row["summary_failures"], row["summary_retry_at"],
                        bool(row["rebuilding"]))


class SQLSummaries(Summaries):
    def __init__(self, db: Database):
        self.db = db

    async def summary_state(self, conversation_id: int, seen_by: int | None = None) -> SummaryState:
        if seen_by is not None:  # a character's own (SPEC 22); none yet: it starts from the first message
            row = await self.db.short.one(f"SELECT {OWN_STATE} AND character_id = $2", conversation_id, seen_by)
            return summary_state(row) if row else SummaryState(0, OWN_GENERATION, 0, None)
        return summary_state(await self.db.short.one(f"SELECT {LIVE_STATE}", conversation_id))

    async def summary_states(self, conversation_id: int) -> list[tuple[int | None, SummaryState]]:
        rows = await self.db.short.all(f"SELECT NULL AS seen_by, {LIVE_STATE} UNION ALL SELECT character_id, "
                                       f"{OWN_STATE} AND own_sight ORDER BY seen_by NULLS FIRST", conversation_id)
        return [(row["seen_by"], summary_state(row)) for row in rows]

    async def summaries(self, conversation_id: int, generation: int | None = None,
                        seen_by: int | None = None) -> list[SummaryRow]:
        if seen_by is not None:
            rows = await self.db.short.all(f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE conversation_id = $1 "
                                           f"AND seen_by = $2 ORDER BY {TIER_RANK}, first_pos", conversation_id, seen_by)
            return summaries(rows)
        rows = await self.db.short.all(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE conversation_id = $1 AND seen_by IS NULL AND generation = "
            "COALESCE(CAST($2 AS INTEGER), (SELECT summary_generation FROM conversations WHERE id = $1)) "
            f"ORDER BY {TIER_RANK}, first_pos", conversation_id, generation)
        return summaries(rows)

    async def write_summary(
        self, conversation_id: int, generation: int, tier: str, content: str, tokens: int,
        first_pos: int, last_pos: int, replaces: list[int], covered_pos: int | None = None,
        edited: bool = False, seen_by: int | None = None,
    ) -> SummaryRow:
        async with self.db.transaction(short=True) as tx:
            row = await tx.one(
                "INSERT INTO summaries (conversation_id, generation, tier, content, tokens, first_pos, last_pos, "
                "edited, created_at, seen_by) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 "
                f"{OWN_NOW if seen_by is not None else WRITTEN_NOW}{self.db.dialect.for_update} "
                f"RETURNING {SUMMARY_COLUMNS}", conversation_id, generation, tier, content, tokens, first_pos,
                last_pos, edited, self.db.clock(), seen_by)
            if row is None:  # its generation is not written now: what the pass read may hold deleted words
                whose = f"character {seen_by}'s own summary" if seen_by is not None else "the summary"
                raise SummaryStartedAgain(f"{whose} of conversation {conversation_id}, generation {generation}")
            await tx.execute(f"DELETE FROM summaries WHERE id {self.db.dialect.in_ids(1)} AND conversation_id = $2",
                             self.db.dialect.ids(replaces), conversation_id)
            if covered_pos is not None and seen_by is not None:
                await tx.execute(
                    "UPDATE presence SET summarized_pos = CASE WHEN summarized_pos > $1 THEN summarized_pos ELSE $1 END, "
                    "summary_failures = 0, summary_retry_at = NULL WHERE conversation_id = $2 AND character_id = $3",
                    covered_pos, conversation_id, seen_by)
            elif covered_pos is not None:
                await tx.execute(
                    "UPDATE conversations SET summarized_pos = CASE WHEN summarized_pos > $1 THEN summarized_pos "
                    "ELSE $1 END, summary_failures = 0, summary_retry_at = NULL WHERE id = $2 "
                    "AND summary_generation = $3", covered_pos, conversation_id, generation)
                await tx.execute(
                    "UPDATE rebuilds SET progress_pos = CASE WHEN progress_pos > $1 THEN progress_pos ELSE $1 END "
                    "WHERE conversation_id = $2 AND generation = $3", covered_pos, conversation_id, generation)
        return summary(row)

    async def edit_summary(self, conversation_id: int, summary_id: int, content: str, tokens: int,
                           seen_by: int | None = None) -> bool:
        if seen_by is not None:
            return await self.db.execute(
                "UPDATE summaries SET content = $1, tokens = $2, edited = true WHERE id = $3 AND conversation_id = $4 "
                "AND seen_by = $5", content, tokens, summary_id, conversation_id, seen_by) > 0
        return await self.db.execute(
            "UPDATE summaries SET content = $1, tokens = $2, edited = true WHERE id = $3 AND conversation_id = $4 "
            "AND seen_by IS NULL AND generation = (SELECT summary_generation FROM conversations WHERE id = $4)",
            content, tokens, summary_id, conversation_id) > 0

    async def set_summary_retry(self, conversation_id: int, failures: int, retry_at: float | None,
                                seen_by: int | None = None) -> None:
        if seen_by is not None:
            await self.db.execute("UPDATE presence SET summary_failures = $1, summary_retry_at = $2 "
                                  "WHERE conversation_id = $3 AND character_id = $4",
                                  failures, retry_at, conversation_id, seen_by)
            return
        await self.db.execute("UPDATE conversations SET summary_failures = $1, summary_retry_at = $2 WHERE id = $3",
                              failures, retry_at, conversation_id)

    async def due_summary_retries(self, now: float) -> list[int]:
        rows = await self.db.all(
            "SELECT id FROM conversations WHERE summary_retry_at IS NOT NULL AND summary_retry_at <= $1 UNION "
            "SELECT conversation_id FROM presence WHERE summary_retry_at IS NOT NULL AND summary_retry_at <= $1", now)
        return sorted(r["id"] for r in rows)

    async def start_rebuild(self, conversation_id: int, person_id: int | None) -> RebuildRow | None:
        async with self.db.transaction() as tx:
            generation = await tx.value(f"{NEW_REBUILD}DO NOTHING RETURNING generation", conversation_id, person_id,
                                        self.db.clock())
            if generation is None:
                return None  # one runs already
            # Anything a crashed earlier attempt wrote for that generation goes; and the scene's
            # characters' own summaries (SPEC 22) start again from the first message.
            await tx.execute("DELETE FROM summaries WHERE conversation_id = $1 AND (generation = $2 "
                             "OR seen_by IS NOT NULL)", conversation_id, generation)
            await tx.execute(OWN_START_AGAIN, conversation_id)
        return RebuildRow(conversation_id, person_id, generation, 0, "running", None)

    async def rebuild(self, conversation_id: int) -> RebuildRow | None:
        row = await self.db.one(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE conversation_id = $1", conversation_id)
        return rebuild(row) if row else None

    async def rebuilds(self, status: str) -> list[RebuildRow]:
        return [rebuild(r) for r in await self.db.all(f"SELECT {REBUILD_COLUMNS} FROM rebuilds WHERE status = $1",
                                                      status)]

    async def set_rebuild_status(self, conversation_id: int, status: str, error: str | None = None) -> None:
        await self.db.execute("UPDATE rebuilds SET status = $1, error = $2 WHERE conversation_id = $3",
                              status, error, conversation_id)

    async def restart_rebuild(self, conversation_id: int) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(f"DELETE FROM summaries WHERE conversation_id = $1 AND seen_by IS NULL "
                             f"AND generation = {REBUILD_GENERATION}",
                             conversation_id)
            await tx.execute("UPDATE rebuilds SET progress_pos = 0, status = 'running', error = NULL "
                             "WHERE conversation_id = $1", conversation_id)

    async def cancel_rebuild(self, conversation_id: int) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(f"DELETE FROM summaries WHERE conversation_id = $1 AND seen_by IS NULL "
                             f"AND generation = {REBUILD_GENERATION}",
                             conversation_id)
            await tx.execute("DELETE FROM rebuilds WHERE conversation_id = $1", conversation_id)

    async def finish_rebuild(self, conversation_id: int, generation: int) -> None:
        async with self.db.transaction() as tx:
            row = await tx.one("SELECT generation, progress_pos FROM rebuilds WHERE conversation_id = $1"
                               f"{self.db.dialect.for_update}", conversation_id)
            if row is None or row["generation"] != generation:
                raise SummaryStartedAgain(f"the rebuild of conversation {conversation_id}, generation {generation}")
            await tx.execute("DELETE FROM summaries WHERE conversation_id = $1 AND seen_by IS NULL "
                             "AND generation <> $2", conversation_id, row["generation"])
            await tx.execute(
                "UPDATE conversations SET summary_generation = $1, summarized_pos = $2, summary_failures = 0, "
                "summary_retry_at = NULL WHERE id = $3", row["generation"], row["progress_pos"], conversation_id)
            await tx.execute("DELETE FROM rebuilds WHERE conversation_id = $1", conversation_id)
