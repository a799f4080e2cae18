"""Periodic background work on APScheduler's AsyncIOScheduler (SPEC section 9).

- every minute: retry failed summaries whose backoff is over; resume rebuilds a stop left
  running (also once at start-up);
- daily: maintenance — WAL checkpoint, an SQLite online backup into the backup folder keeping
  the last 7, and the optional retention purge. A maintenance missed while the bot was stopped
  runs once at start-up.
Jobs have fixed ids and replace themselves, so restarts never add duplicates.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.config import StorageConfig
from bot.rebuild import Rebuilds
from bot.summaries import Summarizer
from storage.base import Store

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60
MAINTENANCE_EVERY_S = 24 * 3_600
BACKUPS_KEPT = 7
MAINTENANCE_META = "maintenance_at"


def backup_folder(storage: StorageConfig) -> Path:
    return storage.backup_dir or storage.path.parent / "backups"


def _ends_quietly_at_shutdown(job: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    """A job cut short because the bot is stopping is no error (APScheduler would print its
    CancelledError as a traceback); it runs again at the next start."""
    @functools.wraps(job)
    async def run() -> None:
        try:
            await job()
        except asyncio.CancelledError:
            log.debug("%s stopped by shutdown", getattr(job, "__name__", "a job"))
    return run


class BackgroundJobs:
    def __init__(self, store: Store, summarizer: Summarizer, rebuilds: Rebuilds, storage: StorageConfig,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.summarizer = summarizer
        self.rebuilds = rebuilds
        self.storage = storage
        self.clock = clock
        self.scheduler = AsyncIOScheduler(timezone=timezone.utc)

    def start(self) -> None:
        """Add the jobs (ids fixed, replaced on restart) and start; call inside the event loop."""
        jobs = (
            ("summary-retry", self.summarizer.retry_due, {"seconds": CHECK_EVERY_S}),
            ("rebuild-resume", self.rebuilds.resume_interrupted, {"seconds": CHECK_EVERY_S}),
            ("maintenance", self.maintenance_if_due, {"seconds": CHECK_EVERY_S * 10}),
        )
        for job_id, func, every in jobs:
            self.scheduler.add_job(_ends_quietly_at_shutdown(func), "interval", id=job_id, replace_existing=True,
                                   coalesce=True, max_instances=1, next_run_time=datetime.now(timezone.utc),
                                   **every)
        self.scheduler.start()

    def job_ids(self) -> list[str]:
        return sorted(job.id for job in self.scheduler.get_jobs())

    def shutdown(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    async def maintenance_if_due(self) -> bool:
        """Run the daily maintenance if a day has passed since the last one (also one missed
        while the bot was stopped: it runs once, not once per missed day)."""
        last = await self.store.get_meta(MAINTENANCE_META)
        if last is not None and self.clock() - float(last) < MAINTENANCE_EVERY_S:
            return False
        await self.maintenance()
        return True

    async def maintenance(self) -> None:
        await self.store.checkpoint()
        folder = backup_folder(self.storage)
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%Y%m%d-%H%M%S")
        target = folder / f"keepsake-{stamp}.sqlite3"
        await self.store.backup(str(target))
        for old in sorted(folder.glob("keepsake-*.sqlite3"))[:-BACKUPS_KEPT]:
            old.unlink(missing_ok=True)
        purged = 0
        if self.storage.retention_days:
            purged = await self.store.purge_messages(self.clock() - self.storage.retention_days * 86_400)
        await self.store.set_meta(MAINTENANCE_META, repr(self.clock()))
        log.info("maintenance done: backup %s, %d old messages purged", target.name, purged)
