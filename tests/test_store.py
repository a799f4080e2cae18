"""The store's promises behind speed: a turn reads its window from memory, and that memory never
lags the database, whatever changed it; ids handed out in process never lose a message."""

import sqlite3
from dataclasses import astuple

from bot.models import IncomingMessage
from storage.base import MessageRow
from storage.sqlite_base import MESSAGE_COLUMNS, _RecentMessages
from tests.conftest import Chat
from tests.fakes.llm_server import text, tool_calls

END = 10**12


def messages_in_database(path, conversation_id: int, limit: int = 50) -> list[tuple]:
    """What a fresh connection reads: the truth the held window must match."""
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? "
                          "ORDER BY pos DESC LIMIT ?", (conversation_id, limit)).fetchall()


async def held_window(chat: Chat) -> list[tuple]:
    conversation = await chat.runtime.turns.conversation_for(chat.key)
    rows = await chat.runtime.store.recent_messages(conversation.id, END, 50)
    return [astuple(r) for r in rows]


async def assert_held_window_matches_the_database(chat: Chat) -> None:
    conversation = await chat.runtime.turns.conversation_for(chat.key)
    assert await held_window(chat) == messages_in_database(chat.runtime.store.path, conversation.id)


async def test_a_turn_reads_its_window_without_a_query_once_the_conversation_is_held(ann, llm):
    await ann.say("first message")
    statements: list[str] = []
    for db in (ann.runtime.store._reader, ann.runtime.store._writer):
        await db.set_trace_callback(statements.append)
    await ann.say("second message")
    reads_of_messages = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "messages" in s]
    assert reads_of_messages == []
    assert [row[6] for row in await held_window(ann)][:3] == ["Okay.", "second message", "Okay."]


async def test_the_held_window_matches_the_database_after_every_kind_of_change(runtime, llm):
    ann = Chat(runtime, chat_id="group", shared=True)
    bob = Chat(runtime, user="bob", name="Bob", chat_id="group", shared=True)
    for i in range(40):  # more than the 64 rows held per conversation, so the oldest leave it
        await ann.runtime.turns.handle(IncomingMessage(ann.key, ann.identity, "Ann", f"hello {i}", f"a{i}"))
    await assert_held_window_matches_the_database(ann)

    reply = await bob.say("hello from Bob")
    await runtime.turns.delivered(reply, ["sent-1", "sent-2"])  # a reply delivered in two parts
    await assert_held_window_matches_the_database(ann)

    await runtime.turns.message_edited(ann.key, "a39", "hello 39, edited")
    await assert_held_window_matches_the_database(ann)

    await runtime.turns.message_deleted(ann.key, "a38")
    await assert_held_window_matches_the_database(ann)

    llm.add(tool_calls(("save_memory", {"content": "Bob keeps bees"})), text("Noted, Bob."))
    reply = await bob.say("I keep bees")  # a turn with a tool: its row exists before the reply
    await assert_held_window_matches_the_database(ann)

    llm.add(text("Bees, then!"))
    await runtime.turns.regenerate(bob.key, bob.identity, reply.turn_id)  # the old reply goes
    await assert_held_window_matches_the_database(ann)

    await bob.press((await bob.memory("/forgetme")).buttons[0][0].action)
    await assert_held_window_matches_the_database(ann)
    assert not any(row[5] == "Bob" for row in await held_window(ann))


async def test_a_message_id_taken_by_another_process_is_retried_and_nothing_is_lost(ann, llm):
    await ann.say("before")
    conversation = await ann.runtime.turns.conversation_for(ann.key)
    with sqlite3.connect(ann.runtime.store.path) as other:  # e.g. a console on the same file
        next_id = other.execute("SELECT MAX(id) + 1 FROM messages").fetchone()[0]
        other.execute("INSERT INTO messages (id, conversation_id, pos, role, person_id, speaker_name, content, "
                      "tokens, created_at) VALUES (?, ?, ?, 'user', NULL, 'Other', 'from elsewhere', 2, 0)",
                      (next_id, conversation.id, 2 * next_id))
        next_turn = other.execute("SELECT MAX(id) + 1 FROM turns").fetchone()[0]
        other.execute("INSERT INTO turns (id, conversation_id, user_message_id, status, created_at) "
                      "VALUES (?, ?, ?, 'failed', 0)", (next_turn, conversation.id, next_id))
    reply = await ann.say("after")
    assert not reply.is_error
    contents = [row[6] for row in messages_in_database(ann.runtime.store.path, conversation.id)]
    assert contents[:3] == ["Okay.", "after", "from elsewhere"]


def test_the_held_messages_stay_within_their_character_budget_least_recently_used_leaving_first():
    held = _RecentMessages()
    held.MAX_CHARS = 10_000  # the real budget is 10 million characters; the rule is the same
    line = "x" * 100
    for conversation in range(1, 6):  # 5 conversations × 40 rows × 100 characters = 20,000
        held.fill(conversation, [MessageRow(conversation * 1000 + i, conversation, 2 * i, "user", 1, "Ann",
                                            line, 25, None, 0.0) for i in range(40, 0, -1)])
    assert held._chars <= 10_000
    assert held.newest(1, END, 10) is None  # the first conversation left first
    assert [r.id for r in held.newest(5, END, 2)] == [5040, 5039]  # the newest is still held


async def test_a_greeting_goes_into_the_held_window_only_when_it_was_stored(ann, llm):
    await held_window(ann)  # the empty conversation is now held
    await ann.runtime.turns.greet(ann.key, "Ann")
    await ann.runtime.turns.greet(ann.key, "Ann")  # not stored: the conversation has a message
    await assert_held_window_matches_the_database(ann)
    assert [row[3] for row in await held_window(ann)] == ["assistant"]
