"""The memory page in a process of its own (SPEC 21 "rendering never stalls the bot's turns").

A bot with `[web]` starts `python -m bot page` beside itself: a process that serves the page
from the same database and does nothing else (the page is read from the database, so any
process serves it). A flood of page views then costs that process its time, not the bot's event
loop or its database connection (bench/page_flood.py).

Its first line on stdout says it listens (`LISTENING`); a port it cannot bind is its own ERROR
naming `web.port`, and then it ends, and the bot's `/memory page` says the page is not
available. It ends when the bot stops, and at once when the bot is gone (its stdin, a pipe
from the bot, closes). One that ends otherwise is started again, after a pause that doubles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import sys
from pathlib import Path

log = logging.getLogger(__name__)

LISTENING = "listening"  # the page process's first line once it listens
STARTING_S = 60.0  # the longest a page process may take to listen (opening the store, its migrations)
STOPPING_S = 10.0  # then it is killed
PAGE_NICENESS = 10  # the page process's priority below the bot's (os.nice): the bot's turns go first
BESIDE_BOT = "--beside-bot"  # `python -m bot page` was started by a bot: it ends when its stdin closes


class PageProcess:
    """`python -m bot page` for the config at `config_path`, its log lines where the bot's go
    (`log_file`, else the bot's stderr)."""

    def __init__(self, config_path: Path, log_level: str, log_file: Path | None = None):
        self.command = [sys.executable, "-m", "bot", "--log-level", log_level, "--config", str(config_path),
                        "page", BESIDE_BOT]
        self.log_file = log_file
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> bool:
        """Start it and wait until it listens: False when it ended first (it said why)."""
        with open(self.log_file, "ab") if self.log_file else contextlib.nullcontext(None) as errors:
            # a session of its own: Ctrl-C in the bot's terminal is the bot's to handle, and it stops the page
            self.process = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=errors,
                start_new_session=True)
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), STARTING_S)
        except asyncio.TimeoutError:
            line = b""
        if line.decode().strip() == LISTENING:
            return True
        await self.stop()
        return False

    async def serve(self, stop: asyncio.Event) -> None:
        """Keep it serving until `stop`; then stop it."""
        pause = 1.0
        try:
            while not stop.is_set():
                assert self.process is not None
                ended = asyncio.ensure_future(self.process.wait())
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait({ended, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if stop.is_set():
                    ended.cancel()
                    return
                log.error("the memory page's process ended (exit status %s); starting it again in %.0f s",
                          self.process.returncode, pause)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
                if not stop.is_set() and await self.start():
                    pause = 1.0
                else:
                    pause = min(pause * 2, 300.0)
        finally:
            await self.stop()

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        assert process.stdin is not None
        process.stdin.close()  # it ends at once
        try:
            await asyncio.wait_for(process.wait(), STOPPING_S)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()


async def until_the_bot_is_gone() -> None:
    """In the page process: return when the bot that started it closes its stdin (it stopped, or
    it is gone) — or, started by hand with something else on stdin, when its parent is gone."""
    if not stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode):
        parent = os.getppid()
        while os.getppid() == parent:
            await asyncio.sleep(1.0)
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()  # everything, until the pipe closes
