"""The /memory command service (SPEC section 6): the same on every platform.

Adapters call `run(ctx, name, options)` with typed options (Discord) or `run_text(ctx, text)`
with the words after the command (Telegram, console), `press(ctx, data)` for a button and
`submit(ctx, data, text)` for a form. Every answer is a `CommandResult` shown only to the person
who asked. The commands are declared once in table.py and live in modules by subject (memories,
summary, drafts, account); this router parses what people typed by the table, checks who asks
(the gate, bot/access/gate.py, for the character a command or button acts on), and dispatches.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

from bot.access.budgets import Budgets
from bot.access.gate import COMMAND, Gate
from bot.characters.cast import Cast
from bot.commands.account import AccountCommands
from bot.commands.base import Person, Press, UsageError
from bot.buttons import NOT_YOUR_BUTTON, decode_action
from bot.commands.checkins import CheckinCommands
from bot.commands.drafts import DraftCommands
from bot.commands.memories import SavedMemoryCommands
from bot.commands.page import PageCommands
from bot.commands.persona import PersonaCommands
from bot.commands.reminders import ReminderCommands
from bot.commands.scene import SceneCommands
from bot.commands.summary import SummaryCommands
from bot.commands.table import CHARACTER, TABLE, check_options, help_text, leaves, parse_text
from bot.commands.usage import UsageCommands
from bot.contract import STALE_BUTTON, CommandContext, CommandResult, ConversationKey, TurnRef
from bot.memory.rebuild import Rebuilds
from bot.model.llm import LLMClient
from bot.model.tokens import TokenCounter
from bot.access.door import Door
from bot.text import parse_number
from storage.ports import Store

NOT_A_PERSON = (
    "I keep memories for people, and this message was sent on behalf of a chat or by a bot, so there "
    "is no one to keep them for. Write as yourself to use /memory."
)


class CommandRouter:
    """The router: one table of commands and one of button verbs, gathered from the modules by
    subject; it checks who asks before any of them runs."""

    def __init__(self, store: Store, cast: Cast, counter: TokenCounter, llm: LLMClient, gate: Gate, budgets: Budgets,
                 rebuilds: Rebuilds, may_witness: Callable[[ConversationKey, str], Awaitable[bool]],
                 clock: Callable[[], float] = time.time,
                 writes_first: Callable[[str], bool] = lambda character: False, owners: frozenset[str] = frozenset(),
                 default_zone: str = "UTC", page_address: str | None = None, pictures_a_day: int | None = None):
        self.store = store
        self.cast = cast
        self.gate = gate
        self.clock = clock
        self.table = leaves()
        summary = SummaryCommands(store, cast, counter, rebuilds, gate)
        self.drafts = DraftCommands(store, cast, counter, llm, gate)
        self.forms = summary.forms
        self.commands: dict[str, Callable[..., Awaitable[CommandResult]]] = {"help": self.help}
        # Every button verb, with the kinds of its arguments (parsed fail-closed, see Press).
        self.presses: dict[str, Press] = {"cancel": Press(self._press_cancel)}
        # the services the memory page shares with the commands (bot/page/desk.py)
        self.memories = SavedMemoryCommands(store, cast, counter, clock)
        self.account = AccountCommands(store.people, rebuilds, clock, budgets.today)
        self.persona = PersonaCommands(store.people, counter)
        self.usage = UsageCommands(store.usage, budgets, owners, pictures_a_day)
        self.reminders = ReminderCommands(store.people, store.reminders, default_zone, clock)
        self.door = Door(store.pages, clock)
        self.page = PageCommands(self.door, cast, gate, page_address)  # `served` set once the page server binds
        for subject in (self.memories, summary, self.drafts, self.account, CheckinCommands(store.checkins, writes_first),
                        self.persona, self.usage, self.reminders, self.page,
                        SceneCommands(store.presence, cast, may_witness)):
            self.commands |= subject.commands
            self.presses |= subject.presses

    # -- entry points ----------------------------------------------------------------------
    async def run(self, ctx: CommandContext, name: str, options: dict[str, Any] | None = None) -> CommandResult:
        """A command by name with its options (typed by Discord, or parsed from text)."""
        if ctx.identity is None:
            return CommandResult(NOT_A_PERSON, ok=False)
        spec = self.table.get((name or "").lower())
        command = self.commands.get(spec.handler) if spec else None
        if command is None:
            return CommandResult(f"There is no /memory {name[:40]}. The commands are:\n{self.help_text(ctx)}", ok=False)
        options = {k: v for k, v in (options or {}).items() if v is not None}
        if problem := check_options(spec, options):
            return CommandResult(f"{problem} The commands are:\n{self.help_text(ctx)}", ok=False)
        try:
            person = await self._person(ctx, named=options.pop(CHARACTER.name, None))
            return await command(ctx, person, **options)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def run_text(self, ctx: CommandContext, text: str) -> CommandResult:
        """`/memory add I love tea`, `/memory pin 12`, `/link ABCD2345`, `/forgetme`."""
        head, _, rest = text.strip().partition(" ")
        name = head.lstrip("/").split("@")[0].lower()
        spec = next((spec for spec in TABLE if spec.name == name), None)
        if not name or name == "help":
            return await self.help(ctx, None)
        if spec is None or (not spec.subcommands and spec.name not in self.commands):
            return CommandResult(f"Unknown command /{name[:40]}.\n{self.help_text(ctx)}", ok=False)
        path = name
        if spec.subcommands:
            sub, _, rest = rest.strip().partition(" ")
            if not sub:
                return await self.help(ctx, None)
            spec = next((leaf for leaf in spec.subcommands if leaf.name == sub.lower()), None)
            if spec is None:
                return CommandResult(f"There is no /{name} {sub[:40]}. The commands are:\n{self.help_text(ctx)}", ok=False)
            path = f"{name} {spec.name}"
        try:
            options = parse_text(spec, path, rest)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)
        return await self.run(ctx, spec.handler, options)

    def help_text(self, ctx: CommandContext) -> str:
        return help_text(ctx.conversation.platform)

    async def press(self, ctx: CommandContext, data: str) -> CommandResult:
        """A button was pressed. It acts only for the person it was made for. A Regenerate button
        comes back as the turn to regenerate (who may is the turn handler's question)."""
        stale = CommandResult(STALE_BUTTON, ok=False, refused=True)
        action = decode_action(data)
        if action is not None and action.verb == "regen":
            turn = TurnRef.parse(action.args[0]) if len(action.args) == 1 else None
            if turn is None:
                return stale
            # who may regenerate it, and where, is asked by the turn handler (`regenerate_refusal`),
            # the one check every Regenerate goes through: [access] of the answering character too
            return CommandResult("", regenerate=turn)
        press = self.presses.get(action.verb) if action else None
        args = press.parse(action.args) if press else None
        if action is None or press is None or args is None:
            return stale
        if ctx.identity is None:
            return CommandResult(NOT_YOUR_BUTTON, ok=False, refused=True)
        try:
            person = await self._person(ctx, character_id=action.character_id)
            if action.person_id != person.id:
                return CommandResult(NOT_YOUR_BUTTON, ok=False, refused=True)
            return await press.handler(ctx, person, action.verb, *args)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def submit(self, ctx: CommandContext, data: str, text: str) -> CommandResult:
        """A form (e.g. a Discord modal) was sent back with the person's text."""
        action = decode_action(data)
        if action is None or action.verb not in self.forms or len(action.args) != 1 \
                or parse_number(action.args[0]) is None or ctx.identity is None:
            return CommandResult("That form is no longer valid.", ok=False, refused=True)
        try:
            person = await self._person(ctx, character_id=action.character_id)
            if action.person_id != person.id:
                return CommandResult("That form belongs to someone else.", ok=False, refused=True)
            return await self.forms[action.verb](ctx, person, parse_number(action.args[0]), text)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def remember(self, ctx: CommandContext, platform_message_id: str) -> CommandResult:
        """Remember this (Discord) / a reply with /remember (Telegram): pick a message."""
        if ctx.identity is None:
            return CommandResult(NOT_A_PERSON, ok=False)
        try:
            return await self.drafts.remember(ctx, await self._person(ctx), platform_message_id)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def _person(self, ctx: CommandContext, named: str | None = None, character_id: int | None = None) -> Person:
        """Who asks, and the character it acts on: the one named (`character:Aki`), or the one a
        button was made for; in a scene otherwise the one that last answered them (SPEC 15);
        else the adapter's."""
        assert ctx.identity is not None, "nobody in particular has no memories"
        person_id = await self.store.people.person_for_identity(ctx.identity.platform, ctx.identity.user_id)
        stored = self.cast.stored_by_id(character_id) if character_id is not None else None
        if named is not None:
            stored = self.cast.named(str(named))
            if stored is None:
                names = ", ".join(self.cast.names())
                raise UsageError(f"There is no character called “{str(named)[:40]}”. The characters: {names}.")
        elif stored is None and ctx.conversation.is_shared:
            conversation = await self.cast.conversation_for(ctx.conversation)
            last = await self.store.turns.last_receipt(conversation.id, person_id)
            stored = self.cast.stored_by_id(last.character_id) if last is not None else None
        stored = stored or self.cast.character(ctx.conversation.character)
        admission = await self.gate.admit(COMMAND, stored.character.name, ctx.asker)  # the character acted on decides
        if not admission.admitted:
            raise UsageError(admission.refusal)
        return Person(person_id, stored.id, stored.character.name, named=named is not None)

    async def _press_cancel(self, ctx, person: Person, verb: str) -> CommandResult:
        return CommandResult("Cancelled: nothing was changed.")

    async def help(self, ctx: CommandContext, person: Person | None) -> CommandResult:
        return CommandResult(self.help_text(ctx))
