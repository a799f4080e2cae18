"""Reminders delivered (SPEC 19): the outbox's second source, after check-ins.

- A scan per character every SCAN_S asks the store for its reminders due on the platforms whose
  adapter runs in this process (`FirstWriter`), and posts a letter for each through the outbox
  (bot/writing_first/outbox.py): claimed in the database (several processes: exactly one
  sends), asked of the gate, written, stored unshown, sent, shown — or taken back, and due again.
- The character writes it in its voice from what a turn reads (no recall, no tools), told what
  the person asked to be reminded of and when they asked; in a group it names the person. A
  model failure, or a person past their tokens for today, gets the person's words plainly
  ("⏰ …"): a reminder is never lost to the model. Its tokens count against the allowance.
- Due while every process was down: within `[reminders] grace_hours` it is sent saying how late
  (also when it falls back to the person's words); past that it is sent as missed (plainly). The
  scan's own delay (up to SCAN_S) is no lateness. Quiet hours do not apply (the person asked).
- In a group the letter names the person as the reminder keeps them (`asked_by`), never from
  what is still in the live window.
- The letter is stored in the conversation, so the character knows it fired. A daily or weekly
  reminder moves to its next time once the letter is shown — at the local time it was asked for
  (`at_clock`), whatever clock change came between; a one-off one goes.
- A letter that cannot be delivered is not written again (SPEC 19): composed once, it is kept on
  the reminder and a retry sends it as it is. A chat that is gone (Telegram "chat not found", a
  blocked bot) ends the reminder with one INFO line; any other failure is tried again after
  BACKOFF_S (1, 5, 30 minutes, then hourly) while within `grace_hours`, one WARNING a reminder —
  then a one-off reminder goes, a repeating one moves on. (A group upgraded to a supergroup is
  followed by the adapter, which sends to the new chat.)
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

from bot.access.gate import Gate
from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.contract import Button, FirstWriter
from bot.model.llm import LLMClient, LLMError
from bot.model.tokens import TokenCounter
from bot.present import Present
from bot.text import local_words
from bot.tools.when import next_time
from bot.turn.context import addressee, read_context
from bot.writing_first.outbox import Letter, Outbox, in_voice
from storage.ports import MessageRow, ReminderRow, Store

log = logging.getLogger(__name__)
SCAN_S = 2.0  # how often due reminders are looked for (an indexed query): one is sent within 2 s of its time
SCAN_BATCH = 100  # reminders handled per platform and scan; the rest wait for the next scan
LATE_S = 120  # later than this, the letter says how late it is
INSTRUCTION = """\
{when_asked}, {user} asked you to remind them, now, of this: "{words}". Remind them, as yourself, in \
one or two short sentences; say plainly what it is about.{late}{group}"""
LATE = " You are {late} late with it (you could not write earlier): say so, briefly."
GROUP = " Others read this chat: address {user} by name."
PLAIN = "⏰ {name}{words}"
LATE_PLAIN = "⏰ {name}{words} — {late} late: I could not write earlier."
MISSED = "⏰ {name}A reminder I missed — it was due {when}: {words}"
BACKOFF_S = (60, 300, 1800, 3600)  # after the 1st, 2nd, 3rd failed send, then every hour


def lateness_words(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} minutes"
    hours = round(seconds / 3600)
    return f"{hours} hours"


class RemindersDue:
    """Due reminders: the scans, and the outbox's source of each letter (bot/writing_first/outbox.py),
    written about its reminder (`letter.about`)."""

    def __init__(self, store: Store, cast: Cast, gate: Gate, llm: LLMClient, counter: TokenCounter,
                 context_window: int, outbox: Outbox, writers: Present[FirstWriter], grace_hours: float,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.cast = cast
        self.gate = gate
        self.llm = llm
        self.counter = counter
        self.context_window = context_window
        self.outbox = outbox
        self.writers = writers  # the adapters that can write first, shared with check-ins
        self.grace_s = grace_hours * 3600
        self.clock = clock

    def jobs(self) -> list[tuple[str, Callable[[], object], float]]:
        """(job id, scan, seconds between scans) for every character this process runs."""
        return [(f"reminders:{name.casefold()}", lambda name=name: self.scan(name), SCAN_S)
                for name in self.cast.names()]

    async def scan(self, character: str) -> int:
        """Send this character's due reminders; how many went out."""
        stored = self.cast.character(character)
        sent = 0
        for writer in [w for w in self.writers if w.character_name.casefold() == character.casefold()]:
            for reminder in await self.store.reminders.due(stored.id, writer.platform, self.clock(), SCAN_BATCH):
                try:
                    sent += await self._remind(writer, stored, reminder)
                except Exception:  # one reminder's trouble never stops the others
                    log.exception("reminder %d could not be sent", reminder.id)
        return sent

    async def _remind(self, writer: FirstWriter, stored: StoredCharacter, reminder: ReminderRow) -> bool:
        letter = await self.outbox.address(writer, stored, reminder.conversation_id, reminder.person_id,
                                           f"reminder:{reminder.id}", reminder)
        if letter is None:
            await self.store.reminders.drop(reminder.id)  # nowhere to send it any more
            return False

        async def stale() -> list[str]:
            return []
        return await self.outbox.post(self, letter, stale)

    # -- the outbox's source: each letter is about a reminder -----------------------------------
    async def still_due(self, letter: Letter[ReminderRow]) -> bool:
        return await self.store.reminders.still_due(letter.about)

    async def may_wait(self, letter: Letter[ReminderRow]) -> bool:
        return False  # the person asked for it: no quiet hours, and past [limits] it goes plainly

    async def passed_over(self, letter: Letter[ReminderRow]) -> None:
        log.info("reminder %d: the person may not be written to here any more; it is dropped", letter.about.id)
        await self.store.reminders.drop(letter.about.id)

    async def compose(self, letter: Letter[ReminderRow]) -> tuple[str, dict]:
        """The letter: in the character's voice; plainly when the model fails, the person is past
        their tokens, or it is past the grace period (missed)."""
        reminder, conversation = letter.about, letter.conversation
        if reminder.letter is not None:  # composed before; a retry sends it as it is
            return reminder.letter, json.loads(reminder.letter_receipt or "{}")
        now = self.clock()
        late = now - reminder.due_at
        name, shared = "", conversation.is_shared
        context = await read_context(self.store, letter.character, conversation, reminder.person_id,
                                     self.context_window, speaker=reminder.asked_by or None)
        speaker = reminder.asked_by or addressee(context.window, reminder.person_id)
        if shared and speaker:
            name = f"{speaker}: "
        plain = {"at": now, "reminder": True, "plain": True}
        if late > self.grace_s + SCAN_S:  # the scan's own delay is no lateness
            missed = MISSED.format(name=name, when=local_words(reminder.due_at, reminder.zone), words=reminder.words)
            return missed, plain

        def plainly() -> str:
            if late > LATE_S:
                return LATE_PLAIN.format(name=name, words=reminder.words, late=lateness_words(late))
            return PLAIN.format(name=name, words=reminder.words)
        if await self.gate.past_allowance(reminder.person_id) or await self.gate.past(reminder.person_id, letter.key):
            return plainly(), plain
        instruction = INSTRUCTION.format(
            when_asked=f"On {local_words(reminder.created_at, reminder.zone)}", user=speaker or "the person",
            words=reminder.words, late=LATE.format(late=lateness_words(late)) if late > LATE_S else "",
            group=GROUP.format(user=speaker) if shared and speaker else "")
        try:
            text, receipt, completion = await in_voice(self.llm, context, speaker or "them", now, reminder.zone,
                                                       instruction, {"reminder": True})
        except LLMError as failure:
            log.warning("reminder %d: the model could not write it (%s); sent plainly", reminder.id, failure)
            return plainly(), plain
        await self.gate.spend(reminder.person_id, letter.character.id,  # as the server counted, else as counted here
                              completion.prompt_tokens or receipt["tokens"]["total"],
                              completion.completion_tokens or self.counter.count(text))
        return text, receipt

    def following(self, reminder: ReminderRow) -> float | None:
        """Its next time after this one (None: a one-off one); missed ones are not sent one by one."""
        following = next_time(reminder.due_at, reminder.zone, reminder.repeat, reminder.at_clock)
        while following is not None and following <= self.clock():
            following = next_time(following, reminder.zone, reminder.repeat, reminder.at_clock)
        return following

    async def keep(self, letter: Letter[ReminderRow], text: str, receipt: dict) -> MessageRow | None:
        return await self.store.reminders.keep(letter.about, self.following(letter.about),
                                               letter.character.character.name, text, self.counter.count(text), receipt)

    async def take_back(self, letter: Letter[ReminderRow], row: MessageRow, for_good: bool, why: str, text: str,
                        receipt: dict) -> None:
        reminders, reminder = self.store.reminders, letter.about
        await reminders.take_back(row.id)
        if for_good:  # the chat is gone or refuses the person: nothing more is sent there
            await reminders.drop(reminder.id)
            log.info("reminder %d: the chat does not take it (%s); the reminder ends", reminder.id, why)
            return
        retry_at = self.clock() + BACKOFF_S[min(reminder.attempts, len(BACKOFF_S) - 1)]
        if retry_at - reminder.due_at > self.grace_s:
            log.warning("reminder %d could not be delivered within [reminders] grace_hours (%s); %s", reminder.id,
                        why, "it ends" if reminder.repeat == "once" else "it waits for its next time")
            await reminders.move_on(reminder, self.following(reminder))
            return
        if reminder.attempts == 0:  # one WARNING a reminder: the retries say no more
            log.warning("reminder %d could not be sent (%s); its letter is kept and tried again, first in %d "
                        "minute(s)", reminder.id, why, BACKOFF_S[0] // 60)
        await reminders.put_off(reminder, text, receipt, retry_at)

    def buttons(self, letter: Letter[ReminderRow]) -> list[list[Button]]:
        return []

    async def sent(self, letter: Letter[ReminderRow]) -> None:
        log.info("reminder %d sent to person %d on %s, %s after it was due", letter.about.id,
                 letter.person_id, letter.writer.platform,
                 lateness_words(max(0.0, self.clock() - letter.about.due_at)))

