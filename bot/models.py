"""Platform-neutral types that pass between the adapters and the core.

An adapter turns a platform event into an `IncomingMessage`, hands it to the turn handler and
renders the `Reply` (or a `CommandResult` from the /memory service) it gets back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
class IncomingMessage:
    """What the core needs to know about a message addressed to the character.

    `speaker` is None for *nobody in particular* (SPEC section 2): a message sent on behalf of a
    chat (an anonymous group admin, "send as channel", a channel post) or by a bot or webhook.
    The character may answer it, but no saved memories are read or written for it.
    `unseen` names what came with the text that the character cannot read ("a photo")."""

    conversation: ConversationKey
    speaker: Identity | None
    speaker_name: str
    text: str
    platform_message_id: str | None = None
    unseen: str | None = None


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
    """The character's answer to one message (or a plain error)."""

    text: str
    is_error: bool = False
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
