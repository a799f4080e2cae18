"""SPEC 16, voice notes: the rules of speaking a reply, the audio read by soundfile, and the
`[voice]` table (the end-to-end paths are in tests/test_voice_end_to_end.py)."""

import re

import pytest

from bot.config import ConfigError, VoiceConfig
from bot.voice.audio import WAVEFORM_POINTS, NotAudio, describe, is_ogg_opus
from bot.voice.speaking import SPEECH_MAX_CHARS, speaks, words_to_say
from tests.audio import ogg_opus
from tests.conftest import config_dict
from tests.test_config import checked_config


def test_a_voice_notes_length_and_waveform_are_read_from_its_audio():
    seconds, waveform = describe(ogg_opus(seconds=3.0))
    assert seconds == pytest.approx(3.0, abs=0.05)
    assert len(waveform) == WAVEFORM_POINTS and max(waveform) == 255
    assert len(set(waveform)) > 10  # the syllables rise and fall


def test_bytes_that_are_not_ogg_opus_are_not_taken_for_a_voice_note():
    assert is_ogg_opus(ogg_opus(1.0))
    assert not is_ogg_opus(b"OggS" + bytes(500)) and not is_ogg_opus(b"")
    with pytest.raises(NotAudio):
        describe(b"ID3 not really an mp3")


def test_a_reply_is_spoken_only_with_a_speech_model_and_as_reply_in_voice_says():
    def voice(**keys) -> VoiceConfig:
        return VoiceConfig(**keys)

    assert not speaks(None, spoken_to=True)
    assert not speaks(voice(), spoken_to=True)  # no speech_model: never
    assert speaks(voice(speech_model="tts-1"), spoken_to=True)  # default "when-spoken-to"
    assert not speaks(voice(speech_model="tts-1"), spoken_to=False)
    assert speaks(voice(speech_model="tts-1", reply_in_voice="always"), spoken_to=False)
    assert not speaks(voice(speech_model="tts-1", reply_in_voice="never"), spoken_to=True)


def test_a_cards_actions_and_markdown_are_not_spoken():
    said = words_to_say("*Mira looks up.* **Welcome** in, Ann! `lamp` _here_\n```\ncode\n```\nSit down.")
    assert said == "Welcome in, Ann! lamp here Sit down."


def test_a_long_reply_is_spoken_up_to_a_sentence_end_within_4096_characters():
    sentence = "The tide turns at the harbour every evening. "
    reply = sentence * 200  # 9,000 characters
    said = words_to_say(reply)
    assert len(said) <= SPEECH_MAX_CHARS == 4096
    assert said.endswith("every evening.") and len(said) > SPEECH_MAX_CHARS - len(sentence)
    unbroken = "word " * 1000  # no sentence end: cut at a word
    assert words_to_say(unbroken).endswith("word") and len(words_to_say(unbroken)) <= 4096


@pytest.mark.parametrize("voice, message", [
    ({"reply_in_voice": "sometimes"}, "voice.reply_in_voice: expected one of never | when-spoken-to | always"),
    ({"max_seconds": 0}, "voice.max_seconds: expected a whole number ≥ 1"),
    ({"api_key_env": "KEEPSAKE_TEST_NO_SUCH_VARIABLE"},
     "voice.api_key_env: environment variable KEEPSAKE_TEST_NO_SUCH_VARIABLE is not set"),
    ({"base_url": "localhost:8000"}, "voice.base_url:"),
    ({"speach_model": "tts-1"}, "voice.speach_model: unknown key"),
])
def test_the_voice_table_is_checked_naming_the_key(tmp_path, voice, message):
    raw = config_dict("http://x/v1", tmp_path / "db") | {"voice": voice}
    with pytest.raises(ConfigError, match=re.escape(message)):
        checked_config(raw, tmp_path)


def test_the_voice_server_is_the_llms_unless_named(tmp_path):
    raw = config_dict("http://x/v1", tmp_path / "db") | {"voice": {}}
    config = checked_config(raw, tmp_path)
    assert config.voice.server(config.llm).base_url == "http://x/v1"
    assert (config.voice.transcription_model, config.voice.speech_model, config.voice.max_seconds) == \
        ("whisper-1", None, 300)
    raw["voice"] = {"base_url": "http://127.0.0.1:8000/v1"}
    config = checked_config(raw, tmp_path)
    assert config.voice.server(config.llm).base_url == "http://127.0.0.1:8000/v1"
    assert config.characters[0].voice == "alloy"
