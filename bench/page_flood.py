"""What the memory page costs the bot (#67 item 4): a turn's latency while 8 clients flood `GET /`.

The page is served as `python -m bot` serves it: by a process of its own beside the bot's
(bot/page/process.py, `python -m bot page` on the same SQLite file). A person with 240 saved memories and a conversation of 1,000 messages (its last replies with their
receipts) is signed in; 8 clients in another process ask for their page as fast as it answers,
over loopback. Turns (bench.turn_overhead's: the model answers at once in process) are timed
without the flood, with it, and without it again. Target: the flood raises a turn's p99 by at
most 20 % (against the mean of the two quiet runs).

    python -m bench.page_flood [--turns 300] [--clients 8]
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
FLOOD = textwrap.dedent("""
    import asyncio, sys, time, aiohttp
    url, cookie, clients = sys.argv[1], sys.argv[2], int(sys.argv[3])
    async def client(http, served, stop):
        while not stop.is_set():
            async with http.get(url, headers={"Cookie": cookie}) as answer:
                await answer.read()
                served.append(answer.status)
    async def main():
        served, stop = [], asyncio.Event()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as http:
            tasks = [asyncio.create_task(client(http, served, stop)) for _ in range(clients)]
            print("flooding", flush=True)
            started = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            print(len([s for s in served if s == 200]), len(served), time.monotonic() - started, flush=True)
    asyncio.run(main())
""")


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


async def measure(turns: int, clients: int) -> dict:
    with temp_folder() as folder:
        llm = InstantLLM()
        runtime = await bench_runtime(Path(folder), llm, web={"port": PORT})
        config = Path(folder) / "config.toml"
        config.write_text(PAGE_CONFIG.format(llm=LLM_URL, key=API_KEY_ENV, path=Path(folder) / "bench.sqlite3",
                                             port=PORT, persona=PERSONA.format(name="Mira")))
        page = PageProcess(config, os.environ.get("KEEPSAKE_LOG_LEVEL", "WARNING"))
        try:
            await ann_with_history(runtime, KEY, ANN, (f"history message {n}: {chat_line(n)}" for n in range(HISTORY)))
            assert await page.start(), "the page's process did not listen"
            base = f"http://127.0.0.1:{PORT}"
            cookie = await signed_in_cookie(runtime, base)
            quiet_before, _, _ = await _turns(runtime, llm, turns)
            flood = subprocess.Popen([sys.executable, "-c", FLOOD, f"{base}/", cookie, str(clients)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert (await asyncio.to_thread(flood.stdout.readline)).strip() == "flooding"
            await asyncio.sleep(1.0)  # every client asking
            flooded, _, _ = await _turns(runtime, llm, turns)
            out, _ = await asyncio.to_thread(flood.communicate, "stop\n", 60)  # the page answers meanwhile
            ok, asked, seconds = out.split()
            quiet_after, _, _ = await _turns(runtime, llm, turns)
        finally:
            await page.stop()
            await runtime.close()
    quiet_p99 = (percentile(quiet_before, 99) + percentile(quiet_after, 99)) / 2
    return {
        "quiet_p50": (percentile(quiet_before, 50) + percentile(quiet_after, 50)) / 2, "quiet_p99": quiet_p99,
        "flood_p50": percentile(flooded, 50), "flood_p99": percentile(flooded, 99),
        "rise": percentile(flooded, 99) / quiet_p99 - 1, "pages": int(ok), "asked": int(asked),
        "pages_per_s": int(ok) / float(seconds), "clients": clients, "turns": turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    started = time.monotonic()
    result = asyncio.run(measure(args.turns, args.clients))
    print(f"A turn while {result['clients']} clients flood GET / ({result['turns']} turns each; {machine()}; "
          f"{time.monotonic() - started:.0f} s)")
    print(f"quiet: p50 {result['quiet_p50']:.2f} ms, p99 {result['quiet_p99']:.2f} ms; flooded: p50 "
          f"{result['flood_p50']:.2f} ms, p99 {result['flood_p99']:.2f} ms — p99 {100 * result['rise']:+.0f} % "
          f"(target ≤ +20 %); {result['pages']} pages served of {result['asked']} asked, "
          f"{result['pages_per_s']:.1f} a second")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
