"""Console adapter: `python -m bot console --character NAME` chats in the terminal.

It goes through the same turn handler, store and /memory service as Discord and Telegram.
Lines starting with `/` are commands: `/memory …`, `/link`, `/forgetme`, `/regenerate`,
`/press N` (press button N of the last answer), `/help`, `/quit`. Everything else is said to the
character, whose reply streams onto the screen. Empty lines are ignored; at a terminal, lines are
edited with readline. The program's own words (errors, notices) are marked `(Keepsake)`, never
put in the character's mouth; the markdown markers `*` and backticks are not printed.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from bot.contract import (
    Asker,
    Button,
    CommandContext,
    CommandResult,
    ConversationKey,
    Core,
    Identity,
    IncomingMessage,
    Part,
    Picture,
    Reply,
)

PLATFORM = "console"
CONSOLE_COMMANDS = """
/regenerate — replace the character's last reply
/press <n> — press button n of the last answer
/quit — leave"""


PROGRAM = "(Keepsake)"
PICTURES = Path("keepsake-pictures")  # where the console saves the pictures a character sends


ITALIC, UPRIGHT = "\x1b[3m", "\x1b[23m"


def plain(text: str, italics: bool = False) -> str:
    """A reply as the terminal shows it: code markers go; a card's *actions* keep their
    asterisks, or become italics where the terminal can show them (`italics`), so an action
    never runs into speech. (Each character maps on its own, so a growing stream's text grows.)"""
    text = text.replace("`", "")
    if not italics:
        return text
    parts = text.split("*")
    return "".join(part + ((ITALIC if n % 2 == 0 else UPRIGHT) if n < len(parts) - 1 else "")
                   for n, part in enumerate(parts))


def ending(text: str, words: int = 6) -> str:
    """A text's last few words, as "…to change." (the whole text when it is that short)."""
    last = text.split()
    return " ".join(last) if len(last) <= words else "…" + " ".join(last[-words:])


class _Stream:
    """Writes a streamed reply as it arrives; starts over if the model's answer broke off. The
    character's name is written with its first words (a turn that fails shows no empty line)."""

    def __init__(self, out: TextIO, name: str, italics: bool = False):
        self.out, self.name, self.italics = out, name, italics
        self.text = ""
        self.started = False

    async def __call__(self, text: str) -> None:
        text = plain(text, self.italics)
        if not text and not self.started:
            return  # the turn has begun; nothing to show yet
        if not self.started:
            self.out.write(f"{self.name}: ")
            self.started = True
        if not text.startswith(self.text):
            self.out.write("\n(the answer broke off; starting over)\n")
            self.text = ""
        self.out.write(text[len(self.text):])
        self.out.flush()
        self.text = text


def _read_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, stream: TextIO) -> None:
    """Feed stdin lines to the event loop from a daemon thread (works for ttys, pipes, files).
    At a terminal, lines are read with readline: arrow keys edit the line and walk the history."""
    if stream.isatty():
        import readline  # noqa: F401  (importing it gives input() line editing and history)

        while True:
            try:
                line = input()
            except EOFError:
                break
            loop.call_soon_threadsafe(queue.put_nowait, line)
    else:
        for line in stream:
            loop.call_soon_threadsafe(queue.put_nowait, line)
    loop.call_soon_threadsafe(queue.put_nowait, None)


class Console:
    def __init__(self, core: Core, character: str, user_name: str, out: TextIO = sys.stdout):
        self.core = core
        self.character_name = core.conversation.character_name(character)
        self.user_name = user_name
        self.out = out
        self.italics = out.isatty()  # *actions* in italics where the terminal shows them, else with asterisks
        self.identity = Identity(PLATFORM, user_name)
        # the table's commands the core answers (/start, /help are answered here)
        self.routed = {spec.name for spec in core.commands.command_table()
                       if spec.offered_on(PLATFORM) and spec.name not in ("start", "help")}
        # commands of the chat platforms (reminders and check-ins are delivered there, #62)
        self.elsewhere = {spec.name for spec in core.commands.command_table() if not spec.offered_on(PLATFORM)}
        # each name is a person of its own, with a conversation of its own (SPEC 2: never another's words)
        self.key = ConversationKey(PLATFORM, f"local:{user_name}", None, self.character_name, is_shared=False)
        self.asker = Asker(PLATFORM, user_name)  # the console is its owner's: the gate lets it in
        self.context = CommandContext(self.key, self.identity, user_name, self.asker)
        self.buttons: list[Button] = []
        self.last_turn: str | None = None

    async def notified(self, conversation: ConversationKey, text: str) -> None:
        if conversation.platform == PLATFORM:
            self.say(f"{PROGRAM} {text}")

    def say(self, text: str = "") -> None:
        # one write, line and newline together: print() writes them apart, and a line typed in
        # between (echoed by readline) would land before the newline
        self.out.write(text + "\n")
        self.out.flush()

    def shown_text(self, text: str) -> str:
        return plain(text, self.italics) + (UPRIGHT if self.italics else "")

    async def greet(self, choice: str = "") -> None:
        greeting = await self.core.conversation.greet(self.key, self.user_name, choice, self.identity)
        self.say(f"{PROGRAM} {greeting.text}" if greeting.is_error
                 else f"{self.character_name}: {self.shown_text(greeting.text)}")
        if hint := self.core.conversation.other_greetings(self.key, choice):
            self.say(f"{PROGRAM} {hint}")

    async def run(self, lines: asyncio.Queue) -> None:
        with self.core.presence.listening(self.notified):
            await self._chat(lines)

    async def _chat(self, lines: asyncio.Queue) -> None:
        left_off = await self.core.conversation.left_off(self.key)
        if left_off:  # a conversation going on: where it was, not the greeting again
            self.say(f"{PROGRAM} Where you left off:")
            for speaker, text in left_off:
                self.say(f"{speaker}: {self.shown_text(text)}")
        else:
            await self.greet()
        await self.recover()
        self.say("(type /help for commands, /quit to leave)")
        while True:
            line = await lines.get()
            if line is None:
                return
            line = line.rstrip("\n")
            if line.strip().lower() in ("/quit", "/exit"):
                return
            try:
                await self.handle_line(line)
            except Exception:  # the person hears about it; the session goes on
                logging.getLogger(__name__).exception("the console failed on a line")
                self.say(f"{PROGRAM} Something went wrong on our side with that line; try again.")

    async def handle_line(self, line: str) -> None:
        text = line.strip()
        if not text:
            return  # an empty Enter is nothing said
        if not text.startswith("/"):
            await self.chat(line)
            return
        head = text.split()[0][1:].lower()
        if head == "help":
            self.show(CommandResult(self.core.commands.help_text("console") + CONSOLE_COMMANDS))
        elif head == "start":
            await self.greet(text[len("/start"):].strip())
        elif head in ("regenerate", "regen"):
            await self.regenerate()
        elif head == "press":
            await self.press(text.split()[1:])
        elif head in self.routed:
            self.show(await self.core.commands.command(self.context, text))
        elif head in self.elsewhere:
            self.say(f"{PROGRAM} /{head} is for Discord and Telegram, where reminders and check-ins are delivered; "
                     "the console has none.")
        else:
            self.say(f"{PROGRAM} Unknown command {text.split()[0][:40]}. Type /help for the list.")

    async def recover(self) -> None:
        """A reply a stop cut off (SPEC 9): answered again, before anything new, when it is under
        5 minutes old; an older one stays unanswered (the terminal shows no partial message)."""
        for item in await self.core.recovery.cut_off(PLATFORM, self.character_name):
            if item.fresh:
                self.say(f"{PROGRAM} My answer to “{item.asked_text[:60]}” was cut off; here it is again.")
                stream = _Stream(self.out, self.character_name, self.italics)
                await self.deliver(await self.core.recovery.answer_again(item, on_text=stream), stream)

    async def chat(self, text: str) -> None:
        message = IncomingMessage(self.key, self.identity, self.user_name, text, asker=self.asker)
        stream = _Stream(self.out, self.character_name, self.italics)
        await self.deliver(await self.core.conversation.handle(message, on_text=stream), stream)

    async def regenerate(self) -> None:
        if self.last_turn is None:
            self.say(f"{PROGRAM} There is no reply to regenerate yet.")
            return
        stream = _Stream(self.out, self.character_name, self.italics)
        reply = await self.core.regenerating.regenerate(self.key, self.identity, self.last_turn, self.asker,
                                                        on_text=stream)
        await self.deliver(reply, stream)

    async def deliver(self, reply: Reply, stream: "_Stream") -> None:
        if stream.text and not reply.is_error:  # the streamed reply is already on screen
            kept = plain(reply.text, self.italics)
            goes_on = kept.startswith(stream.text)  # its end held back while it might have been a name
            rest = kept[len(stream.text):] if goes_on else ""
            self.say(rest + (UPRIGHT if self.italics else "") + "\n")
            if not goes_on and stream.text.startswith(kept.removesuffix("…")):  # cut at max_reply_tokens
                self.say(f"{PROGRAM} The reply reached its length limit; it is kept up to “{ending(kept)}”\n")
        else:
            if stream.started:
                self.say()
            # An error is the program speaking, not the character.
            self.say(f"{PROGRAM} {reply.text}\n" if reply.is_error
                     else f"{self.character_name}: {self.shown_text(reply.text)}\n")
        if reply.note:  # what the turn's tools did (SPEC 18 [tools] show)
            self.say(f"  {reply.note}")
        for part in reply.parts:
            await self.show_part(part)
        if reply.turn is not None:
            self.last_turn = reply.turn
            await self.core.conversation.delivered(reply, [])

    async def show_part(self, part: Part) -> None:
        """A picture is saved to a file the console names (SPEC 20); what a terminal cannot show
        (a voice note) is named, never made."""
        if part.makes is not Picture:
            self.say(f"{PROGRAM} ({part.what.capitalize()} comes with this reply on Discord and Telegram; "
                     "the console shows text only)")
            return
        picture = await part.made(False)
        if not isinstance(picture, Picture):
            return
        PICTURES.mkdir(exist_ok=True)
        path = PICTURES / f"{time.strftime('%Y%m%d-%H%M%S')}-{len(list(PICTURES.iterdir())) + 1}-{picture.filename}"
        path.write_bytes(picture.data)
        self.say(f"{PROGRAM} {self.character_name} sent a picture ({picture.scene[:80]}): saved as {path}")

    async def press(self, args: list[str]) -> None:
        if not args or not (args[0].isascii() and args[0].isdigit() and 1 <= int(args[0]) <= len(self.buttons)):
            self.say(f"Press which button? Give a number from 1 to {len(self.buttons)}."
                     if self.buttons else "There are no buttons to press.")
            return
        button = self.buttons[int(args[0]) - 1]
        result = await self.core.commands.press(self.context, button.action)
        if result.regenerate is not None:
            await self.regenerate()
            return
        self.show(result)

    def show(self, result: CommandResult) -> None:
        self.say(result.text)
        if result.attachment is not None:
            path = Path.cwd() / result.attachment.filename
            path.write_bytes(result.attachment.data)
            self.say(f"(saved to {path})")
        self.buttons = [b for row in result.buttons for b in row]
        number = 1
        for row in result.buttons:  # a row of choices a line, numbered for /press
            self.say("  ".join(f"[{number + i}] {b.label}" for i, b in enumerate(row)))
            number += len(row)
        if self.buttons:
            self.say("(type /press <n> to choose)")
        self.say()


def stdin_lines() -> asyncio.Queue:
    """The lines typed (or piped) on standard input, as they come; None at the end."""
    lines: asyncio.Queue = asyncio.Queue()
    threading.Thread(target=_read_lines, args=(asyncio.get_running_loop(), lines, sys.stdin), daemon=True).start()
    return lines
