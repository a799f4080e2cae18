"""Benchmark 8 — check-ins (SPEC 14): one scan over 100,000 one-to-one conversations of which
100 are due, on SQLite (and PostgreSQL with --postgres). The 100 due ones are made the way people
make them (4 messages each, answered); the 99,900 others, where people wrote lately, are written
straight into the tables to save the setup time. The scan is the real one: the due ones found
through the index, each claimed, written by the (instant, in-process) model from what a turn
reads, stored with its "sent" mark, and handed to an adapter that records it. Both are timed:
finding the due ones, and the whole scan — whose sends are spaced at PER_SECOND by design (a
bot's rate on its platform), so the work besides that spacing is reported too. Target: the
work well under a second.

    python -m bench.checkins [--conversations 100000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Sequence

from bench.common import InstantLLM, bench_runtime, machine, store_url, temp_folder
from bot.contract import Asker, Button, ConversationKey, Identity, IncomingMessage
from bot.writing_first.outbox import PER_SECOND

DUE = 100
HOUR = 3600.0
AFTER_HOURS = 48


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Recorder:
    """An adapter writing first on Telegram: it records what it is given."""

    platform = "telegram"
    character_name = "Mira"

    def __init__(self) -> None:
        self.sent = 0

    async def asker_for(self, key: ConversationKey, user_id: str) -> Asker:
        return Asker("telegram", user_id, (key.chat_id,), private=True)  # a DM, as Telegram would say

    async def write_first(self, key: ConversationKey, text: str, buttons: list[list[Button]],
                          stale: Sequence[str] = ()) -> list[str]:
        self.sent += 1
        return [str(self.sent)]


FILLER = """
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
    INSERT INTO conversations (platform, chat_id, thread_id, character_id, is_shared, created_at)
    SELECT 'telegram', 'filler-' || CAST(i AS TEXT), '', $2, false, $3 FROM n
"""
FILLER_ABSENCES = """
    INSERT INTO checkins (conversation_id, character_id, platform, person_id, messages, last_at, waiting)
    SELECT id, character_id, platform, $1, 4, $2, true FROM conversations WHERE chat_id LIKE 'filler-%'
"""


async def measure(conversations: int, postgres: str | None = None) -> tuple[float, float, int]:
    """(seconds finding the due ones took, seconds the whole scan took, check-ins sent)."""
    clock = Clock()
    with temp_folder() as folder:
        async with store_url(postgres) as url:
            return await _measure(Path(folder), clock, conversations, url)


async def _measure(folder: Path, clock: Clock, conversations: int, url: str | None) -> tuple[float, float, int]:
    runtime = await bench_runtime(folder, InstantLLM(), clock, storage_url=url,
                                  checkins={"after_hours": AFTER_HOURS})
    try:
        for n in range(DUE):  # people who wrote 4 messages two days and more ago
            key = ConversationKey("telegram", f"due-{n}", None, "Mira")
            for m in range(4):
                reply = await runtime.turns.handle(IncomingMessage(key, Identity("telegram", f"due-{n}"), f"Person {n}",
                                                                   f"message {m}: the lamp, the boats and the weather"))
                await runtime.core.conversation.delivered(reply, [])  # shown: the next turn may start
        clock.now += AFTER_HOURS * HOUR + 60
        db = runtime.store.db
        filler_person = await runtime.store.people.person_for_identity("telegram", "filler")
        character = runtime.cast.character("Mira").id
        await db.execute(FILLER, conversations - DUE, character, clock.now)
        await db.execute(FILLER_ABSENCES, filler_person, clock.now - HOUR)  # wrote an hour ago: not due
        await runtime.store.maintain(clock.now, None)  # planner statistics, as in a live database
        started = time.perf_counter()
        found = await runtime.store.checkins.due(character, "telegram", clock.now - AFTER_HOURS * HOUR, DUE)
        finding = time.perf_counter() - started
        assert len(found) == DUE
        recorder = Recorder()
        with runtime.core.presence.writing_first(recorder):
            started = time.perf_counter()
            sent = await runtime.checkins.scan("Mira")
            took = time.perf_counter() - started
        assert sent == recorder.sent
        return finding, took, sent
    finally:
        await runtime.close()


def spacing(sent: int) -> float:
    """Seconds a scan that sent `sent` check-ins spent waiting between sends, by design (a
    platform's rate: PER_SECOND)."""
    return max(sent - 1, 0) / PER_SECOND


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--postgres", metavar="URL", help="measure on this PostgreSQL server too (a throwaway schema)")
    args = parser.parse_args()
    print(f"Check-in scan over {args.conversations:,} one-to-one conversations, {DUE} due ({machine()})")
    for name, url in [("SQLite", None)] + ([("PostgreSQL", args.postgres)] if args.postgres else []):
        finding, took, sent = asyncio.run(measure(args.conversations, url))
        paced = spacing(sent)
        print(f"{name}: finding the due ones {finding * 1000:.1f} ms; the whole scan, {sent} check-ins written "
              f"by an instant model, stored and handed over, {took * 1000:.0f} ms, of which {paced * 1000:.0f} ms "
              f"is the spacing of {PER_SECOND} sends a second; the work besides it {(took - paced) * 1000:.0f} ms "
              "(target: well under 1 s)")


if __name__ == "__main__":
    main()
