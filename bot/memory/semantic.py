"""Semantic recall (SPEC section 11): with `[recall] embedding_model` set, stored messages are
embedded in the background through the model server's `/v1/embeddings`, in batches, newest
first (a backfill of older ones included; a change of model embeds them all again), and each
new message is embedded for its own turn, whose recall then adds the places nearest in meaning
after the word matches (bot/memory/recall.py). The server is `[recall] embedding_base_url` when set
(else `[llm] base_url`); background batches are small and wait while a turn's own request is
out, so a turn never queues behind a backfill on a server that answers one request at a time.

An embedding server that is slow or failing never fails a turn, and delays at most one turn a
minute, by at most QUERY_WAIT_S: that turn recalls by full text alone (a vector that comes later
is still kept); after it, turns use their vectors only if already there, for
PAUSE_AFTER_FAILURE_S; after a failure, no turn asks the server for that long. Each such pause
is one WARNING line and one count of `keepsake_semantic_recall_pauses` (bot/metrics.py). A database that cannot keep
vectors (PostgreSQL without pgvector) is named once at start-up; recall stays full-text.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Callable

from bot import metrics
from bot.model.llm import LLMClient, LLMError
from bot.model.tokens import TokenCounter
from storage.ports import MessageRow, Vectors

log = logging.getLogger(__name__)

BATCH = 8  # messages a background request: short, so a turn's own request never waits long behind one
RUN_LIMIT = 1_024  # messages embedded in one run of the background job
EMBED_MAX_TOKENS = 2_000  # a longer message is embedded by its beginning (models take ~8k at most)
QUERY_WAIT_S = 1.0  # the longest a turn waits for its message's vector
QUERY_TIMEOUT_S = 10.0
BATCH_TIMEOUT_S = 60.0
PAUSE_AFTER_FAILURE_S = 60.0


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector


class SemanticRecall:
    def __init__(self, vectors: Vectors, llm: LLMClient, counter: TokenCounter, model: str,
                 clock: Callable[[], float] = time.monotonic):
        self.vectors = vectors
        self.llm = llm
        self.counter = counter
        self.model = model
        self.clock = clock
        self.enabled = False  # set by start(): the database keeps vectors
        self._paused_until = 0.0  # after a failure: nothing is asked of the server until then
        self._impatient_until = 0.0  # after a turn waited in vain: turns do not wait until then
        self._asking: set[asyncio.Task] = set()  # turns' messages being embedded now

    async def start(self) -> bool:
        self.enabled = await self.vectors.use_model(self.model)
        if not self.enabled:
            log.warning("[recall] embedding_model = %s, but this database cannot keep vectors: on PostgreSQL "
                        "that needs the pgvector extension (CREATE EXTENSION vector). Recall stays full-text.",
                        self.model)
        return self.enabled

    def embed_message(self, message: MessageRow) -> asyncio.Task | None:
        """Start embedding a just-stored message for its turn (its vector is kept, too)."""
        if not self.enabled or self.clock() < self._paused_until:
            return None
        task = asyncio.create_task(self._embed_one(message.id, message.content))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)
        return task

    async def stop(self) -> None:
        for task in list(self._asking):
            task.cancel()
        await asyncio.gather(*self._asking, return_exceptions=True)

    async def _embed_one(self, message_id: int, text: str) -> list[float] | None:
        try:
            vector, = await self.llm.embed(self.model, [self._cut(text)], timeout_s=QUERY_TIMEOUT_S, retries=0,
                                           background=False)
        except LLMError as failure:
            self._failed(failure)
            return None
        vector = unit(vector)
        try:
            await self.vectors.save(self.model, [(message_id, text, vector)])
        except Exception:  # the turn can still use it; the background job embeds the message again
            log.exception("semantic recall: a message's vector could not be kept")
        return vector

    async def nearest(self, embedding: asyncio.Task | None, conversation_id: int, before_pos: int,
                      limit: int, seen_by: int | None = None) -> list[int]:
        """Places of the conversation's messages before `before_pos` (witnessed by `seen_by`,
        SPEC 22) closest in meaning to the turn's message, best first, once its vector is ready
        (within QUERY_WAIT_S, or at once for a minute after a turn waited in vain); else none."""
        if embedding is None:
            return []
        patient = self.clock() >= self._impatient_until
        done, _ = await asyncio.wait({embedding}, timeout=QUERY_WAIT_S if patient else 0)
        if not done:
            if patient:
                log.warning("semantic recall: the message's vector was not ready in %.1f s; turns recall by full "
                            "text alone unless their vector is already there, for %d s",
                            QUERY_WAIT_S, PAUSE_AFTER_FAILURE_S)
                metrics.SEMANTIC_PAUSES.labels("slow").inc()
                self._impatient_until = self.clock() + PAUSE_AFTER_FAILURE_S
            return []
        try:
            vector = embedding.result()  # None when the server failed (said once, in _failed)
            return [] if vector is None else await self.vectors.nearest(conversation_id, vector, before_pos,
                                                                              limit, seen_by)
        except Exception as failure:  # a bug or a database error: this turn recalls by full text alone
            log.warning("semantic recall failed for a turn (%s: %s); full text alone",
                        type(failure).__name__, failure)
            return []

    async def embed_waiting(self) -> int:
        """The background job: embed waiting messages, newest first, in batches; how many."""
        embedded = 0
        while embedded < RUN_LIMIT and self.enabled and self.clock() >= self._paused_until:
            while self._asking:  # a turn's message goes first: the server may answer one request at a time
                await asyncio.wait(set(self._asking))
            batch = await self.vectors.waiting(BATCH)
            if not batch:
                break
            try:
                vectors = await self.llm.embed(self.model, [self._cut(text) for _, text in batch],
                                               timeout_s=BATCH_TIMEOUT_S, retries=2)
            except LLMError as failure:
                self._failed(failure)
                break
            await self.vectors.save(self.model, [(message_id, text, unit(vector))
                                                       for (message_id, text), vector in zip(batch, vectors)])
            embedded += len(batch)
        return embedded

    def _cut(self, text: str) -> str:
        return self.counter.truncate(text, EMBED_MAX_TOKENS)

    def _failed(self, failure: LLMError) -> None:
        if self.clock() >= self._paused_until:
            log.warning("semantic recall: the embedding server failed (%s); full text alone for %d s",
                        failure, PAUSE_AFTER_FAILURE_S)
            metrics.SEMANTIC_PAUSES.labels("failed").inc()
        self._paused_until = self.clock() + PAUSE_AFTER_FAILURE_S
