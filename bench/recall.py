"""Benchmark 7 — recall: are the old facts in the prompt when someone asks about them later?

A long synthetic conversation (1,500 messages): 30 facts planted early — birthdays, places,
debts, plans, opinions, allergies — among small talk that also names people and numbers, then,
much later, one question about each fact in other words (a paraphrase, never the planted
sentence). The same conversation is fed to two Keepsake bots, with recall and without, both with
the benchmark's blind summarizer (`bench.common.lossy_summary`), and to a third with recall whose
summarizer keeps a quarter of the lines at each tier instead of half (the summary's share of the
prompt is the summarizer's, not recall's: this row shows recall beside a terser summary). At
each question the benchmark checks whether the prompt holds the fact (one line with its name and
its value) and counts the prompt's tokens; two baselines are computed from the same transcript:
the last 50 messages only, and the full history cut at the context window.

    python -m bench.recall [--plot docs/recall.png]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.common import SUMMARY_SHARE, InstantLLM, bench_runtime, machine, temp_folder
from bench.token_economy import NAMES, Fact, cut_at_window, holds, small_talk
from bot.contract import ConversationKey, Identity, IncomingMessage
from bot.model.tokens import TokenCounter
from bot.runtime import Runtime

CONTEXT_WINDOW = 128_000
MESSAGES = 1_500  # before the questions
PLANTED_IN = 500  # facts are planted in the first messages
LAST = 50
TERSER_SHARE = SUMMARY_SHARE / 2
CITIES = ["Bergen", "Tromsø", "Bodø", "Ålesund", "Narvik", "Molde"]
ISLANDS = ["Lofoten", "Senja", "Vega", "Træna", "Røst", "Smøla"]
FOODS = ["shellfish", "peanuts", "strawberries", "sesame", "kiwi", "celery"]
OPINIONS = ["hideous", "brilliant", "too dark", "cheerful", "a waste of money", "just right"]
MONTHS = ["January", "March", "May", "July", "September", "November"]


@dataclass(frozen=True)
class Question:
    fact: Fact
    asked: str  # the same fact asked about in other words


def questions() -> list[Question]:
    made = []
    for i in range(30):
        name = NAMES[(i * 3) % 10]
        kind = i % 6
        if kind == 0:
            day, month, year = 1 + (i * 5) % 28, MONTHS[i % 6], 1960 + i
            fact = Fact(f"my cousin {name} was born on {day} {month} {year}, we always have cake", name,
                        f"{day} {month} {year}")
            asked = f"when does my cousin {name} get a year older? I never remember the birthday"
        elif kind == 1:
            city = CITIES[i % 6]
            fact = Fact(f"{name} moved to {city} for a job at the shipyard", name, city)
            asked = f"which town did {name} relocate to for that shipyard work?"
        elif kind == 2:
            fact = Fact(f"{name} still owes me {150 + i * 11} kroner from the boat trip", name, f"{150 + i * 11} kroner")
            asked = f"how much is {name} in debt to me since the trip on the boat?"
        elif kind == 3:
            island = ISLANDS[i % 6]
            fact = Fact(f"I plan to sail to {island} with {name} next summer", name, island)
            asked = f"where are {name} and I going sailing?"
        elif kind == 4:
            opinion = OPINIONS[i % 6]
            fact = Fact(f"{name} thinks the new lighthouse paint is {opinion}", name, opinion)
            asked = f"what was {name}'s view on how the lighthouse got repainted?"
        else:
            food = FOODS[i % 6]
            fact = Fact(f"{name} is allergic to {food}, it makes her very ill", name, food)
            asked = f"what must {name} never eat because of an allergy?"
        made.append(Question(fact, asked))
    return made


@dataclass(frozen=True)
class Result:
    name: str
    found: int  # questions whose fact was in the prompt
    asked: int
    tokens: float  # prompt tokens per question turn (mean)


async def _feed(runtime: Runtime, llm: InstantLLM, counter: TokenCounter, script: list[str],
                asks: list[Question]) -> tuple[list[tuple[int, int]], list[tuple[str, int]]]:
    """Say every line, then every question; at each question: (fact found, prompt tokens)."""
    key, ann = ConversationKey("console", "recall", None, "Mira"), Identity("console", "ann")
    transcript: list[tuple[str, int]] = []
    seen = []
    for line in script + [q.asked for q in asks]:
        reply = await runtime.turns.handle(IncomingMessage(key, ann, "Ann", line))
        await runtime.core.conversation.delivered(reply, [])
        await runtime.summarizer.idle()
        if len(transcript) >= 2 * len(script):
            question = asks[len(transcript) // 2 - len(script)]
            prompt = "\n".join(str(m.get("content") or "") for m in llm.last_reply_prompt)
            tokens = sum(counter.count(str(m.get("content") or "")) + 4 for m in llm.last_reply_prompt)
            seen.append((int(holds(prompt, question.fact)), tokens))
        transcript += [(f"Ann: {line}", counter.count(line) + 4), (reply.text, counter.count(reply.text) + 4)]
    return seen, transcript


async def run(plot: Path | None = None) -> list[Result]:
    counter = TokenCounter("gpt-4o-mini")
    asks = questions()
    every = PLANTED_IN // 2 // len(asks)
    script = [asks[t // every].fact.text if t % every == 0 and t // every < len(asks) else small_talk(t)
              for t in range(MESSAGES // 2)]
    results = []
    transcript: list[tuple[str, int]] = []
    bots = (("Keepsake with recall", True, SUMMARY_SHARE), ("Keepsake without recall", False, SUMMARY_SHARE),
            (f"Keepsake with recall, summarizer keeping {100 * TERSER_SHARE:.0f} %", True, TERSER_SHARE))
    for name, recall_on, summary_share in bots:
        with temp_folder() as folder:
            llm = InstantLLM(count_tokens=True, summary_share=summary_share)
            runtime = await bench_runtime(Path(folder), llm, context_window=CONTEXT_WINDOW)
            if not recall_on:
                runtime.turns.recall_tokens = 0
            try:
                seen, transcript = await _feed(runtime, llm, counter, script, asks)
            finally:
                await runtime.close()
        results.append(Result(name, sum(f for f, _ in seen), len(asks), statistics.mean(t for _, t in seen)))
    for name, keep in ((f"last {LAST} messages", lambda upto: _last(upto, LAST)),
                       ("full history", lambda upto: cut_at_window(upto, CONTEXT_WINDOW))):
        found, tokens = 0, []
        for i, question in enumerate(asks):
            kept = keep(transcript[:2 * (len(script) + i) + 1])
            found += any(holds(text, question.fact) for text, _ in kept)
            tokens.append(sum(t for _, t in kept))
        results.append(Result(name, found, len(asks), statistics.mean(tokens)))
    if plot:
        _plot(results, plot)
    return results


def _last(transcript: list[tuple[str, int]], count: int) -> list[tuple[str, int]]:
    return transcript[-count:]


def _plot(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (found, tokens) = plt.subplots(1, 2, figsize=(11, 4))
    names = [r.name for r in results]
    found.barh(names, [100 * r.found / r.asked for r in results], color="tab:blue")
    found.set(title="Facts in the prompt when asked about", xlabel="% of questions", xlim=(0, 100))
    tokens.barh(names, [r.tokens for r in results], color="tab:orange")
    tokens.set(title="Prompt tokens per turn", xlabel="tokens")
    for axis in (found, tokens):
        axis.invert_yaxis()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plot", type=Path, default=Path("docs/recall.png"))
    args = parser.parse_args()
    results = asyncio.run(run(args.plot))
    print(f"Recall: {MESSAGES:,} messages, 30 facts asked about in other words at the end ({machine()})")
    full = results[-1].tokens
    for r in results:
        print(f"{r.name:<48} {r.found:>2}/{r.asked} facts ({100 * r.found / r.asked:3.0f} %) "
              f"at {r.tokens:8,.0f} tokens a turn ({100 * r.tokens / full:3.0f} % of the full history)")


if __name__ == "__main__":
    main()
