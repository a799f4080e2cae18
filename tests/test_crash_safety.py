"""Crash safety: the bot process is killed with SIGKILL at 20 points of a scripted run — mid-turn,
right after a memory tool wrote, mid-summary, mid-rebuild — and started again each time.
Afterwards the database passes `PRAGMA integrity_check`, no turn is half saved, every message a
person sent is there, and summaries and the rebuild resume and finish."""

import asyncio
import os
import signal
import sqlite3
import sys
from contextlib import closing

import pytest

from tests.conftest import API_KEY_ENV, ROOT
from tests.fakes.llm_server import ScriptedLLM, hang, text, tool_calls
from tests.fakes.summarizer import extract, kind_of

FILLER = ("the lamp turned all night while the sea kept its own slow counsel against the rocks below, "
          "and the gulls argued over the harbour until the fog came in from the west again. ") * 3
KINDS = ("chat", "after-tool", "summary", "rebuild")


class Killer:
    """The model: answers chat, tool and summary calls, and hangs on the call chosen for the kill."""

    def __init__(self) -> None:
        self.target: tuple[str, int] | None = None
        self.seen = {kind: 0 for kind in KINDS}
        self.hung = asyncio.Event()
        self.sent_messages: set[str] = set()

    def arm(self, kind: str, nth: int) -> None:
        self.target, self.hung = (kind, nth), asyncio.Event()
        self.seen = dict.fromkeys(KINDS, 0)

    def __call__(self, body):
        kind = kind_of(body)
        messages = body["messages"]
        if kind == "chat":
            last_user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
            self.sent_messages.add(last_user)
            kind = "after-tool" if any(m["role"] == "tool" for m in messages) else "chat"
        else:
            kind = "rebuild" if self.target and self.target[0] == "rebuild" else "summary"
        self.seen[kind] += 1
        if self.target and self.target == (kind, self.seen[kind]):
            self.hung.set()
            return hang(120)
        if kind == "chat" and "remember" in messages[-1]["content"] and body.get("tools"):
            word = messages[-1]["content"].split("code word ")[1].split()[0]
            return tool_calls(("save_memory", {"content": f"Ann's code word is {word}"}))
        if kind == "chat" or kind == "after-tool":
            return text("Noted.")
        return text(extract(messages[-1]["content"]))


def config_file(tmp_path, llm: ScriptedLLM) -> str:
    path = tmp_path / "config.toml"
    path.write_text(f"""
[llm]
base_url = "{llm.base_url}"
api_key_env = "{API_KEY_ENV}"
model = "gpt-4o-mini"
context_window = 4096
max_retries = 0
timeout_s = 300

[storage]
path = "keepsake.sqlite3"

[[characters]]
name = "Mira"
persona = "You are Mira."
""")
    return str(path)


async def start(config: str, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), API_KEY_ENV: "sk-test"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--name", "Ann", "--config", config,
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)


def check_database(path, sent: set[str], recovered: bool) -> None:
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # every message a person sent (that reached the model) is stored
        stored = {row[0] for row in db.execute("SELECT content FROM messages WHERE role = 'user'")}
        assert sent <= stored
        # no turn half saved: a done turn has its reply, and every reply (an assistant message
        # other than the greeting a conversation starts with) belongs to a done turn
        assert db.execute("SELECT COUNT(*) FROM turns t LEFT JOIN messages m ON m.id = t.reply_message_id "
                          "WHERE t.status = 'done' AND m.id IS NULL").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM messages m WHERE role = 'assistant' AND NOT EXISTS "
                          "(SELECT 1 FROM turns t WHERE t.reply_message_id = m.id AND t.status = 'done') "
                          "AND m.pos > (SELECT MIN(pos) FROM messages f WHERE f.conversation_id = m.conversation_id)"
                          ).fetchone() == (0,)
        if recovered:  # after a start: killed turns are failed, and their memory writes are gone
            assert db.execute("SELECT COUNT(*) FROM turns WHERE status = 'running'").fetchone() == (0,)
            assert db.execute("SELECT COUNT(*) FROM memory_history j JOIN turns t ON t.id = j.turn_id "
                              "JOIN memories m ON m.id = j.memory_id WHERE t.status = 'failed' "
                              "AND j.action = 'add'").fetchone() == (0,)
    finally:
        db.close()


async def start_up_recovery(database, seconds: float = 30) -> None:
    """Wait until a starting bot has failed the turns a kill left running (its imports alone can
    take a second or two on a busy machine); check_database then tells whether it did."""
    for _ in range(int(seconds / 0.1)):
        with closing(sqlite3.connect(database)) as db:
            if db.execute("SELECT COUNT(*) FROM turns WHERE status = 'running'").fetchone() == (0,):
                return
        await asyncio.sleep(0.1)


@pytest.mark.timeout(420)
async def test_sigkill_at_20_points_loses_nothing_and_everything_resumes(tmp_path, llm):
    killer = Killer()
    llm.responder = killer
    config = config_file(tmp_path, llm)
    database = tmp_path / "keepsake.sqlite3"
    line_number = 0

    def lines(count: int) -> bytes:
        nonlocal line_number
        out = []
        for _ in range(count):
            line_number += 1
            if line_number % 5 == 0:
                out.append(f"line {line_number}: please remember my code word W{line_number} now")
            else:
                out.append(f"line {line_number}: {FILLER}")
        return ("\n".join(out) + "\n").encode()

    for point in range(20):
        kind, nth = KINDS[point % 4], 1 + (point // 4) % 3
        killer.arm(kind, nth)
        bot = await start(config, tmp_path)
        if database.exists():
            await start_up_recovery(database)  # the previous run's interrupted turn is undone
            check_database(database, killer.sent_messages, recovered=True)
        script = (b"/memory rebuild\n" if kind == "rebuild" else b"") + lines(20)
        bot.stdin.write(script)
        await bot.stdin.drain()
        try:
            await asyncio.wait_for(killer.hung.wait(), 60)
        except asyncio.TimeoutError:
            pytest.fail(f"kill point {point} ({kind} #{nth}) was never reached")
        bot.send_signal(signal.SIGKILL)
        await bot.wait()
        check_database(database, killer.sent_messages, recovered=False)

    # A last, undisturbed start: the rebuild resumes and finishes, summaries catch up.
    killer.arm("none", 0)
    bot = await start(config, tmp_path)
    bot.stdin.write(lines(3))
    await bot.stdin.drain()

    def settled() -> bool:
        db = sqlite3.connect(database)
        try:
            rebuilding = db.execute("SELECT COUNT(*) FROM rebuilds").fetchone()[0]
            answered = db.execute("SELECT COUNT(*) FROM messages WHERE content LIKE ?",
                                  (f"line {line_number}:%",)).fetchone()[0]
            return not rebuilding and answered == 1
        finally:
            db.close()

    for _ in range(300):
        if settled():
            break
        await asyncio.sleep(0.1)
    bot.stdin.write(b"/quit\n")
    await bot.stdin.drain()
    await asyncio.wait_for(bot.wait(), 30)
    check_database(database, killer.sent_messages, recovered=True)
    db = sqlite3.connect(database)
    assert db.execute("SELECT COUNT(*) FROM rebuilds").fetchone() == (0,)  # the rebuild finished
    assert db.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] > 0
    db.close()
