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
  allowance. Check-ins go out at most `PER_SECOND` a second per writer (bot/writing_first/outbox.py;
  Telegram accepts about 30 messages a second per bot). The model
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
from bot.contract import Button, ConversationKey, FirstWriter, traits_of
from bot.model.llm import LLMClient
from bot.model.tokens import TokenCounter
from bot.writing_first.outbox import Letter, Outbox, in_voice
from bot.present import Present
from bot.turn.context import addressee, read_context
from storage.ports import Absence, MessageRow, Store

log = logging.getLogger(__name__)

MIN_MESSAGES = 4  # the person's messages in the conversation before a check-in may follow an absence
SCAN_BATCH = 100  # absences handled per platform and scan; the rest wait for the next scan
AT_ONCE = 8  # check-ins written at the same time (each waits seconds for the model)
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
    counts = person_id is not None and not key.is_shared and traits_of(key.platform).chat
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


class CheckIns:
    """Check-ins: the scans, and the outbox's source of each one (bot/writing_first/outbox.py),
    written about the person's absence (`letter.about`)."""

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

        async def check_in(writer: FirstWriter, absence: Absence) -> bool:
            async with at_once:
                try:
                    return await self._check_in(writer, stored, absence)
                except Exception:  # one conversation's trouble never stops the others
                    log.exception("a check-in in conversation %d failed", absence.conversation_id)
                    return False

        sent = 0
        for writer in [w for w in self.writers if w.character_name.casefold() == character.casefold()]:
            due = await self.store.checkins.due(stored.id, writer.platform, now - config.after_hours * 3600, SCAN_BATCH)
            sent += sum(await asyncio.gather(*(check_in(writer, absence) for absence in due)))
        metrics.CHECKIN_SCANS.labels(stored.character.name).inc()
        return sent

    async def _check_in(self, writer: FirstWriter, stored: StoredCharacter, absence: Absence) -> bool:
        letter = await self.outbox.address(writer, stored, absence.conversation_id, absence.person_id,
                                           f"checkin:{absence.conversation_id}", absence)
        if letter is None:
            return False
        return await self.outbox.post(self, letter, stale=lambda: self._regenerate_shown(absence.conversation_id))

    async def _regenerate_shown(self, conversation_id: int) -> list[str]:
        """Where the latest reply shows its Regenerate button, which stops working once a check-in
        follows it (only the latest reply can be regenerated): it goes when the check-in is sent."""
        latest = await self.store.turns.latest_turn(conversation_id)
        if latest is None or latest.reply_message_id is None:
            return []
        return (await self.store.conversations.platform_message_ids(latest.reply_message_id))[-1:]

    # -- the outbox's source: each letter is about an absence -----------------------------------
    async def still_due(self, letter: Letter[Absence]) -> bool:
        return await self.store.checkins.still_waiting(letter.about)

    async def may_wait(self, letter: Letter[Absence]) -> bool:
        # past [limits] right now: a later scan tries again (a check-in takes nothing from them)
        return await self.gate.past(letter.person_id, letter.key)

    async def passed_over(self, letter: Letter[Absence]) -> None:
        await self.store.checkins.pass_over(letter.about)  # [access]: they get none

    async def compose(self, letter: Letter[Absence]) -> tuple[str, dict]:
        """The check-in, from what a turn reads (no recall, no tools), and its receipt."""
        now = self.clock()
        context = await read_context(self.store, letter.character, letter.conversation, letter.person_id,
                                     self.context_window)
        speaker = addressee(context.window, letter.person_id) or "them"
        instruction = INSTRUCTION.format(user=speaker, absence=absence_words(now - letter.about.last_at))
        text, receipt, _ = await in_voice(self.llm, context, speaker, now, self.zone, instruction, {"checkin": True})
        return text, receipt

    async def keep(self, letter: Letter[Absence], text: str, receipt: dict) -> MessageRow | None:
        return await self.store.checkins.store(letter.about, letter.character.character.name, text,
                                               self.counter.count(text), receipt)

    async def take_back(self, letter: Letter[Absence], row: MessageRow, for_good: bool, why: str, text: str,
                        receipt: dict) -> None:
        if for_good:
            log.info("a check-in in conversation %d was refused (%s): none until the person writes again",
                     letter.conversation_id, why)
        else:
            log.warning("check-in to person %d on %s could not be sent (%s); the next scan tries again",
                        letter.person_id, letter.writer.platform, why)
        await self.store.checkins.withdraw(letter.about, row.id, wait_again=not for_good)

    def buttons(self, letter: Letter[Absence]) -> list[list[Button]]:
        return [[Button(DONT_WRITE_FIRST, encode_action(letter.person_id, "nocheckin"))]]

    async def sent(self, letter: Letter[Absence]) -> None:
        name = letter.character.character.name
        log.info("check-in: %s wrote first to person %d on %s (conversation %d), %s after their last message",
                 name, letter.person_id, letter.writer.platform, letter.conversation_id,
                 absence_words(self.clock() - letter.about.last_at))
        metrics.CHECKINS_SENT.labels(name).inc()
        await self.budgets.checked_in(letter.person_id, letter.character.id)
