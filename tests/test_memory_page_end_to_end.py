"""SPEC 21 "It holds against the open internet" and "Named, not silent" on the real `python -m
bot` over the Telegram fake, where #60 found them broken: 1,100 half-open connections to the page
under the open-file limit a service runs with (1,024) never stop the bot, and a `[web] port` that
is taken is one ERROR naming it, with `/memory page` saying the page is not available. And
"rendering never stalls the bot's turns": the page is served by a process of its own (#67)."""

import asyncio
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.fakes.llm_server import text
from tests.process import answer_to, bot_running, final_reply_to, logged, mira_config

ANN = 841


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def half_open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection that starts a request and never finishes its headers (None: refused at once)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: keepsake\r\nX-Slow: ")
        await writer.drain()
        return reader, writer
    except OSError:
        return None


@pytest.mark.timeout(180)
async def test_1100_half_open_connections_to_the_page_never_stop_the_bot_and_the_log_stays_small(
        tmp_path, llm, telegram):
    port = free_port()
    config = mira_config(llm, f"[web]\nport = {port}\n", telegram=telegram)
    async with bot_running(tmp_path, config, MIRA_TELEGRAM_TOKEN=telegram.token, KEEPSAKE_TEST_NOFILE="1024") as bot:
        logged_bytes = 0

        async def drain_log() -> None:  # read as it comes, so a flood of lines would show (and never block)
            nonlocal logged_bytes
            while chunk := await bot.stderr.read(65536):
                logged_bytes += len(chunk)
        draining = asyncio.create_task(drain_log())
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        await final_reply_to(telegram, ANN, telegram.send(dm, ann, "hello"))
        before = logged_bytes
        held = [c for c in await asyncio.gather(*[half_open(port) for _ in range(1_100)]) if c is not None]

        llm.add(text("Still here, Ann."))
        began = time.monotonic()
        reply = await final_reply_to(telegram, ANN, telegram.send(dm, ann, "are you there?"))
        assert reply.text == "Still here, Ann." and time.monotonic() - began < 10
        answer = await answer_to(telegram, ANN, telegram.send(dm, ann, "/memory page"))
        assert f"http://127.0.0.1:{port}/open/" in answer.text  # the page's own link still handed out

        # the unfinished requests are closed by the read deadline (10 s), not held for ever
        ended = await asyncio.wait_for(asyncio.gather(*[reader.read() for reader, _ in held],
                                                      return_exceptions=True), 30)
        assert all(end == b"" or isinstance(end, OSError) for end in ended)
        assert logged_bytes - before < 1_000_000
        for _, writer in held:
            writer.close()
        draining.cancel()
        await asyncio.gather(draining, return_exceptions=True)


@pytest.mark.timeout(120)
async def test_a_taken_web_port_is_one_error_naming_it_and_memory_page_says_the_page_is_not_available(
        tmp_path, llm, telegram):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()  # as a newcomer's llama.cpp server holds 8080
    port = taken.getsockname()[1]
    try:
        config = mira_config(llm, f"[web]\nport = {port}\n", telegram=telegram)
        async with bot_running(tmp_path, config, MIRA_TELEGRAM_TOKEN=telegram.token) as bot:
            line = await logged(bot, "web.port")
            assert "ERROR" in line and str(port) in line
            await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
            answer = await answer_to(telegram, ANN, telegram.send(telegram.chat(ANN), telegram.user(ANN, "Ann"),
                                                                  "/memory page"))
            assert "not available" in answer.text and "/open/" not in answer.text
    finally:
        taken.close()


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def page_status(port: int) -> int | None:
    """The status of `GET /` on the page (None: nothing answers)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    try:
        writer.write(b"GET / HTTP/1.0\r\nHost: keepsake\r\n\r\n")
        status = await asyncio.wait_for(reader.readline(), 5)
        return int(status.split()[1]) if status else None
    except (OSError, asyncio.TimeoutError):
        return None
    finally:
        writer.close()


async def answering(port: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while (status := await page_status(port)) is None:
        assert time.monotonic() < deadline, "the page does not answer"
        await asyncio.sleep(0.1)
    return status


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # ended, not yet reaped


@pytest.mark.timeout(120)
async def test_the_page_is_a_process_of_its_own_that_answers_while_the_bot_is_busy_and_ends_with_it(
        tmp_path, llm, telegram):
    """SPEC 21 "rendering never stalls the bot's turns" (#67): the page's work is another
    process's — it answers while the bot's own process is frozen (SIGSTOP); one that dies is
    started again; and when the bot is killed outright (SIGKILL) its page process ends too."""
    port = free_port()
    config = mira_config(llm, f"[web]\nport = {port}\n", telegram=telegram)
    async with bot_running(tmp_path, config, MIRA_TELEGRAM_TOKEN=telegram.token) as bot:
        await logged(bot, "the memory page is served")
        [page] = children(bot.pid)
        os.kill(bot.pid, signal.SIGSTOP)
        try:
            assert await answering(port, 10) == 401  # no session: the page's own answer, the bot frozen
        finally:
            os.kill(bot.pid, signal.SIGCONT)

        os.kill(page, signal.SIGKILL)
        assert "ERROR" in await logged(bot, "the memory page's process ended")
        await logged(bot, "the memory page is served")  # started again
        assert await answering(port) == 401
        [again] = children(bot.pid)

        bot.kill()
        await bot.wait()
        deadline = time.monotonic() + 10
        while not gone(again):
            assert time.monotonic() < deadline, "the page process outlived its bot"
            await asyncio.sleep(0.1)
