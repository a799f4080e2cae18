"""SPEC section 14 — writing first after an absence (check-ins), rule by rule, with a clock the
test moves, on SQLite and PostgreSQL. The adapter side is a `FirstWriter` that records what it
is asked to send (the Telegram and Discord adapters' own are tested over their protocols in
tests/test_telegram.py, tests/test_discord.py and tests/test_checkins_end_to_end.py)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Sequence

import pytest

from bot.access.rules import AccessRules
from bot.contract import Asker, Button, ConversationKey, Reply, Unreachable
from bot.writing_first.outbox import PER_SECOND, Pace
from tests.conftest import Chat, FakeClock, config_dict, runtimes_on
from tests.fakes.llm_server import status, text

HOUR = 3600.0
# 2027-01-15 12:00 UTC: 13:00 in Paris.
NOON_UTC = datetime(2027, 1, 15, 12, 0, tzinfo=timezone.utc).timestamp()


class Writer:
    """An adapter writing first on "telegram" for Mira: what it sent; who the person is there
    (the core's gate decides whether they are let in)."""

    platform = "telegram"
    character_name = "Mira"

    def __init__(self, refuses: bool = False):
        self.sent: list[tuple[ConversationKey, str, list[list[Button]]]] = []
        self.stale: list[str] = []  # messages whose buttons the check-ins took away
        self.refuses = refuses

    async def asker_for(self, key: ConversationKey, user_id: str) -> Asker:
        return Asker("telegram", user_id, (key.chat_id,))

    async def write_first(self, key: ConversationKey, letter: Reply, stale: Sequence[str] = ()) -> list[str]:
        if self.refuses:
            raise Unreachable("Forbidden: bot was blocked by the user")
        self.sent.append((key, letter.text, letter.buttons))
        self.stale.extend(stale)
        return [str(9000 + len(self.sent))]


@pytest.fixture(params=["sqlite", "postgresql"])
async def bot(request, llm, tmp_path):
    """Start a runtime (or two sharing one database) whose Mira writes first after 48 hours."""
    async with runtimes_on(request.param, tmp_path) as start_on:
        async def start(clock: FakeClock, checkins: dict | None = None, limits: int | None = None, count: int = 1,
                        **character):
            raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
            raw["characters"][0] |= character
            raw["characters"][0]["checkins"] = {"after_hours": 48} | (checkins or {})
            if limits:
                raw["limits"] = {"turns_per_minute": limits}
            return await start_on(raw, clock, count)
        yield start


def dm(runtime, user: str = "501", name: str = "Ann") -> Chat:
    return Chat(runtime, user=user, name=name, chat_id=user, platform="telegram")


async def chat(person: Chat, messages: int) -> None:
    for n in range(messages):
        await person.say(f"message {n} about my garden")


async def away(bot, **start):
    """Ann wrote 4 messages in her DM with Mira, then went quiet for 49 hours (due at 48)."""
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock, **start)
    ann = dm(runtime)
    await chat(ann, 4)
    clock.now += 49 * HOUR
    return clock, runtime, ann


async def scan(runtime, writer: Writer) -> int:
    with runtime.core.presence.writing_first(writer):
        return await runtime.checkins.scan("Mira")


async def test_a_one_to_one_conversation_quiet_for_after_hours_gets_one_message(bot, llm):
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    await chat(dm(runtime), 4)
    writer = Writer()
    clock.now += 47 * HOUR
    assert await scan(runtime, writer) == 0  # not due yet
    llm.add(text("The tomatoes must be ripe by now — how is the garden?"))
    clock.now += 1 * HOUR
    assert await scan(runtime, writer) == 1
    (key, sent, buttons), = writer.sent
    assert (key.platform, key.chat_id, key.is_shared) == ("telegram", "501", False)
    assert sent == "The tomatoes must be ripe by now — how is the garden?"
    assert [b.label for row in buttons for b in row] == ["🔕 Don't write first"]
    prompt = llm.requests[-1]
    assert "tools" not in prompt
    assert "has not written for 2 days. Write to them first" in prompt["messages"][-1]["content"]
    assert "message 3 about my garden" in llm.prompt_text()  # the live window is in the prompt


async def test_a_check_in_takes_the_regenerate_button_from_the_reply_before_it(bot, llm):
    """#36: after a check-in the earlier reply's Regenerate could only answer "Only the latest
    reply can be regenerated": its button goes once the check-in is sent."""
    clock, runtime, ann = await away(bot)
    conversation = await runtime.cast.conversation_for(ann.key)
    latest = await runtime.store.turns.latest_turn(conversation.id)
    await runtime.store.conversations.set_platform_message_ids(conversation.id, latest.reply_message_id,
                                                               ["reply-76", "reply-77"])
    writer = Writer()
    llm.add(text("Thinking of your garden today."))
    assert await scan(runtime, writer) == 1
    assert writer.stale == ["reply-77"]  # its last part, which carries the button


async def test_a_check_in_is_stored_as_the_characters_message_in_the_window(bot, llm):
    clock, runtime, ann = await away(bot)
    llm.add(text("Thinking of your garden today."))
    await scan(runtime, Writer())
    await ann.say("oh hi!")
    window = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert window[-2:] == ["Thinking of your garden today.", "oh hi!"]


async def test_a_check_in_is_in_the_characters_own_voice_never_the_persons_lines(bot, llm):
    """bot/turn/own_voice.py, as for a reply: the letter loses the character's name before it
    and ends before a line the model wrote for the person."""
    clock, runtime, ann = await away(bot)
    writer = Writer()
    llm.add(text("Mira: Thinking of your garden today.\nAnn: oh hi Mira!"))
    assert await scan(runtime, writer) == 1
    assert writer.sent[0][1] == "Thinking of your garden today."
    await ann.say("oh hi!")
    window = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert window[-2:] == ["Thinking of your garden today.", "oh hi!"]


async def test_fewer_than_4_messages_get_no_check_in(bot, llm):
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    await chat(dm(runtime), 3)
    clock.now += 100 * HOUR
    assert await scan(runtime, Writer()) == 0


async def test_groups_and_the_console_never_get_a_check_in(bot, llm):
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    await chat(Chat(runtime, user="501", chat_id="-100777", shared=True, platform="telegram"), 6)
    await chat(Chat(runtime, user="ann", chat_id="local:ann", platform="console"), 6)
    clock.now += 100 * HOUR
    console = Writer()
    console.platform = "console"
    assert await scan(runtime, Writer()) == 0 and await scan(runtime, console) == 0


async def test_at_most_one_check_in_per_absence_until_the_person_writes_again(bot, llm):
    clock, runtime, ann = await away(bot)
    writer = Writer()
    assert await scan(runtime, writer) == 1
    clock.now += 200 * HOUR  # the character's own message changes nothing: still one
    assert await scan(runtime, writer) == 0
    clock.now += 60
    await ann.say("back again")
    clock.now += 49 * HOUR
    assert await scan(runtime, writer) == 1
    assert len(writer.sent) == 2


@pytest.mark.parametrize("local_time, sent", [("23:30", 0), ("03:00", 0), ("08:59", 0), ("09:00", 1), ("21:59", 1)])
async def test_never_inside_quiet_hours_across_midnight_read_in_the_characters_zone(bot, llm, local_time, sent):
    # Paris is UTC+1 in January: 22:00-09:00 there is 21:00-08:00 UTC.
    hour, minute = (int(part) for part in local_time.split(":"))
    clock = FakeClock(datetime(2027, 1, 10, 12, 0, tzinfo=timezone.utc).timestamp())
    runtime = await bot(clock, {"quiet_hours": "22:00-09:00", "timezone": "Europe/Paris"})
    await chat(dm(runtime), 4)
    clock.now = datetime(2027, 1, 15, (hour - 1) % 24, minute, tzinfo=timezone.utc).timestamp()
    assert await scan(runtime, Writer()) == sent


async def test_the_dont_write_first_button_and_checkins_on_which_waits_after_hours_from_then(bot, llm):
    clock, runtime, ann = await away(bot)
    writer = Writer()
    await scan(runtime, writer)
    pressed = await ann.press(writer.sent[0][2][0][0].action)
    assert pressed.ok and "won't write first" in pressed.text
    clock.now += 60
    await ann.say("I'm back")
    clock.now += 49 * HOUR
    assert await scan(runtime, writer) == 0  # off: no check-in, however long the absence
    turned_on = await ann.memory("/checkins on")
    assert turned_on.ok and "may write first" in turned_on.text
    assert await scan(runtime, writer) == 0  # switching on is not writing: 48 hours from now, not at once
    clock.now += 47 * HOUR
    assert await scan(runtime, writer) == 0
    clock.now += 1 * HOUR
    assert await scan(runtime, writer) == 1  # this absence has had none yet
    assert (await ann.memory("/checkins off")).text.startswith("Mira won't write first")
    assert not (await ann.memory("/checkins maybe")).ok


async def test_a_send_the_event_loop_holds_up_does_not_let_the_next_10_bunch_within_a_second():
    """SPEC 14 pacing holds on a busy machine: once a send came late, the ones after it keep their
    gap from it (a fixed timetable let the next ten catch up: 11 sends in 0.92 s on a loaded CI)."""
    pace, sent_at = Pace(PER_SECOND), []

    async def send(n: int) -> None:
        await pace()
        sent_at.append(time.monotonic())
        if n == 0:  # once the others wait their turn, the event loop is held up past the next one's
            await asyncio.sleep(0.05)
            time.sleep(0.1)

    await asyncio.gather(*(send(n) for n in range(12)))
    assert min(later - first for first, later in zip(sent_at, sent_at[PER_SECOND:])) > 0.99


def timed_writer() -> tuple[Writer, list[float]]:
    """A bot that notes when each of its sends went out."""
    writer, sent_at = Writer(), []
    write_first = writer.write_first

    async def timed(key, letter, stale=()):
        sent_at.append(time.monotonic())
        return await write_first(key, letter, stale)
    writer.write_first = timed
    return writer, sent_at


async def test_a_scan_sends_at_most_10_check_ins_a_second_per_bot(bot, llm):
    """SPEC 14: Telegram accepts about 30 messages a second per bot; a scan with an instant model
    stays well under that."""
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    for n in range(25):
        await chat(dm(runtime, user=str(600 + n), name=f"Guest {n}"), 4)
    clock.now += 49 * HOUR
    writer, sent_at = timed_writer()
    assert await scan(runtime, writer) == 25
    assert PER_SECOND == 10  # any 11 sends in a row span a second (less the timer's jitter)
    assert min(later - first for first, later in zip(sent_at, sent_at[PER_SECOND:])) > 0.95


async def test_check_ins_and_reminders_through_one_bot_share_its_10_sends_a_second(bot, llm):
    """SPEC 14's pace is the bot account's, not a source's: a check-in scan and a reminder scan
    sending at once through one bot (12 each: 12 people away, 12 others with a reminder due) still
    send at most 10 a second together."""
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    mira = runtime.cast.character("Mira").id
    for n in range(12):
        await chat(dm(runtime, user=str(600 + n), name=f"Guest {n}"), 4)
    clock.now += 49 * HOUR
    for n in range(12):
        asking = dm(runtime, user=str(700 + n), name=f"Asker {n}")
        await chat(asking, 2)
        await runtime.store.reminders.add(await asking.person_id(), mira,
                                          (await runtime.cast.conversation_for(asking.key)).id, 0,
                                          clock.now - 60, "UTC", "water the tomatoes", "once", 25)
    writer, sent_at = timed_writer()
    with runtime.core.presence.writing_first(writer):
        sent = await asyncio.gather(runtime.checkins.scan("Mira"), runtime.reminders.scan("Mira"))
    assert sent == [12, 12]
    assert min(later - first for first, later in zip(sent_at, sent_at[PER_SECOND:])) > 0.95


async def test_a_check_in_whose_delivery_failed_is_taken_back_and_sent_at_the_next_scan(bot, llm):
    """A delivery error that is not the person's refusal (the platform down): the check-in is not
    left stored as said, and the absence waits for the next scan."""
    clock, runtime, ann = await away(bot)
    broken = Writer()

    async def down(key, letter, stale):
        raise ConnectionError("the platform is down")
    broken.write_first = down
    llm.add(text("How is the garden?"))
    assert await scan(runtime, broken) == 0
    window = await runtime.store.conversations.recent_messages((await runtime.cast.conversation_for(ann.key)).id, 50)
    assert "How is the garden?" not in [m.content for m in window]
    llm.add(text("How is the garden, Ann?"))
    writer = Writer()
    assert await scan(runtime, writer) == 1 and writer.sent[0][1] == "How is the garden, Ann?"


async def test_the_absence_is_measured_from_the_persons_last_message_not_the_characters_reply(bot, llm):
    """The reply to Ann's last message came an hour after it (a slow model): the check-in is due
    48 hours after her message, not after the reply."""
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    ann = dm(runtime)
    await chat(ann, 3)

    def slow_reply(body):  # the model answers an hour later
        clock.now += 1 * HOUR
        return text("An hour later: hello.")
    llm.responder = slow_reply
    await ann.say("message 3 about my garden")
    llm.responder = None
    clock.now += 47 * HOUR  # 48 hours after Ann's message, 47 after the reply
    llm.add(text("How is the garden?"))
    assert await scan(runtime, Writer()) == 1


async def test_someone_denied_by_access_gets_none(bot, llm):
    clock, runtime, ann = await away(bot)
    calls = len(llm.requests)
    runtime.gate.access = AccessRules(deny=frozenset({"telegram:501"}))  # [access] deny = ["telegram:501"]
    assert await scan(runtime, Writer()) == 0
    assert len(llm.requests) == calls  # no model call was made for them
    runtime.gate.access = AccessRules()
    assert await scan(runtime, Writer()) == 0  # passed over for this absence


async def test_someone_past_limits_gets_none_now_and_a_check_in_uses_up_none_of_their_allowance(bot, llm):
    clock, runtime, ann = await away(bot, limits=4)
    for _ in range(4):  # 4 model calls in this minute on Ann's behalf (a draft, say): the limit
        assert await runtime.gate.take(await ann.person_id(), ann.key) is None
    writer = Writer()
    assert await scan(runtime, writer) == 0  # past [limits]: none now
    clock.now += 61
    assert await scan(runtime, writer) == 1  # one once a call is free…
    for _ in range(4):  # …and it took none of hers: her 4 calls a minute are all still there
        assert await runtime.gate.take(await ann.person_id(), ann.key) is None


async def test_a_blocked_bot_switches_check_ins_off_until_the_person_writes_again(bot, llm):
    clock, runtime, ann = await away(bot)
    llm.add(text("Thinking of your garden today."))
    assert await scan(runtime, Writer(refuses=True)) == 0
    stored = await runtime.store.conversations.recent_messages((await runtime.cast.conversation_for(ann.key)).id, 1)
    assert stored[0].content == "Okay."  # the last reply: the undelivered check-in is gone
    clock.now += 200 * HOUR
    assert await scan(runtime, Writer()) == 0
    await ann.say("I unblocked you")
    clock.now += 49 * HOUR
    assert await scan(runtime, Writer()) == 1


async def test_a_failed_model_call_is_tried_again_at_the_next_scan_and_nothing_half_written_is_sent(bot, llm):
    clock, runtime, ann = await away(bot)
    llm.add(status(500), status(500))
    writer = Writer()
    assert await scan(runtime, writer) == 0 and writer.sent == []
    llm.add(text("Hello again!"))
    assert await scan(runtime, writer) == 1 and writer.sent[0][1] == "Hello again!"


async def test_memory_why_after_a_check_in_shows_its_receipt(bot, llm):
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    ann = dm(runtime)
    await ann.memory("/memory add I grow tomatoes")
    await chat(ann, 4)
    clock.now += 49 * HOUR
    await scan(runtime, Writer())
    why = await ann.memory("/memory why")
    assert why.text.startswith("The prompt of Mira's check-in (it wrote first) held:")
    assert "Saved memories: 1" in why.text and "I grow tomatoes" in llm.prompt_text()
    assert "Live window: 8 messages" in why.text  # Ann's 4 and Mira's 4 replies; the last reply's read 7


async def test_forgetme_removes_the_check_in_marks(bot, llm):
    clock = FakeClock(NOON_UTC)
    runtime = await bot(clock)
    ann = dm(runtime)
    await chat(ann, 4)
    await ann.memory("/checkins off")
    forget = await ann.memory("/forgetme")
    await ann.press(forget.buttons[0][0].action)
    rows = await runtime.store.db.value("SELECT COUNT(*) FROM checkins") + \
        await runtime.store.db.value("SELECT COUNT(*) FROM person_settings")
    assert rows == 0


async def test_two_processes_scanning_at_once_send_exactly_one(bot, llm):
    clock = FakeClock(NOON_UTC)
    first, second = await bot(clock, count=2)
    await chat(dm(first), 4)
    clock.now += 49 * HOUR
    one, two = Writer(), Writer()
    calls = len(llm.requests)
    with first.core.presence.writing_first(one), second.core.presence.writing_first(two):
        sent = await asyncio.gather(first.checkins.scan("Mira"), second.checkins.scan("Mira"))
    assert sum(sent) == 1 and len(one.sent) + len(two.sent) == 1
    assert len(llm.requests) == calls + 1  # one process claimed it: one model call, not two


async def test_a_scan_that_found_a_check_in_another_process_sent_since_makes_no_model_call(bot, llm):
    """The other process wrote and sent it, and let its claim go, between this scan's read of what
    is due and its claim: the claim is taken, the absence is asked again, nothing is written."""
    clock = FakeClock(NOON_UTC)
    first, second = await bot(clock, count=2)
    await chat(dm(first), 4)
    clock.now += 49 * HOUR
    read, go_on = asyncio.Event(), asyncio.Event()
    due = first.store.checkins.due

    async def slow_due(*args):  # this process's read of what is due, then a pause
        found = await due(*args)
        read.set()
        await go_on.wait()
        return found
    first.store.checkins.due = slow_due
    one, two = Writer(), Writer()
    with first.core.presence.writing_first(one), second.core.presence.writing_first(two):
        scanning = asyncio.create_task(first.checkins.scan("Mira"))
        await read.wait()
        assert await second.checkins.scan("Mira") == 1
        calls = len(llm.requests)
        go_on.set()
        assert await scanning == 0
    assert len(llm.requests) == calls and one.sent == []


async def test_the_scan_reads_due_conversations_through_an_index(bot, llm):
    """The plan of the very statement `Checkins.due` runs (caught on its way to the database)."""
    runtime = await bot(FakeClock(NOON_UTC))
    db = runtime.store.db
    ran: list[tuple[str, tuple]] = []
    run_all = db.all

    async def caught(sql, *params):
        ran.append((sql, params))
        return await run_all(sql, *params)
    db.all = caught
    await runtime.store.checkins.due(runtime.cast.character("Mira").id, "telegram", NOON_UTC, 100)
    db.all = run_all
    (query, params), = ran
    async with db.transaction() as tx:
        if runtime.config.storage.url.startswith("sqlite"):
            plan = " ".join(str(row["detail"]) for row in await tx.all("EXPLAIN QUERY PLAN " + query, *params))
        else:
            await tx.execute("SET LOCAL enable_seqscan = off")  # a small table: show the planner's index
            plan = " ".join(row["QUERY PLAN"] for row in await tx.all("EXPLAIN " + query, *params))
    assert "checkins_due" in plan and "TEMP B-TREE" not in plan  # through the index, in its order


async def test_a_check_in_sent_is_counted_in_stats_and_in_prometheus(bot, llm):
    """SPEC 17: /stats counts check-ins sent (per character); the Prometheus counters move with
    what is sent and spent."""
    from bot import metrics

    def counted(counter, *labels) -> float:
        return counter.labels(*labels)._value.get()

    tokens_in, sent_before = counted(metrics.TOKENS, "in"), counted(metrics.CHECKINS_SENT, "Mira")
    clock, runtime, ann = await away(bot)
    assert counted(metrics.TOKENS, "in") > tokens_in  # Ann's four turns
    llm.add(text("How is the garden?"))
    assert await scan(runtime, Writer()) == 1
    totals = await runtime.store.usage.totals("2027-01-15", "2027-01-17")
    assert totals[None].checkins == 1 and totals["Mira"].checkins == 1
    assert counted(metrics.CHECKINS_SENT, "Mira") == sent_before + 1


async def test_an_age_restricted_character_writes_first_only_where_it_may_talk(bot, llm):
    """SPEC 17: on Telegram without `allow_nsfw`, an age-restricted Mira writes no check-in. Ann
    chatted first (a restricted Mira would not have answered her), then the owner restarted with
    Mira age-restricted: a check-in is due, and none is written."""
    clock, runtime, ann = await away(bot)
    restricted = await bot(clock, nsfw=True)  # the same database, Mira now age-restricted
    mira = restricted.cast.character("Mira").id
    assert await restricted.store.checkins.due(mira, "telegram", clock.now - 48 * HOUR, 10)  # one is due
    requests = len(llm.requests)
    assert await scan(restricted, Writer()) == 0 and len(llm.requests) == requests
