"""The /memory command service (SPEC section 6): the same on every platform.

Adapters call `run(ctx, name, options)` with typed options (Discord) or `run_text(ctx, text)`
with the words after the command (Telegram, console), and `press(ctx, action)` for a button.
Every answer is a `CommandResult` shown only to the person who asked. Every memory is looked up
with the person taken from the platform event, so another person's id answers exactly like an
unknown one: "There is no memory #N."
"""

from __future__ import annotations

import inspect
import json
import math
import re
import secrets
import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from bot.actions import NOT_YOUR_BUTTON, STALE_BUTTON, decode_action
from bot.command_base import (
    CommandContext,
    Person,
    Press,
    UsageError,
    button,
    memories_word,
    number_arg,
    parse_bool,
    parse_memory_id,
    plural,
    scope_arg,
    scope_or_all_arg,
)
from bot.contract import Attachment, CommandResult
from bot.saved_memories import (
    MAX_PINNED_PER_SCOPE,
    MAX_UNPINNED_PER_SCOPE,
    is_recent,
    memory_text_error,
    scope_error,
)
from bot.draft_commands import DraftCommands
from bot.rebuild import Rebuilds
from bot.summary_commands import SummaryCommands
from bot.text import parse_number
from bot.turn import TurnHandler
from storage.ports import CHARACTER, GLOBAL, SCOPES, CapReached, MemoryRow

PAGE_SIZE = 10
LINK_CODE_TTL_S = 10 * 60
LINK_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
LINK_CODE_LENGTH = 8
LINK_PAUSE_AFTER_WRONG_CODES = 5  # wrong codes within LINK_CODE_TTL_S pause /link for the person
PLATFORM_NAMES = {"discord": "Discord", "telegram": "Telegram", "console": "the console"}
LINK_CONFIRM = (
    "Link this {here} account with the {there} account that made this code? Your memories and the "
    "ones of the account that made this code become one; whoever holds either account sees them all. "
    "Only link accounts that are both yours."
)
NOT_A_PERSON = (
    "I keep memories for people, and this message was sent on behalf of a chat or by a bot, so there "
    "is no one to keep them for. Write as yourself to use /memory."
)
PINNED_QUESTION = (
    "Your {memories} {were} kept. These are the moments you marked yourself and "
    "protected from the AI. Delete them too?"
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


def _normalized_code(text: str) -> str:
    return text.strip().upper().replace("-", "").replace(" ", "")


def _link_code_arg(arg: str) -> str:
    if not re.fullmatch(f"[{LINK_CODE_ALPHABET}]{{{LINK_CODE_LENGTH}}}", arg):
        raise ValueError(arg)
    return arg


def _platform_name(platform: str) -> str:
    return PLATFORM_NAMES.get(platform, platform)


def _fits(handler: Callable[..., Any], *args: Any, **options: Any) -> bool:
    """Whether these arguments fit the handler's signature (checked before calling it, so a
    TypeError inside a handler is never mistaken for bad input)."""
    try:
        inspect.signature(handler).bind(*args, **options)
    except TypeError:
        return False
    return True


class MemoryCommands:
    def __init__(self, turns: TurnHandler, rebuilds: Rebuilds, clock: Callable[[], float] = time.time):
        self.turns = turns
        self.store = turns.store
        self.counter = turns.counter
        self.clock = clock
        self.summaries = SummaryCommands(self, rebuilds)
        self.drafts = DraftCommands(self)
        self.commands: dict[str, Callable[..., Awaitable[CommandResult]]] = {
            **self.summaries.commands,
            **self.drafts.commands,
            "view": self.view,
            "add": self.add,
            "edit": self.edit,
            "delete": self.delete,
            "pin": self.pin,
            "unpin": self.unpin,
            "clear": self.clear,
            "learning": self.learning,
            "why": self.why,
            "export": self.export,
            "link": self.link,
            "forgetme": self.forgetme,
            "help": self.help,
        }
        # Every button verb, with the kinds of its arguments (parsed fail-closed, see Press).
        self.presses: dict[str, Press] = {
            **self.summaries.presses,
            **self.drafts.presses,
            "view": Press(self._press_view, scope_or_all_arg, number_arg),
            "pin": Press(self._press_pin, number_arg, scope_or_all_arg, number_arg),
            "unpin": Press(self._press_pin, number_arg, scope_or_all_arg, number_arg),
            "del": Press(self._press_delete, number_arg, scope_or_all_arg, number_arg),
            "clear1": Press(self._press_clear_unpinned, scope_arg),
            "clear2": Press(self._press_clear_pinned, scope_arg),
            "link": Press(self._press_link, _link_code_arg),
            "forget": Press(self._press_forget),
            "cancel": Press(self._press_cancel),
        }

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

    async def press(self, ctx: CommandContext, data: str) -> CommandResult:
        """A button was pressed. It acts only for the person it was made for."""
        stale = CommandResult(STALE_BUTTON, ok=False, refused=True)
        action = decode_action(data)
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
        if action is None or action.verb not in self.summaries.forms or len(action.args) != 1 \
                or parse_number(action.args[0]) is None or ctx.identity is None:
            return CommandResult("That form is no longer valid.", ok=False, refused=True)
        person = await self._person(ctx)
        if action.person_id != person.id:
            return CommandResult("That form belongs to someone else.", ok=False, refused=True)
        try:
            return await self.summaries.forms[action.verb](ctx, person, None, parse_number(action.args[0]), text)
        except UsageError as problem:
            return CommandResult(str(problem), ok=False)

    async def remember(self, ctx: CommandContext, platform_message_id: str) -> CommandResult:
        """Remember this (Discord) / a reply with /remember (Telegram): pick a message."""
        if ctx.identity is None:
            return CommandResult(NOT_A_PERSON, ok=False)
        return await self.drafts.remember(ctx, platform_message_id)

    async def _person(self, ctx: CommandContext) -> Person:
        assert ctx.identity is not None, "nobody in particular has no memories"
        runtime = self.turns.character(ctx.conversation.character)
        person_id = await self.store.people.person_for_identity(ctx.identity.platform, ctx.identity.user_id)
        return Person(person_id, runtime.id, runtime.character.name)

    # -- view ------------------------------------------------------------------------------
    async def view(self, ctx: CommandContext, person: Person, scope: str | None = None,
                   page: int | str = 1) -> CommandResult:
        if error := scope_error(scope):
            raise UsageError(error)
        number = parse_number(page)
        if number is None:
            raise UsageError(f"The page must be a number from 1, not “{str(page)[:40]}”.")
        return await self._page(person, scope, number)

    async def _page(self, person: Person, scope: str | None, page: int, note: str = "") -> CommandResult:
        page = max(1, page)
        rows, total = await self.store.memories.list_memories(
            person.id, person.character_id, scope, (page - 1) * PAGE_SIZE, PAGE_SIZE
        )
        pages = max(1, math.ceil(total / PAGE_SIZE))
        if page > pages and total:
            note += f"There is no page {page}: your memories fill {plural(pages, 'page', 'pages')}. "
            return await self._page(person, scope, pages, note + "This is the last.\n\n")
        which = {None: "", CHARACTER: " (character scope)", GLOBAL: " (global scope)"}[scope]
        if not total:
            text = f"{note}You have no saved memories with {person.character_name}{which} yet. " \
                   "Add one with /memory add."
            return CommandResult(text.strip())
        now = self.clock()
        lines = [f"{note}Your memories with {person.character_name}{which}: {total} — page {page} of {pages}"]
        lines += [self._memory_line(m, now) for m in rows]
        scope_arg = scope or "all"
        toggles = [button(person, f"{'Unpin' if m.pinned else 'Pin'} #{m.id}",
                                "unpin" if m.pinned else "pin", m.id, scope_arg, page) for m in rows]
        deletes = [button(person, f"Delete #{m.id}", "del", m.id, scope_arg, page, danger=True)
                   for m in rows]
        buttons = [toggles[i:i + 5] for i in range(0, len(toggles), 5)]
        buttons += [deletes[i:i + 5] for i in range(0, len(deletes), 5)]
        nav = []
        if page > 1:
            nav.append(button(person, "◀ Previous", "view", scope_arg, page - 1))
        if page < pages:
            nav.append(button(person, "Next ▶", "view", scope_arg, page + 1))
        if nav:
            buttons.append(nav)
        return CommandResult("\n".join(lines), buttons=buttons)

    @staticmethod
    def _memory_line(memory: MemoryRow, now: float) -> str:
        marks = [memory.scope] + (["recent"] if is_recent(memory, now) else [])
        pin = "📌 " if memory.pinned else ""
        return f"{pin}#{memory.id} · {' · '.join(marks)} — {memory.content}"

    async def _press_view(self, ctx, person: Person, verb: str, scope: str | None, page: int) -> CommandResult:
        return await self._page(person, scope, page)

    # -- add, edit, delete, pin -------------------------------------------------------------
    async def add(self, ctx: CommandContext, person: Person, text: str = "", scope: str | None = None,
                  pin: Any = False) -> CommandResult:
        scope = (scope or CHARACTER).lower()
        if error := scope_error(scope) or memory_text_error(text):
            raise UsageError(error)
        pinned = parse_bool(pin, "pin")
        content = text.strip()
        try:
            row = await self.store.memories.add_memory(
                person.id, person.character_id, scope, content, self.counter.count(content),
                pinned=pinned, source="person",
            )
        except CapReached as full:
            raise UsageError(self._cap_message(full)) from None
        where = "every character" if scope == GLOBAL else person.character_name
        return CommandResult(f"Saved #{row.id}{' (pinned)' if pinned else ''} for {where}: {content}")

    @staticmethod
    def _cap_message(full: CapReached) -> str:
        if full.kind == "pinned":
            return (f"You already have {full.limit} pinned {full.scope} memories, the most there can be. "
                    "Unpin or delete one first.")
        return (f"You already have {full.limit} unpinned {full.scope} memories, the most there can be. "
                "Delete or edit one first.")

    async def edit(self, ctx: CommandContext, person: Person, id: Any = None, text: str = "") -> CommandResult:
        memory_id = parse_memory_id(id)
        if error := memory_text_error(text):
            raise UsageError(error)
        content = text.strip()
        row = await self.store.memories.update_memory(
            person.id, person.character_id, memory_id, content, self.counter.count(content)
        )
        if row is None:
            raise UsageError(f"There is no memory #{memory_id}.")
        return CommandResult(f"Updated #{memory_id}: {content}")

    async def delete(self, ctx: CommandContext, person: Person, id: Any = None) -> CommandResult:
        memory_id = parse_memory_id(id)
        if await self.store.memories.delete_memory(person.id, person.character_id, memory_id) is None:
            raise UsageError(f"There is no memory #{memory_id}.")
        return CommandResult(f"Deleted #{memory_id}.")

    async def pin(self, ctx: CommandContext, person: Person, id: Any = None) -> CommandResult:
        return await self._set_pinned(person, parse_memory_id(id), True)

    async def unpin(self, ctx: CommandContext, person: Person, id: Any = None) -> CommandResult:
        return await self._set_pinned(person, parse_memory_id(id), False)

    async def _set_pinned(self, person: Person, memory_id: int, pinned: bool) -> CommandResult:
        try:
            row = await self.store.memories.set_pinned(person.id, person.character_id, memory_id, pinned)
        except CapReached as full:
            raise UsageError(self._cap_message(full)) from None
        if row is None:
            raise UsageError(f"There is no memory #{memory_id}.")
        if pinned:
            return CommandResult(f"Pinned #{memory_id}. It is always remembered and only you can change it.")
        return CommandResult(f"Unpinned #{memory_id}.")

    async def _press_pin(self, ctx, person: Person, verb: str, memory_id: int, scope: str | None,
                         page: int) -> CommandResult:
        try:
            done = await self._set_pinned(person, memory_id, verb == "pin")
            note = done.text
        except UsageError as problem:
            note = str(problem)
        return await self._page(person, scope, page, note + "\n\n")

    async def _press_delete(self, ctx, person: Person, verb: str, memory_id: int, scope: str | None,
                            page: int) -> CommandResult:
        row = await self.store.memories.delete_memory(person.id, person.character_id, memory_id)
        note = f"Deleted #{memory_id}." if row else f"There is no memory #{memory_id}."
        return await self._page(person, scope, page, note + "\n\n")

    # -- clear all -------------------------------------------------------------------------
    async def clear(self, ctx: CommandContext, person: Person, scope: str | None = None) -> CommandResult:
        scope = (scope or CHARACTER).lower()
        if error := scope_error(scope):
            raise UsageError(error)
        unpinned = await self.store.memories.count_memories(person.id, person.character_id, scope, pinned=False)
        pinned = await self.store.memories.count_memories(person.id, person.character_id, scope, pinned=True)
        if not unpinned and not pinned:
            return CommandResult(f"You have no {scope} memories to clear.")
        if not unpinned:
            return self._pinned_question(person, scope, pinned, "")
        return CommandResult(
            f"Delete all {memories_word(unpinned, 'unpinned ' + scope)}? "
            "This cannot be undone. Pinned memories are kept.",
            buttons=[[button(person, f"Delete {unpinned}", "clear1", scope, danger=True),
                      button(person, "Cancel", "cancel")]],
        )

    def _pinned_question(self, person: Person, scope: str, pinned: int, before: str) -> CommandResult:
        text = before + PINNED_QUESTION.format(memories=memories_word(pinned, "pinned"),
                                               were="was" if pinned == 1 else "were")
        return CommandResult(text, buttons=[[
            button(person, "Delete pinned too", "clear2", scope, danger=True),
            button(person, "Keep them", "cancel"),
        ]])

    async def _press_clear_unpinned(self, ctx, person: Person, verb: str, scope: str) -> CommandResult:
        deleted = await self.store.memories.clear_memories(person.id, person.character_id, scope, pinned=False)
        pinned = await self.store.memories.count_memories(person.id, person.character_id, scope, pinned=True)
        done = f"Deleted {memories_word(deleted, scope)}."
        if pinned:
            return self._pinned_question(person, scope, pinned, done + " ")
        return CommandResult(done)

    async def _press_clear_pinned(self, ctx, person: Person, verb: str, scope: str) -> CommandResult:
        deleted = await self.store.memories.clear_memories(person.id, person.character_id, scope, pinned=True)
        return CommandResult(f"Deleted {memories_word(deleted, 'pinned ' + scope)}.")

    async def _press_cancel(self, ctx, person: Person, verb: str) -> CommandResult:
        return CommandResult("Cancelled: nothing was changed.")

    # -- learning, why, export ---------------------------------------------------------------
    async def learning(self, ctx: CommandContext, person: Person, state: Any = None) -> CommandResult:
        if state is None:
            on = await self.store.memories.learning_enabled(person.id, person.character_id)
            return CommandResult(f"Learn from chat is {'on' if on else 'off'} for {person.character_name}. "
                                 "Change it with /memory learning on or /memory learning off.")
        on = parse_bool(state, "state")
        await self.store.memories.set_learning(person.id, person.character_id, on)
        if on:
            return CommandResult(f"Learn from chat is on: {person.character_name} saves and reads your memories.")
        return CommandResult(f"Learn from chat is off: {person.character_name} neither saves nor reads your "
                             "saved memories. The conversation summary goes on.")

    async def why(self, ctx: CommandContext, person: Person) -> CommandResult:
        conversation = await self.turns.conversation_for(ctx.conversation)
        turn = await self.store.turns.last_receipt(conversation.id, person.id)
        if turn is None or not turn.receipt:
            return CommandResult("There is no reply to you in this conversation yet.")
        r = turn.receipt
        tokens = r["tokens"]
        lines = [f"The prompt of {person.character_name}'s last reply to you held:"]
        if not r.get("learning", True):
            lines.append("• Saved memories: none — Learn from chat was off.")
        else:
            ids = r["memories"]
            listed = ", ".join([f"#{i}📌" for i in ids["pinned"]] + [f"#{i}" for i in ids["unpinned"]]) or "none"
            count = len(ids["pinned"]) + len(ids["unpinned"])
            lines.append(f"• Saved memories: {count} ({listed}) — {tokens['memories']:,} tokens")
        tiers = r["summary"]
        lines.append(f"• Summary: long-term {tiers['long_term']}, merged {tiers['merged']}, "
                     f"recent {tiers['recent']} — {tokens['summary']:,} tokens")
        lines.append(f"• Live window: {plural(r['window_messages'], 'message', 'messages')} — "
                     f"{tokens['window']:,} tokens")
        lines.append(f"• Character and instructions: {tokens['system']:,} tokens")
        lines.append(f"Total ≈ {tokens['total']:,} tokens.")
        return CommandResult("\n".join(lines))

    async def export(self, ctx: CommandContext, person: Person) -> CommandResult:
        data = await self.store.memories.export_person(person.id)
        data["exported_at"] = datetime.fromtimestamp(self.clock(), timezone.utc).isoformat()
        body = json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8")
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%Y%m%d-%H%M%S")
        count = len(data["memories"])
        return CommandResult(f"Your {memories_word(count)}, as JSON.",
                             attachment=Attachment(f"keepsake-export-{stamp}.json", body))

    # -- link and forget -------------------------------------------------------------------
    async def link(self, ctx: CommandContext, person: Person, code: str | None = None) -> CommandResult:
        """A one-time code made on one platform and entered on the other; nothing merges until
        the person entering it confirms with a button (SPEC section 6)."""
        now = self.clock()
        if await self.store.people.link_failures_since(person.id, now - LINK_CODE_TTL_S) >= LINK_PAUSE_AFTER_WRONG_CODES:
            raise UsageError(f"{LINK_PAUSE_AFTER_WRONG_CODES} wrong link codes in 10 minutes: /link is paused "
                             "for you. Try again later, with a new code.")
        here = ctx.identity.platform
        if not code:
            new_code = "".join(secrets.choice(LINK_CODE_ALPHABET) for _ in range(LINK_CODE_LENGTH))
            await self.store.people.create_link_code(person.id, here, new_code, now + LINK_CODE_TTL_S)
            return CommandResult(
                f"Your link code is {new_code}. Within 10 minutes, send /link {new_code} to "
                f"{person.character_name} from your account on the other platform (Discord or Telegram); "
                "you will be asked to confirm there. It works once."
            )
        cleaned = _normalized_code(code)
        found = await self.store.people.link_code(cleaned, now)
        if found is None:
            await self.store.people.add_link_failure(person.id, now)
            raise UsageError("That link code is unknown or has expired. Get a new one with /link.")
        owner, made_on = found
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
        found = await self.store.people.link_code(code, self.clock())
        if found is None or found[1] == ctx.identity.platform:
            return CommandResult("That link code was used or has expired. Get a new one with /link.", ok=False)
        owner = found[0]
        if owner == person.id:
            return CommandResult("These accounts are already linked.")
        try:  # the merge deletes the code: it works once
            report = await self.store.people.merge_persons(owner, person.id)
        except CapReached as full:
            raise UsageError(
                f"Linking would give you {full.count} unpinned {full.scope} memories; the limit is "
                f"{MAX_UNPINNED_PER_SCOPE}. Delete some on either account, then send /link again."
            ) from None
        identities = await self.store.people.identities_of(owner)
        text = "Linked: " + ", ".join(f"{p}" for p, _ in identities) + \
               ". Your saved memories now follow you across them."
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
        for conversation_id in await self.store.people.forget_person(person.id):
            await self.summaries.rebuilds.refresh(conversation_id)  # their words leave the summaries too
        return CommandResult("Done. Everything stored about you is deleted.")

    async def help(self, ctx: CommandContext, person: Person | None) -> CommandResult:
        return CommandResult(HELP)
