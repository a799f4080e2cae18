"""Who knows what (SPEC 22), what it costs: a 10,000-message scene with 3 characters, played twice —
with every character present throughout, and with presence changing (every 1,000 messages one of
Aki and Ren is dismissed for 300 messages, then invited back). For each: the summary calls the
scene's summaries took to catch up (and their tokens), and the turn overhead of 300 turns
answered in turn by the three characters (each reply shown, the summary queue running).

    python -m bench.witnesses [--size 10000] [--turns 300] [--postgres URL]
    cd <an older checkout> && python <this file> --everyone   (the same scene before witnesses: an A/B)

Prints one JSON line per run. It asks only for what trees from before SPEC 22 have too (the
store's ports, the core, bench.common's instant model), bar presence, asked only where it is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import sys

sys.path.insert(0, ".")  # the checkout this runs in, before any installed copy

import bot  # noqa: E402
from bench.common import API_KEY_ENV, InstantLLM, chat_line, percentile, store_url, temp_folder  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.contract import Asker, ConversationKey, Identity, IncomingMessage  # noqa: E402
from bot.runtime import build_runtime  # noqa: E402

CHARACTERS = ("Mira", "Aki", "Ren")
GROUP = "-100777"
ANN = Identity("telegram", "501")
ASKER = Asker("telegram", "501", (GROUP,))
AWAY_EVERY, AWAY_FOR = 1_000, 300
WARM_UP = 30


def key(character: str) -> ConversationKey:
    return ConversationKey("telegram", GROUP, None, character, is_shared=True)


async def measure(size: int, turns: int, storage_url: str | None, changing: bool) -> dict:
    with temp_folder() as folder:
        llm = InstantLLM(count_tokens=True)
        os.environ.setdefault(API_KEY_ENV, "sk-bench")
        raw = {"llm": {"base_url": "http://llm.invalid/v1", "api_key_env": API_KEY_ENV, "model": "gpt-4o-mini",
                       "context_window": 128_000, "max_retries": 0},
               "storage": {"url": storage_url} if storage_url else {"path": str(Path(folder) / "bench.sqlite3")},
               "characters": [{"name": name, "persona": f"You are {name}, who lives on the island."}
                              for name in CHARACTERS]}
        runtime = await build_runtime(parse_config(raw, Path(folder)), llm_http_client=llm.http_client())
        try:
            store, cast = runtime.store, runtime.cast
            ids = {name: cast.character(name).id for name in CHARACTERS}
            person = await store.people.person_for_identity(ANN.platform, ANN.user_id)
            scene = (await cast.conversation_for(key("Mira"))).id
            witnesses = hasattr(store, "presence")  # a tree from SPEC 22 on
            if witnesses:
                await store.presence.bring_in(scene, list(ids.values()))
            for n in range(size):
                if changing and n % AWAY_EVERY == AWAY_EVERY // 2:  # one of them leaves for a while
                    await store.presence.dismiss(scene, ids[CHARACTERS[1 + (n // AWAY_EVERY) % 2]])
                if changing and n % AWAY_EVERY == AWAY_EVERY // 2 + AWAY_FOR:
                    await store.presence.bring_in(scene, list(ids.values()))
                line = chat_line(n)
                await store.conversations.add_user_message(scene, person, "Ann", line, runtime.counter.count(line),
                                                           f"m{n}")
                if n % 50 == 49:  # as replies would: the summaries keep up while the scene is played
                    runtime.summarizer.schedule(scene)
                    await runtime.summarizer.idle()  # (awaited: the same batches on every run)
            runtime.summarizer.schedule(scene)
            await runtime.summarizer.idle()
            if storage_url:  # fresh planner statistics, as the daily upkeep (and autovacuum) keeps them
                await store.maintain(time.time(), None)
            history = {"summary_calls": llm.calls["summary"], "summary_tokens": llm.tokens["summary"],
                       "own_summaries": len(await store.presence.own_sights(scene)) if witnesses else 0}
            walls: list[float] = []
            for n in range(WARM_UP + turns):
                character = CHARACTERS[n % 3]
                model_before = llm.own_time_s
                started = time.perf_counter()
                message = IncomingMessage(key(character), ANN, "Ann", f"{character}, turn {n}: how was the night?",
                                          f"t{n}", addressed=True, asker=ASKER)
                reply = await runtime.core.conversation.handle(message)
                walls.append((time.perf_counter() - started - (llm.own_time_s - model_before)) * 1000)
                await runtime.core.conversation.delivered(reply, [f"sent-{n}"])
            await runtime.summarizer.idle()
        finally:
            await runtime.close()
    measured = walls[WARM_UP:]
    return {"tree": str(Path(bot.__file__).parent.parent), "presence": "changing" if changing else "everyone",
            "size": size, **history,
            "turn_p50_ms": round(percentile(measured, 50), 2), "turn_p99_ms": round(percentile(measured, 99), 2),
            "summary_calls_with_turns": llm.calls["summary"]}


async def run(size: int, turns: int, postgres: str | None, everyone_only: bool) -> list[dict]:
    results = []
    for changing in (False,) if everyone_only else (False, True):
        async with store_url(postgres) as url:
            results.append(await measure(size, turns, url, changing))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=10_000, help="messages in the scene before the measured turns")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL server (a throwaway schema)")
    parser.add_argument("--everyone", action="store_true", help="only the run with everyone present throughout")
    args = parser.parse_args()
    for result in asyncio.run(run(args.size, args.turns, args.postgres, args.everyone)):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
