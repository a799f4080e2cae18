"""Benchmark 2 — throughput: 200 conversations at once, 40 turns each, instant LLM.

40 turns are 80 messages, past the 50-message live window: the later turns summarize (in the
background, as in production) and recall older messages, which people's messages in ordinary
words call back. Prints turns per second and p99 latency per turn. Target: ≥ 300 turns/s
(SQLite, one process).

    python -m bench.throughput [--conversations 200] [--turns 40]
    python -m bench.throughput --postgres URL [--processes 2]

With `--postgres`, the same load runs on a PostgreSQL server (a throwaway schema) in one bot
process and then split over `--processes` bot processes sharing the database, each started as
`python -m bench.throughput --worker …` and released at the same moment. Afterwards every
conversation is read back through the store: each message stored once, in the order sent,
each answered once, directly after it (nothing lost, duplicated or reordered). Aim: two
processes ≥ TWO_PROCESSES× one (#67).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.common import (
    InstantLLM,
    bench_runtime,
    chat_line,
    machine,
    percentile,
    question,
    temp_folder,
    throwaway_schema,
)
from bot.contract import ConversationKey, Identity, IncomingMessage
from bot.memory.saved_memories import CAPS
from bot.runtime import Runtime
from storage.factory import open_store

TWO_PROCESSES = 1.6  # two processes' turns/s over one's, the target (#67)


def said(t: int) -> str:
    """A person's t-th message: small talk, and every third one a question about earlier talk."""
    return f"message {t}: " + (question(t) if t % 3 == 2 else chat_line(t))


def _key(n: int) -> ConversationKey:
    return ConversationKey("telegram", f"chat-{n}", None, "Mira")


async def _talk(runtime: Runtime, people: range, turns: int, latencies: list[float]) -> None:
    async def person(n: int) -> None:
        who = Identity("telegram", f"user-{n}")
        for t in range(turns):
            started = time.perf_counter()
            reply = await runtime.turns.handle(IncomingMessage(_key(n), who, f"Person {n}", said(t)))
            latencies.append((time.perf_counter() - started) * 1000)
            await runtime.core.conversation.delivered(reply, [])  # summaries run in the background, as in production

    await asyncio.gather(*(person(n) for n in people))


async def measure(conversations: int, turns: int) -> tuple[float, float, float]:
    """One process on an SQLite file: turns/s, latency p50 and p99 (ms)."""
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), InstantLLM())
        runtime.start()
        latencies: list[float] = []
        try:
            started = time.perf_counter()
            await _talk(runtime, range(conversations), turns, latencies)
            elapsed = time.perf_counter() - started
            await runtime.summarizer.idle()
        finally:
            await runtime.close()
    return conversations * turns / elapsed, percentile(latencies, 50), percentile(latencies, 99)


@dataclass(frozen=True)
class SharedRun:
    processes: int
    rate: float  # turns/s over all processes
    p50: float
    p99: float
    whole: bool  # nothing lost, duplicated or reordered
    bot_cpu_ms: float  # CPU time of the bot processes per turn
    database_cpu_ms: float | None  # CPU time of the PostgreSQL server per turn (None: not on this machine)


def _postgres_cpu_s() -> float | None:
    """CPU seconds the PostgreSQL server on this machine has used: its postmaster's reaped
    children (connections that ended) and its live ones. Other tenants of the machine are not
    counted. None when no server runs here (or it cannot be read)."""
    try:
        masters = [p for p in psutil.process_iter(["name", "ppid"]) if p.info["name"] in ("postgres", "postmaster")
                   and psutil.Process(p.info["ppid"]).name() not in ("postgres", "postmaster")]
        total = 0.0
        for master in masters:
            times = master.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
            for child in master.children():
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
        return total if masters else None
    except (psutil.Error, OSError):
        return None


async def measure_processes(postgres: str, processes: int, conversations: int, turns: int) -> SharedRun:
    """`processes` bot processes sharing one new PostgreSQL schema, the conversations split
    between them."""
    async with throwaway_schema(postgres) as url:
        await (await open_store(url, CAPS)).close()  # the schema made and migrated before the clock runs
        start_at = time.time() + 5 + processes  # every worker is built and waiting by then
        database_before = None
        share = conversations // processes
        workers = [await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.throughput", "--worker", "--storage", url, "--first", str(i * share),
            "--conversations", str(share if i < processes - 1 else conversations - i * share),
            "--turns", str(turns), "--start-at", str(start_at), stdout=asyncio.subprocess.PIPE)
            for i in range(processes)]
        await asyncio.sleep(max(0.0, start_at - time.time()))
        database_before = _postgres_cpu_s()
        reports = [json.loads((await worker.communicate())[0]) for worker in workers]
        database_after = _postgres_cpu_s()
        elapsed = max(r["ended"] for r in reports) - start_at
        latencies = [ms for r in reports for ms in r["latencies"]]
        whole = await _whole(url, conversations, turns)
    total = conversations * turns
    bot_cpu = sum(r["cpu_s"] for r in reports)
    database = (1000 * (database_after - database_before) / total
                if database_before is not None and database_after is not None else None)
    return SharedRun(processes, total / elapsed, percentile(latencies, 50), percentile(latencies, 99), whole,
                     1000 * bot_cpu / total, database)


async def _whole(url: str, conversations: int, turns: int) -> bool:
    """Every conversation holds its messages once each, in the order sent, each followed by its
    one reply."""
    store = await open_store(url, CAPS)
    try:
        mira = await store.characters.ensure_character("Mira")
        for n in range(conversations):
            key = _key(n)
            conversation = await store.conversations.conversation(key.platform, key.chat_id, None, mira, False)
            stored = list(reversed(await store.conversations.recent_messages(conversation.id, 2 * turns + 10)))
            if [m.role for m in stored] != ["user", "assistant"] * turns:
                return False
            if [m.content for m in stored[::2]] != [said(t) for t in range(turns)]:
                return False
    finally:
        await store.close()
    return True


async def _worker(url: str, first: int, conversations: int, turns: int, start_at: float) -> None:
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), InstantLLM(), storage_url=url)
        runtime.start()
        latencies: list[float] = []
        try:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            cpu_before = time.process_time()
            await _talk(runtime, range(first, first + conversations), turns, latencies)
            ended, cpu = time.time(), time.process_time() - cpu_before
            await runtime.summarizer.idle()
        finally:
            await runtime.close()
    print(json.dumps({"ended": ended, "latencies": latencies, "cpu_s": cpu}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--postgres", metavar="URL", help="measure on this PostgreSQL server, 1 and N processes")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--storage", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(_worker(args.storage, args.first, args.conversations, args.turns, args.start_at))
        return
    print(f"Throughput: {args.conversations} conversations x {args.turns} turns ({machine()})")
    if not args.postgres:
        rate, p50, p99 = asyncio.run(measure(args.conversations, args.turns))
        print(f"{rate:.0f} turns/s, latency p50 {p50:.1f} ms, p99 {p99:.1f} ms  (target: >= 300 turns/s)")
        return
    runs = [asyncio.run(measure_processes(args.postgres, n, args.conversations, args.turns))
            for n in (1, args.processes)]
    for run in runs:
        print(f"PostgreSQL, {run.processes} process(es): {run.rate:.0f} turns/s, latency p50 {run.p50:.1f} ms, "
              f"p99 {run.p99:.1f} ms, {'nothing lost, duplicated or reordered' if run.whole else 'NOT WHOLE'}; "
              f"CPU per turn: bot {run.bot_cpu_ms:.2f} ms, PostgreSQL server "
              + (f"{run.database_cpu_ms:.2f} ms" if run.database_cpu_ms is not None else "not on this machine"))
    print(f"{args.processes} processes / 1 process: {runs[1].rate / runs[0].rate:.2f}x  (target: >= {TWO_PROCESSES}x)")


if __name__ == "__main__":
    main()
