"""SPEC 8, model servers as they really are, rule by rule: the scripted server answering as the
real ones do — llama.cpp's /props and its 400 `exceed_context_size_error` (n_prompt_tokens,
n_ctx), Ollama's /api/version, /api/show and /api/ps and its silent cut of a prompt's start,
llama-cpp-python's empty 200 stream — with the real turn and `openai` client. A conversation that
outgrows a 2,048-token context while the config says 8,192 is answered and stored throughout.
The same against a real llama.cpp server: tests/test_real_model_server.py."""

import asyncio
import json
import logging
import ssl

import httpcore2
import pytest
import trustme
from aiohttp import web

from bot.config import parse_config
from bot.model.server_context import OLLAMA_DEFAULT, fit_to_server, held_by_server
from bot.model.tls import trust_store
from bot.runtime import build_runtime
from bot.contract import IncomingMessage, Kind
from tests.conftest import Chat, config_dict
from tests.fakes.llm_server import ScriptedLLM, cut, cut_at_length, ended_early, status, text, tool_calls
from tests.fakes.summarizer import extractive, kind_of

LONG = ("Tell me again about the storm of the winter the lighthouse lamp failed, the boats that came in "
        "late, and who kept the fires going in the harbour office while the wind took the roofs off. ") * 6


@pytest.fixture
async def start(llm, tmp_path, clock):
    runtimes = []

    async def start_with(**llm_settings):
        raw = config_dict(llm.base_url, tmp_path / f"k{len(runtimes)}.sqlite3", **llm_settings)
        config = await fit_to_server(parse_config(raw, tmp_path))
        runtime = await build_runtime(config, clock=clock)
        runtimes.append(runtime)
        return runtime
    yield start_with
    for runtime in runtimes:
        await runtime.close()


async def stored_user_messages(runtime) -> int:
    return await runtime.store.db.value("SELECT COUNT(*) FROM messages WHERE role = 'user'")


async def test_the_context_llama_cpp_holds_is_asked_at_start_up_and_said_in_one_warning(start, llm, caplog):
    llm.n_ctx = 2_048
    with caplog.at_level(logging.WARNING):
        runtime = await start(context_window=8_192, max_reply_tokens=200)
    warned = [r.getMessage() for r in caplog.records if "holds 2048 tokens" in r.getMessage()]
    assert len(warned) == 1 and "-c 8192" in warned[0] and "context_window = 8192" in warned[0]
    assert runtime.turns.context_window == 2_048


async def a_long_history(runtime, ann: Chat, count: int, tokens: int) -> int:
    """`count` of Ann's messages of about `tokens` tokens each, stored before any turn; the conversation."""
    conversation = (await runtime.cast.conversation_for(ann.key)).id
    person = await ann.person_id()
    for n in range(count):
        await runtime.store.conversations.add_user_message(conversation, person, "Ann",
                                                           f"line {n} " + "tide " * (tokens - 10), tokens, None)
    return conversation


async def test_summaries_follow_the_window_the_server_holds_and_batch_within_it(start, llm):
    """#68: a 2,048-token server holds 5 of 24 messages of 100 tokens in a turn's window (8,192
    would hold 20): the other 19 are summarized — they left every prompt — in batches the server
    takes whole (at most three fifths of its context, so 12 messages at a time)."""
    runtime = await start(context_window=8_192, max_reply_tokens=200)
    llm.n_ctx = 2_048  # the server is started with -c 2048 after Keepsake asked it: learned from a refusal
    llm.responder = extractive
    ann = Chat(runtime, platform="telegram")
    conversation = await a_long_history(runtime, ann, 24, tokens=100)
    llm.add(text("Hello, Ann."))
    assert (await ann.say("hello")).text == "Hello, Ann." and runtime.turns.context_window == 2_048
    await runtime.summarizer.summarize(conversation)
    batches = [request for request in llm.requests if kind_of(request) == "batch"]
    assert [batch["messages"][1]["content"].count("Ann: line") for batch in batches][:1] == [12]
    assert llm.refused_for_length == 1  # the turn's first prompt taught it; no summary outgrew it


async def test_a_conversation_already_past_the_servers_context_is_answered_and_then_summarized(start, llm):
    """#68: 200 messages stored before any summary, on a 2,048-token server: the reply is fitted
    (no "try again" for ever), and once it is delivered the summaries begin, so the next prompt
    holds a summary of what left the window."""
    llm.n_ctx = 2_048
    runtime = await start(context_window=8_192, max_reply_tokens=200)
    llm.responder = extractive
    ann = Chat(runtime, platform="telegram")
    conversation = await a_long_history(runtime, ann, 200, tokens=50)
    llm.add(text("Hello again, Ann."), text("The lamp, yes."))
    reply = await runtime.core.conversation.handle(IncomingMessage(ann.key, ann.identity, "Ann", "hello", asker=ann.asker))
    assert reply.text == "Hello again, Ann."
    await runtime.core.conversation.delivered(reply, ["1"])  # as an adapter reports it shown
    await runtime.summarizer.idle()
    assert await runtime.store.summaries.summaries(conversation)  # the summaries began
    await ann.say("do you remember the lamp?")
    assert "What happened earlier in this conversation (summary, oldest first):" in json.dumps(llm.requests[-1])
    assert llm.refused_for_length == 0  # every prompt, and every batch, within the 2,048 tokens


async def test_a_server_that_says_nothing_leaves_context_window_as_it_is(start, llm):
    runtime = await start(context_window=8_192)
    assert runtime.turns.context_window == 8_192


@pytest.mark.parametrize("ps, show, held", [
    ({"models": []}, {"model_info": {"llama.context_length": 131072}, "parameters": ""}, OLLAMA_DEFAULT),
    ({"models": [{"name": "llama3.1:latest", "context_length": 16384}]}, {}, 16_384),
    ({"models": []}, {"model_info": {"llama.context_length": 131072}, "parameters": "num_ctx 8192"}, 8_192),
    ({"models": []}, {"model_info": {"gemma.context_length": 2048}}, 2_048),
])
async def test_ollama_is_asked_what_it_loaded_else_its_4096_default_applies(ps, show, held):
    async def version(request):
        return web.json_response({"version": "0.15.6"})

    async def loaded(request):
        return web.json_response(ps)

    async def shown(request):
        assert (await request.json())["model"] == "llama3.1"
        return web.json_response(show)
    app = web.Application()
    app.router.add_get("/api/version", version)
    app.router.add_get("/api/ps", loaded)
    app.router.add_post("/api/show", shown)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        found = await held_by_server(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1", "llama3.1")
        assert found.tokens == held and "OLLAMA_CONTEXT_LENGTH" in found.fix
    finally:
        await runner.cleanup()


async def test_every_prompt_fits_the_context_less_the_replys_room_all_layers_and_tools_counted(start, llm):
    runtime = await start(context_window=2_048, max_reply_tokens=200)
    ann = Chat(runtime, platform="telegram")
    for n in range(12):
        await ann.memory(f"/memory add Fact number {n}: {LONG[:300]}")
    for n in range(20):
        llm.add(text(f"Answer {n}."))
        await ann.say(f"{n}: {LONG}")
    receipt = (await runtime.store.turns.latest_turn(
        (await runtime.cast.conversation_for(ann.key)).id)).receipt
    assert receipt["tokens"]["total"] <= 2_048 - 200


async def test_a_prompt_refused_for_length_is_rebuilt_within_the_servers_context_and_asked_once_more(
        start, llm, caplog):
    """As llama.cpp refuses (400 exceed_context_size_error with n_ctx): a conversation outgrowing
    2,048 tokens while the config says 8,192 is answered and stored, message after message."""
    runtime = await start(context_window=8_192, max_reply_tokens=200)
    llm.n_ctx = 2_048  # the server is started with -c 2048 after Keepsake asked it
    ann = Chat(runtime, platform="telegram")
    with caplog.at_level(logging.WARNING):
        for n in range(25):
            llm.add(text(f"Answer {n}."))
            reply = await ann.say(f"{n}: {LONG}")
            assert reply.text == f"Answer {n}." and not reply.is_error, n
    assert llm.refused_for_length >= 1  # it did outgrow it, and no person saw it
    assert await stored_user_messages(runtime) == 25
    assert len([r for r in caplog.records if "refused a prompt for its length" in r.getMessage()]) == 1
    assert runtime.turns.context_window == 2_048


async def test_a_prompt_the_server_cuts_silently_is_noticed_and_the_next_ones_fit(start, llm, caplog):
    """As Ollama cuts past its context: the prompt's start (card, memories, summary) is lost with
    no error; a `usage.prompt_tokens` far below what was sent tells it."""
    runtime = await start(context_window=8_192, max_reply_tokens=200)
    llm.cuts_at = 2_048
    ann = Chat(runtime, platform="telegram")
    with caplog.at_level(logging.WARNING):
        for n in range(25):
            llm.add(text(f"Answer {n}."))
            await ann.say(f"{n}: {LONG}")
    cuts = llm.cut_prompts
    assert cuts >= 1
    assert len([r for r in caplog.records if "it holds about" in r.getMessage()]) == 1  # once a process
    llm.add(text("Still me."))
    await ann.say(LONG)
    assert llm.cut_prompts == cuts  # fitted now: nothing more is cut
    assert "You are Mira" in llm.requests[-1]["messages"][0]["content"]  # the card is there


async def test_an_empty_streamed_answer_is_never_an_empty_reply_it_is_asked_again_plainly(start, llm):
    """As llama-cpp-python's server streams a prompt too long: HTTP 200 and no chunk. Asked again
    without streaming, the server says why (400 context_length_exceeded, its limit in words) —
    the prompt is rebuilt within it, and the person gets a reply."""
    runtime = await start(context_window=8_192, max_reply_tokens=200)
    ann = Chat(runtime, platform="telegram")
    shown = []

    async def on_text(words: str):
        shown.append(words)
    for n in range(8):
        llm.add(text(f"Answer {n}."))
        await ann.say(f"{n}: {LONG}", on_text=on_text)
    llm.python_n_ctx = 2_048  # its words: "This model's maximum context length is 2048 tokens. However, …"
    llm.add(text("Here I am."))
    reply = await ann.say(f"8: {LONG}", on_text=on_text)
    assert reply.text == "Here I am." and shown[-1] == "Here I am." and llm.refused_for_length == 2
    assert runtime.turns.context_window == 2_048
    assert await stored_user_messages(runtime) == 9


async def test_a_reply_cut_at_max_reply_tokens_ends_at_a_sentence_never_a_fragment(start, llm):
    """#68: "…Mira,\nI" was shown and stored as the character's whole reply."""
    runtime = await start()
    llm.add(cut_at_length("The lamp is lit. The boats are all in, Ann. Mira,\nI"))
    reply = await Chat(runtime, platform="telegram").say("how is the harbour?")
    assert reply.text == "The lamp is lit. The boats are all in, Ann."
    assert await runtime.store.db.value("SELECT content FROM messages WHERE role = 'assistant'") == reply.text


async def test_a_servers_own_error_words_never_reach_the_person(start, llm):
    """#68: llama-cpp-python's "7 validation errors … Input should be a valid string" was shown."""
    runtime = await start()
    dump = "7 validation errors for CreateChatCompletionRequest messages.1.content Input should be a valid string"
    llm.add(status(500, dump), status(500, dump))
    reply = await Chat(runtime, platform="telegram").say("hello")
    assert reply.is_error and "validation" not in reply.text and "HTTP 500" in reply.text


async def test_tool_arguments_sent_as_an_object_are_read_not_taken_for_a_broken_stream(start, llm):
    """#68: a server that sends a tool call's arguments as a JSON object, not a string."""
    from tests.fakes.llm_server import Step
    runtime = await start()
    llm.add(Step("tools", calls=[("dice", {"notation": "1d6"})]), text("Rolled."))

    async def on_text(words: str):
        return None
    reply = await Chat(runtime, platform="telegram").say("roll a die", on_text=on_text)
    assert reply.text.startswith("Rolled.") and '"rolls"' in str(llm.requests[-1]["messages"][-1])


async def shown_nowhere(words: str) -> None:
    """A reply streamed to no screen (the turn streams only when given somewhere to show it)."""


async def test_a_stream_cut_the_moment_another_request_came_makes_keepsake_ask_one_at_a_time(start, llm, caplog):
    """#68 item 3, as llama-cpp-python's default `interrupt_requests` does: a running stream ends
    ("[DONE]", no finish reason) when another request comes (recorded from its 0.3.36 server: 11
    chunks, every `finish_reason` null, then `data: [DONE]`). Two people at once cut each other's
    answers over and over (35 of 36 streams, 8 of 9 turns failed); Keepsake asks again only once
    the other answer is done, and from then on one request at a time: 3 requests, both answered."""
    runtime = await start(max_retries=1)
    llm.one_at_a_time = llm.interrupts = True
    llm.chunk_delay_s = 0.05
    llm.default = "The lamp is lit and the boats are in; the harbour is quiet tonight, and so am I. " * 3
    ann, bob = Chat(runtime, platform="telegram"), Chat(runtime, "bob", "Bob", "dm-bob", platform="telegram")
    with caplog.at_level(logging.WARNING):
        replies = await asyncio.gather(ann.say("hello", on_text=shown_nowhere), bob.say("hi", on_text=shown_nowhere))
    assert [reply.text for reply in replies] == [llm.default.strip()] * 2
    assert llm.streams_cut == 1 and len(llm.requests) == 3
    assert len([r for r in caplog.records if "--interrupt_requests False" in r.getMessage()]) == 1


async def test_a_connection_broken_mid_answer_while_another_request_runs_leaves_the_requests_side_by_side(
        start, llm):
    """Only a stream the server itself ended early (`[DONE]`, no finish reason) as another of ours
    came means a server that cuts: a connection that broke (the network, a proxy) while other
    requests ran does not make a busy bot ask a hosted API one request at a time."""
    runtime = await start(max_retries=2)
    llm.chunk_delay_s = 0.02
    llm.add(cut("The lamp is lit and the boats are in; the harbour is quiet tonight, and so am I. " * 3, at=0.5))
    ann, bob = Chat(runtime, platform="telegram"), Chat(runtime, "bob", "Bob", "dm-bob", platform="telegram")
    replies = await asyncio.gather(ann.say("hello", on_text=shown_nowhere), bob.say("hi", on_text=shown_nowhere))
    assert not any(reply.is_error for reply in replies) and runtime.llm.lanes.slots is None


async def test_a_stream_the_server_ended_early_with_no_other_request_running_is_asked_again_side_by_side(
        start, llm):
    runtime = await start(max_retries=2)
    llm.add(ended_early("The lamp is lit and the boats are in; the harbour is quiet tonight. " * 3), text("Here."))
    assert (await Chat(runtime, platform="telegram").say("hello", on_text=shown_nowhere)).text == "Here."
    assert runtime.llm.lanes.slots is None


async def test_llama_cpp_pythons_server_is_sent_one_request_at_a_time_from_start_up_so_none_is_cut(start, llm):
    """#68 item 3: said by its one model's `owned_by` ("me"), llama-cpp-python's server is sent one
    request at a time from the start: two people and a summary at once, nothing cut, all answered."""
    runtime = await start()
    llm.owned_by, llm.one_at_a_time, llm.interrupts, llm.chunk_delay_s = "me", True, True, 0.02
    await runtime.llm.probe()
    ann, bob = Chat(runtime, platform="telegram"), Chat(runtime, "bob", "Bob", "dm-bob", platform="telegram")
    summary = runtime.llm.complete([{"role": "user", "content": "Summarize: the lamp was lit."}], background=True)
    answered = await asyncio.gather(ann.say("hello", on_text=shown_nowhere), bob.say("hi", on_text=shown_nowhere),
                                    summary)
    assert [answer.text for answer in answered] == [llm.default] * 3
    assert llm.streams_cut == 0 and len(llm.requests) == 3 and llm.most_at_once == 1


async def test_llama_cpps_own_server_is_sent_as_many_requests_at_once_as_its_props_say_it_has_slots(start, llm):
    runtime = await start()
    llm.owned_by, llm.n_ctx = "llamacpp", 8_192  # its /props: {"default_generation_settings": {"n_ctx"}, "total_slots": 1}
    await runtime.llm.probe()
    assert runtime.llm.lanes.slots == 1 and runtime.llm.tools_supported is not False  # it calls tools (--jinja)


async def test_requests_that_overflow_llama_cpps_shared_cache_together_are_asked_again_one_at_a_time(
        start, llm, caplog):
    """Measured on llama.cpp's server with its defaults (`-c 2048`: 4 slots sharing one cache, each
    said at /props to hold 2,048): two people's prompts of ~1,100 tokens at once both failed,
    "Context size has been exceeded." (HTTP 500, or an error event mid-stream), and a reply was
    lost. Now, behind a summary being written, a streamed reply and a plain one that overflow the
    cache are both answered, asked again one at a time, and from then on one request goes at a
    time; one WARNING names the fix."""
    runtime = await start(context_window=2_048, max_reply_tokens=60, max_retries=0)
    llm.owned_by, llm.n_ctx, llm.slots, llm.shared_cache = "llamacpp", 2_048, 4, 2_048
    await runtime.llm.probe()
    assert runtime.llm.lanes.slots == 4
    llm.add(text("Summary.", delay=0.3))
    summary = asyncio.create_task(runtime.llm.complete([{"role": "user", "content": f"Summarize: {LONG * 5}"}],
                                                       background=True))
    while not llm.answering:
        await asyncio.sleep(0.01)
    ann, bob = Chat(runtime, platform="telegram"), Chat(runtime, "bob", "Bob", "dm-bob", platform="telegram")
    with caplog.at_level(logging.WARNING):
        replies = await asyncio.gather(ann.say(f"first {LONG}", on_text=shown_nowhere), bob.say(f"second {LONG}"))
    assert (await summary).text == "Summary." and [reply.text for reply in replies] == [llm.default] * 2
    assert llm.cache_overflows == 2 and runtime.llm.lanes.slots == 1
    assert len([r for r in caplog.records if "--no-kv-unified" in r.getMessage()]) == 1


async def test_a_background_call_waits_its_turn_rather_than_time_out_into_retries(start, llm):
    """#68 item 7: on a server that answers one request at a time, a summary sent behind a reply
    waited on the server with its timeout running, timed out, and was sent again while the server
    still computed the first (2 calls → 8 requests). Sent once the reply is done, it is sent once;
    so are the embeddings of stored messages."""
    runtime = await start(timeout_s=1.0, max_retries=3)
    llm.owned_by, llm.one_at_a_time, llm.chunk_delay_s = "me", True, 0.05
    llm.default = "Long ago, when the lamp was new, the keeper wrote every ship in a book. " * 8  # 30 pieces, 1.5 s
    await runtime.llm.probe()
    ann = Chat(runtime, platform="telegram")
    reply = asyncio.create_task(ann.say("tell me a story", on_text=shown_nowhere))
    while not llm.answering:
        await asyncio.sleep(0.01)
    summary, vectors = await asyncio.gather(
        runtime.llm.complete([{"role": "user", "content": "Summarize."}], background=True),
        runtime.llm.embed("nomic-embed-text", ["the lamp"], timeout_s=1.0, retries=0))
    assert summary.text == llm.default and not (await reply).is_error and len(vectors) == 1
    assert len(llm.requests) == 2


async def test_a_persons_reply_goes_before_background_work_waiting_for_the_same_server(start, llm):
    """#68 item 7: waiting for a one-at-a-time server, the reply a person waits on is sent before
    a summary that was waiting first."""
    runtime = await start()
    llm.owned_by, llm.one_at_a_time, llm.chunk_delay_s = "me", True, 0.05
    llm.default = "The tide is out, and the gulls are loud on the sand bar this morning, Ann. " * 2
    await runtime.llm.probe()
    ann, bob = Chat(runtime, platform="telegram"), Chat(runtime, "bob", "Bob", "dm-bob", platform="telegram")
    first = asyncio.create_task(ann.say("good morning", on_text=shown_nowhere))
    while not llm.answering:
        await asyncio.sleep(0.01)
    summary = asyncio.create_task(runtime.llm.complete([{"role": "user", "content": "Summarize."}], background=True))
    await asyncio.sleep(0.05)
    await asyncio.gather(first, bob.say("and to you", on_text=shown_nowhere), summary)
    assert ["Summarize." in str(request["messages"]) for request in llm.requests] == [False, False, True]


TOOL = [{"type": "function", "function": {"name": "note", "description": "Note a fact.",
                                          "parameters": {"type": "object", "properties": {}}}}]


async def test_a_model_offered_tools_30_times_that_never_calls_one_is_said_in_one_warning(start, llm, caplog):
    """#68 item 8: a server that ignores tools lets the character say "I'll remember that" while
    nothing is saved; after 30 replies offered tools without one call, the owner is told once."""
    runtime = await start()
    with caplog.at_level(logging.WARNING):
        for n in range(31):
            await runtime.llm.complete([{"role": "user", "content": f"hello {n}"}], tools=TOOL)
            warned = [r for r in caplog.records if "called none" in r.getMessage()]
            assert len(warned) == (1 if n >= 29 else 0), n
    assert "--jinja" in warned[0].getMessage() and "tools = \"off\"" in warned[0].getMessage()


async def test_a_model_that_called_a_tool_once_is_never_warned_of(start, llm, caplog):
    runtime = await start()
    llm.add(tool_calls(("note", "{}")))
    with caplog.at_level(logging.WARNING):
        for n in range(40):
            await runtime.llm.complete([{"role": "user", "content": f"hello {n}"}], tools=TOOL)
    assert not [r for r in caplog.records if "called none" in r.getMessage()]


async def test_tools_auto_on_llama_cpp_pythons_server_answers_without_tools_and_says_why(start, llm, caplog):
    """#68 item 8: llama-cpp-python's server ignores tools sent without `tool_choice`, so a
    character told it has tools promised to remember and nothing was saved: with `tools = "auto"`
    it is offered none there (no prompt tokens spent on them), and the owner is told which servers
    call tools."""
    runtime = await start(tools="auto")
    llm.owned_by = "me"
    with caplog.at_level(logging.WARNING):
        await runtime.llm.probe()
    assert [r for r in caplog.records if "ignores tools" in r.getMessage() and "--jinja" in r.getMessage()]
    await Chat(runtime, platform="telegram").say("please remember that I am allergic to peanuts")
    assert "tools" not in llm.requests[-1]


async def test_tools_auto_on_llama_cpps_server_whose_model_template_takes_none_answers_without_them(
        start, llm, caplog):
    """llama.cpp's own server leaves tools out of the prompt without a word when its model's chat
    template takes none (SmolLM2's, measured: the same prompt tokens with tools and `tool_choice:
    required`), and says so at /props (`chat_template_caps.supports_tools`): they are offered none
    there, and the owner is told what serves them."""
    runtime = await start(tools="auto")
    llm.owned_by, llm.n_ctx, llm.template_takes_tools = "llamacpp", 8_192, False
    with caplog.at_level(logging.WARNING):
        await runtime.llm.probe()
    assert [r for r in caplog.records if "template takes no tools" in r.getMessage()
            and "--chat-template-file" in r.getMessage()]
    await Chat(runtime, platform="telegram").say("please remember that I am allergic to peanuts")
    assert "tools" not in llm.requests[-1] and runtime.llm.lanes.slots == 1


async def test_a_model_tiktoken_does_not_know_is_fitted_under_its_own_count_from_the_first_prompt(start, llm):
    """#68 item 9: SmolLM2's tokenizer counts 3–7 % above the cl100k one Keepsake falls back on, and
    llama-cpp-python's server sends no usage when streaming, so nothing corrects it: a prompt
    fitted exactly by that count left the reply less than its max_reply_tokens (the server ends
    the reply where its context ends). Counted with another model's tokenizer, a prompt is fitted
    10 % under until the server shows how it counts: every prompt leaves the reply its 200."""
    runtime = await start(model="smollm2", context_window=1_024, max_reply_tokens=200, tools="off")
    llm.model, llm.tokenizer_ratio, llm.python_n_ctx = "smollm2", 1.07, 1_024
    ann = Chat(runtime, platform="telegram")
    for n in range(12):
        await ann.memory(f"/memory add Fact number {n}: {LONG[:300]}")
    for n in range(6):
        llm.add(text(f"Answer {n}."))
        assert (await ann.say(f"{n}: {LONG}", on_text=shown_nowhere)).text == f"Answer {n}."
    assert all(usage["prompt_tokens"] + 200 <= 1_024 for usage in llm.usages)
    assert max(usage["prompt_tokens"] for usage in llm.usages) > 1_024 * 0.6  # the prompts were full


async def test_a_model_server_over_tls_is_verified_with_one_trust_store_read_once_a_process(
        tmp_path, clock, monkeypatch):
    """Hosted and self-hosted servers answer over HTTPS. The start-up questions, the chat and the
    voice client verify them as the openai client does by itself (the system's CAs, or the file
    SSL_CERT_FILE names), with one trust store read once a process; a server whose certificate
    no trusted authority signed gets no request."""
    ours, stranger = trustme.CA(), trustme.CA()
    ours.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    trust_store.cache_clear()
    reads = []  # each time a client of the openai package's HTTP library reads the trust store
    read = httpcore2.default_ssl_context
    monkeypatch.setattr(httpcore2, "default_ssl_context", lambda **how: reads.append(how) or read(**how))
    runtimes = []

    async def started(ca: trustme.CA) -> ScriptedLLM:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(tls)
        server = ScriptedLLM()
        server.owned_by, server.n_ctx = "llamacpp", 4_096  # llama.cpp's /props says 1 slot
        await server.start(tls)
        return server

    async def runtime_on(server: ScriptedLLM):
        raw = config_dict(server.base_url, tmp_path / f"k{len(runtimes)}.sqlite3", max_retries=0)
        raw["voice"] = {"transcription_model": "whisper-1"}
        runtimes.append(await build_runtime(await fit_to_server(parse_config(raw, tmp_path)), clock=clock))
        return runtimes[-1]

    trusted, unknown = await started(ours), await started(stranger)
    try:
        runtime = await runtime_on(trusted)
        assert runtime.turns.context_window == 4_096  # asked at start-up, over TLS
        await runtime.llm.probe()
        assert runtime.llm.lanes.slots == 1
        assert (await Chat(runtime).say("hello over TLS")).text == "Okay."
        assert await runtime.voice.probe() == []
        refused = await (Chat(await runtime_on(unknown))).say("hello?")
        assert refused.kind is Kind.ERROR and unknown.requests == []
        assert len(reads) == 1  # for both runtimes' chat and voice clients and start-up questions
    finally:
        for runtime in runtimes:
            await runtime.close()
        await trusted.stop()
        await unknown.stop()
        trust_store.cache_clear()  # the tests after read the machine's own
