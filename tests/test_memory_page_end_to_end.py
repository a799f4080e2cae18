"""SPEC 21 "It holds against the open internet" and "Named, not silent" on the real `python -m
bot` over the Telegram fake, where #60 found them broken: 1,100 half-open connections to the page
under the open-file limit a service runs with (1,024) never stop the bot, and a `[web] port` that
is taken is one ERROR naming it, with `/memory page` saying the page is not available."""

import asyncio
import socket
import time

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
