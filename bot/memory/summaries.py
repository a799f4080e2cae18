"""Layer 2 — the conversation summary in three tiers (SPEC section 4).

Messages that have left the live window are *pending*. After a reply was delivered (never
before), a batch starts once 10 messages or 2,000 tokens are pending; it takes the oldest
pending messages, at most 40 messages / 6,000 tokens, and becomes one Recent summary. 4 Recent
summaries merge into 1 Merged; 4 Merged fold into the conversation's single Long-term memory,
capped at about 8,000 tokens: above 110 % it is compacted, its earliest entries turned into
period overviews, `[verbatim]` corrections and rules kept as written.

Summarizing runs in the background, one job at a time per conversation, in whichever process
claims it (`Coordination.claim`), so each batch is summarized once. A failed summary call
loses nothing: the messages stay pending and the conversation is retried later, with backoff.
While a rebuild of the conversation exists, new messages wait for it.

In a scene (SPEC 22) a character that missed messages has a summary of its own (`seen_by`), built
the same way from the messages it witnessed only; the characters that witnessed everything share
the scene's.
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable, Sequence

from bot.characters.cards import StoredCharacter
from bot.memory.conversation_tasks import ConversationTasks
from bot.memory.summary_prompts import (
    BATCH_PROMPT,
    COMPACT_PROMPT,
    FOLD_PROMPT,
    MERGE_PROMPT,
    as_verbatim,
    keep_verbatim,
    system_message,
    transcript,
)
from bot.memory.window import WINDOW_MAX_MESSAGES, live_window, take_within
from bot.model.llm import Completion, LLMClient, LLMError
from bot.model.tokens import TokenCounter
from bot.text import ended_at_a_sentence
from storage.ports import MessageRow, Store, SummaryRow, SummaryStartedAgain, SummaryState

log = logging.getLogger(__name__)
Charge = Callable[[Completion], Awaitable[None]]  # spends a model call on someone's allowance

BATCH_MIN_MESSAGES = 10
BATCH_MIN_TOKENS = 2_000
BATCH_MAX_MESSAGES = 40
BATCH_MAX_TOKENS = 6_000
RECENT_PER_MERGED = 4
MERGED_PER_FOLD = 4
LONG_TERM_CAP_TOKENS = 8_000
COMPACT_ABOVE = 1.10
SUMMARY_LEASE_S = 600.0  # a process that dies mid-summary leaves it to another after this
RETRY_BASE_S = 60.0
RETRY_MAX_S = 3_600.0
SUMMARY_MAX_TOKENS = {"recent": 500, "merged": 800, "long_term": 1_200, "compact": 2_500}


def batch_is_due(pending_messages: int, pending_tokens: int) -> bool:
    return pending_messages >= BATCH_MIN_MESSAGES or pending_tokens >= BATCH_MIN_TOKENS


def take_batch(pending_oldest_first: list[MessageRow], context_window: int) -> list[MessageRow]:
    """The oldest pending messages, at most 40 messages / 6,000 tokens, and within what a summary
    reads of what the server holds (`reads_at_most`); always at least one."""
    return take_within(pending_oldest_first, BATCH_MAX_MESSAGES, min(BATCH_MAX_TOKENS, reads_at_most(context_window)))


def reads_at_most(context_window: int) -> int:
    """What a summary call reads — a batch, the entries it merges or folds, the Long-term part it
    compacts: three fifths of what the server holds. Its instructions and its answer
    (`writes_at_most`) take the rest (SPEC 8: a summary's prompt never outgrows the context)."""
    return context_window * 3 // 5


def writes_at_most(kind: str, context_window: int) -> int:
    """A summary's answer: its tier's own cap, within a fifth of what the server holds (on a
    2,048-token server a Long-term compaction asked for 2,500 could never fit)."""
    return min(SUMMARY_MAX_TOKENS[kind], context_window // 5)


class Summarizer:
    def __init__(
        self,
        store: Store,
        llm: LLMClient,
        counter: TokenCounter,
        characters: dict[int, StoredCharacter],
        context_window: Callable[[], int],
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.llm = llm
        self.counter = counter
        self.characters = characters
        self.context_window = context_window  # what the server holds now, as the turns learned it (it shrinks)
        self.clock = clock
        self._jobs = ConversationTasks("summarize")
        self._again: set[int] = set()
        self._checked: set[tuple[int, int | None]] = set()  # summaries consolidated since start

    # -- scheduling ------------------------------------------------------------------------
    def schedule(self, conversation_id: int) -> None:
        """Summarize the conversation in the background; one job at a time per conversation."""
        if not self._jobs.start(conversation_id, lambda: self._job(conversation_id)):
            self._again.add(conversation_id)

    async def _job(self, conversation_id: int) -> None:
        try:
            while True:
                self._again.discard(conversation_id)
                for seen_by, state in await self.store.summaries.summary_states(conversation_id):
                    if await self._work_due(conversation_id, state, seen_by):  # reads only: most replies leave nothing
                        job = f"summary:{conversation_id}" + (f":{seen_by}" if seen_by is not None else "")
                        async with self.store.coordination.claim(job, SUMMARY_LEASE_S) as mine:
                            if mine:  # else another process sharing the database summarizes it now
                                await self.summarize(conversation_id, seen_by)
                if conversation_id not in self._again:
                    return
        except Exception:
            log.exception("summarizing conversation %d failed", conversation_id)

    def pending(self) -> int:
        """Conversations this process is summarizing or about to."""
        return len(self._jobs)

    async def idle(self) -> None:
        """Wait until no summary job runs (tests, shutdown)."""
        await self._jobs.idle()

    async def stop(self) -> None:
        await self._jobs.stop()

    async def retry_due(self) -> None:
        for conversation_id in await self.store.summaries.due_summary_retries(self.clock()):
            self.schedule(conversation_id)

    # -- the work --------------------------------------------------------------------------
    async def _work_due(self, conversation_id: int, state: SummaryState, seen_by: int | None = None) -> bool:
        if state.rebuilding:
            return False
        if state.retry_at is not None and state.retry_at > self.clock():  # its backoff holds: retry_due takes it
            return False
        if state.failures or (conversation_id, seen_by) not in self._checked:
            return True
        return await self._due_before(conversation_id, state.summarized_pos, seen_by) is not None

    async def summarize(self, conversation_id: int, seen_by: int | None = None) -> None:
        """Bring the live summary (or `seen_by`'s own, SPEC 22) up to date. On a model failure,
        keep everything pending and set it up for a retry with backoff. Runs after every
        delivered reply, so one job at a time per conversation (see `_job`)."""
        state = await self.store.summaries.summary_state(conversation_id, seen_by)
        if state.rebuilding:
            return  # new messages wait until the rebuild ends
        try:
            if state.failures or (conversation_id, seen_by) not in self._checked:
                # a retry, or a summary this process has not seen: finish any merge left undone
                await self.consolidate(conversation_id, state.generation, seen_by=seen_by)
                self._checked.add((conversation_id, seen_by))
            covered: int | None = state.summarized_pos
            while covered is not None:
                covered = await self.step(conversation_id, state.generation, covered, seen_by=seen_by)
        except SummaryStartedAgain:  # a rebuild began meanwhile: it schedules this summary again when done
            log.info("conversation %d: %s started again while it was written; nothing of that pass is kept",
                     conversation_id, f"character {seen_by}'s own summary" if seen_by is not None else "its summary")
            return
        except LLMError as failure:
            failures = state.failures + 1
            delay = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (failures - 1))
            log.warning("summary of conversation %d%s failed (%s); retrying in %.0f s", conversation_id,
                        f" (character {seen_by}'s own)" if seen_by is not None else "", failure, delay)
            await self.store.summaries.set_summary_retry(conversation_id, failures, self.clock() + delay, seen_by)
            return
        if state.failures or state.retry_at is not None:
            await self.store.summaries.set_summary_retry(conversation_id, 0, None, seen_by)

    async def step(self, conversation_id: int, generation: int, covered: int,
                   corrections: Sequence[SummaryRow] = (), charge: Charge | None = None,
                   seen_by: int | None = None) -> int | None:
        """If a batch is due after position `covered`, summarize it into a Recent summary of
        `generation` and return the new covered position; else None. `corrections` (entries a
        person edited, during a rebuild) that begin within the batch go in with it, kept as written.
        `charge`: whose allowance each model call is spent on (a rebuild a person asked for).
        `seen_by`: that character's own summary, of the messages it witnessed (SPEC 22)."""
        before = await self._due_before(conversation_id, covered, seen_by)
        if before is None:
            return None
        pending = await self.store.conversations.messages_between(conversation_id, covered, before, BATCH_MAX_MESSAGES,
                                                                  seen_by)
        batch = take_batch(pending, self.context_window())
        edits = [as_verbatim(c.content) for c in corrections if c.first_pos <= batch[-1].pos]
        text = await self._write("recent", conversation_id, [transcript(batch), *edits], BATCH_PROMPT, charge)
        await self.store.summaries.write_summary(
            conversation_id, generation, "recent", text, self.counter.count(text),
            batch[0].pos, batch[-1].pos, replaces=[], covered_pos=batch[-1].pos, seen_by=seen_by,
        )
        await self.consolidate(conversation_id, generation, charge, seen_by)
        return batch[-1].pos

    async def _due_before(self, conversation_id: int, covered: int, seen_by: int | None = None) -> int | None:
        """Whether a batch is due after position `covered`: the position it must stay before
        (the live window's first message), or None.

        The newest 60 messages (the window's 50 and the batch threshold's 10) always tell: either
        they reach back past `covered`, and every pending message is among them, or at least 10
        of them lie behind the window."""
        newest_first = await self.store.conversations.recent_sizes(  # their sizes tell, not their words
            conversation_id, WINDOW_MAX_MESSAGES + BATCH_MIN_MESSAGES, seen_by=seen_by)
        if not newest_first:
            return None
        before = live_window(newest_first, self.context_window())[0].pos
        behind = [m for m in newest_first if covered < m.pos < before]
        return before if batch_is_due(len(behind), sum(m.tokens for m in behind)) else None

    async def consolidate(self, conversation_id: int, generation: int, charge: Charge | None = None,
                          seen_by: int | None = None) -> None:
        """4 Recent → 1 Merged; 4 Merged → folded into Long-term; compact Long-term over 110 %."""
        entries = await self.store.summaries.summaries(conversation_id, generation, seen_by)
        recent = [e for e in entries if e.tier == "recent"]
        reads = reads_at_most(self.context_window())  # a server with a small context: fewer at once
        if len(recent) >= RECENT_PER_MERGED:
            await self._combine(conversation_id, generation, "merged", take_within(recent, RECENT_PER_MERGED, reads),
                                MERGE_PROMPT, charge, seen_by)
            entries = await self.store.summaries.summaries(conversation_id, generation, seen_by)
        merged = [e for e in entries if e.tier == "merged"]
        long_term = next((e for e in entries if e.tier == "long_term"), None)
        if len(merged) >= MERGED_PER_FOLD:
            folded = take_within(merged, MERGED_PER_FOLD, reads)
            entry = await self._text_of("long_term", conversation_id, folded, FOLD_PROMPT, charge)
            content = f"{long_term.content}\n\n{entry}" if long_term else entry
            long_term = await self.store.summaries.write_summary(
                conversation_id, generation, "long_term", content, self.counter.count(content),
                long_term.first_pos if long_term else folded[0].first_pos, folded[-1].last_pos,
                replaces=([long_term.id] if long_term else []) + [e.id for e in folded], seen_by=seen_by,
            )
        if long_term and long_term.tokens > LONG_TERM_CAP_TOKENS * COMPACT_ABOVE:
            await self.compact(conversation_id, generation, long_term, charge, seen_by)

    async def compact(self, conversation_id: int, generation: int, long_term: SummaryRow,
                      charge: Charge | None = None, seen_by: int | None = None) -> None:
        """Turn the earliest half of the Long-term timeline (as much of it as a summary reads) into
        short period overviews."""
        sections = [s for s in long_term.content.split("\n\n") if s.strip()]
        sizes = [self.counter.count(section) for section in sections]
        half = max(1, len(sections) // 2)
        while half > 1 and sum(sizes[:half]) > reads_at_most(self.context_window()):
            half -= 1
        earliest, rest = sections[:half], sections[half:]
        overview = await self._write("compact", conversation_id, ["\n\n".join(earliest)], COMPACT_PROMPT, charge)
        content = "\n\n".join([overview, *rest])
        await self.store.summaries.write_summary(
            conversation_id, generation, "long_term", content, self.counter.count(content),
            long_term.first_pos, long_term.last_pos, replaces=[long_term.id], seen_by=seen_by,
        )

    async def _combine(self, conversation_id: int, generation: int, tier: str,
                       parts: list[SummaryRow], prompt: str, charge: Charge | None, seen_by: int | None) -> None:
        text = await self._text_of(tier, conversation_id, parts, prompt, charge)
        await self.store.summaries.write_summary(
            conversation_id, generation, tier, text, self.counter.count(text),
            parts[0].first_pos, parts[-1].last_pos, replaces=[p.id for p in parts], seen_by=seen_by,
        )

    async def _text_of(self, tier: str, conversation_id: int, parts: list[SummaryRow], prompt: str,
                       charge: Charge | None) -> str:
        # An entry the person edited goes in marked [verbatim], so it survives as written.
        texts = [as_verbatim(p.content) if p.edited else p.content for p in parts]
        return await self._write(tier, conversation_id, texts, prompt, charge)

    async def _write(self, kind: str, conversation_id: int, inputs: list[str], prompt: str,
                     charge: Charge | None = None) -> str:
        conversation = await self.store.conversations.conversation_by_id(conversation_id)
        character = self.characters[conversation.character_id].character
        body = "\n\n---\n\n".join(inputs)
        # a scene's summary is for every character who speaks in it
        names = [stored.character.name for stored in self.characters.values()
                 if conversation.is_shared and f"\n{stored.character.name}: " in f"\n{body}"]
        completion = await self.llm.complete(
            [system_message(prompt, names if len(names) > 1 else [character.name]), {"role": "user", "content": body}],
            model=self.llm.summary_model,
            max_tokens=writes_at_most(kind, self.context_window()),
            background=True,
        )
        if charge is not None:
            await charge(completion)
        text = completion.text.strip()
        if completion.cut:  # stopped at its length limit: never a fragment kept as the summary
            text = ended_at_a_sentence(text)
        if not text:
            raise LLMError("the model sent an empty summary")
        return keep_verbatim(inputs, text)
