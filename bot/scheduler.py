"""Periodic background work on APScheduler's AsyncIOScheduler (SPEC section 9).

- every minute: retry failed summaries whose backoff is over; resume rebuilds a stop left
  running (also once at start-up);
- every minute until it is done: the recall index backfill — messages stored before the index
  existed are indexed in batches, with progress in the log (it carries on after a restart);
- every 10 seconds, with semantic recall on: messages waiting for their vectors are embedded
  (new ones, and older ones in a backfill, newest first), with progress in the log;
- daily: maintenance — the store's own upkeep (SQLite: WAL checkpoint and an online backup into
  the backup folder keeping the last 7) and the optional retention purge. A maintenance missed
  while the bot was stopped runs once at start-up.
Jobs have fixed ids and replace themselves, so restarts never add duplicates. With several
processes on one database, each piece of work is claimed by one of them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.writing_first.checkins import CheckIns
from bot.writing_first.reminders import RemindersDue
from bot.config import StorageConfig
from bot.memory.rebuild import Rebuilds
from bot.memory.semantic import SemanticRecall
from bot.memory.summaries import Summarizer
from storage.ports import Store

if TYPE_CHECKING:  # the MCP SDK loads only for a deployment that lists servers
    from bot.tools.mcp_servers import LateServers

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60
MAINTENANCE_EVERY_S = 24 * 3_600
MAINTENANCE_META = "maintenance_at"
MAINTENANCE_LEASE_S = 3_600.0
BACKFILL_BATCH = 2_000
BACKFILL_LEASE_S = 600.0
EMBED_EVERY_S = 10
EMBED_LEASE_S = 300.0


class BackgroundJobs:
    def __init__(self, store: Store, summarizer: Summarizer, rebuilds: Rebuilds, storage: StorageConfig,
                 clock: Callable[[], float] = time.time, semantic: SemanticRecall | None = None,
                 checkins: CheckIns | None = None, reminders: RemindersDue | None = None,
                 late_servers: LateServers | None = None):
        self.store = store
        self.late_servers = late_servers  # MCP servers that did not answer at start-up
        self.checkins = checkins
        self.reminders = reminders
        self.semantic = semantic
        self.summarizer = summarizer
        self.rebuilds = rebuilds
        self.storage = storage
        self.clock = clock
        self.scheduler = AsyncIOScheduler(timezone=timezone.utc)
        self._running: set[asyncio.Task] = set()
        self._indexed_all = False

    def start(self) -> None:
        """Add the jobs (ids fixed, replaced on restart) and start; call inside the event loop."""
        jobs = [
            ("summary-retry", self.summarizer.retry_due, {"seconds": CHECK_EVERY_S}),
            ("rebuild-resume", self.rebuilds.resume_interrupted, {"seconds": CHECK_EVERY_S}),
            ("maintenance", self.maintenance_if_due, {"seconds": CHECK_EVERY_S * 10}),
            ("recall-backfill", self.index_older_messages, {"seconds": CHECK_EVERY_S}),
        ]
        if self.semantic is not None:
            jobs.append(("recall-embeddings", self.embed_waiting, {"seconds": EMBED_EVERY_S}))
        if self.checkins is not None:  # SPEC 14: a scan per character with [characters.checkins]
            jobs += [(job_id, scan, {"seconds": every}) for job_id, scan, every in self.checkins.jobs()]
        if self.reminders is not None:  # SPEC 19: a scan per character for due reminders
            jobs += [(job_id, scan, {"seconds": every}) for job_id, scan, every in self.reminders.jobs()]
        if self.late_servers is not None:  # SPEC 18: an MCP server down at start is asked again
            jobs.append(("mcp-late-servers", self.late_servers.ask_again, {"seconds": self.late_servers.every_s}))
        for job_id, func, every in jobs:
            # misfire_grace_time None: a run that starts late on a busy machine still runs, without
            # APScheduler's "run time … was missed" warning (coalesce runs it once).
            self.scheduler.add_job(self._stoppable(func), "interval", id=job_id, replace_existing=True,
                                   coalesce=True, max_instances=1, misfire_grace_time=None,
                                   next_run_time=datetime.now(timezone.utc), **every)
        self.scheduler.start()

    def job_ids(self) -> list[str]:
        return sorted(job.id for job in self.scheduler.get_jobs())

    def _stoppable(self, job: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
        """The job as scheduled: `stop()` can wait for it, and a job cut short because the bot is
        stopping is no error (APScheduler would print its CancelledError as a traceback); it
        runs again at the next start."""
        @functools.wraps(job)
        async def run() -> None:
            task = asyncio.current_task()
            self._running.add(task)
            try:
                await job()
            except asyncio.CancelledError:
                log.debug("%s stopped by shutdown", getattr(job, "__name__", "a job"))
            finally:
                self._running.discard(task)
        return run

    async def stop(self) -> None:
        """Stop scheduling, and end the jobs that run now before the store closes under them."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def maintenance_if_due(self) -> bool:
        """Run the daily maintenance if a day has passed since the last one (also one missed
        while the bot was stopped: it runs once, not once per missed day), in one process."""
        async with self.store.coordination.claim("maintenance", MAINTENANCE_LEASE_S) as mine:
            last = await self.store.coordination.get_meta(MAINTENANCE_META)
            if not mine or (last is not None and self.clock() - float(last) < MAINTENANCE_EVERY_S):
                return False
            await self.maintenance()
            return True

    async def index_older_messages(self) -> None:
        """Backfill the recall index in batches (one process at a time), logging the progress."""
        if self._indexed_all:
            return
        async with self.store.coordination.claim("recall-backfill", BACKFILL_LEASE_S) as mine:
            if not mine:
                return
            backfilled = False
            while waiting := await self.store.recall.index_older_messages(BACKFILL_BATCH):
                backfilled = True
                log.info("recall: indexed older messages, %d to go", waiting)
                await asyncio.sleep(0)  # turns go first
            if backfilled:
                log.info("recall: every older message is indexed")
            self._indexed_all = True

    async def embed_waiting(self) -> None:
        """Embed the messages waiting for their vectors (one process at a time), logging progress."""
        assert self.semantic is not None
        async with self.store.coordination.claim("recall-embeddings", EMBED_LEASE_S) as mine:
            if not mine:
                return
            embedded = await self.semantic.embed_waiting()
            if embedded:
                log.info("semantic recall: embedded %d messages, %d still waiting", embedded,
                         await self.store.vectors.count_waiting())

    async def maintenance(self) -> None:
        done = await self.store.maintain(self.clock(), self.storage.retention_days)
        await self.store.coordination.set_meta(MAINTENANCE_META, repr(self.clock()))
        log.info("maintenance done: %s", done)
