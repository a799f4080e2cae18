"""Benchmark — what a voice turn adds to a turn's own cost (SPEC 16), and the resident memory
after 100 voice notes.

The same turn as bench.turn_overhead's (1,000 stored messages, 240 saved memories, the model in
process, answering at once), run as a typed message and as a voice note: the voice note's audio
(real OGG/Opus, 5 s, made here by libsndfile; its transcript says what the typed message
writes) goes up through the real openai client's multipart upload, and the reply is spoken (the
speech endpoint answers 12 s of real OGG/Opus audio, which is read for its length; for Discord
also decoded for its waveform). CPU is the process's, less the fake server's own work; the
platform's upload of the voice note is the adapter's and not counted.

    python -m bench.voice [--turns 100]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import time
from pathlib import Path

import numpy as np
import soundfile

from bench.common import InstantLLM, ann_with_history, bench_runtime, machine, question, temp_folder
from bot.contract import ConversationKey, Identity, IncomingFile, IncomingMessage

KEY = ConversationKey("console", "bench", None, "Mira")
ANN = Identity("console", "ann")
HISTORY = 1_000
WARM_UP = 20
NOTE_SECONDS, SPEECH_SECONDS = 5.0, 12.0
REPLY = ("The lamp is lit and the tide is turning. Come up the stairs slowly, they are wet tonight, "
         "and mind the rope by the door. I kept some tea warm for you.")


def ogg_opus(seconds: float) -> bytes:
    rate = 48_000
    t = np.arange(int(seconds * rate)) / rate
    samples = 0.4 * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 220 * t)
    out = io.BytesIO()
    soundfile.write(out, samples.astype(np.float32), rate, format="OGG", subtype="OPUS")
    return out.getvalue()


def resident_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def measure(turns: int) -> dict[str, float]:
    with temp_folder() as folder:
        llm = InstantLLM(reply=REPLY)
        llm.speech = ogg_opus(SPEECH_SECONDS)
        note = ogg_opus(NOTE_SECONDS)
        runtime = await bench_runtime(Path(folder), llm, voice={"speech_model": "tts-1"})
        try:
            await ann_with_history(
                runtime, KEY, ANN, (f"history message {n}: {question(n)}" for n in range(HISTORY)))

            async def fetch(limit: int) -> bytes:
                return note[:limit]

            async def typed(n: int) -> None:
                reply = await runtime.turns.handle(IncomingMessage(KEY, ANN, "Ann", f"turn {n}: {question(n)}"))
                await runtime.core.conversation.delivered(reply, [])

            def spoken(waveform: bool):
                async def turn(n: int) -> None:
                    llm.transcript = f"turn {n}: {question(n)}"  # says what the typed turn writes
                    voice = IncomingFile("voice.ogg", "audio/ogg", len(note), "a voice message", fetch,
                                         spoken=True, seconds=NOTE_SECONDS)
                    reply = await runtime.turns.handle(IncomingMessage(KEY, ANN, "Ann", "", files=(voice,)))
                    await runtime.core.conversation.delivered(reply, [])
                    spoken_part, = reply.parts
                    assert await spoken_part.made(waveform) is not None
                return turn

            async def cpu_ms(turn) -> float:
                for n in range(WARM_UP):
                    await turn(n)
                await runtime.summarizer.idle()
                cpu, model = time.process_time(), llm.own_time_s
                for n in range(turns):
                    await turn(n)
                await runtime.summarizer.idle()
                return (time.process_time() - cpu - (llm.own_time_s - model)) / turns * 1000

            before = resident_kib()
            rounds: dict[str, list[float]] = {"text_ms": [], "telegram_ms": [], "discord_ms": []}
            for _ in range(3):  # interleaved rounds: the machine's mood hits all alike
                rounds["text_ms"].append(await cpu_ms(typed))
                rounds["telegram_ms"].append(await cpu_ms(spoken(waveform=False)))
                rounds["discord_ms"].append(await cpu_ms(spoken(waveform=True)))
            after = resident_kib()
        finally:
            await runtime.close()
    return {kind: sorted(values)[1] for kind, values in rounds.items()} | {
        "rss_before_mib": before / 1024, "rss_after_mib": after / 1024, "voice_notes": 6 * (turns + WARM_UP)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.turns))
    print(f"Voice turns ({args.turns} turns a round, median of 3 rounds; {machine()})")
    text = figures["text_ms"]
    print(f"CPU a typed turn: {text:.2f} ms; a voice turn, heard and spoken: "
          f"{figures['telegram_ms']:.2f} ms as Telegram sends it (+{figures['telegram_ms'] - text:.2f} ms), "
          f"{figures['discord_ms']:.2f} ms with Discord's waveform (+{figures['discord_ms'] - text:.2f} ms)")
    print(f"resident memory: {figures['rss_before_mib']:.0f} MiB before, {figures['rss_after_mib']:.0f} MiB after "
          f"{figures['voice_notes']} voice notes")


if __name__ == "__main__":
    main()
