"""The curly-braced words of a card's text (Character Card V3's "curly braced syntaxes", and
SillyTavern's macros of the same names), filled in wherever the text is used: the prompt, the
greeting, the lorebook's entries and the keys that name someone.

- `{{char}}` is the character (the card's nickname, else its name), `{{user}}` the person speaking;
- `{{// a note}}`, `{{comment: a note}}`, `{{hidden_key: a key}}` and `{{noop}}` are the card
  author's own notes: they stand for nothing;
- `{{random:a,b,c}}` (or SillyTavern's `{{random::a::b::c}}`; `\\,` is a comma) is one of its
  choices, chosen anew each time; `{{pick:…}}` is one of them too, but the same one each time
  the same text is filled (the spec asks that of it);
- `{{roll:6}}`, `{{roll:d6}}` or `{{roll:2d6}}`: the dice thrown (at most 100 of up to 1,000,000 sides);
- `{{reverse:text}}` is the text backwards, `{{newline}}` a line break.

Any other word in braces is left as written (`{{original}}` in a card's notes is cards.py's).
Names are filled in first, so a choice may name someone (`{{random:{{char}},the keeper}}`).
"""

from __future__ import annotations

import random
import re
import zlib

_NAMES = re.compile(r"\{\{\s*(char|user)\s*\}\}", re.IGNORECASE)
USER = re.compile(r"\{\{\s*user\s*\}\}", re.IGNORECASE)
CHAR = re.compile(r"\{\{\s*char\s*\}\}", re.IGNORECASE)
_NOTE = re.compile(r"\{\{\s*(?://|(?:comment|hidden_key)\s*:).*?\}\}|\{\{\s*noop\s*\}\}", re.IGNORECASE | re.DOTALL)
_CHOICE = re.compile(r"\{\{\s*(random|pick)\s*:(.*?)\}\}", re.IGNORECASE | re.DOTALL)
_ROLL = re.compile(r"\{\{\s*roll\s*:\s*(?:(\d*)\s*d)?\s*(\d+)\s*\}\}", re.IGNORECASE)
_REVERSE = re.compile(r"\{\{\s*reverse\s*:(.*?)\}\}", re.IGNORECASE | re.DOTALL)
_NEWLINE = re.compile(r"\{\{\s*newline\s*\}\}", re.IGNORECASE)
_COMMA = re.compile(r"(?<!\\),")
MAX_DICE, MAX_SIDES = 100, 1_000_000
_chance = random.Random()  # for {{random}} and {{roll}}


def filled(text: str, char: str, user: str) -> str:
    """A card's text as it is used: every word in braces this module knows, filled in."""
    if "{{" not in text:
        return text
    text = _NAMES.sub(lambda m: char if m.group(1).lower() == "char" else user, text)
    text = _NOTE.sub("", text)
    text = _CHOICE.sub(_chosen, text)
    text = _ROLL.sub(_rolled, text)
    text = _REVERSE.sub(lambda m: m.group(1)[::-1], text)
    return _NEWLINE.sub("\n", text)


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
    return str(sum(_chance.randint(1, sides) for _ in range(max(dice, 1))))
