"""Button actions: short strings that carry no secret and name the person they belong to.

`<person id>[.<character id>]:<verb>[:<arg>...]` fits Telegram's 64-byte callback data. A press
is honoured only when the person pressing is the person the action names, so nobody can press
another person's buttons; it acts on the character named (in a scene, the one the command that
made the button acted on), else on the adapter's.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.text import parse_number

NOT_YOUR_BUTTON = "That button belongs to someone else."


@dataclass(frozen=True)
class Action:
    person_id: int
    verb: str
    args: tuple[str, ...] = ()
    character_id: int | None = None


def encode_action(person_id: int, verb: str, *args: object, character_id: int | None = None) -> str:
    owner = str(person_id) if character_id is None else f"{person_id}.{character_id}"
    return ":".join([owner, verb, *(str(a) for a in args)])


def decode_action(data: str) -> Action | None:
    """The action in a button's data, or None when it is not one (stale, forged, garbled)."""
    parts = (data or "").split(":")
    person, dot, character = parts[0].partition(".")
    person_id = parse_number(person) if len(parts) >= 2 else None
    character_id = parse_number(character) if dot else None
    if person_id is None or not parts[1] or (dot and character_id is None):
        return None
    return Action(person_id, parts[1], tuple(parts[2:]), character_id)
