"""Rebuilding a conversation's summary (SPEC section 4, `/memory rebuild`).

A rebuild re-summarizes the conversation's whole stored history in the background into a new
summary generation. The current summary keeps serving until the new one is complete, then the
new one is swapped in at once (one transaction). New messages wait to be summarized until it
ends. Its progress is stored after every batch, so it survives a restart and resumes. On failure
the person is told and can resume or start over; on success the person is told. There is never
more than one rebuild of a conversation at a time.

After /forgetme in a shared conversation only the entries that read none of the person's words
serve meanwhile: the others went with them (storage/sql/summaries.py `start_over`), and the
rebuild nobody asked for (`refresh`) is tried again on each check until it succeeds; one running
starts over.

Entries a person edited are corrections: each goes, marked [verbatim], into the rebuilt batch
where its stretch of the conversation begins (or, if no batch reaches it, in an entry of its
own), so its words reach the rebuilt summary as written.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from bot.memory.conversation_tasks import ConversationTasks
from bot.memory.summaries import Summarizer
from bot.memory.summary_prompts import as_verbatim, verbatim_lines
from bot.model.llm import Completion, LLMError
from storage.ports import RebuildRow, Store, SummaryRow, SummaryStartedAgain

log = logging.getLogger(__name__)

# Tell a person something about a conversation: (conversation id, person id, text).
Notify = Callable[[int, int | None, str], Awaitable[None]]
# Spend tokens on someone's allowance: (person id, character id, tokens in, tokens out).
Spend = Callable[[int | None, int, int, int], Awaitable[None]]

REBUILD_LEASE_S = 600.0  # a process that dies mid-rebuild leaves it to another after this
DONE = "The summary of this conversation has been rebuilt from its whole history, and is in use now."
NOTHING_YET = ("There was nothing to rebuild yet: the conversation is short enough that the character still "
               "reads all of it word for word.")
FAILED = ("The summary rebuild stopped: {reason}. The old summary is still in use. "
          "Send /memory rebuild to resume it or start over.")


class Rebuilds:
    def __init__(self, store: Store, summarizer: Summarizer, notify: Notify, spend: Spend):
        self.store = store
        self.spend = spend  # a rebuild a person asked for is spent on their allowance (SPEC 17)
        self.summarizer = summarizer
        self.notify = notify
        self._tasks = ConversationTasks("rebuild")

    def running(self, conversation_id: int) -> bool:
        return conversation_id in self._tasks

    async def start(self, conversation_id: int, person_id: int) -> RebuildRow | None:
        """Begin a rebuild; None when the conversation has one already."""
        row = await self.store.summaries.start_rebuild(conversation_id, person_id)
        if row is not None:
            self._launch(conversation_id)
        return row

    def refresh(self, conversation_id: int) -> None:
        """Re-summarize from what is stored now, after /forgetme deleted someone's messages and
        with them every summary of the conversation (`forget_person` set the rebuild running,
        or started the running one over). Nobody is told; a failure is tried again on the
        next check (`resume_interrupted`), since nobody could ask for it."""
        self._launch(conversation_id)

    async def resume(self, conversation_id: int) -> None:
        await self.store.summaries.set_rebuild_status(conversation_id, "running")
        self._launch(conversation_id)

    async def restart(self, conversation_id: int) -> None:
        await self.store.summaries.restart_rebuild(conversation_id)
        self._launch(conversation_id)

    async def cancel(self, conversation_id: int) -> None:
        await self._tasks.cancel(conversation_id)
        await self.store.summaries.cancel_rebuild(conversation_id)
        self.summarizer.schedule(conversation_id)

    async def resume_interrupted(self) -> None:
        """Scheduler job: rebuilds a stop left running continue where they were."""
        for row in await self.store.summaries.rebuilds("running"):
            self._launch(row.conversation_id)

    def _launch(self, conversation_id: int) -> None:
        self._tasks.start(conversation_id, lambda: self._run(conversation_id))

    async def _run(self, conversation_id: int) -> None:
        async with self.store.coordination.claim(f"rebuild:{conversation_id}", REBUILD_LEASE_S) as mine:
            if mine:  # else another process sharing the database runs it
                await self._rebuild(conversation_id)

    async def _rebuild(self, conversation_id: int) -> None:
        """The running rebuild, to its end; started over by /forgetme meanwhile, it goes again
        from the start, as the new generation."""
        try:
            while (row := await self.store.summaries.rebuild(conversation_id)) is not None and row.status == "running":
                try:
                    return await self._pass(conversation_id, row)
                except SummaryStartedAgain:
                    log.info("conversation %d: its rebuild started over while it ran (/forgetme); it goes again",
                             conversation_id)
        except Exception:  # not a cancellation, which is no Exception
            log.exception("rebuild of conversation %d crashed; it resumes on the next check", conversation_id)

    async def _pass(self, conversation_id: int, row: RebuildRow) -> None:
        """Rebuild generation `row.generation` from the first message on, or from where it got to."""
        conversation = await self.store.conversations.conversation_by_id(conversation_id)
        assert conversation is not None  # a rebuild goes with its conversation

        async def charge(completion: Completion) -> None:
            await self.spend(row.person_id, conversation.character_id, completion.prompt_tokens,
                             completion.completion_tokens)
        try:
            await self.summarizer.consolidate(conversation_id, row.generation, charge)
            corrections = await self._corrections_to_carry(conversation_id, row.generation)
            covered: int | None = row.progress_pos
            while covered is not None:
                covered = await self.summarizer.step(conversation_id, row.generation, covered, corrections, charge)
                if covered is not None:
                    corrections = [c for c in corrections if c.first_pos > covered]
            for correction in corrections:  # no rebuilt batch reached it: it stays on its own
                await self.store.summaries.write_summary(
                    conversation_id, row.generation, "recent", correction.content, correction.tokens,
                    correction.first_pos, correction.last_pos, replaces=[], edited=True)
        except LLMError as failure:
            if row.person_id is None:  # nobody to tell, nobody to resume it: it stays running
                log.warning("rebuild of conversation %d failed: %s; it is tried again on the next check",
                            conversation_id, failure)
                return
            log.warning("rebuild of conversation %d failed: %s", conversation_id, failure)
            await self.store.summaries.set_rebuild_status(conversation_id, "failed", str(failure))
            await self._tell(conversation_id, row.person_id, FAILED.format(reason=failure))
            return
        await self.store.summaries.finish_rebuild(conversation_id, row.generation)
        rebuilt = await self.store.summaries.summaries(conversation_id)
        await self._tell(conversation_id, row.person_id, DONE if rebuilt else NOTHING_YET)
        self.summarizer.schedule(conversation_id)  # messages that waited

    async def _corrections_to_carry(self, conversation_id: int, generation: int) -> list[SummaryRow]:
        """The live summary's edited entries whose words the rebuilt one does not hold yet (a
        resumed rebuild may have carried some already)."""
        live = await self.store.summaries.summaries(conversation_id)
        rebuilt = "\n".join(e.content for e in await self.store.summaries.summaries(conversation_id, generation))
        return [e for e in live if e.edited
                and not all(line in rebuilt for line in verbatim_lines(as_verbatim(e.content)))]

    async def _tell(self, conversation_id: int, person_id: int | None, text: str) -> None:
        if person_id is None:
            return  # a rebuild nobody asked for (see refresh)
        try:
            await self.notify(conversation_id, person_id, text)
        except Exception:
            log.exception("could not tell person %s about their rebuild", person_id)

    async def idle(self) -> None:
        await self._tasks.idle()

    async def stop(self) -> None:
        await self._tasks.stop()
