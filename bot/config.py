"""Reads `config.toml` (SPEC section 10) into frozen, typed sections (pydantic models).

Secrets never live in the file: a key ending in `_env` names the environment variable that holds
the secret. Any bad, missing or unknown key stops start-up with one line that names the key and
says what it expects (`ConfigError`, worded by `one_line`).

The core owns the sections below. A platform's own keys (`[telegram]`, `[discord]`, a character's
`telegram_token_env`, …) belong to its adapter (adapters/settings.py): they are kept here as the
file gives them (`Config.platforms`, `CharacterConfig.platform_keys`) and checked by the
adapters' types when bot/cli.py loads the config.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tomllib
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bot.access.rules import AccessRules, rule_problem
from bot.contract import PLATFORM_TRAITS, SettingProblem, env_name
from storage.factory import StorageURLError, check_url


class ConfigError(Exception):
    """A config problem, worded as one line for the person running the bot."""


def env_secret(env_name: str | None) -> str | None:
    """The secret held by this environment variable (None when unset or empty)."""
    if not env_name:
        return None
    value = os.environ.get(env_name, "").strip()
    return value or None


def _on_this_machine(url: str) -> bool:
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "") in ("localhost", "127.0.0.1", "::1")


def _http(value: str) -> str:
    if not value.lower().startswith(("http://", "https://")):
        raise ValueError("expected an address starting with http:// or https://")
    return value


def _path(value: Any, info: ValidationInfo) -> Any:
    """A path from the file: relative ones start at the config file's folder."""
    if isinstance(value, str) and value.strip():
        path = Path(value.strip()).expanduser()
        base = (info.context or {}).get("base")
        return path if path.is_absolute() or base is None else base / path
    return value


def _access_rules(table: Any) -> Any:
    """An `[access]` table (SPEC 13): allow and deny lists of rules like "telegram:1001"."""
    if not isinstance(table, Mapping):
        return table
    lists = {}
    for key in table:
        if key not in ("allow", "deny"):
            raise SettingProblem(key, "unknown key (check its spelling)")
    for key in ("allow", "deny"):
        rules = table.get(key, [])
        if not isinstance(rules, list):
            raise SettingProblem(key, f"expected a list like [\"telegram:1001\", \"discord-role:456\"], got {rules!r}")
        for rule in rules:
            if problem := rule_problem(rule):
                raise SettingProblem(key, problem)
        lists[key] = frozenset(rules)
    return AccessRules(**lists)


Text = Annotated[str, Field(min_length=1), BeforeValidator(lambda v: v.strip() if isinstance(v, str) else v)]
Listed = BeforeValidator(lambda value: tuple(value) if isinstance(value, list) else value)  # a TOML list, as a tuple
EnvName = Annotated[str, Field(min_length=1), BeforeValidator(env_name)]  # a variable's name, never a secret
HttpURL = Annotated[Text, AfterValidator(_http)]
FilePath = Annotated[Path, BeforeValidator(_path)]
Port = Annotated[int, Field(ge=1, le=65_535)]


def _network(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be an address or a network, like \"10.0.0.5\" or \"10.0.0.0/8\"")
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise ValueError(f"{value!r} is not an address or a network, like \"10.0.0.5\" or \"10.0.0.0/8\"") from None


Network = Annotated[str, BeforeValidator(_network)]
Access = Annotated[AccessRules, BeforeValidator(_access_rules)]


class Section(BaseModel):
    """A table of the file: only its own keys, each of its own type (no silent conversions)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LLMConfig(Section):
    base_url: HttpURL = "https://api.openai.com/v1"
    api_key_env: EnvName = "OPENAI_API_KEY"
    model: Text = "gpt-4o-mini"
    context_window: int = Field(128_000, ge=1024)
    max_reply_tokens: int = Field(800, ge=1)
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    tools: Literal["auto", "on", "off"] = "auto"
    vision: Literal["auto", "on", "off"] = "auto"  # images to the model: auto tries, and stops when refused
    timeout_s: float = Field(60.0, ge=0.1, le=3600)
    max_retries: int = Field(3, ge=0)
    summary_model: Text | None = None

    @property
    def api_key(self) -> str:
        """The key from its variable; a model server on this machine (Ollama, llama.cpp) needs none."""
        return env_secret(self.api_key_env) or ("none" if _on_this_machine(self.base_url) else "")


class StorageConfig(Section):
    url: Text = "sqlite:///data/keepsake.sqlite3"
    password_env: EnvName | None = None  # the PostgreSQL password, kept out of the file
    backup_dir: FilePath | None = None
    retention_days: int | None = Field(None, ge=1)
    _base: Path = PrivateAttr(Path("."))

    @model_validator(mode="before")
    @classmethod
    def _path_is_a_url(cls, raw: Any, info: ValidationInfo) -> Any:
        """`path = "data/x.sqlite3"` is the older spelling of an SQLite url."""
        if not isinstance(raw, Mapping) or "path" not in raw:
            return raw
        raw = dict(raw)
        if "url" in raw:
            raise SettingProblem("path", "give either url or path, not both")
        path = _path(raw.pop("path"), info)
        if not isinstance(path, Path):
            raise SettingProblem("path", "expected the path of an SQLite file")
        return raw | {"url": f"sqlite:///{path}"}

    @model_validator(mode="after")
    def _checked(self, info: ValidationInfo) -> "StorageConfig":
        self._base = (info.context or {}).get("base", Path("."))
        try:
            check_url(self.url)
        except StorageURLError as problem:
            raise SettingProblem("url", str(problem)) from None
        if self.password_env and self.password is None:
            raise SettingProblem("password_env", f"environment variable {self.password_env} is not set")
        return self

    @property
    def base(self) -> Path:
        """The config file's folder: relative SQLite paths start there."""
        return self._base

    @property
    def password(self) -> str | None:
        return env_secret(self.password_env)


class RecallConfig(Section):
    enabled: bool = True
    budget_tokens: int = Field(1_500, ge=1)  # never more than 10 % of the context window (SPEC 11)
    embedding_model: Text | None = None
    embedding_base_url: HttpURL | None = None  # the embedding server, when it is not [llm] base_url
    embedding_api_key_env: EnvName | None = None  # its key's variable (default: [llm] api_key_env)

    @model_validator(mode="after")
    def _embedding_key_is_set(self) -> "RecallConfig":
        if self.embedding_api_key_env and env_secret(self.embedding_api_key_env) is None:
            raise SettingProblem("embedding_api_key_env",
                                 f"environment variable {self.embedding_api_key_env} is not set")
        return self

    def embedding_llm(self, llm: "LLMConfig") -> "LLMConfig":
        """The model server embeddings are asked of: [llm]'s, or the one named here."""
        changes = {key: value for key, value in (("base_url", self.embedding_base_url),
                                                 ("api_key_env", self.embedding_api_key_env)) if value}
        return llm.model_copy(update=changes)


class MetricsConfig(Section):
    port: Port | None = None  # Prometheus metrics at http://listen:port/metrics; off when unset
    listen: Text = "127.0.0.1"


def _time_zone(value: Any) -> Any:
    if isinstance(value, str):
        try:
            ZoneInfo(value.strip())
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"expected a time zone's IANA name like \"Europe/Paris\", got {value!r}") from None
        return value.strip()
    return value


class LimitsConfig(Section):
    turns_per_minute: int | None = Field(None, ge=1)  # per person, across platforms and processes
    tokens_per_day: int | None = Field(None, ge=1)  # SPEC 17: per person, prompt + reply tokens
    timezone: Annotated[str, BeforeValidator(_time_zone)] = "UTC"  # when a day starts

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def _owner_id(value: Any) -> Any:
    chat = [name for name, traits in PLATFORM_TRAITS.items() if traits.chat]
    if isinstance(value, str) and not re.fullmatch(rf"({'|'.join(chat)}):\S+", value.strip()):
        raise ValueError("expected " + " or ".join(f'"{name}:<user id>"' for name in chat) + f", got {value!r}")
    return value.strip() if isinstance(value, str) else value


class OwnerConfig(Section):
    """[owner] (SPEC 17): who may see /stats (the console, its owner's, always may)."""

    ids: Annotated[tuple[Annotated[str, BeforeValidator(_owner_id)], ...],
                   Listed] = ()


MAX_CHAIN = 10  # SPEC 15 "A chain is bounded"


class ScenesConfig(Section):
    """[scenes] (SPEC 15, bot/scenes.py): at most this many character messages in a row without a
    person (a character's reply naming another character is answered by it; 0: never; a chain
    is bounded: at most MAX_CHAIN)."""

    max_chain: int = Field(3, ge=0, le=MAX_CHAIN)


class VoiceConfig(Section):
    """[voice] (SPEC 16, bot/voice/): voice notes heard through an OpenAI-compatible
    /audio/transcriptions, and replies spoken through /audio/speech when `speech_model` is set.
    Without this table a voice note is answered with one line: the character reads text here."""

    base_url: HttpURL | None = None  # default: [llm] base_url
    api_key_env: EnvName | None = None  # default: [llm] api_key_env
    transcription_model: Text = "whisper-1"
    speech_model: Text | None = None  # unset: replies are never spoken
    reply_in_voice: Literal["never", "when-spoken-to", "always"] = "when-spoken-to"
    max_seconds: int = Field(300, ge=1, le=3600)  # a longer voice note is refused before it is fetched

    @model_validator(mode="after")
    def _key_is_set(self) -> "VoiceConfig":
        if self.api_key_env and env_secret(self.api_key_env) is None:
            raise SettingProblem("api_key_env", f"environment variable {self.api_key_env} is not set")
        return self

    def server(self, llm: LLMConfig) -> LLMConfig:
        """The audio server: [llm]'s, or the one named here."""
        changes = {key: value for key, value in (("base_url", self.base_url), ("api_key_env", self.api_key_env))
                   if value}
        return llm.model_copy(update=changes)


def _quiet_hours(value: Any) -> Any:
    """`"22:00-09:00"` → (1320, 540): minutes after midnight where the quiet starts and ends."""
    found = re.fullmatch(r"\s*([01]?\d|2[0-3]):([0-5]\d)\s*-\s*([01]?\d|2[0-3]):([0-5]\d)\s*", value) \
        if isinstance(value, str) else None
    if not found:
        raise ValueError(f"expected a range like \"22:00-09:00\" (one text), got {value!r}")
    start_h, start_m, end_h, end_m = (int(part) for part in found.groups())
    if (start_h, start_m) == (end_h, end_m):
        raise ValueError(f"{value!r} starts and ends at the same time, so it would never be quiet; "
                         "expected a range like \"22:00-09:00\"")
    return start_h * 60 + start_m, end_h * 60 + end_m


class CheckinsConfig(Section):
    """`[characters.checkins]` (SPEC 14): writing first after an absence; off without this table."""

    after_hours: float = Field(gt=0)  # a one-to-one conversation quiet this long gets one message
    quiet_hours: Annotated[tuple[int, int], BeforeValidator(_quiet_hours)] | None = None  # minutes after midnight
    timezone: Annotated[str, BeforeValidator(_time_zone)] = "UTC"
    scan_seconds: float = Field(300.0, gt=0)  # how often due conversations are looked for

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


BUILT_IN_TOOLS = ("dice", "time", "search", "read", "remind", "picture")  # SPEC 18
ToolName = Literal["dice", "time", "search", "read", "remind", "picture"]
ToolNames = Annotated[tuple[ToolName, ...], Listed]


class SearchConfig(Section):
    """`[tools.search]`: a SearXNG instance the owner runs (its JSON API; may be on this machine)."""

    url: HttpURL


class ReadConfig(Section):
    """`[tools.read]`: reading a web page the person linked or a search returned (SPEC 18)."""

    max_bytes: int = Field(2_000_000, ge=1_000, le=50_000_000)
    deny_domains: Annotated[tuple[Text, ...], Listed] = ()


class MCPServerConfig(Section):
    """A `[[tools.mcp]]` table: an MCP server the owner trusts, over streamable HTTP (`url`) or a
    command it starts (`command`); only the `tools` named are offered."""

    name: Text
    url: HttpURL | None = None
    command: Annotated[tuple[Text, ...], Listed] = ()
    tools: Annotated[tuple[Text, ...], Field(min_length=1), Listed]

    @model_validator(mode="after")
    def _url_or_command(self) -> "MCPServerConfig":
        if (self.url is None) == (not self.command):
            raise SettingProblem("url", "give either url = \"http://…/mcp\" or command = [\"program\", \"arg\"]")
        return self


class ToolsConfig(Section):
    """`[tools]` (SPEC 18): what characters may use; each character's `tools` narrows it."""

    enabled: ToolNames = BUILT_IN_TOOLS
    show: bool = True  # a small line under a reply naming what was used
    search: SearchConfig | None = None  # no search without a SearXNG instance
    read: ReadConfig = ReadConfig()
    mcp: Annotated[tuple[MCPServerConfig, ...], Listed] = ()


class RemindersConfig(Section):
    """`[reminders]` (SPEC 19): a reminder due while every process was down is sent at start-up
    saying how late, within `grace_hours`; later than that, as missed."""

    grace_hours: float = Field(12.0, ge=0, le=24 * 30)


class PicturesConfig(Section):
    """`[pictures]` (SPEC 20): the image server the `picture` tool draws with; off without it."""

    kind: Literal["openai", "automatic1111"] = "openai"
    base_url: HttpURL | None = None  # default: [llm] base_url (an OpenAI-compatible server)
    api_key_env: EnvName | None = None  # default: [llm] api_key_env
    model: Text | None = None  # the server's default when unset
    per_day: int = Field(20, ge=1)  # pictures a person may get a day
    tokens_each: int = Field(1000, ge=0)  # what a picture counts against [limits] tokens_per_day
    # automatic1111's safe setting, sent everywhere that is not age-restricted (OpenAI: `moderation`)
    safe_negative_prompt: Text = "nsfw, nude, naked, nudity, sexual, explicit, gore, blood"

    @model_validator(mode="after")
    def _key_is_set(self) -> "PicturesConfig":
        if self.api_key_env and env_secret(self.api_key_env) is None:
            raise SettingProblem("api_key_env", f"environment variable {self.api_key_env} is not set")
        return self


class WebConfig(Section):
    """`[web]` (SPEC 21): where the memory page is served — on 127.0.0.1 unless `listen` says
    otherwise — and `public_url`, the address links point at (behind a proxy, with https)."""

    listen: Text = "127.0.0.1"
    port: Port = 8080
    public_url: HttpURL | None = None
    # the proxies whose X-Forwarded-For is believed (addresses or networks; SPEC 21 "Proxies named")
    trusted_proxies: Annotated[tuple[Network, ...], Listed] = ("127.0.0.1/32", "::1/128")

    @property
    def address(self) -> str:
        """Where a link points: `public_url`, else this machine's own address and port."""
        if self.public_url is not None:  # its scheme and host read in any case (`HTTPS://…` is https)
            parts = urlsplit(str(self.public_url))
            return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}".rstrip("/")
        host = "127.0.0.1" if self.listen in ("0.0.0.0", "") else "[::1]" if self.listen == "::" else self.listen
        return f"http://{host}:{self.port}"

    @property
    def secure(self) -> bool:
        """Under https: the session cookie is `Secure`."""
        return self.address.startswith("https://")

    @property
    def origin(self) -> str:
        """`scheme://host[:port]` of `address`, as a browser writes it in `Origin`."""
        parts = urlsplit(self.address)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def path(self) -> str:
        """The path the page is served under by a proxy ("" at the root): every link starts with it."""
        return urlsplit(self.address).path.rstrip("/")


class CharacterConfig(BaseModel):
    """A `[[characters]]` table: the core's keys; the others are its platforms' (checked by them)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    name: Text
    card: FilePath | None = None
    persona: Text | None = None
    access: Access = AccessRules()  # this character's own allow and deny lists
    checkins: CheckinsConfig | None = None  # SPEC 14: off unless the table is there
    voice: Text = "alloy"  # SPEC 16: the voice its replies are spoken in ([voice] speech_model)
    nsfw: bool | None = None  # SPEC 17: age-restricted; None: as the card's tags say ("nsfw", any case)
    appearance: Text | None = None  # SPEC 20: put before the scene of every picture it draws
    omniscient: bool = False  # SPEC 22: a narrator, that witnesses everything said in a scene
    # SPEC 18: this character's own tools (built-in and MCP names); None: all of [tools] enabled
    tools: Annotated[tuple[Text, ...], Listed] | None = None

    @model_validator(mode="after")
    def _card_or_persona(self) -> "CharacterConfig":
        if (self.card is None) == (self.persona is None):
            raise SettingProblem("card", "give either card = \"file.json|png\" or persona = \"...\"")
        return self

    @property
    def platform_keys(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Config(BaseModel):
    """The whole file. Top-level tables the core does not own are its platforms' (`platforms`)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    llm: LLMConfig = LLMConfig()
    storage: StorageConfig = StorageConfig()
    characters: tuple[CharacterConfig, ...] = ()
    recall: RecallConfig = RecallConfig()
    metrics: MetricsConfig = MetricsConfig()
    limits: LimitsConfig = LimitsConfig()
    scenes: ScenesConfig = ScenesConfig()
    voice: VoiceConfig | None = None  # SPEC 16: off unless the table is there
    owner: OwnerConfig = OwnerConfig()
    access: Access = AccessRules()
    tools: ToolsConfig = ToolsConfig()
    reminders: RemindersConfig = RemindersConfig()
    pictures: PicturesConfig | None = None  # SPEC 20: off unless the table is there
    web: WebConfig | None = None  # SPEC 21: the memory page

    @model_validator(mode="before")
    @classmethod
    def _every_core_table(cls, raw: Any) -> Any:
        """Sections left out are read as empty tables (so the storage one learns its folder); the
        likeliest typo, `[[character]]` for `[[characters]]`, is named."""
        if isinstance(raw, Mapping) and "character" in raw and "characters" not in raw:
            raise SettingProblem("character", "there is no [[character]] table: write [[characters]], with an s")
        return {"storage": {}} | dict(raw) if isinstance(raw, Mapping) else raw

    @field_validator("characters", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _names_once(self) -> "Config":
        if not self.characters:
            raise SettingProblem("characters", "expected at least one [[characters]] table")
        names = [c.name.casefold() for c in self.characters]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise SettingProblem(f"characters[{i}].name", f"{self.characters[i].name!r} is used twice")
        return self

    @model_validator(mode="after")
    def _tools_known(self) -> "Config":
        known = set(BUILT_IN_TOOLS) | {name for server in self.tools.mcp for name in server.tools}
        for i, character in enumerate(self.characters):
            for name in character.tools or ():
                if name not in known:
                    raise SettingProblem(f"characters[{i}].tools", f"no tool named {name!r} (known: "
                                         f"{', '.join(sorted(known))}; an MCP server's tools as [[tools.mcp]] tools names them)")
        return self

    @property
    def platforms(self) -> dict[str, Any]:
        """The platform tables as the file gives them (`telegram`, `discord`)."""
        return dict(self.model_extra or {})

    def changed(self, section: str, **values: Any) -> "Config":
        """A copy with these keys of one section changed: `config.changed("llm", model="llama3.1")`."""
        return self.model_copy(update={section: getattr(self, section).model_copy(update=values)})

    def character(self, name: str) -> CharacterConfig:
        for character in self.characters:
            if character.name.casefold() == name.casefold():
                return character
        known = ", ".join(c.name for c in self.characters)
        raise ConfigError(f"no character named {name!r} in the config (known: {known})")


def load_config(path: str | os.PathLike[str], needs_llm: bool = True) -> Config:
    """Read and check the config file; raise ConfigError naming the first bad key. Without
    `needs_llm` (admin commands), the API key's variable may be unset."""
    config_path = Path(path)
    try:
        raw = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{config_path}: file not found (copy config.example.toml to {config_path.name})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{config_path}: not valid TOML ({exc})") from None
    return parse_config(raw, base=config_path.resolve().parent, needs_llm=needs_llm)


def parse_config(raw: Mapping[str, Any], base: Path, needs_llm: bool = True) -> Config:
    config = checked(Config, raw, context={"base": base})
    if needs_llm and not config.llm.api_key:
        raise ConfigError(
            f"llm.api_key_env: environment variable {config.llm.api_key_env} is not set "
            "(set it to your API key, or to any text for a local server that needs none)"
        )
    return config


def checked(model: type[BaseModel], raw: Any, where: tuple[str | int, ...] = (), **kwargs: Any) -> Any:
    """`model` validated from `raw`, or a ConfigError worded by `one_line`."""
    try:
        return model.model_validate(raw, **kwargs)
    except ValidationError as error:
        raise ConfigError(one_line(error, where)) from None


def one_line(error: ValidationError, where: tuple[str | int, ...] = ()) -> str:
    """`llm.tools: expected one of auto | on | off, got 'maybe'`: the first problem, naming its key.
    An unknown key is named before anything else: a misspelt key also leaves its own key missing."""
    first = min(error.errors(), key=lambda problem: problem["type"] != "extra_forbidden")
    loc: list[str | int] = [*where, *first["loc"]]
    found = first.get("ctx", {}).get("error")
    if isinstance(found, SettingProblem):
        return f"{_dotted([*loc, found.key])}: {found.text}"
    text = _expected(first)
    if first["type"] not in ("missing", "extra_forbidden", "value_error"):
        text += f", got {first['input']!r}"
    if loc[-1:] == ["tokens_per_day"] and first["type"] == "greater_than_equal":
        text += " (leave the key out for no limit)"
    return f"{_dotted(loc)}: {text}"


def _dotted(loc: list[str | int]) -> str:
    """`characters[0].access.allow`"""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "config"


def _expected(error: Mapping[str, Any]) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    bound = ctx.get("ge", ctx.get("le"))
    number = "a number" if isinstance(bound, float) else "a whole number"
    words = {
        "missing": "missing",
        "extra_forbidden": "unknown key (check its spelling)",
        "int_type": "expected a whole number",
        "float_type": "expected a number",
        "bool_type": "expected true or false",
        "string_type": "expected a text value",
        "string_too_short": "expected a non-empty text value",
        "list_type": "expected a list",
        "tuple_type": "expected a list",
        "frozen_set_type": "expected a list",
        "model_type": "expected a table",
        "model_attributes_type": "expected a table",
        "dict_type": "expected a table",
        "too_short": "expected at least one entry",
    }
    if kind in words:
        return words[kind]
    if kind == "literal_error":
        return "expected one of " + " | ".join(re.findall(r"'([^']*)'", ctx.get("expected", "")))
    if kind == "greater_than_equal":
        return f"expected {number} ≥ {ctx['ge']}"
    if kind == "greater_than":
        return f"expected a number above {ctx['gt']:g}"
    if kind == "less_than_equal":
        return f"expected {number} ≤ {ctx['le']}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"]
