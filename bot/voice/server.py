"""The audio endpoints of an OpenAI-compatible server ([voice], SPEC 16), through the real
`openai` client: /audio/transcriptions hears a voice note as it came (Telegram's OGG/Opus goes
up unconverted), /audio/speech speaks a reply as OGG/Opus. Every failure is a `VoiceFailed`
whose text is safe to show a person."""

from __future__ import annotations

import logging
from typing import Any

import openai

from bot.config import LLMConfig, VoiceConfig

log = logging.getLogger(__name__)


TRANSCRIPTION_RETRIES = 1  # the same audio is uploaded again once at most (SPEC 16: a timeout is no reason for four)


class VoiceFailed(Exception):
    """The audio server could not be used or answered unusably (after the client's retries)."""


def _reason(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"the voice server answered HTTP {exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "the voice server did not answer in time"
    return f"the voice server could not be reached ({type(exc).__name__})"


class VoiceServer:
    def __init__(self, config: VoiceConfig, llm: LLMConfig, http_client: Any = None):
        self.config = config
        server = config.server(llm)
        self.base_url = server.base_url
        self.client = openai.AsyncOpenAI(api_key=server.api_key, base_url=server.base_url,
                                         timeout=server.timeout_s, max_retries=server.max_retries,
                                         http_client=http_client)

    async def close(self) -> None:
        await self.client.close()

    async def transcribe(self, name: str, audio: bytes, content_type: str | None) -> str:
        """What was said, as text ("" when nothing was); a failed upload is tried again once at most."""
        try:
            once = self.client.with_options(max_retries=min(TRANSCRIPTION_RETRIES, self.client.max_retries))
            answer = await once.audio.transcriptions.create(
                model=self.config.transcription_model, file=(name, audio, content_type or "application/octet-stream"))
        except openai.OpenAIError as exc:
            raise VoiceFailed(_reason(exc)) from exc
        return (getattr(answer, "text", "") or "").strip()

    async def speak(self, text: str, voice: str) -> bytes:
        """`text` spoken in `voice`, as OGG/Opus."""
        assert self.config.speech_model is not None, "speech is off without [voice] speech_model"
        try:
            answer = await self.client.audio.speech.create(
                model=self.config.speech_model, voice=voice, input=text, response_format="opus")
        except openai.OpenAIError as exc:
            raise VoiceFailed(_reason(exc)) from exc
        return answer.content
