"""SPEC section 9 — APScheduler jobs and daily maintenance."""

import asyncio
import logging
import sqlite3
import time

import storage.sqlite.database
from bot.runtime import build_runtime
from bot.scheduler import MAINTENANCE_META
from tests.conftest import DAY, Chat, eventually


def backups(folder) -> list:
    """The SQLite backups maintenance wrote beside the database (its default backup folder)."""
    return list((folder / "backups").glob("keepsake-*.sqlite3"))


async def test_a_maintenance_missed_for_10_days_runs_once_not_once_a_day(runtime, clock, tmp_path):
    await runtime.store.coordination.set_meta(MAINTENANCE_META, repr(clock.now - 10 * DAY))
    assert await runtime.jobs.maintenance_if_due() is True
    assert await runtime.jobs.maintenance_if_due() is False
    written = backups(tmp_path)
    assert len(written) == 1
    check = sqlite3.connect(written[0])
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


async def start_and_stop(make_config, clock) -> tuple[list[bool], list[str]]:
    """Start the bot, let its jobs make their start-up run, stop it: did maintenance run, and
    which jobs were scheduled?"""
    runtime = await build_runtime(make_config(), clock=clock)
    ran: list[bool] = []
    checked = asyncio.Event()
    check = runtime.jobs.maintenance_if_due

    async def check_and_tell() -> bool:  # the job as scheduled, telling the test what it did
        ran.append(await check())
        checked.set()
        return ran[-1]

    runtime.jobs.maintenance_if_due = check_and_tell
    runtime.start()
    try:
        jobs = runtime.jobs.job_ids()
        await asyncio.wait_for(checked.wait(), 10)
    finally:
        await runtime.close()
    return ran, jobs


async def test_three_restarts_in_a_day_keep_one_of_each_job_and_run_the_daily_maintenance_once(
        make_config, clock, llm, tmp_path):
    runs = []
    for _ in range(3):
        runs.append(await start_and_stop(make_config, clock))
        clock.now += 3_600  # an hour later, the next start
    assert [ran for ran, _ in runs] == [[True], [False], [False]]
    assert [jobs for _, jobs in runs] == [["maintenance", "rebuild-resume", "recall-backfill", "reminders:mira",
                                           "summary-retry"]] * 3
    assert len(backups(tmp_path)) == 1


async def test_a_job_that_came_due_during_a_10_minute_stop_runs_once_after_the_restart(make_config, clock, llm,
                                                                                      tmp_path):
    assert (await start_and_stop(make_config, clock))[0] == [True]  # a first start: the daily maintenance runs
    clock.now += DAY - 5 * 60  # the bot ran for a day less 5 minutes, then stopped for 10
    clock.now += 10 * 60
    assert (await start_and_stop(make_config, clock))[0] == [True]  # due 5 minutes into the stop: it runs now
    assert (await start_and_stop(make_config, clock))[0] == [False]  # once: not again at the next restart
    assert len(backups(tmp_path)) == 2


async def test_maintenance_keeps_the_last_7_backups(runtime, clock, tmp_path):
    for _ in range(9):
        await runtime.jobs.maintenance()
        clock.now += DAY
    assert len(backups(tmp_path)) == 7


def add_ballast(path, megabytes: int = 40) -> None:
    """More for a backup to copy: `megabytes` of one table the bot never reads."""
    ballast = sqlite3.connect(path)
    ballast.execute("CREATE TABLE ballast (b BLOB)")
    ballast.executemany("INSERT INTO ballast VALUES (randomblob(1000000))", [()] * megabytes)
    ballast.commit()
    ballast.close()


async def test_the_daily_backup_ends_while_messages_are_written_between_its_steps(make_config, clock, monkeypatch):
    """The backup copies the file in steps. A copy that let go of the file between two steps was
    started over by every write in between: under a steady flow of messages it never ended. It
    copies the file as it was when it began, whatever is written meanwhile."""
    monkeypatch.setattr(storage.sqlite.database, "BACKUP_STEP_PAGES", 64)  # 256 KB a step: 640 steps
    runtime = await build_runtime(make_config(), clock=clock)
    try:
        add_ballast(runtime.store.db.path)
        ann = Chat(runtime)
        conversation, person = (await runtime.cast.conversation_for(ann.key)).id, await ann.person_id()
        maintenance = asyncio.create_task(runtime.jobs.maintenance())
        written = 0
        while not maintenance.done() and written < 20_000:  # a message between (nearly) every two steps
            await runtime.store.conversations.add_user_message(conversation, person, "Ann", f"m{written}", 3, None)
            written += 1
            await asyncio.sleep(0)  # the copy's steps run on their own thread; its awaits, here
        if not maintenance.done():
            maintenance.cancel()
        await asyncio.gather(maintenance, return_exceptions=True)
        assert not maintenance.cancelled(), f"the backup did not end during {written} messages"
        assert written > 50  # the messages were written during the copy
        [backup] = backups(runtime.store.db.path.parent)
        check = sqlite3.connect(backup)
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert check.execute("SELECT COUNT(*) FROM ballast").fetchone() == (40,)
        check.close()
    finally:
        await runtime.close()


async def test_a_stop_during_the_backup_ends_the_copy_and_leaves_no_half_made_backup(make_config, clock, monkeypatch):
    """The console's `/quit` (or any stop) can come while the daily backup copies the file: the
    copy ends after its step, the file it wrote is closed only after it and removed, and the store
    closes (closed beneath SQLite's copy, the file hung the process until killed)."""
    monkeypatch.setattr(storage.sqlite.database, "BACKUP_STEP_PAGES", 64)  # 256 KB a step: many steps to stop in
    runtime = await build_runtime(make_config(), clock=clock)
    try:
        add_ballast(runtime.store.db.path)
        folder = runtime.store.db.path.parent / "backups"
        maintenance = asyncio.create_task(runtime.jobs.maintenance())
        while not any(part.stat().st_size for part in folder.glob("*.part")):  # the copy is under way
            assert not maintenance.done()
            await asyncio.sleep(0.001)
        maintenance.cancel()
        await asyncio.gather(maintenance, return_exceptions=True)
        assert list(folder.iterdir()) == []
    finally:
        await asyncio.wait_for(runtime.close(), 10)


async def test_retention_purges_only_old_summarized_messages(make_config, clock, llm, tmp_path):
    config = make_config().changed("storage", retention_days=30)
    runtime = await build_runtime(config, clock=clock)
    try:
        ann = Chat(runtime)
        conversation = (await runtime.cast.conversation_for(ann.key)).id
        person = await ann.person_id()
        for i in range(71):
            await runtime.store.conversations.add_user_message(conversation, person, "Ann", f"m{i}", 5, None)
        llm.responder = lambda body: None
        await runtime.summarizer.summarize(conversation)  # the oldest 21 are summarized; the window holds 50
        clock.now += 31 * DAY
        await runtime.jobs.maintenance()
        assert await runtime.store.conversations.count_messages(conversation, 0) == 50
    finally:
        await runtime.close()


async def test_a_job_that_starts_late_on_a_busy_machine_still_runs_without_a_warning(runtime, caplog):
    """APScheduler skips a run that is late by more than its grace time and warns "was missed";
    every background job here runs however late it starts."""
    with caplog.at_level(logging.WARNING):
        runtime.jobs.start()  # every job is due at once ...
        time.sleep(2.5)  # ... and the event loop is busy for longer than APScheduler's 1 s of grace
        await eventually(lambda: runtime.store.coordination.get_meta(MAINTENANCE_META))  # ran, late
    assert "was missed" not in caplog.text
