"""SPEC section 4 — /memory rebuild: background, old summary serving, atomic swap, resume after a
restart, failure with resume or start over, never two at once."""

import asyncio

from bot.memory.rebuild import DONE
from bot.runtime import build_runtime
from tests.conftest import Chat
from tests.fakes.llm_server import hang, status, text
from tests.fakes.summarizer import kind_of


class Script:
    """Summary calls answered with `label n`; a chosen call hangs or fails."""

    def __init__(self, label: str, hang_at: int | None = None, fail: bool = False):
        self.label, self.hang_at, self.fail = label, hang_at, fail
        self.calls: list[str] = []

    def __call__(self, body):
        if kind_of(body) == "chat":
            return None
        self.calls.append(body["messages"][-1]["content"])
        if self.fail:
            return status(500)
        if len(self.calls) == self.hang_at:
            return hang(30)
        return text(f"- {self.label} {len(self.calls)}")


async def history(chat: Chat, count: int) -> int:
    conversation = (await chat.runtime.cast.conversation_for(chat.key)).id
    person = await chat.person_id()
    for i in range(count):
        await chat.runtime.store.conversations.add_user_message(conversation, person, "Ann", f"message {i}", 5, None)
    return conversation


async def wait_for(condition, timeout: float = 10.0) -> None:
    async def poll():
        while not await condition():
            await asyncio.sleep(0.02)
    await asyncio.wait_for(poll(), timeout)


async def test_a_rebuild_killed_half_way_resumes_after_restart_and_swaps_at_once(make_config, clock, llm):
    runtime = await build_runtime(make_config(), clock=clock)
    ann = Chat(runtime)
    conversation = await history(ann, 50 + 120)
    llm.responder = Script("OLD")
    await runtime.summarizer.summarize(conversation)
    old = await runtime.store.summaries.summaries(conversation)
    assert [e.content for e in old] == ["- OLD 1", "- OLD 2", "- OLD 3"]

    llm.responder = rebuild_script = Script("NEW", hang_at=2)
    started = await ann.memory("/memory rebuild")
    assert "in the background" in started.text
    assert "already running" in (await ann.memory("/memory rebuild")).text  # never two at once
    await wait_for(lambda: asyncio.sleep(0, len(rebuild_script.calls) == 2))

    # Meanwhile the old summary serves, and new messages wait.
    await ann.say("still there?")
    assert "OLD 1" in llm.prompt_text() and "NEW" not in llm.prompt_text()
    await history(ann, 20)
    await runtime.summarizer.summarize(conversation)
    assert len(rebuild_script.calls) == 2
    assert "A rebuild is running" in (await ann.memory("/memory summary")).text
    await runtime.close()  # killed half-way: the second batch never came back

    told: list[str] = []
    restarted = await build_runtime(make_config(), clock=clock)

    async def notifier(conversation, message):
        told.append(message)

    llm.responder = resumed = Script("NEW")
    try:
        with restarted.core.presence.listening(notifier):  # as an adapter would
            restarted.start()
            await wait_for(lambda: asyncio.sleep(0, bool(told)))
        assert told == [DONE]
        assert resumed.calls[0].splitlines()[0] == "Ann: message 40"  # the first batch was kept
        entries = await restarted.store.summaries.summaries(conversation)
        assert entries and all(e.content.startswith("- NEW") for e in entries)
        assert not any(e.content.startswith("- OLD") for e in await restarted.store.summaries.summaries(conversation, 0))
        assert await restarted.store.summaries.rebuild(conversation) is None
    finally:
        await restarted.close()


async def test_a_failed_rebuild_tells_the_person_who_can_resume_it(runtime, llm):
    ann = Chat(runtime)
    told: list[str] = []

    async def notifier(conversation, message):
        told.append(message)

    with runtime.core.presence.listening(notifier):  # as an adapter would
        conversation = await history(ann, 50 + 40)
        llm.responder = Script("NEW", fail=True)
        await ann.memory("/memory rebuild")
        await runtime.rebuilds.idle()
        assert told and told[0].startswith("The summary rebuild stopped: the model server answered HTTP 500")
        assert "The old summary is still in use" in told[0]
        choice = await ann.memory("/memory rebuild")
        assert [b.label for b in choice.buttons[0]] == ["Resume", "Start over", "Cancel the rebuild"]

        llm.responder = Script("NEW")
        resumed = await ann.press(choice.buttons[0][0].action)
        assert "Resuming the rebuild" in resumed.text
        await runtime.rebuilds.idle()
        assert told[-1] == DONE
        assert [e.content for e in await runtime.store.summaries.summaries(conversation)] == ["- NEW 1"]


async def test_a_failed_rebuild_can_be_cancelled_and_summarizing_goes_on(runtime, llm):
    ann = Chat(runtime)
    conversation = await history(ann, 50 + 40)
    llm.responder = Script("NEW", fail=True)
    await ann.memory("/memory rebuild")
    await runtime.rebuilds.idle()
    choice = await ann.memory("/memory rebuild")
    llm.responder = Script("LIVE")
    cancelled = await ann.press(choice.buttons[0][2].action)
    assert "cancelled" in cancelled.text
    await runtime.summarizer.idle()
    assert [e.content for e in await runtime.store.summaries.summaries(conversation)] == ["- LIVE 1"]


async def test_a_summary_entry_the_person_edited_reaches_the_rebuilt_summary_word_for_word(runtime, llm):
    ann = Chat(runtime)
    conversation = await history(ann, 50 + 120)
    llm.responder = Script("OLD")
    await runtime.summarizer.summarize(conversation)
    first = (await runtime.store.summaries.summaries(conversation))[0]
    correction = "Ann's brother is called Tomas, not Thomas."
    edited = await ann.memory(f"/memory summary edit S{first.id} {correction}")
    assert "as you wrote it" in edited.text

    llm.responder = Script("NEW")  # a rebuilding model that never repeats what it was given
    await ann.memory("/memory rebuild")
    await runtime.rebuilds.idle()
    rebuilt = "\n".join(e.content for e in await runtime.store.summaries.summaries(conversation))
    assert "NEW" in rebuilt and "OLD" not in rebuilt
    assert correction in rebuilt

    llm.responder = None
    llm.add(text("Tomas, of course."))
    await ann.say("what is my brother called?")
    assert correction in llm.prompt_text()


async def test_rebuilding_a_short_conversation_says_there_was_nothing_to_rebuild(runtime, llm):
    from bot.memory.rebuild import NOTHING_YET

    ann = Chat(runtime)
    told: list[str] = []

    async def notifier(conversation, message):
        told.append(message)

    with runtime.core.presence.listening(notifier):
        await ann.say("hello")
        await ann.memory("/memory rebuild")
        await runtime.rebuilds.idle()
    assert told == [NOTHING_YET]
