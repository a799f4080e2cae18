"""Button actions: short strings that carry no secret and name the person they belong to.

`<person id>[.<character id>]:<verb>[:<arg>...]` fits Telegram's 64-byte callback data. A press
is honoured only when the person pressing is the person the action names, so nobody can press
another person's buttons; it acts on the character named (in a scene, the one the command that
made the button acted on), else on the adapter's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.text import parse_number

NOT_YOUR_BUTTON = "That button belongs to someone else."

# owner, verb, then each argument after a colon; an argument holds no colon
_DATA = re.compile(r"(?P<person>[^.:]*)(?:\.(?P<character>[^:]*))?:(?P<verb>[^:]+)(?P<args>(?::[^:]*)*)")
_ARG = re.compile(r":([^:]*)")


@dataclass(frozen=True)
class Action:
    """What a button does, for whom: written into button data by `encode_action` and read back
    by `decode_action`, the one place that reads it."""

    person_id: int
    verb: str
    args: tuple[str, ...] = ()
    character_id: int | None = None


def encode_action(person_id: int, verb: str, *args: object, character_id: int | None = None) -> str:
    owner = str(person_id) if character_id is None else f"{person_id}.{character_id}"
    return "".join([owner, ":", verb, *(f":{a}" for a in args)])


def decode_action(data: str) -> Action | None:
    """The action in a button's data, or None when it is not one (stale, forged, garbled)."""
    found = _DATA.fullmatch(data or "")
    if found is None:
        return None
    person_id = parse_number(found["person"])
    character_id = parse_number(found["character"]) if found["character"] is not None else None
    if person_id is None or (found["character"] is not None and character_id is None):
        return None
    return Action(person_id, found["verb"], tuple(_ARG.findall(found["args"])), character_id)
