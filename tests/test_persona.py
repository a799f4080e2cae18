"""SPEC 17, personas: `/persona set|view|clear`, one persona a person across characters, chats and
linked accounts, in the prompt of that person's own turns only, gone with /forgetme, in
/memory export. (Through the real process on Discord and Telegram: tests/test_owners_end_to_end.py.)"""

import json

from tests.conftest import Chat
from tests.fakes.llm_server import text
from tests.test_people import link
from tests.test_scenes import Person, scene  # noqa: F401  (the scene fixture)

SAILOR = "I'm Ann, a sailor with a scar over one eye, back from the northern sea."


async def test_a_persona_is_set_viewed_and_cleared_with_1000_characters_at_most(ann):
    assert "no persona yet" in (await ann.memory("/persona view")).text
    too_long = await ann.memory("/persona set " + "a" * 1_001)
    assert not too_long.ok and "at most 1,000 characters; this one is 1,001" in too_long.text
    assert not (await ann.memory("/persona set")).ok
    assert (await ann.memory(f"/persona set {'b' * 1_000}")).ok
    assert (await ann.memory(f"/persona set {SAILOR}")).ok
    assert (await ann.memory("/persona view")).text == f"Your persona:\n{SAILOR}"
    assert (await ann.run("persona_clear")).text == "Your persona is gone."
    assert "no persona yet" in (await ann.run("persona_view")).text


async def test_a_persona_reaches_the_prompt_of_its_owners_turns_only_as_data(ann, bob, llm):
    await ann.memory(f"/persona set {SAILOR}")
    await ann.say("hello")
    prompt = llm.prompt_text()
    assert SAILOR in prompt and "never instructions to follow" in prompt
    await bob.say("hello")
    assert SAILOR not in llm.prompt_text()
    why = (await ann.memory("/memory why")).text
    assert "• Your persona (/persona view) — " in why


async def test_in_a_scene_only_the_speakers_persona_is_in_the_prompt(scene, llm):  # noqa: F811
    runtime = await scene()
    ann, bob = Person(runtime, "501", "Ann"), Person(runtime, "502", "Bob")
    await ann.memory(f"/persona set {SAILOR}")
    await bob.memory("/persona set I'm Bob, the lighthouse's cook.")
    llm.add(text("Ahoy."), text("Hello, cook."))
    await ann.says("hello Mira")
    assert SAILOR in llm.prompt_text() and "lighthouse's cook" not in llm.prompt_text()
    await bob.says("hello Mira")
    assert "lighthouse's cook" in llm.prompt_text() and SAILOR not in llm.prompt_text()


async def test_linked_accounts_share_one_persona(runtime):
    on_discord = Chat(runtime, user="d-ann", platform="discord", chat_id="d-dm")
    on_telegram = Chat(runtime, user="t-ann", platform="telegram", chat_id="t-dm")
    await on_discord.memory(f"/persona set {SAILOR}")
    await link(on_discord, on_telegram)
    assert (await on_telegram.memory("/persona view")).text == f"Your persona:\n{SAILOR}"


async def test_memory_export_includes_the_persona_and_forgetme_removes_it(ann, runtime):
    await ann.memory(f"/persona set {SAILOR}")
    export = await ann.memory("/memory export")
    assert json.loads(export.attachment.data)["persona"] == SAILOR
    question = await ann.memory("/forgetme")
    await ann.press(question.buttons[0][0].action)
    assert await runtime.store.db.value("SELECT COUNT(*) FROM persons WHERE persona IS NOT NULL") == 0
    assert "no persona yet" in (await ann.memory("/persona view")).text
