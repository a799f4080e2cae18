"""SPEC section 2 — characters from a persona or a Character Card V2 (.json or .png)."""

import base64
import json
import struct
import zlib
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.characters.cards import PNG_SIGNATURE, Character, load_character
from bot.config import CharacterConfig, ConfigError, parse_config
from bot.memory.tools import GUIDANCE
from bot.runtime import build_runtime
from bot.turn.prompt import MESSAGE_OVERHEAD_TOKENS, system_prompt
from tests.conftest import Chat, config_dict
from tests.fakes.llm_server import text
from tests.probes import peak_rss_rise_mb


def chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk: length, kind, body, CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_with_card(card: dict, keyword: str = "chara") -> bytes:
    """A minimal 1×1 PNG carrying `card` in a tEXt chunk (as card sites export them)."""

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\xff\xff")
    text = keyword.encode("latin-1") + b"\x00" + base64.b64encode(json.dumps(card).encode())
    return (
        PNG_SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"tEXt", text)
        + chunk(b"IDAT", pixels)
        + chunk(b"IEND", b"")
    )


CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Nox", "description": "{{char}} is the ship's AI, talking to {{user}}.",
        "personality": "sarcastic", "scenario": "a derelict ship", "first_mes": "Hello, {{user}}.",
        "mes_example": "", "system_prompt": "Custom rules. {{original}} End of rules.",
        "post_history_instructions": "Stay terse.", "creator_notes": "SECRET CREATOR NOTE",
    },
}


def test_a_json_card_gives_the_fields_with_char_and_user_replaced(tmp_path):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps(CARD))
    character = load_character(CharacterConfig(name="Nox", card=path))
    prompt = system_prompt(character, "Ann", GUIDANCE)
    assert "Nox is the ship's AI, talking to Ann." in prompt
    assert prompt.startswith("Custom rules. You are Nox.")  # {{original}} is our own prompt
    assert "End of rules." in prompt
    assert character.greeting("Ann") == "Hello, Ann."
    assert character.post_history_instructions == "Stay terse."


def nox(tmp_path, **fields) -> Character:
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v3", "data": {"name": "Nox", "nickname": "the AI", **fields}}))
    return load_character(CharacterConfig(name="Nox", card=path))


def test_a_card_authors_notes_in_braces_never_reach_the_prompt(tmp_path):
    character = nox(tmp_path, description="{{// rewrite this part }}The ship's AI.{{comment: v2}}{{noop}}"
                                          "{{hidden_key: reactor}}")
    assert "The ship's AI.\n" in system_prompt(character, "Ann") + "\n"
    assert "rewrite" not in system_prompt(character, "Ann") and "reactor" not in system_prompt(character, "Ann")


def test_random_is_one_of_its_choices_each_time_and_pick_the_same_one_for_the_same_text(tmp_path):
    character = nox(tmp_path)
    randoms = {character.fill("{{random:red,blue,green\\, dark}} light", "Ann") for _ in range(200)}
    assert randoms == {"red light", "blue light", "green, dark light"}
    assert {character.fill("{{random::a, b::c}}", "Ann") for _ in range(200)} == {"a, b", "c"}  # SillyTavern's
    picks = {character.fill("{{pick:{{char}},{{user}},the keeper}} speaks", "Ann") for _ in range(50)}
    assert len(picks) == 1 and picks <= {"the AI speaks", "Ann speaks", "the keeper speaks"}


def test_roll_throws_its_dice_and_reverse_and_newline_do_what_they_say(tmp_path):
    character = nox(tmp_path)
    assert {character.fill("{{roll:6}}", "Ann") for _ in range(300)} == {str(n) for n in range(1, 7)}
    assert {character.fill("{{roll:d2}}", "Ann") for _ in range(100)} == {"1", "2"}
    assert {int(character.fill("{{roll:2d6}}", "Ann")) for _ in range(300)} <= set(range(2, 13))
    assert character.fill("{{reverse:{{user}}}}{{newline}}{{original}}", "Ann") == "nnA\n{{original}}"


def test_an_older_cards_user_and_bot_in_angle_brackets_are_the_names(tmp_path):
    character = nox(tmp_path)
    assert character.fill("<BOT> greets <User>; <char> waits for <USER>.", "Ann") == \
        "the AI greets Ann; the AI waits for Ann."


def test_roll_adds_what_follows_the_dice_and_trim_takes_the_line_breaks_around_it(tmp_path):
    character = nox(tmp_path)
    assert character.fill("{{roll:1d1+5}} {{roll:2d1 - 3}}", "Ann") == "6 -1"
    assert {int(character.fill("{{roll:1d20+5}}", "Ann")) for _ in range(500)} == set(range(6, 26))
    assert character.fill("The deck.\n\n{{trim}}\nAll quiet.", "Ann") == "The deck.All quiet."


def test_a_cards_time_words_are_the_time_where_the_person_is_as_sillytavern_writes_them(tmp_path):
    character = nox(tmp_path)
    evening = datetime(2027, 1, 15, 17, 5, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert character.fill("{{weekday}}, {{date}}, {{time}} ({{isodate}} {{isotime}})", "Ann", evening) == \
        "Friday, January 15, 2027, 5:05 PM (2027-01-15 17:05)"
    assert character.fill("{{time}}", "Ann", evening.replace(hour=0)) == "12:05 AM"


async def test_a_cards_time_words_reach_the_prompt_in_the_persons_zone_and_the_greeting(llm, tmp_path, clock):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v3", "data": {
        "name": "Nox", "description": "It is {{weekday}}, {{time}} on the ship.", "first_mes": "Today is {{isodate}}."}}))
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0] = {"name": "Mira", "card": str(path)}
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)  # 2027-01-15 08:00 UTC
    try:
        ann = Chat(runtime)
        greeting = await runtime.core.conversation.greet(ann.key, "Ann", asker=ann.identity)
        assert greeting.text == "Today is 2027-01-15."  # [limits] timezone: UTC
        await ann.run("timezone", zone="Asia/Tokyo")
        await ann.say("Status?")
        assert "It is Friday, 5:00 PM on the ship." in llm.requests[-1]["messages"][0]["content"]
        await ann.run("timezone", zone="Pacific/Honolulu")  # 22:00 the evening before
        assert (await runtime.core.conversation.greet(ann.key, "Ann", asker=ann.identity)).text == \
            "Today is 2027-01-14."
    finally:
        await runtime.close()


async def test_a_cards_random_choice_reaches_the_prompt_and_its_greeting(llm, tmp_path, clock):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v3", "data": {
        "name": "Nox", "description": "{{// author: keep it short }}The ship's AI, in a {{pick:calm,grim}} mood.",
        "first_mes": "{{random:Hello,Hi}}, {{user}}."}}))
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0] = {"name": "Mira", "card": str(path)}
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        ann = Chat(runtime)
        await ann.say("Status?")
        system = llm.requests[-1]["messages"][0]["content"]
        assert "author" not in system and "{{" not in system
        assert "The ship's AI, in a calm mood." in system or "The ship's AI, in a grim mood." in system
        assert runtime.cast.character("Mira").character.greeting("Ann") in ("Hello, Ann.", "Hi, Ann.")
    finally:
        await runtime.close()


def test_each_example_chat_opens_with_a_line_of_its_own_never_with_the_start_marker(tmp_path):
    """SillyTavern sends a card's <START> markers to a chat model as "[Example Chat]" lines."""
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v2", "data": {
        "name": "Nox", "mes_example": "<START>\n{{user}}: Status?\n{{char}}: Reactor stable.\n"
                                      "<start>\n{{user}}: Lights?\n{{char}}: Dimmed, as you like them."}}))
    prompt = system_prompt(load_character(CharacterConfig(name="Nox", card=path)), "Ann", GUIDANCE)
    assert "<START>" not in prompt.upper()
    assert ("Example dialogue:\n[Example Chat]\nAnn: Status?\nNox: Reactor stable.\n\n"
            "[Example Chat]\nAnn: Lights?\nNox: Dimmed, as you like them.") in prompt


def test_creator_notes_never_reach_a_prompt(tmp_path):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps(CARD))
    character = load_character(CharacterConfig(name="Nox", card=path))
    assert "SECRET CREATOR NOTE" not in system_prompt(character, "Ann", GUIDANCE)
    assert "SECRET CREATOR NOTE" not in repr(character)


def test_a_png_card_reads_its_chara_chunk(tmp_path):
    path = tmp_path / "nox.png"
    path.write_bytes(png_with_card(CARD, "chara"))
    assert load_character(CharacterConfig(name="Nox", card=path)).personality == "sarcastic"


def test_a_png_card_prefers_its_ccv3_chunk(tmp_path):
    v3 = json.loads(json.dumps(CARD))
    v3["spec"] = "chara_card_v3"
    v3["data"]["personality"] = "from ccv3"
    png = png_with_card(CARD, "chara")
    v3_png = png_with_card(v3, "ccv3")
    # One file with both chunks: the chara chunk first, then the ccv3 chunk.
    iend = png.rindex(b"IEND") - 4
    ccv3_chunk = v3_png[v3_png.index(b"tEXtccv3") - 4: v3_png.index(b"IDAT") - 4]
    path = tmp_path / "both.png"
    path.write_bytes(png[:iend] + ccv3_chunk + png[iend:])
    assert load_character(CharacterConfig(name="Nox", card=path)).personality == "from ccv3"


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (json.dumps({"spec": "chara_card_v2", "data": {"description": 5}}).encode(), "'description' should be text"),
])
def test_a_malformed_card_is_a_clear_start_up_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_character(CharacterConfig(name="Bad", card=path))


def test_a_png_without_a_card_chunk_is_a_clear_error(tmp_path):
    path = tmp_path / "plain.png"
    png = png_with_card(CARD)
    start = png.index(b"tEXt") - 4
    end = png.index(b"IDAT") - 4
    path.write_bytes(png[:start] + png[end:])
    with pytest.raises(ConfigError, match="no 'chara' or 'ccv3' text chunk"):
        load_character(CharacterConfig(name="Nox", card=path))


def test_a_persona_is_a_character_too():
    character = load_character(CharacterConfig(name="Mira", persona="You are Mira."))
    assert "You are Mira." in system_prompt(character, "Ann")


def png_with_itxt(card: dict, compressed: bool) -> bytes:
    """A PNG carrying the card in an iTXt chunk (some editors write those), zlib-compressed or not."""
    payload = base64.b64encode(json.dumps(card).encode())
    body = b"chara\x00" + (b"\x01\x00" if compressed else b"\x00\x00") + b"\x00\x00" + (
        zlib.compress(payload) if compressed else payload)
    plain = png_with_card({"name": "decoy"}, keyword="comment")
    crc = zlib.crc32(b"iTXt" + body) & 0xFFFFFFFF
    itxt = struct.pack(">I", len(body)) + b"iTXt" + body + struct.pack(">I", crc)
    iend = plain.rindex(b"IEND") - 4
    return plain[:iend] + itxt + plain[iend:]


@pytest.mark.parametrize("compressed", [False, True])
def test_a_png_card_in_an_itxt_chunk_loads(tmp_path, compressed):
    path = tmp_path / "nox.png"
    path.write_bytes(png_with_itxt(CARD, compressed))
    assert load_character(CharacterConfig(name="Nox", card=path)).greeting("Ann") == "Hello, Ann."


def test_a_json_card_with_a_utf8_byte_order_mark_loads(tmp_path):
    path = tmp_path / "nox.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(CARD).encode())
    assert load_character(CharacterConfig(name="Nox", card=path)).greeting("Ann") == "Hello, Ann."


def test_a_card_whose_spec_is_null_is_read_as_a_v1_card(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"spec": None, "name": "Old", "first_mes": "Hi {{user}}."}))
    assert load_character(CharacterConfig(name="Old", card=path)).greeting("Ann") == "Hi Ann."


def test_a_ccv3_charx_card_loads_and_a_broken_one_is_one_clear_line(tmp_path):
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("card.json", json.dumps({**CARD, "spec": "chara_card_v3", "spec_version": "3.0"}))
        archive.writestr("assets/icon/main.png", png_with_card({"name": "icon"}))
    path = tmp_path / "nox.charx"
    path.write_bytes(buffer.getvalue())
    assert load_character(CharacterConfig(name="Nox", card=path)).greeting("Ann") == "Hello, Ann."
    broken = tmp_path / "broken.charx"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ConfigError, match=r"broken.charx: not a readable .charx \(zip\) file"):
        load_character(CharacterConfig(name="Nox", card=broken))


def test_a_v3_nickname_is_what_char_becomes(tmp_path):
    path = tmp_path / "nox.json"
    card = {"spec": "chara_card_v3", "spec_version": "3.0",
            "data": {**CARD["data"], "nickname": "Nox-7", "first_mes": "{{char}} here. Hello, {{user}}."}}
    path.write_text(json.dumps(card))
    character = load_character(CharacterConfig(name="Nox", card=path))
    assert character.greeting("Ann") == "Nox-7 here. Hello, Ann."
    assert "Nox-7 is the ship's AI, talking to Ann." in system_prompt(character, "Ann", GUIDANCE)


def test_alternate_greetings_are_offered_after_first_mes(tmp_path):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({**CARD, "data": {**CARD["data"], "alternate_greetings": [
        "Oh. It's {{user}} again.", "  ", "Welcome aboard, {{user}}. I am {{char}}."]}}))
    character = load_character(CharacterConfig(name="Nox", card=path))
    assert character.greetings == 3  # first_mes and the two alternate greetings with text
    assert [character.greeting("Ann", n) for n in (1, 2, 3)] == [
        "Hello, Ann.", "Oh. It's Ann again.", "Welcome aboard, Ann. I am Nox."]


def test_alternate_greetings_that_are_not_a_list_of_texts_are_a_clear_start_up_error(tmp_path):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({**CARD, "data": {**CARD["data"], "alternate_greetings": "hi"}}))
    with pytest.raises(ConfigError, match="field 'alternate_greetings' should be a list of texts"):
        load_character(CharacterConfig(name="Nox", card=path))


def test_a_png_card_in_a_ztxt_chunk_written_by_pillow_loads_with_its_lorebook(tmp_path):
    """Pillow's `add_text(..., zip=True)` writes a zTXt chunk, as some card editors do."""
    from PIL import Image, PngImagePlugin

    card = {"spec": "chara_card_v2", "data": {**CARD["data"], "character_book": {
        "entries": [{"keys": ["reactor"], "content": "The reactor is failing.", "enabled": True,
                     "insertion_order": 1}]}}}
    info = PngImagePlugin.PngInfo()
    info.add_text("chara", base64.b64encode(json.dumps(card).encode()).decode(), zip=True)
    path = tmp_path / "nox.png"
    Image.new("RGB", (4, 4)).save(path, pnginfo=info)
    assert b"zTXt" in path.read_bytes()
    character = load_character(CharacterConfig(name="Nox", card=path))
    assert character.greeting("Ann") == "Hello, Ann."
    assert [e.content for e in character.lorebook.entries] == ["The reactor is failing."]


def _peak_rss_mb_loading(path) -> tuple[float, str]:
    """Load the card in a fresh process: how far its own peak RSS rose, in MB, and its error line."""
    return peak_rss_rise_mb(
        "import sys\n"
        "from pathlib import Path\n"
        "from bot.config import CharacterConfig, ConfigError\n"
        "from bot.characters.cards import load_character\n"
        "try:\n"
        "    load_character(CharacterConfig(name='Bomb', card=Path(sys.argv[1])))\n"
        "except ConfigError as problem:\n"
        "    print(problem, file=sys.stderr)\n", str(path), timeout=60)


def test_a_charx_whose_card_unpacks_past_16_mb_is_refused_without_unpacking_it(tmp_path):
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("card.json", b'{"name": "' + b"a" * (400 * 1024 * 1024) + b'"}')
    path = tmp_path / "bomb.charx"
    path.write_bytes(buffer.getvalue())
    assert path.stat().st_size < 1024 * 1024  # under a megabyte on disk, 400 MB unpacked
    risen, said = _peak_rss_mb_loading(path)
    assert "bomb.charx: its card data unpacks to more than 16 MB" in said
    assert risen < 100


def test_a_png_whose_ztxt_card_unpacks_past_16_mb_is_refused_without_unpacking_it(tmp_path):
    bomb = zlib.compress(b"A" * (400 * 1024 * 1024), 9)
    png = (PNG_SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
           + chunk(b"zTXt", b"chara\x00\x00" + bomb)
           + chunk(b"IDAT", zlib.compress(b"\x00\xff\xff\xff")) + chunk(b"IEND", b""))
    path = tmp_path / "bomb.png"
    path.write_bytes(png)
    risen, said = _peak_rss_mb_loading(path)
    assert "bomb.png: its card data unpacks to more than 16 MB" in said
    assert risen < 100


def test_other_compressed_text_chunks_of_a_png_card_are_never_unpacked(tmp_path):
    """A comment chunk that would unpack to 400 MB is skipped: only `ccv3` and `chara` are read."""
    card = png_with_card(CARD)
    iend = card.index(b"IEND") - 4
    path = tmp_path / "nox.png"
    path.write_bytes(card[:iend] + chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(b"B" * (400 * 1024 * 1024), 9))
                     + card[iend:])
    risen, said = _peak_rss_mb_loading(path)
    assert said == "" and risen < 100


def card_with_note(tmp_path, note: object) -> Path:
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v2", "data": {
        "name": "Nox", "description": "The ship's AI.", "post_history_instructions": "Stay terse.",
        "extensions": {"depth_prompt": note}}}))
    return path


@pytest.mark.parametrize("note, read", [
    ({"prompt": "{{char}} never lies to {{user}}.", "depth": 2, "role": "system"},
     ("{{char}} never lies to {{user}}.", 2, "system")),
    ({"prompt": "Keep it short.", "role": "user"}, ("Keep it short.", 4, "user")),  # SillyTavern's default depth
    ({"prompt": "Keep it short.", "depth": "deep", "role": "Assistant"}, ("Keep it short.", 4, "assistant")),
    ({"prompt": "Keep it short.", "role": "narrator"}, ("Keep it short.", 4, "system")),  # no such role: system
    ({"prompt": "", "depth": 2}, ("", 4, "system")),  # SillyTavern's empty note: none
    ("Keep it short.", ("", 4, "system")),  # not shaped like one: none, and the card still loads
])
def test_a_cards_depth_prompt_is_read_as_sillytaverns_characters_note(tmp_path, note, read):
    character = load_character(CharacterConfig(name="Nox", card=card_with_note(tmp_path, note)))
    assert (character.depth_prompt, character.depth_prompt_depth, character.depth_prompt_role) == read


def test_original_in_a_cards_notes_among_the_messages_stands_for_nothing(tmp_path):
    """A card's {{original}} there stands for the app's own notes (SillyTavern's global ones): Keepsake has none."""
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v3", "data": {
        "name": "Nox", "post_history_instructions": "{{original}}",
        "extensions": {"depth_prompt": {"prompt": "{{original}}\nNote: androids stay human in looks.", "depth": 2}}}}))
    character = load_character(CharacterConfig(name="Nox", card=path))
    assert character.post_history_instructions == ""
    assert (character.depth_prompt, character.depth_prompt_depth) == ("Note: androids stay human in looks.", 2)


@pytest.fixture
async def card_runtime(llm, tmp_path, clock):
    """A runtime whose one character, Mira, is a card with this depth prompt."""
    async def started(note: dict, context_window: int = 128_000):
        raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
        raw["characters"][0] = {"name": "Mira", "card": str(card_with_note(tmp_path, note))}
        raw["llm"]["context_window"] = context_window
        runtimes.append(await build_runtime(parse_config(raw, tmp_path), clock=clock))
        return runtimes[-1]

    runtimes = []
    yield started
    for runtime in runtimes:
        await runtime.close()


@pytest.mark.parametrize("depth, before", [
    (2, "second"),  # before the two newest messages: the reply "second" and the message answered
    (0, None),  # after them all, the message answered included
    (99, "hello"),  # never above the window: before its oldest message
])
async def test_the_depth_prompt_goes_in_before_the_newest_messages_of_the_window(card_runtime, llm, depth, before):
    ann = Chat(await card_runtime({"prompt": "{{char}} never lies to {{user}}.", "depth": depth}))
    llm.add(text("first"), text("second"), text("third"))
    for said in ("hello", "how are you", "and the engines?"):
        await ann.say(said)
    messages = llm.requests[-1]["messages"]
    note = next(i for i, m in enumerate(messages) if m["content"] == "Mira never lies to Ann.")
    assert messages[note]["role"] == "system"
    following = [m["content"] for m in messages[note + 1:] if m["role"] != "system"]
    assert following[:1] == ([before] if before else [])
    assert messages[-1]["content"] == "Stay terse."  # post_history_instructions stay last


async def test_the_depth_prompt_is_given_as_whose_words_its_role_says(card_runtime, llm):
    ann = Chat(await card_runtime({"prompt": "*Nox hums quietly.*", "depth": 1, "role": "assistant"}))
    llm.add(text("first"))
    for said in ("hello", "and the engines?"):
        await ann.say(said)
    messages = llm.requests[-1]["messages"]
    note = next(i for i, m in enumerate(messages) if m["content"] == "*Nox hums quietly.*")
    assert messages[note]["role"] == "assistant"
    assert [m["content"] for m in messages[note + 1:] if m["role"] != "system"] == ["and the engines?"]


async def test_the_cards_notes_in_the_history_are_counted_so_the_reply_still_has_its_room(card_runtime, llm):
    """The depth prompt and post_history_instructions go in every prompt: the fit counts them as
    it counts the system prompt, so what is sent leaves the reply its room in the 4,096 tokens."""
    runtime = await card_runtime({"prompt": "Keep it short, and never speak of the reactor. " * 250, "depth": 1},
                        context_window=4_096)
    ann = Chat(runtime)
    llm.default = "Noted. " * 60
    for n in range(30):
        await ann.say(f"message {n}: " + "the engines hum along the lower decks tonight " * 6)
    sent = llm.requests[-1]["messages"]
    room = 4_096 - runtime.turns.llm.max_reply_tokens
    assert sum(runtime.counter.count(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in sent) <= room
