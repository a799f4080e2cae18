"""SPEC section 9 — APScheduler jobs and daily maintenance."""

import sqlite3

from bot.app import build_runtime
from bot.scheduler import MAINTENANCE_META, backup_folder
from tests.conftest import DAY, Chat


async def test_three_restarts_leave_the_job_count_unchanged(make_config, clock, llm):
    seen = []
    for _ in range(3):
        runtime = await build_runtime(make_config(), clock=clock)
        runtime.start()
        seen.append(runtime.jobs.job_ids())
        await runtime.close()
    assert seen == [["maintenance", "rebuild-resume", "summary-retry"]] * 3


async def test_a_maintenance_missed_while_stopped_runs_once(runtime, clock):
    await runtime.store.set_meta(MAINTENANCE_META, repr(clock.now - 10 * DAY))
    assert await runtime.jobs.maintenance_if_due() is True
    assert await runtime.jobs.maintenance_if_due() is False
    backups = list(backup_folder(runtime.config.storage).glob("keepsake-*.sqlite3"))
    assert len(backups) == 1
    check = sqlite3.connect(backups[0])
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


async def test_maintenance_keeps_the_last_7_backups(runtime, clock):
    for _ in range(9):
        await runtime.jobs.maintenance()
        clock.now += DAY
    assert len(list(backup_folder(runtime.config.storage).glob("keepsake-*.sqlite3"))) == 7


async def test_retention_purges_only_old_summarized_messages(make_config, clock, llm, tmp_path):
    from dataclasses import replace

    config = make_config()
    config = replace(config, storage=replace(config.storage, retention_days=30))
    runtime = await build_runtime(config, clock=clock)
    try:
        ann = Chat(runtime)
        conversation = (await runtime.turns.conversation_for(ann.key, False)).id
        person = await ann.person_id()
        for i in range(70):
            await runtime.store.add_user_message(conversation, person, "Ann", f"m{i}", 5, None)
        llm.responder = lambda body: None
        await runtime.summarizer.summarize(conversation)  # the oldest 20 are summarized
        clock.now += 31 * DAY
        await runtime.jobs.maintenance()
        count, _ = await runtime.store.count_messages_between(conversation, 0, 2**62)
        assert count == 50
    finally:
        await runtime.close()
