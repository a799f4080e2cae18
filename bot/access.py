"""Who may talk to a character (SPEC section 13, `[access]`).

A rule is `kind:id`: `telegram:<user>`, `discord:<user>`, `discord-role:<role>`,
`discord-channel:<channel>` (a thread counts as its parent channel too) or `telegram-chat:<chat>`.
An empty allow list lets everyone in; a deny rule always wins. `[access]` applies to every
character and a character's own `access` table to that character: someone must pass both.

The adapter describes who writes and where (`Asker`, from the platform event) before anything
of theirs is stored; someone not let in gets one short line in a DM (`NOT_ALLOWED`) and silence
in a shared chat.
"""

from __future__ import annotations

from dataclasses import dataclass

RULE_KINDS = ("telegram", "discord", "discord-role", "discord-channel", "telegram-chat")
NOT_ALLOWED = "Sorry, I'm not able to talk with you here."


@dataclass(frozen=True)
class Asker:
    """Who writes, and where, as the platform event says. `user_id` is None for nobody in
    particular (a chat or channel writing, a bot)."""

    platform: str  # "telegram" or "discord" (the console is its owner's: always let in)
    user_id: str | None
    places: tuple[str, ...] = ()  # the chat; or the channel, and a thread's parent channel
    roles: tuple[str, ...] = ()  # Discord roles in the guild

    def marks(self) -> frozenset[str]:
        """The rules that name this asker."""
        place_kind = {"telegram": "telegram-chat", "discord": "discord-channel"}.get(self.platform, "")
        marks = {f"{place_kind}:{place}" for place in self.places}
        marks |= {f"discord-role:{role}" for role in self.roles}
        if self.user_id is not None:
            marks.add(f"{self.platform}:{self.user_id}")
        return frozenset(marks)


@dataclass(frozen=True)
class AccessRules:
    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()

    def lets_in(self, asker: Asker) -> bool:
        marks = asker.marks()
        if marks & self.deny:
            return False
        return not self.allow or bool(marks & self.allow)


def rule_problem(rule: object) -> str | None:
    """Why a config entry is not a rule (None when it is one)."""
    if not isinstance(rule, str) or ":" not in rule:
        return "expected entries like \"telegram:1001\" or \"discord-role:456\""
    kind, _, number = rule.partition(":")
    if kind not in RULE_KINDS:
        return f"{kind!r} is not one of " + ", ".join(RULE_KINDS)
    if not number.removeprefix("-").isdigit() or not number.isascii():
        return f"{rule!r}: the part after {kind}: should be a numeric id"
    return None
