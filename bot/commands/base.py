"""What every /memory command module shares: who asks, bad-input errors, buttons, parsing
(typed command options, and button data parsed fail-closed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from bot.buttons import encode_action
from bot.contract import Button, CommandResult
from bot.memory.saved_memories import already_text, cap_text, memory_number
from bot.model.tokens import TokenCounter
from bot.text import parse_number
from storage.ports import SCOPES, AlreadySaved, CapReached, MemoryRow, Memories


@dataclass(frozen=True)
class Person:
    id: int
    character_id: int
    character_name: str
    named: bool = False  # the command named the character it acts on (`character:Aki`)


class UsageError(Exception):
    """Bad input: the message says what was wrong and what is expected."""


class Missing(UsageError):
    """The memory or reminder named is not the person's, or not there: the same answer either way
    (no leak). The memory page answers it with 404."""


def no_memory(memory_id: int) -> Missing:
    return Missing(f"There is no memory #{memory_id}.")


def button(person: Person, label: str, verb: str, *args: Any, danger: bool = False) -> Button:
    """A button that only `person` can press."""
    return Button(label, encode_action(person.id, verb, *args, character_id=person.character_id), danger=danger)


def plural(n: int, one: str, many: str) -> str:
    """`1 message`, `3 messages`."""
    return f"{n:,} {one if n == 1 else many}"


def memories_word(n: int, kind: str = "") -> str:
    """`1 pinned memory`, `3 pinned memories`."""
    return plural(n, f"{kind} memory".strip(), f"{kind} memories".strip())


def parse_memory_id(value: Any) -> int:
    """A memory number as the person wrote it (`12`, `#12`): ASCII digits within range."""
    text = str(value if value is not None else "").strip()
    if not text:
        raise UsageError("Which memory? Give its number, as /memory view shows it after the #.")
    number = memory_number(value)
    if number is None:
        raise UsageError(f"“{text[:40]}” is not a memory number. Use the number /memory view shows after the #.")
    return number


def parse_bool(value: Any, name: str, words: str = "on or off") -> bool:
    """yes/no, on/off, true/false (any of them, whichever `words` the message shows)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "yes", "true", "1"):
        return True
    if text in ("off", "no", "false", "0"):
        return False
    raise UsageError(f"{name} must be {words}, not “{str(value)[:40]}”.")


def parse_count(value: Any, name: str, low: int, high: int) -> int:
    number = parse_number(value, low, high)
    if number is None:
        raise UsageError(f"{name} must be a number from {low} to {high}, not “{str(value).strip()[:40]}”.")
    return number


# -- button data, parsed fail-closed ------------------------------------------------------------
# A button's data comes back from the platform, where anyone can forge it. Each verb names the
# kinds of its arguments; data that does not parse as exactly those is "no longer works".
def number_arg(arg: str) -> int:
    number = parse_number(arg)
    if number is None:
        raise ValueError(arg)
    return number


def scope_arg(arg: str) -> str:
    if arg not in SCOPES:
        raise ValueError(arg)
    return arg


def scope_or_all_arg(arg: str) -> str | None:
    """A scope, or `all` (both scopes: None)."""
    return None if arg == "all" else scope_arg(arg)


def number_or_all_arg(arg: str) -> int | None:
    """A number, or `all` (None)."""
    return None if arg == "all" else number_arg(arg)


class Press:
    """What a button's verb runs, and the kinds of its arguments."""

    def __init__(self, handler: Callable[..., Awaitable[CommandResult]], *args: Callable[[str], Any]):
        self.handler = handler
        self.args = args

    def parse(self, raw: tuple[str, ...]) -> list[Any] | None:
        """The typed arguments, or None when the data is not what this verb's buttons carry."""
        if len(raw) != len(self.args):
            return None
        try:
            return [parse(arg) for parse, arg in zip(self.args, raw)]
        except ValueError:
            return None


async def save_memory(memories: Memories, counter: TokenCounter, person: Person, scope: str, content: str, *,
                      pinned: bool, source: str, written_in: int | None = None) -> MemoryRow:
    """Add a memory for the person (`written_in`: the chat the command was given in), or raise a
    UsageError saying its budget is full."""
    try:
        return await memories.add_memory(person.id, person.character_id, scope, content, counter.count(content),
                                               pinned=pinned, source=source, written_in=written_in)
    except AlreadySaved as same:
        raise UsageError(already_text(same.memory, pin=pinned)) from None
    except CapReached as full:
        raise UsageError(cap_text(full)) from None
