"""The Coordination port, between two stores on one database (two processes): a conversation is
answered by one at a time, a job is claimed by one, meta is shared."""

import asyncio

from storage.ports import Store


async def test_a_job_is_claimed_by_one_process_and_free_again_after(open_backend):
    first, second = await open_backend(), await open_backend()
    async with first.coordination.claim("summary:1", 60) as mine:
        assert mine
        async with second.coordination.claim("summary:1", 60) as theirs:
            assert not theirs
    async with second.coordination.claim("summary:1", 60) as theirs:
        assert theirs


async def test_a_conversation_is_answered_by_one_process_at_a_time(open_backend):
    first, second = await open_backend(), await open_backend()
    order: list[str] = []

    async def turn(store: Store, name: str, hold: float) -> None:
        async with store.coordination.conversation_lock(7):
            order.append(f"{name} starts")
            await asyncio.sleep(hold)
            order.append(f"{name} ends")

    first_turn = asyncio.create_task(turn(first, "A", 0.3))
    await asyncio.sleep(0.05)
    await turn(second, "B", 0)
    await first_turn
    assert order == ["A starts", "A ends", "B starts", "B ends"]


async def test_meta_is_shared(open_backend):
    first, second = await open_backend(), await open_backend()
    await first.coordination.set_meta("maintenance_at", "1.5")
    assert await second.coordination.get_meta("maintenance_at") == "1.5"
    assert await second.coordination.get_meta("unknown") is None
