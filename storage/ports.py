"""The store, as small ports by kind of data: what the core may ask of storage, and the rows it
gets back. Every backend (SQLite, PostgreSQL) implements every port, and one contract suite
(`tests/storage_contract/`) tests them all.

Correctness lives in the database, never in one process: ids come from the database, a
conversation's message order is assigned in SQL when a message is stored, every check-then-write
(a memory cap) happens inside one write transaction, and work that must run once is claimed
through `Coordination`, and a conversation's running turn is its lock. Rules with numbers (the caps) are the core's; it hands them to the
store when it opens it (`storage.factory.open_store`).
"""

from __future__ import annotations

import abc
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

ANSWER_ORIGINS_KEPT_S = 30 * 86_400  # a private answer's buttons act in its group for 30 days (maintain)
HISTORY_KEPT_S = 30 * 86_400  # a memory's changes are kept 30 days (SPEC 21 "History and undo")
RECOVER_WITHIN_S = 5 * 60  # an interrupted turn younger than this is answered again (SPEC 9)
SHOWING_S = 60.0  # a reply being sent holds its conversation's line this long at most (SPEC 15; Turns.start_turn)
DELIVERIES_KEPT_S = 2 * 86_400  # Telegram gives up redelivering an update within a day
GLOBAL = "global"
CHARACTER = "character"
SCOPES = (CHARACTER, GLOBAL)


class CapReached(Exception):
    """A memory budget is full. `kind` is 'pinned' or 'unpinned'."""

    def __init__(self, kind: str, limit: int, scope: str, count: int | None = None):
        super().__init__(f"{kind} {scope} memories are at their limit of {limit}")
        self.kind, self.limit, self.scope, self.count = kind, limit, scope, count


class AlreadySaved(Exception):
    """The person already keeps this memory in the scope (`same_words`): it is not saved twice,
    whoever writes it — the person, the AI, a draft or an import. `memory`: the one kept."""

    def __init__(self, memory: MemoryRow):
        super().__init__(f"already saved as #{memory.id}")
        self.memory = memory


def same_words(content: str) -> str:
    """What makes two memories the same one: their words, whatever their case and spacing."""
    return " ".join(content.casefold().split())


class LeftTheLine(Exception):
    """The process is stopping (`Turns.leave_lines`): a waiting turn left its conversation's line,
    its ticket kept queued for the restart or another process."""


class OutOfLine(LookupError):
    """A waiting turn's ticket was taken out of its line: its message was deleted meanwhile (on
    the platform, or with its person's /forgetme). Nothing is left to answer."""


class SummaryStartedAgain(Exception):
    """A summary started again while a pass was writing it — the conversation's (/forgetme,
    `forget_person`), a rebuild's, or a character's own (a rebuild begun): what the pass read
    may hold deleted words, so it writes nothing."""


class PinnedMemory(Exception):
    """The AI tried to change a pinned memory."""


@dataclass(frozen=True)
class MemoryCaps:
    unpinned: int
    pinned: int

    def check(self, pinned: bool, scope: str, count: int) -> None:
        """One more memory in a budget already holding `count`: CapReached when it is full."""
        limit = self.pinned if pinned else self.unpinned
        if count >= limit:
            raise CapReached("pinned" if pinned else "unpinned", limit, scope, count)


# -- rows ---------------------------------------------------------------------------------
# A row read from the database is a named tuple: immutable, read by field name, and built
# about six times faster than a frozen dataclass (a turn builds some 350: memories, messages).
class MemoryRow(NamedTuple):
    id: int
    person_id: int
    character_id: int | None
    content: str
    tokens: int
    pinned: bool
    source: str
    created_at: float
    updated_at: float

    @property
    def scope(self) -> str:
        return GLOBAL if self.character_id is None else CHARACTER


SPOKEN = "🎤"  # how a voice note reads (SPEC 16): its stored text is what was said, unmarked


class MessageRow(NamedTuple):
    id: int
    conversation_id: int
    pos: int  # the message's place in its conversation; a reply directly follows what it answers
    role: str
    person_id: int | None
    speaker_name: str
    content: str
    tokens: int
    platform_message_id: str | None
    created_at: float
    character_id: int | None = None  # a character's message: which character said it (a person's: None)
    spoken: bool = False  # a voice note the person sent, heard (SPEC 16 "In")

    @property
    def said(self) -> str:
        """The message as it reads in a prompt or a list: a voice note marked as spoken."""
        return f"{SPOKEN} {self.content}" if self.spoken else self.content


class MessageSize(NamedTuple):
    """A message's place and its token count, without its words."""

    pos: int
    tokens: int


class TurnRow(NamedTuple):
    id: int
    conversation_id: int
    person_id: int | None
    user_message_id: int
    reply_message_id: int | None
    status: str  # running | done | failed | replaced
    receipt: dict[str, Any] | None
    created_at: float
    partial_message_id: str | None = None  # where the reply showed while it streamed
    character_id: int | None = None  # the character that answers (in a scene, one of several)


class ShownReply(NamedTuple):
    """A turn whose reply was just marked shown, and where the reply before it showed."""

    turn: TurnRow
    shown_before: list[str]  # the platform ids of the reply before it (`Turns.reply_shown`)


class ChangeRow(NamedTuple):
    """One change to a memory (SPEC 21 "History and undo"): `before` and `after` are the memory as
    it was and as it became (None: it was added, or deleted); `character_id` the character that
    made it mid-reply (None: the person); `latest`: no later change of that memory since (only
    such a change may be undone)."""

    id: int
    memory_id: int
    character_id: int | None
    action: str  # add | update | delete | pin | unpin
    before: MemoryRow | None
    after: MemoryRow | None
    at: float
    undone: bool
    latest: bool


class ReplyReceipt(NamedTuple):
    """A reply shown to a person, with what its prompt held (SPEC 21 "What a reply used")."""

    turn_id: int
    character_id: int
    at: float
    reply: str | None  # the reply's text (None: no longer stored)
    receipt: dict[str, Any]


class ConversationRow(NamedTuple):
    id: int
    platform: str
    chat_id: str
    thread_id: str
    character_id: int
    is_shared: bool


class SummaryRow(NamedTuple):
    """One entry of a conversation summary tier: 'recent', 'merged' or 'long_term'."""

    id: int
    conversation_id: int
    tier: str
    content: str
    tokens: int
    first_pos: int
    last_pos: int
    edited: bool = False


@dataclass(frozen=True)
class SummaryState:
    summarized_pos: int
    generation: int
    failures: int
    retry_at: float | None
    rebuilding: bool = False  # a rebuild (running or stopped) exists: new messages wait


class RebuildRow(NamedTuple):
    conversation_id: int
    person_id: int | None
    generation: int
    progress_pos: int
    status: str  # running | failed
    error: str | None


@dataclass(frozen=True)
class MemoriesInPlay:
    """Pinned entries of the scopes in play, and unpinned ones per scope, newest first."""

    pinned: list[MemoryRow] = field(default_factory=list)
    unpinned: dict[str, list[MemoryRow]] = field(default_factory=dict)


@dataclass(frozen=True)
class InterruptedTurn:
    """A turn a crash cut off mid-reply, waiting for its platform's adapter (SPEC section 9)."""

    turn: TurnRow
    conversation: ConversationRow
    user_message: MessageRow


@dataclass(frozen=True)
class MergeReport:
    unpinned_pins: int  # pinned entries over the pin budget that became unpinned
    kept_once: int = 0  # memories both accounts kept, now one (AlreadySaved)


# -- ports --------------------------------------------------------------------------------
class People(abc.ABC):
    """People, their platform identities, linking and forgetting (SPEC sections 2 and 6)."""

    @abc.abstractmethod
    async def person_for_identity(self, platform: str, user_id: str) -> int:
        """The person behind a platform identity, created on first sight."""

    @abc.abstractmethod
    async def identities_of(self, person_id: int) -> list[tuple[str, str]]: ...

    @abc.abstractmethod
    async def create_link_code(self, person_id: int, platform: str, code: str, expires_at: float) -> None:
        """A new one-time code for the person, made on `platform`; it replaces their older ones."""

    @abc.abstractmethod
    async def link_code(self, code: str, now: float) -> tuple[int, str] | None:
        """(owner, platform it was made on) of a code that has not expired."""

    @abc.abstractmethod
    async def add_link_failure(self, person_id: int, at: float) -> None: ...

    @abc.abstractmethod
    async def link_failures_since(self, person_id: int, since: float) -> int: ...

    @abc.abstractmethod
    async def merge_persons(self, keep: int, absorb: int) -> MergeReport:
        """Move everything of `absorb` to `keep` in one transaction, and delete `keep`'s link
        codes. Raises CapReached when the unpinned entries of a scope would exceed their cap;
        pins over the pin cap become unpinned (counted in the report)."""

    @abc.abstractmethod
    async def persona(self, person_id: int) -> Persona | None: ...

    @abc.abstractmethod
    async def set_persona(self, person_id: int, persona: Persona | None) -> None:
        """Set (None: clear) the person's persona."""

    @abc.abstractmethod
    async def profile(self, person_id: int, character_id: int | None = None) -> Profile:
        """What a turn reads of the person in one look: their persona and time zone, and whether
        `character_id` learns from chat with them (Learn from chat: on unless they turned it off)."""

    @abc.abstractmethod
    async def set_time_zone(self, person_id: int, zone: str | None) -> None:
        """The person's time zone, an IANA name (None: the deployment's, `[limits] timezone`)."""

    @abc.abstractmethod
    async def forget_person(self, person_id: int, day: str) -> list[int] | None:
        """Delete every row about the person: identities, memories, settings, their messages
        and the replies to them, their turns, and their one-to-one conversations. Only their
        spend of `day` (today) stays, as counts against each platform id, until the day is
        over (their allowance does not start afresh). Every summary of the shared conversations
        they spoke in goes too, and they are summarized again without them (a rebuild set
        running: storage/sql/summaries.py `start_over`); returns those conversations. None: the
        person is not there (their accounts were just linked into another person, whose id
        their identities now carry): nothing is deleted."""


class Persona(NamedTuple):
    """Who a person is in the story, as they wrote it (SPEC 17), with its tokens."""

    text: str
    tokens: int


class Profile(NamedTuple):
    persona: Persona | None
    time_zone: str | None  # an IANA name; None: the deployment's
    learns: bool = True  # Learn from chat, with the character asked about (`Memories.learning_enabled`)


class DayTotals(NamedTuple):
    turns: int
    tokens_in: int
    tokens_out: int
    people: int  # people with at least one turn
    checkins: int


class Spend(NamedTuple):
    """What one model call cost on a person's behalf, as it is added to their day (SPEC 17)."""

    person_id: int
    character_id: int
    day: str  # YYYY-MM-DD in [limits] timezone
    tokens_in: int
    tokens_out: int
    turns: int = 1  # a turn's later tool rounds count none


class Usage(abc.ABC):
    """What is spent on each person's behalf (SPEC 17): turns and their tokens, and check-ins,
    by day (`YYYY-MM-DD` in [limits] timezone) and character, across processes."""

    @abc.abstractmethod
    async def add_turn(self, person_id: int, character_id: int, day: str, tokens_in: int, tokens_out: int,
                       turns: int = 1) -> None:
        """A model call made for the person (a turn, Regenerate, a draft), with its tokens; a
        turn's tool rounds are written as they end, the later ones counting `turns = 0`, and its
        last call with the turn's end (`Turns.finish_turn`, `Turns.fail_turn`)."""

    @abc.abstractmethod
    async def add_checkin(self, person_id: int, character_id: int, day: str) -> None: ...

    @abc.abstractmethod
    async def take_picture(self, person_id: int, character_id: int, day: str, per_day: int, tokens: int) -> bool:
        """Count a picture for the person today, with the `tokens` it counts against their
        allowance; False (nothing counted) when they had `per_day` already (counted inside the write,
        across characters and processes)."""

    @abc.abstractmethod
    async def pictures(self, person_id: int, day: str) -> int:
        """The pictures counted for the person that day (a forgotten person's too, on any of their
        platform ids), as `take_picture` counts them."""

    @abc.abstractmethod
    async def give_back_picture(self, person_id: int, character_id: int, day: str, tokens: int) -> None:
        """A picture counted by `take_picture` was never drawn: neither it nor its tokens count."""

    @abc.abstractmethod
    async def spent(self, person_id: int, first_day: str, last_day: str) -> int:
        """The person's tokens (in and out) from `first_day` to `last_day`, both included; a
        forgotten person's spend of the day they left counts for whoever writes from their
        platform ids again."""

    @abc.abstractmethod
    async def hold(self, turn_id: int, person_id: int, day: str, tokens: int, allowance: int) -> bool:
        """Let a running turn hold `tokens` (what it may still spend) against the person's
        allowance: True when what they spent that day plus what their other running turns hold
        is under `allowance` (checked and held at once, in every process); else False."""

    @abc.abstractmethod
    async def notice_once(self, person_id: int, day: str) -> bool:
        """True the first time it is asked for this person and day (any process): tell them."""

    @abc.abstractmethod
    async def totals(self, first_day: str, last_day: str) -> dict[str | None, DayTotals]:
        """The totals of those days by character name, and of all characters (key None)."""

    @abc.abstractmethod
    async def top_spenders(self, first_day: str, last_day: str, limit: int) -> list[tuple[str, int]]:
        """The people who spent most tokens in those days, most first: (display name, tokens)."""

    @abc.abstractmethod
    async def daily(self, first_day: str, last_day: str) -> dict[str, tuple[int, int]]:
        """Tokens in and out of every person together, by day, for the days that have any."""


class Characters(abc.ABC):
    @abc.abstractmethod
    async def ensure_character(self, name: str) -> int: ...

    @abc.abstractmethod
    async def character_memory_counts(self) -> dict[str, int]:
        """Every stored character's name, with how many character-scoped memories it holds."""

    @abc.abstractmethod
    async def remove_character(self, name: str) -> int | None:
        """Delete a character; its character-scoped memories become global (pins over the
        global pin budget become unpinned). Returns how many memories moved, or None when
        there is no such character."""


class Conversations(abc.ABC):
    """Conversations and their messages (SPEC sections 2, 3 and 7)."""

    @abc.abstractmethod
    async def conversation(
        self, platform: str, chat_id: str, thread_id: str | None, character_id: int, is_shared: bool
    ) -> ConversationRow:
        """The conversation, created on first sight. `is_shared` comes from the platform event
        every time: a row that says otherwise is corrected."""

    @abc.abstractmethod
    async def conversation_by_id(self, conversation_id: int) -> ConversationRow | None: ...

    @abc.abstractmethod
    async def private_of(self, person_id: int) -> list[ConversationRow]:
        """The one-to-one conversations (DMs) the person wrote in, oldest first."""

    @abc.abstractmethod
    async def add_greeting(self, conversation_id: int, character_name: str, content: str, tokens: int) -> bool:
        """Store the character's greeting as the conversation's first message, if it has none
        yet (checked in the same transaction). True if it was stored."""

    @abc.abstractmethod
    async def add_user_message(
        self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
        tokens: int, platform_message_id: str | None, album: NewAlbum | None = None,
    ) -> MessageRow | None:
        """Store a message after every message of the conversation stored before it (with its
        `album`'s items, as `Turns.store_and_queue`); None when its platform id is stored
        already (a platform delivered it again)."""

    @abc.abstractmethod
    async def recent_messages(self, conversation_id: int, limit: int, up_to_pos: int | None = None,
                              seen_by: int | None = None) -> list[MessageRow]:
        """The last `limit` messages (at or before `up_to_pos`), newest first. `seen_by`: only the
        messages that character witnessed (SPEC 22; None: every message)."""

    @abc.abstractmethod
    async def count_back(self, conversation_id: int, up_to_pos: int | None, at_most: int,
                         replies_of: int | None = None, seen_by: int | None = None, after_pos: int | None = None
                         ) -> int:
        """How many messages there are at or before `up_to_pos` (None: all), after `after_pos`
        (None: since the first), counted back no further than `at_most`; `replies_of`: only that
        character's (`seen_by` as in `recent_messages`). What a lorebook entry waits for
        (bot/characters/lorebook.py)."""

    @abc.abstractmethod
    async def recent_sizes(self, conversation_id: int, limit: int, seen_by: int | None = None) -> list[MessageSize]:
        """The places and token counts of the last `limit` messages, newest first (`seen_by` as
        in `recent_messages`): what the summary queue weighs after each reply, without the words."""

    @abc.abstractmethod
    async def messages_between(self, conversation_id: int, after_pos: int, before_pos: int | None,
                               limit: int, seen_by: int | None = None) -> list[MessageRow]:
        """Messages with after_pos < pos (< before_pos), oldest first (`seen_by`: witnessed by)."""

    @abc.abstractmethod
    async def count_messages(self, conversation_id: int, after_pos: int, up_to_pos: int | None = None,
                             seen_by: int | None = None) -> int:
        """How many messages have after_pos < pos (<= up_to_pos) (`seen_by`: witnessed by)."""

    @abc.abstractmethod
    async def message_numbers(self, conversation_id: int, positions: Sequence[int]) -> dict[int, int]:
        """Which message of the conversation (1 = its first) sits at each of these places, in one
        statement (a summary's entries name the messages they cover)."""

    @abc.abstractmethod
    async def message(self, message_id: int) -> MessageRow | None: ...

    @abc.abstractmethod
    async def message_by_platform_id(self, conversation_id: int, platform_message_id: str) -> MessageRow | None:
        """The message with that platform id, or the reply one of whose later parts it is."""

    @abc.abstractmethod
    async def messages_by_id(self, conversation_id: int, message_ids: list[int]) -> list[MessageRow]: ...

    @abc.abstractmethod
    async def edit_platform_message(
        self, conversation_id: int, platform_message_id: str, content: str, tokens: int
    ) -> bool: ...

    @abc.abstractmethod
    async def fill_in(self, message_id: int, content: str, tokens: int, spoken: bool = False) -> MessageRow | None:
        """A person's message stored as a placeholder gets its text (a voice note heard after it
        took its place, SPEC 16); None when it is gone meanwhile (deleted, /forgetme)."""

    @abc.abstractmethod
    async def delete_platform_message(self, conversation_id: int, platform_message_id: str) -> bool: ...

    @abc.abstractmethod
    async def set_platform_message_ids(
        self, conversation_id: int, message_id: int, platform_message_ids: list[str]
    ) -> None:
        """The platform ids of the messages a reply was delivered as (a long one is split)."""

    @abc.abstractmethod
    async def platform_message_ids(self, message_id: int) -> list[str]:
        """The platform ids a message shows as, in order (a long reply is split)."""

    @abc.abstractmethod
    async def heard(self, platform: str, chat_id: str, thread_id: str | None) -> None:
        """A person wrote in this shared chat without addressing any character (nothing of it is
        stored): noted, so a scene's chain there ends (SPEC 15). No conversation is made for it."""

    @abc.abstractmethod
    async def written_since(self, message: MessageRow, heard_since: float | None = None) -> bool:
        """Whether anyone wrote in the message's conversation since it: a message placed after
        it, or a person heard there (`heard`) at or after `heard_since` (default: the message's
        time; a reply's turn start, so a person writing while it was being written counts). A
        person's message ends a scene's chain (SPEC 15)."""

    @abc.abstractmethod
    async def set_answer_origin(self, platform: str, chat_id: str, platform_message_ids: list[str],
                                conversation_id: int) -> None:
        """A private answer (in a DM) to a command given in another conversation: its buttons
        act in that conversation, whichever process the press reaches."""

    @abc.abstractmethod
    async def answer_origin(self, platform: str, chat_id: str, platform_message_id: str) -> ConversationRow | None: ...

    # An album, stored as one message with its items (`Turns.store_and_queue` with a `NewAlbum`),
    # each as its adapter reads it back (`item`: the store only keeps it). One a platform posts
    # item by item, maybe each to another process (a Telegram album by webhook, SPEC 12), is
    # gathered here until its turn takes it (`end_album`).
    @abc.abstractmethod
    async def join_album(self, conversation_id: int, album: str, platform_message_id: str,
                         item: str) -> StoredAlbum | None:
        """In one transaction, if the album is being gathered in the conversation: the item is
        added to it (once) and every item so far is returned; None when it is not (never begun,
        or its turn took it already: the item is a message of its own)."""

    @abc.abstractmethod
    async def album_size(self, conversation_id: int, album: str) -> int:
        """How many items the album being gathered holds (0: none is)."""

    @abc.abstractmethod
    async def end_album(self, conversation_id: int, album: str) -> list[str]:
        """In one transaction: every item of the album, which is no longer gathered (an item
        that comes later is a message of its own); [] when none is."""

    @abc.abstractmethod
    async def edit_album_item(self, conversation_id: int, album: str, platform_message_id: str,
                              item: str) -> StoredAlbum | None:
        """An item of a stored album as it reads now (its caption edited, SPEC 7), and every item
        of the album, to store its message again; None when no album there holds that item."""


@dataclass(frozen=True)
class NewAlbum:
    """The items a message is stored as (`Turns.store_and_queue`): the album's key in the
    conversation, each item's platform message id with the item as its adapter reads it back, and
    whether more may still come (`gathering`: until its turn takes it, `Conversations.end_album`)."""

    album: str
    items: list[tuple[str, str]]
    gathering: bool


@dataclass(frozen=True)
class StoredAlbum:
    """An album: the platform id its message is stored under (its first item's), and its items
    so far, as their adapter reads them back (in no particular order)."""

    stored_as: str
    items: list[str]


@dataclass(frozen=True)
class CallLimit:
    """[limits] turns_per_minute (SPEC 13): at most `calls` model calls on behalf of `who` in
    any `window_s` seconds. `who` is `person:<id>`, or `chat:<platform>:<chat id>` for nobody
    in particular, limited per chat."""

    who: str
    calls: int
    window_s: float = 60.0


@dataclass(frozen=True)
class Arrival:
    """What became of a person's message: `message` None when its platform id was stored in
    the conversation already (a redelivered update: answered once, there); `ticket` its place
    in the conversation's line, or `turn_id` its turn, started at once when nothing of the
    conversation held it back; neither past the limit, with `wait_s` seconds until a call is
    free again."""

    message: MessageRow | None
    ticket: int | None = None
    wait_s: int | None = None
    turn_id: int | None = None


class Turns(abc.ABC):
    """A turn: the reply to one message, its receipt, and the undo of its memory writes."""

    @abc.abstractmethod
    async def store_and_queue(self, conversation_id: int, person_id: int | None, speaker_name: str, content: str,
                              tokens: int, platform_message_id: str | None, limit: CallLimit | None,
                              checkin_from: int | None = None, character_id: int | None = None,
                              album: NewAlbum | None = None) -> Arrival:
        """In one transaction: store a person's message (once per platform id in its
        conversation), take a model call under `limit` (checked and counted atomically, in
        every process), and queue its turn — started at once (`Arrival.turn_id`) when `start_turn`
        would start it without waiting — or, past the limit, keep the message unqueued.
        `checkin_from` (one-to-one conversations with a person): count the message for
        check-ins, which wait from that many of the person's messages on (SPEC 14).
        `character_id`: the character whose turn it is (None: the conversation's own).
        `album`: the message is an album's items (or, while it is gathered, its first), kept
        with it (`Conversations.join_album`)."""

    @abc.abstractmethod
    async def queue_turn(self, conversation_id: int, person_id: int | None, user_message_id: int,
                         character_id: int | None = None) -> int:
        """A place in the conversation's line for `character_id` (None: the conversation's own
        character) to answer the message (person None: nobody in particular; in a scene, the
        message may be another character's reply). Turns of a conversation start in the order they were queued, in every
        process sharing the database. Returns the ticket `start_turn` takes."""

    @abc.abstractmethod
    async def start_turn(self, ticket: int) -> int:
        """Wait until the ticket is first in its conversation's line (by message position) and no
        turn of the conversation runs, nor waits to be answered again for an earlier message
        (interrupted less than RECOVER_WITHIN_S ago), nor has a reply being sent — then start a
        running turn for it: a running turn is its conversation's lock, held until the turn is
        finished or failed, and its reply until it is shown or taken back (SPEC 15: the next turn
        never reads a reply that is then taken back; an adapter silent for SHOWING_S is taken for
        stuck). A turn, a ticket or a reply whose process is gone holds no one up: it is
        interrupted or taken back (see `recover_interrupted_turns`). Returns the turn id; raises
        OutOfLine when the ticket's message was deleted meanwhile."""

    @abc.abstractmethod
    def leave_lines(self) -> None:
        """This process is stopping (SPEC 9): every turn waiting in a line here leaves it at once
        (`start_turn` raises `LeftTheLine`), its ticket kept queued, so it is answered after the
        restart or by another process, in order, once."""

    @abc.abstractmethod
    async def withdraw(self, ticket: int) -> None:
        """Take a ticket out of its line (its turn will not be answered)."""

    async def begin_turn(self, conversation_id: int, person_id: int | None, user_message_id: int,
                         character_id: int | None = None) -> int:
        """Queue a turn for the message and start it when its turn comes."""
        return await self.start_turn(await self.queue_turn(conversation_id, person_id, user_message_id, character_id))

    @abc.abstractmethod
    async def set_turn_partial(self, turn_id: int, platform_message_id: str) -> None:
        """Where the running turn's reply shows while it streams (for crash recovery), noted as
        it first shows: in a scene, the characters present then are its witnesses (SPEC 22)."""

    @abc.abstractmethod
    async def finish_turn(
        self, turn_id: int, user_message: MessageRow, speaker_name: str,
        content: str, tokens: int, receipt: dict[str, Any], character_id: int | None = None,
        named: Sequence[int] = (), spend: Spend | None = None,
    ) -> MessageRow | None:
        """Store the reply and the receipt in one transaction and return the stored reply, not
        yet shown (`shown`) — or None, keeping nothing, when the turn is gone (its message was
        deleted meanwhile, or its person forgotten); with `spend`, what the model call that
        wrote it cost is added to the person's day in the same transaction, as the turn's hold
        ends (SPEC 17: the allowance never counts both, nor neither; a forgotten person's day
        was kept by their platform ids). A regenerated turn replaces the old reply, which goes
        once the new one is shown. `character_id`: the answering character, as the turn names
        it (read from the turn when the caller does not have it at hand). In a scene the reply's
        witnesses are those present when it was posted (as it first showed, if it streamed; else
        now), its speaker and the characters it `named` (SPEC 22)."""

    @abc.abstractmethod
    async def shown(self, reply_message_id: int, platform_message_ids: list[str]) -> None:
        """A reply (or a check-in) reached the chat as these platform messages (none on the
        console): it is the conversation's for good, a reply it regenerated goes now, and the
        conversation's next turn may start."""

    @abc.abstractmethod
    async def withdraw_reply(self, reply_message_id: int) -> None:
        """The platform refused a reply not yet shown (SPEC 15, "What was not shown was not
        said"): nothing of it stays — its message, its memory writes — and a reply it was to
        replace is the conversation's again. A reply a gone process stored but never saw shown
        is taken back the same way by `recover_interrupted_turns`, and left to be answered
        again."""

    @abc.abstractmethod
    async def fail_turn(self, turn_id: int, spend: Spend | None = None) -> None:
        """Undo the turn's memory writes and mark it failed, in one transaction; with `spend`,
        what its last model call cost is added to the person's day in it (`finish_turn`)."""

    @abc.abstractmethod
    async def turn(self, turn_id: int) -> TurnRow | None: ...

    @abc.abstractmethod
    async def latest_turn(self, conversation_id: int, character_id: int | None = None) -> TurnRow | None:
        """The conversation's latest answered turn (of `character_id` only, when given: in a
        scene, each character's latest reply)."""

    @abc.abstractmethod
    async def reply_shown(self, turn_id: int, platform_message_ids: list[str]) -> ShownReply | None:
        """A turn's reply reached the chat (`shown`), the turn read back as it is marked, with
        the platform ids of the reply before it, in the order sent — its conversation's
        latest answered turn before it, of the same character (where the Regenerate button to
        take away shows). None when the turn has no reply (taken back meanwhile)."""

    @abc.abstractmethod
    async def last_receipt(self, conversation_id: int, person_id: int,
                           character_id: int | None = None) -> TurnRow | None:
        """The latest answered turn of the person here (of `character_id` only, when given)."""

    @abc.abstractmethod
    async def receipts_before(self, conversation_id: int, character_id: int, before_pos: int | None,
                              limit: int) -> list[tuple[int, dict[str, Any]]]:
        """The receipts of the character's newest `limit` replies in the conversation to messages
        before `before_pos` (None: any), newest first, each with the place of the message it
        answered (a lorebook's timed entries: what earlier replies called up)."""

    @abc.abstractmethod
    async def receipts(self, person_id: int, limit: int) -> list[ReplyReceipt]:
        """The person's latest replies shown to them (any character, any chat), newest first, each
        with its receipt: what its prompt held."""

    @abc.abstractmethod
    async def begin_regenerate(self, turn_id: int) -> int | None:
        """Start a new running turn for the same message (queued like any other) and, once it
        runs, undo the old turn's memory writes (pinned entries are left alone); the old reply
        stays until the new one is stored. None when, by the time it would start, the turn is no
        longer the conversation's latest answered one."""

    @abc.abstractmethod
    async def recover_interrupted_turns(self) -> int:
        """At start-up: turns left running or queued by a process that is gone are undone and
        marked failed, and wait (in `interrupted_turns`) for their adapter to answer them again
        or mark the partial reply. Turns of another live process are left alone."""

    @abc.abstractmethod
    async def interrupted_turns(self, platform: str, character_id: int) -> list[InterruptedTurn]: ...

    @abc.abstractmethod
    async def claim_interrupted_turn(self, turn_id: int) -> bool:
        """Take an interrupted turn off the waiting list; True for the one caller that did."""

    @abc.abstractmethod
    async def requeue_interrupted_turn(self, turn_id: int) -> int | None:
        """Take an interrupted turn off the waiting list and queue its message again, in one
        transaction: it keeps its place in the line (which goes by message position), ahead
        of the messages that came after it. The ticket; None when another caller took it."""

    @abc.abstractmethod
    async def stray_found(self, timeout_s: float) -> None:
        """Return once this process has interrupted a turn or ticket of a process that is gone
        (it waits to be answered again: recover now), or after `timeout_s`."""


class Memories(abc.ABC):
    """Saved memories (SPEC section 5): caps checked inside the write, and Learn from chat."""

    @abc.abstractmethod
    async def memories_in_play(self, person_id: int, character_id: int, unpinned_limit: int) -> MemoriesInPlay: ...

    @abc.abstractmethod
    async def list_memories(
        self, person_id: int, character_id: int, scope: str | None, offset: int, limit: int
    ) -> tuple[list[MemoryRow], int]:
        """A page of the person's memories visible with this character: pinned first, then
        most recently updated; and the total count."""

    @abc.abstractmethod
    async def add_memory(
        self, person_id: int, character_id: int, scope: str, content: str, tokens: int,
        pinned: bool, source: str, turn_id: int | None = None, written_in: int | None = None,
    ) -> MemoryRow:
        """Raises AlreadySaved when the person keeps the same words in the scope, else CapReached
        when the scope's budget is full. Every write is in the memory's history, with the chat it
        was made in (`written_in`; a turn's: its conversation)."""

    @abc.abstractmethod
    async def update_memory(
        self, person_id: int, character_id: int, memory_id: int, content: str, tokens: int,
        turn_id: int | None = None,
    ) -> MemoryRow | None:
        """With a turn_id (the AI's tool), a pinned entry raises PinnedMemory; words another
        memory of the scope keeps raise AlreadySaved."""

    @abc.abstractmethod
    async def delete_memory(
        self, person_id: int, character_id: int, memory_id: int, turn_id: int | None = None
    ) -> MemoryRow | None:
        """With a turn_id (the AI's tool), a pinned entry raises PinnedMemory."""

    @abc.abstractmethod
    async def set_pinned(self, person_id: int, character_id: int, memory_id: int, pinned: bool) -> MemoryRow | None:
        """The memory as it was before (so its `pinned` says whether anything changed); None when
        the person has no such memory. Raises CapReached when the budget it moves into is full."""

    @abc.abstractmethod
    async def count_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int: ...

    @abc.abstractmethod
    async def clear_memories(self, person_id: int, character_id: int, scope: str, pinned: bool) -> int: ...

    @abc.abstractmethod
    async def export_person(self, person_id: int) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def history(self, person_id: int, since: float) -> list[ChangeRow]:
        """Every change to the person's memories since `since` (the person's own and the
        characters'), newest first."""

    @abc.abstractmethod
    async def undo_change(self, person_id: int, change_id: int, since: float) -> ChangeRow | None:
        """Undo one of the person's changes, made since `since` and not followed by another of that
        memory — a deleted memory comes back as it was, pinned if it was; an edit gets its old
        text back; a pin is taken off, and so on — in one transaction, as a change of the person's
        own (so it can be undone in turn), under the same caps (CapReached). The change it made;
        None when there is no such change to undo."""

    @abc.abstractmethod
    async def written_in(self, person_id: int) -> dict[int, ConversationRow]:
        """The chat each of the person's memories was written in (by a command there, or a reply);
        one written on the memory page or imported is not there."""

    @abc.abstractmethod
    async def written_from(self, person_id: int) -> dict[int, MessageRow]:
        """For each of the person's memories a character wrote mid-reply, the person's own message
        that reply answered (SPEC 21 "Where it came from"); a memory whose message is gone, or
        that answered no message of theirs, is not there."""

    @abc.abstractmethod
    async def learning_enabled(self, person_id: int, character_id: int) -> bool: ...

    @abc.abstractmethod
    async def set_learning(self, person_id: int, character_id: int, enabled: bool) -> None: ...


class Summaries(abc.ABC):
    """The conversation summary by generation, and the rebuild that swaps in the next one."""

    @abc.abstractmethod
    async def summary_state(self, conversation_id: int, seen_by: int | None = None) -> SummaryState:
        """The state of the conversation's summary, or (`seen_by`) of that character's own
        summary in a scene (SPEC 22: one that missed messages; never rebuilding, its generation
        counting how often it started again)."""

    @abc.abstractmethod
    async def summary_states(self, conversation_id: int) -> list[tuple[int | None, SummaryState]]:
        """In one read, the state of the conversation's summary (None), then of each character's
        own summary there (SPEC 22: the characters that keep one), by character; [] when the
        conversation is gone."""

    @abc.abstractmethod
    async def summaries(self, conversation_id: int, generation: int | None = None,
                        seen_by: int | None = None) -> list[SummaryRow]:
        """Entries of one generation (default: the live one), in tier order, oldest first; or
        (`seen_by`) that character's own summary's."""

    @abc.abstractmethod
    async def write_summary(
        self, conversation_id: int, generation: int, tier: str, content: str, tokens: int,
        first_pos: int, last_pos: int, replaces: list[int], covered_pos: int | None = None,
        edited: bool = False, seen_by: int | None = None,
    ) -> SummaryRow:
        """In one transaction: add the entry (to `seen_by`'s own summary, when given), delete
        the entries it replaces, and (for a recent summary) advance what is covered: the live
        summarized_pos (or that character's), or the progress of the rebuild writing that
        generation. Only the generation written now is written (the rebuild's while one runs,
        else the live one): a pass of another raises SummaryStartedAgain."""

    @abc.abstractmethod
    async def edit_summary(self, conversation_id: int, summary_id: int, content: str, tokens: int,
                           seen_by: int | None = None) -> bool: ...

    @abc.abstractmethod
    async def set_summary_retry(self, conversation_id: int, failures: int, retry_at: float | None,
                                seen_by: int | None = None) -> None: ...

    @abc.abstractmethod
    async def due_summary_retries(self, now: float) -> list[int]:
        """Conversations with a summary (theirs, or a character's own) due to be tried again."""

    @abc.abstractmethod
    async def start_rebuild(self, conversation_id: int, person_id: int | None) -> RebuildRow | None:
        """A new rebuild, or None when one exists for the conversation already. The own summaries
        of a scene's characters (SPEC 22) start again from the first message, in the same
        transaction: they are written anew as any summary is."""

    @abc.abstractmethod
    async def rebuild(self, conversation_id: int) -> RebuildRow | None: ...

    @abc.abstractmethod
    async def rebuilds(self, status: str) -> list[RebuildRow]: ...

    @abc.abstractmethod
    async def set_rebuild_status(self, conversation_id: int, status: str, error: str | None = None) -> None: ...

    @abc.abstractmethod
    async def restart_rebuild(self, conversation_id: int) -> None:
        """Throw away what the rebuild wrote and start it from the first message."""

    @abc.abstractmethod
    async def cancel_rebuild(self, conversation_id: int) -> None: ...

    @abc.abstractmethod
    async def finish_rebuild(self, conversation_id: int, generation: int) -> None:
        """Swap the rebuilt generation in, at once, and drop the old one; SummaryStartedAgain
        when the rebuild started over (/forgetme) as another generation meanwhile."""


class Drafts(abc.ABC):
    """AI drafts and message selections waiting for a person (SPEC 5.3, 5.4)."""

    @abc.abstractmethod
    async def save_drafts(self, person_id: int, kind: str, items: list[str]) -> int: ...

    @abc.abstractmethod
    async def drafts(self, person_id: int, draft_id: int) -> tuple[str, list[str]] | None: ...

    @abc.abstractmethod
    async def delete_drafts(self, person_id: int, draft_id: int) -> None: ...

    @abc.abstractmethod
    async def selection(self, person_id: int, conversation_id: int) -> list[int]: ...

    @abc.abstractmethod
    async def set_selection(self, person_id: int, conversation_id: int, message_ids: list[int]) -> None: ...


class Recall(abc.ABC):
    """Full-text search of a conversation's stored messages (SPEC section 11). The index is kept
    in step with the messages by the very transactions that write, edit and delete them."""

    @abc.abstractmethod
    async def search(self, conversation_id: int, terms: list[str], before_pos: int, limit: int,
                     common_above: int, seen_by: int | None = None) -> list[MessageRow]:
        """The conversation's messages before `before_pos` holding any of the terms (matched as
        words, stemmed), best match first (of equal matches, the older first). A term found in
        more than `common_above` of the conversation's messages points at nothing in particular
        and is left out. `seen_by`: only messages that character witnessed (SPEC 22)."""

    @abc.abstractmethod
    async def messages_at(self, conversation_id: int, positions: list[int],
                          seen_by: int | None = None) -> list[MessageRow]:
        """The conversation's messages at these places, oldest first (`seen_by`: witnessed by)."""

    @abc.abstractmethod
    async def index_older_messages(self, batch: int) -> int:
        """Index up to `batch` messages stored before the index existed (a resumable backfill);
        how many are still waiting afterwards."""


class Vectors(abc.ABC):
    """Message vectors for semantic recall (SPEC section 11), from one embedding model at a time.
    Once a model is in use, every new or edited message waits to be embedded (the database keeps
    that list, so a restart or another process carries on); a message's vector goes when its text
    changes or it is deleted."""

    @abc.abstractmethod
    async def use_model(self, model: str) -> bool:
        """Keep vectors from `model`: the first time (or after a change of model) every stored
        message waits to be embedded, and vectors of another model are dropped. False when this
        database cannot keep vectors (PostgreSQL without the pgvector extension)."""

    @abc.abstractmethod
    async def waiting(self, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` messages waiting to be embedded, newest first: (message id, text)."""

    @abc.abstractmethod
    async def count_waiting(self) -> int: ...

    @abc.abstractmethod
    async def save(self, model: str, vectors: list[tuple[int, str, list[float]]]) -> None:
        """Keep these vectors (message id, the text embedded, its unit-length vector) and take
        their messages off the waiting list — unless the message was deleted or edited since
        (an edited one waits again), or `model` is no longer the one in use."""

    @abc.abstractmethod
    async def nearest(self, conversation_id: int, vector: list[float], before_pos: int, limit: int,
                      seen_by: int | None = None) -> list[int]:
        """Places of the conversation's messages before `before_pos` closest to `vector` in
        meaning (cosine), best first (SQLite scores the newest NEAREST_SCAN_LIMIT of them);
        `seen_by`: only messages that character witnessed (SPEC 22)."""


NEAREST_SCAN_LIMIT = 5_000  # SQLite scores at most this many of a conversation's vectors a turn (~15 ms)


class Presence(abc.ABC):
    """Who is present in a scene and what each character witnessed (SPEC 22), in the database so
    every process agrees. Every message stored in a shared conversation records its witnesses in
    the transaction that stores it: the characters present then, and its speaker (a character
    that speaks is brought in first). A character that witnessed every message of the scene
    reads it whole, with the scene's summary; one that missed any (it came in late, or was
    dismissed) reads only what it witnessed, with its own summary (`Summaries`, `seen_by`), which
    begins as a copy of the scene's when it leaves it."""

    @abc.abstractmethod
    async def bring_in(self, conversation_id: int, character_ids: Sequence[int]) -> list[int]:
        """These characters are present from now on (named, mentioned, invited); the ones that
        were not, in the order given."""

    @abc.abstractmethod
    async def dismiss(self, conversation_id: int, character_id: int) -> bool:
        """The character witnesses nothing here until it is brought in again; False when it was
        not present."""

    @abc.abstractmethod
    async def leave_chat(self, platform: str, chat_id: str, character_id: int) -> int:
        """The character is dismissed from every scene of the chat (its bot left the group, every
        topic of it); how many scenes it was present in."""

    @abc.abstractmethod
    async def present(self, conversation_id: int) -> list[int]:
        """The characters present, by id."""

    @abc.abstractmethod
    async def missed_any(self, conversation_id: int, character_id: int) -> bool:
        """Whether the character missed a message of the conversation: then it reads only what it
        witnessed (False: it witnessed them all)."""

    @abc.abstractmethod
    async def witnessed(self, conversation_id: int, character_id: int) -> tuple[int, int]:
        """How many of the conversation's messages the character witnessed, and how many it holds."""


@dataclass(frozen=True)
class Absence:
    """A one-to-one conversation whose person has been away since `last_at` (SPEC 14)."""

    conversation_id: int
    person_id: int
    last_at: float


class Checkins(abc.ABC):
    """Writing first after an absence (SPEC 14). A person's message in a one-to-one conversation
    is counted by `Turns.store_and_queue`; from then on the conversation waits for one check-in,
    found through an index, until one is stored or the person turns them off."""

    @abc.abstractmethod
    async def due(self, character_id: int, platform: str, absent_since: float, limit: int) -> list[Absence]:
        """The oldest absences of this character's conversations on this platform whose person
        last wrote before `absent_since` and that wait for a check-in."""

    @abc.abstractmethod
    async def still_waiting(self, absence: Absence) -> bool:
        """Whether the absence still waits for its check-in: none was stored since (by any
        process), and the person has not written."""

    @abc.abstractmethod
    async def store(self, absence: Absence, speaker_name: str, content: str, tokens: int,
                    receipt: dict[str, Any]) -> MessageRow | None:
        """In one transaction: mark the absence's check-in sent and store it as the character's
        message, with its receipt (a turn of kind 'checkin'). None when it is no longer due (sent
        by another process, or the person wrote meanwhile)."""

    @abc.abstractmethod
    async def withdraw(self, absence: Absence, message_id: int, wait_again: bool) -> None:
        """A stored check-in could not be delivered: it goes, with its turn. `wait_again`: the
        absence waits for a check-in again (else not until the person writes)."""

    @abc.abstractmethod
    async def pass_over(self, absence: Absence) -> None:
        """No check-in for this absence (the person may not be written to)."""

    @abc.abstractmethod
    async def set_wanted(self, person_id: int, character_id: int, wanted: bool, from_messages: int) -> None:
        """The person's choice for this character (`/checkins on|off`, the button); with it on,
        their conversations that have `from_messages` messages and no check-in since they last
        wrote wait for one again, `after_hours` from the later of their last message and now
        (switching on is not writing: an absence that had its check-in keeps it had)."""


class ReminderRow(NamedTuple):
    """A pending reminder (SPEC 19): when (UTC seconds; `zone` is the person's, where it was
    resolved), what to say, and how it repeats (once, daily, weekly)."""

    id: int
    person_id: int
    character_id: int
    conversation_id: int
    due_at: float
    zone: str
    words: str
    repeat: str
    created_at: float
    asked_by: str = ""  # the person's name in that chat when they asked (a group letter names them)
    at_clock: str | None = None  # "HH:MM": the local time of day a repeating one keeps
    letter: str | None = None  # composed once; a retry sends it as it is, never asking the model again
    letter_receipt: str | None = None  # its receipt (JSON)
    attempts: int = 0  # sends of the kept letter that failed
    retry_at: float | None = None  # not tried again before this


class TooManyReminders(Exception):
    """The person has as many pending reminders as they may have."""


class Reminders(abc.ABC):
    """Reminders (SPEC 19): set by a turn's `remind` tool, written by the character when due
    through the outbox (one process sends each), taken back with the turn that set them."""

    @abc.abstractmethod
    async def add(self, person_id: int, character_id: int, conversation_id: int, turn_id: int, due_at: float,
                  zone: str, words: str, repeat: str, cap: int, asked_by: str = "",
                  at_clock: str | None = None) -> ReminderRow:
        """Store one; raises TooManyReminders when the person has `cap` pending (counted inside
        the write)."""

    @abc.abstractmethod
    async def pending(self, person_id: int) -> list[ReminderRow]:
        """The person's pending reminders, soonest first."""

    @abc.abstractmethod
    async def cancel(self, person_id: int, reminder_id: int) -> bool:
        """Cancel one of the person's reminders; False when they have none of that number."""

    @abc.abstractmethod
    async def due(self, character_id: int, platform: str, now: float, limit: int) -> list[ReminderRow]:
        """This character's reminders due by `now` in conversations on `platform`, soonest first,
        not being sent."""

    @abc.abstractmethod
    async def still_due(self, reminder: ReminderRow) -> bool:
        """Whether the reminder is still due as it was read: not being sent nor sent (by any
        process), cancelled or moved since."""

    @abc.abstractmethod
    async def keep(self, reminder: ReminderRow, next_due_at: float | None, speaker_name: str, content: str,
                   tokens: int, receipt: dict[str, Any]) -> MessageRow | None:
        """In one transaction: store the character's letter for it, unshown (a turn of kind
        'reminder'), and mark the reminder as being sent; once the letter is shown it goes (or
        moves to `next_due_at`, a repeating one). None when it is no longer due (cancelled,
        sent by another process)."""

    @abc.abstractmethod
    async def take_back(self, message_id: int) -> None:
        """The letter never reached the chat: it goes, and its reminder is due again."""

    @abc.abstractmethod
    async def put_off(self, reminder: ReminderRow, letter: str, receipt: dict[str, Any], retry_at: float) -> None:
        """Sending its letter failed: keep the letter (and receipt) to send again as it is, count
        the attempt, and leave the reminder not due before `retry_at`."""

    @abc.abstractmethod
    async def move_on(self, reminder: ReminderRow, next_due_at: float | None) -> None:
        """Its letter could not be delivered in time: a repeating one moves to `next_due_at`
        without it (its kept letter forgotten); a one-off one (None) goes."""

    @abc.abstractmethod
    async def drop(self, reminder_id: int) -> None:
        """No letter for this reminder: it goes (the person may not be written to any more)."""

    @abc.abstractmethod
    async def sent_since(self, since: float) -> int:
        """How many reminder letters reached their chat since `since` (every person)."""


class PageSession(NamedTuple):
    """Who a memory page's session is for (SPEC 21): the person, the characters the page shows
    (those `[access]` let them reach when the link was made), the form token, when it ends."""

    person_id: int
    characters: tuple[int, ...]
    csrf: str
    expires_at: float


class Pages(abc.ABC):
    """The memory page's one-time links and sessions (SPEC 21), in the database so any process
    serves the page. Codes and tokens arrive here hashed: the store never sees the secrets."""

    @abc.abstractmethod
    async def add_link(self, code_hash: str, person_id: int, characters: tuple[int, ...], expires_at: float) -> None:
        """A one-time link for the person (their earlier unspent links stop working)."""

    @abc.abstractmethod
    async def exchange(self, code_hash: str, now: float, token_hash: str, csrf: str,
                       session_expires_at: float) -> PageSession | None:
        """Spend the link and open a session for its person, in one transaction: None when the
        code is unknown, spent (in any process) or past its time."""

    @abc.abstractmethod
    async def session(self, token_hash: str, now: float) -> PageSession | None:
        """The session of that token, while it lasts; None otherwise."""

    @abc.abstractmethod
    async def end_session(self, token_hash: str) -> None: ...

    @abc.abstractmethod
    async def add_failure(self, address: str, at: float, since: float) -> int:
        """A wrong or spent code tried from `address`: how many were tried from there since
        `since`, this one included, counted atomically with the adding (every process together)."""


class Coordination(abc.ABC):
    """What several processes sharing one database agree on (SPEC sections 9 and 12) besides
    who answers a conversation now (a running turn, see Turns.begin_turn): who runs a piece of
    background work."""

    @abc.abstractmethod
    def claim(self, job: str, lease_s: float) -> AbstractAsyncContextManager[bool]:
        """Yields True when this process got the job (the others get False and skip it); the
        claim is kept while the block runs, and lapses after `lease_s` if the process dies."""

    @abc.abstractmethod
    async def take_call(self, limit: CallLimit) -> int | None:
        """Take a model call under `limit`, atomically in every process: None when taken, else
        the seconds until one is free (nothing is counted then)."""

    @abc.abstractmethod
    async def past_limit(self, limit: CallLimit) -> bool:
        """Whether `limit.who` has no model call left now (nothing is taken)."""

    @abc.abstractmethod
    async def first_delivery(self, key: str) -> bool:
        """True the first time any process asks about this platform update (`key` names the
        platform, the bot and the update id); False for a redelivery."""

    @abc.abstractmethod
    async def get_meta(self, key: str) -> str | None: ...

    @abc.abstractmethod
    async def set_meta(self, key: str, value: str) -> None: ...


class Store(abc.ABC):
    """One open database: every port, and the backend's own upkeep."""

    people: People
    characters: Characters
    conversations: Conversations
    turns: Turns
    memories: Memories
    summaries: Summaries
    drafts: Drafts
    recall: Recall
    vectors: Vectors
    coordination: Coordination
    checkins: Checkins
    usage: Usage
    reminders: Reminders
    pages: Pages
    presence: Presence

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def maintain(self, now: float, retention_days: int | None) -> str:
        """The daily upkeep (SQLite: WAL checkpoint and an online backup; every backend: the
        retention purge of old, summarized messages). Returns what was done, for the log."""
