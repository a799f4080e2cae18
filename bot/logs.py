"""Logging set-up: levels, and masking of secrets in every line written.

Libraries sometimes put a token into an exception text (python-telegram-bot's InvalidToken
does), and httpx logs request URLs, which for Telegram contain the bot token. So the httpx
loggers stay at WARNING, and every formatted line — message and traceback — has each
configured secret replaced by `***`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bot.config import Config

QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "aiosqlite", "apscheduler", "telegram", "discord")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RedactingFormatter(logging.Formatter):
    def __init__(self, secrets: set[str]):
        super().__init__(FORMAT)
        self.secrets = sorted((s for s in secrets if len(s) >= 6), key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=FORMAT)
    root_level = logging.getLogger().level
    for name in QUIET_LOGGERS:
        # httpx: its lines hold the Telegram token; apscheduler: "Running job …" every minute.
        chatty = name.startswith("http") or name == "apscheduler"
        logging.getLogger(name).setLevel(max(logging.WARNING if chatty else logging.INFO, root_level))


def log_to_file(path: Path) -> None:
    """Write log lines to `path` instead of the terminal (the console's chat stays clean)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(logging.FileHandler(path, encoding="utf-8"))


def config_secrets(config: Config) -> set[str]:
    """The core's secrets (the platforms' tokens are their settings' `secrets()`)."""
    return {config.llm.api_key} | ({config.storage.password} if config.storage.password else set())


def redact(secrets: set[str]) -> None:
    """Mask these secrets in everything the root logger's handlers write from now on."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(RedactingFormatter(secrets))
