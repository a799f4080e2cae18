"""The /memory command service (SPEC section 6): the same on every platform.

Adapters call `run(ctx, name, options)` with typed options (Discord) or `run_text(ctx, text)`
with the words after the command (Telegram, console), `press(ctx, data)` for a button and
`submit(ctx, data, text)` for a form. Every answer is a `CommandResult` shown only to the person
who asked. The commands live in modules by subject (memories, summary, drafts, account); this
router parses what people typed, checks who asks, and dispatches.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Awaitable, Callable

from bot.actions import NOT_YOUR_BUTTON, decode_action
from bot.commands.account import AccountCommands
from bot.commands.base import Person, Press, UsageError
from bot.commands.drafts import DraftCommands
from bot.commands.memories import SavedMemoryCommands
from bot.commands.summary import SummaryCommands
from bot.contract import STALE_BUTTON, CommandContext, CommandResult, CommandSpec
from bot.rebuild import Rebuilds
from bot.text import parse_number
from bot.turn import TurnHandler
from storage.ports import SCOPES

NOT_A_PERSON = (
    "I keep memories for people, and this message was sent on behalf of a chat or by a bot, so there "
    "is no one to keep them for. Write as yourself to use /memory."
)

HELP = """\
/memory view [scope] [page] — your saved memories, pinned first
/memory add <text> — add one (start with scope:global to share it with every character, pin:yes to pin it)
/memory edit <id> <text> — change one
/memory delete <id> — delete one
/memory pin <id> · /memory unpin <id> — pin: always remembered, never changed by the AI
/memory clear [scope] — delete all unpinned memories of a scope (asks first)
/memory learning <on|off> — let the character learn from this chat, or not
/memory summary — this conversation's summary (edit: /memory summary edit <S-number> <text>)
/memory rebuild — rebuild the summary from the whole conversation
/memory generate <description> — let the AI draft memories from what you tell it
/memory save [n] — save the last n messages (up to 20) as a pinned memory
/memory why — what was in the prompt of the last reply
/memory export — all your memories as a JSON file
/link [code] — link your Discord and Telegram accounts
/forgetme — delete everything stored about you"""
PUBLISHED = [  # what a platform's command menu shows
    CommandSpec("start", "Say hello"),
    CommandSpec("memory", "What I remember about you: /memory view, add, pin, clear, …"),
    CommandSpec("remember", "Reply to a message with this to keep it as a memory"),
    CommandSpec("link", "Link your Telegram and Discord accounts"),
    CommandSpec("forgetme", "Delete everything stored about you"),
    CommandSpec("help", "How I work"),
]


def _fits(handler: Callable[..., Any], *args: Any, **options: Any) -> bool:
    """Whether these arguments fit the handler's signature (checked before calling it, so a
    TypeError inside a handler is never mistaken for bad input)."""
    try:
        inspect.signature(handler).bind(*args, **options)
    except TypeError:
        return False
    return True


class MemoryCommands:
    """The router: one table of commands and one of button verbs, gathered from the modules by
    subject; it checks who asks before any of them runs."""

    def __init__(self, turns: TurnHandler, rebuilds: Rebuilds, clock: Callable[[], float] = time.time):
        self.turns = turns
        self.store = turns.store
        self.clock = clock
        summary = SummaryCommands(turns, rebuilds)
        self.drafts = DraftCommands(turns)
        self.forms = summary.forms
        self.commands: dict[str, Callable[..., Awaitable[CommandResult]]] = {"help": self.help}
        # Every button verb, with the kinds of its arguments (parsed fail-closed, see Press).
        self.presses: dict[str, Press] = {"cancel": Press(self._press_cancel)}
        for subject in (SavedMemoryCommands(turns, turns.counter, clock), summary, self.drafts,
                        AccountCommands(turns.store, rebuilds, clock)):
            self.commands |= subject.commands
            self.presses |= subject.presses

    # -- entry points ----------------------------------------------------------------------
    async def run(self, ctx: CommandContext, name: str, options: dict[str, Any] | None = None) -> CommandResult:
        if ctx.identity is None:
            return CommandResult(NOT_A_PERSON, ok=False)
        command = self.commands.get((name or "").lower())
        if command is None:
            return CommandResult(f"There is no /memory {name[:40]}. The commands are:\n{HELP}", ok=False)
        options = {k: v for k, v in (options or {}).items() if v is not None}
        if not _fits(command, ctx, None, **options):
            return CommandResult(f"Those options don't fit /memory {name}. The commands are:\n{HELP}", ok=False)
        try:
            return await command(ctx, await self._person(ctx), **options)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def run_text(self, ctx: CommandContext, text: str) -> CommandResult:
        """`/memory add I love tea`, `/memory pin 12`, `/link ABCD2345`, `/forgetme`."""
        words = text.strip().split(maxsplit=1)
        if not words:
            return await self.help(ctx, None)
        head = words[0].lstrip("/").split("@")[0].lower()
        rest = words[1] if len(words) > 1 else ""
        if head in ("link", "forgetme"):
            return await self.run(ctx, head, {"code": rest.strip() or None} if head == "link" else {})
        if head != "memory":
            return CommandResult(f"Unknown command /{head[:40]}.\n{HELP}", ok=False)
        sub, _, args = rest.strip().partition(" ")
        if not sub:
            return await self.help(ctx, None)
        try:
            options = self._text_options(sub.lower(), args.strip())
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)
        return await self.run(ctx, sub, options)

    @staticmethod
    def _text_options(sub: str, args: str) -> dict[str, Any]:
        if sub in ("add",):
            options: dict[str, Any] = {}
            words = args.split(" ")
            while words and words[0].lower().replace("=", ":").split(":")[0] in ("scope", "pin") \
                    and (":" in words[0] or "=" in words[0]):
                key, value = words.pop(0).replace("=", ":").split(":", 1)
                options[key.lower()] = value
            options["text"] = " ".join(words)
            return options
        if sub in ("edit",):
            memory_id, _, text = args.partition(" ")
            return {"id": memory_id, "text": text}
        if sub in ("delete", "pin", "unpin"):
            return {"id": args}
        if sub == "view":
            options = {}
            for word in args.split():
                if word.lower() in SCOPES:
                    options["scope"] = word.lower()
                elif parse_number(word) is not None:
                    options["page"] = parse_number(word)
                else:
                    raise UsageError(f"/memory view takes a scope (character or global) and a page number, not “{word[:40]}”.")
            return options
        if sub == "clear":
            return {"scope": args.lower() or None}
        if sub == "learning":
            return {"state": args or None}
        if sub == "summary":
            verb, _, rest = args.partition(" ")
            if verb.lower() == "edit":
                entry, _, text = rest.strip().partition(" ")
                return {"edit": entry or "?", "text": text}
            if args:
                raise UsageError("/memory summary shows the summary; to change an entry: "
                                 "/memory summary edit <S-number> <new text>.")
            return {}
        if sub == "generate":
            return {"description": args}
        if sub == "save":
            return {"n": args or None}
        if args and sub in ("why", "export", "help", "rebuild"):
            raise UsageError(f"/memory {sub} takes no arguments.")
        return {}

    def help_text(self) -> str:
        return HELP

    def published(self) -> list[CommandSpec]:
        return list(PUBLISHED)

    async def press(self, ctx: CommandContext, data: str) -> CommandResult:
        """A button was pressed. It acts only for the person it was made for. A Regenerate button
        comes back as the turn to regenerate (who may is the turn handler's question)."""
        stale = CommandResult(STALE_BUTTON, ok=False, refused=True)
        action = decode_action(data)
        if action is not None and action.verb == "regen":
            return CommandResult("", regenerate=action.args[0]) if len(action.args) == 1 else stale
        press = self.presses.get(action.verb) if action else None
        args = press.parse(action.args) if press else None
        if action is None or press is None or args is None:
            return stale
        if ctx.identity is None:
            return CommandResult(NOT_YOUR_BUTTON, ok=False, refused=True)
        person = await self._person(ctx)
        if action.person_id != person.id:
            return CommandResult(NOT_YOUR_BUTTON, ok=False, refused=True)
        try:
            return await press.handler(ctx, person, action.verb, *args)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def submit(self, ctx: CommandContext, data: str, text: str) -> CommandResult:
        """A form (e.g. a Discord modal) was sent back with the person's text."""
        action = decode_action(data)
        if action is None or action.verb not in self.forms or len(action.args) != 1 \
                or parse_number(action.args[0]) is None or ctx.identity is None:
            return CommandResult("That form is no longer valid.", ok=False, refused=True)
        person = await self._person(ctx)
        if action.person_id != person.id:
            return CommandResult("That form belongs to someone else.", ok=False, refused=True)
        try:
            return await self.forms[action.verb](ctx, person, None, parse_number(action.args[0]), text)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def remember(self, ctx: CommandContext, platform_message_id: str) -> CommandResult:
        """Remember this (Discord) / a reply with /remember (Telegram): pick a message."""
        if ctx.identity is None:
            return CommandResult(NOT_A_PERSON, ok=False)
        return await self.drafts.remember(ctx, await self._person(ctx), platform_message_id)

    async def _person(self, ctx: CommandContext) -> Person:
        assert ctx.identity is not None, "nobody in particular has no memories"
        runtime = self.turns.character(ctx.conversation.character)
        person_id = await self.store.people.person_for_identity(ctx.identity.platform, ctx.identity.user_id)
        return Person(person_id, runtime.id, runtime.character.name)

    async def _press_cancel(self, ctx, person: Person, verb: str) -> CommandResult:
        return CommandResult("Cancelled: nothing was changed.")

    async def help(self, ctx: CommandContext, person: Person | None) -> CommandResult:
        return CommandResult(HELP)
