"""[limits] turns_per_minute (SPEC section 13): past the limit a person gets a polite line saying
when to write again, and the message is still kept; the count is the database's, so it holds
across conversations and processes."""


from bot.runtime import build_runtime
from tests.conftest import Chat, shown


async def limited_runtime(make_config, clock, per_minute: int):
    config = make_config().changed("limits", turns_per_minute=per_minute)
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
        conversation = (await runtime.cast.conversation_for(ann.key)).id
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


async def test_12_messages_at_once_in_12_groups_make_3_model_calls(make_config, clock, llm):
    """The count is taken with the message, atomically: messages arriving together cannot all
    pass a check made before any of them was counted."""
    import asyncio

    runtime = await limited_runtime(make_config, clock, 3)
    try:
        replies = await asyncio.gather(*(Chat(runtime, chat_id=f"group-{n}", shared=True).say("hi") for n in range(12)))
        assert sum(not r.is_error for r in replies) == 3
        assert len(llm.requests) == 3
    finally:
        await runtime.close()


async def test_regenerate_and_drafting_count_as_model_calls(make_config, clock, llm):
    runtime = await limited_runtime(make_config, clock, 3)
    try:
        ann = Chat(runtime)
        reply = await ann.say("hello")
        regenerated = await ann.regenerate(reply.turn)
        assert not regenerated.is_error
        generated = await ann.memory("/memory generate I am a nurse who works nights")
        assert "Drafts" in generated.text or "nothing lasting" in generated.text
        calls = len(llm.requests)
        assert calls == 3
        refused = await ann.regenerate(regenerated.turn)
        assert refused.is_error and "at most 3" in refused.text
        refused = await ann.memory("/memory generate I keep bees")
        assert "at most 3" in refused.text
        assert (await ann.say("and now?")).is_error
        assert len(llm.requests) == calls  # nothing more reached the model
    finally:
        await runtime.close()


async def test_nobody_in_particular_is_limited_per_chat(make_config, clock, llm):
    from bot.contract import IncomingMessage

    runtime = await limited_runtime(make_config, clock, 2)
    try:
        group_a, group_b = Chat(runtime, chat_id="group-a", shared=True), Chat(runtime, chat_id="group-b", shared=True)

        async def anonymous(chat: Chat):
            return await shown(runtime, await runtime.turns.handle(IncomingMessage(chat.key, None, "Group", "hello")))
        assert [(await anonymous(group_a)).is_error for _ in range(3)] == [False, False, True]
        assert not (await anonymous(group_b)).is_error  # another chat, its own count
        assert not (await group_a.say("I am a person")).is_error  # people are counted as people
    finally:
        await runtime.close()
