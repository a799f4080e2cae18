"""Each platform's part of the config (SPEC 10, 12): its top-level table (`[telegram]`,
`[discord]`) and its keys in a `[[characters]]` table, typed here by the adapter that uses them.
The core config keeps them as the file gives them; bot/cli.py checks them with these types at
start-up (one line naming a bad key, like every key) and hands each adapter its settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from bot.contract import SettingProblem, env_name


def _digits_as_number(value: Any) -> Any:
    """Ids may be written as numbers or as digit strings (Discord's are long)."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value


Id = Annotated[int, BeforeValidator(_digits_as_number)]
# TOML gives lists; a setting keeps them as tuples (frozen, like every setting)
Ids = Annotated[tuple[Id, ...], BeforeValidator(lambda v: tuple(v) if isinstance(v, list) else v)]
Text = Annotated[str, Field(min_length=1)]
EnvName = Annotated[str, Field(min_length=1), BeforeValidator(env_name)]  # a variable's name, never a secret


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def secret(env_name: str | None) -> str | None:
    """The secret held by this environment variable (None when unset or empty)."""
    value = os.environ.get(env_name, "").strip() if env_name else ""
    return value or None


# -- Discord ------------------------------------------------------------------------------------
class DiscordSection(Section):
    """`[discord]`: the shards this process runs (SPEC 12), and the host bot that voices every
    character without a bot of its own through channel webhooks (SPEC 15)."""

    shard_count: int | None = Field(None, ge=1)  # None: discord.py decides (one process runs every shard)
    shard_ids: Ids | None = None
    host_token_env: EnvName | None = None
    nsfw_in_dms: bool = False  # SPEC 17: age-restricted characters answer in DMs too

    @model_validator(mode="after")
    def _shards_exist(self) -> "DiscordSection":
        if self.shard_ids is not None:
            if self.shard_count is None:
                raise SettingProblem("shard_ids", "give discord.shard_count too (the total number of shards)")
            if not self.shard_ids or any(not 0 <= i < self.shard_count for i in self.shard_ids):
                raise SettingProblem("shard_ids", f"expected ids from 0 to {self.shard_count - 1}, "
                                                  f"got {list(self.shard_ids)}")
        return self


class DiscordCharacter(Section):
    """A character's Discord keys."""

    discord_token_env: EnvName | None = None
    discord_always_on_channels: Ids = ()  # channel ids where every message is answered
    discord_dev_guild: Id | None = Field(None, ge=1)  # slash commands synced here only (they show at once)


@dataclass(frozen=True)
class DiscordSettings:
    """What the Discord adapter of one character runs with."""

    token: str
    token_env: str = ""  # the variable holding it, named when Discord refuses it
    always_on_channels: frozenset[str] = frozenset()
    dev_guild: int | None = None
    shard_count: int | None = None
    shard_ids: tuple[int, ...] | None = None
    hosted: bool = False  # the host bot's ([discord] host_token_env): it voices characters by webhook
    nsfw_in_dms: bool = False  # DMs count as age-restricted places (SPEC 17)

    def secrets(self) -> set[str]:
        """What the logs must never show."""
        return {self.token}

    def joined(self, other: "DiscordSettings") -> "DiscordSettings":
        """One host bot for two characters it voices: their always-on channels together."""
        return replace(self, always_on_channels=self.always_on_channels | other.always_on_channels,
                       dev_guild=self.dev_guild or other.dev_guild)


def discord_settings(section: DiscordSection, character: DiscordCharacter) -> DiscordSettings | None:
    """A character's own bot; without one, the host bot when [discord] host_token_env is set."""
    token, token_env = secret(character.discord_token_env), character.discord_token_env or ""
    hosted = token is None and section.host_token_env is not None
    if hosted:
        token, token_env = secret(section.host_token_env), section.host_token_env or ""
    if token is None:
        return None
    return DiscordSettings(token, token_env, frozenset(str(c) for c in character.discord_always_on_channels),
                           character.discord_dev_guild, section.shard_count, section.shard_ids, hosted,
                           section.nsfw_in_dms)


def discord_adapters(found: list[tuple[str, DiscordSettings]]) -> list[tuple[tuple[str, ...], DiscordSettings]]:
    """The Discord adapters to run: one a character with its own bot; one for all the characters
    the host bot voices."""
    own = [((name,), settings) for name, settings in found if not settings.hosted]
    hosted = [(name, settings) for name, settings in found if settings.hosted]
    if not hosted:
        return own
    names, settings = (hosted[0][0],), hosted[0][1]
    for name, more in hosted[1:]:
        names, settings = (*names, name), settings.joined(more)
    return [*own, (names, settings)]


def one_each(found: list[tuple[str, Any]]) -> list[tuple[tuple[str, ...], Any]]:
    """One adapter a character (Telegram: every character has its own bot)."""
    return [((name,), settings) for name, settings in found]


# -- Telegram -----------------------------------------------------------------------------------
class TelegramSection(Section):
    """`[telegram]`: where the Bot API is, and how updates arrive (SPEC 10, 12)."""

    base_url: Text = "https://api.telegram.org/bot"
    mode: Literal["polling", "webhook"] = "polling"  # webhook: Telegram calls webhook_url, served on listen:port
    webhook_url: Text | None = None
    listen: Text = "0.0.0.0"
    port: int = Field(8443, ge=1, le=65_535)
    secret_token_env: EnvName | None = None
    allow_nsfw: bool = False  # SPEC 17: Telegram has no age-restricted chats; this lets such characters answer

    @model_validator(mode="after")
    def _webhook_is_complete(self) -> "TelegramSection":
        if not self.base_url.lower().startswith(("http://", "https://")):
            raise SettingProblem("base_url", f"expected an address starting with http:// or https://, "
                                             f"got {self.base_url!r}")
        if self.mode != "webhook":
            return self
        if not self.webhook_url or not self.webhook_url.startswith("https://"):
            raise SettingProblem("webhook_url", "mode = \"webhook\" needs the public https:// address Telegram "
                                                "calls, e.g. \"https://bot.example.com/telegram\"")
        if not self.secret_token_env:
            raise SettingProblem("secret_token_env", "mode = \"webhook\" needs a secret token, so that only "
                                 "Telegram can post updates; name the environment variable that holds it")
        if secret(self.secret_token_env) is None:
            raise SettingProblem("secret_token_env", f"environment variable {self.secret_token_env} is not set")
        return self


class TelegramCharacter(Section):
    """A character's Telegram keys."""

    telegram_token_env: EnvName | None = None


@dataclass(frozen=True)
class TelegramSettings:
    """What the Telegram adapter of one character runs with."""

    token: str
    token_env: str = ""  # the variable holding it, named when Telegram refuses it
    base_url: str = "https://api.telegram.org/bot"
    mode: str = "polling"
    webhook_url: str | None = None
    listen: str = "0.0.0.0"
    port: int = 8443
    secret_token: str | None = None
    allow_nsfw: bool = False  # every chat counts as an age-restricted place (SPEC 17)

    def secrets(self) -> set[str]:
        """What the logs must never show."""
        return {self.token} | ({self.secret_token} if self.secret_token else set())


def telegram_settings(section: TelegramSection, character: TelegramCharacter) -> TelegramSettings | None:
    token = secret(character.telegram_token_env)
    if token is None:
        return None
    return TelegramSettings(token, character.telegram_token_env or "", section.base_url, section.mode,
                            section.webhook_url, section.listen, section.port, secret(section.secret_token_env),
                            section.allow_nsfw)
