"""Who may talk to a character (SPEC section 13, `[access]`).

A rule is `kind:id`: `telegram:<user>`, `discord:<user>`, `discord-role:<role>`,
`discord-channel:<channel>` (a thread counts as its parent channel too) or `telegram-chat:<chat>`.
An empty allow list lets everyone in; a deny rule always wins. `[access]` applies to every
character and a character's own `access` table to that character: someone must pass both.

The adapter describes who writes and where (`Asker`, from the platform event) before anything
of theirs is stored — for messages, commands, buttons and "Remember this" alike; someone not
let in gets one short line in a DM (`NOT_ALLOWED`) and silence in a shared chat. A
`discord-role:` rule also applies in DMs, through the person's roles in the servers the bot
shares with them; a `telegram-chat:` rule also matches the chat a message is sent as
(`sender_chat`: a channel posting into a group).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.contract import PLATFORM_TRAITS, Asker, traits_of


def rule_kinds() -> tuple[str, ...]:
    """A user on each chat platform, then the roles and places the platforms' traits name."""
    return (*(name for name, traits in PLATFORM_TRAITS.items() if traits.chat),
            *(kind for traits in PLATFORM_TRAITS.values() for kind in (traits.role_rule, traits.place_rule) if kind))


def marks_of(asker: Asker) -> frozenset[str]:
    """The rules that name this asker."""
    traits = traits_of(asker.platform)
    marks = {f"{traits.place_rule}:{place}" for place in asker.places} if traits.place_rule else set()
    marks |= {f"{traits.role_rule}:{role}" for role in asker.roles} if traits.role_rule else set()
    if asker.user_id is not None:
        marks.add(f"{asker.platform}:{asker.user_id}")
    return frozenset(marks)


@dataclass(frozen=True)
class AccessRules:
    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()

    @property
    def names_roles(self) -> bool:
        """Whether a rule names a Discord role (then a DM's author's roles must be looked up)."""
        return any(rule.startswith("discord-role:") for rule in self.allow | self.deny)

    def lets_in(self, asker: Asker) -> bool:
        marks = marks_of(asker)
        if marks & self.deny:
            return False
        return not self.allow or bool(marks & self.allow)


def rule_problem(rule: object) -> str | None:
    """Why a config entry is not a rule (None when it is one)."""
    if not isinstance(rule, str) or ":" not in rule:
        return "expected entries like \"telegram:1001\" or \"discord-role:456\""
    kind, _, number = rule.partition(":")
    if kind not in (kinds := rule_kinds()):
        return f"{kind!r} is not one of " + ", ".join(kinds)
    if not number.removeprefix("-").isdigit() or not number.isascii():
        return f"{rule!r}: the part after {kind}: should be a numeric id"
    return None
