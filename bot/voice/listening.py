"""Hearing a voice note (SPEC 16 "In" and "Bounded").

A voice note is refused from the platform's word on it, before anything is fetched: longer than
`[voice] max_seconds`, or larger than MAX_BYTES. Otherwise it is fetched (up to MAX_BYTES), and
its own length is read from the stream (off the event loop): a note longer than `max_seconds`
whatever the platform claimed is refused before anything is uploaded. A container the audio
library cannot read (a Telegram video message's MP4) is judged by the platform's length; with
none given, it is not heard. Then it is transcribed (a timed-out upload is tried again once at most), and the
turn goes on with the transcript as the person's message, stored as spoken (shown marked with
storage.ports.SPOKEN). The audio
is never stored. A transcription that fails or comes back empty keeps the message as
NOT_TRANSCRIBED, and the person gets one line. At most LISTENING_AT_ONCE notes are fetched and
transcribed at once in a process, and on stop those in flight are abandoned (bot/in_flight.py).
Taking the transcription's model call under `[limits]` is the turn handler's, which knows the
person.
"""

from __future__ import annotations

import asyncio
import logging

from bot.contract import IncomingFile
from bot.voice.audio import NotAudio, seconds_of
from bot.in_flight import InFlight
from bot.voice.client import VoiceFailed, VoiceClient

log = logging.getLogger(__name__)

NOT_TRANSCRIBED = "(a voice note that could not be transcribed)"
MAX_BYTES = 25 * 1024 * 1024  # the transcription endpoint's own limit
LISTENING_AT_ONCE = 2  # voice notes fetched and transcribed at once in a process
TEXT_ONLY = "{name} reads text only here — voice notes aren't switched on. Could you type it?"
TOO_LONG = ("That voice note is {seconds} long; I can listen to at most {limit}. "
            "Could you send a shorter one, or type it?")
TOO_BIG = "That voice note is larger than 25 MB, more than I can listen to. Could you send a shorter one, or type it?"
COULD_NOT_HEAR = ("I couldn't make out your voice note ({reason}). I've kept a note that you sent one; "
                  "could you say it again, or type it?")


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes and rest else f"{minutes} min" if minutes else f"{rest} s"


def spoken(transcript: str, words: str = "") -> str:
    """The stored message of a voice note: what was said, and any words sent with it."""
    return "\n".join(part for part in (transcript, words) if part)


class Listening:
    def __init__(self, server: VoiceClient, max_seconds: int):
        self.server = server
        self.max_seconds = max_seconds
        self.in_flight = InFlight(LISTENING_AT_ONCE)

    def refusal(self, note: IncomingFile) -> str | None:
        """Why this voice note is not listened to, from the platform's metadata; None: it is."""
        if note.seconds is not None and note.seconds > self.max_seconds:
            return self._too_long(note.seconds)
        if note.size is not None and note.size > MAX_BYTES:
            return TOO_BIG
        return None

    def _too_long(self, seconds: float) -> str:
        return TOO_LONG.format(seconds=_duration(seconds), limit=_duration(self.max_seconds))

    async def hear(self, note: IncomingFile) -> tuple[str | None, str]:
        """(what was said, "") or (None, the one line the person gets instead). Abandoned when
        the process stops meanwhile (bot/in_flight.py)."""
        return await self.in_flight.run(lambda: self._hear(note))

    async def _hear(self, note: IncomingFile) -> tuple[str | None, str]:
        try:
            audio = await note.read(MAX_BYTES + 1)
        except Exception as failure:  # the platform would not hand the file over
            log.warning("a voice note could not be fetched: %s: %s", type(failure).__name__, failure)
            return None, COULD_NOT_HEAR.format(reason="I could not fetch it")
        if len(audio) > MAX_BYTES:
            return None, TOO_BIG
        try:  # its own length decides, not the platform's word (nothing is decoded)
            seconds = await asyncio.to_thread(seconds_of, audio)
        except NotAudio as problem:
            # A container the audio library does not read (a video message's MP4, AAC): only
            # the platform's word is left, already checked; with none, it is not heard.
            if note.seconds is None:
                log.info("a voice note with no length given is no audio that can be read (%s)", problem)
                return None, COULD_NOT_HEAR.format(reason="I could not tell how long it is")
            seconds = note.seconds
        if seconds > self.max_seconds:
            log.info("a voice note said to last %s lasts %.1f s; refused (max_seconds %d)",
                     "?" if note.seconds is None else f"{note.seconds:g} s", seconds, self.max_seconds)
            return None, self._too_long(seconds)
        try:
            transcript = await self.server.transcribe(note.name, audio, note.content_type)
        except VoiceFailed as failure:
            log.warning("a voice note could not be transcribed: %s", failure)
            return None, COULD_NOT_HEAR.format(reason=failure)
        if not transcript:
            log.info("a voice note was transcribed as nothing")
            return None, COULD_NOT_HEAR.format(reason="I heard no words in it")
        return transcript, ""
