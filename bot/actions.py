"""Button actions: short strings that carry no secret and name the person they belong to.

`<person id>:<verb>[:<arg>...]` fits Telegram's 64-byte callback data. A press is honoured only
when the person pressing is the person the action names, so nobody can press another person's
buttons.
"""

from __future__ import annotations

from dataclasses import dataclass


STALE_BUTTON = "That button is no longer valid."
NOT_YOUR_BUTTON = "That button belongs to someone else."


@dataclass(frozen=True)
class Action:
    person_id: int
    verb: str
    args: tuple[str, ...] = ()


def encode_action(person_id: int, verb: str, *args: object) -> str:
    return ":".join([str(person_id), verb, *(str(a) for a in args)])


def decode_action(data: str) -> Action | None:
    parts = (data or "").split(":")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1]:
        return None
    return Action(int(parts[0]), parts[1], tuple(parts[2:]))
