"""The audio endpoints of an OpenAI-compatible server ([voice], SPEC 16), through the real
`openai` client: /audio/transcriptions hears a voice note as it came (Telegram's OGG/Opus goes
up unconverted), /audio/speech speaks a reply as OGG/Opus. Every failure is a `VoiceFailed`
whose text is safe to show a person."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import openai

from bot.config import LLMConfig, VoiceConfig
from bot.model.tls import http_client as tls_client

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


class VoiceClient:
    def __init__(self, config: VoiceConfig, llm: LLMConfig, http_client: Any = None):
        self.config = config
        server = config.server(llm)
        self.base_url = server.base_url
        self.client = openai.AsyncOpenAI(api_key=server.api_key, base_url=server.base_url,
                                         timeout=server.timeout_s, max_retries=server.max_retries,
                                         http_client=http_client or tls_client())

    async def close(self) -> None:
        await self.client.close()

    async def probe(self) -> list[str]:
        """At start-up: whether the server serves the audio endpoints [voice] uses (Ollama, the
        usual [llm] server, serves none). A route that is missing answers 404 (or 405); one that
        is there refuses an empty request otherwise. A WARNING naming `[voice] base_url` for each
        missing one, returned too. Never fatal."""
        paths = ["/audio/transcriptions"] + (["/audio/speech"] if self.config.speech_model else [])
        quick = self.client.with_options(timeout=5.0, max_retries=0)
        problems = []
        for path in paths:
            try:
                await quick.post(path, body={}, cast_to=httpx.Response)
            except (openai.NotFoundError, openai.APIStatusError) as answer:
                if getattr(answer, "status_code", None) not in (404, 405):
                    continue  # there, and refusing an empty request: as it should
                problems.append(f"the voice server at {self.base_url} ([voice] base_url) has no /v1{path} "
                                f"(HTTP {answer.status_code}): voice notes cannot be heard"
                                f"{'' if path.endswith('transcriptions') else ' and replies cannot be spoken'} there. "
                                "Ollama serves no audio: point [voice] base_url at a server that does "
                                "(speaches, LocalAI, whisper.cpp's server) — see docs/voice.md")
            except openai.APIConnectionError:
                problems.append(f"the voice server at {self.base_url} ([voice] base_url) cannot be reached yet; "
                                "voice notes will get one line until it can")
                break
            except openai.OpenAIError:
                continue
        for problem in problems:
            log.warning(problem)
        return problems

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
