"""SPEC section 5.1 — the character saves, updates and deletes memories mid-reply."""

import json

from bot.turn.handler import NO_TOOLS
from tests.conftest import Chat
from tests.fakes.llm_server import status, text, tool_calls


def tool_results(llm, index: int = -1) -> list[dict]:
    return [json.loads(m["content"]) for m in llm.requests[index]["messages"] if m["role"] == "tool"]


async def memory_ids(chat: Chat) -> dict[str, int]:
    rows, _ = await chat.runtime.store.memories.list_memories(
        await chat.person_id(), chat.runtime.cast.character("Mira").id, None, 0, 500)
    return {m.content: m.id for m in rows}


async def test_the_character_saves_a_memory_mid_reply(ann, llm):
    llm.add(tool_calls(("save_memory", {"content": "Ann's birthday is 3 May", "scope": "global"})),
            text("Happy early birthday!"))
    reply = await ann.say("My birthday is on the 3rd of May")
    assert reply.text == "Happy early birthday!"
    assert tool_results(llm)[0]["ok"] is True
    assert "#" in (await ann.memory("/memory view global")).text


async def test_pinned_memory_cannot_be_deleted_by_the_model(ann, llm):
    pinned = (await ann.run("add", text="I am allergic to peanuts", pin=True)).text
    memory_id = int(pinned.split("#")[1].split()[0])
    llm.add(tool_calls(("delete_memory", {"id": memory_id})), text("Done."))
    await ann.say("forget my allergy")
    assert "pinned by the person" in tool_results(llm)[0]["error"]
    assert "I am allergic to peanuts" in await memory_ids(ann)


async def test_pinned_memory_cannot_be_updated_by_the_model(ann, llm):
    pinned = (await ann.run("add", text="My name is Ann", pin=True)).text
    memory_id = int(pinned.split("#")[1].split()[0])
    llm.add(tool_calls(("update_memory", {"id": memory_id, "content": "My name is Eve"})), text("Ok."))
    await ann.say("call me Eve")
    assert "pinned by the person" in tool_results(llm)[0]["error"]
    assert "My name is Ann" in await memory_ids(ann)


async def test_an_unknown_id_gives_an_error_result_the_model_reads(ann, llm):
    llm.add(tool_calls(("update_memory", {"id": 4242, "content": "x"}), ("delete_memory", {"id": "#4243"})),
            text("Hm."))
    reply = await ann.say("hello")
    assert reply.text == "Hm."
    assert [r["error"] for r in tool_results(llm)] == ["there is no memory #4242", "there is no memory #4243"]


async def test_the_model_cannot_reach_another_persons_memory(ann, bob, llm):
    result = await bob.memory("/memory add Bob's bank PIN is 1234")
    bob_memory = int(result.text.split("#")[1].split()[0].rstrip(":"))
    llm.add(tool_calls(("update_memory", {"id": bob_memory, "content": "hacked"}),
                       ("delete_memory", {"id": bob_memory})), text("Sure."))
    await ann.say(f"update memory #{bob_memory} to say hacked, then delete it")
    assert all("there is no memory" in r["error"] for r in tool_results(llm))
    assert "Bob's bank PIN is 1234" in await memory_ids(bob)


async def test_a_memory_the_model_saves_again_is_kept_once_and_the_model_is_told_its_id(ann, llm):
    """Small models save what they hear each time they hear it: the second save writes nothing
    and answers with the memory already kept."""
    llm.add(tool_calls(("save_memory", {"content": "Ann is allergic to peanuts"})), text("Noted."))
    await ann.say("I'm allergic to peanuts")
    kept = (await memory_ids(ann))["Ann is allergic to peanuts"]
    llm.add(tool_calls(("save_memory", {"content": "ann is allergic to peanuts "})), text("I remember."))
    await ann.say("did I tell you I'm allergic to peanuts?")
    assert tool_results(llm)[0] == {"ok": True, "id": kept, "saved": f"#{kept}",
                                    "note": "it was already saved; nothing new was written"}
    assert await memory_ids(ann) == {"Ann is allergic to peanuts": kept}


async def test_the_model_cannot_update_a_memory_to_the_words_another_keeps(ann, llm):
    await ann.memory("/memory add Ann is allergic to peanuts")
    await ann.memory("/memory add Ann has a cat")
    kept = await memory_ids(ann)
    allergy, cat = kept["Ann is allergic to peanuts"], kept["Ann has a cat"]
    llm.add(tool_calls(("update_memory", {"id": cat, "content": "Ann is allergic to peanuts"})), text("Ok."))
    await ann.say("I'm allergic to peanuts")
    assert tool_results(llm)[0]["error"] == f"#{allergy} already says that; #{cat} was not changed"
    assert await memory_ids(ann) == kept


async def test_a_save_at_the_cap_is_refused_telling_the_model_to_update_or_delete_first(ann, llm):
    store, person = ann.runtime.store, await ann.person_id()
    character = ann.runtime.cast.character("Mira").id
    for i in range(100):
        await store.memories.add_memory(person, character, "character", f"fact {i}", 2, False, "person")
    llm.add(tool_calls(("save_memory", {"content": "one more"})), text("I'll keep it in mind."))
    reply = await ann.say("remember this too")
    assert reply.text == "I'll keep it in mind."
    error = tool_results(llm)[0]["error"]
    assert "already 100 unpinned character memories" in error and "Update or delete one first" in error


async def test_at_most_4_tool_rounds_per_turn(ann, llm):
    for i in range(4):
        llm.add(tool_calls(("save_memory", {"content": f"fact {i}"})))
    llm.add(text("Finally, an answer."))
    reply = await ann.say("tell me everything")
    assert reply.text == "Finally, an answer."
    assert len(llm.requests) == 5
    assert all("tools" in r for r in llm.requests[:4])
    assert "tools" not in llm.requests[4]  # the 5th call may not use tools (SPEC 18: at most 4 rounds)
    assert len(await memory_ids(ann)) == 4


async def test_malformed_tool_arguments_give_an_error_result_not_a_crash(ann, llm):
    llm.add(tool_calls(("save_memory", '{"content": "unterminated'), ("save_memory", "[1, 2]"),
                       ("save_memory", {"content": 12}), ("summon_demon", {})), text("Oops, sorry."))
    reply = await ann.say("hi")
    assert reply.text == "Oops, sorry."
    errors = [r["error"] for r in tool_results(llm)]
    assert "arguments are not valid JSON" in errors[0]
    assert errors[1] == "arguments must be a JSON object"
    assert errors[2] == "content must be a string"
    assert errors[3] == "unknown tool 'summon_demon'"


async def test_a_tool_saving_over_500_characters_gets_an_error_result(ann, llm):
    llm.add(tool_calls(("save_memory", {"content": "z" * 501})), text("Too long, fine."))
    await ann.say("hi")
    assert "501 characters" in tool_results(llm)[0]["error"]


async def test_tools_auto_detects_a_server_that_refuses_tools_and_remembers(ann, llm, caplog):
    llm.add(status(400, "model llama3 does not support tools"), text("Hello without tools."))
    reply = await ann.say("hi")
    assert reply.text == "Hello without tools."
    assert "tools" in llm.requests[0] and "tools" not in llm.requests[1]
    warned, = [r.getMessage() for r in caplog.records if "refuses tools" in r.getMessage()]
    assert "(save_memory, update_memory, delete_memory, " in warned and "are off until a restart" in warned  # what is off
    await ann.say("again")
    assert "tools" not in llm.requests[2]  # remembered
    assert NO_TOOLS in llm.requests[2]["messages"][0]["content"]  # the character is told, so it never pretends


async def test_tools_off_offers_no_tools_but_memories_are_still_read(make_config, clock, llm):
    from bot.runtime import build_runtime

    runtime = await build_runtime(make_config(tools="off"), clock=clock)
    try:
        ann = Chat(runtime)
        await ann.memory("/memory add I am allergic to peanuts")
        await ann.say("hi")
        assert "tools" not in llm.requests[-1]
        assert "peanuts" in llm.prompt_text()
        assert "save_memory" not in llm.prompt_text()
    finally:
        await runtime.close()


async def test_updates_and_deletes_count_toward_the_5_memory_writes_of_a_turn(ann, llm):
    llm.add(tool_calls(*[("save_memory", {"content": f"fact number {i}"}) for i in range(3)]),
            tool_calls(("update_memory", {"id": 1, "content": "fact number one, changed"}),
                       ("delete_memory", {"id": 2})),
            tool_calls(("save_memory", {"content": "a sixth change"})), text("Done."))
    await ann.say("remember, change and forget")
    assert [r.get("ok") for r in tool_results(llm, -2)[3:]] == [True, True]  # writes 4 and 5
    assert "at most 5 memory changes" in tool_results(llm)[-1]["error"]  # a sixth, after 3 saves
    assert len(await memory_ids(ann)) == 2


async def test_at_most_5_memory_writes_per_turn_the_rest_get_an_error_result(ann, llm):
    flood = [("save_memory", {"content": f"fact number {i}"}) for i in range(8)]  # 8: the most in one round
    llm.add(tool_calls(*flood), tool_calls(("delete_memory", {"id": 1})), text("Saved what I could."))
    reply = await ann.say("remember all of these")
    assert reply.text == "Saved what I could."
    first_round = tool_results(llm, -2)
    assert [r.get("ok") for r in first_round[:5]] == [True] * 5
    assert all("at most 5 memory changes" in r["error"] for r in first_round[5:])
    assert "at most 5 memory changes" in tool_results(llm)[-1]["error"]  # deletes count too
    assert len(await memory_ids(ann)) == 5


def test_the_instructions_and_the_three_tool_schemas_cost_at_most_400_tokens_a_turn():
    import json

    from bot.memory.tools import GUIDANCE, TOOL_SPECS
    from bot.model.tokens import TokenCounter
    from bot.turn.prompt import MEMORY_GUIDANCE

    counter = TokenCounter("gpt-4o-mini")
    fixed = counter.count(MEMORY_GUIDANCE + " " + GUIDANCE) + counter.count(json.dumps(TOOL_SPECS))
    assert fixed <= 400
    assert [spec["function"]["name"] for spec in TOOL_SPECS] == ["save_memory", "update_memory", "delete_memory"]
