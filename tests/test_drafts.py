"""SPEC 5.3 and 5.4 — memories drafted by the AI: /memory generate, and save from conversation."""

from bot.contract import IncomingMessage
from tests.conftest import Chat, shown
from tests.fakes.summarizer import extractive


async def say_with_id(chat: Chat, text: str, platform_id: str):
    message = IncomingMessage(chat.key, chat.identity, chat.name, text,
                              platform_message_id=platform_id)
    return await shown(chat.runtime, await chat.runtime.turns.handle(message))


async def test_generate_drafts_from_the_description_only_never_the_chat(ann, llm):
    llm.responder = extractive
    await ann.say("SECRET-CHAT-LINE about my day")
    result = await ann.memory("/memory generate I'm a night nurse. My cat is called Tofu. I hate mornings")
    request = llm.requests[-1]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == "I'm a night nurse. My cat is called Tofu. I hate mornings"
    assert "SECRET-CHAT-LINE" not in str(request)
    assert "nothing is saved yet" in result.text
    assert "no saved memories" in (await ann.memory("/memory view")).text  # reviewed first

    keep_two = result.buttons[0][1]
    kept = await ann.press(keep_two.action)
    assert "Saved #" in kept.text and "My cat is called Tofu" in kept.text
    assert "Still to review:" in kept.text
    keep_all = kept.buttons[1][0]
    assert keep_all.label == "Keep all"
    await ann.press(keep_all.action)
    view = (await ann.memory("/memory view")).text
    assert all(part in view for part in ("night nurse", "Tofu", "hate mornings"))


async def test_keeping_a_draft_the_person_already_has_saves_the_rest_and_names_the_one_kept(ann, llm):
    llm.responder = extractive
    saved = await ann.memory("/memory add my cat is called Tofu")
    tofu = saved.text.split("#")[1].split(" ")[0]
    drafted = await ann.memory("/memory generate I'm a night nurse. My cat is called Tofu")
    kept = await ann.press(drafted.buttons[1][0].action)  # Keep all
    assert "Saved #" in kept.text and "night nurse" in kept.text
    assert f"Already saved #{tofu}: My cat is called Tofu" in kept.text
    assert (await ann.memory("/memory view")).text.lower().count("tofu") == 1


async def test_generate_refuses_a_description_over_1000_characters(ann, llm):
    refused = await ann.memory("/memory generate " + "a" * 1_001)
    assert not refused.ok and "1,001 characters" in refused.text and "at most 1,000" in refused.text
    assert not (await ann.memory("/memory generate")).ok
    assert llm.requests == []


async def test_save_the_last_messages_as_is_saves_them_pinned(ann, llm):
    await ann.say("My brother Ola is getting married on 12 June")
    view = await ann.memory("/memory save 2")
    assert "Chosen messages (2 of at most 20)" in view.text
    assert "> Ann: My brother Ola is getting married on 12 June" in view.text
    use_as_is = view.buttons[0][1]
    saved = await ann.press(use_as_is.action)
    assert saved.text.startswith("Saved #") and "(pinned)" in saved.text
    assert "📌" in (await ann.memory("/memory view")).text


async def test_draft_with_ai_offers_up_to_5_drafts_and_keeps_one_pinned(ann, llm):
    llm.responder = extractive
    for line in ("I moved to Oslo. I have two kids", "Their names are Per and Siri. Per is 7",
                 "Siri is 4. We have a dog"):
        await ann.say(line)
    view = await ann.memory("/memory save 6")
    drafts = await ann.press(view.buttons[0][0].action)
    assert "Keep one of these (it will be pinned):" in drafts.text
    assert len(drafts.buttons[0]) == 5
    kept = await ann.press(drafts.buttons[0][0].action)
    assert "(pinned)" in kept.text
    assert "Those drafts are gone" in (await ann.press(drafts.buttons[0][1].action)).text  # keep one


async def test_remember_this_picks_messages_by_their_platform_id_up_to_20(ann, llm):
    for i in range(21):
        await say_with_id(ann, f"message {i}", f"p{i}")
    for i in range(20):
        picked = await ann.runtime.commands.remember(ann.ctx, f"p{i}")
    assert "Chosen messages (20 of at most 20)" in picked.text
    full = await ann.runtime.commands.remember(ann.ctx, "p20")
    assert not full.ok and "already picked 20 messages" in full.text
    unknown = await ann.runtime.commands.remember(ann.ctx, "never-seen")
    assert not unknown.ok


async def test_save_from_conversation_respects_the_pin_budget(ann, llm):
    person, character = await ann.person_id(), ann.runtime.cast.character("Mira").id
    for i in range(20):
        await ann.runtime.store.memories.add_memory(person, character, "character", f"pin {i}", 2, True, "person")
    await ann.say("something worth keeping")
    view = await ann.memory("/memory save 1")
    refused = await ann.press(view.buttons[0][1].action)
    assert not refused.ok and "20 pinned character memories" in refused.text


async def test_save_checks_n(ann):
    await ann.say("hello")
    for bad in ("0", "21", "abc"):
        result = await ann.memory(f"/memory save {bad}")
        assert not result.ok and "n must be a number from 1 to 20" in result.text
    assert "Pick the messages to remember first" in (await ann.memory("/memory save")).text


async def test_use_as_is_refuses_over_500_characters(ann, llm):
    llm.default = "x" * 400
    await ann.say("y" * 200)
    view = await ann.memory("/memory save 2")
    refused = await ann.press(view.buttons[0][1].action)
    assert not refused.ok and "a memory holds at most 500" in refused.text


async def test_at_most_5_drafts_are_offered_whatever_the_model_writes(ann, llm):
    import json as json_module

    from tests.fakes.llm_server import text as text_step

    await ann.say("I moved to Oslo")
    view = await ann.memory("/memory save 1")
    llm.add(text_step(json_module.dumps([f"Ann fact number {i}" for i in range(1, 8)])))  # 7 drafts
    drafts = await ann.press(view.buttons[0][0].action)
    assert len(drafts.buttons[0]) == 5
    assert "Ann fact number 5" in drafts.text and "Ann fact number 6" not in drafts.text


def test_drafts_answered_as_a_json_object_are_its_strings_never_its_braces_and_keys():
    """#68: SmolLM2 on llama-cpp-python answered /memory generate with a JSON object; its lines
    became the drafts "{" and `memories": {`. The strings it holds are the drafts."""
    from bot.memory.drafting import parse_drafts

    answer = '{\n  "memories": {\n    "1": "Ann is a night nurse",\n    "2": "Ann\'s cat is Tofu"\n  }\n}'
    assert parse_drafts(answer) == ["Ann is a night nurse", "Ann's cat is Tofu"]
    assert parse_drafts('{"memories": ["Ann hates mornings"]}') == ["Ann hates mornings"]
    assert parse_drafts('[{"memory": "Ann hates mornings"}, {"memory": "Ann keeps bees"}]') == [
        "Ann hates mornings", "Ann keeps bees"]
    assert parse_drafts('["one", "two"]') == ["one", "two"]
    assert parse_drafts("- one\n- two") == ["one", "two"]
    cut_off = parse_drafts('{\n  "memories": {\n    "1": "Ann keeps bees"\n')  # an answer cut at its limit
    assert not any(draft in ("{", "}") or draft.endswith(": {") for draft in cut_off)
