"""The turn: streaming, failures that lose nothing, serialized conversations, regenerate,
privacy in shared conversations, bad input."""

import asyncio
import logging
import os
import sys

from bot.contract import ConversationKey, Identity, IncomingMessage
from bot.runtime import build_runtime
from bot.turn.arrival import EMPTY_MESSAGE, NOT_SAVED
from tests.conftest import ROOT, Chat, eventually, offers_memory_tools, shown
from tests.fakes.llm_server import cut, drop, garbled, hang, status, text, tool_calls


async def stored_texts(chat: Chat) -> list[tuple[str, str]]:
    conversation = await chat.runtime.cast.conversation_for(chat.key)
    rows = await chat.runtime.store.conversations.recent_messages(conversation.id, 1000)
    return [(r.role, r.content) for r in reversed(rows)]


async def test_a_reply_streams_to_the_adapter_and_is_stored(ann, llm):
    seen: list[str] = []

    async def on_text(so_far: str) -> None:
        seen.append(so_far)

    long_text = "The lamp turns all night, and the sea keeps its own counsel. " * 3
    llm.add(text(long_text))
    reply = await ann.say("how are you?", on_text=on_text)
    assert reply.text == long_text.strip()
    assert len(seen) > 3 and seen[-1] == long_text.strip()
    assert await stored_texts(ann) == [("user", "how are you?"), ("assistant", long_text.strip())]


async def test_a_reply_never_speaks_for_the_person_it_ends_before_a_line_in_their_name(ann, llm):
    """A small model writes the chat as a script: its reply goes on with the person's next line.
    What the person says is theirs: the reply ends before it, on screen as it streams and stored."""
    seen: list[str] = []

    async def on_text(so_far: str) -> None:
        seen.append(so_far)

    llm.add(text("Then no peanut biscuits for you. I will bake oat ones.\nAnn: Yes please!\nMira: Good."))
    reply = await ann.say("I'm allergic to peanuts", on_text=on_text)
    assert reply.text == "Then no peanut biscuits for you. I will bake oat ones."
    assert seen[-1] == reply.text and not any("Ann:" in shown or "Yes" in shown for shown in seen)
    assert all(later.startswith(earlier) for earlier, later in zip(seen, seen[1:]))  # never taken back
    assert await stored_texts(ann) == [("user", "I'm allergic to peanuts"), ("assistant", reply.text)]


async def test_in_a_shared_chat_a_reply_never_speaks_for_anyone_else_who_speaks_there(runtime, llm):
    ann = Chat(runtime, chat_id="tavern", shared=True)
    bob = Chat(runtime, user="bob", name="Bob", chat_id="tavern", shared=True)
    llm.add(text("Welcome, Ann."), text("Hello, Bob. Ann was just here.\nANN: I still am!"))
    await ann.say("hello everyone")
    assert (await bob.say("hi Mira")).text == "Hello, Bob. Ann was just here."


async def test_a_reply_that_begins_with_the_characters_own_name_is_kept_without_it(ann, llm):
    seen: list[str] = []

    async def on_text(so_far: str) -> None:
        seen.append(so_far)

    llm.add(text("**Mira:** *She looks up.* Tea, Ann?"), text("Mira: Sugar?"))
    reply = await ann.say("hello", on_text=on_text)
    assert reply.text == "*She looks up.* Tea, Ann?" and not any("Mira" in shown for shown in seen)
    assert (await ann.say("yes")).text == "Sugar?"  # not streamed: the same


async def test_when_the_model_fails_after_its_retries_the_person_gets_a_plain_error_and_the_message_is_kept(ann, llm):
    llm.add(status(500), status(503))  # max_retries = 1: two attempts
    reply = await ann.say("are you there?")
    assert reply.is_error
    assert reply.text.startswith("Sorry, I couldn't answer just now")
    assert "Your message is saved" in reply.text
    assert await stored_texts(ann) == [("user", "are you there?")]
    assert len(llm.requests) == 2


async def test_a_429_with_retry_after_is_retried(ann, llm):
    llm.add(status(429, "slow down", {"retry-after-ms": "50"}), text("Here I am."))
    assert (await ann.say("hello?")).text == "Here I am."


async def test_a_timeout_is_retried_then_answered(make_config, clock, llm):
    runtime = await build_runtime(make_config(timeout_s=0.5), clock=clock)
    try:
        llm.add(hang(2.0), text("Sorry, I was slow."))
        assert (await Chat(runtime).say("hello?")).text == "Sorry, I was slow."
    finally:
        await runtime.close()


async def test_a_dropped_connection_is_retried(ann, llm):
    llm.add(drop(), text("Connected."))
    assert (await ann.say("hello?")).text == "Connected."


async def test_a_stream_cut_part_way_is_retried_from_the_start(ann, llm):
    seen: list[str] = []

    async def on_text(so_far: str) -> None:
        seen.append(so_far)

    answer = "This answer will break off at thirty percent the first time it is sent."
    llm.add(cut(answer, at=0.3), text(answer))
    reply = await ann.say("tell me", on_text=on_text)
    assert reply.text == answer
    assert "" in seen  # the adapter was told to start over
    assert (await stored_texts(ann))[-1] == ("assistant", answer)


async def test_an_answer_that_is_not_a_chat_completion_gets_a_plain_error_and_the_message_is_kept(ann, llm):
    for body in ('{"choices": []}', '{"choices": [{"message": null}]}', "<html>bad gateway</html>"):
        llm.add(garbled(body))
        reply = await ann.say(f"still there? {body}")
        assert reply.is_error and "Your message is saved" in reply.text
    assert [role for role, _ in await stored_texts(ann)] == ["user"] * 3


async def test_a_failed_turn_leaves_no_memory_write_behind(ann, llm):
    llm.add(tool_calls(("save_memory", {"content": "half-written fact"})), status(500), status(500))
    reply = await ann.say("remember this")
    assert reply.is_error
    assert "no saved memories" in (await ann.memory("/memory view")).text
    assert await stored_texts(ann) == [("user", "remember this")]


async def test_a_turn_interrupted_by_a_crash_is_undone_at_start_up(make_config, clock, llm, tmp_path):
    # The crash: a console process whose model saved a memory, then hung; killed with SIGKILL.
    config = make_config()
    config_file = tmp_path / "crash.toml"
    config_file.write_text(f'[llm]\nbase_url = "{llm.base_url}"\napi_key_env = "KEEPSAKE_TEST_API_KEY"\n'
                           'max_retries = 0\n\n[storage]\nurl = "sqlite:///keepsake.sqlite3"\n\n'
                           '[[characters]]\nname = "Mira"\npersona = "You are Mira, a kind lighthouse keeper."\n')
    llm.add(tool_calls(("save_memory", {"content": "written before the crash"})), hang(30))
    crashing = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--name", "ann", "--config",
        str(config_file), cwd=tmp_path, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    crashing.stdin.write(b"remember this\n")
    await crashing.stdin.drain()
    while len(llm.requests) < 2:  # the memory was saved; the model hangs
        await asyncio.sleep(0.01)
    crashing.kill()
    await crashing.wait()

    restarted = await build_runtime(config, clock=clock)
    try:
        assert "no saved memories" in (await Chat(restarted).memory("/memory view")).text
        assert (await restarted.store.turns.turn(1)).status == "failed"
        assert ("user", "remember this") in await stored_texts(Chat(restarted, chat_id="local:ann"))
    finally:
        await restarted.close()


async def test_turns_of_one_conversation_are_serialized_in_order(ann, llm):
    llm.add(text("first answer", delay=0.3), text("second answer"))
    first = asyncio.create_task(ann.say("first"))  # the first to arrive (tasks start in order)
    second = asyncio.create_task(ann.say("second"))
    assert [(await first).text, (await second).text] == ["first answer", "second answer"]
    # The second turn saw the first reply, right after the message it answered.
    chat = [m["content"] for m in llm.requests[1]["messages"] if m["role"] != "system"]
    assert chat == ["first", "first answer", "second"]
    assert await stored_texts(ann) == [("user", "first"), ("assistant", "first answer"),
                                       ("user", "second"), ("assistant", "second answer")]


async def test_different_conversations_run_concurrently(ann, bob, llm):
    llm.add(hang(30), text("fast"))  # Ann's model call hangs for as long as the test lasts
    slow = asyncio.create_task(ann.say("one"))
    while not llm.requests:  # Ann's turn is waiting on the model
        await asyncio.sleep(0.01)
    fast = await asyncio.wait_for(bob.say("two"), timeout=10)
    assert fast.text == "fast" and not slow.done()  # Bob was answered while Ann's turn still ran
    slow.cancel()
    await asyncio.gather(slow, return_exceptions=True)


async def test_regenerate_undoes_the_turns_memory_writes(ann, llm):
    kept = await ann.memory("/memory add my dog is Rex")
    updated_id = int(kept.text.split("#")[1].split()[0].rstrip(":"))
    doomed = await ann.memory("/memory add I live in Bergen")
    deleted_id = int(doomed.text.split("#")[1].split()[0].rstrip(":"))
    llm.add(tool_calls(("save_memory", {"content": "I have a new cat"}),
                       ("update_memory", {"id": updated_id, "content": "my dog is Max"}),
                       ("delete_memory", {"id": deleted_id})),
            text("Noted all that."))
    reply = await ann.say("new cat, dog renamed Max, and I moved away from Bergen")
    view = (await ann.memory("/memory view")).text
    assert "new cat" in view and "Max" in view and "Bergen" not in view

    llm.add(text("A different answer."))
    regenerated = await ann.regenerate(reply.turn)
    assert regenerated.text == "A different answer."
    view = (await ann.memory("/memory view")).text
    assert "new cat" not in view  # the added entry is removed
    assert "my dog is Rex" in view  # the updated entry is restored
    assert f"#{deleted_id} · character · recent — I live in Bergen" in view  # the deleted one is back, same id
    assert await stored_texts(ann) == [
        ("user", "new cat, dog renamed Max, and I moved away from Bergen"),
        ("assistant", "A different answer."),
    ]
    # The regenerated prompt saw the memories as they were before the first answer.
    assert '"I have a new cat"' not in llm.prompt_text()


async def test_regenerate_leaves_pinned_entries_alone(ann, llm):
    llm.add(tool_calls(("save_memory", {"content": "I love sailing"})), text("Ahoy."))
    reply = await ann.say("I love sailing")
    saved = next(iter((await ann.memory("/memory view")).text.split("#")[1:])).split()[0]
    await ann.memory(f"/memory pin {saved}")  # the person pinned what the AI saved
    llm.add(text("Another take."))
    await ann.regenerate(reply.turn)
    assert "I love sailing" in (await ann.memory("/memory view")).text


async def test_regenerate_never_reverts_what_the_person_changed_since(ann, llm):
    """A person's own write outranks the undo: an entry the AI added then the person edited
    stays as the person wrote it; one the AI updated then the person pinned and unpinned
    again keeps the AI's text, which the person chose to keep (SPEC 5)."""
    first = await ann.memory("/memory add my dog is Rex")
    dog = int(first.text.split("#")[1].split()[0].rstrip(":"))
    llm.add(tool_calls(("save_memory", {"content": "I have a cat"}),
                       ("update_memory", {"id": dog, "content": "my dog is Max"})),
            text("Noted."))
    reply = await ann.say("I got a cat, and the dog is Max now")
    cat = int((await ann.memory("/memory view")).text.split("I have a cat")[0].rsplit("#", 1)[1].split()[0])
    await ann.memory(f"/memory edit {cat} I have a cat called Tom")
    await ann.memory(f"/memory pin {dog}")
    await ann.memory(f"/memory unpin {dog}")
    llm.add(text("Another take."))
    await ann.regenerate(reply.turn)
    view = (await ann.memory("/memory view")).text
    assert "I have a cat called Tom" in view  # not deleted, not reverted
    assert "my dog is Max" in view and "Rex" not in view


async def test_only_the_latest_reply_can_be_regenerated_and_only_by_its_person(runtime, llm):
    ann = Chat(runtime, chat_id="group", shared=True)
    bob = Chat(runtime, user="bob", name="Bob", chat_id="group", shared=True)
    first = await ann.say("hi all")
    refused = await bob.regenerate(first.turn)
    assert refused.is_error and refused.text == "Only the person this reply answered can regenerate it."
    await bob.say("hello")
    stale = await ann.regenerate(first.turn)
    assert stale.is_error and stale.text == "Only the latest reply can be regenerated."


async def test_a_failed_regenerate_keeps_the_old_reply(ann, llm):
    reply = await ann.say("hello")
    llm.add(status(500), status(500))
    failed = await ann.regenerate(reply.turn)
    assert failed.is_error
    assert await stored_texts(ann) == [("user", "hello"), ("assistant", "Okay.")]


async def test_a_persons_memories_never_reach_another_persons_prompt_in_a_shared_conversation(runtime, llm):
    ann = Chat(runtime, chat_id="tavern", shared=True)
    bob = Chat(runtime, user="bob", name="Bob", chat_id="tavern", shared=True)
    await ann.memory("/memory add scope:global Ann's secret diagnosis is X")
    await ann.memory("/memory add pin:yes Ann's pinned address is 5 Harbour Road")
    await ann.say("hello everyone")
    assert "secret diagnosis" in llm.prompt_text() and "Harbour Road" in llm.prompt_text()
    await bob.say("what do you know about Ann?")
    bob_prompt = llm.prompt_text()
    assert "secret diagnosis" not in bob_prompt and "Harbour Road" not in bob_prompt
    assert "Ann: hello everyone" in bob_prompt and "Bob: what do you know about Ann?" in bob_prompt
    assert "Bob's" not in (await bob.memory("/memory view")).text


async def test_an_empty_message_gets_a_clear_answer_and_no_model_call(ann, llm):
    reply = await ann.say("   \n ")
    assert reply.is_error and reply.text == EMPTY_MESSAGE
    assert llm.requests == []


async def test_a_20000_character_message_gets_an_answer(ann, llm):
    long = "word " * 4_000  # 20,000 characters, about 4,000 tokens: within the window
    reply = await ann.say(long)
    assert not reply.is_error
    too_long = "lorem ipsum dolor sit amet " * 3_000  # ~81,000 characters, over 10,000 tokens
    refused = await ann.say(too_long)
    assert refused.is_error and "I can read at most 10,000 tokens at once" in refused.text
    assert len(llm.requests) == 1


async def test_a_greeting_opens_a_one_to_one_conversation_but_is_not_stored_in_a_shared_one(runtime, llm):
    ann = Chat(runtime)
    in_group = Chat(runtime, chat_id="group", shared=True)
    await runtime.core.conversation.greet(ann.key, "Ann")
    await runtime.core.conversation.greet(in_group.key, "Ann")  # it names Ann: it would outlive her /forgetme
    assert [role for role, _ in await stored_texts(ann)] == ["assistant"]
    assert await stored_texts(in_group) == []



async def test_a_refused_api_key_is_named_as_such_and_the_log_names_api_key_env(ann, llm, caplog):
    llm.add(status(401, "Incorrect API key provided"))
    with caplog.at_level(logging.ERROR):
        reply = await ann.say("hello?")
    assert reply.is_error and "refused the bot's API key" in reply.text
    assert "try again in a moment" not in reply.text  # waiting will not fix a key
    assert "KEEPSAKE_TEST_API_KEY" in caplog.text  # the owner learns which variable to fix
    assert await stored_texts(ann) == [("user", "hello?")]


async def test_a_message_that_cannot_be_stored_is_answered_as_not_saved(make_config, clock, llm):
    config = make_config()
    first = await build_runtime(config, clock=clock)
    await Chat(first).say("hello")
    await first.close()
    # The database cannot be written any more (a read-only or full file system).
    read_only = config.changed("storage", url=config.storage.url + "?mode=ro")
    runtime = await build_runtime(read_only, clock=clock)
    try:
        ann = Chat(runtime)
        reply = await ann.say("a long story about the sea")
        assert reply.is_error and reply.text == NOT_SAVED
        assert "not kept" in reply.text and "kept;" not in reply.text
        assert "a long story" not in str(await stored_texts(ann))
        assert len(llm.requests) == 1  # only the first message reached the model
    finally:
        await runtime.close()


async def test_a_lone_surrogate_is_cleaned_before_it_is_stored(ann, llm):
    reply = await ann.say("hi \ud800 there")
    assert not reply.is_error
    assert ("user", "hi \ufffd there") in await stored_texts(ann)


async def test_a_message_from_nobody_in_particular_reads_and_writes_no_saved_memories(runtime, llm):
    ann = Chat(runtime, chat_id="group", shared=True, platform="telegram")
    await ann.memory("/memory add my salary is 99000 dollars")
    anonymous = IncomingMessage(ann.key, None, "Tavern", "what do you know about me? remember I like tea")
    llm.add(text("I know nothing of you, stranger."))
    reply = await runtime.turns.handle(anonymous)
    assert reply.text == "I know nothing of you, stranger."
    assert reply.buttons == []  # nobody can press a Regenerate button made for nobody
    request = llm.requests[-1]
    assert not offers_memory_tools(request)  # nothing can be saved for it
    assert "99000" not in llm.prompt_text()
    refused = await runtime.commands.run_text(
        type(ann.ctx)(ann.key, None, "Tavern"), "/memory view")
    assert not refused.ok and "Write as yourself" in refused.text


async def test_a_new_persons_first_messages_are_stored_and_answered_in_arrival_order(runtime, llm):
    llm.default = "ok"
    people, each = 30, 6  # 30 new people, each sending 6 DMs 20 ms apart

    async def delivered(message: IncomingMessage):  # answered, and delivered as by its adapter
        return await shown(runtime, await runtime.turns.handle(message))

    async def person(n: int) -> list[str]:
        key = ConversationKey("telegram", str(5000 + n), None, "Mira")
        who = Identity("telegram", str(5000 + n))
        tasks = []
        for i in range(each):
            message = IncomingMessage(key, who, f"P{n}", f"p{n} m{i}")
            tasks.append(asyncio.create_task(delivered(message)))
            await asyncio.sleep(0.02)
        await asyncio.gather(*tasks)
        conversation = await runtime.cast.conversation_for(key)
        rows = await runtime.store.conversations.recent_messages(conversation.id, 100)
        return [r.content for r in reversed(rows) if r.role == "user"]

    stored = await asyncio.gather(*(person(n) for n in range(people)))
    assert stored == [[f"p{n} m{i}" for i in range(each)] for n in range(people)]
    answered = [[m["content"] for m in r["messages"] if m["role"] == "user"][-1] for r in llm.requests]
    for n in range(people):  # and each conversation's turns ran in that order
        assert [a for a in answered if a.startswith(f"p{n} ")] == [f"p{n} m{i}" for i in range(each)]


async def test_a_caption_is_answered_and_the_model_told_it_cannot_see_the_photo(ann, llm):
    llm.add(text("I can't see photos, but a lighthouse at dusk sounds lovely."))
    photo = IncomingMessage(ann.key, ann.identity, "Ann", "what is in this picture?", unseen=("a photo",))
    reply = await ann.runtime.turns.handle(photo)
    assert not reply.is_error
    prompt = llm.prompt_text()
    assert "came with a photo, which you cannot see" in prompt
    assert ("user", "[a photo] what is in this picture?") in await stored_texts(ann)
    bare = await ann.runtime.turns.handle(IncomingMessage(ann.key, ann.identity, "Ann", "", unseen=("a sticker",)))
    assert bare.is_error and bare.text.startswith("I can't see a sticker — I can only read text.")
    assert len(llm.requests) == 1


async def test_a_base_url_missing_v1_gets_a_hint_at_start_up_and_the_person_a_plain_line(tmp_path, clock, llm, caplog):
    """#47: the /v1 hint is a WARNING at start-up (the probe), and a message reads that the bot is
    not set up right — never the server's "HTTP 404: 404: Not Found"."""
    from bot.config import parse_config
    from bot.model.llm import NOT_SET_UP, OWNER_TOLD
    from bot.turn.handler import LLM_FAILED
    from tests.conftest import config_dict

    raw = config_dict(llm.base_url.removesuffix("/v1"), tmp_path / "keepsake.sqlite3")
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        with caplog.at_level(logging.WARNING):
            await runtime.llm.probe()
        assert f'try [llm] base_url = "{llm.base_url}"' in caplog.text
        with caplog.at_level(logging.ERROR):
            reply = await Chat(runtime, platform="telegram").say("hello?")
        assert reply.is_error and reply.text == LLM_FAILED.format(reason=NOT_SET_UP, hint=OWNER_TOLD)
    finally:
        await runtime.close()


async def test_a_model_server_that_is_down_is_named_by_its_address(tmp_path, clock, llm):
    import socket

    from bot.config import parse_config
    from tests.conftest import config_dict

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    raw = config_dict(closed, tmp_path / "keepsake.sqlite3")
    raw["llm"]["max_retries"] = 0
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        reply = await Chat(runtime).say("hello?")
        assert reply.is_error and f"the model server at {closed} could not be reached" in reply.text
    finally:
        await runtime.close()


async def test_start_up_warns_when_the_server_does_not_list_the_configured_model(runtime, llm, caplog):
    llm.model = "llama3.2"  # what the server has; the config asks for gpt-4o-mini
    with caplog.at_level(logging.WARNING):
        await runtime.llm.probe()
    assert f"the model server at {llm.base_url} has no model 'gpt-4o-mini' (it lists: llama3.2)" in caplog.text
    caplog.clear()
    llm.model = "gpt-4o-mini"
    await runtime.llm.probe()
    assert "has no model" not in caplog.text


async def test_a_model_the_server_does_not_know_is_told_as_a_setup_problem_and_logged_once(runtime, llm, caplog):
    """#47: a wrong model name (HTTP 404) is not "try again in a moment": the person reads that the
    bot is not set up right and its owner is told; the log says which key, once; no status twice.
    At the console, the person is the owner: they read that the log says what to fix (#62)."""
    from bot.model.llm import NOT_SET_UP, OWNER_TOLD, YOU_ARE_THE_OWNER
    from bot.turn.handler import LLM_FAILED

    llm.add(*[status(404, "model 'gpt-4o-mini' not found, try pulling it first")] * 3)
    ann = Chat(runtime, platform="telegram")
    with caplog.at_level(logging.ERROR):
        first, second = await ann.say("hello?"), await ann.say("anyone?")
        at_the_console = await Chat(runtime).say("hello?")
    assert first.text == second.text == LLM_FAILED.format(reason=NOT_SET_UP, hint=OWNER_TOLD)
    assert at_the_console.text == LLM_FAILED.format(reason=NOT_SET_UP, hint=YOU_ARE_THE_OWNER)
    assert "try again in a moment" not in first.text
    assert caplog.text.count("does not know model 'gpt-4o-mini' ([llm] model)") == 1
    assert await stored_texts(ann) == [("user", "hello?"), ("user", "anyone?")]


def test_a_status_is_never_said_twice_in_a_line():
    import httpx
    import openai

    from bot.model.llm import server_message

    response = httpx.Response(404, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    assert server_message(openai.NotFoundError("404: Not Found", response=response, body="404: Not Found")) == \
        "Not Found"


def on_discord(chat: Chat, words: str, platform_id: str) -> IncomingMessage:
    """A message as Discord gives it: with its id, which a deletion names."""
    return IncomingMessage(chat.key, chat.identity, chat.name, words, platform_message_id=platform_id,
                           asker=chat.asker)


async def a_reply_being_written(runtime, llm, chat: Chat) -> asyncio.Future:
    """The reply to `chat`'s first message ("d1"), under way: the model takes half a second."""
    llm.add(text("A slow answer.", delay=0.5))
    first = asyncio.ensure_future(runtime.core.conversation.handle(on_discord(chat, "first message", "d1")))
    await eventually(lambda: llm.answering == 1)
    return first


async def test_a_message_deleted_while_its_reply_is_written_is_answered_but_nothing_of_it_is_kept(runtime, llm):
    """Discord tells of a deletion at once: the person's message (and its turn) goes while its reply
    is still being written. The reply is shown, kept nowhere; the next message's turn, started
    meanwhile, keeps its own reply."""
    ann = Chat(runtime, platform="discord")
    first = await a_reply_being_written(runtime, llm, ann)
    llm.add(text("The second answer."))
    second = asyncio.ensure_future(runtime.core.conversation.handle(on_discord(ann, "second message", "d2")))
    assert await runtime.core.conversation.deleted(ann.key, "d1")
    answered = await first
    assert answered.text == "A slow answer." and answered.turn is None and not answered.buttons
    await runtime.core.conversation.delivered(await asyncio.wait_for(second, 5), ["b2"])
    conversation = await runtime.cast.conversation_for(ann.key)
    stored = await runtime.store.conversations.recent_messages(conversation.id, 10)
    assert [(m.content, m.platform_message_id) for m in reversed(stored)] == [
        ("second message", "d2"), ("The second answer.", "b2")]


async def test_a_message_deleted_while_it_waits_for_its_turn_is_never_answered_and_nothing_is_said(runtime, llm):
    """A person may delete a message still waiting behind the reply being written (Discord tells
    of it at once): it is not answered, and no error is shown for it."""
    ann = Chat(runtime, platform="discord")
    first = await a_reply_being_written(runtime, llm, ann)
    llm.add(text("The third answer."))
    second = asyncio.ensure_future(runtime.core.conversation.handle(on_discord(ann, "never mind", "d2")))
    await eventually(lambda: runtime.core.conversation.deleted(ann.key, "d2"))  # stored, waiting in line
    await runtime.core.conversation.delivered(await first, ["b1"])
    assert (await asyncio.wait_for(second, 5)).silent
    third = await runtime.core.conversation.handle(on_discord(ann, "third message", "d3"))
    assert third.text == "The third answer." and len(llm.requests) == 2


async def test_forgetme_while_a_reply_is_written_keeps_nothing_of_it_and_says_no_error(runtime, llm):
    """The person's turn goes with them: its reply is shown (it was on its way), kept nowhere,
    and nothing of the conversation is left (SPEC 6)."""
    ann = Chat(runtime, platform="telegram")
    llm.add(text("Hello."), text("A slow answer.", delay=0.5))
    await ann.say("hi")
    answering = asyncio.ensure_future(ann.say("tell me a story"))
    await eventually(lambda: llm.answering == 1)
    question = await ann.memory("/forgetme")
    await ann.press(question.buttons[0][0].action)
    answered = await answering
    assert answered.text == "A slow answer." and not answered.is_error and answered.turn is None
    assert await runtime.store.db.all("SELECT id FROM messages") == []
    assert await runtime.store.db.all("SELECT id FROM turns") == []



async def test_a_message_whose_rest_cannot_be_gathered_is_answered_as_stored_and_holds_no_one(ann, llm, caplog):
    """An album by webhook waits for its later items (`IncomingMessage.rest`): when gathering them
    fails (the database away a moment), the message is answered as it is stored, and the turn
    ends as any does, so the conversation's next message is answered too."""
    async def rest():
        raise ConnectionError("the database went away")
    llm.add(text("A fine photo."), text("Yes, I'm here."))
    first = IncomingMessage(ann.key, ann.identity, ann.name, "[a photo] my boat", platform_message_id="71",
                            rest=rest, asker=ann.asker)
    with caplog.at_level(logging.ERROR):
        reply = await shown(ann.runtime, await ann.runtime.core.conversation.handle(first))
    assert reply.text == "A fine photo."
    assert "the rest of a message" in caplog.text
    assert (await ann.say("are you there?")).text == "Yes, I'm here."
