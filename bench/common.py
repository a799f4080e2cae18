"""What the benchmarks share: an instant, in-process OpenAI-compatible LLM (the real `openai`
client over httpx2's MockTransport, no sockets), a runtime in a temporary folder, seeding helpers
and percentiles."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

import asyncpg
import httpx2

import adapters.registry  # noqa: F401 — declares the platforms' traits, as the entry point does
from bot.config import parse_config
from bot.contract import ConversationKey, Identity
from bot.model.tokens import TokenCounter
from bot.runtime import Runtime, build_runtime

API_KEY_ENV = "KEEPSAKE_BENCH_API_KEY"
LLM_URL = "http://llm.invalid/v1"  # never reached: the InstantLLM answers in process
PERSONA = "You are {name}, a kind lighthouse keeper on a northern island."
SUMMARY_OPENINGS = ("You keep the memory of a conversation", "You keep the long-term memory")
SUMMARY_SHARE = 0.5  # the share of lines the benchmark's summarizer keeps


def kind_of(body: dict) -> str:
    system = body["messages"][0]["content"] if body["messages"] else ""
    return "summary" if system.startswith(SUMMARY_OPENINGS) else "reply"


def lossy_summary(source: str, max_tokens: int, counter: TokenCounter, share: float = SUMMARY_SHARE) -> str:
    """A summarizer that does not know what matters: it keeps a fixed share of the lines it is
    given (`share`), chosen by a hash of their text (not by what they say), then cuts what it
    kept to the tier's token budget (the request's `max_tokens`), as a model must. [verbatim] lines are
    kept, as the summary prompts require. So facts are lost as they would be with a model that
    summarizes blindly: at random, and more with every tier."""
    kept: list[str] = []
    used = 0
    for line in source.splitlines():
        line = line.strip()
        if not line or line == "---":
            continue
        if not line.startswith("[verbatim]") and zlib.crc32(line.encode()) % 100 >= 100 * share:
            continue
        entry = line if line.startswith(("- ", "[verbatim]")) else f"- {line}"
        cost = counter.count(entry) + 1
        if used + cost > max_tokens:
            break
        kept.append(entry)
        used += cost
    return "\n".join(kept) or "- (nothing kept)"


class InstantLLM:
    """Answers at once. Counts the tokens of every call, by kind (reply or summary). Summaries
    keep `summary_share` of the lines they are given (`lossy_summary`)."""

    def __init__(self, reply: str = "Okay, noted.", count_tokens: bool = False, summary_share: float = SUMMARY_SHARE):
        self.reply = reply
        self.summary_share = summary_share
        self.counter = TokenCounter("gpt-4o-mini") if count_tokens else None
        self.summary_counter = self.counter or TokenCounter("gpt-4o-mini")
        self.tokens = {"reply": 0, "summary": 0}
        self.calls = {"reply": 0, "summary": 0}
        self.last_reply_prompt: list[dict] = []
        self.own_time_s = 0.0  # the fake model's own work, which a turn's overhead excludes
        self.transcript = "what a voice note said"  # /audio/transcriptions answers this
        self.speech = b""  # /audio/speech answers these bytes (bench.voice sets real OGG/Opus)
        self._canned_stream = b""
        self._canned = json.dumps({  # a plain reply, encoded once
            "id": "bench", "object": "chat.completion", "created": int(time.time()), "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }).encode()

    def streamed(self, chunks: int) -> None:
        """Stream every reply as `chunks` server-sent events, as a real model server does."""
        events = [{"choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}]}] * chunks
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._canned_stream = "".join(
            f"data: {json.dumps({'id': 'bench', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'm', **e})}\n\n"
            for e in events
        ).encode() + b"data: [DONE]\n\n"

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        started = time.perf_counter()
        try:
            return self._answer(request)
        finally:
            self.own_time_s += time.perf_counter() - started

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/audio/transcriptions"):
            return httpx2.Response(200, json={"text": self.transcript})
        if request.url.path.endswith("/audio/speech"):
            return httpx2.Response(200, content=self.speech, headers={"content-type": "audio/ogg"})
        if request.url.path.endswith("/embeddings"):
            return self._embeddings(json.loads(request.content))
        if self._canned_stream and b'"stream":true' in request.content:
            return httpx2.Response(200, content=self._canned_stream, headers={"content-type": "text/event-stream"})
        if self.counter is None and not any(o.encode() in request.content for o in SUMMARY_OPENINGS):
            return httpx2.Response(200, content=self._canned, headers={"content-type": "application/json"})
        body = json.loads(request.content)
        kind = kind_of(body)
        content = (lossy_summary(body["messages"][-1]["content"], body.get("max_tokens") or 500, self.summary_counter,
                                 self.summary_share) if kind == "summary" else self.reply)
        if kind == "reply":
            self.last_reply_prompt = body["messages"]
        prompt_tokens = completion_tokens = 0
        if self.counter is not None:  # the model's own work: only where a benchmark needs the figure
            prompt_tokens = (sum(self.counter.count(str(m.get("content") or "")) + 4 for m in body["messages"])
                             + (self.counter.count(json.dumps(body["tools"])) if body.get("tools") else 0))  # as servers do
            completion_tokens = self.counter.count(content)
        self.tokens[kind] += prompt_tokens + completion_tokens
        self.calls[kind] += 1
        return httpx2.Response(200, json={
            "id": "bench", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }, headers={"content-type": "application/json"})


    @staticmethod
    def _embeddings(body: dict) -> httpx2.Response:
        """Vectors that say nothing of meaning (seeded by each text), with the size a real
        server sends: what is measured is the bot's work with them, not their quality."""
        size = body.get("dimensions") or 256
        data = [{"object": "embedding", "index": i,
                 "embedding": random.Random(zlib.crc32(text.encode())).choices(UNIT_STEPS, k=size)}
                for i, text in enumerate(body["input"])]
        return httpx2.Response(200, json={"object": "list", "data": data, "model": body["model"],
                                          "usage": {"prompt_tokens": 0, "total_tokens": 0}})


UNIT_STEPS = [x / 100 for x in range(-100, 101)]


async def bench_runtime(folder: Path, llm: InstantLLM, clock: Callable[[], float] = time.time,
                        storage_url: str | None = None, embedding_model: str | None = None,
                        checkins: dict[str, Any] | None = None, embedding_base_url: str | None = None,
                        voice: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
                        character: str = "Mira", tools: dict[str, Any] | None = None, web: dict[str, Any] | None = None,
                        **llm_options: Any) -> Runtime:
    """A runtime with one character (`character`, Mira unless named) on an SQLite file in
    `folder`, or on the database `storage_url` names; with `embedding_model`, semantic recall on;
    with `checkins`, the character's [characters.checkins]; with `voice`, a [voice] table; with
    `limits`, a [limits] table; with `tools`, a [tools] table (else the default: every built-in
    tool that runs without a server); with `web`, a [web] table (the memory page)."""
    os.environ.setdefault(API_KEY_ENV, "sk-bench")
    raw = {
        "llm": {"base_url": LLM_URL, "api_key_env": API_KEY_ENV, "model": "gpt-4o-mini",
                "context_window": 128_000, "max_retries": 0, "tools": "auto", **llm_options},
        "storage": {"url": storage_url} if storage_url else {"path": str(folder / "bench.sqlite3")},
        "recall": ({"embedding_model": embedding_model} if embedding_model else {})
        | ({"embedding_base_url": embedding_base_url} if embedding_base_url else {}),
        "characters": [{"name": character, "persona": PERSONA.format(name=character),
                        **({"checkins": checkins} if checkins else {})}],
    } | ({"voice": voice} if voice is not None else {}) | ({"limits": limits} if limits is not None else {}) \
        | ({"tools": tools} if tools is not None else {}) | ({"web": web} if web is not None else {})
    return await build_runtime(parse_config(raw, folder), clock=clock, llm_http_client=llm.http_client())


async def ann_with_history(runtime: Runtime, key: ConversationKey, ann: Identity,
                           lines: Iterable[str]) -> tuple[int, int]:
    """Ann with her 240 saved memories (`fill_memories`) and these earlier messages in the
    conversation `key`, stored the way a turn stores the person's message: (person, conversation)."""
    person = await runtime.store.people.person_for_identity(ann.platform, ann.user_id)
    await fill_memories(runtime, person)
    conversation = (await runtime.cast.conversation_for(key)).id
    for line in lines:
        await runtime.store.conversations.add_user_message(conversation, person, "Ann", line,
                                                          runtime.counter.count(line), None)
    return person, conversation


async def answered(runtime: Runtime, conversation_id: int, person_id: int, line: str, reply: str) -> None:
    """One exchange of a long history, stored as a turn stores it, without the model: the person's
    message and its turn, the reply, the reply shown. A history of bare messages would leave out
    the turns a real one holds, one for every reply, and what reads them."""
    turns, count = runtime.store.turns, runtime.counter.count
    arrival = await turns.store_and_queue(conversation_id, person_id, "Ann", line, count(line), None, None)
    assert arrival.message is not None and arrival.turn_id is not None, "a history is written one turn at a time"
    await turns.finish_turn(arrival.turn_id, arrival.message, "Mira", reply, count(reply), {})
    await turns.reply_shown(arrival.turn_id, [])


async def fill_memories(runtime: Runtime, person_id: int) -> None:
    """240 saved memories: 100 unpinned + 20 pinned in both scopes."""
    character = runtime.cast.character("Mira").id
    for scope in ("character", "global"):
        for i in range(120):
            text = f"{scope} fact {i}: something that stays true about this person for weeks"
            await runtime.store.memories.add_memory(person_id, character, scope, text, runtime.counter.count(text),
                                           pinned=i >= 100, source="person")


@contextlib.asynccontextmanager
async def throwaway_schema(server_url: str) -> AsyncIterator[str]:
    """A store URL on the PostgreSQL server with a new, empty schema, dropped afterwards."""
    schema = f"keepsake_run_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield schema_url(server_url, schema)
    connection = await asyncpg.connect(server_url)
    try:
        await drop_schema(connection, schema)
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def store_url(postgres: str | None) -> AsyncIterator[str | None]:
    """Where a benchmark's store goes: a throwaway schema on the PostgreSQL server `postgres`
    names, else None (an SQLite file in the benchmark's folder)."""
    if not postgres:
        yield None
        return
    async with throwaway_schema(postgres) as url:
        yield url


def schema_url(server_url: str, schema: str) -> str:
    """The store URL of a schema on the PostgreSQL server."""
    return f"{server_url}{'&' if '?' in server_url else '?'}schema={schema}"


async def drop_schema(connection: asyncpg.Connection, schema: str) -> None:
    await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# Ordinary words for benchmark conversations: what people talk about, when. A message names a
# topic and a time; most of its words are shared with many other messages, as in real chat.
TOPICS = ("the storm", "the fishing boats", "my sister's wedding", "the lighthouse lamp", "the harbour market",
          "the old ferry", "your garden", "the winter supplies", "the radio", "the seals on the rocks",
          "my new job", "the school concert", "grandmother's recipe", "the broken window", "the long walk",
          "the library books", "the dog next door", "the train timetable", "the birthday cake", "the night sky")
TIMES = ("on Thursday", "at dusk", "last spring", "after the rain", "this morning", "before the holidays",
         "at the weekend", "in the autumn", "yesterday evening", "when the tide turned")


def chat_line(n: int) -> str:
    """The n-th line of a long conversation, in ordinary words."""
    return (f"we talked about {TOPICS[n % len(TOPICS)]} {TIMES[(n // len(TOPICS)) % len(TIMES)]} and it "
            f"reminded me of {TOPICS[(n * 7 + 3) % len(TOPICS)]}")


def question(n: int) -> str:
    """The n-th question a person asks, about something said before, in ordinary words."""
    return f"do you remember what we said about {TOPICS[(n * 3) % len(TOPICS)]} {TIMES[n % len(TIMES)]}?"


class RoundTrips:
    """Counts what a store asks of its database: each statement, and each transaction's begin and
    commit (on PostgreSQL a round trip over the wire each; on SQLite a hop to the connection's
    thread each, but for a short transaction's statements and commit, which run inline: so on
    SQLite the count is an upper bound). Wraps the store's one `Database` object, which every port
    shares."""

    def __init__(self, db: Any):
        self.count = 0
        for name in ("execute", "one", "all", "value"):
            setattr(db, name, self._counted(getattr(db, name)))
        transaction = db.transaction

        @contextlib.asynccontextmanager
        async def counted_transaction(short: bool = False) -> AsyncIterator[Any]:
            self.count += 2  # its begin and its commit
            async with transaction(short) as tx:
                yield _Counted(tx, self)

        db.transaction = counted_transaction
        if db.short is not db:  # SQLite's short reads, on a connection of their own
            db.short = _Counted(db.short, self)

    def _counted(self, method: Callable) -> Callable:
        async def counted(*args: Any) -> Any:
            self.count += 1
            return await method(*args)
        return counted


class _Counted:
    """A transaction's connection (or SQLite's short reads) whose statements `RoundTrips` counts."""

    def __init__(self, tx: Any, trips: RoundTrips):
        for name in ("execute", "one", "all", "value"):
            setattr(self, name, trips._counted(getattr(tx, name)))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
        cpu = model
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()}"


def temp_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="keepsake-bench-")

