"""CPU per turn of the Keepsake tree this runs in, for an A/B against another tree (the same
script run from each checkout, rounds interleaved): bench.turn_overhead's turn at one size,
with what a chat adapter does once a reply is sent (the reply's platform id stored, the previous
reply's ids looked up to take its Regenerate button away). Process CPU over the measured turns,
the background summary queue included (awaited at the end), less the fake model's own work.
Prints one JSON line.

    cd <checkout> && python <this file> [--size 1000] [--turns 300] [--postgres URL]

It asks only for what both trees have (bench.common's runtime and helpers, the turn handler,
and each tree's way of delivering), which is why it does not reuse bench.turn_overhead: it is
run as a file from the newer checkout inside the older one.

For a figure that does not drift with the machine's load, `instructions()` runs it under
`valgrind --tool=callgrind` at two --turns counts: the difference of the instruction totals over
the difference of turns is the cost of one turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, ".")  # the checkout this runs in, before any installed copy

import bot  # noqa: E402
from bench.common import (  # noqa: E402
    InstantLLM,
    bench_runtime,
    fill_memories,
    store_url,
    temp_folder,
)
from bot.contract import ConversationKey, Identity, IncomingMessage  # noqa: E402

KEY = ConversationKey("console", "bench", None, "Mira")
ANN = Identity("console", "ann")
WARM_UP = 100
HISTORY = "history message {n}: the sea was calm and the lamp turned all night"
QUESTION = "turn {n}: how was the night at the lamp?"


async def deliver(runtime, reply, platform_id: str) -> None:
    if hasattr(runtime, "core"):  # the Core (bot/contract.py): one call does both
        # a service per protocol since #49; before, one object that was every protocol
        await getattr(runtime.core, "conversation", runtime.core).delivered(reply, [platform_id])
    else:  # a tree from before the Core protocol: its adapters asked for the previous reply first
        await runtime.turns.shown_before(reply)
        await runtime.turns.delivered(reply, [platform_id])


async def measure(size: int, turns: int, storage_url: str | None, tokens_per_day: int | None = None,
                  no_tools: bool = False) -> dict[str, float]:
    with temp_folder() as folder:
        llm = InstantLLM()
        options: dict = {"limits": {"tokens_per_day": tokens_per_day}} if tokens_per_day else {}  # a tree from #38 on
        if no_tools:  # a tree from #50 on: no [tools] but the memory tools, as before SPEC 18
            options["tools"] = {"enabled": []}
        runtime = await bench_runtime(Path(folder), llm, storage_url=storage_url, **options)
        try:
            person = await runtime.store.people.person_for_identity(ANN.platform, ANN.user_id)
            await fill_memories(runtime, person)
            lookups = getattr(runtime, "cast", None) or runtime.turns  # a tree from before the Cast: its turn handler
            conversation = await lookups.conversation_for(KEY)
            for n in range(size):
                line = HISTORY.format(n=n)
                await runtime.store.conversations.add_user_message(conversation.id, person, "Ann", line,
                                                                  runtime.counter.count(line), None)
            runtime.summarizer.schedule(conversation.id)
            await runtime.summarizer.idle()
            if storage_url:
                await runtime.store.maintain(time.time(), None)
            walls: list[float] = []
            cpu_before = model_before = 0.0
            for n in range(WARM_UP + turns):
                if n == WARM_UP:
                    await runtime.summarizer.idle()
                    cpu_before, model_before = time.process_time(), llm.own_time_s
                started = time.perf_counter()
                reply = await runtime.turns.handle(IncomingMessage(KEY, ANN, "Ann", QUESTION.format(n=n)))
                walls.append((time.perf_counter() - started) * 1000)
                await deliver(runtime, reply, f"sent-{n}")
            await runtime.summarizer.idle()
            cpu_ms = (time.process_time() - cpu_before - (llm.own_time_s - model_before)) / turns * 1000
        finally:
            await runtime.close()
    measured = sorted(walls[WARM_UP:])
    return {"cpu_ms": round(cpu_ms, 3), "p50_ms": round(measured[len(measured) // 2], 3)}


async def run(size: int, turns: int, postgres: str | None, tokens_per_day: int | None,
              no_tools: bool = False) -> dict[str, float]:
    async with store_url(postgres) as url:
        return await measure(size, turns, url, tokens_per_day, no_tools)


def instructions(no_tools: bool = False, turns: tuple[int, int] = (20, 120)) -> float:
    """Instructions one turn takes (this tree, SQLite, 1,000 messages), counted by valgrind's
    callgrind in every thread: this file run at two --turns counts, the difference of the totals
    over the difference of turns, so the start-up, the filling and the warm-up cancel out. Runs
    of the same tree agree within about 0.5 %, where CPU time drifts by more than a few per cent
    with what else the machine does. Takes a few minutes (valgrind runs Python ~50× slower)."""
    totals = []
    for count in turns:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "callgrind.out"
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                            "--turns", str(count), *(["--no-tools"] if no_tools else [])],
                           check=True, capture_output=True, cwd=Path(__file__).parent.parent,
                           env={**os.environ, "PYTHONHASHSEED": "0"})
            found = re.search(r"^totals: (\d+)$", out.read_text(), re.MULTILINE)
            assert found is not None, "callgrind wrote no totals"
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / (turns[1] - turns[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1000, help="stored messages before the measured turns")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL server (a throwaway schema)")
    parser.add_argument("--tokens-per-day", type=int, help="[limits] tokens_per_day (a tree from SPEC 17 on)")
    parser.add_argument("--no-tools", action="store_true", help="[tools] enabled = [] (a tree from SPEC 18 on)")
    args = parser.parse_args()
    figures = asyncio.run(run(args.size, args.turns, args.postgres, args.tokens_per_day, args.no_tools))
    print(json.dumps({"tree": str(Path(bot.__file__).parent.parent), **figures}))


if __name__ == "__main__":
    main()
