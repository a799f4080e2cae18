"""Run every benchmark and write docs/benchmarks.md: every figure of its table and of the sections
it writes comes from this run. The sections of the earlier file this run does not write (measured
by hand, each with its date) are kept after them, as they were.

    pip install -e '.[bench]' && python -m bench.report [--postgres URL]

With `--postgres` (or KEEPSAKE_TEST_POSTGRES_URL set) the PostgreSQL figures are measured too,
on that server, in throwaway schemas. The toolbox's cost is counted in instructions by valgrind
(Debian's `valgrind`), which must be on the PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

from bench import (
    checkins,
    dialogues,
    footprint,
    page_flood,
    recall,
    reminders,
    throughput,
    token_economy,
    turn_cpu,
    turn_overhead,
)
from bench.common import SUMMARY_SHARE, machine, throwaway_schema
from bench.sections import DIALOGUES, kept_sections, measured_before

DOCS = Path("docs")
RUNS = 3  # the turn overhead and the throughput are measured 3 times: the VM is noisy
CONVERSATIONS, TURNS = 200, 40  # throughput: 80 messages a conversation, past the 50-message window
STREAMED_CHUNKS = 100


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def runs_table(runs: list[dict]) -> list[str]:
    """p50 and p99 of each turn-overhead run, a row per size."""
    return [
        "| stored messages | " + " | ".join(f"run {i} p50 ms | p99 ms" for i in range(1, len(runs) + 1)) + " |",
        "|---|" + "---|---|" * len(runs),
        *[f"| {size:,} | " + " | ".join(f"{run[size][0]:.2f} | {run[size][1]:.2f}" for run in runs) + " |"
          for size in turn_overhead.SIZES],
    ]


async def due_scan_on(server: str) -> dict:
    """bench.reminders on the PostgreSQL server, in a throwaway schema."""
    async with throwaway_schema(server) as url:
        return await reminders.measure(100_000, url)


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}"


def dialogue_lines(result: dict, by_meaning: dict | None, embeddings: list[str] | None) -> list[str]:
    """Section 9: each prompt's evidence, rare-word evidence and tokens, side by side."""
    full = result["full_history_tokens"]
    rows = result["rows"] + (by_meaning["rows"][:2] if by_meaning else [])
    meaning = ([f"The last two rows recall by meaning too, with `{embeddings[1]}` served at {embeddings[0]}: it adds "
                f"{100 * (by_meaning['rows'][0]['evidence'] - result['rows'][0]['evidence']):+.1f} points to the whole prompt.",
                ""] if by_meaning else [])
    return [
        f"{result['conversations']} LoCoMo conversations replayed through the bot, {result['questions']} questions",
        "asked inside them (bench/dialogues.py says how); an evidence line counts when the prompt holds it",
        f"word for word. The full history averages {full:,.0f} tokens.",
        "",
        "| prompt | evidence in the prompt | rare-word evidence | tokens a question | ÷ full history | evidence per 1k tokens |",
        "|---|---|---|---|---|---|",
        *[f"| {r['name']} | {100 * r['evidence']:.1f} % | {100 * r['rare']:.1f} % | {r['tokens']:,.0f} | "
          f"{100 * r['tokens'] / full:.0f} % | {1000 * r['evidence'] / max(1, r['tokens']):.3f} |" for r in rows],
        "",
        *meaning,
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", metavar="URL", default=os.environ.get("KEEPSAKE_TEST_POSTGRES_URL"))
    parser.add_argument("--locomo", metavar="FOLDER", default=os.environ.get("KEEPSAKE_LOCOMO"),
                        help="the unzipped LoCoMo data (bench.dialogues); without it that section says how to run it")
    parser.add_argument("--embeddings", nargs=2, metavar=("URL", "MODEL"),
                        help="with --locomo: also with recall by meaning through this embedding server and model")
    args = parser.parse_args()

    overheads, without_recall = [], []
    for _ in range(RUNS):  # interleaved, so the machine's mood hits both alike
        overheads.append(asyncio.run(turn_overhead.measure(300)))
        without_recall.append(asyncio.run(turn_overhead.measure(300, recall=False)))
    streamed = asyncio.run(turn_overhead.measure(300, STREAMED_CHUNKS, (1_000,)))[1_000]
    semantic = asyncio.run(turn_overhead.measure(300, semantic=True))
    rates = [asyncio.run(throughput.measure(CONVERSATIONS, TURNS)) for _ in range(RUNS)]
    economy = asyncio.run(token_economy.run(DOCS / "token_economy.png"))
    recalled = asyncio.run(recall.run(DOCS / "recall.png"))
    start, end = asyncio.run(footprint.measure(1_000))
    floods = [asyncio.run(page_flood.measure(3_000, 8)) for _ in range(RUNS)]
    flood = sorted(floods, key=lambda run: run["rise"])[len(floods) // 2]  # the median run
    flood_rises = ", ".join(f"{100 * run['rise']:+.0f}" for run in floods)
    due_scans = [asyncio.run(reminders.measure(100_000, None))]
    toolbox: dict[bool, list[float]] = {True: [], False: []}  # offered: CPU a turn, run by run
    for _ in range(RUNS):  # interleaved
        for offered in (False, True):
            toolbox[offered].append(asyncio.run(turn_cpu.run(1_000, 300, None, None, no_tools=not offered))["cpu_ms"])
    toolbox_instructions = {offered: turn_cpu.instructions(no_tools=not offered) for offered in (False, True)}
    locomo = asyncio.run(dialogues.run(Path(args.locomo), 10)) if args.locomo else None
    by_meaning = (asyncio.run(dialogues.run(Path(args.locomo), 10, tuple(args.embeddings)))
                  if args.locomo and args.embeddings else None)
    scanned = {"SQLite": asyncio.run(checkins.measure(100_000))}
    if args.postgres:
        scanned["PostgreSQL"] = asyncio.run(checkins.measure(100_000, args.postgres))
        due_scans.append(asyncio.run(due_scan_on(args.postgres)))
    postgres = None
    if args.postgres:
        postgres = {
            "overhead": asyncio.run(turn_overhead.measure(300, postgres=args.postgres)),
            "without_recall": asyncio.run(turn_overhead.measure(300, postgres=args.postgres, recall=False)),
            "one": asyncio.run(throughput.measure_processes(args.postgres, 1, CONVERSATIONS, TURNS)),
            "two": asyncio.run(throughput.measure_processes(args.postgres, 2, CONVERSATIONS, TURNS)),
        }

    # per size: the median of the runs' p50s, and the worst of their p99s
    overhead = {size: (statistics.median(run[size][0] for run in overheads), max(run[size][1] for run in overheads))
                for size in turn_overhead.SIZES}
    p50_1k, p50_100k = overhead[1_000][0], overhead[100_000][0]
    worst_p50 = max(v[0] for v in overhead.values())
    worst_p99 = max(v[1] for v in overhead.values())
    rate = statistics.median(r[0] for r in rates)
    rate_p99 = statistics.median(r[2] for r in rates)
    last = economy["rows"][-1]
    peak = max(r["keepsake_tokens"] for r in economy["rows"])
    share = economy["summary_tokens"] / economy["reply_tokens"]
    all_p50s = [run[size][0] for run in overheads for size in turn_overhead.SIZES]
    p50_100k_without = statistics.median(run[100_000][0] for run in without_recall)
    recall_adds = p50_100k - p50_100k_without
    with_recall, without, _, last50, full = recalled
    tools_cost = toolbox_instructions[True] / toolbox_instructions[False] - 1
    tools_cpu_cost = statistics.median(toolbox[True]) / statistics.median(toolbox[False]) - 1
    P50, P99 = turn_overhead.TARGET_P50_MS["SQLite"], turn_overhead.TARGET_P99_MS["SQLite"]
    recall_share = with_recall.tokens / full.tokens

    lines = [
        "# Benchmarks",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d} on {machine()}, by `python -m bench.report`;",
        "every figure of this table and of the sections up to the reminders' due scan comes from that",
        "run (each benchmark also runs alone: its command is given with it), but for section 9 where",
        "the run was not given LoCoMo's data: that one says when it was measured. The sections after",
        "the due scan were measured by hand, each on the date it gives, and are kept as they were (the",
        "report one of them speaks of is the one of its day, on the machine it names). The model",
        "answers at once, in process, through the real `openai` client",
        "(httpx2's MockTransport: no network), so the figures are Keepsake's own cost. A turn is the",
        "real one: the three memory tools offered with every request, and the summary queue running",
        "in the background after every reply.",
        "",
        "| # | figure | measured | target | |",
        "|---|---|---|---|---|",
        f"| 1 | turn overhead p50 (worst of 1k/10k/100k messages; median of {RUNS} runs) | {worst_p50:.2f} ms | ≤ {P50} ms | {verdict(worst_p50 <= P50)} |",
        f"| 1 | turn overhead p99 (worst of every size and run) | {worst_p99:.2f} ms | ≤ {P99} ms | {verdict(worst_p99 <= P99)} |",
        f"| 1 | database round trips a turn on SQLite (statements, and each transaction's begin and commit; 1k, 10k, 100k messages) | {', '.join(f'{overheads[0][size][4]:.1f}' for size in turn_overhead.SIZES)} | (no target) | |",
        f"| 1 | the same, reply streamed in {STREAMED_CHUNKS} chunks as on Discord and Telegram (1k messages): p50, p99 | {streamed[0]:.2f} ms, {streamed[1]:.2f} ms | (no target) | |",
        f"| 1 | flat: p50 at 100k ÷ p50 at 1k | {p50_100k / p50_1k:.2f}× | ≤ 1.5× | {verdict(p50_100k / p50_1k <= 1.5)} |",
        f"| 2 | throughput, {CONVERSATIONS} conversations × {TURNS} turns, past the window (median of {RUNS} runs) | {rate:.0f} turns/s, p99 {rate_p99:.0f} ms | ≥ 300 turns/s | {verdict(rate >= 300)} |",
        f"| 3 | Keepsake prompt at 2,000 messages (peak) | {peak:,} tokens | < 25k | {verdict(peak < 25_000)} |",
        f"| 3 | planted facts in the prompt at 2,000 messages | {last['keepsake_facts']}/{last['planted']} (last-40: {last['last40_facts']}/{last['planted']}) | ≥ 90 % | {verdict(last['keepsake_facts'] >= 0.9 * last['planted'])} |",
        f"| 4 | summary tokens ÷ reply tokens | {100 * share:.1f} % | ≤ 15 % | {verdict(share <= 0.15)} |",
        f"| 1 | what recall adds to the turn at 100k messages (p50 with − p50 without, medians of {RUNS} interleaved runs) | {recall_adds:+.2f} ms | ≤ 5 ms | {verdict(recall_adds <= 5)} |",
        f"| 1 | what recall by meaning adds to the turn at 100k messages (p50 with − the median p50 by words alone, one run) | {semantic[100_000][0] - p50_100k:+.2f} ms | (no target) | |",
        f"| 7 | facts in the prompt when asked about later in other words, with recall | {with_recall.found}/{with_recall.asked} (without recall {without.found}, last 50 messages {last50.found}) | ≥ 90 % | {verdict(with_recall.found >= 0.9 * with_recall.asked)} |",
        f"| 7 | prompt tokens a turn with recall ÷ full history | {100 * recall_share:.0f} % ({with_recall.tokens:,.0f} ÷ {full.tokens:,.0f}; without recall {100 * without.tokens / full.tokens:.0f} %) | ≤ 15 % | {verdict(recall_share <= 0.15)} |",
        f"| 5 | resident memory, 1,000 active conversations | +{end - start:.1f} MB ({start:.0f} → {end:.0f} MB) | ≤ 100 MB over start-up | {verdict(end - start <= 100)} |",
        *[f"| 8 | check-ins on {name}, 100,000 conversations with 100 due: finding them; the whole scan (100 written by the instant model, stored, handed over), of which the spacing of {checkins.PER_SECOND} sends a second; the work besides it | {found * 1000:.1f} ms; {whole * 1000:,.0f} ms, of which {checkins.spacing(sent) * 1000:,.0f} ms spacing; {(whole - checkins.spacing(sent)) * 1000:.0f} ms | the work well under 1 s | {verdict(whole - checkins.spacing(sent) < 0.5)} |"
          for name, (found, whole, sent) in scanned.items()],
        f"| 1 | a turn's p99 while {flood['clients']} clients flood the memory page, against quiet ({flood['turns']:,} turns each, interleaved; the median of {RUNS} runs: {flood_rises} %) | {100 * flood['rise']:+.0f} % ({flood['quiet_p99']:.2f} → {flood['flood_p99']:.2f} ms) | ≤ +20 % | {verdict(flood['rise'] <= 0.2)} |",
        *[f"| 1 | the reminders' due scan on {'PostgreSQL' if scan['backend'] == 'postgresql' else 'SQLite'}, 100,000 pending (median of 20) | {scan['scan_ms_median']:.2f} ms | < 0.5 s | {verdict(scan['scan_ms_median'] < 500)} |"
          for scan in due_scans],
        f"| 1 | what the toolbox costs a turn that calls no tool (instructions, callgrind; CPU time, medians of {RUNS} interleaved runs: {100 * tools_cpu_cost:+.1f} %) | {100 * tools_cost:+.1f} % | ≤ 2 % | {verdict(tools_cost <= 0.02)} |",
    ]
    if locomo:
        keepsake, _, _, bm25, _ = locomo["rows"]
        share = keepsake["tokens"] / locomo["full_history_tokens"]
        per_token = (keepsake["evidence"] / keepsake["tokens"], bm25["evidence"] / bm25["tokens"])
        ahead = locomo["ahead_by_conversation"]
        lines += [
            f"| 9 | LoCoMo: evidence in the recall block − plain BM25 over the same older messages at equal tokens (by conversation) | {locomo['ahead_points']:+.1f} points ({min(ahead):+.1f} to {max(ahead):+.1f}) | ≥ +3 points | {verdict(locomo['ahead_points'] >= 3)} |",
            f"| 9 | LoCoMo: evidence in Keepsake's prompt, at what share of the full history's tokens | {100 * keepsake['evidence']:.1f} % at {100 * share:.0f} % | ≥ 92 % at ≤ 12 % | {verdict(keepsake['evidence'] >= 0.92 and share <= 0.12)} |",
            f"| 9 | LoCoMo: evidence per 1k prompt tokens, Keepsake ÷ plain BM25 top 8 ± 1 | {1000 * per_token[0]:.3f} ÷ {1000 * per_token[1]:.3f} | > 1 | {verdict(per_token[0] > per_token[1])} |",
        ]
        if by_meaning:
            added = by_meaning["rows"][0]["evidence"] - keepsake["evidence"]
            lines.append(f"| 9 | LoCoMo: what recall by meaning adds to the evidence in the prompt | {100 * added:+.1f} points | ≥ 0 | {verdict(added >= 0)} |")
    if postgres:
        pg = postgres["overhead"][100_000]
        PG_P50, PG_P99 = turn_overhead.TARGET_P50_MS["PostgreSQL"], turn_overhead.TARGET_P99_MS["PostgreSQL"]
        one, two = postgres["one"], postgres["two"]
        lines += [
            f"| 6 | PostgreSQL turn overhead at 100k messages: p50, p99 | {pg[0]:.2f} ms, {pg[1]:.2f} ms | ≤ {PG_P50} ms, ≤ {PG_P99} ms | {verdict(pg[0] <= PG_P50 and pg[1] <= PG_P99)} |",
            f"| 6 | PostgreSQL round trips a turn at 100k messages (statements, begins and commits, with the delivery and the summaries it sets off) | {pg[4]:.1f} | ≤ {turn_overhead.TARGET_ROUND_TRIPS} | {verdict(pg[4] <= turn_overhead.TARGET_ROUND_TRIPS)} |",
            f"| 6 | what recall adds to the turn on PostgreSQL at 100k messages (p50 with − without, one run each) | {pg[0] - postgres['without_recall'][100_000][0]:+.2f} ms | ≤ 10 ms | {verdict(pg[0] - postgres['without_recall'][100_000][0] <= 10)} |",
            f"| 6 | PostgreSQL throughput, 2 processes ÷ 1 process | {two.rate / one.rate:.2f}× ({one.rate:.0f} → {two.rate:.0f} turns/s) | ≥ {throughput.TWO_PROCESSES}× | {verdict(two.rate / one.rate >= throughput.TWO_PROCESSES)} |",
            f"| 6 | nothing lost, duplicated or reordered (1 and 2 processes) | {'yes' if one.whole and two.whole else '**no**'} | yes | {verdict(one.whole and two.whole)} |",
        ]
    lines += [
        "",
        "## 1. Turn overhead — `python -m bench.turn_overhead`",
        "",
        "Everything a turn costs except the model's own time, with 240 saved memories (100 + 20 in",
        "both scopes) and 1k, 10k and 100k stored messages in the conversation (its summary caught up",
        f"before each size is measured); 300 turns each, {RUNS} runs. The p50s of all runs and sizes",
        f"lie between {spread(all_p50s)} ms.",
        "",
        *runs_table(overheads),
        "",
        "A turn reads only what it needs, each with indexed queries: the person and the",
        "conversation, Learn from chat, the speaker's memories in play, the summary, the newest",
        "messages of the window and the older passages recall finds. It writes the person's message",
        "and its place in the conversation's line, starts the turn, and stores the reply with its",
        "receipt in one transaction. The rest is the openai client, building the prompt and the",
        "summary queue's check after the reply.",
        "",
        f"Replies on Discord and Telegram stream. With each reply streamed in {STREAMED_CHUNKS} chunks",
        f"(`python -m bench.turn_overhead --streamed {STREAMED_CHUNKS}`, 1k messages only) a turn costs",
        f"p50 {streamed[0]:.2f} ms, p99 {streamed[1]:.2f} ms: about "
        f"{1000 * (streamed[0] - overheads[0][1_000][0]) / STREAMED_CHUNKS:.0f} µs a chunk over the first run's plain answer.",
        "",
        "The same turns with recall left out (`python -m bench.turn_overhead --no-recall`), run by run",
        "between the runs above:",
        "",
        *runs_table(without_recall),
        "",
        "The same turns with recall by meaning too (`python -m bench.turn_overhead --semantic`, one",
        "run; every stored message embedded first, by the in-process fake, whose vectors say nothing):",
        "",
        *runs_table([semantic]),
        "",
        "Each turn asks the embedding server for its message's vector while it waits for its place,",
        "keeps it, and on SQLite scores the newest 5,000 vectors of the conversation before the window",
        "with numpy; reading those rows is most of the cost, so it stops growing at 5,000 messages.",
        "",
        "Each turn's message is a question in ordinary words about earlier talk (\"turn N: do you",
        "remember what we said about the old ferry after the rain?\"), and the history is small talk in",
        "the same words (\"history message N: we talked about the storm on Thursday and it reminded me",
        "of the radio\"): twenty topics and ten times of day, so every word of a question is shared",
        "with a tenth or more of the history. Recall ranks those words where they are rare enough to",
        "point at something, and leaves out those that are not (bench/common.py: `question`, `chat_line`).",
        "",
        "## 2. Throughput — `python -m bench.throughput`",
        "",
        "| run | turns/s | p50 ms | p99 ms |",
        "|---|---|---|---|",
        *[f"| {i} | {r[0]:.0f} | {r[1]:.0f} | {r[2]:.0f} |" for i, r in enumerate(rates, 1)],
        "",
        f"All {CONVERSATIONS * TURNS:,} turns share one process, one event loop and one SQLite file. Each",
        f"conversation reaches {2 * TURNS} messages, past the 50-message live window: the later turns",
        "recall older messages (every third message is a question about earlier talk), and summaries",
        "run after delivery, in the same process.",
        "",
        "## 3 and 4. Token economy, recall and summary upkeep — `python -m bench.token_economy`",
        "",
        "A scripted 2,000-message conversation with 40 planted facts (birthdays, debts, promised",
        "visits, addresses) among small talk that also names people, numbers, days and places. The",
        f"benchmark's summarizer does not know what matters: it keeps {100 * SUMMARY_SHARE:.0f} % of the lines it is",
        "given, picked by a hash of their text, and cuts them to each tier's token budget, so detail",
        "is lost at every tier. A fact counts as present when one line of the prompt holds both its",
        "name and its value. The full-history baseline is cut at the configured context window",
        f"({token_economy.CONTEXT_WINDOW:,} tokens).",
        "",
        "![prompt tokens and recall](token_economy.png)",
        "",
        "| messages | Keepsake tokens | facts | full history tokens | facts | last-40 tokens | facts | summary ÷ reply tokens |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {r['messages']:,} | {r['keepsake_tokens']:,} | {r['keepsake_facts']}/{r['planted']} | "
          f"{r['full_tokens']:,} | {r['full_facts']}/{r['planted']} | {r['last40_tokens']:,} | "
          f"{r['last40_facts']}/{r['planted']} | {100 * r['summary_tokens'] / max(1, r['reply_tokens']):.1f} % |"
          for r in economy["rows"]],
        "",
        f"Summary upkeep over the run: {economy['summary_tokens']:,} tokens in {economy['summary_calls']} calls,",
        f"{100 * share:.1f} % of the {economy['reply_tokens']:,} tokens spent on replies.",
        "",
        "## 7. Recall — `python -m bench.recall`",
        "",
        f"A {recall.MESSAGES:,}-message conversation: 30 facts planted in its first {recall.PLANTED_IN} messages",
        "(birthdays, places, debts, plans, opinions, allergies) among small talk that names the same",
        "people, then one question about each fact in other words (\"how much is Lars in debt to me",
        "since the trip on the boat?\" for \"Lars still owes me 183 kroner from the boat trip\"). The",
        "first two Keepsake bots use the blind summarizer of section 3; a fact counts when a line of the",
        "prompt holds its name and its value. Most of their prompt is that summary: the summarizer's",
        "share, not recall's (recall adds the difference between the first two rows). The third bot",
        f"recalls beside a terser summarizer, one that keeps {100 * recall.TERSER_SHARE:.0f} % of the lines at each tier,",
        "to show the same recall where the summary is smaller; the targets are judged on the first.",
        "",
        "![facts in the prompt and its tokens](recall.png)",
        "",
        "| prompt | facts present when asked | prompt tokens a turn | ÷ full history |",
        "|---|---|---|---|",
        *[f"| {r.name} | {r.found}/{r.asked} ({100 * r.found / r.asked:.0f} %) | {r.tokens:,.0f} | "
          f"{100 * r.tokens / full.tokens:.0f} % |" for r in recalled],
        "",
        DIALOGUES,
        "",
        # without LoCoMo's data, the section as an earlier run wrote it (it says when), else a line
        *(dialogue_lines(locomo, by_meaning, args.embeddings) if locomo
          else measured_before(DOCS / "benchmarks.md", DIALOGUES) or [
            "Not measured in this run: it needs LoCoMo's data, which is not ours to ship (`git clone",
            "https://github.com/snap-research/locomo`, unzip `data/locomo10.zip`, then `KEEPSAKE_LOCOMO=…/data`).",
        ]),
        "",
        "## 5. Footprint — `python -m bench.footprint`",
        "",
        f"Resident memory {start:.1f} MB after start-up and {end:.1f} MB after a history of",
        f"{footprint.HISTORY} messages and 3 turns in each of 1,000 conversations of 1,000 people.",
        "",
    ]
    if postgres:
        one, two = postgres["one"], postgres["two"]
        lines += [
            "## 6. PostgreSQL and several processes — `python -m bench.turn_overhead --postgres URL`,"
            " `python -m bench.throughput --postgres URL`",
            "",
            "The same turn on a local PostgreSQL server (one run each, 300 turns a size; after each size",
            "is stored the benchmark runs the store's daily upkeep, which refreshes PostgreSQL's planner",
            "statistics, as autovacuum and the upkeep do in a live database):",
            "",
            "| stored messages | p50 ms | p99 ms | round trips a turn | recall left out: p50 ms | p99 ms |",
            "|---|---|---|---|---|---|",
            *[f"| {size:,} | {p50:.2f} | {p99:.2f} | {trips:.1f} | {postgres['without_recall'][size][0]:.2f} | "
              f"{postgres['without_recall'][size][1]:.2f} |"
              for size, (p50, p99, _, _, trips) in postgres["overhead"].items()],
            "",
            f"Throughput with 200 conversations × {TURNS} turns (past the window: summaries and recall at work) on one PostgreSQL database, first in one bot",
            "process, then split over two processes released at the same moment; afterwards every",
            "conversation is read back (each message once, in order, each answered once, directly after it):",
            "",
            "| processes | turns/s | p50 ms | p99 ms | whole | bot CPU a turn | PostgreSQL server CPU a turn |",
            "|---|---|---|---|---|---|---|",
            *[f"| {run.processes} | {run.rate:.0f} | {run.p50:.0f} | {run.p99:.0f} | {'yes' if run.whole else '**no**'} | "
              f"{run.bot_cpu_ms:.2f} ms | "
              + (f"{run.database_cpu_ms:.2f} ms |" if run.database_cpu_ms is not None else "(not on this machine) |")
              for run in (one, two)],
            "",
            f"Two processes reach {two.rate / one.rate:.2f}× one. The machine has "
            f"{os.cpu_count()} cores, shared by the bot processes and the PostgreSQL",
            "server: the last two columns are CPU time per turn, measured (the bot's from its processes,",
            "the server's from its own processes, the ones that ended included; other tenants of the",
            "machine are not counted). When one bot process and the server already keep the cores busy,",
            "a second process can only take what is left.",
            "",
        ]
    lines += [
        "## A turn while 8 clients flood the memory page — `python -m bench.page_flood`",
        "",
        f"A conversation of {page_flood.HISTORY:,} messages and 240 saved memories, Ann signed in, "
        f"{flood['clients']} clients in another",
        "process asking for her page as fast as it answers; the page served as the bot serves it, by",
        f"`python -m bot page` beside the bot's process (bot/page/process.py); {flood['turns']:,} turns "
        "quiet and as many flooded,",
        f"in {flood['blocks']} blocks of each, interleaved (quiet, flooded, flooded, quiet, …) so that the machine's "
        "drift falls on both; each run:",
        "",
        "| run | quiet p50 / p99 | flooded p50 / p99 | p99 raised | pages a second |",
        "|---|---|---|---|---|",
        *[f"| {n} | {run['quiet_p50']:.2f} / {run['quiet_p99']:.2f} ms | {run['flood_p50']:.2f} / "
          f"{run['flood_p99']:.2f} ms | {100 * run['rise']:+.0f} % | {run['pages_per_s']:.1f} |"
          for n, run in enumerate(floods, 1)],
        "",
        "The page's queries and drawing are the page process's, at a lower CPU priority, and it makes",
        "pages at most a tenth of the time (adapters/web/server.py PAGE_SHARE). What a flood still",
        "costs a turn is not CPU time the bot waits for: it is the caches and memory the two processes",
        "share (see \"What the page's flood costs, and why\" below). A session's requests past its bound",
        "are answered 429 after a second (`REFUSED_AFTER_S`), so the clients ask once a second each.",
        "",
        "## What the toolbox costs a turn that calls no tool (#67 item 6) — `bench/turn_cpu.py [--no-tools]`",
        "",
        "1,000 messages: every built-in tool offered, against `[tools] enabled = []` (the memory tools",
        "only, as before SPEC 18). Instructions a turn are counted by valgrind's callgrind",
        "(`turn_cpu.instructions()`: 120 turns less 20, ÷ 100), which runs of one tree repeat within",
        f"about 0.5 %; CPU time a turn is measured in 300 turns, {RUNS} interleaved runs, and drifts with",
        "the machine's load by more than the toolbox costs.",
        "",
        "| turn | instructions a turn | CPU a turn (each run) | median |",
        "|---|---|---|---|",
        *[f"| {name} | {toolbox_instructions[offered] / 1e6:.2f} M | {', '.join(f'{ms:.2f}' for ms in toolbox[offered])} ms | "
          f"{statistics.median(toolbox[offered]):.2f} ms |"
          for name, offered in (("memory tools only", False), ("every built-in tool offered", True))],
        "",
        f"{100 * tools_cost:+.1f} % by the instructions ({100 * tools_cpu_cost:+.1f} % by the CPU medians): the tool",
        "definitions counted into the prompt and sent, and the toolbox made for the turn.",
        "",
        "## The reminders' due scan — `python -m bench.reminders`",
        "",
        "100,000 pending reminders of 100 people, 100 of them due now; `Reminders.due` (what each",
        "process's scan asks every 2 s), 20 times. Target: under 0.5 s.",
        "",
        "| backend | median | slowest | plan |",
        "|---|---|---|---|",
        *[f"| {'PostgreSQL' if scan['backend'] == 'postgresql' else 'SQLite'} | {scan['scan_ms_median']:.2f} ms | "
          f"{scan['scan_ms_max']:.2f} ms | `{scan['plan'][0]}` |" for scan in due_scans],
        "",
        "The partial index `reminders_due (character_id, due_at) WHERE sending IS NULL` holds only",
        "reminders not being sent, so the scan reads the due ones and stops.",
        "",
    ]
    written = {line for line in lines if line.startswith("## ")}
    text = "\n".join(lines) + "\n" + "\n".join(kept_sections(DOCS / "benchmarks.md", written))
    DOCS.mkdir(exist_ok=True)
    (DOCS / "benchmarks.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
