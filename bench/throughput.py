"""Benchmark 2 — throughput: 200 conversations at once, 20 turns each, instant LLM.

Prints turns per second and p99 latency per turn. Target: ≥ 300 turns/s.

    python -m bench.throughput [--conversations 200] [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench.common import InstantLLM, bench_runtime, machine, percentile, temp_folder
from bot.contract import ConversationKey, Identity, IncomingMessage


async def measure(conversations: int, turns: int) -> tuple[float, float, float]:
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), InstantLLM())
        runtime.start()
        latencies: list[float] = []

        async def person(n: int) -> None:
            key = ConversationKey("telegram", f"chat-{n}", None, "Mira")
            who = Identity("telegram", f"user-{n}")
            for t in range(turns):
                started = time.perf_counter()
                reply = await runtime.turns.handle(IncomingMessage(key, who, f"Person {n}", f"message {t}"))
                latencies.append((time.perf_counter() - started) * 1000)
                await runtime.turns.delivered(reply)  # summaries run in the background, as in production

        try:
            started = time.perf_counter()
            await asyncio.gather(*(person(n) for n in range(conversations)))
            elapsed = time.perf_counter() - started
            await runtime.summarizer.idle()
        finally:
            await runtime.close()
    return conversations * turns / elapsed, percentile(latencies, 50), percentile(latencies, 99)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    rate, p50, p99 = asyncio.run(measure(args.conversations, args.turns))
    print(f"Throughput: {args.conversations} conversations x {args.turns} turns ({machine()})")
    print(f"{rate:.0f} turns/s, latency p50 {p50:.1f} ms, p99 {p99:.1f} ms  (target: >= 300 turns/s)")


if __name__ == "__main__":
    main()
