"""What every /memory command module shares: who asks, bad-input errors, buttons, parsing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.actions import encode_action
from bot.models import Button, ConversationKey, Identity


@dataclass(frozen=True)
class CommandContext:
    """Who asks, and where: taken from the platform event, never from model output."""

    conversation: ConversationKey
    identity: Identity
    display_name: str
    is_shared: bool = False


@dataclass(frozen=True)
class Person:
    id: int
    character_id: int
    character_name: str


class UsageError(Exception):
    """Bad input: the message says what was wrong and what is expected."""


def button(person: Person, label: str, verb: str, *args: Any, danger: bool = False) -> Button:
    """A button that only `person` can press."""
    return Button(label, encode_action(person.id, verb, *args), danger=danger)


def memories_word(n: int, kind: str = "") -> str:
    """`1 pinned memory`, `3 pinned memories`."""
    return f"{n} {kind + ' ' if kind else ''}{'memory' if n == 1 else 'memories'}"


def parse_memory_id(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    text = str(value or "").strip()
    if not text:
        raise UsageError("Which memory? Give its number, e.g. `12` for #12 (see /memory view).")
    digits = text.lstrip("#")
    if not digits.isdigit() or int(digits) <= 0:
        raise UsageError(f"“{text[:40]}” is not a memory number. Use the number shown as #12 in /memory view.")
    return int(digits)


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "yes", "true", "1"):
        return True
    if text in ("off", "no", "false", "0"):
        return False
    raise UsageError(f"{name} must be on or off, not “{str(value)[:40]}”.")


def parse_count(value: Any, name: str, low: int, high: int) -> int:
    text = str(value).strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise UsageError(f"{name} must be a number from {low} to {high}, not “{text[:40]}”.")
    return int(text)
