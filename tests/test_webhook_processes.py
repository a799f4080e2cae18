"""Two real bot processes (`python -m bot`) on one PostgreSQL database, in webhook mode, fed the
way Telegram feeds a webhook behind a load balancer: each update POSTed with the secret header,
alternately to each process's port, the next one once the previous was acknowledged."""

import asyncio
import os
import socket
import sys

import aiohttp
import asyncpg
import pytest

from tests.conftest import API_KEY_ENV, ROOT, offers_memory_tools
from tests.fakes.llm_server import stall, text, tool_calls
from tests.fakes.summarizer import kind_of
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres import fresh_schema_url

ANN = 501
SECRET = "webhook-s3cret"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Process:
    """One bot process serving the webhook on its own port."""

    def __init__(self, name: str, tmp_path, llm, telegram: FakeTelegram, storage_url: str):
        self.name, self.port, self.metrics_port = name, free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}/telegram"
        self.config = tmp_path / f"{name}.toml"
        self.config.write_text(f"""
[llm]
base_url = "{llm.base_url}"
api_key_env = "{API_KEY_ENV}"
model = "gpt-4o-mini"
max_retries = 1

[storage]
url = "{storage_url}"

[telegram]
base_url = "{telegram.base_url}"
mode = "webhook"
webhook_url = "https://bot.example.com/telegram"
listen = "127.0.0.1"
port = {self.port}
secret_token_env = "KEEPSAKE_WEBHOOK_SECRET"

[metrics]
port = {self.metrics_port}

[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"
""")
        self.tmp_path, self.telegram = tmp_path, telegram
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MIRA_TELEGRAM_TOKEN": self.telegram.token,
               API_KEY_ENV: "sk-test-not-a-real-key", "KEEPSAKE_WEBHOOK_SECRET": SECRET,
               "KEEPSAKE_LOG_LEVEL": "INFO"}
        log = open(self.tmp_path / f"{self.name}.log", "ab")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(self.config), cwd=self.tmp_path, env=env,
            stdout=log, stderr=log)
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"http://127.0.0.1:{self.port}/healthz") as health:
                        if health.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} never served /healthz: {self.log()[-2000:]}")

    async def metrics(self) -> dict[str, float]:
        """What /metrics says: each sample line's name (with labels) and value."""
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as page:
                lines = (await page.text()).splitlines()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if not line.startswith("#")}

    def log(self) -> str:
        return (self.tmp_path / f"{self.name}.log").read_text()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except asyncio.TimeoutError:
                self.process.kill()
                raise AssertionError(f"{self.name} did not stop on SIGTERM: {self.log()[-2000:]}")

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()


@pytest.fixture
async def storage_url():
    schemas = fresh_schema_url()
    yield await anext(schemas)
    await anext(schemas, None)


@pytest.fixture
async def database(storage_url):
    url, schema = storage_url.split("?schema=")
    connection = await asyncpg.connect(url, server_settings={"search_path": schema})
    yield connection
    await connection.close()


@pytest.mark.timeout(180)
async def test_two_webhook_processes_on_one_postgresql_database_act_as_one_bot(tmp_path, llm, telegram, storage_url,
                                                                             database):
    a, b = (Process(name, tmp_path, llm, telegram, storage_url) for name in ("a", "b"))
    await asyncio.gather(a.start(), b.start())  # two processes migrating one new database at once
    processes = [a, b]
    summaries_written: list[int] = []
    ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    try:
        assert len(telegram.calls_to("setWebhook")) == 2
        assert all(c["secret_token"] == SECRET for _, c in telegram.calls if _ == "setWebhook")

        async def say(words: str, process: Process) -> int:
            sent = telegram.send(dm, ann, words)
            await telegram.post_waiting_updates(process.url, SECRET)
            return sent

        def chat_requests():
            return [r for r in llm.requests if kind_of(r) == "chat"]

        # One person's messages alternate between the processes: answered in order, once each.
        llm.responder = respond
        for n in range(8):
            await say(f"message {n}", processes[n % 2])
        await until(lambda: database.fetchval("SELECT COUNT(*) = 8 FROM messages WHERE role = 'assistant'"))
        assert [r["messages"][-1]["content"] for r in chat_requests()] == [f"message {n}" for n in range(8)]
        stored = await database.fetch("SELECT role, content FROM messages ORDER BY pos")
        assert [row["role"] for row in stored] == ["user", "assistant"] * 8
        assert [row["content"] for row in stored[::2]] == [f"message {n}" for n in range(8)]

        # Each process reports its own turns, model calls and waits for the conversation.
        seen = [await a.metrics(), await b.metrics()]
        assert sum(m['keepsake_turns_total{outcome="answered"}'] for m in seen) == 8
        assert sum(m["keepsake_model_seconds_count"] for m in seen) == 8
        assert all(m["keepsake_model_errors_total"] == 0 and m["keepsake_turn_wait_seconds_count"] == 4 for m in seen)
        assert "keepsake_summary_jobs_pending" in seen[0]

        # A memory saved through A is in the very next prompt B builds.
        await say("/memory add I keep bees on the roof", a)
        await telegram.wait_for(lambda: any("Saved" in m.text for m in telegram.bot_messages(ANN)))
        await say("what do I keep?", b)
        await telegram.wait_for(lambda: chat_requests()[-1]["messages"][-1]["content"] == "what do I keep?")
        assert "I keep bees on the roof" in llm.prompt_text(llm.requests.index(chat_requests()[-1]))

        # Learn from chat turned off through B is honoured by A.
        await say("/memory learning off", b)
        await telegram.wait_for(lambda: any("won't learn" in m.text.lower() or "off" in m.text.lower()
                                            for m in telegram.bot_messages(ANN)[-1:]))
        await say("and now?", a)
        await telegram.wait_for(lambda: chat_requests()[-1]["messages"][-1]["content"] == "and now?")
        last = chat_requests()[-1]
        assert "bees" not in str(last["messages"]) and not offers_memory_tools(last)
        await say("/memory learning on", a)

        # Each summary batch is summarized once, whichever process delivered the turn.
        for n in range(8, 34):
            await say(f"small talk {n}", processes[n % 2])
        await until(lambda: database.fetchval("SELECT COUNT(*) >= 1 FROM summaries"))  # a batch is written
        # (every batch asked of the model is counted once both processes have stopped, below)

        # SIGKILL A mid-reply. B, waiting behind A's turn with a later message, finds A gone at
        # once: the killed turn's memory write is undone, the cut-off message is answered again
        # first, in place of the partial reply, and only then the later message, whose prompt
        # holds that answer.
        await say("I'm moving to Oslo", a)
        await until(lambda: database.fetchval("SELECT COUNT(*) = 1 FROM memories WHERE content LIKE '%Oslo%'"))
        partial_reply = "SELECT partial_message_id FROM turns WHERE status = 'running' AND partial_message_id IS NOT NULL"
        await until(lambda: database.fetchval(partial_reply))  # the reply streams, and A noted where it shows
        partial = int(await database.fetchval(partial_reply))
        assert telegram.message(ANN, partial).text.startswith("Oslo is lovely")
        await a.kill()
        await say("are you still there?", b)
        await telegram.wait_for(lambda: any(m.text == "Still here." for m in telegram.bot_messages(ANN)), timeout=10)
        assert telegram.message(ANN, partial).text == "Moving is exciting."  # answered again before
        later = next(r for r in chat_requests() if r["messages"][-1]["content"] == "are you still there?")
        assert {"role": "assistant", "content": "Moving is exciting."} in later["messages"]
        assert await database.fetchval("SELECT array_agg(status ORDER BY id) FROM turns WHERE user_message_id = "
                                       "(SELECT id FROM messages WHERE content = $1)", "I'm moving to Oslo") == \
            ["failed", "done"]
        assert await database.fetchval("SELECT COUNT(*) FROM memories WHERE content LIKE '%Oslo%'") == 1  # not 2
        # Nothing answered twice (the last reply shows while it streams: its turn ends just after).
        await until(lambda: database.fetchval("SELECT COUNT(*) = 0 FROM turns WHERE status = 'running'"))
        assert await database.fetchval("SELECT COUNT(*) FROM turns WHERE status = 'done'") == \
            await database.fetchval("SELECT COUNT(*) FROM messages WHERE role = 'user'")
        for process in processes:
            await process.stop()
        summaries_written.append(await database.fetchval("SELECT COUNT(*) FROM summaries"))
    finally:
        for process in processes:
            await process.stop()
    # Both processes have stopped: whatever batch either would ever ask for has been asked.
    batches = [r for r in llm.requests if kind_of(r) == "batch"]
    assert len(batches) == summaries_written[0] >= 1
    assert len({str(r["messages"][1:]) for r in batches}) == len(batches)  # never the same batch twice


STALLED: list[bool] = []


def partial_reply_to(telegram: FakeTelegram, message_id: int) -> int:
    """The bot's first message after `message_id` (where the cut-off reply streamed)."""
    return next(m.message_id for m in telegram.bot_messages(ANN) if m.message_id > message_id)


def respond(body: dict):
    """The model: summaries get the default answer; "Oslo" saves a memory, then stalls mid-reply."""
    if kind_of(body) != "chat":
        return None
    last = body["messages"][-1]
    if last["role"] == "tool" and not STALLED:
        STALLED.append(True)
        return stall("Oslo is lovely in spring, and the fjords " * 3, at=0.5)
    if last["role"] == "tool":
        return text("Moving is exciting.")
    if last["content"] == "I'm moving to Oslo":
        return tool_calls(("save_memory", {"content": "Ann is moving to Oslo", "scope": "global"}))
    if last["content"] == "are you still there?":
        return text("Still here.")
    return text("Okay.", delay=0.1)


async def until(check, timeout: float = 30.0) -> None:
    """Wait until an async check (a database query) comes back true."""
    for _ in range(int(timeout / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the database never showed what the test waited for")
