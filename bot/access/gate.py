"""The gate (SPEC 13, 15 "Rules follow the character that answers"): the one place that decides
`[access]` and `[limits]` for the character that will answer, whatever path a turn or a model
call starts from — a message, a name, a reply to a webhook voice, a chain turn, a command or a
button naming a character, a check-in. Adapters describe who asks (`Asker`, from the platform
event) and translate the verdict into platform words; they never decide themselves.

- `lets_in(character, asker)`: both `[access]` and the character's own `access` must let the
  asker in. The console (`asker` None or platform "console") is its owner's: always let in.
- `take(person_id, key)`: one model call from `[limits] turns_per_minute`, counted in the
  database (bot/access/limits.py). A chain turn is taken from the person whose message started the
  chain; a check-in, the character's own message, takes nothing (SPEC 14), but waits while the
  person is `past` their allowance.
"""

from __future__ import annotations

import logging

from bot.access.limits import CallLimits
from bot.access.rules import AccessRules
from bot.contract import Asker, ConversationKey
from storage.ports import CallLimit, Store

log = logging.getLogger(__name__)


class Gate:
    def __init__(self, store: Store, access: AccessRules, character_access: dict[str, AccessRules],
                 limits: CallLimits):
        self.store = store
        self.access = access
        self.character_access = {name.casefold(): rules for name, rules in character_access.items()}
        self.limits = limits

    # -- [access] ----------------------------------------------------------------------------
    def _rules(self, character: str) -> tuple[AccessRules, ...]:
        return self.access, self.character_access.get(character.casefold(), AccessRules())

    def lets_in(self, character: str, asker: Asker | None, quiet: bool = False) -> bool:
        """Whether `asker` may reach `character` (SPEC 13): both rule sets must let them in. A
        refusal is logged unless `quiet` (a scene only choosing among characters)."""
        if asker is None or asker.platform == "console":
            return True
        allowed = all(rules.lets_in(asker) for rules in self._rules(character))
        if not allowed and not quiet:
            log.info("%s: %s:%s in %s is not let in by [access]; nothing of theirs is stored",
                     character, asker.platform, asker.user_id or "(a chat)", ", ".join(asker.places) or "-")
        return allowed

    def names_roles(self, character: str | None = None) -> bool:
        """Whether a rule for `character` (None: for any character) names a Discord role, so a
        DM's author's roles must be looked up first."""
        rule_sets = self._rules(character) if character is not None else (self.access, *self.character_access.values())
        return any(rules.names_roles for rules in rule_sets)

    # -- [limits] ----------------------------------------------------------------------------
    @property
    def per_minute(self) -> int | None:
        return self.limits.per_minute

    def limit_for(self, person_id: int | None, key: ConversationKey) -> CallLimit | None:
        """The allowance a message's model call is taken from, as it is stored (atomically)."""
        return self.limits.limit_for(person_id, key)

    async def take(self, person_id: int | None, key: ConversationKey) -> int | None:
        """Take a model call on this person's behalf: None when taken, else seconds to wait."""
        return await self.limits.take(person_id, key)

    async def past(self, person_id: int | None, key: ConversationKey) -> bool:
        """Whether this person has no model call left now (a check-in asks, and takes none)."""
        limit = self.limits.limit_for(person_id, key)
        return limit is not None and await self.store.coordination.past_limit(limit)

