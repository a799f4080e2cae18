"""The context a model server really holds (SPEC 8 "The context a server really holds").

`context_window` is what the owner believes; the server decides. At start-up Keepsake asks the
server where it says:
- llama.cpp's server: `GET /props` → `default_generation_settings.n_ctx` (the context of a slot;
  `llama_cpp_server` reads the rest of what it says there: its slots, and whether its model takes tools);
- vLLM: `GET /v1/models` → the model's `max_model_len`;
- Ollama (it answers `GET /api/version`): `POST /api/ps` → the loaded model's `context_length`;
  else `num_ctx` in `POST /api/show`'s parameters; else Ollama's default, 4,096 tokens below 24
  GiB of VRAM — never above the model's own `context_length`.
Keepsake then works within the smaller of that and `context_window`, saying so in one WARNING that
names the fix (`fit_to_server`). A server that says nothing leaves `context_window` as it is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from bot.config import Config
from bot.model.tls import trust_store

log = logging.getLogger(__name__)
ASK_TIMEOUT_S = 5.0
OLLAMA_DEFAULT = 4_096  # Ollama's context below 24 GiB of VRAM (since 0.15.5), unless told otherwise


@dataclass(frozen=True)
class Held:
    tokens: int  # the context the server holds for the model
    server: str  # what said so
    fix: str  # how the owner gives it more


def _root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def _json(http: httpx.AsyncClient, method: str, url: str, **body: Any) -> Any:
    """The JSON a server answers, or None for anything else (no such route, no JSON, down)."""
    try:
        answer = await http.request(method, url, json=body or None)
        return answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _llama_cpp(http: httpx.AsyncClient, root: str, model: str) -> Held | None:
    props = await _json(http, "GET", f"{root}/props")
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    tokens = _positive(settings.get("n_ctx") if isinstance(settings, dict) else None) or _positive(props.get("n_ctx"))
    return Held(tokens, "llama.cpp's /props (n_ctx)", "start llama.cpp's server with a larger -c, e.g. -c 8192, "
                "or lower [llm] context_window") if tokens else None


async def _vllm(http: httpx.AsyncClient, base: str, model: str) -> Held | None:
    listed = await _json(http, "GET", f"{base}/models")
    models = listed.get("data") if isinstance(listed, dict) else None
    for entry in models if isinstance(models, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model and (tokens := _positive(entry.get("max_model_len"))):
            return Held(tokens, "/v1/models (max_model_len)", "start the server with a larger --max-model-len, or "
                        "lower [llm] context_window")
    return None


async def _ollama(http: httpx.AsyncClient, root: str, model: str) -> Held | None:
    if not isinstance(await _json(http, "GET", f"{root}/api/version"), dict):
        return None
    fix = ("set OLLAMA_CONTEXT_LENGTH=8192 (or more) where Ollama runs and restart it, or lower [llm] "
           "context_window")
    names = {model, f"{model}:latest"}
    loaded = await _json(http, "GET", f"{root}/api/ps")
    for entry in (loaded.get("models") or []) if isinstance(loaded, dict) else []:
        if isinstance(entry, dict) and entry.get("name") in names and (tokens := _positive(entry.get("context_length"))):
            return Held(tokens, "Ollama's /api/ps (the loaded model's context)", fix)
    shown = await _json(http, "POST", f"{root}/api/show", model=model)
    if not isinstance(shown, dict):
        return Held(OLLAMA_DEFAULT, "Ollama's default", fix)
    own = max((value for key, value in (shown.get("model_info") or {}).items()
               if key.endswith(".context_length") and _positive(value)), default=None)
    for line in str(shown.get("parameters") or "").splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return Held(int(value), "num_ctx in the model's Ollama parameters", fix)
    return Held(min(OLLAMA_DEFAULT, own or OLLAMA_DEFAULT), "Ollama's default", fix)


async def held_by_server(base_url: str, model: str, api_key: str = "") -> Held | None:
    """What the server at `base_url` says it holds for `model`; None where it says nothing."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S, trust_env=False, headers=headers, verify=trust_store()) as http:
        root, base = _root(base_url), base_url.rstrip("/")
        for ask, at in ((_llama_cpp, root), (_ollama, root), (_vllm, base)):
            if (held := await ask(http, at, model)) is not None:
                return held
    return None


@dataclass(frozen=True)
class LlamaCppServer:
    """What llama.cpp's server says of itself at /props; None where it says nothing."""

    slots: int | None  # requests it answers at once (`total_slots`)
    takes_tools: bool | None  # whether its model's chat template takes tools (`chat_template_caps.supports_tools`):
    # one that does not leaves them out of the prompt without a word, whatever `tool_choice` asks


async def llama_cpp_server(base_url: str, api_key: str = "") -> LlamaCppServer:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S, trust_env=False, headers=headers, verify=trust_store()) as http:
        props = await _json(http, "GET", f"{_root(base_url)}/props")
    if not isinstance(props, dict):
        return LlamaCppServer(None, None)
    caps = props.get("chat_template_caps")
    tools = caps.get("supports_tools") if isinstance(caps, dict) else None
    return LlamaCppServer(_positive(props.get("total_slots")), tools if isinstance(tools, bool) else None)


async def fit_to_server(config: Config) -> Config:
    """`config` with `[llm] context_window` no larger than what the server holds (one WARNING
    naming the fix when it is smaller); as it is where the server says nothing."""
    llm = config.llm
    held = await held_by_server(llm.base_url, llm.model, llm.api_key)
    if held is None or held.tokens >= llm.context_window:
        return config
    log.warning("the model server holds %d tokens of context for %s (%s), less than [llm] context_window = %d: "
                "Keepsake works within %d, so older messages leave the live window sooner. To give it more: %s",
                held.tokens, llm.model, held.server, llm.context_window, held.tokens, held.fix)
    return config.model_copy(update={"llm": llm.model_copy(update={"context_window": held.tokens})})
