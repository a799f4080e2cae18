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
chat's updates in sequence), so an album's second item comes only once its first is kept. There
the first item is stored and queued at once, as any message, and its turn waits (`Sent.rest`)
while the later items come: each is stored into it, as an edit of it is, before it is
acknowledged (`Sent.joins`), so a crash loses none of them (each stores the album so far: an
album of text files has its earlier files read again, ten files at most); then the turn answers
every item as one message. The album is gathered in the process its first item reached: a later
item posted to another process behind a load balancer, or after the album's turn went on, is
answered as a message of its own.

Waiting must not reorder a chat (SPEC 9: messages are answered in the order they arrived): a
message that comes while an album of its chat is still gathering waits until that album is
kept, and so does a later album. Every new message goes through `gathered`, album or not."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

from telegram import Message, Update

ALBUM_QUIET_S = 1.0  # an album is complete once no item of it has come for this long
ALBUM_MOST_S = 5.0  # and at the latest this long after its first item
ALBUM_MOST_ITEMS = 10  # Telegram's own cap; a further item starts an album of its own

KeptSignal = Callable[[], None]


@dataclass(frozen=True)
class Sent:
    """What a person sent at once, for one answer: one message, or every item of an album in
    the order sent (empty for an item's handler whose album another handler answers). `kept`
    is to be called once it is stored and queued (None: nobody waits). A webhook's album item:
    the first one's `rest` gives every item once the album is complete; a later one `joins` the
    album stored under that platform message id, and `messages` are its items so far."""

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
        self.joining = 0  # later items being stored into the first (a webhook's album)

    def has(self, message: Message) -> bool:
        return any(update.message.message_id == message.message_id for update in self.updates)

    def messages(self) -> list[Message]:
        return sorted((update.message for update in self.updates), key=lambda m: m.message_id)

    async def complete(self, quiet_s: float, most_s: float) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + most_s
        while (len(self.updates) < ALBUM_MOST_ITEMS or self.joining) and (left := until - loop.time()) > 0:
            self.more.clear()
            try:
                await asyncio.wait_for(self.more.wait(), min(quiet_s, left))
            except asyncio.TimeoutError:
                if not self.joining:
                    return


class Albums:
    """The albums of one adapter still gathering or not yet kept, by chat."""

    def __init__(self, kept_signal: Callable[[Update], KeptSignal | None], gather: bool,
                 quiet_s: float = ALBUM_QUIET_S, most_s: float = ALBUM_MOST_S):
        self.kept_signal, self.gather, self.quiet_s, self.most_s = kept_signal, gather, quiet_s, most_s
        self._gathering: dict[tuple[int, str], _Album] = {}
        self._unkept: dict[int, list[_Album]] = {}  # by chat, oldest first

    @contextlib.asynccontextmanager
    async def gathered(self, update: Update) -> AsyncIterator[Sent]:
        """What `update`'s message was sent with, to be answered inside this block."""
        message = update.message
        if not self.gather and message.media_group_id:
            async with self._kept_item_by_item(update) as sent:
                yield sent
            return
        chat, group = message.chat_id, message.media_group_id if self.gather else None
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
    async def _kept_item_by_item(self, update: Update) -> AsyncIterator[Sent]:
        """A webhook's album item (see above): the first is kept as any message, its turn waiting
        for the rest; a later one waits until the first is kept, and is then stored into it."""
        message = update.message
        place = (message.chat_id, message.media_group_id)
        album = self._gathering.get(place)
        if album is not None and len(album.updates) < ALBUM_MOST_ITEMS:
            if album.has(message):  # delivered again: it is stored already
                yield Sent([], None)
                return
            album.updates.append(update)
            album.joining += 1
            album.more.set()
            try:
                await album.kept.wait()
                yield Sent(album.messages(), None, joins=str(album.updates[0].message.message_id))
            finally:
                album.joining -= 1
                album.more.set()
            return
        album = self._gathering[place] = _Album(update)
        acknowledge = self.kept_signal(update)

        def kept() -> None:
            album.kept.set()
            if acknowledge is not None:
                acknowledge()

        async def rest() -> list[Message]:
            try:
                await album.complete(self.quiet_s, self.most_s)
            finally:
                self._forget(place, album)
            return album.messages()
        try:
            yield Sent([message], kept, rest=rest)
        finally:
            album.kept.set()
            self._forget(place, album)

    def _forget(self, place: tuple[int, str], album: _Album) -> None:
        if self._gathering.get(place) is album:
            del self._gathering[place]


async def _all_kept(albums: list[_Album]) -> None:
    await asyncio.gather(*(album.kept.wait() for album in albums))
