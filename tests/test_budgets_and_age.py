"""SPEC 17: `[limits] tokens_per_day` with `/usage` and `/stats`, and age-restricted characters,
decided in the gate (through the real processes: tests/test_owners_end_to_end.py)."""

import asyncio
import json
import re

import pytest

from bot.access.budgets import PAST_BUDGET
from bot.characters.cards import load_character
from bot.config import ConfigError, parse_config
from bot.contract import PLATFORM_TRAITS, Asker, ConversationKey, IncomingMessage
from bot.runtime import build_runtime
from tests.conftest import DAY, Chat, FakeClock, config_dict
from tests.fakes.llm_server import text
from tests.fakes.summarizer import extractive
from tests.postgres import fresh_schema_url

GROUP = "-100"


async def two_processes(backend: str, llm, tmp_path, **sections):
    """Two runtimes (two processes) on one database of `backend`, with these config sections."""
    schemas = fresh_schema_url() if backend == "postgresql" else None
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3") | sections
    if schemas:
        raw["storage"] = {"url": await anext(schemas)}
    clock = FakeClock(1_800_000_000.0)  # 2027-01-15 09:20 in Paris
    runtimes = [await build_runtime(parse_config(raw, tmp_path), clock=clock) for _ in range(2)]
    yield runtimes, clock
    for runtime in runtimes:
        await runtime.close()
    if schemas:
        await anext(schemas, None)


@pytest.fixture(params=["sqlite", "postgresql"])
async def budgeted(request, llm, tmp_path):
    """Two processes on one database, with 1,000 tokens a person a day."""
    async for runtimes in two_processes(request.param, llm, tmp_path, owner={"ids": ["telegram:owner-1"]},
                                        limits={"tokens_per_day": 1_000, "timezone": "Europe/Paris"}):
        yield runtimes


async def test_past_tokens_per_day_across_two_processes_one_line_a_day_and_messages_kept(budgeted, llm):
    (first, second), clock = budgeted
    ann_here, ann_there = Chat(first), Chat(second)
    # The fake server reports prompt tokens ≈ characters / 4: each turn here spends some 200-400.
    answered = 0
    while await first.store.usage.spent(await ann_here.person_id(), "2027-01-15", "2027-01-15") < 1_000:
        chat = ann_here if answered % 2 == 0 else ann_there  # the two processes take turns
        assert not (await chat.say(f"message {answered}")).is_error
        answered += 1
    requests = len(llm.requests)
    told = await ann_there.say("one more")
    assert told.text == PAST_BUDGET.format(limit=1_000)
    silent = await ann_here.say("and another")
    assert silent.silent and silent.text == ""  # told once a day, in either process
    assert len(llm.requests) == requests  # no model call past the allowance
    kept = await first.store.db.value("SELECT COUNT(*) FROM messages WHERE content IN ('one more', 'and another')")
    assert kept == 2
    clock.now += DAY  # a new day in Europe/Paris: a new allowance
    assert not (await ann_here.say("good morning")).is_error


async def test_usage_shows_a_persons_tokens_today_and_this_month_as_the_server_reported_them(budgeted, llm):
    """SPEC 17: tokens as the server's `usage` reports them (not as counted here); this month
    apart from today."""
    (runtime, _), clock = budgeted
    ann = Chat(runtime)
    person = await ann.person_id()
    await runtime.store.usage.add_turn(person, runtime.cast.character("Mira").id, "2027-01-03", 40, 2)  # earlier this month
    await runtime.store.usage.add_turn(person, runtime.cast.character("Mira").id, "2026-12-31", 500, 5)  # last month
    await ann.say("hello")
    reported, = llm.usages
    spent = reported["prompt_tokens"] + reported["completion_tokens"]
    assert await runtime.store.usage.spent(person, "2027-01-15", "2027-01-15") == spent
    assert (await ann.memory("/usage")).text == (f"Your tokens today: {spent:,} of 1,000 a day.\n"
                                                 f"This month: {spent + 42:,}.")


async def test_a_reply_the_model_left_empty_is_spent_all_the_same(budgeted, llm):
    """SPEC 17: every model call made for a person counts on their day — the last call of a
    turn is written as the turn ends, answered or not (here: the model wrote nothing)."""
    (runtime, _), _ = budgeted
    ann = Chat(runtime)
    llm.add(text(""))
    assert (await ann.say("hello")).is_error
    reported, = llm.usages
    assert await runtime.store.usage.spent(await ann.person_id(), "2027-01-15", "2027-01-15") == \
        reported["prompt_tokens"] + reported["completion_tokens"] > 0


async def test_at_exactly_tokens_per_day_the_person_is_past_it(budgeted, llm):
    (runtime, _), _ = budgeted
    ann = Chat(runtime)
    person, mira = await ann.person_id(), runtime.cast.character("Mira").id
    await runtime.store.usage.add_turn(person, mira, "2027-01-15", 999, 0)
    assert not await runtime.gate.past_allowance(person)
    await runtime.store.usage.add_turn(person, mira, "2027-01-15", 1, 0)  # exactly 1,000
    assert await runtime.gate.past_allowance(person)
    assert (await ann.say("hello")).text == PAST_BUDGET.format(limit=1_000) and llm.requests == []


async def test_the_day_starts_in_the_limits_timezone(budgeted, llm):
    """[limits] timezone = Europe/Paris: at 23:30 UTC it is already tomorrow in Paris, and the
    spend of the Paris day before does not count."""
    (runtime, _), clock = budgeted
    ann = Chat(runtime)
    person, mira = await ann.person_id(), runtime.cast.character("Mira").id
    clock.now = 1_800_055_800.0  # 2027-01-15 23:30 UTC = 2027-01-16 00:30 in Paris
    await runtime.store.usage.add_turn(person, mira, "2027-01-15", 1_000, 0)  # the whole allowance, yesterday in Paris
    assert runtime.gate.budgets.today() == "2027-01-16"
    assert not (await ann.say("good morning")).is_error


async def test_the_allowance_holds_for_a_regenerate_and_a_draft(budgeted, llm):
    """SPEC 17: everything spent on a person's behalf asks the allowance — a Regenerate and
    /memory generate past it are refused, with no model call."""
    (runtime, _), _ = budgeted
    ann = Chat(runtime, platform="telegram")
    reply = await ann.say("hello")
    person = await ann.person_id()
    await runtime.store.usage.add_turn(person, runtime.cast.character("Mira").id, "2027-01-15", 1_000, 0)
    requests = len(llm.requests)
    regenerated = await ann.regenerate(reply.turn)
    assert regenerated.is_error and regenerated.text == PAST_BUDGET.format(limit=1_000)
    drafted = await ann.memory("/memory generate I keep bees")
    assert not drafted.ok and drafted.text == PAST_BUDGET.format(limit=1_000)
    assert len(llm.requests) == requests


async def test_drafts_by_the_ai_are_spent_on_the_persons_allowance(budgeted, llm):
    """/memory generate and Draft with AI are model calls on the person's behalf: their tokens
    count in `/usage` and against `tokens_per_day` like a turn's."""
    (runtime, _), _ = budgeted
    ann = Chat(runtime)
    llm.responder = extractive
    await runtime.store.conversations.add_user_message(  # a message to draft from, stored without a turn
        (await runtime.cast.conversation_for(ann.key)).id, await ann.person_id(), "Ann", "I moved to Oslo", 5, None)

    async def spent() -> int:
        return await runtime.store.usage.spent(await ann.person_id(), "2027-01-15", "2027-01-15")

    await ann.memory("/memory generate I'm a night nurse. My cat is called Tofu")
    after_generate = await spent()
    assert after_generate > 0
    picked = await ann.memory("/memory save 1")
    drafts = await ann.press(picked.buttons[0][0].action)
    assert "Keep one of these" in drafts.text
    assert await spent() > after_generate


async def test_stats_is_for_the_owner_only_and_shows_today_the_week_and_who_spent_most(budgeted, llm):
    (runtime, _), _ = budgeted
    ann, owner = Chat(runtime, platform="telegram"), Chat(runtime, user="owner-1", name="Olga", chat_id="dm-o",
                                                           platform="telegram")
    await ann.say("hello")
    await ann.say("how are you?")
    refused = await ann.memory("/stats")
    assert not refused.ok and refused.text == "Only the bot's owner can see /stats."
    stats = (await owner.memory("/stats")).text
    assert stats.startswith("Today (2027-01-15): 2 turns, ")
    assert "  Mira: 2 turns" in stats and "The last 7 days (2027-01-09 – 2027-01-15): 2 turns" in stats
    assert "Who spent most in the last 7 days: 1. Ann — " in stats


def test_a_cards_nsfw_tag_makes_it_age_restricted_and_the_config_overrides_it(tmp_path, monkeypatch):
    card = tmp_path / "vex.json"
    card.write_text(json.dumps({"spec": "chara_card_v2", "spec_version": "2.0",
                                "data": {"name": "Vex", "description": "A rogue.", "tags": ["Fantasy", "NSFW"]}}))
    monkeypatch.setenv("KEEPSAKE_TEST_API_KEY", "x")

    def vex(**keys):
        raw = config_dict("http://x/v1", tmp_path / "db")
        raw["characters"] = [{"name": "Vex", "card": "vex.json", **keys}]
        return load_character(parse_config(raw, tmp_path).characters[0])

    assert vex().nsfw and not vex(nsfw=False).nsfw
    assert not load_character(parse_config(config_dict("http://x/v1", tmp_path / "db"), tmp_path).characters[0]).nsfw


async def test_an_age_restricted_character_answers_only_in_age_restricted_places(llm, tmp_path, clock):
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0]["nsfw"] = True
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        def message(text: str, age_restricted: bool, shared: bool = True) -> IncomingMessage:
            key = ConversationKey("discord", GROUP if shared else "dm", None, "Mira", shared)
            return IncomingMessage(key, None, "Ann", text, asker=Asker("discord", "501", (key.chat_id,),
                                                                         age_restricted=age_restricted))

        refused = await runtime.core.conversation.handle(message("hello", age_restricted=False))
        assert refused.text == PLATFORM_TRAITS["discord"].age_line.format(name="Mira") and refused.is_error
        in_a_dm = await runtime.core.conversation.handle(message("hello", age_restricted=False, shared=False))
        assert in_a_dm.text == refused.text
        assert llm.requests == [] and await runtime.store.db.value("SELECT COUNT(*) FROM messages") == 0
        answered = await runtime.core.conversation.handle(message("hello", age_restricted=True))
        assert not answered.is_error and len(llm.requests) == 1
    finally:
        await runtime.close()


@pytest.mark.parametrize("section, message", [
    ({"limits": {"tokens_per_day": 0}}, "limits.tokens_per_day: expected a whole number ≥ 1"),
    ({"limits": {"timezone": "Mars/Base"}}, "limits.timezone: expected a time zone's IANA name"),
    ({"owner": {"ids": ["123"]}}, 'owner.ids[0]: expected "discord:<user id>" or "telegram:<user id>"'),
    ({"owner": {"idz": []}}, "owner.idz: unknown key"),
    ({"characters": [{"name": "Mira", "persona": "x", "nsfw": "yes"}]}, "characters[0].nsfw: expected true or false"),
    ({"telegram": {"allow_nsfw": 1}}, "telegram.allow_nsfw: expected true or false"),
    ({"discord": {"nsfw_in_dms": "true"}}, "discord.nsfw_in_dms: expected true or false"),
])
def test_the_keys_of_spec_17_are_checked_naming_the_key(tmp_path, monkeypatch, section, message):
    from tests.test_config import checked_config

    monkeypatch.setenv("KEEPSAKE_TEST_API_KEY", "x")
    raw = config_dict("http://x/v1", tmp_path / "db") | section
    with pytest.raises(ConfigError, match=re.escape(message)):
        checked_config(raw, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
async def small_allowance(request, llm, tmp_path):
    """Two processes on one database, with 300 tokens a person a day."""
    async for runtimes, _ in two_processes(request.param, llm, tmp_path, limits={"tokens_per_day": 300}):
        yield runtimes


async def test_twenty_messages_at_once_past_a_small_allowance_get_at_most_two_answers(small_allowance, llm):
    """SPEC 17, a budget holds under a burst: 300 tokens a day, 20 messages sent at once through
    two processes in two chats; a turn costs some 200-400 tokens here. Every message is kept."""
    first, second = small_allowance
    chats = [Chat(first, platform="telegram", chat_id="dm-ann"),
             Chat(second, platform="telegram", chat_id="-100", shared=True)]
    llm.add(*(text(f"Answer {n}.", delay=0.1) for n in range(20)))  # the turns overlap
    replies = await asyncio.gather(*(chats[n % 2].say(f"message {n}") for n in range(20)))
    answered = [reply for reply in replies if not reply.is_error and not reply.silent]
    assert 1 <= len(answered) <= 2 and len(llm.requests) == len(answered)
    assert [reply.text for reply in replies if reply.is_error] == [PAST_BUDGET.format(limit=300)]  # told once
    kept = await first.store.db.value("SELECT COUNT(*) FROM messages WHERE content LIKE 'message %'")
    assert kept == 20


async def test_forgetme_does_not_give_a_fresh_allowance(small_allowance, llm):
    """SPEC 17: /forgetme deletes the person, not today's spend (kept against the platform id)."""
    runtime, _ = small_allowance
    ann = Chat(runtime, platform="telegram")
    while await runtime.store.usage.spent(await ann.person_id(), runtime.gate.budgets.today(),
                                          runtime.gate.budgets.today()) < 300:
        await ann.say("hello")
    asked = await ann.memory("/forgetme")
    assert (await ann.press(asked.buttons[0][0].action)).text.startswith("Done.")
    requests = len(llm.requests)
    again = await ann.say("hello again, I'm new here")
    assert again.text == PAST_BUDGET.format(limit=300) and len(llm.requests) == requests
    assert "of 300 a day" in (await ann.memory("/usage")).text


async def test_memory_rebuild_is_under_the_persons_allowance_and_spent_on_them(small_allowance, llm):
    """SPEC 17: /memory rebuild is model calls on the person's behalf: refused past the
    allowance, and what it spends is theirs."""
    runtime, _ = small_allowance
    ann = Chat(runtime, platform="telegram")
    conversation = (await runtime.cast.conversation_for(ann.key)).id
    person = await ann.person_id()
    for n in range(80):  # a history longer than the live window, stored without turns
        await runtime.store.conversations.add_user_message(conversation, person, "Ann", f"old message {n}", 4, None)
    llm.responder = extractive
    started = await ann.memory("/memory rebuild")
    assert started.text.startswith("Rebuilding this conversation's summary")
    await runtime.rebuilds.idle()
    today = runtime.gate.budgets.today()
    spent = await runtime.store.usage.spent(person, today, today)
    assert spent > 0 and len(llm.requests) >= 1
    while spent < 300:  # spend the rest of the day
        await runtime.store.usage.add_turn(person, runtime.cast.character("Mira").id, today, 300, 0)
        spent = await runtime.store.usage.spent(person, today, today)
    requests = len(llm.requests)
    refused = await ann.memory("/memory rebuild")
    assert not refused.ok and refused.text == PAST_BUDGET.format(limit=300) and len(llm.requests) == requests


async def test_memory_generate_for_an_age_restricted_character_calls_no_model_where_it_may_not_talk(
        llm, tmp_path, clock):
    """SPEC 17: /memory generate is under the character's age rule, like a message."""
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0]["nsfw"] = True
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        ann = Chat(runtime, platform="telegram")  # Telegram without allow_nsfw: not an age-restricted place
        refused = await ann.memory("/memory generate I'm a night nurse")
        assert not refused.ok and refused.text == PLATFORM_TRAITS["telegram"].age_line.format(name="Mira")
        assert llm.requests == []
    finally:
        await runtime.close()
