"""Button actions: short strings that carry no secret and name the person they belong to.

`<person id>:<verb>[:<arg>...]` fits Telegram's 64-byte callback data. A press is honoured only
when the person pressing is the person the action names, so nobody can press another person's
buttons.
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


def encode_action(person_id: int, verb: str, *args: object) -> str:
    return ":".join([str(person_id), verb, *(str(a) for a in args)])


def decode_action(data: str) -> Action | None:
    """The action in a button's data, or None when it is not one (stale, forged, garbled)."""
    parts = (data or "").split(":")
    person_id = parse_number(parts[0]) if len(parts) >= 2 else None
    if person_id is None or not parts[1]:
        return None
    return Action(person_id, parts[1], tuple(parts[2:]))
