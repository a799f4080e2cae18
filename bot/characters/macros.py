"""The curly-braced words of a card's text (Character Card V3's "curly braced syntaxes", and
SillyTavern's macros of the same names), filled in wherever the text is used: the prompt, the
greeting, the lorebook's entries and the keys that name someone.

- `{{char}}` is the character (the card's nickname, else its name), `{{user}}` the person
  speaking; so are the older cards' `<BOT>` (or `<CHAR>`) and `<USER>`, in any case, as the V3
  spec and SillyTavern read them;
- `{{// a note}}`, `{{comment: a note}}`, `{{hidden_key: a key}}` and `{{noop}}` are the card
  author's own notes: they stand for nothing (but a hidden key is read where a lorebook scans
  an entry's text, as the V3 spec asks);
- `{{random:a,b,c}}` (or SillyTavern's `{{random::a::b::c}}`; `\\,` is a comma) is one of its
  choices, chosen anew each time; `{{pick:…}}` is one of them too, but the same one each time
  the same text is filled (the spec asks that of it);
- `{{roll:6}}`, `{{roll:d6}}`, `{{roll:2d6}}` or `{{roll:1d20+5}}`: the dice thrown, plus or
  minus what follows them (at most 100 dice of up to 1,000,000 sides);
- `{{reverse:text}}` is the text backwards, `{{newline}}` a line break, `{{trim}}` nothing, with
  the line breaks around it;
- with the time it is where the person is (`when`), SillyTavern's `{{time}}` ("3:04 PM"),
  `{{date}}` ("December 7, 2026"), `{{weekday}}` ("Monday"), `{{isotime}}` ("15:04") and
  `{{isodate}}` ("2026-12-07"); without it (a lorebook's scan) they are left as written.

Any other word in braces is left as written (`{{original}}` in a card's notes is cards.py's).
Names are filled in first, so a choice may name someone (`{{random:{{char}},the keeper}}`).
"""

from __future__ import annotations

import random
import re
import zlib
from datetime import datetime

_NAMES = re.compile(r"\{\{\s*(char|user)\s*\}\}|<(user|bot|char)>", re.IGNORECASE)
USER = re.compile(r"\{\{\s*user\s*\}\}|<user>", re.IGNORECASE)
CHAR = re.compile(r"\{\{\s*char\s*\}\}|<(?:bot|char)>", re.IGNORECASE)
_NOTE = re.compile(r"\{\{\s*(?://|comment\s*:).*?\}\}|\{\{\s*noop\s*\}\}", re.IGNORECASE | re.DOTALL)
_HIDDEN_KEY = re.compile(r"\{\{\s*hidden_key\s*:(.*?)\}\}", re.IGNORECASE | re.DOTALL)
_CHOICE = re.compile(r"\{\{\s*(random|pick)\s*:(.*?)\}\}", re.IGNORECASE | re.DOTALL)
_ROLL = re.compile(r"\{\{\s*roll\s*:\s*(?:(\d*)\s*d)?\s*(\d+)\s*(?:([+-])\s*(\d+))?\s*\}\}", re.IGNORECASE)
_REVERSE = re.compile(r"\{\{\s*reverse\s*:(.*?)\}\}", re.IGNORECASE | re.DOTALL)
_NEWLINE = re.compile(r"\{\{\s*newline\s*\}\}", re.IGNORECASE)
_TRIM = re.compile(r"(?:\r?\n)*\{\{\s*trim\s*\}\}(?:\r?\n)*", re.IGNORECASE)
_TIME = re.compile(r"\{\{\s*(time|date|weekday|isotime|isodate)\s*\}\}", re.IGNORECASE)
_COMMA = re.compile(r"(?<!\\),")
MAX_DICE, MAX_SIDES = 100, 1_000_000
_chance = random.Random()  # for {{random}} and {{roll}}


def filled(text: str, char: str, user: str, when: datetime | None = None, hidden_keys: bool = False) -> str:
    """A card's text as it is used: every word in braces this module knows, filled in; the time
    words with `when`, and with `hidden_keys` a hidden key's words kept (a lorebook's scan)."""
    if "{{" not in text and "<" not in text:
        return text
    text = _NAMES.sub(lambda m: user if (m.group(1) or m.group(2)).lower() == "user" else char, text)
    if "{{" not in text:
        return text
    text = _NOTE.sub("", text)
    text = _HIDDEN_KEY.sub(lambda m: m.group(1).strip() if hidden_keys else "", text)
    if when is not None:
        text = _TIME.sub(lambda m: _told(when, m.group(1).lower()), text)
    text = _CHOICE.sub(_chosen, text)
    text = _ROLL.sub(_rolled, text)
    text = _REVERSE.sub(lambda m: m.group(1)[::-1], text)
    text = _TRIM.sub("", text)
    return _NEWLINE.sub("\n", text)


def _told(when: datetime, word: str) -> str:
    """A time word as SillyTavern writes it (moment.js's English `LT`, `LL`, `dddd`)."""
    if word == "time":
        return f"{when.hour % 12 or 12}:{when:%M} {'AM' if when.hour < 12 else 'PM'}"
    if word == "date":
        return f"{when:%B} {when.day}, {when.year}"
    return {"weekday": f"{when:%A}", "isotime": f"{when:%H:%M}", "isodate": f"{when:%Y-%m-%d}"}[word]


def _chosen(found: re.Match) -> str:
    written = found.group(2)
    if written.startswith(":"):  # SillyTavern's {{random::a::b}}
        choices = written[1:].split("::")
    else:
        choices = [choice.replace("\\,", ",") for choice in _COMMA.split(written)]
    if found.group(1).lower() == "pick":  # the same text, the same choice
        return choices[zlib.crc32(found.group(0).encode()) % len(choices)]
    return _chance.choice(choices)


def _rolled(found: re.Match) -> str:
    dice, sides = min(int(found.group(1) or 1), MAX_DICE), min(int(found.group(2)), MAX_SIDES)
    if sides < 1:
        return found.group(0)
    plus = int(found.group(4) or 0) * (-1 if found.group(3) == "-" else 1)
    return str(sum(_chance.randint(1, sides) for _ in range(max(dice, 1))) + plus)
