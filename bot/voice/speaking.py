"""Speaking a reply (SPEC 16 "Out"): whether a reply is spoken (`[voice] reply_in_voice`, only
with `speech_model` set), the words a voice says (the card's *actions* and markdown left out,
cut at a sentence end within the endpoint's input limit), and the voice note itself, with its
length and waveform read from the audio (bot/voice/audio.py)."""

from __future__ import annotations

import asyncio
import logging
import re

import regex

from bot.config import VoiceConfig
from bot.contract import Part, VoiceNote
from bot.voice.audio import NotAudio, describe, seconds_of
from bot.in_flight import Abandoned, InFlight
from bot.voice.client import VoiceFailed, VoiceClient

log = logging.getLogger(__name__)

SPEECH_MAX_CHARS = 4_096  # what /audio/speech takes as input at most
_CODE = re.compile(r"```.*?```", re.DOTALL)  # code is not said
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")  # **words** are said
_ACTIONS = re.compile(r"\*[^*\n]+\*")  # a card's *smiles* are not
_MARKS = re.compile(r"[*_`#>~|]+")
_SENTENCE_END = regex.compile(r"[.!?…。！？](?=[\s\"')\]]|$)")


def speaks(config: VoiceConfig | None, spoken_to: bool) -> bool:
    """Whether a reply is spoken: never without a speech model; else as `reply_in_voice` says
    ("when-spoken-to": when the person's message was a voice note)."""
    if config is None or config.speech_model is None or config.reply_in_voice == "never":
        return False
    return config.reply_in_voice == "always" or spoken_to


def words_to_say(text: str, limit: int = SPEECH_MAX_CHARS) -> str:
    """The reply as a voice says it, at most `limit` characters, ending at a sentence's end
    where one falls within the limit (else at a word's)."""
    words = " ".join(_MARKS.sub("", _ACTIONS.sub(" ", _BOLD.sub(r"\1", _CODE.sub(" ", text)))).split())
    if len(words) <= limit:
        return words
    cut = words[:limit]
    ends = [found.end() for found in _SENTENCE_END.finditer(cut)]
    if ends:
        return cut[:ends[-1]]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


SPEAKING_AT_ONCE = 2  # replies spoken at once in a process


class Speaking:
    def __init__(self, server: VoiceClient):
        self.server = server
        self.in_flight = InFlight(SPEAKING_AT_ONCE)  # abandoned at once on stop

    def part(self, text: str, voice: str) -> Part:
        """The reply spoken in `voice`, as a part sent after its text (made as it is sent)."""
        return Part("a voice note", VoiceNote, lambda waveform: self.voice_note(text, voice, waveform))

    async def voice_note(self, text: str, voice: str, waveform: bool) -> VoiceNote | None:
        """The reply as a voice note (with its waveform only when asked: decoding costs); None
        (one WARNING) when the speech failed or there is nothing to say: the text stands alone."""
        words = words_to_say(text)
        if not words:
            return None
        try:
            audio = await self.in_flight.run(lambda: self.server.speak(words, voice))
            if waveform:
                seconds, shape = await asyncio.to_thread(describe, audio)
            else:
                seconds, shape = seconds_of(audio), b""
        except Abandoned:
            return None
        except (VoiceFailed, NotAudio) as failure:
            log.warning("a reply could not be spoken (%s); it was sent as text only", failure)
            return None
        return VoiceNote(audio, seconds, shape)
