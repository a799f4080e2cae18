"""SPEC 16, voice notes, as a person meets them: the real `python -m bot` process with a `[voice]`
table, against the fake Telegram Bot API, the fake Discord, and the scripted OpenAI-compatible
server's audio endpoints. The audio is real OGG/Opus made on this machine (tests/audio.py), and
every fake checks that what it gets is a valid Ogg/Opus stream."""

import asyncio
import base64
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from bot.access.limits import TOO_FAST
from bot.voice.listening import COULD_NOT_HEAR, NOT_TRANSCRIBED, TEXT_ONLY, TOO_BIG, TOO_LONG
from tests.audio import is_ogg_opus, ogg_opus
from tests.conftest import ROOT
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text
from tests.process import answer_to, bot_running, final_reply_to, llm_table, logged, stop_bot

ANN, BOB, CAI, DAN, EVE = 801, 802, 803, 804, 805
DISCORD_ANN = FakeDiscord.user("900000000000000021", "Ann")
DISCORD_ANN_DM = "910000000000000021"
DISCORD_BEA = FakeDiscord.user("900000000000000022", "Bea")
DISCORD_BEA_DM = "910000000000000022"


def config(llm, *, telegram=None, discord_fake=None, voice: str | None = "speech_model = \"tts-1\"") -> str:
    platforms = ""
    if telegram is not None:
        platforms += f'\n[telegram]\nbase_url = "{telegram.base_url}"\n'
    voice_table = f"\n[voice]\n{voice}\n" if voice is not None else ""
    character = f"""
[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
voice = "nova"
"""
    if telegram is not None:
        character += 'telegram_token_env = "MIRA_TELEGRAM_TOKEN"\n'
    if discord_fake is not None:
        character += 'discord_token_env = "MIRA_DISCORD_TOKEN"\n'
    return (llm_table(llm) + "max_retries = 0\n\n[storage]\nurl = \"sqlite:///keepsake.sqlite3\"\n"
            "\n[limits]\nturns_per_minute = 4\n" + platforms + voice_table + character)


def database_bytes(folder: Path) -> bytes:
    """Everything the database holds on disk, its write-ahead log included."""
    return b"".join(path.read_bytes() for path in folder.glob("keepsake.sqlite3*"))


def holds_any_of(data: bytes, audio: bytes) -> bool:
    """Whether `data` holds any 32-byte stretch of the audio that is not filler (varied bytes),
    as it is or encoded as base64 or hex (the audio kept in a text column is still the audio)."""
    stretches = [audio[i:i + 32] for i in range(0, len(audio) - 32, 256) if len(set(audio[i:i + 32])) > 16]
    assert len(stretches) > 10
    encoded = [base64.b64encode(audio[shift:]) for shift in range(3)]  # base64 of every alignment
    b64_stretches = [text[i:i + 40] for text in encoded for i in range(0, len(text) - 40, 340)]
    hex_stretches = [stretch.hex().encode() for stretch in stretches]
    return any(stretch in data for stretch in (*stretches, *b64_stretches, *hex_stretches))


def test_the_audio_check_finds_the_audio_kept_as_it_is_in_base64_or_in_hex():
    audio = ogg_opus(2.0)
    for kept in (audio, base64.b64encode(audio), base64.b64encode(b"x" + audio), audio.hex().encode()):
        assert holds_any_of(b"...some rows..." + kept[len(kept) // 3:] + b"...", audio)
    assert not holds_any_of(b"nothing of it here" * 1000, audio)


def stored(folder: Path, sql: str, *args) -> list[tuple]:
    with closing(sqlite3.connect(folder / "keepsake.sqlite3")) as db:
        return db.execute(sql, args).fetchall()


def voice_notes(telegram, chat_id: int):
    return [m for m in telegram.bot_messages(chat_id) if m.voice is not None]


@pytest.mark.timeout(120)
async def test_a_telegram_voice_note_is_heard_kept_as_text_and_answered_in_the_characters_voice(
        tmp_path, llm, telegram):
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        audio = ogg_opus(seconds=3.0)
        llm.hears("I lost my grandmother's ring at the harbour")
        llm.add(text("*Mira sets down the lamp.* Oh no. We'll find it — the tide is low tonight."))
        said = telegram.send(ann_dm, ann, "", voice=audio)
        reply = await final_reply_to(telegram, ANN, said)
        assert reply.text.endswith("Oh no. We'll find it — the tide is low tonight.")

        # Heard: the audio went up as it came (OGG/Opus, unconverted) to the transcription model.
        heard, = llm.transcriptions
        assert heard["model"] == "whisper-1" and heard["ogg_opus"] and heard["audio"] == audio
        # The transcript is the person's message: in the prompt marked as spoken, stored as spoken text.
        said_aloud = {"role": "user", "content": "🎤 I lost my grandmother's ring at the harbour"}
        assert said_aloud in llm.requests[-1]["messages"]
        assert stored(tmp_path, "SELECT content, spoken FROM messages WHERE role = 'user'") == [
            ("I lost my grandmother's ring at the harbour", 1)]

        # Spoken back after the text, in Mira's voice, as Ogg/Opus the platform accepted.
        note, = await telegram.wait_for(lambda: voice_notes(telegram, ANN), timeout=30)
        assert note.message_id > reply.message_id and is_ogg_opus(note.voice["data"])
        asked, = llm.speech_requests
        assert asked == {"model": "tts-1", "voice": "nova", "response_format": "opus",
                         "input": "Oh no. We'll find it — the tide is low tonight."}  # the *action* is not said

        # The next message is typed: its reply is not spoken (reply_in_voice "when-spoken-to").
        await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "did you hear me?"))
        assert "🎤 I lost my grandmother's ring at the harbour" in llm.prompt_text()  # in the window now
        assert len(llm.speech_requests) == 1 and len(voice_notes(telegram, ANN)) == 1

    # The audio itself was never stored.
    assert not holds_any_of(database_bytes(tmp_path), audio)


@pytest.mark.timeout(120)
async def test_voice_note_bounds_and_failures_each_get_one_line_on_telegram(tmp_path, llm, telegram):
    async with bot_running(tmp_path, config(llm, telegram=telegram),
                           MIRA_TELEGRAM_TOKEN=telegram.token) as process:
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        bob, bob_dm = telegram.user(BOB, "Bob"), telegram.chat(BOB)

        # Longer than max_seconds (300) or larger than 25 MB: refused from the metadata, never fetched.
        line = await answer_to(telegram, BOB, telegram.send(bob_dm, bob, "", voice=ogg_opus(1.0), seconds=301))
        assert line.text == TOO_LONG.format(seconds="5 min 1 s", limit="5 min")
        line = await answer_to(telegram, BOB, telegram.send(bob_dm, bob, "", voice=ogg_opus(1.0),
                                                              size=25 * 1024 * 1024 + 1))
        assert line.text == TOO_BIG
        assert telegram.calls_to("getFile") == [] and llm.transcriptions == []

        # A failing or empty transcription: one clear line, the message kept, no model call for a reply.
        llm.hears(500, "")
        line = await answer_to(telegram, BOB, telegram.send(bob_dm, bob, "", voice=ogg_opus(1.0)))
        assert line.text == COULD_NOT_HEAR.format(reason="the voice server answered HTTP 500")
        said = telegram.send(bob_dm, bob, "", voice=ogg_opus(1.0))
        line = await answer_to(telegram, BOB, said)
        assert line.text == COULD_NOT_HEAR.format(reason="I heard no words in it")
        assert llm.requests == []
        assert stored(tmp_path, "SELECT content FROM messages WHERE role = 'user'") == [(NOT_TRANSCRIBED,)] * 2

        # Hearing a voice note is a model call under [limits] (4 a minute): two voice notes take
        # four calls (hearing and answering each); the third is refused before it is heard.
        cai, cai_dm = telegram.user(CAI, "Cai"), telegram.chat(CAI)
        for n in range(1, 3):
            await final_reply_to(telegram, CAI, telegram.send(cai_dm, cai, "", voice=ogg_opus(1.0)))
            await telegram.wait_for(lambda: len(voice_notes(telegram, CAI)) == n, timeout=30)  # spoken too
        heard = len(llm.transcriptions)
        line = await answer_to(telegram, CAI, telegram.send(cai_dm, cai, "", voice=ogg_opus(1.0)))
        assert line.text.startswith(TOO_FAST.split("{")[0]) and len(llm.transcriptions) == heard  # kept, as typed

        # Speech that fails leaves the text reply alone, with one WARNING.
        llm.speech_status = 500
        dan, dan_dm = telegram.user(DAN, "Dan"), telegram.chat(DAN)
        llm.add(text("The lamp is lit."))
        reply = await final_reply_to(telegram, DAN, telegram.send(dan_dm, dan, "", voice=ogg_opus(1.0)))
        assert reply.text == "The lamp is lit."
        await logged(process, "a reply could not be spoken")
        assert voice_notes(telegram, DAN) == []


@pytest.mark.timeout(120)
async def test_without_voice_a_voice_note_gets_one_line_that_the_character_reads_text_only(tmp_path, llm, telegram):
    async with bot_running(tmp_path, config(llm, telegram=telegram, voice=None), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        eve, eve_dm = telegram.user(EVE, "Eve"), telegram.chat(EVE)
        line = await answer_to(telegram, EVE, telegram.send(eve_dm, eve, "", voice=ogg_opus(1.0)))
        assert line.text == TEXT_ONLY.format(name="Mira")
        assert llm.requests == [] and llm.transcriptions == []


@pytest.mark.timeout(120)
async def test_a_discord_voice_message_is_heard_and_answered_with_a_real_voice_message(tmp_path, llm, discord_fake):
    async with bot_running(tmp_path, config(llm, discord_fake=discord_fake), MIRA_DISCORD_TOKEN="discord-token-16",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base) as process:
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)

        def from_bot(channel_id: str):
            return [m for m in discord_fake.in_channel(channel_id) if m.author_id == discord_fake.app_id]

        audio = ogg_opus(seconds=2.0)
        llm.hears("is the lighthouse open tonight")
        llm.add(text("It is. *She smiles.* Come by after dark."))
        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "", guild=False, voice=audio)
        replied, spoken = await discord_fake.wait_for(lambda: (found := from_bot(DISCORD_ANN_DM))[1:] and found,
                                                      timeout=30)
        assert replied.content == "It is. *She smiles.* Come by after dark."
        assert {"role": "user", "content": "🎤 is the lighthouse open tonight"} in llm.requests[-1]["messages"]
        assert llm.transcriptions[-1]["audio"] == audio
        # A real voice message: the flag, one Ogg/Opus file, its length and waveform described.
        assert spoken.voice_message and spoken.content == ""
        file, = spoken.attachments
        described, = spoken.described
        assert is_ogg_opus(file["data"]) and described["duration_secs"] > 0 and described["waveform"]
        assert llm.speech_requests[-1]["voice"] == "nova"

        # Where voice messages are refused, the voice note comes as an audio file.
        discord_fake.no_voice_messages.add(DISCORD_ANN_DM)
        llm.add(text("Still here."))
        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "", guild=False, voice=ogg_opus(1.0))
        await logged(process, "sending it as an audio file")
        fallback = (await discord_fake.wait_for(lambda: (found := from_bot(DISCORD_ANN_DM))[3:] and found,
                                                timeout=30))[-1]
        assert not fallback.voice_message and is_ogg_opus(fallback.attachments[0]["data"])

        # An audio file attached (not a voice message) is heard too.
        llm.hears("a memo about the ferry times")
        await discord_fake.say(DISCORD_BEA_DM, DISCORD_BEA, "", guild=False,
                               attachments=(("memo.ogg", "audio/ogg", ogg_opus(1.0)),))
        await discord_fake.wait_for(lambda: from_bot(DISCORD_BEA_DM)[1:], timeout=30)  # the text, then the voice
        assert {"role": "user", "content": "🎤 a memo about the ferry times"} in llm.requests[-1]["messages"]
        assert llm.transcriptions[-1]["filename"] == "memo.ogg"

        # Longer than max_seconds, from Discord's own word on its length: one line, nothing fetched.
        heard = len(llm.transcriptions)
        await discord_fake.say(DISCORD_BEA_DM, DISCORD_BEA, "", guild=False, voice=ogg_opus(1.0), seconds=400.0)
        line = (await discord_fake.wait_for(lambda: (found := from_bot(DISCORD_BEA_DM))[2:] and found,
                                            timeout=30))[-1]
        assert line.content == TOO_LONG.format(seconds="6 min 40 s", limit="5 min")
        assert len(llm.transcriptions) == heard
    assert not holds_any_of(database_bytes(tmp_path), audio)


GROUP = -100801


@pytest.mark.timeout(120)
async def test_a_voice_note_is_judged_by_its_own_length_not_by_what_the_platform_claims(tmp_path, llm, telegram):
    """SPEC 16 / #46: with max_seconds = 5, an 8-second note claiming 3 s (or no length at all)
    is refused after the download, before any upload; a note of exactly 5 s is heard."""
    voice = 'speech_model = "tts-1"\nmax_seconds = 5'
    async with bot_running(tmp_path, config(llm, telegram=telegram, voice=voice), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        line = await answer_to(telegram, ANN, telegram.send(ann_dm, ann, "", voice=ogg_opus(8.0), seconds=3))
        assert line.text == TOO_LONG.format(seconds="8 s", limit="5 s")
        line = await answer_to(telegram, ANN, telegram.send(ann_dm, ann, "", voice=ogg_opus(8.0), seconds=0))
        assert line.text == TOO_LONG.format(seconds="8 s", limit="5 s")
        assert llm.transcriptions == [] and len(telegram.calls_to("getFile")) == 2  # fetched, never uploaded
        llm.hears("the lamp is out")
        llm.add(text("I'll light it."))
        reply = await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "", voice=ogg_opus(5.0), seconds=5))
        assert reply.text == "I'll light it." and len(llm.transcriptions) == 1


@pytest.mark.timeout(120)
async def test_a_hanging_transcription_holds_nobody_else_and_a_stop_abandons_it_within_10_seconds(
        tmp_path, llm, telegram):
    """SPEC 16 / #46: Ann's voice note is stored (as its placeholder) at once and heard while
    Bob's message, a second later in the same group, is answered; SIGTERM then exits within
    10 s, and both messages are kept."""
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token) as process:
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        group = telegram.chat(GROUP, "supergroup", "Harbour")
        ann, bob = telegram.user(ANN, "Ann"), telegram.user(BOB, "Bob")
        llm.transcription_delay_s = 60.0  # the audio server hangs
        telegram.send(group, ann, "@mira_bot", voice=ogg_opus(1.0))
        await telegram.wait_for(lambda: llm.transcribing == 1, timeout=30)
        llm.add(text("Aye, Bob, it is lit."))
        asked = telegram.send(group, bob, "@mira_bot is the lamp lit?")
        reply = await final_reply_to(telegram, GROUP, asked)
        assert reply.text == "Aye, Bob, it is lit."
        assert stored(tmp_path, "SELECT speaker_name, content FROM messages WHERE role = 'user' ORDER BY pos") == [
            ("Ann", NOT_TRANSCRIBED), ("Bob", "is the lamp lit?")]
        started = asyncio.get_running_loop().time()
        await stop_bot(process)
        assert asyncio.get_running_loop().time() - started < 10
    assert stored(tmp_path, "SELECT COUNT(*) FROM messages WHERE role = 'user'") == [(2,)]


@pytest.mark.timeout(120)
async def test_at_most_two_voice_notes_are_fetched_and_transcribed_at_once_in_a_process(tmp_path, llm, telegram):
    """SPEC 16 / #46: a flood of notes waits its turn, holding nothing (memory stays flat)."""
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        llm.transcription_delay_s = 0.3
        people = [telegram.user(900 + n, f"P{n}") for n in range(6)]
        for person in people:
            telegram.send(telegram.chat(person["id"]), person, "", voice=ogg_opus(1.0))
        await telegram.wait_for(lambda: len(llm.transcriptions) == 6, timeout=60)
        assert llm.most_transcribing == 2


@pytest.mark.timeout(120)
async def test_a_telegram_audio_file_and_video_message_are_heard_like_a_voice_note(tmp_path, llm, telegram):
    async with bot_running(tmp_path, config(llm, telegram=telegram, voice=None) + "\n[voice]\n",
                           MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        for kind, said in (("audio", "the ferry is late"), ("video_note", "look at the waves")):
            llm.hears(said)
            llm.add(text(f"I heard: {said}."))
            reply = await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "", voice=ogg_opus(1.0),
                                                                       spoken_as=kind))
            assert reply.text == f"I heard: {said}." and f"🎤 {said}" in llm.prompt_text()
        assert len(llm.transcriptions) == 2


@pytest.mark.timeout(120)
async def test_a_voice_server_without_audio_endpoints_is_named_at_start_up(tmp_path, llm, telegram):
    """#47: [voice] pointed at a server that serves no /v1/audio/* (Ollama, the README's [llm]
    server) is one WARNING at start-up naming `[voice] base_url` and what it lacks; a server that
    has them gets none."""
    no_audio = llm.base_url.removesuffix("/v1") + "/no-audio/v1"
    voice = f'base_url = "{no_audio}"\nspeech_model = "tts-1"'
    async with bot_running(tmp_path, config(llm, telegram=telegram, voice=voice),
                           MIRA_TELEGRAM_TOKEN=telegram.token) as process:
        lacking = await logged(process, "([voice] base_url) has no /v1/audio/transcriptions")
        assert "WARNING" in lacking and "Ollama serves no audio" in lacking
        assert "/v1/audio/speech" in await logged(process, "([voice] base_url) has no")
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)  # started: a stop is heard
    polls = len(telegram.calls_to("getUpdates"))
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: len(telegram.calls_to("getUpdates")) > polls, timeout=30)  # started
    assert llm.speech_requests == [] and llm.transcriptions == []  # the probe asks nothing of a real server


@pytest.mark.timeout(120)
async def test_a_regenerated_answer_to_a_voice_note_is_spoken_too(tmp_path, llm, telegram):
    async with bot_running(tmp_path, config(llm, telegram=telegram), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        llm.hears("is the lamp lit")
        llm.add(text("It is lit."), text("Lit, and trimmed."))
        reply = await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "", voice=ogg_opus(1.0)))
        await telegram.wait_for(lambda: len(voice_notes(telegram, ANN)) == 1, timeout=30)
        button = next(b for b in reply.buttons() if b["text"] == "🔄 Regenerate")
        telegram.press(ann_dm, ann, reply.message_id, button["callback_data"])
        await telegram.wait_for(lambda: len(voice_notes(telegram, ANN)) == 2, timeout=30)
        assert reply.text == "Lit, and trimmed." and llm.speech_requests[-1]["input"] == "Lit, and trimmed."
