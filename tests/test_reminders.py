"""SPEC 19, reminders, rule by rule, with a clock the test moves, on SQLite and PostgreSQL: the
`remind` tool called by the scripted model through the real turn, the due scan through the
outbox, and a `FirstWriter` that records what it is asked to send (the platforms' own are
tested through the real process in tests/test_reminders_end_to_end.py)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Sequence
from zoneinfo import ZoneInfo

import pytest

from bot.contract import Asker, ConversationKey, IncomingMessage, Reply, Unreachable
from bot.text import local_words
from bot.tools.remind import Remind
from bot.tools.when import NotAWhen, next_time, resolve
from tests.conftest import Chat, FakeClock, config_dict, runtimes_on, shown
from tests.fakes.llm_server import status, text, tool_calls

PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


def at(zone: str, *when: int) -> float:
    return datetime(*when, tzinfo=ZoneInfo(zone)).timestamp()


class Writer:
    """An adapter writing first on "telegram" for Mira: what it sent (`failing`: how many sends
    fail first, as a platform that is down answers)."""

    platform = "telegram"
    character_name = "Mira"

    def __init__(self, refuses: bool = False, failing: int = 0):
        self.sent: list[tuple[ConversationKey, str]] = []
        self.refuses = refuses
        self.failing = failing
        self.tries = 0

    async def asker_for(self, key: ConversationKey, user_id: str) -> Asker:
        return Asker("telegram", user_id, (key.chat_id,))

    async def write_first(self, key: ConversationKey, letter: Reply, stale: Sequence[str] = ()) -> list[str]:
        self.tries += 1
        if self.refuses:
            raise Unreachable("Forbidden: bot was blocked by the user")
        if self.failing:
            self.failing -= 1
            raise ConnectionError("Telegram answered 502 Bad Gateway")
        self.sent.append((key, letter.text))
        return [str(7000 + len(self.sent))]


@pytest.fixture(params=["sqlite", "postgresql"])
async def bot(request, llm, tmp_path):
    """A runtime (or several on one database) on a clock the test moves."""
    async with runtimes_on(request.param, tmp_path) as start_on:
        async def start(clock: FakeClock, count: int = 1, **tables):
            return await start_on(config_dict(llm.base_url, tmp_path / "keepsake.sqlite3") | tables, clock, count)
        yield start


def dm(runtime, user: str = "501", name: str = "Ann") -> Chat:
    return Chat(runtime, user=user, name=name, chat_id=user, platform="telegram")


def told(llm, request: int = -1) -> dict:
    """What the remind tool answered the model."""
    return json.loads(next(m["content"] for m in llm.requests[request]["messages"] if m["role"] == "tool"))


async def scan(runtime, writer: Writer) -> int:
    with runtime.core.presence.writing_first(writer):
        return await runtime.reminders.scan("Mira")


async def set_one(ann: Chat, llm, **arguments) -> dict:
    llm.add(tool_calls(("remind", {"what": "call the harbour office"} | arguments)), text("I will remind you."))
    await ann.say("remind me please")
    return told(llm)


# -- when: the server's arithmetic ------------------------------------------------------------
def test_tomorrow_at_nine_said_at_23_30_local_is_the_persons_tomorrow():
    now = at(NEW_YORK, 2027, 3, 1, 23, 30)  # already 04:30 on 2 March in UTC
    assert local_words(resolve(now, NEW_YORK, day="tomorrow", at="9:00"), NEW_YORK) == \
        "Tuesday 2 March 2027, 09:00 (America/New_York)"


@pytest.mark.parametrize("zone, asked_on, clock, expected", [
    (PARIS, (2027, 3, 27), "02:30", "Sunday 28 March 2027, 03:30 (Europe/Paris)"),  # skipped: after the gap
    (PARIS, (2027, 10, 30), "02:30", "Sunday 31 October 2027, 02:30 (Europe/Paris)"),  # repeated: the second
    (NEW_YORK, (2027, 3, 13), "02:30", "Sunday 14 March 2027, 03:30 (America/New_York)"),
    (NEW_YORK, (2027, 11, 6), "01:30", "Sunday 7 November 2027, 01:30 (America/New_York)"),
])
def test_a_local_time_a_clock_change_skips_or_repeats_resolves_to_the_later_valid_instant(
        zone, asked_on, clock, expected):
    due = resolve(at(zone, *asked_on, 12, 0), zone, day="tomorrow", at=clock)
    assert local_words(due, zone) == expected
    hour, minute = map(int, clock.split(":"))
    readings = [datetime(*asked_on, hour, minute, tzinfo=ZoneInfo(zone), fold=f) for f in (0, 1)]
    readings = [r.replace(day=r.day + 1).timestamp() for r in readings]
    assert due == max(readings)  # of the two readings, the later one


@pytest.mark.parametrize("zone, spring, autumn", [(PARIS, (2027, 3, 27), (2027, 10, 30)),
                                                  (NEW_YORK, (2027, 3, 13), (2027, 11, 6))])
def test_a_daily_reminder_keeps_its_local_time_across_both_clock_changes(zone, spring, autumn):
    for day in (spring, autumn):
        first = resolve(at(zone, *day, 8, 0), zone, day="today", at="09:30")
        following = next_time(first, zone, "daily")
        assert local_words(following, zone).endswith(", 09:30 (" + zone + ")")
        assert following - first in (23 * 3600, 25 * 3600)  # the clock changed in between


def test_kiritimati_at_utc_plus_14_reads_its_own_day():
    now = at("UTC", 2027, 1, 15, 12, 0)  # 02:00 on 16 January at Kiritimati
    assert local_words(resolve(now, "Pacific/Kiritimati", day="today", at="09:00"), "Pacific/Kiritimati") == \
        "Saturday 16 January 2027, 09:00 (Pacific/Kiritimati)"


@pytest.mark.parametrize("asked, why", [
    ({"after": "30 seconds"}, "at least a minute away"), ({"after": "59 seconds"}, "at least a minute away"),
    ({"after": "400 days"}, "at most a year away"), ({"after": "366 days"}, "at most a year away"),
    ({"day": "2026-01-01", "at": "09:00"}, "is in the past"), ({"after": "soon"}, "not a duration"),
    ({}, "say when"),
])
def test_a_time_in_the_past_under_a_minute_or_over_a_year_away_is_refused_with_the_reason(asked, why):
    with pytest.raises(NotAWhen, match=why):
        resolve(at(PARIS, 2027, 1, 15, 12, 0), PARIS, **asked)


@pytest.mark.parametrize("after", ["60 seconds", "365 days"])
def test_a_time_a_minute_or_a_year_away_is_taken(after):
    now = at(PARIS, 2027, 1, 15, 12, 0)
    assert resolve(now, PARIS, after=after) - now in (60, 365 * 86_400)


@pytest.mark.parametrize("after, minutes", [
    ("an hour", 60), ("a minute", 1), ("half an hour", 30), ("1h30", 90), ("2h", 120), ("1 h 15 m", 75),
    ("an hour and a half", 90), ("2 hours and 30 minutes", 150), ("one week", 7 * 24 * 60),
])
def test_a_duration_is_read_as_people_write_it(after, minutes):
    now = at(PARIS, 2027, 1, 15, 12, 0)
    assert resolve(now, PARIS, after=after) == now + minutes * 60


def test_next_friday_is_the_coming_friday_and_never_today():
    friday_noon = at(PARIS, 2027, 1, 15, 12, 0)  # 15 January 2027 is a Friday
    assert local_words(resolve(friday_noon, PARIS, day="next friday", at="18:00"), PARIS).startswith(
        "Friday 22 January 2027, 18:00")
    assert local_words(resolve(friday_noon, PARIS, day="friday", at="18:00"), PARIS).startswith(
        "Friday 15 January 2027, 18:00")  # later today
    assert local_words(resolve(friday_noon, PARIS, day="next monday", at="9am"), PARIS).startswith(
        "Monday 18 January 2027, 09:00")


# -- the tool, through the real turn ----------------------------------------------------------
async def test_the_remind_tool_resolves_in_the_persons_time_zone_and_tells_the_model_the_local_time(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 23, 30))
    runtime = await bot(clock)
    ann = dm(runtime)
    assert "Europe/Paris" in (await ann.run("timezone", zone="europe/paris")).text
    answer = await set_one(ann, llm, day="tomorrow", time="09:00")
    assert answer == {"set": True, "number": answer["number"], "when": "Saturday 16 January 2027, 09:00 (Europe/Paris)",
                      "repeat": "once", "what": "call the harbour office"}
    pending, = await runtime.store.reminders.pending(await ann.person_id())
    assert pending.due_at == at(PARIS, 2027, 1, 16, 9, 0) and pending.zone == PARIS  # stored in UTC, with the zone


async def test_every_prompt_carries_the_date_and_time_in_the_persons_zone(bot, llm):
    runtime = await bot(FakeClock(at("UTC", 2027, 1, 15, 23, 30)))
    ann = dm(runtime)
    await ann.run("timezone", zone="Pacific/Kiritimati")
    llm.add(text("Morning already?"))
    await ann.say("what day is it?")
    assert "Now: Saturday 16 January 2027, 13:30 (Pacific/Kiritimati), where Ann is." in llm.prompt_text()


async def test_in_the_console_the_model_is_told_it_cannot_set_reminders_there(bot, llm):
    """#62: the console offers no `remind` (nothing would deliver it); the model is told, so it
    says so instead of promising."""
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)))
    llm.add(text("I can't set reminders here — ask me on Telegram."))
    await Chat(runtime).say("remind me in 2 minutes to check the kettle")  # the console's owner
    request = llm.requests[-1]
    assert "remind" not in [spec["function"]["name"] for spec in request.get("tools", [])]
    assert Remind.not_here in llm.prompt_text()
    llm.add(tool_calls(("remind", {"what": "check the kettle", "after": "2 minutes"})), text("Done."))
    await dm(runtime).say("remind me in 2 minutes to check the kettle")  # on Telegram it is offered, and untold
    assert "remind" in [spec["function"]["name"] for spec in llm.requests[-2]["tools"]]
    assert Remind.not_here not in json.dumps(llm.requests[-2]["messages"])


async def test_at_most_25_pending_reminders_a_person(bot, llm):
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)))
    ann = dm(runtime)
    person = await ann.person_id()
    conversation = (await runtime.cast.conversation_for(ann.key)).id
    for n in range(24):
        await runtime.store.reminders.add(person, runtime.cast.character("Mira").id, conversation, 0,
                                          at(PARIS, 2027, 2, 1, 9, 0) + n, PARIS, f"thing {n}", "once", 100)
    assert "error" not in await set_one(ann, llm, after="2 hours")  # the 25th is set
    answer = await set_one(ann, llm, after="3 hours")
    assert answer["error"].startswith("not set: they already have 25 reminders waiting")
    assert len(await runtime.store.reminders.pending(person)) == 25


async def test_quiet_hours_never_hold_a_reminder_back(bot, llm):
    """Check-ins keep quiet hours (SPEC 14); a reminder is the person's own request (SPEC 19)."""
    clock = FakeClock(at(PARIS, 2027, 1, 15, 23, 0))
    characters = config_dict(llm.base_url, "unused")["characters"]
    characters[0]["checkins"] = {"after_hours": 48, "quiet_hours": "22:00-09:00", "timezone": PARIS}
    runtime = await bot(clock, characters=characters, limits={"timezone": PARIS})
    ann, writer = dm(runtime), Writer()
    await set_one(ann, llm, after="2 minutes")
    clock.now += 121  # 23:02 in Paris, inside Mira's quiet hours
    llm.add(text("Ann — the harbour office, before it is too late."))
    assert await scan(runtime, writer) == 1
    assert writer.sent == [(ann.key, "Ann — the harbour office, before it is too late.")]


# -- delivery -----------------------------------------------------------------------------------
async def test_when_due_the_character_writes_it_once_in_its_voice_and_the_conversation_keeps_it(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock, limits={"timezone": PARIS, "tokens_per_day": 100_000})
    ann, writer = dm(runtime), Writer()
    await set_one(ann, llm, after="2 minutes")
    clock.now += 60
    assert await scan(runtime, writer) == 0  # not yet
    clock.now += 61
    llm.add(text("Ann — the harbour office closes at noon. Time to call them."))
    assert await scan(runtime, writer) == 1
    assert writer.sent == [(ann.key, "Ann — the harbour office closes at noon. Time to call them.")]
    instruction = llm.requests[-1]["messages"][-1]["content"]
    assert 'asked you to remind them, now, of this: "call the harbour office"' in instruction
    assert await scan(runtime, writer) == 0  # once
    assert await runtime.store.reminders.pending(await ann.person_id()) == []
    llm.add(text("You're welcome."))
    await ann.say("thanks!")  # the character knows it fired: its letter is in the window
    assert "Time to call them." in llm.prompt_text()
    spent = await runtime.store.usage.spent(await ann.person_id(), "2027-01-15", "2027-01-15")
    assert spent >= sum(u["total_tokens"] for u in llm.usages)  # the letter's tokens count against the allowance


async def test_a_model_failure_still_sends_the_persons_words_plainly(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock)
    ann, writer = dm(runtime), Writer()
    await set_one(ann, llm, after="5 minutes")
    clock.now += 301
    llm.add(status(500), status(500), status(500))
    assert await scan(runtime, writer) == 1
    assert writer.sent == [(ann.key, "⏰ call the harbour office")]


async def test_a_reminder_is_sent_once_after_the_person_deleted_every_message_they_wrote_there(bot, llm):
    """What the person wrote may go before the reminder is due (deleted on the platform, or past
    `[storage] retention_days`): the reminder is still theirs, and is written and sent once."""
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock)
    ann, writer = dm(runtime), Writer()
    llm.add(tool_calls(("remind", {"what": "call the harbour office", "after": "5 minutes"})), text("I will."))
    await shown(runtime, await runtime.core.conversation.handle(IncomingMessage(
        ann.key, ann.identity, "Ann", "remind me please", platform_message_id="m1", asker=ann.asker)))
    assert await runtime.core.conversation.deleted(ann.key, "m1")  # as Discord tells of a deletion
    clock.now += 301
    llm.add(text("Ann — time to call the harbour office."))
    assert await scan(runtime, writer) == 1
    assert writer.sent == [(ann.key, "Ann — time to call the harbour office.")]
    assert await scan(runtime, writer) == 0 and len(llm.requests) == 3  # written once


async def test_due_while_every_process_was_down_is_sent_saying_how_late_or_as_missed_past_grace(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock)  # [reminders] grace_hours: 12 unless set
    ann, writer = dm(runtime), Writer()
    await set_one(ann, llm, after="10 minutes")
    await set_one(ann, llm, after="20 minutes", what="feed the cat")
    clock.now += 10 * 60 + 3 * 3600  # 3 hours late for the first, later still for the second
    llm.add(text("Sorry, I'm three hours late: call the harbour office!"))
    with runtime.core.presence.writing_first(writer):
        assert await runtime.reminders.scan("Mira") == 2
    assert "You are 3 hours late with it" in llm.requests[-1]["messages"][-1]["content"]
    await set_one(ann, llm, after="1 hour", what="water the plants")
    clock.now += 13.5 * 3600  # 12 and a half hours late: past the 12 hours' grace
    assert await scan(runtime, writer) == 1
    assert writer.sent[-1][1] == "⏰ A reminder I missed — it was due Friday 15 January 2027, 15:10 (UTC): " \
                                 "water the plants"


async def test_regenerate_takes_back_the_reminder_its_reply_set(bot, llm):
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)))
    ann = dm(runtime)
    llm.add(tool_calls(("remind", {"what": "call the harbour office", "after": "1 hour"})), text("Done."))
    reply = await ann.say("remind me in an hour to call the harbour office")
    assert len(await runtime.store.reminders.pending(await ann.person_id())) == 1
    llm.add(text("Hm, what would you like?"))
    await ann.regenerate(reply.turn)
    assert await runtime.store.reminders.pending(await ann.person_id()) == []


async def test_forgetme_leaves_no_reminders(bot, llm):
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)))
    ann = dm(runtime)
    await set_one(ann, llm, after="1 hour")
    person = await ann.person_id()
    await runtime.store.people.forget_person(person, "2027-01-15")
    assert await runtime.store.db.value("SELECT COUNT(*) FROM reminders") == 0


async def test_reminders_lists_them_with_local_times_and_cancels_by_number_or_button_only_ones_own(bot, llm):
    """Each person's reminders are numbered 1, 2, … soonest first, as /reminders shows them."""
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)), limits={"timezone": PARIS})
    ann, bob = dm(runtime), dm(runtime, "502", "Bob")
    assert (await set_one(ann, llm, day="tomorrow", time="9am"))["number"] == 1
    assert (await set_one(ann, llm, after="3 hours", repeat="daily"))["number"] == 1  # sooner: first now
    assert (await set_one(bob, llm, after="2 hours"))["number"] == 1  # Bob's first is his 1
    listed = await ann.run("reminders")
    assert listed.text.splitlines()[1:3] == [  # soonest first
        "⏰ 1 · Friday 15 January 2027, 15:00 (Europe/Paris), every day — call the harbour office",
        "⏰ 2 · Saturday 16 January 2027, 09:00 (Europe/Paris) — call the harbour office"]
    assert "no reminder 2" in (await bob.run("reminders", action="cancel", n="2")).text  # Bob has one
    assert (await ann.run("reminders", action="cancel", n="1")).text == "Reminder 1 is cancelled."
    button, = listed.buttons[1]  # "Cancel ⏰ 2", made before the cancel: it names its reminder, not a place
    assert (await bob.press(button.action)).refused  # another person's button
    assert (await ann.press(button.action)).text == "Reminder 1 is cancelled."  # the soonest of hers by now
    assert await runtime.store.reminders.pending(await ann.person_id()) == []
    assert len(await runtime.store.reminders.pending(await bob.person_id())) == 1


async def test_a_letter_the_platform_refuses_is_taken_back_and_nothing_more_is_sent(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock)
    ann = dm(runtime)
    await set_one(ann, llm, after="2 minutes")
    clock.now += 121
    llm.add(text("Call the harbour office!"))
    assert await scan(runtime, Writer(refuses=True)) == 0
    assert await runtime.store.db.value("SELECT COUNT(*) FROM messages WHERE content = 'Call the harbour office!'") == 0
    assert await runtime.store.reminders.pending(await ann.person_id()) == []


async def test_a_letter_that_cannot_be_sent_is_composed_once_and_retried_as_it_is_with_backoff(bot, llm, caplog):
    """SPEC 19 "A letter that cannot be delivered is not written again": 1, 5, 30 minutes, then
    hourly; the model is asked once; one WARNING for the reminder, never a traceback."""
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock, limits={"tokens_per_day": 100_000})
    ann, writer = dm(runtime), Writer(failing=4)
    await set_one(ann, llm, after="2 minutes")
    clock.now += 121
    llm.add(text("Ann — call the harbour office!"))
    asked = len(llm.requests)
    tried_at = []
    while not writer.sent and clock.now < at(PARIS, 2027, 1, 15, 14, 0):  # a scan every 30 s of the clock
        tries = writer.tries
        await scan(runtime, writer)
        if writer.tries > tries:  # only some scans find it due again
            tried_at.append(clock.now)
        clock.now += 30
    assert [round(b - a) for a, b in zip(tried_at, tried_at[1:])] == [60, 300, 1_800, 3_600]
    assert writer.sent == [(ann.key, "Ann — call the harbour office!")]  # the kept letter, once
    assert len(llm.requests) == asked + 1  # written once
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "reminder" in r.getMessage()]
    assert len(warned) == 1 and not any(r.exc_info for r in caplog.records)
    assert await runtime.store.reminders.pending(await ann.person_id()) == []


async def test_a_letter_that_cannot_be_sent_within_grace_hours_is_given_up_once(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock, reminders={"grace_hours": 1})
    ann, writer = dm(runtime), Writer(failing=1_000)
    await set_one(ann, llm, after="2 minutes")
    clock.now += 121
    for _ in range(12):
        clock.now += 600
        await scan(runtime, writer)
    assert writer.sent == [] and await runtime.store.reminders.pending(await ann.person_id()) == []


async def test_a_daily_reminder_asked_for_02_30_stays_02_30_after_the_spring_change():
    """Europe/Paris skips 02:00–03:00 on 28 March 2027: that day 02:30 is 03:30, the next 02:30 again."""
    first = at(PARIS, 2027, 3, 27, 2, 30)
    skipped = next_time(first, PARIS, "daily", "02:30")
    assert local_words(skipped, PARIS) == "Sunday 28 March 2027, 03:30 (Europe/Paris)"  # the later valid instant
    assert local_words(next_time(skipped, PARIS, "daily", "02:30"), PARIS) == \
        "Monday 29 March 2027, 02:30 (Europe/Paris)"


async def test_the_remind_tool_keeps_the_time_of_day_asked_for_and_the_persons_name(bot, llm):
    runtime = await bot(FakeClock(at(PARIS, 2027, 3, 26, 12, 0)), limits={"timezone": PARIS})
    ann = dm(runtime)
    await set_one(ann, llm, day="tomorrow", time="02:30", repeat="daily")
    reminder, = await runtime.store.reminders.pending(await ann.person_id())
    assert reminder.at_clock == "02:30" and reminder.asked_by == "Ann"


async def test_a_group_letter_names_the_person_from_the_reminder_once_the_window_moved_on(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock)
    ann = Chat(runtime, user="501", name="Ann", chat_id="-100", platform="telegram", shared=True)
    await set_one(ann, llm, after="1 hour")
    bob = Chat(runtime, user="502", name="Bob", chat_id="-100", platform="telegram", shared=True)
    for n in range(60):  # Ann's message leaves the live window of 50
        await runtime.store.conversations.add_user_message(
            (await runtime.cast.conversation_for(bob.key)).id, await bob.person_id(), "Bob", f"chatter {n}", 3, None)
    clock.now += 3_601
    llm.add(status(500), status(500), status(500))  # the model fails: the person's words, plainly, named
    writer = Writer()
    assert await scan(runtime, writer) == 1
    assert writer.sent[-1][1] == "⏰ Ann: call the harbour office"


async def test_a_late_letter_that_falls_back_to_the_persons_words_says_how_late(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock)
    ann, writer = dm(runtime), Writer()
    await set_one(ann, llm, after="10 minutes")
    clock.now += 600 + 2 * 3600
    llm.add(status(500), status(500), status(500))
    assert await scan(runtime, writer) == 1
    assert writer.sent[-1][1] == "⏰ call the harbour office — 2 hours late: I could not write earlier."


async def test_with_no_grace_a_letter_the_scan_finds_seconds_late_is_not_missed(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    runtime = await bot(clock, reminders={"grace_hours": 0})
    ann, writer = dm(runtime), Writer()
    await set_one(ann, llm, after="2 minutes")
    clock.now += 120 + 2  # the scan's own delay
    llm.add(text("Call the harbour office, Ann."))
    assert await scan(runtime, writer) == 1 and writer.sent[-1][1] == "Call the harbour office, Ann."


def test_a_date_the_calendar_cannot_hold_is_not_a_date_never_a_traceback():
    with pytest.raises(NotAWhen, match="not a date"):  # in UTC it would be in the year 0
        resolve(at(PARIS, 2027, 1, 15, 12, 0), "Asia/Tokyo", day="0001-01-01", at="09:00")


async def test_two_processes_send_each_reminder_exactly_once(bot, llm):
    clock = FakeClock(at(PARIS, 2027, 1, 15, 12, 0))
    first, second = await bot(clock, count=2)
    ann = dm(first)
    for n in range(6):
        await set_one(ann, llm, after=f"{2 + n} minutes", what=f"thing {n}")
    clock.now += 3600
    llm.responder = lambda request: text("A reminder, as promised.")
    one, two = Writer(), Writer()
    with first.core.presence.writing_first(one), second.core.presence.writing_first(two):
        import asyncio
        await asyncio.gather(first.reminders.scan("Mira"), second.reminders.scan("Mira"))
    assert len(one.sent) + len(two.sent) == 6
    assert await first.store.reminders.pending(await ann.person_id()) == []


@pytest.mark.parametrize("written, answer", [
    ("localtime", "not a time zone I know"), ("Factory", "not a time zone I know"),
    ("US/Eastern", "not a time zone I know"), ("paris", "Did you mean Europe/Paris?"),
    ("new york", "Did you mean America/New_York?"), ("UTC+2", "Did you mean Etc/GMT-2"),
])
async def test_timezone_takes_canonical_iana_names_only_and_suggests_one_for_a_city_or_an_offset(
        bot, llm, written, answer):
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)))
    ann = dm(runtime)
    said = await ann.run("timezone", zone=written)
    assert not said.ok and answer in said.text
    assert (await runtime.store.people.profile(await ann.person_id())).time_zone is None


async def test_timezone_says_when_the_zone_shown_is_the_bots_default(bot, llm):
    runtime = await bot(FakeClock(at(PARIS, 2027, 1, 15, 12, 0)), limits={"timezone": PARIS})
    ann = dm(runtime)
    assert "Europe/Paris, the bot's default" in (await ann.run("timezone")).text
    await ann.run("timezone", zone="Asia/Tokyo")
    assert "default" not in (await ann.run("timezone")).text
