"""SPEC section 4 — the conversation summary in three tiers, with its numbers."""

import asyncio

from bot.memory.summaries import batch_is_due
from tests.conftest import Chat
from tests.fakes.llm_server import cut_at_length, hang, status, text
from tests.fakes.summarizer import extractive, kind_of


async def conversation_of(chat: Chat) -> int:
    return (await chat.runtime.cast.conversation_for(chat.key)).id


async def stored(chat: Chat, count: int, tokens: int = 5, prefix: str = "message") -> int:
    """Write `count` messages straight to the store (no turns), as a long history would be."""
    store = chat.runtime.store
    conversation = await conversation_of(chat)
    person = await chat.person_id()
    for i in range(count):
        await store.conversations.add_user_message(conversation, person, chat.name, f"{prefix} {i}", tokens, None)
    return conversation


def summary_calls(llm, kind: str | None = None) -> list[dict]:
    return [r for r in llm.requests if kind_of(r) != "chat" and (kind is None or kind_of(r) == kind)]


async def tiers(chat: Chat) -> dict[str, int]:
    entries = await chat.runtime.store.summaries.summaries(await conversation_of(chat))
    return {tier: sum(e.tier == tier for e in entries) for tier in ("recent", "merged", "long_term")}


async def test_no_batch_at_9_pending_messages_and_a_batch_at_10(ann, llm):
    assert not batch_is_due(9, 45) and batch_is_due(10, 50)
    llm.responder = extractive
    conversation = await stored(ann, 50 + 9)  # the window holds 50 (each message here takes two places)
    await ann.runtime.summarizer.summarize(conversation)
    assert summary_calls(llm) == []
    await stored(ann, 1)  # the window's start moves on 4 places: 49 messages, and 11 pending
    await ann.runtime.summarizer.summarize(conversation)
    assert len(summary_calls(llm, "batch")) == 1
    entry, = await ann.runtime.store.summaries.summaries(conversation)
    assert entry.tier == "recent" and (entry.first_pos // 2, entry.last_pos // 2) == (1, 11)


async def test_a_batch_starts_at_2000_pending_tokens(ann, llm):
    llm.responder = extractive
    conversation = await stored(ann, 20 + 3, tokens=500)  # the window holds 20 × 500 = 10,000 tokens
    await ann.runtime.summarizer.summarize(conversation)
    assert summary_calls(llm) == []  # 3 pending messages, 1,500 tokens
    await stored(ann, 1, tokens=500)
    await ann.runtime.summarizer.summarize(conversation)
    assert len(summary_calls(llm, "batch")) == 1  # 4 pending, 2,000 tokens


async def test_a_batch_takes_the_oldest_at_most_40_messages(ann, llm):
    llm.responder = extractive
    conversation = await stored(ann, 50 + 45)
    await ann.runtime.summarizer.summarize(conversation)
    batch, = summary_calls(llm, "batch")  # the 5 left over are fewer than 10: they wait
    assert batch["messages"][1]["content"].splitlines()[0] == "Ann: message 0"
    assert len(batch["messages"][1]["content"].splitlines()) == 40
    assert "Not yet summarized: 55 messages." in (await ann.memory("/memory summary")).text


async def test_a_batch_takes_at_most_6000_tokens(ann, llm):
    llm.responder = extractive
    conversation = await stored(ann, 20, tokens=500)
    await stored(ann, 20, tokens=500)  # 20 would make the window's 10,000 tokens: it starts on a step, with 19
    await ann.runtime.summarizer.summarize(conversation)
    sizes = [len(r["messages"][1]["content"].splitlines()) for r in summary_calls(llm, "batch")]
    assert sizes == [12, 9]  # 12 × 500 = 6,000 tokens, then the rest


async def summarize_every_10(chat: Chat, batches: int) -> None:
    """Conversation grows 10 messages at a time, summarized each time: one Recent per 10."""
    conversation = await stored(chat, 50)
    for _ in range(batches):
        await stored(chat, 10)
        await chat.runtime.summarizer.summarize(conversation)


async def test_the_4th_recent_summary_makes_a_merged_one(ann, llm):
    llm.responder = extractive
    await summarize_every_10(ann, 3)
    conversation = await conversation_of(ann)
    assert await tiers(ann) == {"recent": 3, "merged": 0, "long_term": 0}
    await stored(ann, 10)
    await ann.runtime.summarizer.summarize(conversation)
    assert await tiers(ann) == {"recent": 0, "merged": 1, "long_term": 0}
    merged, = await ann.runtime.store.summaries.summaries(conversation)
    assert (merged.first_pos // 2, merged.last_pos // 2) == (1, 41)  # it records its range (the window
    # holds 49 then: its start moves on 4 places at a time, two of these messages)


async def test_the_4th_merged_summary_folds_into_long_term(ann, llm):
    llm.responder = extractive
    conversation = await stored(ann, 50 + 4 * 4 * 40)
    await ann.runtime.summarizer.summarize(conversation)
    assert await tiers(ann) == {"recent": 0, "merged": 0, "long_term": 1}
    assert len(summary_calls(llm, "fold")) == 1
    long_term, = await ann.runtime.store.summaries.summaries(conversation)
    assert (long_term.first_pos // 2, long_term.last_pos // 2) == (1, 640)


async def test_long_term_is_compacted_above_110_percent_of_8000_tokens_keeping_corrections_verbatim(ann, llm):
    llm.responder = extractive
    conversation = await stored(ann, 1)
    correction = '[verbatim] Ann: "Never call me Annie, my name is Ann."'
    sections = ["- early event one!", correction, "- early event two!", "- late event!"]
    store, summarizer = ann.runtime.store, ann.runtime.summarizer
    await store.summaries.write_summary(conversation, 0, "long_term", "\n\n".join(sections), 8_800, 2, 2, [])
    await summarizer.consolidate(conversation, 0)
    assert summary_calls(llm, "compact") == []  # 8,800 is not above 110 % of 8,000

    long_term, = await store.summaries.summaries(conversation)
    await store.summaries.write_summary(conversation, 0, "long_term", long_term.content, 8_801, 2, 2, [long_term.id])
    await summarizer.consolidate(conversation, 0)
    assert len(summary_calls(llm, "compact")) == 1
    compacted, = await store.summaries.summaries(conversation)
    assert compacted.content.startswith("- Period overview: early event one!")
    assert correction in compacted.content.splitlines()  # dropped by the model, kept by the code
    assert compacted.content.endswith("- late event!")  # the later half stays as it was


async def test_on_a_2048_token_server_summaries_merge_fewer_at_once_and_never_outgrow_its_context(
        make_config, clock, llm):
    """Measured on llama.cpp's server with `-c 2048`: four Recent summaries and the instructions
    to merge them made a 2,171-token prompt, refused — and refused again on every retry, so the
    conversation's summary stopped for good. On such a server a merge reads what fits in three
    fifths of its context (here 2 of 4 at once), and an answer is asked for within a fifth of it;
    no summary call is refused."""
    from bot.runtime import build_runtime

    runtime = await build_runtime(make_config(context_window=2_048, max_reply_tokens=60), clock=clock)
    try:
        llm.n_ctx = 2_048  # as llama.cpp refuses a longer prompt
        long_summary = "- The lamp was lit at dusk and Ann counted the boats coming in. " * 30  # ~450 tokens
        llm.responder = lambda body: text(long_summary) if kind_of(body) != "chat" else None
        ann = Chat(runtime)
        conversation = await stored(ann, 50)
        for _ in range(4):
            await stored(ann, 10)
            await runtime.summarizer.summarize(conversation)
        assert await tiers(ann) == {"recent": 2, "merged": 1, "long_term": 0}
        assert llm.refused_for_length == 0 and len(summary_calls(llm, "merge")) == 1
        assert all(request["max_tokens"] <= 2_048 // 5 for request in summary_calls(llm))
    finally:
        await runtime.close()


async def test_every_turn_sends_the_summary_long_term_then_merged_then_recent_oldest_first(ann, llm):
    conversation = await stored(ann, 1)
    store = ann.runtime.store
    await store.summaries.write_summary(conversation, 0, "recent", "RECENT-B", 3, 30, 31, [])
    await store.summaries.write_summary(conversation, 0, "recent", "RECENT-A", 3, 20, 21, [])
    await store.summaries.write_summary(conversation, 0, "merged", "MERGED", 3, 10, 19, [])
    await store.summaries.write_summary(conversation, 0, "long_term", "LONG-TERM", 3, 1, 9, [])
    await ann.say("hello")
    prompt = llm.prompt_text()
    order = [prompt.index(part) for part in ("LONG-TERM", "MERGED", "RECENT-A", "RECENT-B")]
    assert order == sorted(order)
    assert prompt.index("RECENT-B") < prompt.index("hello")


async def test_summarizing_starts_only_after_the_reply_was_delivered(ann, llm):
    llm.responder = extractive
    await stored(ann, 60)
    reply = await ann.say("one more")
    await ann.runtime.summarizer.idle()  # had the turn started summarizing, this would wait for it
    assert summary_calls(llm) == []
    await ann.runtime.core.conversation.delivered(reply, [])
    await ann.runtime.summarizer.idle()
    assert len(summary_calls(llm, "batch")) == 1


async def test_a_reply_is_delivered_while_the_summarizers_call_still_hangs(ann, llm):
    await stored(ann, 60)
    llm.add(text("first reply"), hang(30))  # the summary call hangs
    reply = await ann.say("hello")
    await ann.runtime.core.conversation.delivered(reply, [])
    while len(llm.requests) < 2:
        await asyncio.sleep(0.01)
    second = await asyncio.wait_for(ann.say("are you there?"), timeout=3)
    assert second.text == "Okay."
    assert kind_of(llm.requests[1]) == "batch"


async def test_a_failed_summary_keeps_its_messages_pending_and_succeeds_on_retry(ann, llm, clock):
    conversation = await stored(ann, 60)
    llm.add(status(500), status(500))  # both attempts of the first summary call fail
    await ann.runtime.summarizer.summarize(conversation)
    state = await ann.runtime.store.summaries.summary_state(conversation)
    assert state.summarized_pos == 0 and state.failures == 1 and state.retry_at == clock.now + 60
    assert await ann.runtime.store.summaries.summaries(conversation) == []

    llm.responder = extractive
    await ann.runtime.summarizer.retry_due()  # not due yet
    await ann.runtime.summarizer.idle()
    assert len(summary_calls(llm, "batch")) == 2
    clock.now += 61
    await ann.runtime.summarizer.retry_due()
    await ann.runtime.summarizer.idle()
    state = await ann.runtime.store.summaries.summary_state(conversation)
    assert state.summarized_pos > 0 and state.failures == 0 and state.retry_at is None


async def test_a_summary_cut_at_its_length_limit_is_kept_to_its_last_sentence(ann, llm):
    """#68: a summary the server stopped at max_tokens ("… and Ann said she") was stored as the
    summary of its messages; it is kept up to its last whole sentence."""
    conversation = await stored(ann, 60)
    llm.add(cut_at_length("Ann talked about the lighthouse lamp and the winter stores. Mira promised to "
                          "check the oil. Then Ann said she"))
    await ann.runtime.summarizer.summarize(conversation)
    entry, = await ann.runtime.store.summaries.summaries(conversation)
    assert entry.content == ("Ann talked about the lighthouse lamp and the winter stores. Mira promised to "
                             "check the oil.")


async def test_a_failed_summarys_backoff_holds_against_the_replies_that_follow(ann, llm, clock):
    """#68: the backoff was logged but not kept — every delivered reply tried the summary again
    (13 attempts in 32 s against a real server). Before its retry time, a reply tries none."""
    conversation = await stored(ann, 60)
    llm.add(status(500), status(500))
    await ann.runtime.summarizer.summarize(conversation)
    attempts = len(summary_calls(llm, "batch"))
    for n in range(5):
        reply = await ann.say(f"and {n}?")
        await ann.runtime.core.conversation.delivered(reply, [])
        await ann.runtime.summarizer.idle()
    assert len(summary_calls(llm, "batch")) == attempts  # none before the 60 s are over
    llm.responder = extractive
    clock.now += 61
    reply = await ann.say("and now?")
    await ann.runtime.core.conversation.delivered(reply, [])
    await ann.runtime.summarizer.idle()
    assert (await ann.runtime.store.summaries.summary_state(conversation)).summarized_pos > 0


async def test_memory_summary_shows_the_tiers_and_how_many_messages_are_not_yet_summarized(ann, llm):
    llm.responder = extractive
    conversation = await stored(ann, 1, prefix="My sister is Kari!")
    await stored(ann, 62)
    await ann.runtime.summarizer.summarize(conversation)
    view = (await ann.memory("/memory summary")).text
    assert "[Recent summary] S1 · messages 1–13" in view
    assert "- Ann: My sister is Kari! 0" in view
    assert "Not yet summarized: 50 messages." in view  # 63 stored, 13 summarized


async def test_an_edited_summary_entry_is_kept_as_the_person_wrote_it(ann, llm):
    llm.responder = extractive
    await summarize_every_10(ann, 1)
    conversation = await conversation_of(ann)
    entry, = await ann.runtime.store.summaries.summaries(conversation)
    edited = await ann.memory(f"/memory summary edit S{entry.id} Ann and Mira agreed to meet at the pier at 9.")
    assert edited.ok, edited.text
    assert "Ann and Mira agreed to meet at the pier at 9." in (await ann.memory("/memory summary")).text
    for _ in range(3):
        await stored(ann, 10)
        await ann.runtime.summarizer.summarize(conversation)  # the 4th recent → merged
    merged, = await ann.runtime.store.summaries.summaries(conversation)
    assert merged.tier == "merged"
    assert "[verbatim] Ann and Mira agreed to meet at the pier at 9." in merged.content


async def test_a_verbatim_line_the_model_made_up_is_not_kept_as_one_and_the_rules_example_goes(ann, llm):
    """Seen with SmolLM2: the rules' own example came back as a [verbatim] line, and every merge
    after would have kept it for good. A [verbatim] line counts only where its words were said."""
    conversation = await stored(ann, 3, prefix="the goats")
    await stored(ann, 1, prefix="don't call me Annie!")
    await stored(ann, 56, prefix="more about the goats")  # the first 10 are summarized: Annie's among them
    llm.add(text('- Ann talked about the goats.\n[verbatim] Name: "their exact words"\n'
                 '[verbatim] Mira: "The sheep\'s cough never stopped."\n'
                 '[verbatim] Ann: "Don\'t call me Annie"'))
    await ann.runtime.summarizer.summarize(conversation)
    entry, = await ann.runtime.store.summaries.summaries(conversation)
    assert entry.content.splitlines() == [
        "- Ann talked about the goats.",
        'Mira: "The sheep\'s cough never stopped."',  # kept, as an ordinary line
        '[verbatim] Ann: "Don\'t call me Annie"']  # her words as she said them: kept for good


async def test_summary_edit_checks_its_input(ann):
    assert "is not a summary entry number" in (await ann.memory("/memory summary edit x hello")).text
    assert "There is no summary entry S99" in (await ann.memory("/memory summary edit 99 hello")).text
    assert "missing" in (await ann.memory("/memory summary edit 99")).text


async def test_a_fact_from_message_5_is_still_in_the_prompt_at_message_300_and_the_prompt_stays_bounded(ann, llm):
    llm.responder = extractive
    sizes = {}
    for n in range(1, 301):
        line = "Remember this! My sister's name is Kari and she lives in Tromsø!" if n == 5 else \
            f"Small talk number {n} about the weather and the sea and the lamp."
        reply = await ann.say(line)
        await ann.runtime.core.conversation.delivered(reply, [])
        await ann.runtime.summarizer.idle()
        if n in (100, 200, 300):
            turn = await ann.runtime.store.turns.latest_turn(await conversation_of(ann))
            sizes[n] = turn.receipt["tokens"]["total"]
    last_turn = [r for r in llm.requests if kind_of(r) == "chat"][-1]
    prompt = "\n".join(m["content"] for m in last_turn["messages"])
    assert "My sister's name is Kari and she lives in Tromsø!" in prompt
    assert "Small talk number 5 " not in prompt
    assert max(sizes.values()) < 25_000
    assert sizes[300] < 1.2 * sizes[100]


async def test_the_summary_view_numbers_messages_within_the_conversation(runtime, llm):
    llm.responder = extractive
    other = Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")
    await stored(other, 25)  # another conversation's messages come first in the file
    ann = Chat(runtime)
    conversation = await stored(ann, 50 + 10)  # 11 pending: the window's start moves on 4 places at a time
    await runtime.summarizer.summarize(conversation)
    assert "[Recent summary] S1 · messages 1–11" in (await ann.memory("/memory summary")).text
