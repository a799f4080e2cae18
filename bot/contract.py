"""All an adapter may know of the core: the platform-neutral types that pass between them and
the `Core` protocol the core implements. Adapters import this module and nothing else of bot/
or storage/.

An adapter turns a platform event into an `IncomingMessage` (or a `CommandContext` for a
command), hands it to `Core.handle` (or `Core.command`) and renders the `Reply` (or
`CommandResult`) it gets back. It streams a reply through a `ReplySink`, hears about background
results (a finished rebuild) through a `Notifier`, and raises `PlatformRefused` when its
platform refuses it for good. A reply names its turn with an opaque handle, never a storage id.
"""

from __future__ import annotations

import enum
import os
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, Sequence

from bot.text import parse_number

# Words the core owns that an adapter shows as they are.
NOT_ALLOWED = "Sorry, I'm not able to talk with you here."  # [access] said no (SPEC 13)
STALE_BUTTON = "This button no longer works."
# /forgetme confirmed as the person's accounts were being linked: the person it was asked for is
# now part of another, and nothing is deleted until they ask again
NOTHING_FORGOTTEN = ("Nothing was deleted: your accounts were being linked at that moment. Send /forgetme again "
                     "to delete everything stored about you.")
INTERRUPTED = "(This reply was cut off when I restarted. Send your message again if you still want an answer.)"
IMAGE_MAX_SIDE = 1_024  # images reach the model at most this many pixels on their longer side
IMAGE_MAX_PIXELS = 40_000_000  # an image with more pixels is never decoded (SPEC 13), whoever sent or drew it

@dataclass(frozen=True)
class PlatformTraits:
    """What the core knows of a platform, declared by its adapter's row (adapters/registry.py,
    `declare_platforms`): the core asks these, never a platform's name, so another platform is an
    adapter and a row there."""

    name: str
    shown_as: str  # "Telegram", "the console"
    chat: bool = True  # a chat platform: the bot writes first there (check-ins, reminders), and /link joins them
    owned: bool = False  # whoever writes there is the bot's owner (the console): always let in, /stats theirs
    text_commands: bool = False  # commands are typed as text: /start and /help are commands of its own
    place_rule: str = ""  # the [access] rule kind naming a chat or channel there ("telegram-chat")
    role_rule: str = ""  # the kind naming a role ("discord-role"); "" where there are none
    age_line: str = "{name} is an age-restricted character and does not talk here."  # SPEC 17, in its words
    age_line_private: str = ""  # the same in a one-to-one chat, where it differs
    picking: str = "send /memory save N to pick the last N messages (up to 20)"  # how messages are picked to remember


PLATFORM_TRAITS: dict[str, PlatformTraits] = {}  # by name, as the adapters' rows declare them


def declare_platforms(*traits: PlatformTraits) -> None:
    """The platforms there are (adapters/registry.py declares its rows when it is imported)."""
    PLATFORM_TRAITS.update({row.name: row for row in traits})


def chat_platforms() -> frozenset[str]:
    return frozenset(name for name, traits in PLATFORM_TRAITS.items() if traits.chat)


def traits_of(platform: str) -> PlatformTraits:
    """A platform's traits (one no row names: a platform of no traits, named as it is)."""
    if not PLATFORM_TRAITS:
        raise RuntimeError("no platform is declared: import adapters.registry before asking a platform's traits")
    return PLATFORM_TRAITS.get(platform) or PlatformTraits(platform, platform, chat=False)


def where_named(text: str, name: str) -> int | None:
    """Where a text names a character (its name as a whole word, any case: "Mira, look"); None
    when it does not. A message naming the character is addressed to it (SPEC 15)."""
    match = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE)
    return match.start() if match else None


def env_name(value: object) -> object:
    """A `*_env` key's value (SPEC 10): the name of an environment variable. Anything else — a
    bot token pasted in its place, most often — is refused without being repeated, since it may
    be the secret itself."""
    if isinstance(value, str) and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value.strip()):
        raise ValueError("expected the name of an environment variable (like MIRA_TELEGRAM_TOKEN); this value "
                         "is not one, and looks like it may be the secret itself, so it is not shown: put the "
                         "secret in a variable and write the variable's name here")
    return value.strip() if isinstance(value, str) else value


def cannot_listen(section: str, what: str, listen: str, port: int, problem: OSError) -> str:
    """A port that cannot be listened on, named as the config names it (`section.port`), with
    the system's reason (aiohttp's own text repeats the address)."""
    reason = os.strerror(problem.errno) if problem.errno else str(problem)
    return (f"{section}.port: {what} cannot listen on {listen}:{port} ({reason}); set [{section}] port to a "
            "free port")


@dataclass(frozen=True)
class Identity:
    """One platform account: `discord:<user id>`, `telegram:<user id>`, `console:<name>`."""

    platform: str
    user_id: str

    def __str__(self) -> str:
        return f"{self.platform}:{self.user_id}"


@dataclass(frozen=True)
class ConversationKey:
    """One conversation: (platform, chat/channel, thread, character). Whether it is shared (a
    guild channel, a group: several people in it) comes with every platform event, never from
    whichever event happened to create the conversation's row."""

    platform: str
    chat_id: str
    thread_id: str | None
    character: str
    is_shared: bool = False


@dataclass(frozen=True)
class IncomingFile:
    """A file that came with a message: a photo, an image, a text file, anything. `read(limit)`
    fetches its first `limit` bytes from the platform as a stream (never the whole file), only
    when the core uses them; `what` names it in words ("a photo", "a file") for when the
    character cannot read it. `spoken`: a voice note or audio the person sent, heard through
    [voice] (SPEC 16), with its length in `seconds` as the platform tells it."""

    name: str
    content_type: str | None
    size: int | None
    what: str
    read: Callable[[int], Awaitable[bytes]] = field(compare=False, repr=False)
    spoken: bool = False
    seconds: float | None = None


@dataclass(frozen=True)
class IncomingMessage:
    """What the core needs to know about a message addressed to the character.

    `speaker` is None for *nobody in particular* (SPEC section 2): a message sent on behalf of a
    chat (an anonymous group admin, "send as channel", a channel post) or by a bot or webhook.
    The character may answer it, but no saved memories are read or written for it.
    `files` are what came with it to read or look at (bot/turn/attachments.py); `unseen` names
    each other thing that came with the text which the character cannot read ("a sticker").
    `kept` is called once the message is stored and queued for its turn, or refused: a webhook
    acknowledges the update then, so the platform delivers again what a crash lost, and updates
    posted one after another to different processes keep their order.
    `rest`: more of what was sent with it may still come once it is kept (an album's later items,
    posted by a webhook one by one after it is acknowledged, each stored into it as an edit is);
    its turn waits for it, and it gives the message as it was sent in the end (when it fails, the
    message is answered as it is stored).
    `addressed`: the platform addressed it to this adapter's character (a DM, a mention, a reply
    to it, its name); False for a message of an always-on channel addressed to no one, which in
    a scene one character answers (SPEC 15).
    `asker`: who writes and where, for `[access]`, decided by the core's gate for whichever
    character ends up answering (bot/access/gate.py); the console's is `Asker("console", …)`, its
    owner's. None means nobody is known to ask: let in nowhere (SPEC 15: no asker means no).
    `draw`: the person asked for a picture of this scene (`/image <scene>`, SPEC 20): the turn
    calls the `picture` tool with it, through its gate and limits, before the character answers.
    `album`: the items of an album the message is (AlbumItem), kept with it so that an item edited
    later is read with the others again; with `rest`, its first item (its platform posts the
    others one by one), gathered in the database from the moment it is stored."""

    conversation: ConversationKey
    speaker: Identity | None
    speaker_name: str
    text: str
    platform_message_id: str | None = None
    unseen: tuple[str, ...] = ()
    files: tuple[IncomingFile, ...] = ()
    kept: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    rest: Callable[[], Awaitable["IncomingMessage"]] | None = field(default=None, compare=False, repr=False)
    addressed: bool = True
    asker: Asker | None = None
    draw: str | None = None
    album: tuple[AlbumItem, ...] = ()


@dataclass(frozen=True)
class AlbumItem:
    """An item of an album (photos sent together, stored as one message): the album's key in its
    chat, the item's platform message id, and the item as its adapter reads it back (the core
    only keeps it). A platform may post an album item by item, maybe each to another process
    behind a load balancer (a Telegram album by webhook, SPEC 12)."""

    album: str
    platform_message_id: str
    item: str


@dataclass(frozen=True)
class AlbumSoFar:
    """An album: the platform id its message is stored under (its first item's) and every item
    so far, as their adapter reads them back, in no particular order."""

    stored_as: str
    items: list[str]


@dataclass(frozen=True)
class Button:
    label: str
    action: str  # opaque to an adapter; names the person it belongs to, carries no secret (bot/buttons.py)
    danger: bool = False


@dataclass(frozen=True)
class TurnRef:
    """A turn, as an adapter holds it: handed back as it came (delivery, Regenerate). In button
    data it is written as its number (`str`) and read back by `TurnRef.parse`, the one place that
    reads it."""

    id: int

    def __str__(self) -> str:
        return str(self.id)

    @classmethod
    def parse(cls, text: str) -> TurnRef | None:
        """The turn a button names, or None when the text is not one (stale, forged, garbled)."""
        number = parse_number(text)
        return cls(number) if number is not None else None


class Kind(enum.Enum):
    """What an outgoing message is (`Reply.kind`)."""

    ANSWER = "answer"  # the character's answer, in its voice
    REFUSAL = "refusal"  # the gate or a limit said no: the bot's own words
    ERROR = "error"  # something failed (the model, the store): the bot's own words
    NOTICE = "notice"  # the bot telling something unprompted (a rebuild finished)
    SILENCE = "silence"  # nothing to send: answered before or elsewhere, or kept out of a shared chat


@dataclass(frozen=True)
class VoiceNote:
    """A reply spoken (SPEC 16): OGG/Opus audio with what a platform shows of it — its length,
    and (when asked for) a waveform of up to 256 amplitudes (0-255); else b""."""

    audio: bytes = field(repr=False)
    seconds: float
    waveform: bytes = field(repr=False)


@dataclass(frozen=True)
class Picture:
    """A picture a reply carries (SPEC 20): the image as the server drew it, never stored."""

    data: bytes = field(repr=False)
    filename: str  # picture.png, picture.jpeg: its kind
    scene: str  # what was drawn, in words (the console names it)


@dataclass(frozen=True)
class Attachment:
    filename: str
    data: bytes


Media = VoiceNote | Picture | Attachment  # what a part is once made; each adapter's `send_media` sends each kind


@dataclass(frozen=True)
class Text:
    """The words of an outgoing message (split at the platform's limit as it is sent)."""

    text: str


@dataclass(frozen=True)
class ToolLine:
    """A small line under the words, never stored: what the turn's tools did (SPEC 18 `[tools]
    show`: "🎲 2d6+1 → 9 · 🔎 searched: tide tables Brest")."""

    line: str


@dataclass(frozen=True)
class Buttons:
    """Buttons under the words' last message (Regenerate; a check-in's choices)."""

    rows: tuple[tuple[Button, ...], ...]


@dataclass(frozen=True)
class Part:
    """What goes out after the words: a voice note (SPEC 16), a picture (SPEC 20), a file. `made(waveform)`
    makes it as it is sent — the words never wait for it — with a waveform where the platform shows
    one; None when it could not be made (the words stand alone). `makes`: the kind of media it makes
    (a console that cannot show a voice note never makes one); `what` names it in words (for a log
    line, or where it cannot be shown)."""

    what: str  # "a voice note", "a picture"
    makes: type[VoiceNote] | type[Picture] | type[Attachment]
    made: Callable[[bool], Awaitable[Media | None]] = field(compare=False, repr=False)


Segment = Text | ToolLine | Buttons | Part


@dataclass(frozen=True)
class Reply:
    """Everything the bot says, made of typed segments (words, the tool line, buttons, parts) with
    a `kind` (an answer, a refusal, an error, a notice, silence). Every path out — a turn, a
    Regenerate, a crash's recovery, a letter (check-in, reminder), a notification, the console —
    hands one to its adapter's one delivery, which sends all of it and then reports it shown or
    undelivered. Made by `answer`, `refusal`, `error`, `notice` and `silence`, whole: never changed
    after.

    `turn` is the opaque handle of the turn that made it (None for anything else); `on_behalf`: who
    the turn answered for (the person whose message started a scene's chain), handed back with
    `Core.delivered` so a chain that follows answers for them too. Silence is sent as nothing: the
    message was delivered before (a redelivered update) and is answered there, or another character
    of the scene answered it, or a person wrote before a scene's next character could answer, or
    `[access]` keeps the asker out in a shared chat."""

    kind: Kind
    segments: tuple[Segment, ...] = ()
    turn: TurnRef | None = None
    on_behalf: Asker | None = None

    @classmethod
    def answer(cls, text: str, *, turn: TurnRef | None = None, buttons: Sequence[Sequence[Button]] = (),
               parts: Sequence[Part] = (), tool_line: str = "", on_behalf: Asker | None = None) -> Reply:
        segments: list[Segment] = [Text(text)]
        if tool_line:
            segments.append(ToolLine(tool_line))
        if buttons:
            segments.append(Buttons(tuple(tuple(row) for row in buttons)))
        return cls(Kind.ANSWER, (*segments, *parts), turn=turn, on_behalf=on_behalf)

    @classmethod
    def refusal(cls, text: str) -> Reply:
        return cls(Kind.REFUSAL, (Text(text),))

    @classmethod
    def error(cls, text: str) -> Reply:
        return cls(Kind.ERROR, (Text(text),))

    @classmethod
    def notice(cls, text: str) -> Reply:
        return cls(Kind.NOTICE, (Text(text),))

    @classmethod
    def silence(cls) -> Reply:
        return cls(Kind.SILENCE)

    @property
    def text(self) -> str:
        return "\n\n".join(segment.text for segment in self.segments if isinstance(segment, Text))

    @property
    def note(self) -> str:
        return " · ".join(segment.line for segment in self.segments if isinstance(segment, ToolLine))

    @property
    def buttons(self) -> list[list[Button]]:
        return [list(row) for segment in self.segments if isinstance(segment, Buttons) for row in segment.rows]

    @property
    def parts(self) -> list[Part]:
        return [segment for segment in self.segments if isinstance(segment, Part)]

    @property
    def is_error(self) -> bool:
        """A refusal or an error: the bot speaking, never the character."""
        return self.kind in (Kind.REFUSAL, Kind.ERROR)

    @property
    def silent(self) -> bool:
        return self.kind is Kind.SILENCE


@dataclass(frozen=True)
class Form:
    """A text the person is asked to write (a Discord modal; elsewhere, instructions)."""

    title: str
    label: str
    prefill: str
    action: str  # submitted with the text through CommandRouter.submit
    max_length: int
    instructions: str  # for platforms without forms: the command to send instead


@dataclass
class CommandResult:
    """What a /memory command (or a button press) shows the person, privately."""

    text: str
    buttons: list[list[Button]] = field(default_factory=list)
    attachment: Attachment | None = None
    form: Form | None = None
    ok: bool = True
    refused: bool = False  # a button or form that is not the presser's, or no longer valid
    regenerate: TurnRef | None = None  # a Regenerate button: the turn whose reply to replace (Core.regenerate)
    apart: bool = False  # a button's answer shown as a message of its own: the pressed one keeps its text


class SettingProblem(ValueError):
    """A config key with a bad value, found by a rule across keys (a platform's section, or the
    core's): `key` is named in the one-line config error."""

    def __init__(self, key: str, text: str):
        super().__init__(f"{key}: {text}")
        self.key, self.text = key, text


class Unreachable(Exception):
    """The platform will not deliver to this person (they blocked the bot: Telegram's 403,
    Discord's "cannot send messages to this user")."""


class PlatformRefused(Exception):
    """A platform error that cannot heal (a revoked or wrong token: HTTP 401). The adapter that
    raises it stops for good: retrying would only repeat it (SPEC section 9)."""


@dataclass(frozen=True)
class CommandContext:
    """Who asks, and where: taken from the platform event, never from model output. `identity`
    is None when the event comes from nobody in particular (a chat, a bot: SPEC section 2).
    `asker` is what `[access]` judges for the character the command acts on (the console's: its
    owner's, always let in; None: let in nowhere)."""

    conversation: ConversationKey
    identity: Identity | None
    display_name: str
    asker: Asker | None = None


@dataclass(frozen=True)
class Asker:
    """Who writes, and where, as the platform event says, for `[access]` (SPEC 13). `user_id` is
    None for nobody in particular (a chat or channel writing, a bot)."""

    platform: str  # a declared platform's name (the console is its owner's: always let in)
    user_id: str | None
    places: tuple[str, ...] = ()  # the chat (and the chat a message is sent as); or the channel, and a thread's parent
    roles: tuple[str, ...] = ()  # Discord roles: in the guild; in a DM, in every server the bot shares
    age_restricted: bool = False  # where they write allows age-restricted characters (SPEC 17)
    private: bool = False  # a one-to-one chat with the bot (a DM), as the platform says


@dataclass(frozen=True)
class QueuedTurn:
    """A turn waiting in its conversation's line to be answered (a message a crash cut off, or
    a character's reply another character answers in a scene). Adapters hand it back as they got
    it; it never leaves the process."""

    message_id: int  # the stored message it answers
    ticket: int  # its place in the line


@dataclass(frozen=True)
class CutOff:
    """A reply a crash cut off, claimed by the adapter of its platform (SPEC 9): answered again
    when `fresh` (Core.answer_again), else its partial message says it was interrupted."""

    queued: QueuedTurn | None  # queued again to be answered; None: too old, only marked
    conversation: ConversationKey
    asked: str | None  # the platform id of the message it answers
    asked_text: str
    partial_message_id: str | None  # where the cut-off reply shows, if it showed

    @property
    def fresh(self) -> bool:
        return self.queued is not None


@dataclass(frozen=True)
class OptionSpec:
    """One option of a command. Discord shows it as a typed slash-command option; in typed text
    (Telegram, the console) it follows the command as a word, or as `name:value`."""

    name: str
    description: str
    kind: str = "text"  # "text", "number" (ASCII digits, `low` to `high`) or "yes_no"
    required: bool = False
    choices: tuple[str, ...] = ()
    low: int | None = None
    high: int | None = None
    rest: bool = False  # typed text: takes the rest of the line, spaces and all
    keyword: bool = False  # typed text: written after its own name (`summary edit S3 …`)
    in_usage: bool = True  # shown in the command's /help line (`character:`, said once at the end instead)
    shown: str = ""  # what the /help line calls its value (default: its name): `edit <entry>`
    marked: str = ""  # typed text: a word starting with this is this option's (`#12` for a memory's number)


@dataclass(frozen=True)
class CommandSpec:
    """One command, declared once (bot/commands/table.py): the text parser, /help, Discord's
    slash-command tree and Telegram's setMyCommands are all made from these."""

    name: str
    description: str  # a platform's menu, Discord's command description
    help: str = ""  # the /help line, when it says more than the description
    options: tuple[OptionSpec, ...] = ()
    subcommands: tuple["CommandSpec", ...] = ()  # a group: /memory view, /memory add, …
    only: str = ""  # offered only on platforms with this trait ("chat", "text_commands"); "": on every one
    message_menu: str = ""  # on Discord, a message's Apps menu item of this name instead
    key: str = ""  # what the core runs it by, where two groups have a subcommand of one name

    def offered_on(self, platform: str) -> bool:
        return not self.only or getattr(traits_of(platform), self.only)

    @property
    def handler(self) -> str:
        """The name `Core.run` takes for it."""
        return self.key or self.name

    def usage(self) -> str:
        """`<id> <text>`, `[scope] [page]`, `<on|off>`: the options as /help shows them."""
        words = []
        for option in self.options:
            if not option.in_usage:
                continue
            value = "|".join(option.choices) if option.required and option.choices else option.shown or option.name
            word = f"{option.name} <{value}>" if option.keyword else f"<{value}>" if option.required else value
            words.append(word if option.required else f"[{word}]")
        return " ".join(words)


# Receives the whole reply text so far; returns the platform id of the message that now shows it
# when it created one (so a reply a crash cuts off can be recovered), else None.
ReplySink = Callable[[str], Awaitable["str | None"]]

# An adapter's way to tell a person something unprompted (a rebuild finished): (the
# conversation, text); it ignores conversations of other platforms and characters.
Notifier = Callable[[ConversationKey, str], Awaitable[None]]


class FirstWriter(Protocol):
    """An adapter's way to write first in a one-to-one conversation (check-ins, SPEC 14)."""

    platform: str
    character_name: str  # the character it runs, as the config spells it

    async def asker_for(self, key: ConversationKey, user_id: str) -> Asker | None:
        """Who this person is there, as a message they would send would say (for the gate);
        None when the platform cannot tell now (then they are not let in)."""

    async def write_first(self, key: ConversationKey, letter: Reply, stale: Sequence[str] = ()) -> list[str]:
        """Send the letter (words and buttons; parts too — a picture, a voice note — through the same
        one delivery as a reply); the platform ids its words show as. Raises Unreachable when refused. Once
        it is sent, the buttons of the `stale` messages go (the Regenerate of the reply before:
        the latest reply shown carries the one button that works)."""


class Voice(Protocol):
    """An adapter through which a character speaks in a scene (SPEC 15): it answers a message the
    core gives it to answer, and continues a scene when another character's reply names its
    character."""

    platform: str
    character_name: str

    async def answer_here(self, message: IncomingMessage) -> None:
        """Answer the message (addressed to this character) where it was written."""

    async def can_speak(self, key: ConversationKey) -> bool:
        """Whether this character can post in that chat (Telegram: its bot is a member of the
        group; Discord: its bot, or the host's webhook, may post there)."""

    async def continue_scene(self, key: ConversationKey, turn: QueuedTurn, on_behalf: Asker | None) -> None:
        """Answer another character's reply, as the queued turn `turn` (Core.answer_queued), on
        behalf of the person whose message started the chain."""


class Conversation(Protocol):
    """A conversation's messages and replies: what every chat adapter asks (SPEC 3-5, 9)."""

    def character_name(self, name: str) -> str:
        """The configured name of a character (as the config spells it)."""

    async def handle(self, message: IncomingMessage, on_text: ReplySink | None = None) -> Reply:
        """Store the message and answer it (SPEC 3-5, 9, 11, 13)."""

    async def heard(self, key: ConversationKey) -> None:
        """A person wrote in a shared chat without addressing the character (nothing is stored
        or answered): a scene's chain there ends (SPEC 15)."""

    async def delivered(self, reply: Reply, platform_message_ids: list[str]) -> list[str]:
        """The adapter delivered `reply` as these platform messages. Returns the messages of the
        conversation's reply before it, whose Regenerate button should go."""

    async def undelivered(self, reply: Reply) -> None:
        """The platform refused `reply` (or delivering it failed): it is taken back, as if never
        said (SPEC 15, "What was not shown was not said")."""

    async def edited(self, message: IncomingMessage) -> bool:
        """A person edited a message (`message` as it reads now, with what came with it): the
        stored one changes, stored as a new one would be (a command is never run again)."""

    async def deleted(self, key: ConversationKey, platform_message_id: str) -> bool: ...

    async def join_album(self, key: ConversationKey, item: AlbumItem) -> AlbumSoFar | None:
        """A later item of an album (its first was stored with `IncomingMessage.album`), in any
        process: added to it once, while it is gathered; the album so far, to be stored as an
        edit of its message. None when no such album is gathered (never begun, or its turn took
        it already): the item is a message of its own."""

    async def album_size(self, key: ConversationKey, album: str) -> int:
        """How many items of the album are gathered (0: none is), for its first item's turn to
        wait while more come."""

    async def end_album(self, key: ConversationKey, album: str) -> list[str]:
        """The album's turn takes every item gathered (waiting for one being added); a later
        item is a message of its own."""

    async def edit_album_item(self, key: ConversationKey, item: AlbumItem) -> AlbumSoFar | None:
        """An album's item edited (its caption, SPEC 7): kept as it reads now; the album with
        every item, to be stored again as an edit of its message (None: no stored album holds it)."""

    async def left_chat(self, platform: str, chat_id: str, character: str) -> None:
        """The character's bot is no longer a member of a group: it leaves the group's scenes and
        witnesses nothing said there until it is brought in again (SPEC 22)."""

    async def greet(self, key: ConversationKey, speaker_name: str, choice: str = "") -> Reply:
        """The character's greeting (`choice`: "2", "3" … for its alternate greetings); an
        error reply (in the bot's words, not the character's) for a greeting it does not have."""

    def other_greetings(self, key: ConversationKey, choice: str = "") -> str | None:
        """The line telling how to see the character's other greetings, if it has any."""

    async def left_off(self, key: ConversationKey, count: int = 2) -> list[tuple[str, str]]:
        """The last messages of a conversation going on, oldest first (speaker, text); none for
        a new one."""


class Regenerating(Protocol):
    """The Regenerate button (SPEC 5): only the person a reply answered may replace it."""

    async def regenerate_refusal(self, key: ConversationKey, presser: Identity, turn: TurnRef,
                                 asker: Asker | None) -> str | None:
        """Why this person (`asker`, where they press) may not regenerate that reply now; None if
        they may. The gate decides for the reply's character, as for a message."""

    async def shown_as(self, turn: TurnRef) -> list[str]:
        """The platform messages a turn's reply shows as."""

    async def regenerate(self, key: ConversationKey, presser: Identity, turn: TurnRef, asker: Asker | None,
                         on_text: ReplySink | None = None) -> Reply:
        """Replace the latest reply, undoing its memory writes (SPEC 5). A chain it starts is
        the presser's (`asker`), under each character's rules."""


class Recovery(Protocol):
    """Replies a crash cut off, and lines a gone process held up (SPEC 9)."""

    async def cut_off(self, platform: str, character: str) -> list[CutOff]:
        """Claim the replies a crash cut off on this platform for this character."""

    async def answer_again(self, cut_off: CutOff, on_text: ReplySink | None = None) -> Reply: ...

    async def stray_found(self, timeout_s: float) -> None:
        """Return when this process found a gone process's turn holding a line up (recover now),
        or after `timeout_s`."""


class Commands(Protocol):
    """/memory, /link, /forgetme and their buttons and forms (SPEC 6), declared once in a table."""

    async def command(self, ctx: CommandContext, text: str) -> CommandResult:
        """A command typed as text (`/memory add …`, `/link CODE`, `/help`)."""

    async def run(self, ctx: CommandContext, name: str, options: dict[str, Any]) -> CommandResult:
        """A command with typed options (a Discord slash command)."""

    async def press(self, ctx: CommandContext, action: str) -> CommandResult:
        """A button was pressed (its action, as the core made it)."""

    async def submit(self, ctx: CommandContext, action: str, text: str) -> CommandResult:
        """A form came back with the person's text."""

    async def remember(self, ctx: CommandContext, platform_message_id: str) -> CommandResult:
        """Remember this (Discord) / /remember in reply to a message (Telegram)."""

    def help_text(self, platform: str) -> str:
        """/help on this platform, made from the command table."""

    def command_table(self) -> tuple[CommandSpec, ...]:
        """Every command, as declared once: adapters build their menus and trees from it."""


class PrivateAnswers(Protocol):
    """Telegram: a command asked in a group is answered in the person's DM, and its buttons act
    in the group."""

    async def answered_in(self, platform: str, chat_id: str, platform_message_ids: list[str],
                          key: ConversationKey) -> None:
        """These private messages answer a command asked in `key` (their buttons act there)."""

    async def asked_in(self, platform: str, chat_id: str, platform_message_id: str,
                       character: str) -> ConversationKey | None: ...


class Gatekeeping(Protocol):
    """Who may reach which character (SPEC 13), as the core's gate decides."""

    def lets_in(self, character: str, asker: Asker) -> bool:
        """[access] (the core's gate, bot/access/gate.py): whether both the global rules and the
        character's own let `asker` in."""

    def rules_name_roles(self, character: str | None = None) -> bool:
        """Whether an [access] rule for this character (None: for any) names a Discord role."""


class Coordination(Protocol):
    """What several processes on one database do once (SPEC 9)."""

    async def first_delivery(self, update_key: str) -> bool:
        """True the first time any process sees this platform update (SPEC 9)."""

    async def once_per_change(self, key: str, fingerprint: str, action: Callable[[], Awaitable[None]]) -> None:
        """Run `action` in one process when `fingerprint` differs from the one the last run left
        (Discord's slash-command sync)."""


class Presence(Protocol):
    """What an adapter joins while it runs: notifications, check-ins (SPEC 14), a scene's voices
    (SPEC 15)."""

    def listening(self, notifier: Notifier) -> AbstractContextManager[None]:
        """Deliver background notifications to `notifier` while the block runs."""

    def writing_first(self, writer: FirstWriter) -> AbstractContextManager[None]:
        """Deliver the character's check-ins on the writer's platform while the block runs."""

    def voicing(self, voice: Voice) -> AbstractContextManager[None]:
        """The character speaks through `voice` in scenes on its platform while the block runs."""

    async def answer_queued(self, key: ConversationKey, turn: QueuedTurn, on_behalf: Asker | None,
                            on_text: ReplySink | None = None) -> Reply:
        """Answer a scene's queued turn (Voice.continue_scene): a character's reply to another
        character's, unless a person wrote in between, or the chain's starter may not reach this
        character (then a Reply that sends nothing)."""

    def portrait(self, character: str) -> bytes | None:
        """The character's picture (a PNG card's image), for an avatar; None without one."""


# -- the memory page (SPEC 21): what it shows, typed; the web adapter only renders it ----------
@dataclass(frozen=True)
class PageMemory:
    id: int
    content: str
    pinned: bool
    marks: tuple[str, ...]  # "global", "recent", "saved by you", … as /memory view shows them
    story: str = ""  # where it came from, and when it last reached a prompt (SPEC 21)
    used_in: tuple[int, ...] = ()  # the replies shown on the page whose prompt held it (their turn ids)


@dataclass(frozen=True)
class PageChange:
    """One change to a memory in the last 30 days (SPEC 21 "History and undo")."""

    id: int
    at: str  # when, in words
    who: str  # "you", or the character mid-reply
    what: str  # "deleted #3 “…”"
    undoable: bool  # the memory's latest change, not taken back
    undone: bool  # taken back (an undo, Regenerate, a failed reply)


@dataclass(frozen=True)
class PageReply:
    """A reply shown to the person, with what its prompt held (SPEC 21 "What a reply used")."""

    turn_id: int
    at: str  # when, in words
    opening: str  # its first words
    memories: tuple[int, ...]  # the saved memories in its prompt
    layers: str  # the summary tiers, recalled passages, tools and tokens, in one line


@dataclass(frozen=True)
class PageCharacter:
    id: int
    name: str
    memories: tuple[PageMemory, ...]  # this character's own, pinned first, then newest
    learning: bool  # Learn from chat
    replies: tuple[PageReply, ...] = ()  # its latest replies to the person, newest first


@dataclass(frozen=True)
class PageSummary:
    """One of the person's DM conversations: its summary, tier by tier (read only)."""

    character: str
    platform: str
    entries: tuple[tuple[str, str], ...]  # (tier, text), oldest first


@dataclass(frozen=True)
class PageReminder:
    id: int
    when: str  # in the person's zone
    words: str


@dataclass(frozen=True)
class PersonPage:
    characters: tuple[PageCharacter, ...]
    global_memories: tuple[PageMemory, ...]  # shared with every character
    persona: str | None
    summaries: tuple[PageSummary, ...]
    reminders: tuple[PageReminder, ...]
    usage: str  # today and this month, as /usage says it
    owner: bool  # the owner's page is theirs too
    denied: tuple[str, ...] = ()  # characters the link showed that [access] now denies the person
    history: tuple[PageChange, ...] = ()  # every change to their memories in the last 30 days, newest first


@dataclass(frozen=True)
class TotalsRow:
    label: str
    turns: int
    tokens_in: int
    tokens_out: int
    people: int
    checkins: int


@dataclass(frozen=True)
class OwnerPage:
    today: tuple[TotalsRow, ...]  # everyone first, then each character
    week: tuple[TotalsRow, ...]
    spenders: tuple[tuple[str, int], ...]  # the last 7 days, most first
    days: tuple[tuple[str, int, int], ...]  # the last 30 days: (day, tokens in, tokens out), every day
    characters: tuple[tuple[str, str, bool], ...]  # (name, its platforms, age-restricted)
    reminders_sent: tuple[int, int]  # today, the last 7 days (the days of `today` and `week`)


@dataclass(frozen=True)
class PageVisit:
    """A live session of the memory page, as the database has it."""

    token: str
    person_id: int
    characters: tuple[int, ...]
    csrf: str  # every form carries it back


@dataclass(frozen=True)
class PageNotice:
    """What one change on the page did, in the command's own words. `missing`: the memory or
    reminder named is not the person's (or not there): the page answers 404."""

    text: str
    ok: bool = True
    missing: bool = False


@dataclass(frozen=True)
class PageEntry:
    """What opening a link gave: a session token, or a refusal (`too_many`: wait, 429)."""

    token: str | None
    lasts_s: int = 0  # the session's time, for the cookie's Max-Age
    refusal: str = ""
    too_many: bool = False


class MemoryPage(Protocol):
    """The memory page (SPEC 21): any process serves it from the database."""

    async def enter(self, code: str, address: str, via: str | None = None) -> PageEntry:
        """Spend a one-time link's code for a session; a wrong one is counted against `address`
        (and `via`, the trusted proxy it came through)."""

    async def visit(self, token: str) -> PageVisit | None:
        """The session of a cookie's token, checked in the database; None: no page."""

    async def leave(self, token: str) -> None: ...

    async def person_page(self, visit: PageVisit) -> PersonPage: ...

    async def owner_page(self, visit: PageVisit) -> OwnerPage | None:
        """None: the visitor is not one of `[owner] ids`."""

    async def act(self, visit: PageVisit, action: str, fields: dict[str, str]) -> PageNotice:
        """One change, through the same code as the `/memory` command (same limits and rules)."""

    async def export(self, visit: PageVisit, format: str = "json") -> Attachment:
        """Everything the visitor's memories and persona hold: "json" (what `import_export` reads)
        or "markdown"."""

    async def import_export(self, visit: PageVisit, text: str) -> PageNotice:
        """A JSON export merged into the visitor's own memories and persona (SPEC 21)."""

    async def forget(self, visit: PageVisit) -> bool:
        """/forgetme, confirmed; False: nothing was deleted (NOTHING_FORGOTTEN)."""


@dataclass(frozen=True)
class Core:
    """All an adapter may ask of the core: one service per subject, each the small protocol above
    (bot/core.py builds them). A part of an adapter asks the one it needs:
    `core.conversation.handle(…)`, `core.commands.press(…)`."""

    conversation: Conversation
    regenerating: Regenerating
    recovery: Recovery
    commands: Commands
    private_answers: PrivateAnswers
    gatekeeping: Gatekeeping
    coordination: Coordination
    presence: Presence
    page: MemoryPage
