"""The LLM client (SPEC section 8): `openai.AsyncOpenAI` against any OpenAI-compatible base URL.

The openai client itself retries 429 (honouring Retry-After), 408, 5xx, timeouts and connection
errors with exponential backoff, `max_retries` times. Requests go through the client's documented
way to make a request as it is, `client.post()` (its README's "undocumented requests"), not
`chat.completions.create()`: that one first walks every message against its type annotations,
which measured 24 ms of CPU a turn at a 50-message window (bench.turn_overhead: p50 39 ms
against 15 ms), and as long again for every streamed reply — the CPU two cores need for
hundreds of turns a second. For the same reason answers, plain or streamed chunk by chunk, are
read as JSON, not built into pydantic models. On top of that this module:
- retries a *stream* that breaks after it started (the client cannot), telling the caller to
  start its text over;
- with `tools = "auto"`, detects a server that refuses tools, answers without them and
  remembers that for the rest of the process — but a tool call the server failed to parse
  (Ollama's 500 "error parsing tool call") is a model that stumbled, not a server without tools:
  `ToolCallUnreadable` ends that turn's tool rounds only (SPEC 18 "A model that stumbles");
- with `vision = "auto"`, detects a server that refuses images, remembers that for the rest of
  the process and raises `ImagesRefused`, so the turn asks again without them;
- tells a refusal for length (llama.cpp's `exceed_context_size_error` with `n_ctx`, OpenAI's and
  vLLM's `context_length_exceeded`, llama-cpp-python's "exceed context window of N") as
  `PromptTooLong`, with the server's own limit where it gives one: the turn rebuilds its prompt
  within it and asks once more (SPEC 8 "An overflow is rebuilt, never shown");
- sends no more requests at once than the server answers (`Lanes`: llama-cpp-python's one at a
  time, llama.cpp's `total_slots`, or one once the server ended a stream of ours while another
  ran, or failed ours together for its slots' shared cache — those are asked again, once), a
  person's reply before background work, so a request's timeout runs only once it is sent;
- says when a model offered tools never calls one (`NEVER_CALLED_AFTER` offers), and turns tools
  off (`tools = "auto"`) on llama-cpp-python's server, which ignores them, and on llama.cpp's when
  its /props says the model's chat template takes none;
- turns every final failure into `LLMError`, whose text is safe to show a person.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx
import openai
from openai import AsyncStream

from bot import metrics
from bot.config import LLMConfig
from bot.model.lanes import Lanes
from bot.model.server_context import llama_cpp_server
from bot.model.tls import http_client as tls_client

log = logging.getLogger(__name__)
TextSink = Callable[[str], Awaitable[None]]  # receives the whole text so far
TRY_AGAIN = "send another or try again in a moment"
NOT_SET_UP = "I'm not set up right yet: my model server does not know what I asked it for"
OWNER_TOLD = "the bot's owner has been told, and has to fix it before I can answer"
YOU_ARE_THE_OWNER = "the log says what to fix"  # the console is its owner's: they are told there
STREAM_RETRY_BASE_S = 0.5
CHAT_PATH = "/chat/completions"
LLAMA_CPP_PYTHON = "me"  # the `owned_by` of llama-cpp-python's server's model: one request at a time, tools ignored
ONE_MODEL_SERVERS = ("llamacpp", LLAMA_CPP_PYTHON)  # `owned_by` of llama.cpp's and llama-cpp-python's one model
EMBEDDING_DIMENSIONS = 256  # asked of models that can shorten their vectors (text-embedding-3-*)
NEVER_CALLED_AFTER = 30  # replies offered tools without one call: the model or its server may ignore them
SERVERS_THAT_CALL_TOOLS = ("llama.cpp's own llama-server with --jinja (its default) and a model whose chat "
                           "template takes tools, Ollama, vLLM with --enable-auto-tool-choice, or a hosted API "
                           "(docs/model-servers.md)")


class LLMError(Exception):
    """The model could not be reached or answered unusably, after every retry. Its text, and
    `hint` (what the person can do), are safe to show a person. `owners_to_fix`: only the bot's
    owner can mend it (a key, a model name); `hint_for(owner)` says so to whoever reads it."""

    def __init__(self, reason: str, hint: str = TRY_AGAIN, owners_to_fix: bool = False):
        super().__init__(reason)
        self.hint = OWNER_TOLD if owners_to_fix else hint
        self.owners_to_fix = owners_to_fix

    def hint_for(self, owner: bool) -> str:
        """The hint for the person who reads it; the owner themselves (the console) is told where."""
        return YOU_ARE_THE_OWNER if owner and self.owners_to_fix else self.hint


class ImagesRefused(LLMError):
    """The model server refused a request for its images (`vision = "auto"`): ask again without."""

    def __init__(self) -> None:
        super().__init__("the model server cannot take images")


class ToolCallUnreadable(LLMError):
    """The server could not parse the tool call its model wrote (Ollama: 500 "error parsing tool
    call"): this turn asks for its reply in words; tools stay on for the next."""

    def __init__(self) -> None:
        super().__init__("the model wrote a tool call its server could not read")


class PromptTooLong(LLMError):
    """The server refused the prompt for its length; `limit`: the context it holds, and `counted`:
    the prompt's tokens as it counted them, where it said."""

    def __init__(self, limit: int | None, counted: int | None = None):
        super().__init__("the conversation was too long for the model server")
        self.limit = limit
        self.counted = counted


CACHE_FULL = "context size has been exceeded"  # llama.cpp's server_error when its slots' shared cache is full
TOO_LONG = ("exceed_context_size_error", "context_length_exceeded", "maximum context length", "context window of",
            "exceeds the available context", "prompt is too long", "too many tokens")
LIMIT_IN_WORDS = re.compile(r"(?:maximum context length is|context window of|n_ctx\D{0,4})\s*(\d+)")
COUNTED_IN_WORDS = re.compile(r"(\d+) in the messages")  # llama-cpp-python's and OpenAI's "(2061 in the messages, …)"


def _too_long(exc: openai.APIStatusError) -> PromptTooLong | None:
    """A refusal for length, with the server's limit where it gave one; None for anything else."""
    if exc.status_code not in (400, 413, 422, 500):
        return None
    text = f"{exc} {exc.body}".lower()
    if not any(words in text for words in TOO_LONG):
        return None
    body = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    limit = inner.get("n_ctx") if isinstance(inner.get("n_ctx"), int) else None
    if limit is None and (found := LIMIT_IN_WORDS.search(text)):
        limit = int(found[1])
    counted = inner.get("n_prompt_tokens")
    if not isinstance(counted, int):
        counted = int(found[1]) if (found := COUNTED_IN_WORDS.search(text)) else None
    return PromptTooLong(limit, counted)


class _StreamBroken(Exception):
    def __init__(self, why: str, ended: bool = False):
        super().__init__(why)
        self.ended = ended  # the server ended it (`[DONE]`) before its finish reason: not a broken connection


class _CacheFull(Exception):
    """llama.cpp's server ran out of room in its cache ("Context size has been exceeded.", HTTP
    500, or an error event mid-stream): with its default automatic slots they share one cache,
    each prompt filling up to all of it, so requests answered at once can overflow it together
    and the server fails them all."""


class _Hollow(Exception):
    """A stream answered HTTP 200 and sent not one chunk (llama-cpp-python's server does so for a
    prompt too long): a failure, never an empty reply."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class Completion:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cut: bool = False  # the server stopped it at max_tokens (finish_reason "length")


def _unreadable_tool_call(exc: openai.APIStatusError) -> bool:
    """A tool call the model wrote and its server failed to parse (ollama #12884, #12064)."""
    text = str(exc).lower()
    return "tool call" in text and ("pars" in text or "invalid character" in text)


def _refuses_tools(exc: openai.APIStatusError) -> bool:
    return (exc.status_code in (400, 404, 422, 500, 501) and "tool" in str(exc).lower()
            and not _unreadable_tool_call(exc))


def _refuses_images(exc: openai.APIStatusError) -> bool:
    text = str(exc).lower()
    return exc.status_code in (400, 404, 415, 422, 500, 501) and any(
        word in text for word in ("image", "vision", "multimodal", "multi-modal"))


def has_images(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
               for m in messages)


def _encoded(request: dict[str, Any]) -> bytes:
    """The request body as JSON bytes, passed to `post()` as `content`: a body passed as a dict
    is first walked by the client for its own types (~0.5 ms a turn at a 50-message window)."""
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()


def _as_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON text the API documents; some servers send the object."""
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _read_completion(data: dict[str, Any]) -> Completion:
    """A chat completion's JSON, read the way the OpenAI API documents it."""
    if not data.get("choices"):
        raise LLMError("the model server sent no choices")
    message = data["choices"][0]["message"]
    calls = [
        ToolCall(call.get("id") or f"call_{i}", call["function"]["name"], _as_text(call["function"].get("arguments")))
        for i, call in enumerate(message.get("tool_calls") or [])
        if call.get("function")
    ]
    usage = data.get("usage") or {}
    return Completion(
        text=message.get("content") or "",
        tool_calls=calls,
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        cut=data["choices"][0].get("finish_reason") == "length",
    )


class LLMClient:
    def __init__(self, config: LLMConfig, http_client: Any = None):
        self.config = config
        self.client = openai.AsyncOpenAI(
            api_key=config.api_key,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
            http_client=http_client or tls_client(),  # benchmarks pass an in-process one
        )
        # None: not known yet (auto); False: off by config or refused by the server.
        self.tools_supported: bool | None = {"on": True, "off": False}.get(config.tools)
        self.vision_supported: bool | None = {"on": True, "off": False}.get(config.vision)
        self._told_owner: set[str] = set()  # setup problems logged already (each once)
        self.lanes = Lanes()  # how many requests the server answers at once, once known
        self.offers_unanswered: int | None = 0  # replies offered tools with no call yet; None: one was called

    @property
    def max_reply_tokens(self) -> int:
        return self.config.max_reply_tokens

    @property
    def summary_model(self) -> str:
        return self.config.summary_model or self.config.model

    async def close(self) -> None:
        await self.client.close()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        on_text: TextSink | None = None,
        background: bool = False,
    ) -> Completion:
        """One chat completion; streamed to `on_text` when given; `background`: nobody is waiting
        on it, so it waits for those somebody is (a summary, a letter). Raises LLMError."""
        if self.tools_supported is False:
            tools = None
        request: dict[str, Any] = {
            "model": model or self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": max_tokens or self.config.max_reply_tokens,
        }
        if tools:
            request["tools"] = tools
            if tool_choice:
                request["tool_choice"] = tool_choice
        with metrics.MODEL_SECONDS.time(), metrics.MODEL_ERRORS.count_exceptions(LLMError):
            completion = await self._complete(request, tools, on_text, background)
        if request.get("tools"):
            self._offered(completion)
        return completion

    def _offered(self, completion: Completion) -> None:
        """Tools were offered: after NEVER_CALLED_AFTER replies without one call, one WARNING."""
        if self.offers_unanswered is None:
            return
        if completion.tool_calls:
            self.offers_unanswered = None
            return
        self.offers_unanswered += 1
        if self.offers_unanswered == NEVER_CALLED_AFTER:
            log.warning("the model was offered tools in %d replies and called none: if a person asked it to "
                        "remember something, its server may ignore tools, so nothing was saved. Servers that "
                        "call tools: %s; [llm] tools = \"off\" stops offering them", NEVER_CALLED_AFTER,
                        SERVERS_THAT_CALL_TOOLS)

    async def _complete(self, request: dict[str, Any], tools: list[dict[str, Any]] | None,
                        on_text: TextSink | None, background: bool) -> Completion:
        broken = 0
        streaming = on_text is not None
        overflowed = False
        while True:
            try:
                if not streaming:
                    completion = await self._sent(request, None, background)
                    if on_text is not None and completion.text:
                        await on_text(completion.text)
                    return completion
                return await self._sent(request, on_text, background)
            except _CacheFull as exc:  # asked again once, alone on the server by now (`_sent`)
                if overflowed:
                    raise LLMError("the model server ran out of context") from exc
                overflowed = True
                if streaming:
                    await on_text("")  # the caller starts its text over
                continue
            except _Hollow:  # HTTP 200 and not one chunk: asked plainly, whose answer says why (a length)
                log.info("the model server streamed an empty answer; asking again without streaming")
                streaming = False
                continue
            except openai.APIStatusError as exc:
                if self.config.vision == "auto" and has_images(request["messages"]) and _refuses_images(exc):
                    log.warning("the model server refuses images (HTTP %d); answering without them from now on "
                                "(set [llm] vision = \"off\" to stop trying)", exc.status_code)
                    self.vision_supported = False
                    raise ImagesRefused() from exc
                if (too_long := _too_long(exc)) is not None:
                    raise too_long from exc
                if tools and _unreadable_tool_call(exc):
                    log.warning("the model wrote a tool call its server could not parse (HTTP %d); this reply is "
                                "asked for in words, and tools stay on", exc.status_code)
                    raise ToolCallUnreadable() from exc
                if tools and self.config.tools == "auto" and _refuses_tools(exc):
                    names = ", ".join(spec["function"]["name"] for spec in tools)
                    log.warning("the model server refuses tools: from now on the characters answer without them (%s "
                                "are off until a restart with a model that takes tools; [llm] tools = \"off\" stops "
                                "trying), and are told so", names)
                    self.tools_supported = False
                    request.pop("tools", None)
                    request.pop("tool_choice", None)
                    tools = None
                    continue
                raise self._status_error(exc) from exc
            except openai.APITimeoutError as exc:
                raise LLMError("the model server did not answer in time") from exc
            except openai.APIConnectionError as exc:
                log.warning("the model server at %s ([llm] base_url) could not be reached: %s",
                            self.config.base_url, exc.__cause__ or exc)
                raise LLMError(f"the model server at {self.config.base_url} could not be reached") from exc
            except _StreamBroken as exc:
                broken += 1
                if broken > self.config.max_retries:
                    raise LLMError("the model's answer kept breaking off") from exc
                log.warning("stream broke off (%s); retrying (%d/%d)", exc, broken,
                            self.config.max_retries)
                await on_text("")  # the caller starts its text over
                await asyncio.sleep(STREAM_RETRY_BASE_S * 2 ** (broken - 1))
            except openai.OpenAIError as exc:
                raise LLMError("the model server sent an answer we could not read") from exc

    async def _sent(self, request: dict[str, Any], on_text: TextSink | None, background: bool) -> Completion:
        """One request, sent once the server has room for it (`Lanes`), streamed when `on_text`."""
        async with self.lanes.taken(background):
            try:
                return await (self._plain(request) if on_text is None else self._streamed(request, on_text))
            except _StreamBroken as broken:
                if broken.ended:  # the server ended it, perhaps to answer another of ours
                    self._one_at_a_time_if_crowded(
                        "it cut a running answer for another", "the model server ended a running answer when "
                        "another request came (llama-cpp-python's server does so unless started with "
                        "--interrupt_requests False)")
                raise
            except _CacheFull:  # an error event mid-stream
                self._cache_full()
                raise
            except openai.InternalServerError as exc:
                if CACHE_FULL not in server_message(exc).lower():
                    raise
                self._cache_full()
                raise _CacheFull() from exc

    def _cache_full(self) -> None:
        """The server's cache overflowed: with others of ours running, llama.cpp's slots share one
        (`kv_unified`, its default with automatic slots), and /props says a slot's context, each
        the whole of it."""
        self._one_at_a_time_if_crowded(
            "its slots share one cache", "the model server ran out of context answering several of Keepsake's "
            "requests at once (\"Context size has been exceeded\"): llama.cpp's slots share one cache by default, "
            "each prompt up to the whole of it", "To answer several at once: start llama-server with -np N "
            "--no-kv-unified and -c N times the context one prompt needs")

    def _one_at_a_time_if_crowded(self, why: str, what: str, fix: str = "") -> None:
        """A request failed as others of ours ran, as a server fails them when it cannot answer
        several at once: from now on one request at a time (one WARNING saying `what` happened)."""
        if self.lanes.in_flight > 1 and self.lanes.slots != 1:
            log.warning("%s: Keepsake now sends it one request at a time, so people wait on one another.%s",
                        what, f" {fix}" if fix else "")
            self.lanes.learn(1, why)

    async def embed(self, model: str, texts: list[str], *, timeout_s: float, retries: int,
                    background: bool = True) -> list[list[float]]:
        """Vectors for `texts` from the server's /v1/embeddings, in order (SPEC section 11);
        `text-embedding-3` models are asked for EMBEDDING_DIMENSIONS; `background`: stored
        messages, not a turn's question. Raises LLMError."""
        client = self.client.with_options(timeout=timeout_s, max_retries=retries)
        sized = {"dimensions": EMBEDDING_DIMENSIONS} if model.startswith("text-embedding-3") else {}
        try:
            async with self.lanes.taken(background):
                answer = await client.embeddings.create(model=model, input=texts, encoding_format="float", **sized)
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except openai.APITimeoutError as exc:
            raise LLMError("the embedding server did not answer in time") from exc
        except openai.OpenAIError as exc:
            raise LLMError(f"the embedding server could not be used ({type(exc).__name__})") from exc
        return _vectors_of(answer, len(texts))

    def _status_error(self, exc: openai.APIStatusError) -> LLMError:
        """A final HTTP error. A problem only the owner can fix (a refused key, a model or an
        address the server does not know) is told to the person in plain words — the bot is not
        set up right, and its owner is told: the detail goes to the log, once. A passing one
        (429, 5xx) is told with the server's own words and "try again"."""
        status, said = exc.status_code, server_message(exc)
        if status in (401, 403):
            self._tell_owner(f"the model server refused the API key (HTTP {status}): check the key in the environment "
                             f"variable named by [llm] api_key_env ({self.config.api_key_env})")
            return LLMError("the model server refused the bot's API key", owners_to_fix=True)
        if status == 404 and not self.config.base_url.rstrip("/").endswith("/v1"):
            with_v1 = f"{self.config.base_url.rstrip('/')}/v1"
            self._tell_owner(f"the model server answered HTTP 404 at {self.config.base_url}: OpenAI-compatible servers "
                             f"usually serve under /v1 — try [llm] base_url = \"{with_v1}\"")
            return LLMError(NOT_SET_UP, owners_to_fix=True)
        if status == 404:
            self._tell_owner(f"the model server at {self.config.base_url} ([llm] base_url) does not know model "
                             f"{self.config.model!r} ([llm] model): HTTP 404: {said or '(no message)'}")
            return LLMError(NOT_SET_UP, owners_to_fix=True)
        if status == 400:
            log.error("the model server at %s ([llm] base_url) refused a request for model %r ([llm] model) with "
                      "HTTP 400: %s", self.config.base_url, self.config.model, said or "(no message)")
        else:
            log.warning("the model server answered HTTP %d: %s", status, said or "(no message)")
        return LLMError(f"the model server answered HTTP {status}")  # its own words go to the log, never a person

    def _tell_owner(self, problem: str) -> None:
        """A setup problem, logged once (ERROR): every message would repeat it otherwise."""
        if problem not in self._told_owner:
            self._told_owner.add(problem)
            log.error(problem)

    async def probe(self) -> list[str]:
        """At start-up: ask the server which models it has (GET /v1/models) and say so when the
        configured one is not among them (a WARNING, and returned for the console to show where
        the person is). A name without a tag is its `:latest` one, as Ollama serves it. A server
        answering 404 at a base URL without `/v1` gets the hint at once. Never fatal: some
        servers lack the route."""
        try:
            models = [model async for model in self.client.with_options(timeout=5.0, max_retries=0).models.list()]
            listed = [model.id for model in models]
        except openai.APIConnectionError:
            problem = (f"the model server at {self.config.base_url} ([llm] base_url) cannot be reached yet; "
                       "replies will fail until it can")
            log.warning(problem)
            return [problem]
        except openai.NotFoundError:
            if not self.config.base_url.rstrip("/").endswith("/v1"):
                problem = (f"the model server at {self.config.base_url} answered 404 Not Found; OpenAI-compatible "
                           f"servers (Ollama, llama.cpp, vLLM) serve under /v1: try [llm] base_url = "
                           f"\"{self.config.base_url.rstrip('/')}/v1\"")
                log.warning(problem)
                return [problem]
            log.info("the model server at %s did not list its models (NotFoundError)", self.config.base_url)
            return []
        except Exception as failure:  # no /v1/models here, or an answer of another shape: nothing to check
            log.info("the model server at %s did not list its models (%s)", self.config.base_url,
                     type(failure).__name__)
            return []
        await self._learn_server(models)
        served = set(listed) | {name.removesuffix(":latest") for name in listed}
        if len(models) == 1 and models[0].owned_by in ONE_MODEL_SERVERS:  # answers to any name: nothing to pull
            fix = (f"llama.cpp's server answers to any name with its one model, {listed[0]!r}: set [llm] model = "
                   f"{listed[0]!r} to say so (or start it with --model_alias)")
        else:
            fix = "check [llm] model, or pull it (Ollama: ollama pull {model})"
        problems = [f"the model server at {self.config.base_url} has no model {model!r} (it lists: "
                    f"{', '.join(listed[:10]) or 'none'}); " + fix.format(model=model)
                    for model in sorted({self.config.model, self.summary_model} - served)]
        for problem in problems:
            log.warning(problem)
        return problems

    async def _learn_server(self, models: list[Any]) -> None:
        """What the listed models tell of the server: llama-cpp-python's answers one request at a
        time and ignores tools sent as Keepsake sends them (without `tool_choice`, as the API
        documents); llama.cpp's says at /props its slots, and whether its model's chat template
        takes tools (one that does not leaves them out of the prompt, as SmolLM2's)."""
        owner = models[0].owned_by if len(models) == 1 else None
        if owner == LLAMA_CPP_PYTHON:
            self.lanes.learn(1, "llama-cpp-python's server answers one at a time")
            self._ignores_tools("the model server is llama-cpp-python's, which ignores tools",
                                f"Servers that call tools: {SERVERS_THAT_CALL_TOOLS}")
        elif owner in ONE_MODEL_SERVERS:
            server = await llama_cpp_server(self.config.base_url, self.config.api_key)
            if server.slots:
                self.lanes.learn(server.slots, "llama.cpp's /props total_slots")
            if server.takes_tools is False:
                self._ignores_tools("llama.cpp's server says its model's chat template takes no tools (/props "
                                    "chat_template_caps), so it leaves them out of the prompt",
                                    "For tools, serve a model whose template takes them (Qwen 2.5, Llama 3.1, "
                                    "Mistral Nemo…) or start llama-server with --chat-template-file and one that does")

    def _ignores_tools(self, why: str, fix: str) -> None:
        """The server would ignore tools: with `tools = "auto"` none are offered from now on (one
        WARNING); with "on" they still are, and the WARNING says the model will not call them."""
        if self.config.tools == "auto" and self.tools_supported is not False:
            self.tools_supported = False
            log.warning("%s: the characters answer without them (no memory is saved mid-reply; /memory add still "
                        "works). %s", why, fix)
        elif self.config.tools == "on":
            log.warning("[llm] tools = \"on\", but %s: the model will not call them. %s", why, fix)

    async def _plain(self, request: dict[str, Any]) -> Completion:
        answer = await self.client.post(CHAT_PATH, content=_encoded(request), cast_to=httpx.Response)
        try:
            return _read_completion(answer.json())
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LLMError("the model server sent an answer we could not read") from exc

    async def _streamed(self, request: dict[str, Any], on_text: TextSink) -> Completion:
        # Chunks arrive as plain dicts (AsyncStream[object]): building a pydantic model for each
        # of a reply's hundreds of chunks would cost ~0.15 ms apiece.
        stream = await self.client.post(
            CHAT_PATH, content=_encoded({**request, "stream": True, "stream_options": {"include_usage": True}}),
            cast_to=object, stream=True, stream_cls=AsyncStream[object],
        )
        text = ""
        calls: dict[int, dict[str, str]] = {}
        finished = cut = False
        received = 0  # chunks
        usage: dict[str, Any] = {}
        try:
            async for chunk in stream:
                received += 1
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text += delta["content"]
                        await on_text(text)
                    for call in delta.get("tool_calls") or []:
                        slot = calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.get("id") or slot["id"]
                        function = call.get("function") or {}
                        slot["name"] += function.get("name") or ""
                        slot["arguments"] += _as_text(function.get("arguments"))
                    if choice.get("finish_reason"):
                        finished = True
                        cut = choice["finish_reason"] == "length"
        except (asyncio.CancelledError, LLMError):
            raise
        except openai.APIError as exc:  # an error event in the stream
            if CACHE_FULL in str(exc.message).lower():
                raise _CacheFull() from exc
            raise _StreamBroken(type(exc).__name__) from exc
        except Exception as exc:  # the connection or the event stream broke mid-answer
            raise _StreamBroken(type(exc).__name__) from exc
        finally:
            await stream.close()
        if not finished and not received:
            raise _Hollow()
        if not finished:
            raise _StreamBroken("the stream ended without a finish reason", ended=True)
        return Completion(
            text=text,
            tool_calls=[ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"])
                        for i, c in sorted(calls.items())],
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            cut=cut,
        )


def _vectors_of(answer: Any, count: int) -> list[list[float]]:
    """The `count` vectors of an embeddings answer, in order. Whatever a server sends instead
    (no `data`, vectors as text or nested lists, an HTML page with status 200, vectors of
    different lengths) raises LLMError, like any failed call: it never fails a turn."""
    try:
        items = sorted(answer.data, key=lambda item: item.index)
        vectors = [list(item.embedding) for item in items]
    except (AttributeError, TypeError) as exc:
        raise LLMError("the embedding server's answer holds no vectors") from exc
    if len(vectors) != count:
        raise LLMError(f"the embedding server sent {len(vectors)} vectors for {count} texts")
    sizes = {len(vector) for vector in vectors}
    numbers = all(type(x) in (int, float) and math.isfinite(x) for vector in vectors for x in vector)
    if not numbers or len(sizes) != 1 or 0 in sizes:
        raise LLMError("the embedding server's vectors are not lists of numbers of one length")
    return [[float(x) for x in vector] for vector in vectors]


def server_message(exc: openai.APIStatusError) -> str:
    """What the server said of an error, in a line (OpenAI's {"error": {"message"}}, Ollama's
    {"error": "…"}, or the body's text)."""
    body = exc.body
    if isinstance(body, dict):
        body = body.get("message") or body.get("error") or body
    if isinstance(body, dict):
        body = body.get("message") or ""
    text = " ".join(str(body or "").split())
    for repeated in (f"{exc.status_code}: ", f"{exc.status_code} "):  # "404: Not Found" after "HTTP 404"
        text = text.removeprefix(repeated)
    return text[:200]
