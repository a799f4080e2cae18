"""A console session typed through a real pseudo-terminal, as a person types it. docs/console.md
must be exactly what the terminal showed (KEEPSAKE_WRITE_TRANSCRIPT=1 writes it again)."""

import asyncio
import os
import pty
import re
import sys
import termios

from tests.conftest import API_KEY_ENV, ROOT
from tests.fakes.llm_server import text, tool_calls

SESSION = [  # (what is typed, what the screen shows when the answer is complete)
    ("hello, I'm Ann", "Tea?\n\n"),
    ("I'm allergic to peanuts, by the way", "for you.\n\n"),
    ("", None),  # an empty Enter is nothing said
    ("/memory view", "to choose)\n\n"),
    ("/press 1", "to choose)\n\n"),
    ("/memory why", "tokens.\n\n"),
    ("/regenerate", "ever.\n\n"),
    ("/quit", None),
]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


async def test_a_console_session_at_a_real_terminal(tmp_path, llm):
    llm.add(text("*Mira looks up from the logbook.* Hello, **Ann**. Tea?"),
            tool_calls(("save_memory", {"content": "Ann is allergic to peanuts"})),
            text("Then no peanut biscuits for you."),
            text("Noted: no peanuts, ever."))
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nbase_url = "{llm.base_url}"\napi_key_env = "{API_KEY_ENV}"\nmax_retries = 0\n\n'
                      f'[storage]\nurl = "sqlite:///keepsake.sqlite3"\n\n[[characters]]\nname = "Mira"\n'
                      f'card = "{ROOT / "characters" / "mira.json"}"\n')
    leader, follower = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--name", "Ann", "--config", str(config),
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), API_KEY_ENV: "sk-test", "TERM": "xterm"},
        stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    loop = asyncio.get_running_loop()
    screen = ""
    arrived = asyncio.Event()

    def readable() -> None:  # the terminal has output for us
        nonlocal screen
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the console closed its end
            loop.remove_reader(leader)
            return
        screen += ANSI.sub("", chunk.decode(errors="replace"))
        arrived.set()

    loop.add_reader(leader, readable)

    async def read_until(marker: str | None, timeout: float = 20) -> None:
        start = len(screen)
        deadline = loop.time() + timeout
        while loop.time() < deadline and (marker is None or marker not in screen[start:]):
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), min(0.5, max(0.01, deadline - loop.time())))
            except asyncio.TimeoutError:
                if marker is None:
                    return

    async def until_reading() -> None:
        """Until readline reads the next line: it takes the terminal out of canonical mode to do so.
        A line typed before that is echoed by the terminal and then by readline again, as on a
        real terminal, and a busy machine makes that gap long enough to type into."""
        deadline = loop.time() + 20
        while termios.tcgetattr(leader)[3] & termios.ICANON and loop.time() < deadline:
            await asyncio.sleep(0.005)

    try:
        await read_until("/quit to leave")
        for typed, shown in SESSION:
            await until_reading()
            os.write(leader, typed.encode() + b"\r")
            await read_until(shown, timeout=20 if shown else 1)
        await asyncio.wait_for(process.wait(), 20)
    finally:
        loop.remove_reader(leader)
        if process.returncode is None:
            process.kill()
        os.close(leader)

    assert process.returncode == 0
    assert "Mira: Mira looks up from the logbook. Hello, Ann. Tea?" in screen  # no markdown markers
    assert "#1 · character · recent — Ann is allergic to peanuts" in screen
    assert "Pinned #1." in screen
    assert "Mira: Noted: no peanuts, ever." in screen
    log_line = next(line for line in screen.splitlines() if "Log lines go to" in line)
    screen = screen.replace(log_line, "(Keepsake) Log lines go to …/keepsake-console.log; --verbose shows them here.")
    page = ("# A console session\n\nTyped through a real pseudo-terminal by "
            "`tests/test_console_transcript.py` (`KEEPSAKE_WRITE_TRANSCRIPT=1 pytest "
            "tests/test_console_transcript.py` writes this page again); the model is the tests' scripted "
            "one.\n\n```text\n$ python -m bot console --character Mira --name Ann --config config.toml\n"
            + screen.strip() + "\n```\n")
    if os.environ.get("KEEPSAKE_WRITE_TRANSCRIPT"):
        (ROOT / "docs" / "console.md").write_text(page)
    assert (ROOT / "docs" / "console.md").read_text() == page, \
        "docs/console.md is not what the console shows now: KEEPSAKE_WRITE_TRANSCRIPT=1 writes it again"
