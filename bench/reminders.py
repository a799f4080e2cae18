"""The due scan of reminders (SPEC 19) among 100,000 pending ones: how long `Reminders.due` takes
to find the ones due now (100 of them), on SQLite and on PostgreSQL, and the plan each database
chooses for it (through the partial index `reminders_due`, never a scan of the table). Prints
one JSON line.

    python -m bench.reminders [--pending 100000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from bench.common import InstantLLM, bench_runtime, temp_folder, throwaway_schema

DUE = 100  # of the pending ones, due now
NOW = 1_800_000_000.0


async def fill(runtime, pending: int) -> int:
    """`pending` reminders of 100 people in their DMs with Mira, `DUE` of them due now; Mira's id."""
    mira = runtime.cast.character("Mira").id
    rows = []
    for n in range(100):
        person = await runtime.store.people.person_for_identity("telegram", str(5000 + n))
        conversation = await runtime.store.conversations.conversation(
            "telegram", str(5000 + n), None, mira, False)
        rows.append((person, conversation.id))
    values = []
    for n in range(pending):
        person, conversation = rows[n % 100]
        due = NOW - 60 if n < DUE else NOW + 60 + n * 300  # the rest over the year ahead
        values.append((person, mira, conversation, 0, due, "Europe/Paris", f"thing {n}", "once", NOW - 3600))
    marks = ", ".join(f"${i}" for i in range(1, 10))
    async with runtime.store.db.transaction() as tx:
        for chunk in range(0, len(values), 1000):
            for row in values[chunk:chunk + 1000]:
                await tx.execute("INSERT INTO reminders (person_id, character_id, conversation_id, turn_id, due_at, "
                                 f"zone, words, repeat, created_at) VALUES ({marks})", *row)
    return mira


async def measure(pending: int, url: str | None) -> dict:
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), InstantLLM(), storage_url=url)
        try:
            mira = await fill(runtime, pending)
            if url:
                await runtime.store.db.execute("ANALYZE reminders")
            else:
                await runtime.store.db.execute("ANALYZE")
            times = []
            for _ in range(20):
                started = time.perf_counter()
                due = await runtime.store.reminders.due(mira, "telegram", NOW, 100)
                times.append((time.perf_counter() - started) * 1000)
            assert len(due) == DUE
            explain = "EXPLAIN QUERY PLAN " if url is None else "EXPLAIN "
            plan = await runtime.store.db.all(
                explain + "SELECT r.id FROM reminders r JOIN conversations c ON c.id = r.conversation_id "
                "WHERE r.character_id = $1 AND r.sending IS NULL AND r.due_at <= $2 AND c.platform = $3 "
                "ORDER BY r.due_at LIMIT $4", mira, NOW, "telegram", 100)
            lines = [" ".join(str(value) for value in row) for row in plan]
            return {"backend": "postgresql" if url else "sqlite", "pending": pending, "due": DUE,
                    "scan_ms_median": round(statistics.median(times), 2), "scan_ms_max": round(max(times), 2),
                    "plan": lines}
        finally:
            await runtime.close()


async def main_async(pending: int, postgres: str | None) -> None:
    print(json.dumps(await measure(pending, None)))
    if postgres:
        async with throwaway_schema(postgres) as url:
            print(json.dumps(await measure(pending, url)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--postgres", metavar="URL")
    args = parser.parse_args()
    asyncio.run(main_async(args.pending, args.postgres))


if __name__ == "__main__":
    main()
