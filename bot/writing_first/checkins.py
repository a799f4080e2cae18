"""Writing first after an absence (SPEC 14): check-ins, off unless a character has
`[characters.checkins]`.

- Only one-to-one conversations with a person on a chat platform count (never a group, a server
  channel, the console, or nobody in particular): `Turns.store_and_queue` counts the person's
  messages there, and from `MIN_MESSAGES` on each absence waits for one check-in.
- A scheduled scan per character (every `scan_seconds`) finds, through an index, the absences
  older than `after_hours` — never inside `quiet_hours` read in `timezone` — for each platform
  whose adapter runs in this process and can write first (`FirstWriter`).
- Each is claimed through the database (one process at a time); someone the gate
  (bot/access/gate.py) does not let in is passed over; someone past `[limits]` right now waits for a
  later scan, but a check-in — the character's own message — takes nothing from their
  allowance. Check-ins go out at most `PER_SECOND` a second per writer (Telegram accepts about
  30 messages a second per bot). The model
  writes it from what a turn reads (card, the person's saved memories in play, the summary, the
  live window; no recall, no tools) with `INSTRUCTION`; it is stored with its "sent" mark and its
  receipt in one transaction (a failed model call leaves the absence waiting), then delivered
  with a "🔕 Don't write first" button. A platform that refuses (a blocked bot) takes the stored
  check-in back and leaves the person alone until they write again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime
from typing import Callable

from bot import metrics
from bot.access.budgets import Budgets
from bot.access.gate import Gate
from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.buttons import encode_action
from bot.config import CheckinsConfig
from bot.contract import Button, ConversationKey, FirstWriter
from bot.model.llm import LLMClient
from bot.model.tokens import TokenCounter
from bot.writing_first.outbox import Letter, Outbox, addressee, in_voice
from bot.present import Present
from bot.turn.context import read_context
from storage.ports import Absence, ConversationRow, MessageRow, Store

log = logging.getLogger(__name__)

MIN_MESSAGES = 4  # the person's messages in the conversation before a check-in may follow an absence
SCAN_BATCH = 100  # absences handled per platform and scan; the rest wait for the next scan
AT_ONCE = 8  # check-ins written at the same time (each waits seconds for the model)
PER_SECOND = 10  # check-ins sent a second at most, per writer (a bot account)
DONT_WRITE_FIRST = "🔕 Don't write first"
INSTRUCTION = """\
{user} has not written for {absence}. Write to them first, as yourself: one or two short, natural \
sentences that pick up something from your conversation or from what you know about them. Do not \
recite what you remember, do not mention this instruction or how long they were away to the hour, \
and ask at most one question."""


def counted_from(key: ConversationKey, person_id: int | None) -> int | None:
    """From how many of the person's messages there an absence waits for a check-in; None where
    messages do not count (not a person's, not one-to-one, not on a chat platform). The turn
    handler stores each message with it."""
    counts = person_id is not None and not key.is_shared and key.platform != "console"
    return MIN_MESSAGES if counts else None


def in_quiet_hours(now: float, config: CheckinsConfig) -> bool:
    """Whether `now` falls in the character's quiet hours, read in its time zone (a range may
    cross midnight: 22:00-09:00)."""
    if config.quiet_hours is None:
        return False
    local = datetime.fromtimestamp(now, config.zone)
    minute = local.hour * 60 + local.minute
    start, end = config.quiet_hours
    return start <= minute < end if start <= end else minute >= start or minute < end


def absence_words(seconds: float) -> str:
    """`3 days`, `5 hours`, `a few minutes`: how long the person was away, as the model is told."""
    hours = seconds / 3600
    if hours >= 48:
        return f"{int(hours // 24)} days"
    if hours >= 2:
        return f"{int(hours)} hours"
    return "a little while"


class Pace:
    """At most `per_second` calls a second return, in the order they came (a bot's sends). Each
    waits a gap after the call before it actually returned, not after its planned time: a wake-up
    the event loop delays must not bunch the sends after it."""

    def __init__(self, per_second: float):
        self.gap = 1 / per_second
        self.last = -float("inf")
        self.lock = asyncio.Lock()

    async def __call__(self) -> None:
        async with self.lock:
            wait = self.last + self.gap - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.last = time.monotonic()


class CheckIns:
    def __init__(self, store: Store, cast: Cast, gate: Gate, budgets: Budgets, llm: LLMClient, counter: TokenCounter,
                 context_window: int, configs: dict[str, CheckinsConfig], outbox: Outbox,
                 clock: Callable[[], float] = time.time, zone: str = "UTC"):
        self.store = store
        self.budgets = budgets  # a check-in sent is counted in /stats (it spends no one's allowance)
        self.cast = cast
        self.context_window = context_window
        self.gate = gate
        self.llm = llm
        self.counter = counter
        self.configs = {name.casefold(): config for name, config in configs.items()}
        self.outbox = outbox  # how a check-in goes out: claim, gate, compose, store, send (bot/writing_first/outbox.py)
        self.clock = clock
        self.zone = zone  # the deployment's time zone ([limits]), for a person who set none (SPEC 19)
        self.writers: Present[FirstWriter] = Present()

    def writes_first(self, character: str) -> bool:
        """Whether this character has [characters.checkins]."""
        return character.casefold() in self.configs

    def writing_first(self, writer: FirstWriter) -> contextlib.AbstractContextManager[None]:
        """While the block runs, this adapter delivers its character's check-ins on its platform."""
        return self.writers.joined(writer)

    def jobs(self) -> list[tuple[str, Callable[[], object], float]]:
        """(job id, scan, seconds between scans) for every character with check-ins; the log
        says at start-up which characters write first, and how."""
        for name, config in self.configs.items():
            quiet = "no quiet hours" if config.quiet_hours is None else "quiet {:02d}:{:02d}-{:02d}:{:02d}".format(
                *divmod(config.quiet_hours[0], 60), *divmod(config.quiet_hours[1], 60))
            log.info("check-ins: %s writes first after %g hours of quiet (%s, %s; a scan every %g s)",
                     self.cast.character(name).character.name, config.after_hours, quiet, config.timezone,
                     config.scan_seconds)
        return [(f"checkins:{name}", lambda name=name: self.scan(name), config.scan_seconds)
                for name, config in self.configs.items()]

    async def scan(self, character: str) -> int:
        """Write first in this character's due conversations; returns how many check-ins went out."""
        config = self.configs.get(character.casefold())
        now = self.clock()
        if config is None or in_quiet_hours(now, config):
            return 0
        stored = self.cast.character(character)
        at_once = asyncio.Semaphore(AT_ONCE)

        async def check_in(writer: FirstWriter, absence: Absence, pace: Pace) -> bool:
            async with at_once:
                try:
                    return await self._check_in(writer, stored, absence, pace)
                except Exception:  # one conversation's trouble never stops the others
                    log.exception("a check-in in conversation %d failed", absence.conversation_id)
                    return False

        sent = 0
        for writer in [w for w in self.writers if w.character_name.casefold() == character.casefold()]:
            due = await self.store.checkins.due(stored.id, writer.platform, now - config.after_hours * 3600, SCAN_BATCH)
            pace = Pace(PER_SECOND)
            sent += sum(await asyncio.gather(*(check_in(writer, absence, pace) for absence in due)))
        metrics.CHECKIN_SCANS.labels(stored.character.name).inc()
        return sent

    async def _check_in(self, writer: FirstWriter, stored: StoredCharacter, absence: Absence, pace: Pace) -> bool:
        conversation = await self.store.conversations.conversation_by_id(absence.conversation_id)
        key = self.cast.key_of(conversation) if conversation is not None else None
        user_id = next((user for platform, user in await self.store.people.identities_of(absence.person_id)
                        if platform == writer.platform), None)
        if key is None or user_id is None:
            return False
        letter = Letter(f"checkin:{absence.conversation_id}", absence.conversation_id, absence.person_id, stored, key,
                        user_id, writer)
        return await self.outbox.post(_CheckIn(self, absence, conversation), letter, pace,
                                      stale=lambda: self._regenerate_shown(absence.conversation_id))

    async def _regenerate_shown(self, conversation_id: int) -> list[str]:
        """Where the latest reply shows its Regenerate button, which stops working once a check-in
        follows it (only the latest reply can be regenerated): it goes when the check-in is sent."""
        latest = await self.store.turns.latest_turn(conversation_id)
        if latest is None or latest.reply_message_id is None:
            return []
        return (await self.store.conversations.platform_message_ids(latest.reply_message_id))[-1:]

    async def _compose(self, stored: StoredCharacter, conversation: ConversationRow,
                       absence: Absence) -> tuple[str, dict]:
        """The check-in, from what a turn reads (no recall, no tools), and its receipt."""
        now = self.clock()
        context = await read_context(self.store, stored, conversation, absence.person_id, self.context_window)
        speaker = addressee(context, absence.person_id) or "them"
        instruction = INSTRUCTION.format(user=speaker, absence=absence_words(now - absence.last_at))
        text, receipt, _ = await in_voice(self.llm, context, speaker, now, self.zone, instruction, {"checkin": True})
        return text, receipt


class _CheckIn:
    """One absence's check-in, as the outbox's source (bot/writing_first/outbox.py)."""

    def __init__(self, checkins: CheckIns, absence: Absence, conversation: ConversationRow):
        self.checkins, self.absence, self.conversation = checkins, absence, conversation

    async def may_wait(self, letter: Letter) -> bool:
        # past [limits] right now: a later scan tries again (a check-in takes nothing from them)
        return await self.checkins.gate.past(self.absence.person_id, letter.key)

    async def passed_over(self, letter: Letter) -> None:
        await self.checkins.store.checkins.pass_over(self.absence)  # [access]: they get none

    async def compose(self, letter: Letter) -> tuple[str, dict]:
        return await self.checkins._compose(letter.character, self.conversation, self.absence)

    async def keep(self, letter: Letter, text: str, receipt: dict) -> MessageRow | None:
        return await self.checkins.store.checkins.store(self.absence, letter.character.character.name, text,
                                                        self.checkins.counter.count(text), receipt)

    async def take_back(self, letter: Letter, row: MessageRow, for_good: bool, why: str, text: str,
                        receipt: dict) -> None:
        if for_good:
            log.info("a check-in in conversation %d was refused (%s): none until the person writes again",
                     letter.conversation_id, why)
        else:
            log.warning("check-in to person %d on %s could not be sent (%s); the next scan tries again",
                        self.absence.person_id, letter.writer.platform, why)
        await self.checkins.store.checkins.withdraw(self.absence, row.id, wait_again=not for_good)

    def buttons(self, letter: Letter) -> list[list[Button]]:
        return [[Button(DONT_WRITE_FIRST, encode_action(self.absence.person_id, "nocheckin"))]]

    async def sent(self, letter: Letter) -> None:
        name = letter.character.character.name
        log.info("check-in: %s wrote first to person %d on %s (conversation %d), %s after their last message",
                 name, self.absence.person_id, letter.writer.platform, self.absence.conversation_id,
                 absence_words(self.checkins.clock() - self.absence.last_at))
        metrics.CHECKINS_SENT.labels(name).inc()
        await self.checkins.budgets.checked_in(self.absence.person_id, letter.character.id)
