"""Reads `config.toml` (SPEC section 10) into frozen dataclasses.

Secrets never live in the file: a key ending in `_env` names the environment variable that holds
the secret. Any bad, missing or unknown key stops start-up with one line that names the key and
says what it expects (`ConfigError`).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bot.access import AccessRules, rule_problem
from storage.factory import StorageURLError, check_url

TOOLS_MODES = ("auto", "on", "off")
VISION_MODES = ("auto", "on", "off")
TELEGRAM_MODES = ("polling", "webhook")


class ConfigError(Exception):
    """A config problem, worded as one line for the person running the bot."""


@dataclass(frozen=True)
class LLMConfig:
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    api_key: str = field(default="", repr=False)
    model: str = "gpt-4o-mini"
    context_window: int = 128_000
    max_reply_tokens: int = 800
    temperature: float = 0.8
    tools: str = "auto"
    vision: str = "auto"  # images to the model: auto tries, and stops when the server refuses them
    timeout_s: float = 60.0
    max_retries: int = 3
    summary_model: str | None = None


@dataclass(frozen=True)
class StorageConfig:
    url: str = "sqlite:///data/keepsake.sqlite3"
    base: Path = Path(".")  # the config file's folder: relative SQLite paths start there
    password_env: str | None = None  # the PostgreSQL password, kept out of the file
    backup_dir: Path | None = None
    retention_days: int | None = None

    @property
    def password(self) -> str | None:
        return _env_secret(self.password_env)


@dataclass(frozen=True)
class RecallConfig:
    enabled: bool = True
    budget_tokens: int = 1_500  # never more than 10 % of the context window is used (SPEC 11)
    embedding_model: str | None = None


@dataclass(frozen=True)
class MetricsConfig:
    port: int | None = None  # Prometheus metrics at http://listen:port/metrics; off when unset
    listen: str = "127.0.0.1"


@dataclass(frozen=True)
class TelegramConfig:
    base_url: str = "https://api.telegram.org/bot"
    mode: str = "polling"  # or "webhook": Telegram calls webhook_url, served on listen:port
    webhook_url: str | None = None
    listen: str = "0.0.0.0"
    port: int = 8443
    secret_token_env: str | None = None

    @property
    def secret_token(self) -> str | None:
        return _env_secret(self.secret_token_env)


@dataclass(frozen=True)
class LimitsConfig:
    turns_per_minute: int | None = None  # per person, across platforms and processes; None: no limit


@dataclass(frozen=True)
class ScenesConfig:
    """[scenes] (SPEC 15): character messages in a row without a person. Read and checked now, so
    a config in the format of SPEC 10 loads; several characters sharing a channel's scene are
    not built yet, so with one character a channel it changes nothing."""

    max_chain: int = 3


@dataclass(frozen=True)
class DiscordConfig:
    shard_count: int | None = None  # None: discord.py decides (one process runs every shard)
    shard_ids: tuple[int, ...] | None = None  # the shards this process runs


@dataclass(frozen=True)
class CharacterConfig:
    name: str
    card: Path | None = None
    persona: str | None = None
    discord_token_env: str | None = None
    telegram_token_env: str | None = None
    discord_always_on_channels: tuple[int, ...] = ()
    discord_dev_guild: int | None = None
    access: AccessRules = AccessRules()  # this character's own allow and deny lists

    @property
    def discord_token(self) -> str | None:
        return _env_secret(self.discord_token_env)

    @property
    def telegram_token(self) -> str | None:
        return _env_secret(self.telegram_token_env)


@dataclass(frozen=True)
class Config:
    llm: LLMConfig
    storage: StorageConfig
    telegram: TelegramConfig
    characters: tuple[CharacterConfig, ...]
    recall: RecallConfig = RecallConfig()
    discord: DiscordConfig = DiscordConfig()
    metrics: MetricsConfig = MetricsConfig()
    limits: LimitsConfig = LimitsConfig()
    scenes: ScenesConfig = ScenesConfig()
    access: AccessRules = AccessRules()

    def character(self, name: str) -> CharacterConfig:
        for character in self.characters:
            if character.name.casefold() == name.casefold():
                return character
        known = ", ".join(c.name for c in self.characters)
        raise ConfigError(f"no character named {name!r} in the config (known: {known})")


def _on_this_machine(url: str) -> bool:
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "") in ("localhost", "127.0.0.1", "::1")


def _env_secret(env_name: str | None) -> str | None:
    if not env_name:
        return None
    value = os.environ.get(env_name, "").strip()
    return value or None


class _Section:
    """Typed reads from one TOML table, remembering which keys were used."""

    def __init__(self, where: str, table: Any):
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: expected a table like [{where}]")
        self.where = where
        self.table = dict(table)
        self.used: set[str] = set()

    def _get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        return self.table.get(key, default)

    def _fail(self, key: str, expected: str, value: Any) -> ConfigError:
        return ConfigError(f"{self.where}.{key}: expected {expected}, got {value!r}")

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self._get(key, None)
        if value is None:
            if required:
                raise ConfigError(f"{self.where}.{key}: missing; expected a text value")
            return default
        if not isinstance(value, str) or not value.strip():
            raise self._fail(key, "a non-empty text value", value)
        return value.strip()

    def integer(self, key: str, default: int | None, *, minimum: int = 0) -> int | None:
        value = self._get(key, None)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._fail(key, f"a whole number ≥ {minimum}", value)
        return value

    def port(self, key: str, default: int | None) -> int | None:
        value = self.integer(key, default, minimum=1)
        if value is not None and value > 65_535:
            raise self._fail(key, "a port from 1 to 65535", value)
        return value

    def number(self, key: str, default: float, *, low: float, high: float) -> float:
        value = self._get(key, None)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise self._fail(key, f"a number from {low} to {high}", value)
        return float(value)

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self._get(key, None)
        if value is None:
            return default
        if value not in choices:
            raise self._fail(key, "one of " + " | ".join(choices), value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, None)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def id_list(self, key: str, what: str = "channel ids") -> tuple[int, ...]:
        value = self._get(key, [])
        if not isinstance(value, list):
            raise self._fail(key, f"a list of {what}", value)
        ids = []
        for item in value:
            if isinstance(item, str) and item.isdigit():
                item = int(item)
            if isinstance(item, bool) or not isinstance(item, int):
                raise self._fail(key, f"a list of {what} (numbers)", value)
            ids.append(item)
        return tuple(ids)

    def rules(self, key: str) -> frozenset[str]:
        value = self._get(key, [])
        if not isinstance(value, list):
            raise self._fail(key, "a list like [\"telegram:1001\", \"discord-role:456\"]", value)
        for rule in value:
            if problem := rule_problem(rule):
                raise ConfigError(f"{self.where}.{key}: {problem}")
        return frozenset(value)

    def url(self, key: str, default: str) -> str:
        value = self.text(key, default) or default
        if not value.lower().startswith(("http://", "https://")):
            raise self._fail(key, "an address starting with http:// or https://", value)
        return value

    def path(self, key: str, base: Path, default: Path | None = None) -> Path | None:
        value = self.text(key)
        if value is None:
            return default if default is None else (base / default)
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path

    def reject_unknown(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise ConfigError(f"{self.where}.{unknown[0]}: unknown key (check its spelling)")


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
    top = _Section("config", raw)
    llm = _parse_llm(_Section("llm", top._get("llm", {})), needs_llm)
    storage = _parse_storage(_Section("storage", top._get("storage", {})), base)
    telegram = _parse_telegram(_Section("telegram", top._get("telegram", {})))
    recall = _parse_recall(_Section("recall", top._get("recall", {})))
    discord = _parse_discord(_Section("discord", top._get("discord", {})))
    metrics = _parse_metrics(_Section("metrics", top._get("metrics", {})))
    limits = _parse_limits(_Section("limits", top._get("limits", {})))
    scenes_section = _Section("scenes", top._get("scenes", {}))
    scenes = ScenesConfig(max_chain=scenes_section.integer("max_chain", ScenesConfig.max_chain, minimum=0))
    scenes_section.reject_unknown()
    access = _parse_access(_Section("access", top._get("access", {})))

    characters_raw = top._get("characters", None)
    if not isinstance(characters_raw, list) or not characters_raw:
        raise ConfigError("characters: expected at least one [[characters]] table")
    characters = tuple(
        _parse_character(_Section(f"characters[{i}]", item), base)
        for i, item in enumerate(characters_raw)
    )
    names = [c.name.casefold() for c in characters]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"characters[{i}].name: {characters[i].name!r} is used twice")
    top.reject_unknown()
    return Config(llm=llm, storage=storage, telegram=telegram, characters=characters, recall=recall,
                  discord=discord, metrics=metrics, limits=limits, access=access, scenes=scenes)


def _parse_llm(s: _Section, needs_llm: bool) -> LLMConfig:
    d = LLMConfig()
    api_key_env = s.text("api_key_env", d.api_key_env)
    api_key = os.environ.get(api_key_env or "", "").strip()
    base_url = s.url("base_url", d.base_url)
    if not api_key and _on_this_machine(base_url):
        api_key = "none"  # a model server on this machine (Ollama, llama.cpp) needs no key
    if not api_key and needs_llm:
        raise ConfigError(
            f"llm.api_key_env: environment variable {api_key_env} is not set "
            "(set it to your API key, or to any text for a local server that needs none)"
        )
    config = LLMConfig(
        base_url=base_url,
        api_key_env=api_key_env,
        api_key=api_key,
        model=s.text("model", d.model),
        context_window=s.integer("context_window", d.context_window, minimum=1024),
        max_reply_tokens=s.integer("max_reply_tokens", d.max_reply_tokens, minimum=1),
        temperature=s.number("temperature", d.temperature, low=0.0, high=2.0),
        tools=s.choice("tools", d.tools, TOOLS_MODES),
        vision=s.choice("vision", d.vision, VISION_MODES),
        timeout_s=s.number("timeout_s", d.timeout_s, low=0.1, high=3600),
        max_retries=s.integer("max_retries", d.max_retries, minimum=0),
        summary_model=s.text("summary_model"),
    )
    s.reject_unknown()
    return config


def _parse_storage(s: _Section, base: Path) -> StorageConfig:
    url = s.text("url")
    path = s.path("path", base)  # the older spelling of an SQLite url
    if url is not None and path is not None:
        raise ConfigError("storage.path: give either url or path, not both")
    if path is not None:
        url = f"sqlite:///{path}"
    url = url or StorageConfig.url
    try:
        check_url(url)
    except StorageURLError as problem:
        raise ConfigError(f"storage.url: {problem}") from None
    password_env = s.text("password_env")
    if password_env and _env_secret(password_env) is None:
        raise ConfigError(f"storage.password_env: environment variable {password_env} is not set")
    config = StorageConfig(
        url=url,
        base=base,
        password_env=password_env,
        backup_dir=s.path("backup_dir", base),
        retention_days=s.integer("retention_days", None, minimum=1),
    )
    s.reject_unknown()
    return config


def _parse_character(s: _Section, base: Path) -> CharacterConfig:
    name = s.text("name", required=True)
    card = s.path("card", base)
    persona = s.text("persona")
    if (card is None) == (persona is None):
        raise ConfigError(f"{s.where}.card: give either card = \"file.json|png\" or persona = \"...\"")
    config = CharacterConfig(
        name=name,
        card=card,
        persona=persona,
        discord_token_env=s.text("discord_token_env"),
        telegram_token_env=s.text("telegram_token_env"),
        discord_always_on_channels=s.id_list("discord_always_on_channels"),
        discord_dev_guild=s.integer("discord_dev_guild", None, minimum=1),
        access=_parse_access(_Section(f"{s.where}.access", s._get("access", {}))),
    )
    s.reject_unknown()
    return config


def _parse_telegram(s: _Section) -> TelegramConfig:
    d = TelegramConfig()
    config = TelegramConfig(
        base_url=s.url("base_url", d.base_url),
        mode=s.choice("mode", d.mode, TELEGRAM_MODES),
        webhook_url=s.text("webhook_url"),
        listen=s.text("listen", d.listen) or d.listen,
        port=s.port("port", d.port) or d.port,
        secret_token_env=s.text("secret_token_env"),
    )
    if config.mode == "webhook":
        if not config.webhook_url or not config.webhook_url.startswith("https://"):
            raise ConfigError("telegram.webhook_url: mode = \"webhook\" needs the public https:// address "
                              "Telegram calls, e.g. \"https://bot.example.com/telegram\"")
        if not config.secret_token_env:
            raise ConfigError("telegram.secret_token_env: mode = \"webhook\" needs a secret token, so that only "
                              "Telegram can post updates; name the environment variable that holds it")
        if not config.secret_token:
            raise ConfigError(f"telegram.secret_token_env: environment variable {config.secret_token_env} is not set")
    s.reject_unknown()
    return config


def _parse_recall(s: _Section) -> RecallConfig:
    d = RecallConfig()
    config = RecallConfig(
        enabled=s.boolean("enabled", d.enabled),
        budget_tokens=s.integer("budget_tokens", d.budget_tokens, minimum=1) or d.budget_tokens,
        embedding_model=s.text("embedding_model"),
    )
    s.reject_unknown()
    return config


def _parse_limits(s: _Section) -> LimitsConfig:
    config = LimitsConfig(turns_per_minute=s.integer("turns_per_minute", None, minimum=1))
    s.reject_unknown()
    return config


def _parse_access(s: _Section) -> AccessRules:
    config = AccessRules(allow=s.rules("allow"), deny=s.rules("deny"))
    s.reject_unknown()
    return config


def _parse_metrics(s: _Section) -> MetricsConfig:
    config = MetricsConfig(port=s.port("port", None), listen=s.text("listen", MetricsConfig.listen))
    s.reject_unknown()
    return config


def _parse_discord(s: _Section) -> DiscordConfig:
    shard_count = s.integer("shard_count", None, minimum=1)
    shard_ids = s.id_list("shard_ids", "shard ids") if "shard_ids" in s.table else None
    if shard_ids is not None:
        if shard_count is None:
            raise ConfigError("discord.shard_ids: give discord.shard_count too (the total number of shards)")
        if not shard_ids or any(not 0 <= i < shard_count for i in shard_ids):
            raise ConfigError(f"discord.shard_ids: expected ids from 0 to {shard_count - 1}, got {list(shard_ids)}")
    s.reject_unknown()
    return DiscordConfig(shard_count=shard_count, shard_ids=shard_ids)
