"""SPEC 22, who knows what: in a scene each character knows only what it witnessed — one rule a
test, on SQLite and PostgreSQL, through the core with the voices of tests/test_scenes.py (the
real platforms: tests/test_witnesses_end_to_end.py). The summarizing model is the extractive
stand-in (tests/fakes/summarizer.py): a summary keeps every line marked `!` it was given, so a
secret reaches a summary exactly when it was fed to it."""

from __future__ import annotations

import asyncio
import json

from bot.commands.scene import ALREADY, CAME, LEFT, NOT_A_SCENE
from bot.contract import ConversationKey, IncomingMessage
from bot.memory.summaries import BATCH_MAX_MESSAGES, MERGED_PER_FOLD, RECENT_PER_MERGED
from tests.conftest import Chat
from tests.fakes.llm_server import text
from tests.fakes.summarizer import extractive, kind_of
from tests import test_scenes
from tests.test_scenes import GROUP, Person, prompt_lines

scene = test_scenes.scene  # the fixture: Mira and Aki voiced on Telegram, on SQLite and PostgreSQL

SECRET = "Mira, the spare key is under the heron stone!"


def chat_requests(llm) -> list[dict]:
    return [r for r in llm.requests if kind_of(r) == "chat"]


def holds_secret(request: dict) -> bool:
    return "heron" in json.dumps(request)


async def scene_of(runtime) -> int:
    return (await runtime.store.conversations.conversation("telegram", GROUP, None,
                                                           runtime.cast.character("Mira").id, True)).id


async def more_messages(runtime, count: int, *others, first: int = 0) -> None:
    """`count` messages of Ann's (numbered from `first`), with both characters present, stored as a platform delivers them;
    then the summaries catch up, as after a delivered reply. A summary job of another process
    sharing the database (`others`) may hold the claim and end before the newest batch, which then
    waits for the next reply: that job ends first, then this process's summarizes what is left."""
    store, scene_id = runtime.store, await scene_of(runtime)
    ann = await store.people.person_for_identity("telegram", "501")
    for n in range(first, first + count):
        await store.conversations.add_user_message(scene_id, ann, "Ann", f"harbour log {n}: the tide turned", 6,
                                                   f"log-{n}")
    for other in others:
        await other.summarizer.idle()
    runtime.summarizer.schedule(scene_id)
    await runtime.summarizer.idle()


async def test_a_secret_told_while_aki_was_away_never_reaches_akis_prompt_while_miras_holds_it(scene, llm):
    """The SPEC 22 story, in two processes sharing the database: Ann tells Mira a secret while Aki
    is away; Aki is invited; asked about it, Aki's prompt — window, summary, recall — holds
    nothing of it while Mira's does; after more messages than every summary tier needs (each
    rolled: recent, merged and long-term), the same holds."""
    first, second = await scene(processes=2)
    llm.responder = extractive
    ann, ann_there = Person(first, "501", "Ann"), Person(second, "501", "Ann")
    await ann.says("good evening Mira and Aki!")  # both named: both present
    assert (await ann_there.memory("/scene dismiss Aki")).text == LEFT.format(name="Aki")  # in the other process
    await ann.says(SECRET)
    assert (await ann_there.memory("/scene invite Aki")).text == CAME.format(name="Aki")
    await ann_there.says("Aki, where is the spare key?", to="Aki")
    assert not holds_secret(chat_requests(llm)[-1])
    await ann.says("Mira, where is the spare key?")
    assert holds_secret(chat_requests(llm)[-1])

    # every tier rolls: a long-term entry needs 4 merged of 4 recent batches of 40 messages each
    await more_messages(first, BATCH_MAX_MESSAGES * RECENT_PER_MERGED * MERGED_PER_FOLD + 60, second)
    scene_id, aki = await scene_of(first), first.cast.character("Aki").id
    own = await first.store.summaries.summaries(scene_id, seen_by=aki)
    shared = await first.store.summaries.summaries(scene_id)
    assert {e.tier for e in own} >= {"long_term", "recent"} and {e.tier for e in shared} >= {"long_term", "recent"}
    assert not any("heron" in e.content for e in own)
    assert any("heron" in e.content for e in shared)  # Mira's (she witnessed every message)

    await ann_there.says("Aki, the spare key, where was it?", to="Aki")
    asked_aki = chat_requests(llm)[-1]
    assert not holds_secret(asked_aki)
    assert "harbour log" in json.dumps(asked_aki)  # its window and summary are there, of what it witnessed
    await ann.says("Mira, the spare key, where was it?")
    assert holds_secret(chat_requests(llm)[-1])


async def test_a_character_brought_in_later_did_not_witness_what_came_before(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    await ann.says("Mira, I lost my red scarf")
    await ann.says("do you know about my scarf?", to="Aki")  # addressed: Aki comes in with this message
    assert prompt_lines(llm) == [("user", "Ann: do you know about my scarf?")]


async def test_a_character_named_in_a_reply_witnesses_that_reply(scene, llm):
    runtime = await scene(max_chain=0)  # no chain: Aki answers only when Ann asks it
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki would know, ask Aki."))
    await ann.says("who knows the tides?")
    await ann.says("so, Aki?", to="Aki")
    assert prompt_lines(llm) == [("user", "Mira: Aki would know, ask Aki."), ("user", "Ann: so, Aki?")]


async def test_a_narrator_witnesses_everything_said_in_the_scene(scene, llm):
    runtime = await scene(aki={"omniscient": True})
    ann = Person(runtime, "501", "Ann")
    await ann.says("Mira, I lost my red scarf")
    await ann.says("narrator, what happened?", to="Aki")
    assert ("user", "Ann: Mira, I lost my red scarf") in prompt_lines(llm)
    listed = (await ann.memory("/scene")).text
    assert "Witnessing everything (narrators): Aki." in listed


async def test_characters_that_witnessed_every_message_share_one_summary(scene, llm):
    runtime = await scene()
    llm.responder = extractive
    ann = Person(runtime, "501", "Ann")
    await ann.says("good evening Mira and Aki!")
    await more_messages(runtime, 70)
    scene_id = await scene_of(runtime)
    assert [seen_by for seen_by, _ in await runtime.store.summaries.summary_states(scene_id)] == [None]
    batches = [r for r in llm.requests if kind_of(r) == "batch"]
    assert len(batches) == 1  # the scene's one summary, as before witnesses: no second copy for Aki


async def test_a_characters_own_summary_waits_for_10_of_its_witnessed_messages_behind_its_own_window(scene, llm):
    """A batch is due when 10 messages lie behind the live window of 50 (SPEC 4); for a character's
    own summary, 10 it witnessed behind its own window: what it missed never counts toward one."""
    runtime = await scene()
    llm.responder = extractive
    ann = Person(runtime, "501", "Ann")
    await ann.says("good evening Mira and Aki!")  # both present: the greeting and Mira's reply
    assert (await ann.memory("/scene dismiss Aki")).text == LEFT.format(name="Aki")
    await more_messages(runtime, 20)  # said while Aki was away
    assert (await ann.memory("/scene invite Aki")).text == CAME.format(name="Aki")
    await more_messages(runtime, 49, first=20)  # with the greeting's two: 51 witnessed, 1 behind Aki's window
    scene_id, aki = await scene_of(runtime), runtime.cast.character("Aki").id
    assert [seen_by for seen_by, _ in await runtime.store.summaries.summary_states(scene_id)] == [None, aki]
    assert await runtime.store.summaries.summaries(scene_id) != []  # 21 behind the scene's window: due
    assert await runtime.store.summaries.summaries(scene_id, seen_by=aki) == []
    await more_messages(runtime, 9, first=69)  # 10 witnessed behind Aki's window: due now
    assert await runtime.store.summaries.summaries(scene_id, seen_by=aki) != []


async def test_scene_lists_who_is_present_and_invite_and_dismiss_say_what_changed(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    assert (await ann.memory("/scene")).text.startswith("Nobody is in this scene yet")
    await ann.says("hello Mira")
    assert (await ann.memory("/scene")).text.startswith("In this scene: Mira.")
    assert (await ann.memory("/scene invite Aki")).text == CAME.format(name="Aki")
    assert (await ann.memory("/scene invite aki")).text == ALREADY.format(name="Aki")
    assert (await ann.memory("/scene")).text.startswith("In this scene: Mira, Aki.")
    assert (await ann.memory("/scene dismiss Aki")).text == LEFT.format(name="Aki")
    gone = await ann.memory("/scene dismiss Aki")
    assert not gone.ok and gone.text == "Aki is not in the scene."
    which = await ann.memory("/scene invite")
    assert not which.ok and which.text.startswith("Which character? /scene invite <character>")
    nobody = await ann.memory("/scene invite Zed")
    assert not nobody.ok and nobody.text.startswith("There is no character called “Zed”")


async def test_scene_in_a_one_to_one_chat_says_there_is_no_scene(scene, llm):
    runtime = await scene()
    alone = Chat(runtime, user="501", chat_id="501", platform="telegram")
    answer = await alone.memory("/scene invite Aki")
    assert not answer.ok and answer.text == NOT_A_SCENE.format(name="Aki")


async def test_inviting_a_character_asks_that_characters_access(scene, llm):
    runtime = await scene(aki={"access": {"deny": ["telegram:501"]}})
    ann = Person(runtime, "501", "Ann")
    refused = await ann.memory("/scene invite Aki")
    assert not refused.ok
    assert runtime.cast.character("Aki").id not in await runtime.store.presence.present(await scene_of(runtime))


async def test_memory_why_shows_which_messages_the_character_witnessed(scene, llm):
    runtime = await scene()
    ann = Person(runtime, "501", "Ann")
    await ann.says("Mira, I lost my red scarf")
    await ann.says("hello Aki", to="Aki")
    why = (await ann.memory("/memory why character:Aki")).text
    assert "• Witnessed: 2 of this scene's 4 messages — Aki reads only those" in why
    why = (await ann.memory("/memory why character:Mira")).text
    assert "• Witnessed: all 4 messages of this scene." in why


async def test_memory_summary_shows_the_characters_own_summary_of_what_it_witnessed(scene, llm):
    runtime = await scene()
    llm.responder = extractive
    ann = Person(runtime, "501", "Ann")
    await ann.says("good evening Mira and Aki!")
    await ann.memory("/scene dismiss Aki")
    await ann.says(SECRET)
    await more_messages(runtime, 70)
    akis = (await ann.memory("/memory summary character:Aki")).text
    assert akis.startswith("Aki's summary of this scene (only what Aki witnessed):") and "heron" not in akis
    assert "heron" in (await ann.memory("/memory summary character:Mira")).text


async def says_streamed(person: Person, text_: str, midway) -> None:
    """`person`'s message to Mira, her reply streamed as a platform shows it (each part in the
    message its first part posted); `midway` runs after that first part showed."""
    key = ConversationKey("telegram", GROUP, None, "Mira", is_shared=True)
    parts = 0

    async def sink(partial: str) -> str:
        nonlocal parts
        parts += 1
        if parts == 2:
            await midway()
        return "Mira-streamed"
    message = IncomingMessage(key, person.identity, person.name, text_, None, asker=person.asker)
    reply = await person.runtime.core.conversation.handle(message, on_text=sink)
    await person.runtime.core.conversation.delivered(reply, ["Mira-streamed"])
    assert parts > 2


STREAMED_SECRET = "I hid the spare key under the heron stone by the slipway, as you asked."


async def test_a_streamed_reply_is_witnessed_by_those_present_when_it_first_showed(scene, llm):
    """SPEC 22 "those present when it was posted": a reply that streams is posted as its first
    part shows, before it is stored. Aki invited while Mira's reply streams did not witness it;
    Aki dismissed while it streams did."""
    runtime = await scene(max_chain=0)
    ann = Person(runtime, "501", "Ann")
    await ann.says("good evening Mira and Aki!")
    await ann.memory("/scene dismiss Aki")
    llm.add(text(STREAMED_SECRET))
    await says_streamed(ann, "Mira, where did you put it?", lambda: ann.memory("/scene invite Aki"))
    await ann.says("Aki, what did Mira say?", to="Aki")
    assert not holds_secret(chat_requests(llm)[-1])

    llm.add(text("The tide turns at nine tonight, the pilots will be out on the water."))
    await says_streamed(ann, "Mira, when does the tide turn?", lambda: ann.memory("/scene dismiss Aki"))
    await ann.memory("/scene invite Aki")
    await ann.says("Aki, when is the tide?", to="Aki")
    assert ("user", "Mira: The tide turns at nine tonight, the pilots will be out on the water."
            ) in prompt_lines(llm)


async def test_a_streamed_reply_is_witnessed_by_the_characters_it_names(scene, llm):
    runtime = await scene(max_chain=0)
    ann = Person(runtime, "501", "Ann")
    llm.add(text("Aki would know the tides better than anyone in this harbour."))
    await says_streamed(ann, "who knows the tides?", lambda: asyncio.sleep(0))
    await ann.says("so, Aki?", to="Aki")
    assert prompt_lines(llm) == [("user", "Mira: Aki would know the tides better than anyone in this harbour."),
                                 ("user", "Ann: so, Aki?")]
