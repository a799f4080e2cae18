"""SPEC 15, scenes: several characters in one shared chat, hearing each other — one rule a test,
on SQLite and PostgreSQL. The characters speak through `Voice`s of the contract that answer
as a platform adapter would (store, answer, deliver); tests/test_scenes_end_to_end.py runs the
real adapters over the Telegram fake and discord.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random

import pytest

from bot.characters.cards import load_character
from bot.config import ConfigError, parse_config
from bot.contract import (
    NOT_ALLOWED,
    PLATFORM_TRAITS,
    Asker,
    ConversationKey,
    Identity,
    IncomingMessage,
    QueuedTurn,
    Reply,
)
from bot.runtime import build_runtime
from bot.scenes import characters_in_a_row, drawn_by_talkativeness, named
from tests.conftest import Chat, FakeClock, config_dict, eventually, shown
from tests.fakes.llm_server import text, tool_calls
from tests.postgres import emptied_schema_url, fresh_schema_url

GROUP = "-100"


class Voice:
    """A character's voice at the contract: it answers what the core gives it and delivers the
    reply (as adapters/base.py does, without a platform), keeping what it said."""

    platform = "telegram"

    def __init__(self, runtime, character: str):
        self.core = runtime.core
        self.character_name = character
        self.said: list[Reply] = []  # each recorded once the core heard it was delivered (a chain decided)
        self.continued = 0  # chain answers this voice finished (sent or, a person having written, not)
        self.hold: asyncio.Event | None = None  # set: a scene's next answer waits for it

    async def answer_here(self, message: IncomingMessage) -> None:
        await self.deliver(await self.core.conversation.handle(message))

    async def can_speak(self, key: ConversationKey) -> bool:
        return True

    async def continue_scene(self, key: ConversationKey, turn: QueuedTurn, on_behalf: Asker | None) -> None:
        if self.hold is not None:
            await self.hold.wait()
        await self.deliver(await self.core.presence.answer_queued(key, turn, on_behalf))
        self.continued += 1

    async def deliver(self, reply: Reply) -> None:
        if reply.silent:
            return
        await self.core.conversation.delivered(reply, [f"{self.character_name}-{len(self.said) + 1}"])
        self.said.append(reply)


class Person(Chat):
    """Someone in the group, writing to whichever adapter received the message."""

    def __init__(self, runtime, user: str, name: str):
        super().__init__(runtime, user=user, name=name, chat_id=GROUP, shared=True, platform="telegram")

    async def says(self, text: str, to: str = "Mira", addressed: bool = True, message_id: str | None = None,
                   kept=None):
        key = ConversationKey("telegram", GROUP, None, to, is_shared=True)
        message = IncomingMessage(key, self.identity, self.name, text, message_id, addressed=addressed,
                                  asker=self.asker, kept=kept)
        voice = scene_voices[id(self.runtime)][to]
        await voice.answer_here(message)

    def acting_as(self, character: str) -> "Person":
        self.ctx = type(self.ctx)(ConversationKey("telegram", GROUP, None, character, True), self.identity, self.name,
                                  self.asker)
        return self


scene_voices: dict = {}


@pytest.fixture(params=["sqlite", "postgresql"])
async def scene(request, llm, tmp_path):
    """A runtime (or two sharing a database) with Mira and Aki, both voiced on Telegram."""
    schemas = emptied_schema_url() if request.param == "postgresql" else None
    url = await anext(schemas) if schemas else None
    started, voicing = [], contextlib.ExitStack()

    async def start(max_chain: int = 3, processes: int = 1, aki: dict | None = None, **sections):
        raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
        if url:
            raw["storage"] = {"url": url}
        raw["characters"].append({"name": "Aki", "persona": "You are Aki, a sardonic harbour pilot."} | (aki or {}))
        raw["scenes"] = {"max_chain": max_chain}
        raw |= sections
        runtimes = [await build_runtime(parse_config(raw, tmp_path), clock=FakeClock()) for _ in range(processes)]
        for runtime in runtimes:
            runtime.scenes.rng = random.Random(15)  # no test's outcome rests on an unseeded draw
            started.append(runtime)
            scene_voices[id(runtime)] = {name: Voice(runtime, name) for name in ("Mira", "Aki")}
            for voice in scene_voices[id(runtime)].values():
                voicing.enter_context(runtime.core.presence.voicing(voice))
        return runtimes if processes > 1 else runtimes[0]
    yield start
    voicing.close()
    for runtime in started:
        scene_voices.pop(id(runtime), None)
        await runtime.close()
    if schemas:
        await anext(schemas, None)


async def queued(runtime) -> int:
    """Turns waiting in the scene's line: a chain's next answer is queued as its reply is delivered."""
    return await runtime.store.db.value("SELECT COUNT(*) FROM turn_queue")


def said(runtime, character: str) -> list[str]:
    return [reply.text for reply in scene_voices[id(runtime)][character].said]


def prompt_lines(llm, index: int = -1) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in llm.requests[index]["messages"] if m["role"] != "system"]


async def scene_rows(runtime):
    conversation = await runtime.store.conversations.conversation("telegram", GROUP, None,
                                                                 runtime.cast.character("Mira").id, True)
    return list(reversed(await runtime.store.conversations.recent_messages(conversation.id, 50)))


async def test_characters_in_one_group_share_one_scene_and_every_message_names_its_speaker(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Welcome aboard, Ann."), text("Harbour's closed, Ann."))
    await ann.says("hello Mira, hello Aki")  # Aki, named, is in the scene from here (SPEC 22)
    await ann.says("is the harbour open?", to="Aki")
    assert [(m.speaker_name, m.content) for m in await scene_rows(runtime)] == [
        ("Ann", "hello Mira, hello Aki"), ("Mira", "Welcome aboard, Ann."),
        ("Ann", "is the harbour open?"), ("Aki", "Harbour's closed, Ann.")]
    # Aki's prompt holds the whole scene it witnessed: Mira's reply is a line of hers, Aki's own are Aki's
    assert prompt_lines(llm) == [("user", "Ann: hello Mira, hello Aki"), ("user", "Mira: Welcome aboard, Ann."),
                                 ("user", "Ann: is the harbour open?")]
    assert "other characters too: Mira" in llm.requests[-1]["messages"][0]["content"]


async def test_a_message_addressed_to_a_character_by_name_is_answered_by_it(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aye, Ann."), text("Still aye."))
    await ann.says("Aki, are the boats in?", to="Mira", addressed=False)  # Mira's adapter got it; it names Aki
    await ann.says("Aki, all of them?", to="Mira", addressed=False)  # a draw would now pass over Aki, who spoke last
    assert said(runtime, "Aki") == ["Aye, Ann.", "Still aye."] and said(runtime, "Mira") == []


async def test_in_an_always_on_channel_a_message_addressed_to_no_one_is_answered_by_one_character_not_the_last(
        scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    await ann.says("hello Mira")  # Mira spoke last
    draws = 0
    choices = runtime.scenes.rng.choices

    def counted(*args, **kwargs):
        nonlocal draws
        draws += 1
        return choices(*args, **kwargs)
    runtime.scenes.rng.choices = counted
    for n in range(4):
        await ann.says(f"anyone there? {n}", addressed=False)
    assert draws == 4  # one draw a message: the character drawn answers, nobody draws again
    speakers = [m.speaker_name for m in await scene_rows(runtime) if m.role == "assistant"]
    assert len(speakers) == 5  # one answer each
    assert all(a != b for a, b in zip(speakers, speakers[1:]))  # never the one that spoke last


def test_talkativeness_sets_each_characters_odds_of_answering_a_message_addressed_to_no_one():
    rng = random.Random(7)
    odds = {"Mira": 0.9, "Aki": 0.3, "Tam": 0.0}
    draws = [drawn_by_talkativeness(odds, "Ruby", rng) for _ in range(4_000)]
    assert draws.count("Tam") == 0
    assert 0.70 < draws.count("Mira") / len(draws) < 0.80  # 0.9 / 1.2 = 0.75
    assert all(drawn_by_talkativeness(odds, "Mira", rng) != "Mira" for _ in range(200))
    assert drawn_by_talkativeness({"Mira": 0.0, "Aki": 0.0}, "Mira", rng) == "Aki"


def test_a_cards_talkativeness_comes_from_its_extensions_and_defaults_to_one_half(tmp_path):
    from bot.config import CharacterConfig

    def card(extensions):
        path = tmp_path / "card.json"
        path.write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "Aki", "extensions": extensions}}))
        return load_character(CharacterConfig(name="Aki", card=path)).talkativeness

    assert card({"talkativeness": "0.8"}) == 0.8  # SillyTavern writes it as text
    assert card({"talkativeness": 0.2}) == 0.2
    assert card({}) == 0.5 and card({"talkativeness": "loud"}) == 0.5 and card({"talkativeness": 7}) == 1.0


def test_a_text_addresses_the_character_it_names_first_as_a_whole_word():
    assert named("well, Aki and Mira?", ["Mira", "Aki"]) == "Aki"
    assert named("Akira is here", ["Aki"]) is None
    assert named("MIRA!", ["Mira"]) == "Mira"


async def test_a_reply_naming_another_character_is_answered_by_it_up_to_max_chain_3(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki, what do you make of the fog?"), text("Mira, it's thick as soup."),
            text("Aki, then we wait."), text("Mira, we always wait."))
    await ann.says("Mira, fog tonight?")
    await eventually(lambda: len(said(runtime, "Mira")) == 2)
    assert await queued(runtime) == 0  # the third character message queued no fourth: the chain stopped
    rows = await scene_rows(runtime)
    assert [m.speaker_name for m in rows] == ["Ann", "Mira", "Aki", "Mira"]
    assert characters_in_a_row(list(reversed(rows))) == 3 and len(llm.requests) == 3
    # each answer's prompt held the scene so far, the message it answers last
    assert prompt_lines(llm, 1)[-1] == ("user", "Mira: Aki, what do you make of the fog?")
    assert prompt_lines(llm, 2)[-2:] == [("assistant", "Aki, what do you make of the fog?"),
                                         ("user", "Aki: Mira, it's thick as soup.")]


def test_max_chain_is_3_by_default(tmp_path, llm):
    assert parse_config(config_dict(llm.base_url, tmp_path / "keepsake.sqlite3"), tmp_path).scenes.max_chain == 3


async def test_a_reply_someone_wrote_after_starts_no_chain(scene, llm):
    """The chain is decided as a reply is delivered: a person's message stored since ends it
    there, before anything is queued (and again when the queued answer's turn comes)."""
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    mira, aki = scene_voices[id(runtime)]["Mira"], scene_voices[id(runtime)]["Aki"]
    aki.hold = asyncio.Event()  # an answer queued for Aki would stay in line
    llm.add(text("Aki, what do you make of the fog?"), text("Tea's ready, Ann."))
    reply = await runtime.core.conversation.handle(IncomingMessage(
        ConversationKey("telegram", GROUP, None, "Mira", True), ann.identity, "Ann", "Mira, fog tonight?", "1",
        asker=ann.asker))
    kept = asyncio.Event()  # Ann writes before Mira's reply is delivered
    tea = asyncio.create_task(ann.says("never mind, Mira: tea?", message_id="2", kept=kept.set))
    await kept.wait()  # stored; its answer waits in line until Mira's reply is shown
    await mira.deliver(reply)
    await tea
    assert await queued(runtime) == 0 and aki.continued == 0 and len(llm.requests) == 2


async def chain_after_a_memory(scene, llm) -> tuple:
    """Ann saved a memory for Aki, then wrote to Mira, whose reply named Aki, who answered."""
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    await ann.acting_as("Aki").memory("/memory add scope:global Ann owes Aki a rope")
    llm.add(text("Aki, Ann is here."), text("Mira, so I see."))
    await Person(runtime, "501", "Ann").says("Mira, hello")
    await eventually(lambda: said(runtime, "Aki") == ["Mira, so I see."])
    return runtime, ann


async def test_a_chain_turn_reads_no_persons_saved_memories(scene, llm):
    """A character answering another answers no person: it reads nobody's saved memories, not
    even those of the person whose message started the chain."""
    runtime, _ = await chain_after_a_memory(scene, llm)
    assert "owes Aki a rope" in json.dumps(llm.requests[0]["messages"])  # Ann's own turn reads them…
    assert "rope" not in json.dumps(llm.requests[1]["messages"])  # …Aki's chain turn does not


async def test_a_chain_reply_carries_its_starters_regenerate_which_reads_nobodys_memories_again(scene, llm):
    """#36: after a chain the latest reply shown carries the one working Regenerate button — the
    person whose message started the chain presses it; the new reply reads no one's memories."""
    runtime, ann = await chain_after_a_memory(scene, llm)
    chained = scene_voices[id(runtime)]["Aki"].said[0]
    regenerate, = [button for row in chained.buttons for button in row]
    assert regenerate.label == "🔄 Regenerate"
    pressed = await ann.acting_as("Aki").press(regenerate.action)
    assert pressed.regenerate == chained.turn
    aki_key = ConversationKey("telegram", GROUP, None, "Aki", True)
    await eventually(lambda: len(said(runtime, "Mira")) == 2)  # Aki's reply named Mira: the chain's last turn
    llm.add(text("Mira. Ann. Evening."))
    again = await runtime.core.regenerating.regenerate(aki_key, Identity("telegram", "501"), chained.turn, ann.asker)
    again = await shown(runtime, again)
    assert again.text == "Mira. Ann. Evening." and "rope" not in json.dumps(llm.requests[-1]["messages"])


async def test_max_chain_0_lets_no_character_answer_another(scene, llm):
    runtime = await scene(max_chain=0)
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki, what do you make of the fog?"))
    await ann.says("Mira, fog tonight?")  # delivered: whether a chain follows is decided
    assert await queued(runtime) == 0 and said(runtime, "Aki") == [] and len(llm.requests) == 1


async def test_a_persons_message_ends_the_chain(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    aki = scene_voices[id(runtime)]["Aki"]
    aki.hold = asyncio.Event()  # Aki's answer to Mira waits in line…
    llm.add(text("Aki, what do you make of the fog?"), text("Ann, tea's ready."))
    await ann.says("Mira, fog tonight?")
    ann_again = asyncio.create_task(ann.says("never mind, Mira, tea?"))  # …while Ann writes again

    async def ann_again_stored() -> bool:
        return "never mind, Mira, tea?" in [m.content for m in await scene_rows(runtime)]
    await eventually(ann_again_stored)
    aki.hold.set()
    await ann_again
    await eventually(lambda: aki.continued == 1)
    assert said(runtime, "Aki") == []  # the chain ended with Ann's message
    assert said(runtime, "Mira") == ["Aki, what do you make of the fog?", "Ann, tea's ready."]
    assert [m.speaker_name for m in await scene_rows(runtime)] == ["Ann", "Mira", "Ann", "Mira"]


async def test_each_character_reads_the_speakers_memories_of_its_own_scope_plus_global_never_anothers(scene, llm):
    runtime = await scene()
    ann, bob = Person(runtime, "501", "Ann"), Person(runtime, "502", "Bob")
    await ann.acting_as("Mira").memory("/memory add Ann takes her tea black")
    await ann.acting_as("Aki").memory("/memory add Ann owes Aki a rope")
    await ann.memory("/memory add scope:global Ann lives on Gull Island")
    await ann.says("hello Aki", to="Aki")
    prompt = llm.prompt_text()
    assert "owes Aki a rope" in prompt and "Gull Island" in prompt and "tea black" not in prompt
    await bob.says("hello Aki", to="Aki")
    prompt = llm.prompt_text()
    assert "rope" not in prompt and "Gull Island" not in prompt and "tea black" not in prompt


async def test_a_characters_memory_tools_save_into_its_own_scope(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(tool_calls(("save_memory", {"content": "Ann is afraid of eels"})), text("Noted."))
    await ann.says("Aki, I'm afraid of eels", to="Aki")
    aki_view = await ann.acting_as("Mira").memory("/memory view character:Aki")
    mira_view = await ann.acting_as("Mira").memory("/memory view character:Mira")
    assert "afraid of eels" in aki_view.text and "afraid of eels" not in mira_view.text


async def test_memory_commands_in_a_scene_default_to_the_character_that_last_answered_the_person(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aye."))
    await ann.says("Aki, hello", to="Aki")
    added = await ann.acting_as("Mira").memory("/memory add Ann sails a dinghy")  # asked through Mira's bot
    assert added.ok
    assert "dinghy" in (await ann.acting_as("Mira").memory("/memory view character:Aki")).text
    assert "dinghy" not in (await ann.acting_as("Mira").memory("/memory view character:Mira")).text
    why = await ann.acting_as("Mira").memory("/memory why")
    assert why.text.startswith("The prompt of Aki's last reply to you held:")
    wrong = await ann.memory("/memory view character:Zed")
    assert not wrong.ok and wrong.text == "There is no character called “Zed”. The characters: Mira, Aki."


async def test_a_button_acts_on_the_character_its_command_acted_on(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann").acting_as("Mira")
    await ann.memory("/memory add character:Aki Ann owes Aki a rope")
    view = await ann.memory("/memory view character:Aki")
    pin = next(b for row in view.buttons for b in row if b.label.startswith("📌") or "Pin" in b.label)
    assert (await ann.press(pin.action)).ok  # pressed through Mira's bot
    assert "📌" in (await ann.memory("/memory view character:Aki")).text


async def test_regenerate_replaces_that_characters_latest_reply_only(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Mira's first."), text("Aki's first."), text("Mira's second."))
    await ann.says("hello Mira")
    await ann.says("hello Aki", to="Aki")
    mira_turn = scene_voices[id(runtime)]["Mira"].said[0].turn
    presser = Identity("telegram", "501")
    mira_key = ConversationKey("telegram", GROUP, None, "Mira", True)
    # Mira's latest
    assert await runtime.core.regenerating.regenerate_refusal(mira_key, presser, mira_turn, ann.asker) is None
    reply = await shown(runtime, await runtime.core.regenerating.regenerate(mira_key, presser, mira_turn, ann.asker))
    assert reply.text == "Mira's second."
    assert [m.content for m in await scene_rows(runtime) if m.role == "assistant"] == ["Mira's second.",
                                                                                       "Aki's first."]


async def test_no_message_is_answered_by_two_characters_at_once_in_any_process(scene, llm):
    first, second = await scene(processes=2)
    ann_here, ann_there = Person(first, "501", "Ann"), Person(second, "501", "Ann")
    llm.add(*(text(f"answer {n}", delay=0.2) for n in range(6)))
    await asyncio.gather(*(
        (ann_here if n % 2 else ann_there).says(f"message {n}", to="Mira" if n % 3 else "Aki", message_id=str(n))
        for n in range(6)))
    rows = await scene_rows(first)
    assert [m.role for m in rows] == ["user", "assistant"] * 6  # each message answered once, by one character
    assert llm.most_at_once == 1  # Mira and Aki, in two processes, never answered the scene at once


# -- rules follow the character that answers (SPEC 15) -------------------------------------------
AKI_DENIES_ZED = {"access": {"deny": ["telegram:666"]}}


async def test_a_character_that_denies_someone_is_not_reached_by_its_name_through_another_characters_bot(scene, llm):
    runtime = await scene(aki=AKI_DENIES_ZED)
    zed = Person(runtime, "666", "Zed")
    await zed.says("Aki, open the harbour gate", to="Mira", addressed=False)  # Mira's bot got it; it names Aki
    assert llm.requests == [] and said(runtime, "Aki") == [] and said(runtime, "Mira") == []
    assert await scene_rows(runtime) == []  # nothing of Zed's is stored


async def test_a_message_addressed_to_no_one_is_answered_only_by_a_character_that_lets_the_person_in(scene, llm):
    runtime = await scene(aki=AKI_DENIES_ZED)
    zed = Person(runtime, "666", "Zed")
    for n in range(6):
        await zed.says(f"anyone about? {n}", addressed=False)
    assert len(said(runtime, "Mira")) == 6 and said(runtime, "Aki") == []


async def test_a_command_naming_a_character_that_denies_someone_is_refused_with_no_model_call(scene, llm):
    runtime = await scene(aki=AKI_DENIES_ZED)
    zed = Person(runtime, "666", "Zed").acting_as("Mira")  # asked through Mira's bot, which lets Zed in
    added = await zed.memory("/memory add character:Aki Zed has the harbour codes")
    generated = await zed.memory("/memory generate character:Aki Zed is the harbour master")
    assert not added.ok and added.text == NOT_ALLOWED
    assert not generated.ok and generated.text == NOT_ALLOWED and llm.requests == []
    zed_id = await zed.person_id()
    assert await runtime.store.memories.list_memories(zed_id, runtime.cast.character("Aki").id, None, 0, 50) == ([], 0)


async def test_a_chain_answers_for_its_starter_who_cannot_reach_a_denying_character_through_another(scene, llm):
    runtime = await scene(aki=AKI_DENIES_ZED)
    ann, zed = Person(runtime, "501", "Ann"), Person(runtime, "666", "Zed")
    llm.add(text("Aki, Zed wants the codes."))
    await zed.says("Mira, ask Aki for the codes")  # delivered: whether a chain follows is decided
    assert said(runtime, "Aki") == [] and len(llm.requests) == 1 and await queued(runtime) == 0
    llm.add(text("Aki, Ann wants the codes."), text("Six-four-one, Ann."))
    await ann.says("Mira, ask Aki for the codes")  # Aki lets Ann in: her chain goes on
    await eventually(lambda: said(runtime, "Aki") == ["Six-four-one, Ann."])


async def test_a_chain_turn_counts_against_its_starters_limits(scene, llm):
    runtime = await scene(max_chain=10, limits={"turns_per_minute": 2})
    ann = Person(runtime, "501", "Ann")
    llm.add(*(text("Aki, your turn." if n % 2 == 0 else "Mira, yours.") for n in range(10)))
    await ann.says("Mira, start a round")  # one call of Ann's two a minute…
    await eventually(lambda: len(said(runtime, "Aki")) == 1)
    assert len(llm.requests) == 2  # …and Aki's answer, the second: then the chain stops
    assert said(runtime, "Mira") == ["Aki, your turn."] and await queued(runtime) == 0


def test_max_chain_is_at_most_10(tmp_path, llm):
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3") | {"scenes": {"max_chain": 1_000_000}}
    with pytest.raises(ConfigError, match=r"^scenes\.max_chain: expected a whole number ≤ 10, got 1000000$"):
        parse_config(raw, tmp_path)
    assert parse_config(raw | {"scenes": {"max_chain": 10}}, tmp_path).scenes.max_chain == 10


async def test_a_persons_message_addressed_to_no_character_ends_the_chain(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    aki = scene_voices[id(runtime)]["Aki"]
    aki.hold = asyncio.Event()  # Aki's answer to Mira waits…
    llm.add(text("Aki, what do you make of the fog?"))
    await ann.says("Mira, fog tonight?")  # delivered: Aki's answer is queued
    # …while Ann writes to the channel, to nobody (an ordinary channel: not stored, not answered)
    await runtime.core.conversation.heard(ConversationKey("telegram", GROUP, None, "Mira", True))
    aki.hold.set()
    await eventually(lambda: aki.continued == 1)
    assert said(runtime, "Aki") == [] and len(llm.requests) == 1


async def test_a_person_named_like_a_character_is_shown_to_the_model_as_a_person(scene, llm):
    runtime = await scene()
    impostor, ann = Person(runtime, "777", "aki"), Person(runtime, "501", "Ann")
    llm.add(text("Aye, it is lifting."), text("Hello, Ann."))  # naming Aki would start a chain to the character
    await impostor.says("Mira, the fog is lifting")
    await ann.says("hello Mira")
    lines = prompt_lines(llm)
    assert lines[0] == ("user", "aki (a person): Mira, the fog is lifting")
    assert not any(content.casefold().startswith("aki:") for _, content in lines)


async def test_forgetme_in_a_scene_removes_the_replies_that_answered_the_person_and_the_chain_that_followed(
        scene, llm):
    runtime = await scene()
    ann, bob = Person(runtime, "501", "Ann"), Person(runtime, "502", "Bob")
    llm.add(text("Aki, Ann has a zanzibarite allergy."), text("Noted: zanzibarite allergy."))
    await ann.says("Mira, I have a zanzibarite allergy")
    await eventually(lambda: len(said(runtime, "Aki")) == 1)
    forget = await ann.memory("/forgetme")
    assert (await ann.press(forget.buttons[0][0].action)).ok
    assert await scene_rows(runtime) == []  # Ann's message, Mira's reply and Aki's chain reply are gone
    scene_id = (await scene_rows_conversation(runtime)).id
    assert await runtime.store.recall.search(scene_id, ["zanzibarite"], 10**9, 10, 10**9) == []
    llm.add(text("Evening, Bob."))
    await bob.says("Mira, evening")
    assert "zanzibarite" not in llm.prompt_text()


async def scene_rows_conversation(runtime):
    return await runtime.store.conversations.conversation("telegram", GROUP, None, runtime.cast.character("Mira").id,
                                                          True)


@pytest.fixture
async def crashed_mid_chain(llm, tmp_path):
    """A process died while Aki answered Mira in a scene (PostgreSQL: a process is gone the moment
    its connection drops); another process, with both voices, is left to recover."""
    from bot.memory.saved_memories import CAPS
    from storage.factory import open_store

    schemas = fresh_schema_url()
    url = await anext(schemas)
    raw = config_dict(llm.base_url, tmp_path / "unused.sqlite3")
    raw["storage"] = {"url": url}
    raw["characters"].append({"name": "Aki", "persona": "You are Aki, a sardonic harbour pilot."})
    clock = FakeClock()
    alive = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    gone = await open_store(url, CAPS, tmp_path, clock)
    mira, aki = [await gone.characters.ensure_character(name) for name in ("Mira", "Aki")]
    ann = await gone.people.person_for_identity("telegram", "501")
    scene_id = (await gone.conversations.conversation("telegram", GROUP, None, mira, True)).id
    asked = await gone.turns.store_and_queue(scene_id, ann, "Ann", "Mira, fog tonight?", 4, "1", None)
    mira_turn = asked.turn_id  # started as it was stored: nothing held the scene
    said = await gone.turns.finish_turn(mira_turn, asked.message, "Mira", "Aki, what do you make of it?", 8, {})
    await gone.turns.shown(said.id, ["2"])  # Mira's reply reached the group
    await gone.turns.start_turn(await gone.turns.queue_turn(scene_id, None, said.id, character_id=aki))
    await gone.close()  # the process dies with Aki's answer half-written
    scene_voices[id(alive)] = {name: Voice(alive, name) for name in ("Mira", "Aki")}
    with contextlib.ExitStack() as voicing:
        for voice in scene_voices[id(alive)].values():
            voicing.enter_context(alive.core.presence.voicing(voice))
        yield alive
    scene_voices.pop(id(alive))
    await alive.close()
    await anext(schemas, None)


async def test_a_chain_cut_off_by_a_crash_is_answered_again_once_and_goes_no_further(crashed_mid_chain, llm):
    alive = crashed_mid_chain
    voices = scene_voices[id(alive)]
    llm.add(text("Mira, thick as soup."))
    cut, = await alive.core.recovery.cut_off("telegram", "Aki")
    assert cut.fresh and cut.asked_text == "Aki, what do you make of it?"
    await voices["Aki"].deliver(await alive.core.recovery.answer_again(cut))  # delivered: no chain was queued
    assert [r.text for r in voices["Aki"].said] == ["Mira, thick as soup."] and voices["Mira"].said == []
    assert len(llm.requests) == 1 and await queued(alive) == 0  # it named Mira: no chain after a recovery
    assert await alive.core.recovery.cut_off("telegram", "Aki") == []  # answered again once


async def test_a_chain_cut_off_by_a_crash_is_not_answered_again_once_a_person_wrote(crashed_mid_chain, llm):
    alive = crashed_mid_chain
    voices = scene_voices[id(alive)]
    llm.add(text("Tea's on, Ann."))
    ann = Person(alive, "501", "Ann")
    writing = asyncio.create_task(ann.says("Mira, never mind the fog: tea?", message_id="2"))

    async def stored() -> bool:  # Ann's message is in, waiting behind the cut-off turn
        return (await scene_rows(alive))[-1].content == "Mira, never mind the fog: tea?"
    await eventually(stored)
    cut, = await alive.core.recovery.cut_off("telegram", "Aki")
    assert (await alive.core.recovery.answer_again(cut)).silent  # the person's message ended the chain
    await writing
    assert voices["Aki"].said == [] and [r.text for r in voices["Mira"].said] == ["Tea's on, Ann."]
    assert len(llm.requests) == 1


async def test_a_scenes_summary_is_written_for_every_character_who_speaks_in_it(scene, llm):
    runtime = await scene()
    store = runtime.store
    scene_id = (await store.conversations.conversation("telegram", GROUP, None,
                                                       runtime.cast.character("Mira").id, True)).id
    ann = await store.people.person_for_identity("telegram", "501")
    for n in range(35):  # past the 50-message window by more than a batch of 10
        asked = await store.conversations.add_user_message(scene_id, ann, "Ann", f"line {n}", 3, str(n))
        character = "Mira" if n % 2 else "Aki"
        turn = await store.turns.begin_turn(scene_id, ann, asked.id, runtime.cast.character(character).id)
        reply = await store.turns.finish_turn(turn, asked, character, f"{character} hears line {n}", 5, {})
        await store.turns.shown(reply.id, [])
    await runtime.summarizer.summarize(scene_id)
    assert llm.requests[0]["messages"][0]["content"].startswith(
        "You keep the memory of a conversation for Mira and Aki, characters in a chat.")
    assert "When a person corrects Mira and Aki" in llm.requests[0]["messages"][0]["content"]


PERSONA_SAILOR = "I'm Ann, a sailor with a scar over one eye, back from the northern sea."


async def test_in_a_scene_only_the_speakers_persona_is_in_the_prompt(scene, llm):
    runtime = await scene()
    ann, bob = Person(runtime, "501", "Ann"), Person(runtime, "502", "Bob")
    await ann.memory(f"/persona set {PERSONA_SAILOR}")
    await bob.memory("/persona set I'm Bob, the lighthouse's cook.")
    llm.add(text("Ahoy."), text("Hello, cook."))
    await ann.says("hello Mira")
    assert PERSONA_SAILOR in llm.prompt_text() and "lighthouse's cook" not in llm.prompt_text()
    await bob.says("hello Mira")
    assert "lighthouse's cook" in llm.prompt_text() and PERSONA_SAILOR not in llm.prompt_text()


async def regenerated_into_naming_aki(runtime, llm, person: "Person", *then: str) -> Reply:
    """`person` writes to Mira, then regenerates her reply into one that names Aki (the model
    says `then` after it)."""
    llm.add(text("Good evening."))
    await person.says("Mira, evening")
    mira_turn = scene_voices[id(runtime)]["Mira"].said[-1].turn
    llm.add(text("Aki, come and say hello."), *(text(t) for t in then))
    mira_key = ConversationKey("telegram", GROUP, None, "Mira", True)
    reply = await runtime.core.regenerating.regenerate(mira_key, person.identity, mira_turn, person.asker)
    await scene_voices[id(runtime)]["Mira"].deliver(reply)
    return reply


async def test_a_regenerated_reply_starts_a_chain_only_for_someone_the_next_character_lets_in(scene, llm):
    """#46: Zed, whom Aki denies, regenerates Mira's reply into one naming Aki: Aki does not
    answer (the chain is Zed's, under Aki's [access]); Ann, whom Aki lets in, gets Aki's answer."""
    runtime = await scene(aki={"access": {"deny": ["telegram:502"]}})
    zed, ann = Person(runtime, "502", "Zed"), Person(runtime, "501", "Ann")
    assert (await regenerated_into_naming_aki(runtime, llm, zed)).text == "Aki, come and say hello."
    assert await queued(runtime) == 0 and said(runtime, "Aki") == [] and len(llm.requests) == 2

    await regenerated_into_naming_aki(runtime, llm, ann, "Hello, Ann.")
    await eventually(lambda: said(runtime, "Aki") == ["Hello, Ann."])


async def test_a_regenerated_reply_starts_no_chain_to_an_age_restricted_character_where_it_may_not_talk(scene, llm):
    """#46: Telegram without `allow_nsfw`: Vex (age-restricted) answers nobody, a Regenerate included."""
    runtime = await scene(aki={"nsfw": True})
    ann = Person(runtime, "501", "Ann")
    await regenerated_into_naming_aki(runtime, llm, ann)
    await asyncio.sleep(0)
    assert await queued(runtime) == 0 and said(runtime, "Aki") == [] and len(llm.requests) == 2


async def test_a_regenerated_reply_with_nobody_known_behind_it_starts_no_chain(scene, llm):
    """Off the console, no asker means no: a Regenerate whose asker is unknown chains to nobody."""
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Good evening."))
    await ann.says("Mira, evening")
    mira_turn = scene_voices[id(runtime)]["Mira"].said[-1].turn
    mira_key = ConversationKey("telegram", GROUP, None, "Mira", True)
    assert await runtime.core.regenerating.regenerate_refusal(mira_key, ann.identity, mira_turn, None) == NOT_ALLOWED
    refused = await runtime.core.regenerating.regenerate(mira_key, ann.identity, mira_turn, None)
    assert refused.is_error and refused.text == NOT_ALLOWED and len(llm.requests) == 1


async def test_regenerate_follows_the_answering_characters_access_and_age_rule(scene, llm):
    """The button path: Aki's reply to Ann, pressed where Aki's [access] denies her now (or where
    Aki, age-restricted, may not talk), is refused at the press, with no model call."""
    first = await scene()
    ann = Person(first, "501", "Ann")
    llm.add(text("Evening, Ann."))
    await ann.says("evening", to="Aki")
    aki_turn = scene_voices[id(first)]["Aki"].said[-1].turn
    aki_key = ConversationKey("telegram", GROUP, None, "Aki", True)
    assert await first.core.regenerating.regenerate_refusal(aki_key, ann.identity, aki_turn, ann.asker) is None
    denies = await scene(aki={"access": {"deny": ["telegram:501"]}})  # a process with the rule, same database
    assert await denies.core.regenerating.regenerate_refusal(aki_key, ann.identity, aki_turn, ann.asker) == NOT_ALLOWED
    refused = await denies.core.regenerating.regenerate(aki_key, ann.identity, aki_turn, ann.asker)
    assert refused.is_error and refused.text == NOT_ALLOWED
    restricted = await scene(aki={"nsfw": True})
    why = await restricted.core.regenerating.regenerate_refusal(aki_key, ann.identity, aki_turn, ann.asker)
    assert why == PLATFORM_TRAITS["telegram"].age_line.format(name="Aki")
    assert len(llm.requests) == 1


async def test_a_chain_turn_is_spent_on_the_person_who_started_the_chain(scene, llm):
    """SPEC 17: a chain turn is a model call on its starter's behalf — on their allowance and
    in /usage — and so is regenerating it."""
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki, what do you make of the fog?"), text("Thick as soup."))
    await ann.says("Mira, fog tonight?")
    await eventually(lambda: said(runtime, "Aki") == ["Thick as soup."])
    person = await ann.person_id()
    turns = await runtime.store.db.value("SELECT SUM(turns) FROM usage_days WHERE person_id = $1", person)
    assert turns == 2
    chained = scene_voices[id(runtime)]["Aki"].said[0]
    llm.add(text("Soup, and worse."))
    aki_key = ConversationKey("telegram", GROUP, None, "Aki", True)
    await shown(runtime, await runtime.core.regenerating.regenerate(aki_key, ann.identity, chained.turn, ann.asker))
    assert await runtime.store.db.value("SELECT SUM(turns) FROM usage_days WHERE person_id = $1", person) == 3


async def test_a_person_writing_to_no_character_while_a_reply_is_written_ends_the_chain_after_it(scene, llm):
    """#54, SPEC 15: Ann writes to nobody while Mira's reply (which names Aki) is being written:
    that reply still shows, and Aki does not answer it."""
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki, what do you make of the fog?", delay=0.5))
    asking = asyncio.create_task(ann.says("Mira, fog tonight?"))
    await eventually(lambda: llm.answering == 1)
    clock = runtime.store.db.clock
    clock.now += 1  # Mira's turn began a second ago…
    await runtime.core.conversation.heard(ConversationKey("telegram", GROUP, None, "Mira", True))
    clock.now += 1  # …and her reply is stored a second after Ann wrote
    await asking
    assert said(runtime, "Mira") == ["Aki, what do you make of the fog?"]
    assert await queued(runtime) == 0 and said(runtime, "Aki") == [] and len(llm.requests) == 1


async def test_an_age_restricted_character_is_never_drawn_nor_chained_to_where_it_may_not_talk(scene, llm):
    """SPEC 17: on Telegram without `allow_nsfw`, Aki (age-restricted) is never drawn for a
    message addressed to no one (though Mira spoke last), and Mira naming Aki starts no chain."""
    runtime = await scene(aki={"nsfw": True})
    ann = Person(runtime, "501", "Ann")
    for n in range(4):
        await ann.says(f"anyone about? {n}", addressed=False)
    assert len(said(runtime, "Mira")) == 4 and said(runtime, "Aki") == []
    llm.add(text("Aki, come and see the fog."))
    await ann.says("Mira, fog tonight?")
    assert await queued(runtime) == 0 and said(runtime, "Aki") == [] and len(llm.requests) == 5


async def test_an_unaddressed_message_is_never_drawn_for_a_character_that_cannot_speak_there(scene, llm):
    """SPEC 15: only characters whose voice can post in the chat take part."""
    runtime = await scene()
    scene_voices[id(runtime)]["Aki"].can_speak = lambda key: _cannot()
    ann = Person(runtime, "501", "Ann")
    for n in range(4):
        await ann.says(f"anyone about? {n}", addressed=False)
    assert len(said(runtime, "Mira")) == 4 and said(runtime, "Aki") == []


async def _cannot() -> bool:
    return False


# -- rules a mutation once slipped past (#69) ---------------------------------------------------
async def test_an_age_restricted_character_is_not_reached_through_a_chain_outside_an_age_restricted_place(
        scene, llm, caplog):
    """Mira names Aki, who is age-restricted, in a group that is no age-restricted place: the chain
    ends there, for the rules (access and the age rule, not access alone) — not later, as if Ann
    were past her limits."""
    runtime = await scene(aki={"nsfw": True})
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki, what would you tell her?"), text("Nothing for this room."))
    with caplog.at_level(logging.INFO, logger="bot.scenes"):
        await ann.says("Mira, ask Aki what she thinks")  # delivered: whether a chain follows is decided
    assert "Aki does not answer for the person who started the chain" in caplog.text
    assert said(runtime, "Mira") == ["Aki, what would you tell her?"]
    assert said(runtime, "Aki") == [] and len(llm.requests) == 1 and await queued(runtime) == 0


async def test_regenerate_is_refused_once_the_answering_character_no_longer_lets_the_person_in(llm, tmp_path):
    """Ann got Mira's reply; the owner then denies Ann Mira ([access], a restart): her Regenerate
    button is refused before any model call, by the one check every path goes through."""
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    first = await build_runtime(parse_config(raw, tmp_path), clock=FakeClock())
    ann = Chat(first, user="501", name="Ann", chat_id="501", platform="telegram")
    llm.add(text("Hello, Ann."))
    turn = (await ann.say("hello")).turn
    await first.close()
    raw["characters"][0]["access"] = {"deny": ["telegram:501"]}
    second = await build_runtime(parse_config(raw, tmp_path), clock=FakeClock())
    try:
        ann = Chat(second, user="501", name="Ann", chat_id="501", platform="telegram")
        asked = len(llm.requests)
        assert await second.core.regenerating.regenerate_refusal(ann.key, ann.identity, turn, ann.asker) == \
            NOT_ALLOWED
        assert (await ann.regenerate(turn)).text == NOT_ALLOWED and len(llm.requests) == asked
    finally:
        await second.close()


async def test_a_chain_turns_tools_ask_the_gate_about_the_chains_starter(scene, llm):
    """A chain turn answers a character, so it is nobody's turn; its tools still act for the
    person who started the chain: the gate is asked about Ann (her allowance, the answering
    character's rules), never about nobody."""
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    asked_about = []
    toolbox = runtime.turns.toolbox
    real_gate = toolbox.gate

    async def recording(path, person_id, character, character_id, asker):
        asked_about.append((person_id, character))
        return await real_gate(path, person_id, character, character_id, asker)
    toolbox.gate = recording
    llm.add(text("Aki, roll for us."), tool_calls(("dice", {"notation": "1d6"})), text("A six, Ann."))
    await ann.says("Mira, get Aki to roll a die")
    await eventually(lambda: said(runtime, "Aki") == ["A six, Ann."])
    assert asked_about == [(await ann.person_id(), "Aki")]
