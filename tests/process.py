"""Running the real `python -m bot` process in a test: its config (SPEC section 10), starting
and stopping it, and reading the fake Telegram's answers to a message."""

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from contextlib import closing

from tests.conftest import API_KEY_ENV, ROOT
from tests.fakes.telegram_server import FakeTelegram


def llm_table(llm) -> str:
    """A config's [llm] table for the tests' scripted model server."""
    return f"""
[llm]
base_url = "{llm.base_url}"
api_key_env = "{API_KEY_ENV}"
model = "gpt-4o-mini"
"""


def mira_config(llm, tables: str = "", *, telegram=None, character: str = "") -> str:
    """A config as SPEC 10 writes it, for `python -m bot`: the scripted model, SQLite, Mira (her
    card, and `character`'s keys) on Telegram when `telegram` is given, else on Discord; with
    `tables` (TOML) besides."""
    platform = f'\n[telegram]\nbase_url = "{telegram.base_url}"\n' if telegram is not None else ""
    token = 'telegram_token_env = "MIRA_TELEGRAM_TOKEN"' if telegram is not None else \
        'discord_token_env = "MIRA_DISCORD_TOKEN"'
    return llm_table(llm) + f"""max_retries = 0

[storage]
url = "sqlite:///keepsake.sqlite3"
{platform}
{tables}

[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
{character}
{token}
"""


@contextlib.asynccontextmanager
async def bot_running(tmp_path, config: str, **env: str):
    """`python -m bot` with this config text and these environment variables (besides the model's
    key), logging at INFO, stopped (exit status 0 checked) when the block ends; a fake Discord is
    reached through SITECUSTOMIZE when KEEPSAKE_TEST_DISCORD_BASE is given."""
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "config.toml").write_text(config)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", str(tmp_path / "config.toml"), cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{hooks}:{ROOT}", API_KEY_ENV: "sk-test-not-a-real-key",
             "KEEPSAKE_LOG_LEVEL": "INFO", **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        yield process
    finally:
        if process.returncode is None:
            await stop_bot(process)


async def logged(process, words: str, timeout: float = 30.0) -> str:
    """Wait until the process logs a line holding `words` (its stderr, read as it comes): a
    positive signal that it decided something, where a sleep would only hope so."""
    async def read() -> str:
        while line := (await process.stderr.readline()).decode():
            if words in line:
                return line
        raise AssertionError(f"the process ended without logging {words!r}")
    return await asyncio.wait_for(read(), timeout)


def write_config(tmp_path, llm, telegram) -> str:
    config = tmp_path / "config.toml"
    config.write_text(llm_table(llm) + f"""max_retries = 1

[storage]
path = "data/keepsake.sqlite3"

[telegram]
base_url = "{telegram.base_url}"

[[characters]]
name = "Mira"
card = "{ROOT / 'characters' / 'mira.json'}"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"
""")
    return str(config)


async def start_bot(config: str, telegram: FakeTelegram, tmp_path, log_level: str = "DEBUG"):
    """The bot process; its stderr is a pipe read when it stops, so a long run logs at INFO (a
    full pipe would block the process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MIRA_TELEGRAM_TOKEN": telegram.token,
           API_KEY_ENV: "sk-test-not-a-real-key", "KEEPSAKE_LOG_LEVEL": log_level}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--config", config, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    polls = len(telegram.calls_to("getUpdates"))
    await telegram.wait_for(lambda: len(telegram.calls_to("getUpdates")) > polls, timeout=30)
    return process


async def stop_bot(process) -> str:
    process.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()[-2000:]
    return err.decode()


def after(telegram: FakeTelegram, chat_id: int, message_id: int):
    return [m for m in telegram.bot_messages(chat_id) if m.message_id > message_id]


async def answer_to(telegram: FakeTelegram, chat_id: int, message_id: int):
    return (await telegram.wait_for(lambda: after(telegram, chat_id, message_id), timeout=30))[0]


async def final_reply_to(telegram: FakeTelegram, chat_id: int, message_id: int):
    """The character's reply once streamed whole: its last text message carries the Regenerate
    button. A spoken reply's voice note (SPEC 16) may follow it at once, and carries none."""
    def final():
        return [m for m in after(telegram, chat_id, message_id) if m.buttons()]
    return (await telegram.wait_for(final, timeout=30))[-1]


# Loaded by a bot process whose PYTHONPATH holds it: with KEEPSAKE_TEST_NOFILE, the open-file
# limit a service runs under (systemd's 1,024); points discord.py at the fake Discord; and
# with KEEPSAKE_TEST_WEB ("name=address,…;port") hands the safe egress of `read` (SPEC 18) a
# resolver of test names and dials their public address on loopback (tests/fakes/web_pages.py),
# as tests/test_egress.py does in process: the guard still checks every address.
SITECUSTOMIZE = '''
import os
if os.environ.get("KEEPSAKE_TEST_NOFILE"):
    import resource
    files = int(os.environ["KEEPSAKE_TEST_NOFILE"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
if os.environ.get("KEEPSAKE_TEST_DISCORD_BASE"):
    import discord, yarl
    base = os.environ["KEEPSAKE_TEST_DISCORD_BASE"]
    discord.http.Route.BASE = base + "/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(base.replace("http", "ws") + "/gateway")
if os.environ.get("KEEPSAKE_TEST_WEB"):
    import bot.tools.egress as egress
    listed, _, web_port = os.environ["KEEPSAKE_TEST_WEB"].partition(";")
    names = dict(pair.split("=") for pair in listed.split(","))
    public = set(names.values())

    async def resolve(host, port):
        if host not in names:
            raise OSError(f"no test name {host}")
        return [names[host]]

    def dial(address, port):
        return ("127.0.0.1", int(web_port)) if address in public else (address, port)

    built = egress.Egress.__init__
    egress.Egress.__init__ = lambda self, max_bytes, deny_domains=(), **given: built(
        self, max_bytes, deny_domains, **{**given, "resolve": resolve, "dial": dial})
'''


async def partial_reply_noted(telegram: FakeTelegram, database) -> None:
    """Until the bot has noted where its partial reply shows (right after sending it): a kill from
    then on leaves a reply to answer again in place."""
    def noted() -> bool:
        with closing(sqlite3.connect(database)) as db:
            return db.execute("SELECT COUNT(*) FROM turns WHERE status = 'running' "
                              "AND partial_message_id IS NOT NULL").fetchone()[0] == 1
    await telegram.wait_for(noted)
