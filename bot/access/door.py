"""Who may see a memory page (SPEC 21): `/memory page` makes a one-time link, valid 10 minutes,
kept only as its SHA-256; opening it spends it (in one transaction, so once in every process)
for a session of 12 hours, its token likewise kept only hashed and checked in the database on
every request. A valid code always opens; wrong ones are counted by address, atomically in the
database (every process together): past 5 in 10 minutes that address is told to wait — and past
100 through one trusted proxy, every wrong code through it, so a visitor who rewrites
X-Forwarded-For to look like many cannot guess for ever."""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Callable

from bot.contract import PageEntry, PageVisit
from storage.ports import Pages

LINK_TTL_S = 10 * 60
SESSION_TTL_S = 12 * 3600
WRONG_CODES_PER_ADDRESS = 5  # within LINK_TTL_S; then that address waits
WRONG_CODES_PER_PROXY = 100  # within LINK_TTL_S, through one trusted proxy, whoever it forwards for
SECRET_BYTES = 32  # a code's and a token's randomness: 256 bits, never guessed
_SECRET = re.compile(r"[A-Za-z0-9_-]{20,100}")  # what token_urlsafe makes, give or take

LINK_REFUSED = ("This link does not open your page: it was used already, is older than 10 minutes, or was "
                "never made. Send /memory page to the bot for a new one.")
TOO_MANY = "Too many links that did not work came from here. Wait 10 minutes, then use a new link."


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class Door:
    def __init__(self, pages: Pages, clock: Callable[[], float]):
        self.pages = pages
        self.clock = clock

    async def make_link(self, person_id: int, characters: tuple[int, ...]) -> str:
        """A new one-time code for the person (their earlier unspent one stops working)."""
        code = secrets.token_urlsafe(SECRET_BYTES)
        await self.pages.add_link(digest(code), person_id, characters, self.clock() + LINK_TTL_S)
        return code

    async def enter(self, code: str, address: str, via: str | None = None) -> PageEntry:
        """A session for a valid code, whoever guessed wrong before; else the refusal, counted."""
        now = self.clock()
        token = secrets.token_urlsafe(SECRET_BYTES)
        session = None
        if _SECRET.fullmatch(code):
            session = await self.pages.exchange(digest(code), now, digest(token),
                                                      secrets.token_urlsafe(SECRET_BYTES), now + SESSION_TTL_S)
        if session is not None:
            return PageEntry(token, SESSION_TTL_S)
        since = now - LINK_TTL_S
        too_many = await self.pages.add_failure(address, now, since) > WRONG_CODES_PER_ADDRESS
        if via is not None:
            too_many |= await self.pages.add_failure(f"via {via}", now, since) > WRONG_CODES_PER_PROXY
        return PageEntry(None, refusal=TOO_MANY, too_many=True) if too_many else PageEntry(None, refusal=LINK_REFUSED)

    async def visit(self, token: str) -> PageVisit | None:
        if not _SECRET.fullmatch(token):
            return None
        session = await self.pages.session(digest(token), self.clock())
        if session is None:
            return None
        return PageVisit(token, session.person_id, session.characters, session.csrf)

    async def leave(self, token: str) -> None:
        await self.pages.end_session(digest(token))
