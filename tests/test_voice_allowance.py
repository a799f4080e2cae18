"""SPEC 16 and 17 together, in process: hearing a voice note is a model call on the person's behalf
— its transcript counted against their allowance, a failed upload tried again once at most — and
a running turn holds its prompt and its longest reply against the allowance, so a burst stops
there. The real `openai` client against the scripted server's audio endpoint; real Ogg/Opus."""

import asyncio

import pytest

from bot.access.budgets import PAST_BUDGET
from bot.config import parse_config
from bot.contract import IncomingFile, IncomingMessage
from bot.runtime import build_runtime
from tests.audio import ogg_opus
from tests.conftest import Chat, config_dict, eventually
from tests.fakes.llm_server import text

DAY = "2027-01-15"


@pytest.fixture
async def start(llm, tmp_path, clock):
    runtimes = []

    async def start_with(tokens_per_day: int, **llm_options):
        raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3", **llm_options)
        raw["voice"] = {"transcription_model": "whisper-1"}
        raw["limits"] = {"tokens_per_day": tokens_per_day}
        runtimes.append(await build_runtime(parse_config(raw, tmp_path), clock=clock))
        return runtimes[-1]
    yield start_with
    for runtime in runtimes:
        await runtime.close()


def voice_note(chat: Chat) -> IncomingMessage:
    audio = ogg_opus(seconds=2.0)

    async def read(limit: int) -> bytes:
        return audio[:limit]
    note = IncomingFile("voice.ogg", "audio/ogg", len(audio), "a voice note", read, spoken=True, seconds=2.0)
    return IncomingMessage(chat.key, chat.identity, chat.name, "", files=(note,), asker=chat.asker)


async def test_a_transcript_is_counted_against_the_persons_allowance(start, llm):
    runtime = await start(tokens_per_day=1_000_000)
    ann = Chat(runtime, platform="telegram")
    said = "I lost my grandmother's ring somewhere on the harbour wall this morning"
    llm.hears(said)
    llm.add(text("Oh no — we'll look at low tide."))
    reply = await runtime.core.conversation.handle(voice_note(ann))
    assert reply.text == "Oh no — we'll look at low tide."
    spent = await runtime.store.usage.spent(await ann.person_id(), DAY, DAY)
    assert spent == sum(u["total_tokens"] for u in llm.usages) + runtime.counter.count(said)


async def test_a_transcription_that_times_out_is_uploaded_twice_at_most(start, llm):
    """[llm] max_retries = 3 is for chat; the same audio goes up again once at most (SPEC 16)."""
    runtime = await start(tokens_per_day=1_000_000, timeout_s=0.5, max_retries=3)
    llm.transcription_delay_s = 5.0
    reply = await runtime.core.conversation.handle(voice_note(Chat(runtime, platform="telegram")))
    assert reply.is_error and "did not answer in time" in reply.text
    assert llm.transcription_tries == 2 and llm.requests == []


async def test_a_running_turn_holds_its_prompt_and_its_longest_reply_against_the_allowance(start, llm):
    """3,000 tokens a day; a turn may write 4,000: while the first runs, it holds more than the
    day allows, so Ann's second message (another chat, at once) is kept and not answered."""
    runtime = await start(tokens_per_day=3_000, max_reply_tokens=4_000, context_window=16_384)
    llm.add(text("First, the tide.", delay=0.5), text("Second."))
    ann_alone = Chat(runtime, platform="telegram", chat_id="dm-ann")
    ann_in_group = Chat(runtime, platform="telegram", chat_id="-100", shared=True)
    first = asyncio.create_task(ann_alone.say("when is high tide?"))
    await eventually(lambda: llm.answering == 1)
    second = await ann_in_group.say("Mira, and low tide?")
    assert second.text == PAST_BUDGET.format(limit=3_000)
    assert (await first).text == "First, the tide." and len(llm.requests) == 1
