"""SPEC 20, pictures, rule by rule, in process: the real turn and the `openai` client against the
scripted model, and a fake image server on loopback in both shapes (tests/fakes/image_server.py)
answering a real PNG, or 30 MB, a decompression bomb, HTML, a 500 or nothing at all."""

import json
from dataclasses import replace

import pytest

import bot.tools.picture as picture_tool
from bot.config import parse_config
from bot.contract import IncomingMessage, Picture
from bot.runtime import build_runtime
from tests.conftest import Chat, config_dict, shown
from tests.fakes.llm_server import text, tool_calls

APPEARANCE = "a woman in her thirties, oilskin coat, grey braid"
SCENE = "the lighthouse at dusk, its lamp just lit"


@pytest.fixture
async def start(llm, tmp_path, clock, images):
    runtimes = []

    async def start_with(kind: str = "openai", age_restricted: bool = False, **pictures):
        raw = config_dict(llm.base_url, tmp_path / f"keepsake-{len(runtimes)}.sqlite3")
        raw["characters"][0]["nsfw"] = age_restricted
        base = f"{images.base_url}/v1" if kind == "openai" else images.base_url
        raw["pictures"] = {"kind": kind, "base_url": base} | pictures
        raw["limits"] = {"tokens_per_day": 1_000_000}
        raw["characters"][0]["appearance"] = APPEARANCE
        runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
        runtimes.append(runtime)
        return runtime
    yield start_with
    for runtime in runtimes:
        await runtime.close()


async def asked_for_a_picture(runtime, llm, person: Chat | None = None):
    ann = person or Chat(runtime, platform="telegram")
    llm.add(tool_calls(("picture", {"scene": SCENE})), text("Here — the lamp just came on."))
    return ann, await ann.say("send me a photo of the lighthouse at dusk")


async def stored_reply(runtime) -> str:
    return await runtime.store.db.value("SELECT content FROM messages WHERE role = 'assistant' ORDER BY id DESC")


async def test_a_picture_goes_out_with_the_reply_and_the_stored_reply_says_what_was_sent(start, llm, images):
    runtime = await start()
    ann, reply = await asked_for_a_picture(runtime, llm)
    assert reply.text == "Here — the lamp just came on."
    part, = reply.parts
    made = await part.made(False)
    assert isinstance(made, Picture) and made.data == images.png and made.filename == "picture.png"
    assert await stored_reply(runtime) == f"Here — the lamp just came on.\n[sent a picture: {SCENE}]"
    shape, asked = images.requests[-1]
    assert shape == "openai" and asked["prompt"] == f"Mira, {APPEARANCE}. {SCENE}"  # its look, then the scene
    assert asked["response_format"] == "b64_json"
    why = (await ann.memory("/memory why")).text
    assert f'– picture {{"scene": "{SCENE}"}}' in why  # /memory why shows the call
    blob = b"".join(row[0].encode() for row in await runtime.store.db.all("SELECT content FROM messages"))
    assert images.png[40:80] not in blob  # never stored


async def test_an_automatic1111_server_draws_the_same_way(start, llm, images):
    runtime = await start("automatic1111")
    _, reply = await asked_for_a_picture(runtime, llm)
    assert (await reply.parts[0].made(False)).data == images.png
    shape, asked = images.requests[-1]
    assert shape == "automatic1111" and asked["prompt"] == f"Mira, {APPEARANCE}. {SCENE}"


@pytest.mark.parametrize("kind, safe, adult", [("openai", {"moderation": "auto"}, {"moderation": "low"}),
                                               ("automatic1111", {"negative_prompt": "nsfw, gore"},
                                                {"negative_prompt": ""})])
async def test_every_request_carries_the_safe_setting_unless_character_and_place_are_both_age_restricted(
        start, llm, images, kind, safe, adult):
    runtime = await start(kind, safe_negative_prompt="nsfw, gore")
    plain = Chat(runtime, platform="discord", chat_id="channel-1", shared=True)
    await asked_for_a_picture(runtime, llm, plain)
    assert safe.items() <= images.requests[-1][1].items()
    restricted = Chat(runtime, platform="discord", chat_id="channel-2", shared=True)
    restricted.asker = replace(restricted.asker, age_restricted=True)  # as [telegram] allow_nsfw makes every chat
    await asked_for_a_picture(runtime, llm, restricted)
    assert safe.items() <= images.requests[-1][1].items()  # Mira is not age-restricted: safe there too
    adult_runtime = await start(kind, age_restricted=True, safe_negative_prompt="nsfw, gore")
    restricted.runtime = adult_runtime
    await asked_for_a_picture(adult_runtime, llm, restricted)
    assert adult.items() <= images.requests[-1][1].items()


async def test_an_age_restricted_character_never_draws_where_it_may_not_talk(start, llm, images, tmp_path, clock):
    raw = config_dict(llm.base_url, tmp_path / "adult.sqlite3")
    raw["pictures"] = {"base_url": f"{images.base_url}/v1"}
    raw["characters"][0]["nsfw"] = True
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        plain = Chat(runtime, platform="discord", chat_id="channel-1", shared=True)
        _, reply = await asked_for_a_picture(runtime, llm, plain)
        assert reply.is_error and images.requests == [] and llm.requests == []  # it does not talk there
    finally:
        await runtime.close()


@pytest.mark.parametrize("answer, why", [
    ("big", "larger than 10 MB"), ("bomb", "6,400×6,400 pixels, over the limit of 40,000,000"),
    ("html", "no picture"), ("500", "answered 500"), ("hang", "did not answer in time"),
    ("not an image", "what came back was not an image"), ("cut short", "what came back was not an image"),
])
async def test_a_refused_or_failed_picture_is_one_line_and_the_text_stands(
        start, llm, images, monkeypatch, answer, why):
    if answer == "hang":  # only the hanging server waits for the deadline (a 30 MB answer may take seconds)
        monkeypatch.setattr(picture_tool, "TIMEOUT_S", 0.5)
    images.answer = answer
    runtime = await start()
    ann, reply = await asked_for_a_picture(runtime, llm)
    assert reply.text == "Here — the lamp just came on." and reply.parts == []
    assert reply.note.startswith("🖼️ no picture: ") and why in reply.note
    told = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))
    assert told["error"].startswith("no picture: ")
    assert await stored_reply(runtime) == "Here — the lamp just came on."
    # a picture never drawn is given back: it counts neither among the day's pictures nor its tokens
    assert await runtime.store.db.value("SELECT COALESCE(SUM(pictures), 0) FROM usage_days") == 0


async def test_the_21st_picture_of_a_day_is_refused_in_one_line_and_each_counts_its_tokens(start, llm, images):
    runtime = await start(tokens_each=1000)
    ann = Chat(runtime, platform="telegram")
    person, mira = await ann.person_id(), runtime.cast.character("Mira").id
    for _ in range(20):
        assert await runtime.store.usage.take_picture(person, mira, "2027-01-15", 20, 1000)
    before = await runtime.store.usage.spent(person, "2027-01-15", "2027-01-15")
    assert before == 20 * 1000  # each picture's tokens_each, against the allowance (/usage reads it)
    _, reply = await asked_for_a_picture(runtime, llm, ann)
    assert reply.parts == [] and reply.note == "🖼️ no picture: 20 a day is the most"
    assert images.requests == []  # refused before anything was drawn
    spent = before + sum(u["total_tokens"] for u in llm.usages)  # the pictures' tokens and the turn's
    usage = (await ann.run("usage")).text
    assert usage.startswith(f"Your tokens today: {spent:,} of 1,000,000 a day.")
    assert usage.endswith("Pictures today: 20 of 20 a day.")  # used and left, as /usage says them


async def test_every_picture_call_asks_the_gate_so_one_past_the_allowance_is_refused_mid_round(start, llm, images):
    """SPEC 18 "One toolbox, one gate": the gate is asked at each call, not once a turn. The first
    picture spends the day's 1,000,000 tokens (its tokens_each); the second, in the same round, is
    refused for the allowance and never drawn."""
    runtime = await start(tokens_each=1_000_000)
    ann = Chat(runtime, platform="telegram")
    llm.add(tool_calls(("picture", {"scene": SCENE}), ("picture", {"scene": "the keeper's cat asleep"})),
            text("Here they are."))
    await ann.say("two pictures please: the lighthouse, then the cat")
    assert [asked["prompt"] for _, asked in images.requests] == [f"Mira, {APPEARANCE}. {SCENE}"]


async def test_forgetme_does_not_give_a_fresh_picture_allowance_the_same_day(start, llm, images):
    """#69: the day's tokens survive /forgetme (SPEC 17), and so does the day's picture count: the
    same platform id cannot draw `per_day` pictures again the same day."""
    runtime = await start(per_day=2)
    ann = Chat(runtime, platform="telegram")
    for _ in range(2):
        await asked_for_a_picture(runtime, llm, ann)
    assert len(images.requests) == 2
    await runtime.store.people.forget_person(await ann.person_id(), runtime.gate.budgets.today())
    _, reply = await asked_for_a_picture(runtime, llm, Chat(runtime, platform="telegram"))  # Ann again, anew
    assert reply.parts == [] and reply.note == "🖼️ no picture: 2 a day is the most" and len(images.requests) == 2


async def test_a_picture_call_is_let_in_by_the_gate_with_one_of_the_days_pictures_and_a_bad_scene_gives_it_back(
        start, llm, images):
    """#64: `[pictures] per_day` is part of the PICTURE path's verdict: the gate counts the picture
    (and its tokens_each, 1,000 unless set) as it lets the call in; a call that draws nothing
    gives it back."""
    runtime = await start(per_day=1)
    ann = Chat(runtime, platform="telegram")
    llm.add(tool_calls(("picture", {"scene": "  "})), text("What should I draw?"))
    await ann.say("draw something")
    assert await runtime.store.usage.pictures(await ann.person_id(), runtime.gate.budgets.today()) == 0
    _, reply = await asked_for_a_picture(runtime, llm, ann)
    assert len(reply.parts) == 1  # the day's one picture, still there to draw
    day = runtime.gate.budgets.today()
    spent = await runtime.store.usage.spent(await ann.person_id(), day, day)
    assert spent == 1000 + sum(u["total_tokens"] for u in llm.usages)  # the picture's, and the turns'
    _, refused = await asked_for_a_picture(runtime, llm, ann)
    assert refused.parts == [] and refused.note == "🖼️ no picture: 1 a day is the most"
    told = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))
    assert told["error"] == "picture may not be used now: no picture: 1 a day is the most"


async def image_command(runtime, person: Chat, scene: str = SCENE):
    """`/image <scene>` as an adapter hands it over: the message as said, the scene to draw."""
    message = IncomingMessage(person.key, person.identity, person.name, f"/image {scene}", asker=person.asker,
                              draw=scene)
    return await shown(runtime, await runtime.core.conversation.handle(message))


async def test_image_goes_through_the_picture_tools_limits_so_one_past_per_day_is_refused(start, llm, images):
    """#62: `/image` is the same `picture` call, let in by the same gate: past `per_day` it draws
    nothing, the note under the reply says why, and the model is told so before it answers."""
    runtime = await start(per_day=1)
    ann = Chat(runtime, platform="telegram")
    llm.add(text("There it is."), text("No more today, I'm afraid."))
    drawn = await image_command(runtime, ann)
    assert len(drawn.parts) == 1 and len(images.requests) == 1
    refused = await image_command(runtime, ann, "the harbour at noon")
    assert refused.parts == [] and refused.note == "🖼️ no picture: 1 a day is the most" and len(images.requests) == 1
    told = next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool")
    assert "no picture: 1 a day is the most" in told


async def test_image_without_pictures_set_up_says_so_and_calls_no_model(runtime, llm):
    ann = Chat(runtime, platform="telegram")
    reply = await image_command(runtime, ann)
    assert reply.text == "Mira cannot draw here: pictures are not set up on this bot ([pictures] in its config)."
    assert llm.requests == []
