"""Each platform adapter's settings: what it needs of the config, typed here so the core's
config types know no platform (bot/cli.py fills them from the config file)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiscordSettings:
    """What this adapter needs of the config: a character's token and always-on channels, and
    the process's shards ([discord] shard_count, shard_ids: SPEC 12)."""

    token: str
    always_on_channels: frozenset[str] = frozenset()
    dev_guild: int | None = None  # slash commands synced to this server only (they show at once)
    shard_count: int | None = None
    shard_ids: tuple[int, ...] | None = None



@dataclass(frozen=True)
class TelegramSettings:
    """What this adapter needs of the config: a character's token, and [telegram] (SPEC 10, 12)."""

    token: str
    base_url: str = "https://api.telegram.org/bot"
    mode: str = "polling"  # or "webhook": Telegram calls webhook_url, served on listen:port
    webhook_url: str | None = None
    listen: str = "0.0.0.0"
    port: int = 8443
    secret_token: str | None = None
