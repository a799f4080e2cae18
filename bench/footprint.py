"""Benchmark 5 — footprint: resident memory with 1,000 active conversations.

Starts the core (store, characters, LLM client, scheduler), measures resident memory, then gives
each of 1,000 conversations (1,000 different people) a history of 60 messages and runs 3 turns in
each (every conversation's live window is full), and measures again.
Target: ≤ 100 MB over start-up.

    python -m bench.footprint [--conversations 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
from pathlib import Path

import psutil

from bench.common import InstantLLM, bench_runtime, machine, temp_folder
from bot.contract import ConversationKey, Identity, IncomingMessage

HISTORY = 60
LINE = ("history message %d: we walked the harbour wall at dusk, counted the fishing boats coming in "
        "and talked about the storm that is due on Thursday")


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


async def measure(conversations: int) -> tuple[float, float]:
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), InstantLLM())
        runtime.start()
        try:
            warm = IncomingMessage(ConversationKey("telegram", "warm", None, "Mira"), Identity("telegram", "w"),
                                   "W", "hello")
            await runtime.core.conversation.delivered(await runtime.turns.handle(warm), [])
            start = rss_mb()

            async def person(n: int) -> None:
                key = ConversationKey("telegram", f"chat-{n}", None, "Mira")
                who = Identity("telegram", f"user-{n}")
                person_id = await runtime.store.people.person_for_identity("telegram", f"user-{n}")
                conversation = await runtime.cast.conversation_for(key)
                for h in range(HISTORY):
                    await runtime.store.conversations.add_user_message(conversation.id, person_id, f"Person {n}", LINE % h, 40, None)
                for t in range(3):
                    reply = await runtime.turns.handle(IncomingMessage(key, who, f"Person {n}", f"message {t}"))
                    await runtime.core.conversation.delivered(reply, [])

            for first in range(0, conversations, 100):  # 100 at a time, as a busy bot would see them
                await asyncio.gather(*(person(n) for n in range(first, min(first + 100, conversations))))
            await runtime.summarizer.idle()
            return start, rss_mb()
        finally:
            await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=1_000)
    args = parser.parse_args()
    start, end = asyncio.run(measure(args.conversations))
    print(f"Footprint with {args.conversations:,} active conversations ({machine()})")
    print(f"resident memory: {start:.1f} MB after start-up, {end:.1f} MB after; "
          f"+{end - start:.1f} MB (target: <= 100 MB over start-up)")


if __name__ == "__main__":
    main()
