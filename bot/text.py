"""What people type, made safe to store and to read as numbers.

- `clean_text`: a lone surrogate ("hi \\ud800 there" can arrive through a platform library) cannot
  be encoded as UTF-8 and would make storing fail; it becomes U+FFFD. NUL characters go too.
- `parse_number`: ASCII digits only, within range. `isdigit()` accepts "²" and "١٢", and a
  30-digit number overflows the database's integers: each is "not a number" here.
- `CHAIN_ENDED`: the words logged wherever a scene's chain stops because a person wrote (the
  scene after a reply, the turn handler before a queued chain turn).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

MAX_NUMBER = 2**53 - 1  # every id and count fits, in SQLite, PostgreSQL and JSON alike
_DIGITS = re.compile(r"[0-9]{1,16}")

CHAIN_ENDED = "a person wrote since; the chain ends"  # logged wherever a scene's chain stops (SPEC 15)


def clean_text(text: str) -> str:
    cleaned = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return cleaned.replace("\x00", "")


def length_problem(text: str | None, limit: int, *, empty: str, what: str) -> str | None:
    """Why a person's text is refused, in words they understand: `empty` when there is none;
    too long past `limit` characters ("That memory is 501 characters long; …")."""
    text = (text or "").strip()
    if not text:
        return empty
    if len(text) > limit:
        return f"{what} is {len(text):,} characters long; it can be at most {limit:,} characters. Please shorten it."
    return None


def listed(items: list[str]) -> str:
    """["a", "b", "c"] → "a, b and c"; one item alone; none: ""."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def parse_number(value: Any, low: int = 1, high: int = MAX_NUMBER) -> int | None:
    """`value` as an int in [low, high] if it is one (an int, or ASCII digits); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        return None
    return number if low <= number <= high else None


SENTENCE_END = re.compile(r"[.!?…][\"'”’»)\]*_]*(?=\s|$)")


def ended_at_a_sentence(text: str) -> str:
    """A reply the server cut at its length limit, as the person reads it: up to its last whole
    sentence when that keeps most of it, else what there is with "…" — never a fragment passed
    off as whole (#68: "…Mira,\nI")."""
    ends = [found.end() for found in SENTENCE_END.finditer(text)]
    if ends and ends[-1] >= len(text) // 2:
        return text[: ends[-1]]
    return text.rstrip(" ,;:-—") + "…"


def opening(text: str, chars: int = 60) -> str:
    """A text's start on one line, as a list shows it: its lines run together, at most `chars`
    of it, and "…" where it goes on."""
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[:chars].rstrip() + "…"


def local_words(moment: float, zone: str) -> str:
    """`Tuesday 16 January 2027, 09:00 (Europe/Paris)`: a moment as the person reads it."""
    local = datetime.fromtimestamp(moment, ZoneInfo(zone))
    return f"{local:%A} {local.day} {local:%B %Y, %H:%M} ({zone})"
