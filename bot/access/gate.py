"""The gate (SPEC 13, 15 "Rules follow the character that answers"): the one place that decides
`[access]` and `[limits]` for the character that will answer, whatever path a turn or a model
call starts from — a message, a name, a reply to a webhook voice, a chain turn, a command or a
button naming a character, a check-in. Adapters describe who asks (`Asker`, from the platform
event) and translate the verdict into platform words; they never decide themselves.

`admit(path, character, asker, person_id, key)` is the one verdict, asked once by each path as a
stage: an `Admission` (let in, or the line saying why not). A `Path` says which rules it asks,
in this order:
- `[access]`: both `[access]` and the character's own `access` must let the asker in. The console
  (platform "console") is its owner's: always let in. No asker (a reply regenerated or a chain
  with nobody known behind it) is let in nowhere. (`lets_in` alone is what an adapter asks before
  it stores anything of an event.)
- the age rule: an age-restricted character (SPEC 17) answers only where the asker writes in an
  age-restricted place (as the adapter describes it); elsewhere, one line saying why and no model
  call.
- the allowance, `[limits] tokens_per_day` (bot/access/budgets.py, SPEC 17).
- one of the day's pictures, `[pictures] per_day` (SPEC 20), counted with its `tokens_each` as it
  is let in (a picture not drawn after all is given back: `give_back_picture`).
- one model call taken from `[limits] turns_per_minute`, counted in the database
  (bot/access/limits.py). A chain turn is taken from the person whose message started the chain;
  a message takes its call in the transaction that stores it (`limit_for`); a check-in, the
  character's own message, takes nothing (SPEC 14), but waits while the person is `past` their
  allowance.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from bot.access.budgets import Budgets
from bot.access.limits import TOO_FAST, TOO_FAST_FOR_CALLS, CallLimits
from bot.access.rules import AccessRules
from bot.contract import NOT_ALLOWED, Asker, ConversationKey, traits_of
from storage.ports import CallLimit, Coordination, Spend, Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Path:
    """A way a person reaches a character, and which of the gate's rules it asks."""

    name: str
    age: bool = True  # the age rule (SPEC 17)
    allowance: bool = False  # [limits] tokens_per_day
    takes_call: bool = False  # takes a model call from [limits] turns_per_minute
    quiet: bool = False  # a refusal is not logged (a scene only choosing among characters)
    kept: bool = False  # the person's message is kept all the same (the rate line says so)
    draws: bool = False  # takes one of the day's pictures ([pictures] per_day, SPEC 20)
    mid_turn: bool = False  # a call within a running turn: with nobody known any more, the allowance only


MESSAGE = Path("message")  # its model call is taken as it is stored; a Regenerate asks as a message too
COMMAND = Path("command", age=False)  # a command or a button acting on a character
CHOOSING = Path("choosing", quiet=True)  # a scene choosing who answers
PAGE = Path("page", age=False, quiet=True)  # a memory page: the characters it shows (SPEC 21)
LETTER = Path("letter")  # the character writing first (a check-in, a reminder)
MODEL_CALL = Path("model call", allowance=True, takes_call=True)  # a Regenerate's, a draft's, a rebuild's, a chain's
HEARING = Path("hearing", allowance=True, takes_call=True, kept=True)  # a voice note transcribed
TOOL = Path("tool", allowance=True, quiet=True, mid_turn=True)  # each tool call of a running turn (SPEC 18)
PICTURE = Path("picture", allowance=True, quiet=True, draws=True, mid_turn=True)  # a picture: one of the day's too
NO_MORE_PICTURES = "no picture: {per_day} a day is the most"


@dataclass(frozen=True)
class PictureQuota:
    """[pictures] per_day, and the tokens each picture counts against the allowance (SPEC 20)."""

    per_day: int
    tokens_each: int


@dataclass(frozen=True)
class Admission:
    """The gate's verdict for one path: let in, or `refusal`, the line a person reads. `kept_out`:
    `[access]` said no (nothing of theirs is stored; in a shared chat, silence)."""

    refusal: str | None = None
    kept_out: bool = False

    @property
    def admitted(self) -> bool:
        return self.refusal is None


class Gate:
    def __init__(self, coordination: Coordination, usage: Usage, access: AccessRules,
                 character_access: dict[str, AccessRules], limits: CallLimits, budgets: Budgets,
                 age_restricted: frozenset[str] = frozenset(), pictures: PictureQuota | None = None):
        self.coordination = coordination
        self.usage = usage
        self.access = access
        self.character_access = {name.casefold(): rules for name, rules in character_access.items()}
        self.limits = limits
        self.budgets = budgets
        self.age_restricted = frozenset(name.casefold() for name in age_restricted)
        self.pictures = pictures  # None: no pictures ([pictures] is not set up)

    # -- [access] ----------------------------------------------------------------------------
    def _rules(self, character: str) -> tuple[AccessRules, ...]:
        return self.access, self.character_access.get(character.casefold(), AccessRules())

    async def admit(self, path: Path, character: str, asker: Asker | None, person_id: int | None = None,
                    key: ConversationKey | None = None, character_id: int | None = None) -> Admission:
        """The one verdict for `path`: its rules asked in order, the first that says no says why.
        A tool call of a message answered again after a crash has no asker any more: it was let in
        as it came, and only the allowance is asked again."""
        if not (path.mid_turn and asker is None):
            if not self.lets_in(character, asker, path.quiet):
                return Admission(NOT_ALLOWED, kept_out=True)
            if path.age and (refusal := self._age_refusal(character, asker)):
                return Admission(refusal)
        if path.allowance and await self.budgets.past(person_id):
            return Admission(self.budgets.refusal())
        if path.draws:
            assert person_id is not None and character_id is not None, "a picture is someone's, by a character"
            quota = self.pictures
            if quota is None or not await self.usage.take_picture(
                    person_id, character_id, self.budgets.today(), quota.per_day, quota.tokens_each):
                return Admission(NO_MORE_PICTURES.format(per_day=quota.per_day if quota else 0))
        if path.takes_call:
            assert key is not None, "a path that takes a model call names the conversation"
            if (wait := await self.take(person_id, key)) is not None:
                return Admission((TOO_FAST if path.kept else TOO_FAST_FOR_CALLS).format(limit=self.per_minute,
                                                                                        seconds=wait))
        return Admission()

    def lets_in(self, character: str, asker: Asker | None, quiet: bool = False) -> bool:
        """Whether `asker` may reach `character` (SPEC 13): both rule sets must let them in. A
        refusal is logged unless `quiet` (a scene only choosing among characters)."""
        if asker is None:
            if not quiet:
                log.info("%s: a call with nobody known to ask for it is not let in", character)
            return False
        if traits_of(asker.platform).owned:  # the console: its owner's
            return True
        allowed = all(rules.lets_in(asker) for rules in self._rules(character))
        if not allowed and not quiet:
            log.info("%s: %s:%s in %s is not let in by [access]; nothing of theirs is stored",
                     character, asker.platform, asker.user_id or "(a chat)", ", ".join(asker.places) or "-")
        return allowed

    def denies(self, character: str, identities: Sequence[tuple[str, str]]) -> bool:
        """Whether `[access]` now names any of a person's accounts ((platform, user id)) in a deny
        rule for `character`: what a memory page asks on every request (SPEC 21 "Rules asked
        again"), where no platform event tells the person's places and roles."""
        named = {f"{platform}:{user_id}" for platform, user_id in identities}
        return any(named & rules.deny for rules in self._rules(character))

    def _age_refusal(self, character: str, asker: Asker | None) -> str | None:
        """Why an age-restricted character does not answer there (SPEC 17); None: it may."""
        if character.casefold() not in self.age_restricted:
            return None
        if asker is not None and (traits_of(asker.platform).owned or asker.age_restricted):
            return None
        traits = traits_of(asker.platform if asker is not None else "")  # SPEC 17: one line, in its words
        line = traits.age_line_private if asker is not None and asker.private and traits.age_line_private else \
            traits.age_line
        return line.format(name=character)

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

    async def tool_refusal(self, path: Path, person_id: int | None, character: str, character_id: int,
                           asker: Asker | None) -> str | None:
        """The toolbox's question (SPEC 18 "One toolbox, one gate"), asked at every tool call: the
        verdict of the path the tool asks (TOOL; a picture's, PICTURE). (The turn's own model calls
        were taken as it started.)"""
        return (await self.admit(path, character, asker, person_id, character_id=character_id)).refusal

    async def give_back_picture(self, person_id: int, character_id: int) -> None:
        """A picture PICTURE let in was never drawn: neither it nor its tokens count (SPEC 20)."""
        assert self.pictures is not None, "only a picture let in is given back"
        await self.usage.give_back_picture(person_id, character_id, self.budgets.today(),
                                                 self.pictures.tokens_each)

    async def hold(self, person_id: int | None, turn_id: int, tokens: int) -> bool:
        """Whether a turn for this person may start now, its `tokens` held against their
        allowance while it runs (bot/access/budgets.py)."""
        return await self.budgets.hold(person_id, turn_id, tokens)

    async def past_allowance(self, person_id: int | None) -> bool:
        """Whether the person has spent today's tokens (nobody in particular has no allowance)."""
        return await self.budgets.past(person_id)

    async def allowance_notice(self, person_id: int | None) -> str | None:
        """The line for a person past today's tokens: the first time today only (any process)."""
        if person_id is not None and await self.budgets.first_notice_today(person_id):
            return self.budgets.refusal()
        return None

    async def spend(self, person_id: int | None, character_id: int, tokens_in: int, tokens_out: int,
                    turns: int = 1) -> None:
        """What a model call made for this person cost, on their allowance (SPEC 17); `turns`: how
        many turns it counts as (a tool round after a turn's first counts none)."""
        await self.budgets.charge(self.cost(person_id, character_id, tokens_in, tokens_out, turns))

    def cost(self, person_id: int | None, character_id: int, tokens_in: int, tokens_out: int,
             turns: int = 1) -> Spend | None:
        """What `spend` writes, not yet written: a turn's last model call is added to the
        person's day with the turn's end, in its transaction (`Turns.finish_turn`, `fail_turn`)."""
        return self.budgets.cost(person_id, character_id, tokens_in, tokens_out, turns)

    async def charge(self, spend: Spend | None) -> None:
        """Write what `cost` gave on the person's allowance."""
        await self.budgets.charge(spend)

    async def take(self, person_id: int | None, key: ConversationKey) -> int | None:
        """Take a model call on this person's behalf: None when taken, else seconds to wait."""
        return await self.limits.take(person_id, key)

    async def past(self, person_id: int | None, key: ConversationKey) -> bool:
        """Whether this person has no model call left now (a check-in asks, and takes none)."""
        limit = self.limits.limit_for(person_id, key)
        return limit is not None and await self.coordination.past_limit(limit)

