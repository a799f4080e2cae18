"""What the memory page costs the bot (#67 item 4): a turn's latency while 8 clients flood `GET /`.

The page is served as `python -m bot` serves it: by a process of its own beside the bot's
(bot/page/process.py, `python -m bot page` on the same SQLite file). A person with 240 saved
memories and a conversation of 1,000 messages (its last replies with their receipts) is signed
in; 8 clients in another process ask for their page as fast as it answers, over loopback, all
on one session (with `--sessions N`, spread over N sessions of theirs: a session's own requests
are bounded, adapters/web/server.py SESSION_REQUESTS).

Turns (bench.turn_overhead's: the model answers at once in process) are timed in blocks, quiet
and flooded by turns — quiet, flooded, flooded, quiet, and again — so that the machine's own
drift over the run falls on both alike; each block begins after SETTLE turns not timed. Target:
the flood raises a turn's p99 by at most 20 %, all flooded blocks' turns against all quiet ones.

    python -m bench.page_flood [--turns 3000] [--clients 8] [--blocks 6] [--sessions 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiohttp

from bench.common import (
    API_KEY_ENV,
    LLM_URL,
    PERSONA,
    InstantLLM,
    ann_with_history,
    bench_runtime,
    chat_line,
    machine,
    percentile,
    temp_folder,
)
from bench.turn_overhead import ANN, KEY, _turns
from bot.contract import Asker, CommandContext
from bot.page.process import PageProcess
from bot.runtime import Runtime

HISTORY = 1_000
COOKIE = "keepsake_session"
PORT = 18_081
# The config the page's process reads: bench_runtime's, on the same file, with [web].
PAGE_CONFIG = """
[llm]
base_url = "{llm}"
api_key_env = "{key}"
model = "gpt-4o-mini"
[storage]
path = "{path}"
[web]
port = {port}
[[characters]]
name = "Mira"
persona = "{persona}"
"""
SETTLE = 20  # turns not timed at the start of a block: the flood (or its end) reaches its pace
# The clients, in a process of their own: they ask while told `flood`; told `quiet`, they finish
# what they asked and wait; told `end`, they say how many pages they got, of how many, in how long.
FLOOD = textwrap.dedent("""
    import asyncio, sys, time, aiohttp
    url, clients, cookies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    asking, served, waiting = asyncio.Event(), [], []
    async def client(http, cookie):
        while True:
            await asking.wait()
            waiting.append(1)
            try:
                async with http.get(url, headers={"Cookie": cookie}) as answer:
                    await answer.read()
                    served.append(answer.status)
            finally:
                waiting.pop()
    async def main():
        flooded_s, began = 0.0, None
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as http:
            tasks = [asyncio.create_task(client(http, cookies[n % len(cookies)])) for n in range(clients)]
            while (command := (await asyncio.to_thread(sys.stdin.readline)).strip()) != "end":
                if command == "flood":
                    asking.set()
                    began = time.monotonic()
                elif began is not None:
                    asking.clear()
                    while waiting:
                        await asyncio.sleep(0.01)
                    flooded_s += time.monotonic() - began
                    began = None
                print(command, flush=True)
            for task in tasks:
                task.cancel()
            print(len([s for s in served if s == 200]), len(served), flooded_s, flush=True)
    asyncio.run(main())
""")


def tell(flood: subprocess.Popen, command: str) -> None:
    """Tell the clients `flood` or `quiet`, and wait until they are at it."""
    flood.stdin.write(command + "\n")
    flood.stdin.flush()
    assert flood.stdout.readline().strip() == command


async def signed_in_cookie(runtime: Runtime, base: str) -> str:
    """Ann's session, opened the way a person opens it: `/memory page`'s link, then its button."""
    ctx = CommandContext(KEY, ANN, "Ann", Asker(ANN.platform, ANN.user_id))
    said = (await runtime.commands.run_text(ctx, "/memory page")).text
    link = re.search(r"/open/(\S+)", said)
    assert link, said
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/open", data={"code": link[1].rstrip(".")}, allow_redirects=False,
                             headers={"Origin": base, "Sec-Fetch-Site": "same-origin"}) as answer:
            return f"{COOKIE}={answer.cookies[COOKIE].value}"


async def measure(turns: int, clients: int, blocks: int = 6, sessions: int = 1) -> dict:
    """`turns` timed quiet and as many flooded, in `blocks` blocks of each; the clients spread
    over `sessions` sessions."""
    with temp_folder() as folder:
        llm = InstantLLM()
        runtime = await bench_runtime(Path(folder), llm, web={"port": PORT})
        config = Path(folder) / "config.toml"
        config.write_text(PAGE_CONFIG.format(llm=LLM_URL, key=API_KEY_ENV, path=Path(folder) / "bench.sqlite3",
                                             port=PORT, persona=PERSONA.format(name="Mira")))
        page = PageProcess(config, os.environ.get("KEEPSAKE_LOG_LEVEL", "WARNING"))
        quiet: list[float] = []
        flooded: list[float] = []
        try:
            await ann_with_history(runtime, KEY, ANN, (f"history message {n}: {chat_line(n)}" for n in range(HISTORY)))
            assert await page.start(), "the page's process did not listen"
            base = f"http://127.0.0.1:{PORT}"
            cookies = [await signed_in_cookie(runtime, base) for _ in range(sessions)]
            await _turns(runtime, llm, 0)  # the warm-up: a bot process is long-lived
            flood = subprocess.Popen([sys.executable, "-c", FLOOD, f"{base}/", str(clients), *cookies],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                for block in range(2 * blocks):  # quiet, flooded, flooded, quiet, quiet, flooded, …
                    flooding = block % 4 in (1, 2)
                    await asyncio.to_thread(tell, flood, "flood" if flooding else "quiet")
                    timed, _, _ = await _turns(runtime, llm, turns // blocks, warm_up=SETTLE)
                    (flooded if flooding else quiet).extend(timed)
                out, _ = await asyncio.to_thread(flood.communicate, "quiet\nend\n", 60)
            finally:
                flood.kill()
            ok, asked, seconds = out.split()[-3:]
        finally:
            await page.stop()
            await runtime.close()
    return {
        "quiet_p50": percentile(quiet, 50), "quiet_p99": percentile(quiet, 99),
        "flood_p50": percentile(flooded, 50), "flood_p99": percentile(flooded, 99),
        "rise": percentile(flooded, 99) / percentile(quiet, 99) - 1, "pages": int(ok), "asked": int(asked),
        "pages_per_s": int(ok) / float(seconds), "clients": clients, "turns": len(quiet), "blocks": blocks,
        "sessions": sessions,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=3000, help="turns timed quiet, and as many flooded")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=6, help="blocks of each, interleaved")
    parser.add_argument("--sessions", type=int, default=1, help="the clients spread over this many sessions")
    args = parser.parse_args()
    started = time.monotonic()
    result = asyncio.run(measure(args.turns, args.clients, args.blocks, args.sessions))
    print(f"A turn while {result['clients']} clients flood GET / over {result['sessions']} session(s) "
          f"({result['turns']} turns each, in "
          f"{result['blocks']} blocks; {machine()}; {time.monotonic() - started:.0f} s)")
    print(f"quiet: p50 {result['quiet_p50']:.2f} ms, p99 {result['quiet_p99']:.2f} ms; flooded: p50 "
          f"{result['flood_p50']:.2f} ms, p99 {result['flood_p99']:.2f} ms — p99 {100 * result['rise']:+.0f} % "
          f"(target ≤ +20 %); {result['pages']} pages served of {result['asked']} asked, "
          f"{result['pages_per_s']:.1f} a second")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
