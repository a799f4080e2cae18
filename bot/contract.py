"""What adapters may use of the core: the platform-neutral types that pass between them.

An adapter turns a platform event into an `IncomingMessage` (or a `CommandContext` for a
command), hands it to the turn handler (or the /memory service) and renders the `Reply` (or
`CommandResult`) it gets back. It streams a reply through a `ReplySink`, hears about background
results (a finished rebuild) through a `Notifier`, and raises `PlatformRefused` when its
platform refuses it for good.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable

if TYPE_CHECKING:
    from storage.ports import ConversationRow

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
    character cannot read it."""

    name: str
    content_type: str | None
    size: int | None
    what: str
    read: Callable[[int], Awaitable[bytes]] = field(compare=False, repr=False)


@dataclass(frozen=True)
class IncomingMessage:
    """What the core needs to know about a message addressed to the character.

    `speaker` is None for *nobody in particular* (SPEC section 2): a message sent on behalf of a
    chat (an anonymous group admin, "send as channel", a channel post) or by a bot or webhook.
    The character may answer it, but no saved memories are read or written for it.
    `files` are what came with it to read or look at (bot/attachments.py); `unseen` names
    anything else that came with the text which the character cannot read ("a sticker").
    `kept` is called once the message is stored and queued for its turn, or refused: a webhook
    acknowledges the update then, so the platform delivers again what a crash lost, and updates
    posted one after another to different processes keep their order."""

    conversation: ConversationKey
    speaker: Identity | None
    speaker_name: str
    text: str
    platform_message_id: str | None = None
    unseen: str | None = None
    files: tuple[IncomingFile, ...] = ()
    kept: Callable[[], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Button:
    label: str
    action: str  # opaque, signed with the owner's person id (see bot/actions.py)
    danger: bool = False


@dataclass(frozen=True)
class Attachment:
    filename: str
    data: bytes


@dataclass
class Reply:
    """The character's answer to one message (or a plain error). `duplicate`: the message was
    delivered before (a redelivered update) and is answered there: send nothing."""

    text: str
    is_error: bool = False
    duplicate: bool = False
    turn_id: int | None = None
    conversation_id: int | None = None
    message_id: int | None = None  # the stored reply
    buttons: list[list[Button]] = field(default_factory=list)


@dataclass(frozen=True)
class Form:
    """A text the person is asked to write (a Discord modal; elsewhere, instructions)."""

    title: str
    label: str
    prefill: str
    action: str  # submitted with the text through MemoryCommands.submit
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


class PlatformRefused(Exception):
    """A platform error that cannot heal (a revoked or wrong token: HTTP 401). The adapter that
    raises it stops for good: retrying would only repeat it (SPEC section 9)."""


@dataclass(frozen=True)
class CommandContext:
    """Who asks, and where: taken from the platform event, never from model output. `identity`
    is None when the event comes from nobody in particular (a chat, a bot: SPEC section 2)."""

    conversation: ConversationKey
    identity: Identity | None
    display_name: str


# Receives the whole reply text so far; returns the platform id of the message that now shows it
# when it created one (so a reply a crash cuts off can be recovered), else None.
ReplySink = Callable[[str], Awaitable["str | None"]]

# An adapter's way to tell a person something unprompted (a rebuild finished):
# (conversation, person id, text); it ignores conversations of other platforms.
Notifier = Callable[["ConversationRow", "int | None", str], Awaitable[None]]
