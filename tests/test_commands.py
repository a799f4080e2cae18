"""SPEC section 6 — the /memory commands, with their input checks."""

import json

import pytest

from tests.conftest import Chat


async def added_id(chat: Chat, text: str) -> int:
    result = await chat.memory(f"/memory add {text}")
    assert result.ok, result.text
    return int(result.text.split("#")[1].split()[0].rstrip(":"))


async def test_add_edit_delete_a_memory(ann):
    memory_id = await added_id(ann, "I live in Bergen")
    assert f"Updated #{memory_id}" in (await ann.memory(f"/memory edit {memory_id} I live in Oslo")).text
    assert "I live in Oslo" in (await ann.memory("/memory view")).text
    assert (await ann.memory(f"/memory delete #{memory_id}")).text == f"Deleted #{memory_id}."
    assert "no saved memories" in (await ann.memory("/memory view")).text


async def test_the_person_may_edit_a_pinned_memory(ann):
    memory_id = await added_id(ann, "pin:yes my cat is called Tofu")
    assert (await ann.memory(f"/memory edit {memory_id} my cat is called Miso")).ok
    view = (await ann.memory("/memory view")).text
    assert f"📌 #{memory_id} · character · recent — my cat is called Miso" in view  # new text, still pinned
    assert "Tofu" not in view


async def test_typed_options_work_like_the_text_form(ann):
    result = await ann.run("add", text="I speak Norwegian", scope="global", pin=True)
    assert result.ok and "(pinned) for every character" in result.text


async def test_another_persons_id_answers_like_an_unknown_one(ann, bob):
    memory_id = await added_id(ann, "Ann's secret")
    unknown = 999_999
    for command in ("delete {}", "pin {}", "unpin {}", "edit {} changed"):
        theirs = await bob.memory("/memory " + command.format(memory_id))
        missing = await bob.memory("/memory " + command.format(unknown))
        assert not theirs.ok
        assert theirs.text == missing.text.replace(str(unknown), str(memory_id))
        assert theirs.text == f"There is no memory #{memory_id}."
    assert "Ann's secret" in (await ann.memory("/memory view")).text


@pytest.mark.parametrize("line, expected", [
    ("/memory frobnicate", "There is no /memory frobnicate"),
    ("/memory delete", "Which memory? Give its number"),
    ("/memory pin abc", "“abc” is not a memory number"),
    ("/memory edit 12", "A memory needs some text."),
    ("/memory add", "A memory needs some text."),
    ("/memory add scope:elsewhere hello", "Scope must be character or global, not “elsewhere”."),
    ("/memory add pin:perhaps hello", "pin must be yes or no, not “perhaps”."),
    ("/memory learning maybe", "state must be on or off"),
    ("/memory view sideways", "/memory view takes a scope"),
    ("/memory clear everything", "Scope must be character or global, not “everything”."),
    ("/memory why now", "/memory why takes no arguments, not “now”."),
    ("/memory delete -3", "is not a memory number"),
    ("/memory add " + "x" * 501, "That memory is 501 characters long; it can be at most 500 characters"),
])
async def test_bad_input_gets_a_clear_answer(ann, line, expected):
    result = await ann.memory(line)
    assert not result.ok
    assert expected in result.text


async def test_why_shows_the_last_replys_memories_tiers_and_tokens(ann, llm):
    pinned = await added_id(ann, "pin:yes I am allergic to peanuts")
    other = await added_id(ann, "I like lighthouses")
    await ann.say("hello")
    why = (await ann.memory("/memory why")).text
    assert f"Saved memories: 2 (#{pinned}📌, #{other})" in why
    assert "Summary: long-term 0, merged 0, recent 0" in why
    assert "Live window: 1 message — " in why  # "1 message", not "1 messages"
    assert "Total ≈" in why


async def test_export_is_all_of_the_persons_memories_as_json(ann, bob):
    await added_id(ann, "scope:global I am vegetarian")
    await added_id(ann, "pin:yes my sister is Kari")
    await added_id(bob, "Bob's fact")
    result = await ann.memory("/memory export")
    data = json.loads(result.attachment.data)
    assert result.attachment.filename.endswith(".json")
    assert sorted(m["content"] for m in data["memories"]) == ["I am vegetarian", "my sister is Kari"]
    assert {m["scope"] for m in data["memories"]} == {"global", "character"}
    assert data["identities"] == ["console:ann"]


async def test_a_button_pressed_by_another_person_is_refused(ann, bob):
    await added_id(ann, "something")
    clear = await ann.memory("/memory clear")
    confirm = clear.buttons[0][0]
    refused = await bob.press(confirm.action)
    assert not refused.ok and refused.text == "That button belongs to someone else."
    assert "1 — page 1 of 1" in (await ann.memory("/memory view")).text


async def test_a_forged_or_stale_button_is_refused(ann):
    assert (await ann.press("garbage")).text == "This button no longer works."
    person = await ann.person_id()
    assert (await ann.press(f"{person}:explode:1")).text == "This button no longer works."


@pytest.mark.parametrize("line, expected", [
    ("/memory delete 99999999999999999999999", "is not a memory number"),  # a 23-digit number
    ("/memory delete " + "9" * 30, "is not a memory number"),
    ("/memory view ²", "/memory view takes a scope"),  # "²".isdigit() is True
    ("/memory edit ² hello", "“²” is not a memory number"),
    ("/memory edit ١٢ x", "“١٢” is not a memory number"),  # Arabic-Indic 12 is not #12
    ("/memory save ³", "n must be a number from 1 to 20"),
    ("/memory summary edit S² new text", "is not a summary entry number"),
])
async def test_numbers_are_ascii_digits_within_range_else_the_usage_text(ann, line, expected):
    await added_id(ann, "a memory that must not be touched")
    result = await ann.memory(line)
    assert not result.ok and expected in result.text
    assert "a memory that must not be touched" in (await ann.memory("/memory view")).text


async def test_typed_ids_out_of_range_get_the_usage_text(ann):
    result = await ann.run("delete", id=2**63)  # Discord sends integers up to 2^53 and beyond
    assert not result.ok and "is not a memory number" in result.text


@pytest.mark.parametrize("forge", [
    "{p}:view:../../:1", "{p}:view:all:99999999999999999999999", "{p}:view:all", "{p}:view:all:1:2",
    "{p}:del:²:all:1", "{p}:pin:1:nowhere:1", "{p}:clear1:everything", "{p}:gkeep:1:some",
    "{p}:link:../../", "{p}:sedit:S1", "99999999999999999999:view:all:1", "²:view:all:1", ":", "",
])
async def test_a_forged_button_is_answered_this_button_no_longer_works(ann, forge):
    await added_id(ann, "still here")
    result = await ann.press(forge.format(p=await ann.person_id()))
    assert result.refused and result.text == "This button no longer works."
    assert "still here" in (await ann.memory("/memory view")).text


async def test_a_page_past_the_last_says_so(ann):
    for i in range(12):
        await added_id(ann, f"fact {i}")
    result = await ann.memory("/memory view 3")
    assert result.text.startswith("There is no page 3: your memories fill 2 pages. This is the last.")
    assert "page 2 of 2" in result.text


async def test_export_writes_times_as_iso_8601_with_their_offset(ann):
    await added_id(ann, "I live in Bergen")
    data = json.loads((await ann.memory("/memory export")).attachment.data)
    assert data["memories"][0]["created_at"] == "2027-01-15T08:00:00+00:00"  # the test clock's now
    assert data["exported_at"].endswith("+00:00")


def test_every_command_of_the_table_has_a_handler_taking_exactly_its_options(runtime):
    """The table declares each command once; the router runs it by name with its options (a
    `character` option is the router's: it picks the character acted on, as in /scene invite Aki)."""
    import inspect

    from bot.commands.table import CHARACTER, leaves

    handlers = runtime.commands.commands
    answered_by_adapters = {"start", "remember", "image"}  # a greeting; a message picked; a message drawn
    for name, spec in leaves().items():
        if name in answered_by_adapters:
            continue
        parameters = list(inspect.signature(handlers[name]).parameters)[2:]  # after ctx, person
        assert parameters == [option.name for option in spec.options if option.name != CHARACTER.name], name


@pytest.mark.parametrize("line, options", [
    ("/memory add scope:global pin:yes I like tea: green", {"scope": "global", "pin": "yes", "text": "I like tea: green"}),
    ("/memory add I live in  Bergen", {"text": "I live in  Bergen"}),
    ("/memory add I like tea scope:global pin:yes", {"scope": "global", "pin": "yes", "text": "I like tea"}),
    ("/memory add the ratio is 3:2", {"text": "the ratio is 3:2"}),
    ("/memory edit 12 now in Oslo pin:yes", {"id": "12", "text": "now in Oslo pin:yes"}),  # edit has no pin
    ("/memory view Global 2", {"scope": "global", "page": "2"}),
    ("/memory view 3", {"page": "3"}),
    ("/memory view page:4", {"page": "4"}),
    ("/memory edit 12 now in Oslo", {"id": "12", "text": "now in Oslo"}),
    ("/memory summary edit S3 She moved to Oslo", {"edit": "S3", "text": "She moved to Oslo"}),
    ("/memory save 5", {"n": "5"}),
    ("/memory save abc", {"n": "abc"}),  # one word: its option says what is wrong with it
    ("/link ABCD-2345", {"code": "ABCD-2345"}),
])
def test_typed_text_is_parsed_by_the_command_table(line, options):
    from bot.commands.table import TABLE, parse_text

    words = line.lstrip("/").split(" ")
    spec = next(s for s in TABLE if s.name == words[0])
    if spec.subcommands:
        spec = next(s for s in spec.subcommands if s.name == words[1])
        words = words[1:]
    assert parse_text(spec, line, " ".join(words[1:])) == options


async def test_options_written_after_a_memorys_text_as_help_shows_them_are_options(ann):
    added = await ann.memory("/memory add I am vegetarian scope:global pin:yes")
    assert added.text.endswith("(pinned) for every character: I am vegetarian")
    refused = await ann.memory("/memory add I like tea scope:nowhere")
    assert not refused.ok and "nowhere" in refused.text and "character or global" in refused.text


async def test_words_no_option_takes_are_named_with_the_commands_form(ann):
    view = await ann.memory("/memory view 0")
    assert view.text == ("/memory view takes a scope (character or global), a page number and an id number, "
                         "not “0”.")
    edit = await ann.memory("/memory summary edit")
    assert not edit.ok and edit.text.startswith("Which entry?")


async def test_a_bad_memory_number_names_no_memory_the_person_does_not_have(ann):
    for line in ("/memory edit abc hello", "/memory delete", "/memory pin ²"):
        answer = await ann.memory(line)
        assert not answer.ok and "#12" not in answer.text and "/memory view" in answer.text


def test_help_calls_each_value_by_what_it_is():
    """#36: `/memory summary [edit <edit>] [text]` said nothing; each value is named in words."""
    from bot.commands.table import help_text

    assert "/memory summary [edit <entry>] [new text] — " in help_text("console")
    assert "<edit>" not in help_text("console")
