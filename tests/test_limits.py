"""[limits] turns_per_minute (SPEC section 13): past the limit a person gets a polite line saying
when to write again, and the message is still kept; the count is the database's, so it holds
across conversations and processes."""

import dataclasses

from bot.config import LimitsConfig
from bot.runtime import build_runtime
from tests.conftest import Chat


async def limited_runtime(make_config, clock, per_minute: int):
    config = dataclasses.replace(make_config(), limits=LimitsConfig(turns_per_minute=per_minute))
    return await build_runtime(config, clock=clock)


async def test_past_3_turns_a_minute_the_person_is_told_when_to_write_again_and_the_message_is_kept(
        make_config, clock, llm):
    runtime = await limited_runtime(make_config, clock, 3)
    try:
        ann = Chat(runtime)
        for n in range(3):
            assert not (await ann.say(f"message {n}")).is_error
            clock.now += 10
        refused = await ann.say("one too many")
        assert refused.is_error and "at most 3 replies a minute" in refused.text
        assert "write again in 30 seconds" in refused.text  # when the first turn leaves the minute
        assert len(llm.requests) == 3
        conversation = (await runtime.turns.conversation_for(ann.key)).id
        stored = await runtime.store.conversations.recent_messages(conversation, 1)
        assert stored[0].content == "one too many"  # kept
        clock.now += 31
        assert not (await ann.say("and now?")).is_error
        assert "one too many" in str(llm.requests[-1]["messages"])  # the kept message is in the window
    finally:
        await runtime.close()


async def test_the_limit_counts_every_conversation_and_process_of_the_person(make_config, clock, llm):
    first = await limited_runtime(make_config, clock, 2)
    second = await limited_runtime(make_config, clock, 2)
    try:
        assert not (await Chat(first, chat_id="dm-ann").say("hello")).is_error
        assert not (await Chat(second, chat_id="group", shared=True).say("hi all")).is_error
        assert (await Chat(first, chat_id="dm-ann").say("again")).is_error
        assert not (await Chat(second, user="bob", name="Bob", chat_id="dm-bob").say("hello")).is_error  # per person
    finally:
        await first.close()
        await second.close()


async def test_no_limit_is_set_unless_the_config_sets_one(runtime, llm):
    ann = Chat(runtime)
    for n in range(12):
        assert not (await ann.say(f"message {n}")).is_error
