"""`/link` and `/forgetme` (SPEC section 6): one person across Discord and Telegram, and
everything about a person deleted on request.

/link: a one-time code (10 minutes) made on one platform and entered on the other; before
anything merges the person entering it sees what will happen and confirms with a button; a code
works once; 5 wrong codes in 10 minutes pause /link for that person.
"""

from __future__ import annotations

import re
import secrets
from typing import Callable

from bot.commands.base import Person, Press, UsageError, button, memories_word
from bot.contract import NOTHING_FORGOTTEN, CommandContext, CommandResult, chat_platforms, traits_of
from bot.memory.rebuild import Rebuilds
from bot.memory.saved_memories import MAX_PINNED_PER_SCOPE, MAX_UNPINNED_PER_SCOPE
from storage.ports import CapReached, People

LINK_CODE_TTL_S = 10 * 60
LINK_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
LINK_CODE_LENGTH = 8
LINK_PAUSE_AFTER_WRONG_CODES = 5  # wrong codes within LINK_CODE_TTL_S pause /link for the person
LINK_CONFIRM = (
    "Link this {here} account with the {there} account that made this code? Your memories and the "
    "ones of the account that made this code become one; whoever holds either account sees them all. "
    "Only link accounts that are both yours."
)


def _normalized_code(text: str) -> str:
    return text.strip().upper().replace("-", "").replace(" ", "")


def link_code_arg(arg: str) -> str:
    """A link code in a button's data (parsed fail-closed, like every button argument)."""
    if not re.fullmatch(f"[{LINK_CODE_ALPHABET}]{{{LINK_CODE_LENGTH}}}", arg):
        raise ValueError(arg)
    return arg


def _platform_name(platform: str) -> str:
    return traits_of(platform).shown_as


def _others(here: str) -> str:
    """The chat platforms besides `here`, as a person reads them ("Telegram", "Discord or Telegram")."""
    return " or ".join(traits_of(name).shown_as for name in sorted(chat_platforms() - {here}))


class AccountCommands:
    def __init__(self, people: People, rebuilds: Rebuilds, clock: Callable[[], float], today: Callable[[], str]):
        self.people = people
        self.rebuilds = rebuilds
        self.clock = clock
        self.today = today  # the day in [limits] timezone: its spend outlives /forgetme (SPEC 17)
        self.commands = {"link": self.link, "forgetme": self.forgetme}
        self.presses = {"link": Press(self._press_link, link_code_arg), "forget": Press(self._press_forget)}

    # -- link and forget -------------------------------------------------------------------
    async def link(self, ctx: CommandContext, person: Person, code: str | None = None) -> CommandResult:
        """A one-time code made on one platform and entered on the other; nothing merges until
        the person entering it confirms with a button (SPEC section 6)."""
        now = self.clock()
        if await self.people.link_failures_since(person.id, now - LINK_CODE_TTL_S) >= LINK_PAUSE_AFTER_WRONG_CODES:
            raise UsageError(f"{LINK_PAUSE_AFTER_WRONG_CODES} wrong link codes in 10 minutes: /link is paused "
                             "for you. Try again later, with a new code.")
        here = ctx.identity.platform
        if not code:
            new_code = "".join(secrets.choice(LINK_CODE_ALPHABET) for _ in range(LINK_CODE_LENGTH))
            await self.people.create_link_code(person.id, here, new_code, now + LINK_CODE_TTL_S)
            return CommandResult(
                f"Your link code is {new_code}. Within 10 minutes, send /link {new_code} to "
                f"{person.character_name} from your account on the other platform (Discord or Telegram); "
                "you will be asked to confirm there. It works once."
            )
        cleaned = _normalized_code(code)
        found = await self.people.link_code(cleaned, now)
        if found is None:
            await self.people.add_link_failure(person.id, now)
            raise UsageError("That link code is unknown or has expired. Get a new one with /link.")
        owner, made_on = found
        if made_on == here and owner == person.id:
            raise UsageError("That is your own code: enter it from your account on the other platform "
                             f"({_others(here)}) to link the two.")
        if owner == person.id:
            return CommandResult("These accounts are already linked.")
        if made_on == here:
            raise UsageError(f"That code was made on {_platform_name(here)} too. Enter it from your account "
                             "on the other platform: linking joins a Discord and a Telegram account.")
        return CommandResult(
            LINK_CONFIRM.format(here=_platform_name(here), there=_platform_name(made_on)),
            buttons=[[button(person, "Link the accounts", "link", cleaned, danger=True),
                      button(person, "Cancel", "cancel")]],
        )

    async def _press_link(self, ctx, person: Person, verb: str, code: str) -> CommandResult:
        found = await self.people.link_code(code, self.clock())
        if found is None or found[1] == ctx.identity.platform:
            return CommandResult("That link code was used or has expired. Get a new one with /link.", ok=False)
        owner = found[0]
        if owner == person.id:
            return CommandResult("These accounts are already linked.")
        try:  # the merge deletes the code: it works once
            report = await self.people.merge_persons(owner, person.id)
        except CapReached as full:
            raise UsageError(
                f"Linking would give you {full.count} unpinned {full.scope} memories; the limit is "
                f"{MAX_UNPINNED_PER_SCOPE}. Delete some on either account, then send /link again."
            ) from None
        identities = await self.people.identities_of(owner)
        text = "Linked: " + ", ".join(f"{p}" for p, _ in identities) + \
               ". Your saved memories now follow you across them."
        if report.kept_once:
            text += (f" {memories_word(report.kept_once)} that both accounts kept "
                     f"{'is' if report.kept_once == 1 else 'are'} now kept once.")
        if report.unpinned_pins:
            text += (f" {memories_word(report.unpinned_pins, 'pinned')} "
                     f"went over the limit of {MAX_PINNED_PER_SCOPE} pinned per scope and "
                     f"{'is' if report.unpinned_pins == 1 else 'are'} now unpinned.")
        return CommandResult(text)

    async def forgetme(self, ctx: CommandContext, person: Person) -> CommandResult:
        return CommandResult(
            "This deletes everything stored about you: your saved memories with every character, "
            "your messages and the replies to them, your settings and linked accounts. "
            "It cannot be undone. Are you sure?",
            buttons=[[button(person, "Delete everything", "forget", danger=True),
                      button(person, "Cancel", "cancel")]],
        )

    async def _press_forget(self, ctx, person: Person, verb: str) -> CommandResult:
        if not await self.forget(person):
            return CommandResult(NOTHING_FORGOTTEN, ok=False)
        return CommandResult("Done. Everything stored about you is deleted.")

    async def forget(self, person: Person) -> bool:
        """/forgetme, confirmed (a button, or the memory page's form). False: the person was no
        longer there, as their accounts were linked at that moment, and nothing was deleted."""
        conversations = await self.people.forget_person(person.id, self.today())
        if conversations is None:
            return False
        for conversation_id in conversations:
            self.rebuilds.refresh(conversation_id)  # summarized again without their words
        return True
