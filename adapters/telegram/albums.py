"""Photos sent together reach the character as one message, answered once.

Telegram delivers an album (up to 10 photos, videos or files sent at once) as one update per
item, each with the album's `media_group_id` and usually only one with the caption, moments
apart; no update says the album is complete. So the handler of an album's first item waits
until no further item has come for ALBUM_QUIET_S (ALBUM_MOST_S at most in all), then answers
every item as one message; each other item's handler waits until that one is done.

A transport that fetches updates gathers an album before any item is kept
(`Transport.gathers_albums`): polling confirms what it fetched with its next fetch, kept or
not; gathering lengthens that moment by an album's second. A webhook acknowledges an update once
its message is kept, and Telegram posts a chat's next update only after that (it delivers a
chat's updates in sequence), so an album's second item comes only once its first is kept; and
behind a load balancer it may come to another process. There the album is gathered in the
database, which every process shares (`AlbumBook`): the first item is stored and queued at
once, as any message, with its album (`IncomingMessage.album`), and its turn waits (`Sent.rest`)
until no further item has come for ALBUM_QUIET_S; each later item, whichever process it reaches,
joins the album and is stored into its message, as an edit is, before it is acknowledged
(`Sent.joins`), so a crash loses none of them (an album of text files has its earlier files
read again, ten files at most). Then the turn takes every item and answers them as one message;
an item that comes after that is answered as a message of its own.

Waiting must not reorder a chat (SPEC 9: messages are answered in the order they arrived): a
message that comes while an album of its chat is still gathering waits until that album is
kept, and so does a later album. Every new message goes through `gathered`, album or not."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Protocol

from telegram import Bot, Message, Update

from bot.contract import AlbumItem, Conversation, ConversationKey

ALBUM_QUIET_S = 1.0  # an album is complete once no item of it has come for this long
ALBUM_MOST_S = 5.0  # and at the latest this long after its first item
ALBUM_MOST_ITEMS = 10  # Telegram's own cap; a further item starts an album of its own
LOOKS_A_QUIET = 4  # a webhook's album is looked at this many times in ALBUM_QUIET_S

KeptSignal = Callable[[], None]


@dataclass(frozen=True)
class Sent:
    """What a person sent at once, for one answer: one message, or every item of an album in
    the order sent (empty for an item's handler whose album another handler answers). `kept`
    is to be called once it is stored and queued (None: nobody waits). A webhook's album item:
    the first one's `rest` gives every item once the album is complete; a later one `joins` the
    album stored under that platform message id, and `messages` are its items so far, wherever
    each was posted."""

    messages: list[Message]
    kept: KeptSignal | None
    rest: Callable[[], Awaitable[list[Message]]] | None = None
    joins: str | None = None


class _Album:
    def __init__(self, first: Update):
        self.updates = [first]
        self.more = asyncio.Event()  # another item came
        self.kept = asyncio.Event()  # stored and queued, or its handler ended: the chat goes on
        self.done = asyncio.Event()  # answered: its other items' handlers end

    def messages(self) -> list[Message]:
        return in_sent_order([update.message for update in self.updates])

    async def complete(self, quiet_s: float, most_s: float) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + most_s
        while len(self.updates) < ALBUM_MOST_ITEMS and (left := until - loop.time()) > 0:
            self.more.clear()
            try:
                await asyncio.wait_for(self.more.wait(), min(quiet_s, left))
            except asyncio.TimeoutError:
                return


class AlbumBook(Protocol):
    """Where a webhook's albums are gathered: the database, through the core (the adapter reads
    each item back as the Telegram message it was)."""

    async def join(self, message: Message) -> tuple[str, list[Message]] | None:
        """Add a later item to its album, if that is being gathered: the platform id the album
        is stored under, and its items so far."""

    async def size(self, message: Message) -> int: ...

    async def end(self, message: Message) -> list[Message]:
        """Every item of the album, which the turn takes now."""


class Albums:
    """The albums of one adapter still gathering or not yet kept, by chat (polling); or
    gathered in the database (`book`, a webhook)."""

    def __init__(self, kept_signal: Callable[[Update], KeptSignal | None], book: AlbumBook | None = None,
                 quiet_s: float = ALBUM_QUIET_S, most_s: float = ALBUM_MOST_S):
        self.kept_signal, self.book, self.quiet_s, self.most_s = kept_signal, book, quiet_s, most_s
        self._gathering: dict[tuple[int, str], _Album] = {}
        self._unkept: dict[int, list[_Album]] = {}  # by chat, oldest first

    @contextlib.asynccontextmanager
    async def gathered(self, update: Update) -> AsyncIterator[Sent]:
        """What `update`'s message was sent with, to be answered inside this block."""
        message = update.message
        if self.book is not None and message.media_group_id:
            async with self._kept_item_by_item(update, self.book) as sent:
                yield sent
            return
        chat, group = message.chat_id, message.media_group_id  # a webhook's album items went above
        album = self._gathering.get((chat, group)) if group else None
        if album is not None and len(album.updates) < ALBUM_MOST_ITEMS:
            album.updates.append(update)
            album.more.set()
            await album.done.wait()
            yield Sent([], None)
            return
        ahead = list(self._unkept.get(chat, ()))
        if not group:
            await _all_kept(ahead)
            yield Sent([message], self.kept_signal(update))
            return
        album = self._gathering[(chat, group)] = _Album(update)
        self._unkept.setdefault(chat, []).append(album)
        try:
            try:
                await album.complete(self.quiet_s, self.most_s)
            finally:
                if self._gathering.get((chat, group)) is album:
                    del self._gathering[(chat, group)]
            await _all_kept(ahead)
            # a transport that gathers has nobody waiting for an acknowledgement (transport.py):
            # being kept only lets the chat's next message go on
            yield Sent(album.messages(), album.kept.set)
        finally:
            album.kept.set()
            album.done.set()
            self._unkept[chat].remove(album)
            if not self._unkept[chat]:
                del self._unkept[chat]

    @contextlib.asynccontextmanager
    async def _kept_item_by_item(self, update: Update, book: AlbumBook) -> AsyncIterator[Sent]:
        """A webhook's album item (see above): a later one joins its album, wherever the first
        was kept; the first is kept as any message, its turn waiting for the rest."""
        message = update.message
        joined = await book.join(message)
        if joined is not None:
            stored_as, items = joined
            yield Sent(in_sent_order(items), None, joins=stored_as)
            return

        async def rest() -> list[Message]:
            await self._quiet(message, book)
            return in_sent_order(await book.end(message)) or [message]
        yield Sent([message], self.kept_signal(update), rest=rest)

    async def _quiet(self, first: Message, book: AlbumBook) -> None:
        """Until no item of the album has come for `quiet_s` (`most_s` at most in all), looking
        at the database, where every process adds the items it gets."""
        loop = asyncio.get_running_loop()
        started = changed = loop.time()
        seen = 0
        while (now := loop.time()) - started < self.most_s:
            size = await book.size(first)
            if size >= ALBUM_MOST_ITEMS:
                return
            if size != seen:
                seen, changed = size, now
            elif now - changed >= self.quiet_s:
                return
            await asyncio.sleep(min(self.quiet_s / LOOKS_A_QUIET, self.most_s - (now - started)))


class AlbumsInTheStore(AlbumBook):
    """Albums kept in the database through the core, item by item, each as Telegram sent it and
    read back as such: so an item's caption edited later is read with the others again, and a
    webhook's album is gathered where every process behind a load balancer adds its items."""

    def __init__(self, conversation: Conversation, key: Callable[[Message], ConversationKey], bot: Callable[[], Bot]):
        self.conversation, self.key, self.bot = conversation, key, bot

    @staticmethod
    def items(messages: list[Message]) -> tuple[AlbumItem, ...]:
        """An album's items as the core keeps them (none for a message sent alone)."""
        return tuple(AlbumItem(m.media_group_id, str(m.message_id), m.to_json()) for m in messages
                     if m.media_group_id)

    async def join(self, message: Message) -> tuple[str, list[Message]] | None:
        joined = await self.conversation.join_album(self.key(message), *self.items([message]))
        return (joined.stored_as, self._read(joined.items)) if joined is not None else None

    async def edited(self, message: Message) -> tuple[str, list[Message]] | None:
        """An item's caption edited: the album it is stored with, every item as it reads now."""
        album = await self.conversation.edit_album_item(self.key(message), *self.items([message]))
        return (album.stored_as, self._read(album.items)) if album is not None else None

    async def size(self, message: Message) -> int:
        return await self.conversation.album_size(self.key(message), message.media_group_id)

    async def end(self, message: Message) -> list[Message]:
        return self._read(await self.conversation.end_album(self.key(message), message.media_group_id))

    def _read(self, items: list[str]) -> list[Message]:
        return [Message.de_json(json.loads(item), self.bot()) for item in items]


def in_sent_order(messages: list[Message]) -> list[Message]:
    return sorted(messages, key=lambda m: m.message_id)


async def _all_kept(albums: list[_Album]) -> None:
    await asyncio.gather(*(album.kept.wait() for album in albums))
