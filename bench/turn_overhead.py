"""Benchmark 1 — turn overhead: everything a turn costs except the LLM's own time.

The LLM answers at once (in process, through the real openai client). The turn is the real one: the
memory tools offered with every request, and the summary queue running in the background after each
reply (its work shares the process, as in production). The conversation holds 1k, 10k and 100k
stored messages, every other one a reply with its turn (as a real history holds them: `answered`),
and the person has 240 saved memories (100 + 20 in both scopes). Prints p50 and p99 per turn, and
the database round trips a turn makes (with its delivery and the summaries it sets off:
`RoundTrips`). Targets (#67): p50 ≤ 2.5 ms, p99 ≤ 10 ms, and flat: the 100k figure within 1.5× of
the 1k figure.

    python -m bench.turn_overhead [--turns 300] [--streamed CHUNKS] [--postgres URL] [--no-recall]
                                  [--semantic]

On PostgreSQL (a local server) the targets are p50 ≤ 7 ms and p99 ≤ 30 ms at 100k messages, in
≤ 10 round trips a turn.
With `--semantic`, recall by meaning is on too (every stored message embedded first; the
vectors come from the in-process fake, at once, so what is measured is the bot's own work).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench.common import (
    InstantLLM,
    RoundTrips,
    answered,
    bench_runtime,
    chat_line,
    fill_memories,
    machine,
    percentile,
    question,
    store_url,
    temp_folder,
)
from bot.contract import ConversationKey, Identity, IncomingMessage
from bot.model.llm import TextSink
from bot.runtime import Runtime

SIZES = (1_000, 10_000, 100_000)
TARGET_P50_MS = {"SQLite": 2.5, "PostgreSQL": 7}  # #67
TARGET_P99_MS = {"SQLite": 10, "PostgreSQL": 30}
TARGET_ROUND_TRIPS = 10  # PostgreSQL, a turn with its delivery and the summaries it sets off (#67)
EMBEDDING_MODEL = "text-embedding-3-small"
WARM_UP = 100  # turns not measured at each size: a bot process is long-lived
KEY = ConversationKey("console", "bench", None, "Mira")
ANN = Identity("console", "ann")


async def _turns(
    runtime: Runtime, llm: InstantLLM, count: int, on_text: TextSink | None = None, trips: RoundTrips | None = None,
    warm_up: int = WARM_UP,
) -> tuple[list[float], list[float], float]:
    """Run `count` turns after `warm_up` more; their overheads (ms, without the fake model's own
    work), their whole times (ms) and the database round trips a turn made (with its delivery
    and the background summaries it set off)."""
    overheads, timings = [], []
    trips_before = 0
    for i in range(count + warm_up):
        message = IncomingMessage(KEY, ANN, "Ann", f"turn {i}: {question(i)}")
        model_before = llm.own_time_s
        started = time.perf_counter()
        reply = await runtime.turns.handle(message, on_text=on_text)
        elapsed = time.perf_counter() - started
        # the summary queue runs in the background, as in production
        await runtime.core.conversation.delivered(reply, [])
        if i == warm_up - 1 and trips is not None:
            await runtime.summarizer.idle()
            trips_before = trips.count
        if i >= warm_up:
            timings.append(elapsed * 1000)
            overheads.append((elapsed - (llm.own_time_s - model_before)) * 1000)
    await runtime.summarizer.idle()
    return overheads, timings, (trips.count - trips_before) / count if trips is not None else 0.0


async def measure(
    turns: int, streamed_chunks: int = 0, sizes: tuple[int, ...] = SIZES, postgres: str | None = None,
    recall: bool = True, semantic: bool = False,
) -> dict[int, tuple[float, float, float, float, float]]:
    """p50 and p99 of the overhead, then of the whole turn, at each size. With `streamed_chunks`,
    every reply is streamed in that many chunks, as Discord and Telegram get it. With `postgres`
    (a server URL), the store is a new schema on that server instead of an SQLite file. Without
    `recall`, turns leave recall out (to measure what it adds); with `semantic`, they recall by
    meaning too."""
    async with store_url(postgres) as url:
        return await _measure(turns, streamed_chunks, sizes, url, recall, semantic)


async def _measure(turns: int, streamed_chunks: int, sizes: tuple[int, ...], storage_url: str | None,
                   recall: bool, semantic: bool) -> dict[int, tuple[float, float, float, float, float]]:
    results: dict[int, tuple[float, float, float, float, float]] = {}
    with temp_folder() as folder:
        llm = InstantLLM()
        if streamed_chunks:
            llm.streamed(streamed_chunks)
        runtime = await bench_runtime(Path(folder), llm, storage_url=storage_url,
                                      embedding_model=EMBEDDING_MODEL if semantic else None)
        if not recall:
            runtime.turns.recall_tokens = 0
        counted = RoundTrips(runtime.store.db)
        try:
            person = await runtime.store.people.person_for_identity(ANN.platform, ANN.user_id)
            await fill_memories(runtime, person)
            conversation = await runtime.cast.conversation_for(KEY)
            stored = 0
            for size in sizes:
                while stored < size:  # a long history, written the way turns write it
                    await answered(runtime, conversation.id, person, f"history message {stored}: {chat_line(stored)}",
                                   f"history reply {stored + 1}: {chat_line(stored + 1)}")
                    stored += 2
                if semantic:  # a live database's vectors keep up, as the background job sees to
                    while await runtime.semantic.embed_waiting():
                        pass
                runtime.summarizer.schedule(conversation.id)  # a live conversation's summary keeps up
                await runtime.summarizer.idle()
                if storage_url:  # the daily upkeep (with PostgreSQL's planner statistics), as in a live database
                    await runtime.store.maintain(time.time(), None)
                overheads, timings, trips = await _turns(runtime, llm, turns, _ignore if streamed_chunks else None,
                                                         counted)
                stored += 2 * (turns + WARM_UP)
                results[size] = (percentile(overheads, 50), percentile(overheads, 99),
                                 percentile(timings, 50), percentile(timings, 99), trips)
        finally:
            await runtime.close()
    return results


async def _ignore(text: str) -> None:
    """An adapter's stream sink that shows nothing (the adapters' own work is theirs)."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--streamed", type=int, default=0, metavar="CHUNKS",
                        help="stream every reply in this many chunks, as Discord and Telegram get it")
    parser.add_argument("--postgres", metavar="URL", help="measure on this PostgreSQL server (a throwaway schema)")
    parser.add_argument("--no-recall", action="store_true", help="turns leave recall out")
    parser.add_argument("--semantic", action="store_true", help="turns recall by meaning too")
    args = parser.parse_args()
    results = asyncio.run(measure(args.turns, args.streamed, postgres=args.postgres, recall=not args.no_recall,
                                  semantic=args.semantic))
    streamed = f", replies streamed in {args.streamed} chunks" if args.streamed else ""
    backend = "PostgreSQL" if args.postgres else "SQLite"
    recall = ", recall off" if args.no_recall else (", recall by meaning too" if args.semantic else "")
    print(f"Turn overhead on {backend} ({args.turns} turns each{streamed}{recall}; {machine()})")
    print("stored messages | p50 ms | p99 ms | with the fake model's own work: p50 ms | p99 ms | round trips a turn")
    for size, (p50, p99, whole50, whole99, trips) in results.items():
        print(f"{size:>15,} | {p50:6.2f} | {p99:6.2f} | {whole50:6.2f} | {whole99:6.2f} | {trips:5.1f}")
    flat = results[SIZES[-1]][0] / results[SIZES[0]][0]
    print(f"p50 at 100k / p50 at 1k: {flat:.2f}x  (targets: p50 <= {TARGET_P50_MS[backend]} ms, "
          f"p99 <= {TARGET_P99_MS[backend]} ms, ratio <= 1.5x" + (f", <= {TARGET_ROUND_TRIPS} round trips a turn)" if args.postgres else ")"))


if __name__ == "__main__":
    main()
