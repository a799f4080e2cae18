"""One way out (#64): everything the bot says is a `Reply` of typed segments, and each adapter's one
`deliver` sends all of it — words, the tool line, buttons, then each part — before reporting it
shown. A reply a crash cut off, answered again, goes out whole (a picture and a voice note after
its words); a letter carries a picture like a reply; a kind of media added later reaches a
platform through `send_media` alone, and one a platform cannot send leaves the words standing."""

import asyncio
import logging
from dataclasses import dataclass, replace

import pytest

from adapters.base import ChatAdapter
from bot.contract import ConversationKey, IncomingMessage, Part, Picture, Reply
from tests.audio import is_ogg_opus, ogg_opus
from tests.conftest import RunningAdapters, telegram_runtime
from tests.fakes.llm_server import stall, text, tool_calls
from tests.process import after, answer_to, mira_config, partial_reply_noted, start_bot, stop_bot

ANN = 841
SCENE = "the lamp room at night, the lens turning"


@pytest.mark.timeout(150)
async def test_a_reply_cut_off_by_a_crash_is_answered_again_with_its_picture_and_its_voice_note(
        tmp_path, llm, telegram, images):
    """The probe that found the bug: a recovered reply's words came, its picture never did. Now the
    words replace the partial message, then the picture and the voice note (Ann spoke) follow."""
    config = tmp_path / "config.toml"
    config.write_text(mira_config(llm, f"""[voice]
speech_model = "tts-1"

[pictures]
kind = "openai"
base_url = "{images.base_url}/v1"
per_day = 20
tokens_each = 1000""", telegram=telegram, character='voice = "nova"'))
    ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    database = tmp_path / "keepsake.sqlite3"

    llm.hears("show me the lamp room")
    llm.add(stall("Up the stairs we go, past the logbook and the oil cans, " * 3, at=0.5))
    bot = await start_bot(str(config), telegram, tmp_path)
    said = telegram.send(ann_dm, ann, "", voice=ogg_opus(seconds=2.0))
    partial = await answer_to(telegram, ANN, said)

    await partial_reply_noted(telegram, database)
    bot.kill()
    await bot.wait()

    llm.add(tool_calls(("picture", {"scene": SCENE})), text("Here it is — mind the lens, it's warm."))
    bot = await start_bot(str(config), telegram, tmp_path)
    try:
        def whole():
            reply = telegram.message(ANN, partial.message_id)
            later = after(telegram, ANN, partial.message_id)
            return reply.text == "Here it is — mind the lens, it's warm." and len(later) == 2 and (reply, later)
        reply, (photo, voice) = await telegram.wait_for(whole, timeout=30)  # what its tools made, then its voice
        assert [b["text"] for b in reply.buttons()] == ["🔄 Regenerate"]
        assert voice.voice is not None and is_ogg_opus(voice.voice["data"])
        assert photo.photo == images.png
        assert llm.speech_requests[-1]["input"] == "Here it is — mind the lens, it's warm."
    finally:
        await stop_bot(bot)


@pytest.fixture
async def telegram_adapter(telegram, llm, tmp_path, monkeypatch, clock):
    """Mira's Telegram adapter, running against the fake Bot API, with its runtime."""
    runtime, adapter = await telegram_runtime(telegram, llm, tmp_path, monkeypatch, clock)
    running = RunningAdapters()
    running.start(runtime, adapter)
    await telegram.wait_for(lambda: telegram.calls_to("getUpdates"))
    yield adapter
    await running.stop_all()


async def test_a_letter_carries_a_picture_through_the_same_delivery_as_a_reply(telegram_adapter, telegram, images):
    async def drawn(waveform: bool) -> Picture:
        return Picture(images.png, "picture.png", "the lighthouse at dawn")
    letter = Reply.answer("Good morning, Ann — the fog lifted.", parts=[Part("a picture", Picture, drawn)])
    key = ConversationKey("telegram", str(ANN), None, "Mira", False)
    ids = await telegram_adapter.write_first(key, letter)
    words, picture = telegram.bot_messages(ANN)
    assert ids == [str(words.message_id)] and words.text == "Good morning, Ann — the fog lifted."
    assert picture.photo == images.png


@dataclass(frozen=True)
class Sticker:
    """A kind of media no adapter knew when this test was written."""

    name: str


def with_sticker(reply: Reply) -> Reply:
    async def made(waveform: bool) -> Sticker:
        return Sticker("lighthouse-wave")
    return replace(reply, segments=(*reply.segments, Part("a sticker", Sticker, made)))


class Recording(ChatAdapter[str]):
    """A platform written in a test: it sends stickers, and notes what it sent, in order — and, as
    each part goes out, whether the reply was already reported shown."""

    platform = "console"
    limit = 2000

    def __init__(self, core, reply_turn=None):
        super().__init__(core, "Mira")
        self.sent: list[tuple[str, object]] = []
        self.turn = reply_turn

    def place_of(self, conversation):
        return conversation.chat_id

    async def send(self, place, text, buttons, reply_to, formatted=True):
        self.sent.append(("words", text))
        return str(len(self.sent))

    async def edit(self, place, message_id, text, buttons, formatted=True): ...
    async def delete(self, place, message_id): ...
    async def drop_buttons(self, place, message_id): ...
    def typing(self, place): return asyncio.timeout(None)
    async def can_speak(self, conversation): return True
    def refuses_person(self, failure): return False

    async def send_media(self, place, media):
        shown = await self.core.regenerating.shown_as(self.turn) if self.turn else []
        self.sent.append(("sticker" if isinstance(media, Sticker) else "other", (media, shown)))
        return str(len(self.sent))


async def test_a_new_kind_of_media_reaches_a_platform_through_send_media_alone_after_the_words(runtime, ann, llm):
    llm.add(text("Ahoy!"))
    message_reply = await runtime.core.conversation.handle(
        IncomingMessage(ann.key, ann.identity, "Ann", "hi", asker=ann.asker))
    platform = Recording(runtime.core, message_reply.turn)
    ids = await platform.deliver("dm-ann", None, with_sticker(message_reply))
    (first, words), (kind, (sticker, shown_then)) = platform.sent
    assert (first, words, kind, sticker) == ("words", "Ahoy!", "sticker", Sticker("lighthouse-wave"))
    assert shown_then == []  # every segment is sent before the reply is reported shown
    assert await runtime.core.regenerating.shown_as(message_reply.turn) == ids == ["1"]


async def test_media_a_platform_cannot_send_is_one_warning_and_the_words_stand(telegram_adapter, telegram, caplog):
    key = ConversationKey("telegram", str(ANN), None, "Mira", False)
    caplog.set_level(logging.WARNING)
    ids = await telegram_adapter.write_first(key, with_sticker(Reply.answer("A wave from the gallery.")))
    words, = telegram.bot_messages(ANN)
    assert ids == [str(words.message_id)] and words.text == "A wave from the gallery."
    warned, = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "a sticker with a reply could not be sent (CannotSend: Sticker)" in warned


async def test_silence_sends_nothing_and_the_bots_own_words_go_out_plain(runtime):
    platform = Recording(runtime.core)
    assert await platform.deliver("dm-ann", None, Reply.silence()) == [] and platform.sent == []
    formatted = []

    async def send(place, text, buttons, reply_to, as_markdown=True):
        formatted.append(as_markdown)
        return "1"
    platform.send = send
    for reply in (Reply.answer("*waves* Hi"), Reply.refusal("Sorry, I'm not able to talk with you here."),
                  Reply.error("The model failed."), Reply.notice("Rebuilt.")):
        await platform.deliver("dm-ann", None, reply)
    assert formatted == [True, False, False, False]  # markdown is the character's; the bot's words are as written


async def test_a_part_that_fails_to_be_made_leaves_the_words_shown_and_reported(runtime, ann, llm, caplog):
    """The reply is reported shown whatever becomes of its parts: the conversation's line waits for
    that report, so a part that raises while it is made must never keep it from being sent."""
    llm.add(text("Ahoy!"))
    reply = await runtime.core.conversation.handle(IncomingMessage(ann.key, ann.identity, "Ann", "hi", asker=ann.asker))

    async def broken(waveform: bool) -> Picture:
        raise RuntimeError("the speech server went away mid-answer")
    platform = Recording(runtime.core, reply.turn)
    ids = await platform.deliver("dm-ann", None, replace(reply, segments=(*reply.segments,
                                                                         Part("a voice note", Picture, broken))))
    assert platform.sent == [("words", "Ahoy!")]
    assert await runtime.core.regenerating.shown_as(reply.turn) == ids == ["1"]
    assert "a voice note with a reply could not be sent (RuntimeError" in caplog.text
