"""Lorebooks: a card's `character_book` (SPEC section 13), as SillyTavern users expect it.

An entry goes into the prompt when one of its `keys` appears in the recent messages — the new
message and the ones just before it, `scan_depth` in all (the book's, else 4) — as a whole word,
case-insensitive unless the entry is `case_sensitive` (`use_regex` entries match their keys as
regular expressions). A `selective` entry also needs one of its `secondary_keys`; a `constant`
entry is always in; a disabled one never. The entries that fire are kept by `priority` (lower
priority dropped first) within the lorebook budget — the book's `token_budget`, else 1,000
tokens, never more than 10 % of the context window — and placed by `insertion_order`, lowest
first. Entry text is the card author's, like the description: it goes in with the character's
instructions, not as anything a person said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

DEFAULT_SCAN_DEPTH = 4
DEFAULT_BUDGET_TOKENS = 1_000
MAX_CONTEXT_SHARE = 0.10


class LorebookError(ValueError):
    """A `character_book` that is not shaped like one; its text names the field."""


@dataclass(frozen=True)
class LoreEntry:
    name: str
    content: str
    keys: tuple[str, ...] = ()
    secondary_keys: tuple[str, ...] = ()
    selective: bool = False
    constant: bool = False
    case_sensitive: bool = False
    use_regex: bool = False
    insertion_order: int = 100
    priority: int = 10
    tokens: int = 0  # counted once, when the character is loaded

    def _matches(self, keys: tuple[str, ...], text: str) -> bool:
        flags = 0 if self.case_sensitive else re.IGNORECASE
        # (a regex key was checked when the card loaded: a broken one stops the card there)
        return any(re.search(key if self.use_regex else rf"(?<!\w){re.escape(key)}(?!\w)", text, flags)
                   for key in keys)

    def fires(self, text: str) -> bool:
        if self.constant:
            return True
        if not self._matches(self.keys, text):
            return False
        return not (self.selective and self.secondary_keys) or self._matches(self.secondary_keys, text)


@dataclass(frozen=True)
class Lorebook:
    entries: tuple[LoreEntry, ...] = ()
    scan_depth: int = DEFAULT_SCAN_DEPTH
    token_budget: int = DEFAULT_BUDGET_TOKENS

    def counted(self, count: Callable[[str], int]) -> "Lorebook":
        """The book with each entry's tokens counted (once, at load)."""
        return replace(self, entries=tuple(replace(e, tokens=count(e.content)) for e in self.entries))

    def budget(self, context_window: int) -> int:
        return min(self.token_budget, int(context_window * MAX_CONTEXT_SHARE))

    def entries_for(self, recent_texts: Iterable[str], context_window: int) -> list[LoreEntry]:
        """The entries the recent messages (newest first) call up, within the budget, in
        insertion order."""
        scanned = "\n".join(list(recent_texts)[: self.scan_depth])
        fired = [e for e in self.entries if e.fires(scanned)]
        kept, used, budget = [], 0, self.budget(context_window)
        for entry in sorted(fired, key=lambda e: (-e.priority, e.insertion_order)):
            if used + entry.tokens <= budget:
                kept.append(entry)
                used += entry.tokens
        return sorted(kept, key=lambda e: e.insertion_order)


def read_lorebook(book: Any) -> Lorebook:
    """A card's `character_book` (V2 or V3), or an empty book when the card has none."""
    if book is None:
        return Lorebook()
    if not isinstance(book, dict):
        raise LorebookError("'character_book' should be an object")
    entries = book.get("entries") or []
    if not isinstance(entries, list):
        raise LorebookError("'character_book.entries' should be a list")
    read = [_entry(raw, i) for i, raw in enumerate(entries)]
    return Lorebook(
        entries=tuple(e for e in read if e is not None),
        scan_depth=_whole(book, "scan_depth", DEFAULT_SCAN_DEPTH, "character_book", minimum=1),
        token_budget=_whole(book, "token_budget", DEFAULT_BUDGET_TOKENS, "character_book", minimum=1),
    )


def _entry(raw: Any, index: int) -> LoreEntry | None:
    where = f"character_book.entries[{index}]"
    if not isinstance(raw, dict):
        raise LorebookError(f"'{where}' should be an object")
    if raw.get("enabled", True) is False:
        return None
    content = raw.get("content") or ""
    if not isinstance(content, str):
        raise LorebookError(f"'{where}.content' should be text")
    if not content.strip():
        return None
    use_regex = bool(raw.get("use_regex") or (raw.get("extensions") or {}).get("use_regex"))
    keys, secondary = _keys(raw, "keys", where), _keys(raw, "secondary_keys", where)
    if use_regex:
        for key in keys + secondary:
            try:
                re.compile(key)
            except re.error as problem:
                raise LorebookError(f"'{where}' key {key!r} is not a valid regular expression ({problem})") from None
    return LoreEntry(
        name=str(raw.get("name") or raw.get("comment") or (keys[0] if keys else f"entry {index + 1}")),
        content=content.strip(),
        keys=keys,
        secondary_keys=secondary,
        selective=bool(raw.get("selective")),
        constant=bool(raw.get("constant")),
        case_sensitive=bool(raw.get("case_sensitive")),
        use_regex=use_regex,
        insertion_order=_whole(raw, "insertion_order", 100, where),
        priority=_whole(raw, "priority", 10, where),
    )


def _keys(raw: dict, field: str, where: str) -> tuple[str, ...]:
    value = raw.get(field) or []
    if isinstance(value, str):  # some editors write one key as a comma-separated text
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise LorebookError(f"'{where}.{field}' should be a list of texts")
    return tuple(k.strip() for k in value if k.strip())


def _whole(raw: dict, field: str, default: int, where: str, minimum: int | None = None) -> int:
    value = raw.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise LorebookError(f"'{where}.{field}' should be a whole number")
    if minimum is not None and value < minimum:
        return default
    return int(value)
