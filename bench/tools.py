"""What a tool turn costs (SPEC 18): a turn whose model asks for `search` once and then answers,
against a fake SearXNG on loopback (tests/fakes/searxng.py: real HTTP, JSON as SearXNG answers),
beside the same turn that uses no tool. The model answers at once (bench.common's InstantLLM,
which here asks for the search when the person's words end a prompt); wall time and process CPU
per turn, the fake servers' own work included (they run in this process). Prints one JSON line.

    python -m bench.tools [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx2

from bench.common import InstantLLM, bench_runtime, temp_folder
from bot.contract import ConversationKey, Identity, IncomingMessage
from tests.fakes.searxng import FakeSearXNG

KEY = ConversationKey("telegram", "bench", None, "Mira")
ANN = Identity("telegram", "ann")
WARM_UP = 20


class SearchingLLM(InstantLLM):
    """Asks for one search when the prompt ends with the person's words, then answers."""

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.url.path.endswith("/chat/completions") else {}
        messages = body.get("messages", [])
        if body.get("tools") and messages and messages[-1]["role"] == "user" and "tide" in str(messages[-1]):
            call = {"id": "call-1", "type": "function",
                    "function": {"name": "search", "arguments": json.dumps({"query": "high tide Brest"})}}
            return httpx2.Response(200, json={
                "id": "bench", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
        return super()._answer(request)


async def measure(turns: int) -> dict[str, float]:
    searxng = FakeSearXNG()
    searxng.answer("high tide Brest", *[(f"Tides {n}", f"https://tides.example/{n}", "High tide at 18:12, 6.9 m.")
                                        for n in range(5)])
    await searxng.start()
    try:
        with temp_folder() as folder:
            runtime = await bench_runtime(Path(folder), SearchingLLM(), tools={"search": {"url": searxng.url}})
            try:
                figures = {}
                for kind, words in (("no_tool", "how was the night at the lamp? {n}"),
                                    ("search", "when is the tide in Brest? {n}")):
                    walls, cpu = [], 0.0
                    for n in range(WARM_UP + turns):
                        started, cpu_started = time.perf_counter(), time.process_time()
                        reply = await runtime.turns.handle(IncomingMessage(KEY, ANN, "Ann", words.format(n=n)))
                        if n >= WARM_UP:
                            walls.append((time.perf_counter() - started) * 1000)
                            cpu += time.process_time() - cpu_started
                        await runtime.core.conversation.delivered(reply, [f"{kind}-{n}"])
                    figures[f"{kind}_p50_ms"] = round(statistics.median(walls), 2)
                    figures[f"{kind}_cpu_ms"] = round(cpu / turns * 1000, 2)
                figures["searches"] = len(searxng.queries)
                return figures
            finally:
                await runtime.close()
    finally:
        await searxng.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.turns))))


if __name__ == "__main__":
    main()
