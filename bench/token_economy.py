"""Benchmarks 3 and 4 — token economy and recall, and the cost of keeping the summary.

A scripted 2,000-message conversation (1,000 turns) with 40 planted facts — birthdays, debts,
promised visits, addresses — among small talk that also carries names, numbers and days, as
real chat does. The model answers at once; the summarizer does not know what matters (it keeps
half of the lines it is given, picked by a hash of their text, and cuts to each tier's token
budget: `bench.common.lossy_summary`), so detail is lost at every tier as it would be. At every
100th message the benchmark records the prompt's tokens and how many planted facts it holds —
a fact counts when one line of the prompt carries both its name and its value — for Keepsake
and for two baselines computed from the same transcript: the full history cut at the
configured context window, and the last 40 messages only.

Targets: Keepsake's prompt stays under 25k tokens; Keepsake keeps ≥ 90 % of the planted facts
at message 2,000; summary tokens ≤ 15 % of the tokens spent on replies.

    python -m bench.token_economy [--plot docs/token_economy.png]
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path

from bench.common import InstantLLM, bench_runtime, machine, temp_folder
from bot.contract import ConversationKey, Identity, IncomingMessage
from bot.model.tokens import TokenCounter

TURNS = 1_000
CONTEXT_WINDOW = 128_000
NAMES = ["Ola", "Kari", "Per", "Siri", "Nils", "Ingrid", "Lars", "Astrid", "Erik", "Sigrid"]
MONTHS = ["January", "March", "May", "July", "September", "November"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
PLACES = ["the harbour", "the bakery", "the ferry", "the market", "the chapel", "the old mill"]
SMALL_TALK = [
    "{name} and I had {n} cups of coffee at {place} on {day}",
    "saw {name} near {place} around {hour} o'clock, the wind was strong",
    "{name} says the {n} boats will be late again on {day}",
    "it rained until {hour}, then {name} and I walked to {place}",
    "the lamp needed {n} new bulbs, {name} helped me carry them on {day}",
    "{name} told me {place} opens at {hour} now",
]


@dataclass(frozen=True)
class Fact:
    text: str  # what the person says
    name: str  # who it is about
    value: str  # what must be remembered about them


def planted_facts() -> list[Fact]:
    facts = []
    for i in range(40):
        name, month, day, year = NAMES[i % 10], MONTHS[i % 6], 1 + (i * 7) % 28, 1950 + i
        kind = i % 4
        if kind == 0:
            facts.append(Fact(f"by the way, my cousin {name} was born on {day} {month} {year}.", name,
                              f"{day} {month} {year}"))
        elif kind == 1:
            facts.append(Fact(f"funny thing, {name} still owes me {100 + i * 13} kroner since last winter.", name,
                              f"{100 + i * 13} kroner"))
        elif kind == 2:
            facts.append(Fact(f"I promised {name} to visit on {day} {month}, please remind me.", name,
                              f"{day} {month}"))
        else:
            facts.append(Fact(f"my friend {name} lives at number {10 + i} on the harbour road now.", name,
                              f"number {10 + i} on the harbour road"))
    return facts


def small_talk(turn: int) -> str:
    """Chat that mentions people, numbers, days and places too, but never a fact's value."""
    return SMALL_TALK[turn % len(SMALL_TALK)].format(
        name=NAMES[(turn * 7) % 10], n=2 + turn % 9, place=PLACES[turn % len(PLACES)],
        day=DAYS[turn % 7], hour=6 + turn % 12)


def holds(text: str, fact: Fact) -> bool:
    """A line of `text` carries the fact's name and its value."""
    return any(fact.name in line and fact.value in line for line in text.splitlines())


async def run(plot: Path | None) -> dict:
    counter = TokenCounter("gpt-4o-mini")
    facts = planted_facts()
    every = TURNS // len(facts)  # a fact every 25 turns
    transcript: list[tuple[str, int]] = []  # (text, tokens) of every message, for the baselines
    rows = []
    with temp_folder() as folder:
        llm = InstantLLM(count_tokens=True)
        runtime = await bench_runtime(Path(folder), llm, context_window=CONTEXT_WINDOW)
        key = ConversationKey("console", "economy", None, "Mira")
        ann = Identity("console", "ann")
        reply_tokens_before = summary_tokens_before = 0
        try:
            for turn in range(TURNS):
                text = facts[turn // every].text if turn % every == every // 2 else small_talk(turn)
                reply = await runtime.turns.handle(IncomingMessage(key, ann, "Ann", text))
                await runtime.core.conversation.delivered(reply, [])
                await runtime.summarizer.idle()
                transcript += [(f"Ann: {text}", counter.count(text) + 4), (reply.text, counter.count(reply.text) + 4)]
                messages = len(transcript)
                if messages % 100 == 0:
                    planted = [f for t, f in enumerate(facts) if t * every + every // 2 <= turn]
                    prompt = "\n".join(str(m.get("content") or "") for m in llm.last_reply_prompt)
                    keepsake_tokens = sum(counter.count(str(m.get("content") or "")) + 4 for m in llm.last_reply_prompt)
                    full = cut_at_window(transcript, CONTEXT_WINDOW)
                    last40 = transcript[-40:]
                    rows.append({
                        "messages": messages,
                        "planted": len(planted),
                        "keepsake_tokens": keepsake_tokens,
                        "keepsake_facts": sum(holds(prompt, f) for f in planted),
                        "full_tokens": sum(t for _, t in full),
                        "full_facts": sum(any(holds(m, f) for m, _ in full) for f in planted),
                        "last40_tokens": sum(t for _, t in last40),
                        "last40_facts": sum(any(holds(m, f) for m, _ in last40) for f in planted),
                        "reply_tokens": llm.tokens["reply"] - reply_tokens_before,
                        "summary_tokens": llm.tokens["summary"] - summary_tokens_before,
                    })
                    reply_tokens_before, summary_tokens_before = llm.tokens["reply"], llm.tokens["summary"]
        finally:
            await runtime.close()
    if plot:
        _plot(rows, plot)
    return {"rows": rows, "reply_tokens": llm.tokens["reply"], "summary_tokens": llm.tokens["summary"],
            "summary_calls": llm.calls["summary"]}


def cut_at_window(transcript: list[tuple[str, int]], window: int) -> list[tuple[str, int]]:
    kept, used = [], 0
    for message in reversed(transcript):
        if used + message[1] > window:
            break
        kept.append(message)
        used += message[1]
    return kept[::-1]


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["messages"] for r in rows]
    figure, (tokens, recall) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = (("keepsake", "Keepsake", "o", "-", 2.5), ("full", "full history", "s", "--", 1.2),
              ("last40", "last 40 messages", "^", "-", 1.2))
    for key, label, marker, line, width in styles:
        tokens.plot(x, [r[f"{key}_tokens"] for r in rows], marker=marker, linestyle=line, linewidth=width, label=label)
        recall.plot(x, [100 * r[f"{key}_facts"] / max(1, r["planted"]) for r in rows], marker=marker,
                    linestyle=line, linewidth=width, label=label)
    tokens.axhline(25_000, color="grey", linestyle="--", linewidth=1, label="25k target")
    tokens.set(title="Prompt tokens per turn", xlabel="messages in the conversation", ylabel="tokens")
    recall.set(title="Planted facts in the prompt", xlabel="messages in the conversation", ylabel="% of facts so far",
               ylim=(-5, 105))
    tokens.legend()
    recall.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plot", type=Path, default=Path("docs/token_economy.png"))
    args = parser.parse_args()
    result = asyncio.run(run(args.plot))
    print(f"Token economy and recall, 2,000 messages, 40 planted facts ({machine()})")
    print("messages | Keepsake tokens | facts | full history tokens | facts | last-40 tokens | facts "
          "| summary tokens / reply tokens")
    for r in result["rows"]:
        share = r["summary_tokens"] / max(1, r["reply_tokens"])
        print(f"{r['messages']:>8,} | {r['keepsake_tokens']:>15,} | {r['keepsake_facts']:>2}/{r['planted']:<2} "
              f"| {r['full_tokens']:>19,} | {r['full_facts']:>2}/{r['planted']:<2} | {r['last40_tokens']:>14,} "
              f"| {r['last40_facts']:>2}/{r['planted']:<2} | {100 * share:5.1f} %")
    last = result["rows"][-1]
    share = result["summary_tokens"] / result["reply_tokens"]
    print(f"At 2,000 messages Keepsake holds {last['keepsake_facts']}/{last['planted']} facts in "
          f"{last['keepsake_tokens']:,} tokens; last-40 holds {last['last40_facts']}.")
    print(f"Summary upkeep: {result['summary_tokens']:,} tokens in {result['summary_calls']} calls = "
          f"{100 * share:.1f} % of the {result['reply_tokens']:,} reply tokens (target <= 15 %).")
    if args.plot:
        print(f"Plot: {args.plot}")


if __name__ == "__main__":
    main()
