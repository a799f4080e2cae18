"""What a memory's story costs (SPEC 21 "Every memory with its story"): nothing on a turn's path
— it is read from what is kept (receipts, the history) when the memory page is drawn. This times
that read: the person's page with 240 saved memories and 1,000 replies with their receipts
(each holding 60 memories), median and slowest of 20 page builds (the data only, not the HTML).

    python -m bench.page_story [--replies 1000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from bench.common import InstantLLM, bench_runtime, fill_memories, store_url, temp_folder
from bot.contract import ConversationKey, PageVisit

KEY = ConversationKey("console", "bench", None, "Mira")


async def measure(replies: int, storage_url: str | None) -> dict:
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), InstantLLM(), storage_url=storage_url)
        try:
            store = runtime.store
            person = await store.people.person_for_identity("console", "ann")
            await fill_memories(runtime, person)
            ids = [m.id for m in (await store.memories.list_memories(
                person, runtime.cast.character("Mira").id, None, 0, 1000))[0]]
            conversation = (await runtime.cast.conversation_for(KEY)).id
            for n in range(replies):
                said = await store.conversations.add_user_message(conversation, person, "Ann", f"message {n}", 3, None)
                turn = await store.turns.begin_turn(conversation, person, said.id)
                receipt = {"memories": {"pinned": ids[:40], "unpinned": ids[40 + n % 100:60 + n % 100]},
                           "summary": {"long_term": 1, "merged": 2, "recent": 3}, "recall": [],
                           "tokens": {"total": 4_000}}
                reply = await store.turns.finish_turn(turn, said, "Mira", f"reply {n}", 3, receipt)
                await store.turns.shown(reply.id, [])
            character = runtime.cast.character("Mira").id
            visit = PageVisit("bench", person, (character,), "csrf")
            times = []
            for _ in range(20):
                started = time.perf_counter()
                await runtime.core.page.person_page(visit)
                times.append((time.perf_counter() - started) * 1000)
        finally:
            await runtime.close()
    return {"replies": replies, "memories": len(ids), "page_data_p50_ms": round(statistics.median(times), 2),
            "page_data_max_ms": round(max(times), 2), "backend": "postgresql" if storage_url else "sqlite"}


async def run(replies: int, postgres: str | None) -> dict:
    async with store_url(postgres) as url:
        return await measure(replies, url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replies", type=int, default=1_000)
    parser.add_argument("--postgres", metavar="URL")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.replies, args.postgres))))


if __name__ == "__main__":
    main()
