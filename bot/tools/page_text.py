"""A page's readable text (SPEC 18 `read`), taken out of its HTML by trafilatura (a maintained
extractor) in a child process of its own: the work on what came back is bounded in time and
memory and never runs on the event loop. A page built to be slow to read (150,000 `<p>`, which
took 33.6 s of CPU in process) is given up after EXTRACT_S — the child is killed, the bot's own
memory never grew, and a stop kills it at once (no thread left for the exit to wait on).

`python -m bot.tools.page_text` is the child: the page's bytes on stdin, its text on stdout."""

from __future__ import annotations

import asyncio
import resource
import sys

EXTRACT_S = 5.0  # the most one page's extraction may take
CHILD_MEMORY = 1024 * 1024 * 1024  # the child's address space, at most


class Unreadable(Exception):
    """The page's text could not be taken out within the bounds; the message says why."""


def html_text(html: bytes) -> str:
    """The readable text of an HTML page, by trafilatura ("" when it finds none)."""
    import trafilatura  # in the child only

    return trafilatura.extract(html.decode("utf-8", errors="replace"), include_comments=False,
                               include_tables=True) or ""


async def page_text(html: bytes, seconds: float = EXTRACT_S) -> str:
    """An HTML page's text, from a child process given `seconds`; Unreadable when it takes
    longer or fails. Cancelled (a stop), the child is killed at once."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.tools.page_text", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        async with asyncio.timeout(seconds):
            out, _ = await child.communicate(html)
    except TimeoutError:
        raise Unreadable(f"its text could not be taken out within {seconds:.0f} s") from None
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    if child.returncode != 0:
        raise Unreadable("its text could not be taken out")
    return out.decode("utf-8", errors="replace")


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (int(EXTRACT_S) + 1, int(EXTRACT_S) + 1))
    sys.stdout.buffer.write(html_text(sys.stdin.buffer.read()).encode())


if __name__ == "__main__":
    main()
