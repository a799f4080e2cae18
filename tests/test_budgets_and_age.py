"""SPEC 17: `[limits] tokens_per_day` with `/usage` and `/stats`, and age-restricted characters,
decided in the gate (through the real processes: tests/test_owners_end_to_end.py)."""

import json
import re

import pytest

from bot.access.budgets import PAST_BUDGET
from bot.access.gate import AGE_RESTRICTED
from bot.characters.cards import load_character
from bot.config import ConfigError, parse_config
from bot.contract import Asker, ConversationKey, IncomingMessage
from bot.runtime import build_runtime
from tests.conftest import DAY, Chat, FakeClock, config_dict
from tests.fakes.summarizer import extractive
from tests.postgres import fresh_schema_url

GROUP = "-100"


@pytest.fixture(params=["sqlite", "postgresql"])
async def budgeted(request, llm, tmp_path):
    """Two runtimes (two processes) on one database, with 1,000 tokens a person a day."""
    schemas = fresh_schema_url() if request.param == "postgresql" else None
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    if schemas:
        raw["storage"] = {"url": await anext(schemas)}
    raw["limits"] = {"tokens_per_day": 1_000, "timezone": "Europe/Paris"}
    raw["owner"] = {"ids": ["telegram:owner-1"]}
    clock = FakeClock(1_800_000_000.0)  # 2027-01-15 09:20 in Paris
    runtimes = [await build_runtime(parse_config(raw, tmp_path), clock=clock) for _ in range(2)]
    yield runtimes, clock
    for runtime in runtimes:
        await runtime.close()
    if schemas:
        await anext(schemas, None)


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
    assert silent.duplicate and silent.text == ""  # told once a day, in either process
    assert len(llm.requests) == requests  # no model call past the allowance
    kept = await first.store.db.value("SELECT COUNT(*) FROM messages WHERE content IN ('one more', 'and another')")
    assert kept == 2
    clock.now += DAY  # a new day in Europe/Paris: a new allowance
    assert not (await ann_here.say("good morning")).is_error


async def test_usage_shows_a_persons_tokens_today_and_this_month(budgeted, llm):
    (runtime, _), _ = budgeted
    ann = Chat(runtime)
    await ann.say("hello")
    spent = await runtime.store.usage.spent(await ann.person_id(), "2027-01-15", "2027-01-15")
    assert spent > 0
    assert (await ann.memory("/usage")).text == f"Your tokens today: {spent:,} of 1,000 a day.\nThis month: {spent:,}."


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

        refused = await runtime.core.handle(message("hello", age_restricted=False))
        assert refused.text == AGE_RESTRICTED["discord"].format(name="Mira") and refused.is_error
        in_a_dm = await runtime.core.handle(message("hello", age_restricted=False, shared=False))
        assert in_a_dm.text == refused.text
        assert llm.requests == [] and await runtime.store.db.value("SELECT COUNT(*) FROM messages") == 0
        answered = await runtime.core.handle(message("hello", age_restricted=True))
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
